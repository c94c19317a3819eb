"""Store: one append-only file of bytes (a segment's ``.log``).

Contract: ``append`` writes the whole buffer with ``os.write`` (no user-space buffer, so a
``kill -9`` right after an acked append loses nothing the kernel has; only a machine crash can,
which is what ``flush`` is for) and returns the position it was written at. ``size`` only grows
after the bytes are in the file, so a reader that snapshots ``size`` never reads a half-written
entry. Readers use ``pread``/``sendfile`` on ``fileno`` and never move a file position.

The descriptor is closed when the Store is garbage collected (or on ``close``) rather than when a
segment is deleted: a Fetch response may still be queued to ``sendfile`` from a deleted segment,
and on POSIX an unlinked file stays readable while a descriptor is open.
"""

from __future__ import annotations

import os
import weakref

from hmbclient.errors import StorageError

__all__ = ["Store"]


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class Store:
    """An append-only file.

    Args:
        path: the file; created if missing.
    Raises:
        StorageError: the file cannot be opened.
    """

    __slots__ = ("path", "_fd", "size", "_finalizer", "__weakref__")

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise StorageError(f"cannot open {path}: {e}") from e
        self.size = os.fstat(self._fd).st_size
        self._finalizer = weakref.finalize(self, _close_fd, self._fd)

    def fileno(self) -> int:
        return self._fd

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; returns the position of its first byte.

        Raises:
            StorageError: the write failed (disk full, I/O error); the store's size is unchanged
                and a partial write is cut off again.
        """
        pos = self.size
        view = memoryview(data)
        try:
            written = 0
            while written < len(view):
                written += os.write(self._fd, view[written:])
        except OSError as e:
            try:
                os.ftruncate(self._fd, pos)
            except OSError:
                pass
            raise StorageError(f"write to {self.path} failed: {e}") from e
        self.size = pos + written
        return pos

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer at the end of the file)."""
        try:
            return os.pread(self._fd, size, position)
        except OSError as e:
            raise StorageError(f"read from {self.path} failed: {e}") from e

    def flush(self) -> None:
        """fsync the data (fdatasync where available)."""
        try:
            if hasattr(os, "fdatasync"):
                os.fdatasync(self._fd)
            else:  # pragma: no cover - macOS
                os.fsync(self._fd)
        except OSError as e:
            raise StorageError(f"flush of {self.path} failed: {e}") from e

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (recovery only)."""
        try:
            os.ftruncate(self._fd, size)
        except OSError as e:
            raise StorageError(f"truncate of {self.path} failed: {e}") from e
        self.size = size

    def mtime_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def delete(self) -> None:
        """Unlink the file; the descriptor stays open for readers until the Store is collected."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"cannot delete {self.path}: {e}") from e

    def close(self) -> None:
        self._finalizer()
