"""Store: one append-only file of bytes (a segment's ``.log``), opened only while it is used.

Contract:
* ``append`` writes the whole buffer with ``os.write`` (no user-space buffer, so a ``kill -9``
  right after an acked append loses nothing the kernel has; only a machine crash can, which is
  what ``flush`` is for) and returns the position it was written at. ``size`` only grows after
  the bytes are in the file, so a reader that snapshots ``size`` never reads a half-written
  entry. Readers use ``pread``/``sendfile`` on a ``FileHandle`` and never move a file position.
* Descriptors are opened lazily, so a broker with many partitions of many segments does not hold
  one descriptor per file (Kafka keeps every segment open and needs a huge ``ulimit -n``):

  - the *writer* (``O_RDWR | O_APPEND``) is opened by ``create``/``append``/``truncate`` and
    stays open until ``seal`` (the segment stopped being the active one) or ``close``; while it
    is open, reads use it too;
  - otherwise a read asks the broker-wide ``HandleCache`` for a read-only handle: an LRU of at
    most ``capacity`` open handles, opened on a miss, evicted least recently used first.

  So the open descriptors of a log directory are: one writer per partition written since start-up
  (the active segments) + at most ``capacity`` read handles + the handles that fetches still
  being sent hold (below).
* A ``FileHandle`` closes its descriptor when the last reference to it goes (a finalizer), never
  when it is evicted or its segment deleted: a ``FileSlice`` (a Fetch response queued for
  ``sendfile``) holds its handle, so eviction, deletion, a compaction rename or a roll never
  pulls a descriptor from under an in-flight send; on POSIX an unlinked file stays readable while
  a descriptor is open. Only ``close`` (log shutdown) drops handles without waiting for readers,
  and even then a queued slice keeps its own handle alive.
* ``retire`` (the segment is being deleted or its file replaced) forbids reopening by path: a
  stale reader whose handle was evicted must not open a *different* file that now has the same
  name (a segment recreated at the same base offset after a truncation, a compaction's rewrite).
  The flag is checked *after* an open, and set before the unlink/rename, so a reader either sees
  the old file or gets ``SegmentGoneError`` (the Log retries on a fresh snapshot).

Invariants: ``size`` is ``None`` internally until first needed for a file found at start-up
(one ``stat``, no open); a Store with a writer knows its size; one writer at a time (the Log's
lock), any number of readers.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

from hmbclient.errors import StorageError

__all__ = ["Store", "FileHandle", "HandleCache", "SegmentGoneError", "DEFAULT_MAX_OPEN_READ_HANDLES"]

# Read handles kept open per log directory: small next to the usual ``ulimit -n`` of 1,024, big
# enough that a few hundred partitions being consumed from old segments do not thrash.
DEFAULT_MAX_OPEN_READ_HANDLES = 256


class SegmentGoneError(StorageError):
    """A read of a segment deleted (or replaced) since the reader took its snapshot."""


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class FileHandle:
    """One open descriptor of a segment file; closed when the last reference goes.

    Attributes:
        path: the file (for messages; the descriptor may outlive the name).
    """

    __slots__ = ("path", "_fd", "_finalizer", "__weakref__")

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self._fd = os.open(path, flags, 0o644)
        self._finalizer = weakref.finalize(self, _close_fd, self._fd)

    def fileno(self) -> int:
        return self._fd

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer at the end of the file)."""
        try:
            return os.pread(self._fd, size, position)
        except OSError as e:
            raise StorageError(f"read from {self.path} failed: {e}") from e

    def close(self) -> None:
        self._finalizer()


class HandleCache:
    """The broker-wide LRU of read-only handles (one per data directory's LogManager).

    Args:
        capacity: most read handles kept open (>= 1). Handles a FileSlice still holds stay
            open past eviction until the slice is gone.
    """

    def __init__(self, capacity: int = DEFAULT_MAX_OPEN_READ_HANDLES) -> None:
        if capacity < 1:
            raise ValueError(f"the read handle cache needs a capacity >= 1, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._open: OrderedDict[Store, FileHandle] = OrderedDict()
        self.opened = 0  # handles opened so far (misses): for tests and benchmarks
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._open)

    def get(self, store: Store) -> FileHandle:
        """The open read handle of ``store`` (opened on a miss).

        Raises:
            SegmentGoneError: the store was retired, or its file is gone.
            StorageError: the file cannot be opened.
        """
        with self._lock:
            h = self._open.get(store)
            if h is not None:
                self._open.move_to_end(store)
                return h
        # Case: a miss. Opened outside the lock (an open is a syscall; readers of cached handles
        # must not wait on it). Two readers missing at once may both open: the second keeps its
        # own handle for this read and the cache keeps the first.
        try:
            h = FileHandle(store.path, os.O_RDONLY)
        except FileNotFoundError:
            raise SegmentGoneError(f"{store.path} was deleted") from None
        except OSError as e:
            raise StorageError(f"cannot open {store.path}: {e}") from e
        if store.retired:
            # Checked after the open: retire happens before the unlink/rename, so a reader that
            # sees the flag clear here opened the store's own file.
            h.close()
            raise SegmentGoneError(f"{store.path} was deleted or replaced")
        with self._lock:
            self.opened += 1
            known = self._open.get(store)
            if known is not None:
                return h
            self._open[store] = h
            while len(self._open) > self.capacity:
                # Case: eviction. Only the cache's reference goes; a slice still holding the
                # handle keeps the descriptor until it is sent. The store's owner may drop what
                # it keeps in memory for reads too (the segment's index): no I/O, so under the lock.
                old, _ = self._open.popitem(last=False)
                self.evicted += 1
                if old.on_evict is not None:
                    old.on_evict()
        return h

    def forget(self, store: Store) -> None:
        """Drop ``store``'s handle (its segment is deleted, replaced or closed)."""
        with self._lock:
            self._open.pop(store, None)

    def clear(self) -> None:
        with self._lock:
            self._open.clear()


class Store:
    """An append-only file, its descriptors opened lazily (see the module docstring).

    Args:
        path: the file.
        cache: where read handles come from.
        create: open the writer now, creating the file if missing (a new segment); otherwise the
            file exists (found at start-up) and nothing is opened until it is used.
        on_evict: called when the cache evicts this store's read handle (cheap, no I/O).
    Raises:
        StorageError: ``create`` and the file cannot be opened.
    """

    __slots__ = ("path", "_cache", "_writer", "_size", "retired", "on_evict", "__weakref__")

    def __init__(self, path: str, cache: HandleCache, *, create: bool = False, on_evict: Callable[[], None] | None = None) -> None:
        self.path = path
        self._cache = cache
        self._writer: FileHandle | None = None
        self._size: int | None = None
        self.retired = False
        self.on_evict = on_evict
        if create:
            self.open_writer()

    # -- state -----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        s = self._size
        if s is None:
            try:
                s = os.stat(self.path).st_size
            except FileNotFoundError:
                raise SegmentGoneError(f"{self.path} was deleted") from None
            except OSError as e:
                raise StorageError(f"cannot stat {self.path}: {e}") from e
            if self.retired:
                raise SegmentGoneError(f"{self.path} was deleted or replaced")
            # Only a file nobody writes is sized by stat (the Log sizes its active segment at
            # start-up, before readers exist), but never overwrite a size a writer has set.
            if self._size is None:
                self._size = s
            else:
                s = self._size
        return s

    @property
    def is_open_for_writes(self) -> bool:
        return self._writer is not None

    def open_writer(self) -> FileHandle:
        """The writer, opened (and the file created) if needed."""
        w = self._writer
        if w is None:
            try:
                w = FileHandle(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
            except OSError as e:
                raise StorageError(f"cannot open {self.path}: {e}") from e
            self._size = os.fstat(w.fileno()).st_size
            self._writer = w
            # Reads go through the writer from now on: a cached read handle would be a second
            # descriptor of the same file.
            self._cache.forget(self)
        return w

    def handle(self) -> FileHandle:
        """A handle to read from (or to put in a FileSlice): the writer when open, otherwise
        the cache's read-only one."""
        w = self._writer
        return w if w is not None else self._cache.get(self)

    def fileno(self) -> int:
        return self.handle().fileno()

    def mtime_ms(self) -> int:
        try:
            w = self._writer
            st = os.fstat(w.fileno()) if w is not None else os.stat(self.path)
        except FileNotFoundError:
            raise SegmentGoneError(f"{self.path} was deleted") from None
        except OSError as e:
            raise StorageError(f"cannot stat {self.path}: {e}") from e
        return int(st.st_mtime * 1000)

    # -- writes ----------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data``; returns the position of its first byte.

        Raises:
            StorageError: the write failed (disk full, I/O error); the store's size is unchanged
                and a partial write is cut off again.
        """
        fd = self.open_writer().fileno()
        pos = self.size
        view = memoryview(data)
        try:
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
        except OSError as e:
            try:
                os.ftruncate(fd, pos)
            except OSError:
                pass
            raise StorageError(f"write to {self.path} failed: {e}") from e
        self._size = pos + written
        return pos

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``position`` (fewer at the end of the file)."""
        return self.handle().read(position, size)

    def flush(self) -> None:
        """fsync the data (fdatasync where available); nothing to do without a writer (a sealed
        segment was flushed when it was sealed)."""
        w = self._writer
        if w is None:
            return
        try:
            if hasattr(os, "fdatasync"):
                os.fdatasync(w.fileno())
            else:  # pragma: no cover - macOS
                os.fsync(w.fileno())
        except OSError as e:
            raise StorageError(f"flush of {self.path} failed: {e}") from e

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (recovery, follower truncation: the store becomes the
        active one, so the writer is opened)."""
        try:
            os.ftruncate(self.open_writer().fileno(), size)
        except OSError as e:
            raise StorageError(f"truncate of {self.path} failed: {e}") from e
        self._size = size

    def seal(self) -> None:
        """No more writes (the segment rolled): drop the writer; later reads use the cache. The
        caller flushed first."""
        self._writer = None

    # -- lifecycle -------------------------------------------------------------------------
    def retire(self) -> None:
        """Forbid reopening by path (see the module docstring); open handles stay usable."""
        self.retired = True
        self._cache.forget(self)

    def delete(self) -> None:
        """Unlink the file; handles still held (in-flight slices) stay readable until dropped.
        Raises StorageError if the file cannot be removed."""
        self.retire()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"cannot delete {self.path}: {e}") from e

    def close(self) -> None:
        """Drop this store's descriptors (log shutdown); a slice still holding one keeps it."""
        self._writer = None
        self._cache.forget(self)
