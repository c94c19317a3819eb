"""OffsetIndex: the sparse ``.index`` of one segment (relative offset -> file position).

File layout (as Kafka's): a sequence of 8-byte entries ``relative_offset:int32 position:int32``,
both increasing. An entry ``(r, p)`` means: the entry at byte ``p`` of the segment's log holds
offsets starting at ``base_offset + r``, so a reader looking for offset ``o >= base + r`` can start
scanning at ``p``. Entries are added per append (never per message), at most one every
``index_interval_bytes`` of log, so the index stays small and lives in memory.

Contract (lazy, as Kafka's ``LazyIndex``): constructing an index does no I/O. The file is read
on first use (``lookup``, ``len``, ``append``, a truncation), then kept in memory until
``unload`` (the Segment's read handle was evicted from the cache); no descriptor stays open. Appends go to memory and reach the file on ``flush`` (the Segment
flushes at roll, on the log's flush policy and at close); the index of the active segment is
rebuilt from the log by recovery after an unclean shutdown anyway, so an unflushed tail is never
needed. A start-up therefore reads no index except the active segment's after a clean shutdown.

Cases when the file is read:
* torn trailing entry (file size not a multiple of 8, a crash mid-write): ignored, and cut from
  the file on the next write;
* entries not increasing, negative, or pointing past the end of the log: the index is corrupt
  (a disk error, a copy gone wrong). With a ``rebuild`` source (the Segment's: a header walk of
  its log) it is rebuilt in memory, with a warning, and written on the next flush, as Kafka
  rebuilds a corrupt index; without one it is a StorageError naming the file;
* missing file: an empty index (it is created with its log, but an empty one carries nothing).

A damaged index whose entries still increase (a position pointing into the middle of an entry)
passes that check; the Segment checks each lookup against the log and calls
``rebuild_in_memory`` when the entry found does not start where the index says.

Invariants: ``_offsets``/``_positions`` increasing; the first ``_persisted`` of them are exactly
the file's whole entries; one writer (the Log's lock); readers see arrays that only grow or are
cut under the writer's lock (a racing read may start its scan earlier, never wrongly later).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable

from hmbclient.errors import StorageError

__all__ = ["OffsetIndex", "INDEX_ENTRY_BYTES"]

INDEX_ENTRY_BYTES = 8
_entry = struct.Struct(">ii")

log = logging.getLogger("hmbclient.broker.log")


class OffsetIndex:
    """In-memory sorted arrays mirrored to an append-only file, loaded on first use.

    Args:
        path: the ``.index`` file.
        base_offset: the segment's base offset (entries store offsets relative to it).
        create: create the (empty) file now (a new segment), so the folder always holds an
            index next to each log.
        log_size: the size of the segment's log (entries must point below it); None: unchecked.
        rebuild: ``(offset, position)`` entries built from the log, used when the file is
            corrupt; None: a corrupt file is a StorageError.
    Raises:
        StorageError: ``create`` and the file cannot be created. Reading a corrupt file without
            ``rebuild`` raises from the first method that needs the entries.
    """

    __slots__ = ("path", "base_offset", "_offsets", "_positions", "_persisted", "_file_entries", "_loaded", "_load_lock", "_log_size", "_rebuild")

    def __init__(
        self,
        path: str,
        base_offset: int,
        *,
        create: bool = False,
        log_size: Callable[[], int] | None = None,
        rebuild: Callable[[], list[tuple[int, int]]] | None = None,
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self._log_size = log_size
        self._rebuild = rebuild
        self._offsets = array("q")
        self._positions = array("q")
        self._persisted = 0  # entries known to be in the file
        self._file_entries = 0  # whole entries the file holds (may exceed _persisted after a cut)
        self._loaded = create
        # Held by loads, unloads and the writer's changes (an eviction may unload from a
        # reader's thread while the writer works); lookups take no lock.
        self._load_lock = threading.RLock()
        if create:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as e:
                raise StorageError(f"cannot create index {path}: {e}") from e
            os.close(fd)

    def _load(self) -> None:
        # Two readers may need it at once (the writer holds the Log's lock, readers none).
        with self._load_lock:
            if self._loaded:
                return
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            except OSError as e:
                raise StorageError(f"cannot read index {self.path}: {e}") from e
            whole = len(data) - len(data) % INDEX_ENTRY_BYTES
            offsets, positions = array("q"), array("q")
            base = self.base_offset
            last_r = last_p = -1
            bad = None
            for r, p in _entry.iter_unpack(memoryview(data)[:whole]):
                if r < last_r or p < last_p or r < 0 or p < 0:
                    bad = f"not increasing at relative offset {r}, position {p}"
                    break
                offsets.append(base + r)
                positions.append(p)
                last_r, last_p = r, p
            if bad is None and positions and self._log_size is not None and positions[-1] >= self._log_size():
                bad = f"entry at position {positions[-1]} is past the end of the log"
            if bad is not None:
                # Case: a corrupt index.
                if self._rebuild is None:
                    raise StorageError(f"index {self.path} is {bad}")
                log.warning("index %s is %s: rebuilding it from the log", self.path, bad)
                offsets, positions = array("q"), array("q")
                for o, p in self._rebuild():
                    offsets.append(o)
                    positions.append(p)
                self._offsets, self._positions = offsets, positions
                self._persisted, self._file_entries = 0, -1  # the next flush rewrites the file
            else:
                self._offsets, self._positions = offsets, positions
                self._persisted = len(offsets)
                # Case: a torn tail. Cut on the next write (a read needs nothing written).
                self._file_entries = -1 if whole != len(data) else len(offsets)
            self._loaded = True

    @property
    def loaded(self) -> bool:
        return self._loaded

    def __len__(self) -> int:
        if not self._loaded:
            self._load()
        return len(self._offsets)

    def append(self, offset: int, position: int) -> None:
        """Add an entry (in memory until ``flush``); callers append in increasing order."""
        with self._load_lock:
            if not self._loaded:
                self._load()
            if self._offsets and (offset < self._offsets[-1] or position <= self._positions[-1]):
                return
            self._offsets.append(offset)
            self._positions.append(position)

    def last_position(self) -> int:
        """Position of the last entry (0 when empty)."""
        if not self._loaded:
            self._load()
        return self._positions[-1] if self._positions else 0

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or before ``offset``; (base, 0) if none."""
        if not self._loaded:
            self._load()
        offsets, positions = self._offsets, self._positions
        i = bisect_right(offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        try:
            return offsets[i], positions[i]
        except IndexError:
            # A truncation cut the arrays between the bisect and here: start from the top
            # (the reader then finds what is left, or less than it asked for, as documented).
            return self.base_offset, 0

    def rebuild_in_memory(self, why: str) -> None:
        """Replace the entries with ones rebuilt from the log (a damaged index found at a
        lookup); the file is rewritten on the next ``flush`` (a sealed segment's stays as it
        is: the next load checks it again).

        Raises:
            StorageError: no rebuild function was given.
        """
        if self._rebuild is None:
            raise StorageError(f"index {self.path}: {why}")
        with self._load_lock:
            log.warning("index %s: %s: rebuilding it from the log", self.path, why)
            offsets, positions = array("q"), array("q")
            for o, p in self._rebuild():
                offsets.append(o)
                positions.append(p)
            self._offsets, self._positions = offsets, positions
            self._persisted, self._file_entries = 0, -1
            self._loaded = True

    def unload(self) -> None:
        """Forget the entries if the file holds them all (a sealed segment's index whose log
        handle was evicted): the next use reads the file again. This is what bounds the memory
        of indexes along with the read handles. A lookup racing with it sees the empty arrays
        and scans from the start of the segment: slower, never wrong."""
        with self._load_lock:
            if self._loaded and self._persisted == len(self._offsets) == self._file_entries:
                self._loaded = False
                self._offsets, self._positions = array("q"), array("q")
                self._persisted = self._file_entries = 0

    def truncate_to_position(self, valid_bytes: int) -> None:
        """Drop entries that point at or past ``valid_bytes`` of the log (recovery, truncation);
        the file follows on the next ``flush``."""
        with self._load_lock:
            if not self._loaded:
                self._load()
            n = len(self._positions)
            keep = n
            while keep and self._positions[keep - 1] >= valid_bytes:
                keep -= 1
            if keep != n:
                del self._offsets[keep:]
                del self._positions[keep:]
                self._persisted = min(self._persisted, keep)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        with self._load_lock:
            self._offsets, self._positions = array("q"), array("q")
            self._persisted = 0
            self._loaded = True
            self._file_entries = -1  # whatever is in the file goes on the next flush

    def flush(self) -> None:
        """Bring the file in line with memory (cut what was truncated, append what is new) and
        fsync it; nothing to do when nothing changed or the index was never loaded. Not under
        the lock (an fsync must not hold up an evicting reader): ``unload`` leaves an index
        with unflushed entries alone, so it never races with a flush that has work to do."""
        if not self._loaded:
            return
        n = len(self._offsets)
        if self._persisted == n and self._file_entries == n:
            return
        keep = self._persisted
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                if self._file_entries != keep:
                    os.ftruncate(fd, keep * INDEX_ENTRY_BYTES)
                if n > keep:
                    base = self.base_offset
                    buf = bytearray(INDEX_ENTRY_BYTES * (n - keep))
                    for j, i in enumerate(range(keep, n)):
                        _entry.pack_into(buf, j * INDEX_ENTRY_BYTES, self._offsets[i] - base, self._positions[i])
                    os.pwrite(fd, buf, keep * INDEX_ENTRY_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise StorageError(f"index flush {self.path} failed: {e}") from e
        self._persisted = self._file_entries = n

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Nothing stays open (kept for symmetry with the log's Store)."""
