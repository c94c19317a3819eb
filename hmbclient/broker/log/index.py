"""OffsetIndex: the sparse ``.index`` of one segment (relative offset -> file position).

File layout (as Kafka's): a sequence of 8-byte entries ``relative_offset:int32 position:int32``,
both increasing. An entry ``(r, p)`` means: the entry at byte ``p`` of the segment's log holds
offsets starting at ``base_offset + r``, so a reader looking for offset ``o >= base + r`` can start
scanning at ``p``. Entries are added per append (never per message), at most one every
``index_interval_bytes`` of log, so the index stays small and lives in memory too.

Recovery: a torn trailing entry (file size not a multiple of 8) or entries pointing past the
valid end of the log are cut off; the newest segment's index is rebuilt from the log itself.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right

from hmbclient.errors import StorageError

__all__ = ["OffsetIndex", "INDEX_ENTRY_BYTES"]

INDEX_ENTRY_BYTES = 8
_entry = struct.Struct(">ii")


class OffsetIndex:
    """In-memory sorted arrays mirrored to an append-only file.

    Args:
        path: the ``.index`` file; created if missing.
        base_offset: the segment's base offset (entries store offsets relative to it).
    Raises:
        StorageError: unreadable file, or entries that are not increasing.
    """

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._offsets = array("q")
        self._positions = array("q")
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            size = os.fstat(self._fd).st_size
            data = os.pread(self._fd, size, 0) if size else b""
        except OSError as e:
            raise StorageError(f"cannot open index {path}: {e}") from e
        whole = size - size % INDEX_ENTRY_BYTES
        if whole != size:
            # A torn write of the last entry (crash mid-append): drop it.
            os.ftruncate(self._fd, whole)
        last_r = last_p = -1
        for r, p in _entry.iter_unpack(data[:whole]):
            if r < last_r or p < last_p or r < 0 or p < 0:
                raise StorageError(f"index {path} is not increasing at relative offset {r}, position {p}")
            self._offsets.append(base_offset + r)
            self._positions.append(p)
            last_r, last_p = r, p

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; callers append in increasing order (one writer per log)."""
        rel = offset - self.base_offset
        if self._offsets and (offset < self._offsets[-1] or position <= self._positions[-1]):
            return
        try:
            os.write(self._fd, _entry.pack(rel, position))
        except OSError as e:
            raise StorageError(f"index write {self.path} failed: {e}") from e
        self._offsets.append(offset)
        self._positions.append(position)

    def last_position(self) -> int:
        """Position of the last entry (0 when empty)."""
        return self._positions[-1] if self._positions else 0

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``; (base, 0) if none."""
        i = bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def truncate_to_position(self, valid_bytes: int) -> None:
        """Drop entries that point at or past ``valid_bytes`` of the log (recovery, truncation)."""
        n = len(self._positions)
        keep = n
        while keep and self._positions[keep - 1] >= valid_bytes:
            keep -= 1
        if keep != n:
            del self._offsets[keep:]
            del self._positions[keep:]
            try:
                os.ftruncate(self._fd, keep * INDEX_ENTRY_BYTES)
            except OSError as e:
                raise StorageError(f"index truncate {self.path} failed: {e}") from e

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        del self._offsets[:]
        del self._positions[:]
        os.ftruncate(self._fd, 0)

    def flush(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as e:
            raise StorageError(f"index flush {self.path} failed: {e}") from e

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
