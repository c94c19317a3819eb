"""Segment: one ``<20-digit base offset>.log`` Store plus its sparse ``.index``.

Entry layout shared by every stored format (MessageSet v0/v1 message or RecordBatch v2)::

    offset:int64  size:int32  | v0/v1: crc:uint32 magic:int8 attributes:int8 [timestamp:int64]
                              | v2:    leader_epoch:int32 magic:int8 crc:uint32 attributes:int16
                              |        last_offset_delta:int32 first_ts:int64 max_ts:int64 ...

``magic`` is always at byte 16, so one header walker serves all formats: the last offset of an
entry is ``offset`` for v0/v1 (a compressed wrapper carries its last inner offset) and
``offset + last_offset_delta`` for v2. The walker reads headers only (pread in 64 KiB chunks),
never payloads, so locating an offset costs one index bisect plus at most
``index_interval_bytes`` of headers (or one append's worth).

Invariants: ``next_offset`` is one past the last offset stored (``base_offset`` when empty);
entries are whole (recovery cuts a torn or corrupt tail, truncation cuts at an entry boundary);
one writer at a time (the Log's lock), any number of readers. A read may be limited to the bytes
before an ``end`` position (the Log's high watermark cut), which is always an entry boundary.

Lazy opening (see ``Store`` and ``OffsetIndex``): a segment found at start-up holds only its base
offset, paths and, once asked, its size; its log is opened on the first read through the
broker-wide ``HandleCache`` (bounded, least recently used evicted) and its index is read on the
first lookup; an eviction also drops the index from memory, so memory for indexes is bounded
with the handles. The active segment holds its log's writer from its first write (or creation)
until ``seal`` (a roll), which flushes the log and the index and drops the writer. A
``FileSlice`` holds the handle it was cut from, so an eviction never closes the descriptor of a
send in flight.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from hmbclient.broker.log.index import OffsetIndex
from hmbclient.broker.log.store import FileHandle, HandleCache, Store
from hmbclient.errors import StorageError
from hmbclient.protocol.records import Entry

__all__ = ["Segment", "EntryHeader", "FileSlice", "segment_file_name", "walk_headers", "LOG_SUFFIX", "INDEX_SUFFIX"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_off_size = struct.Struct(">qi")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
# offset(8) size(4) leader_epoch(4) magic(1) crc(4) attributes(2) last_offset_delta(4)
# first_timestamp(8) max_timestamp(8) = 43 bytes: the most any format needs for the walker.
_V2_HEADER = struct.calcsize(">qiibIhiqq")
_V2_LAST_DELTA = struct.calcsize(">qiibIh")
_V2_MAX_TS = struct.calcsize(">qiibIhiq")
# offset(8) size(4) crc(4) magic(1) attributes(1) then the v1 timestamp.
_V1_TS = struct.calcsize(">qiIbb")
_MIN_ENTRY = struct.calcsize(">qiIbbii")  # a v0 message with null key and value
_WALK_CHUNK = 64 * 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class EntryHeader(NamedTuple):
    position: int
    size: int  # whole entry, 12-byte offset/size prefix included
    magic: int
    last_offset: int
    max_timestamp: int


class FileSlice:
    """``length`` bytes of a segment file from ``position``: a Records value the network layer
    sends with ``os.sendfile``. Holds the open handle (``store``: ``path``, ``fileno``, ``read``)
    so the descriptor outlives an eviction from the handle cache and a segment deletion."""

    __slots__ = ("store", "position", "length")

    def __init__(self, store: FileHandle, position: int, length: int) -> None:
        self.store = store
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.store.fileno()

    def read(self) -> bytes:
        """The bytes themselves (for down-conversion, tests, or a transport without sendfile)."""
        data = self.store.read(self.position, self.length)
        if len(data) != self.length:
            raise StorageError(f"{self.store.path}: short read at {self.position}")
        return data

    def __repr__(self) -> str:
        return f"FileSlice({self.store.path!r}, {self.position}, {self.length})"


def walk_headers(store: Store | FileHandle, start: int, end: int) -> Iterator[EntryHeader]:
    """Yield the headers of the whole entries in ``[start, end)``; stops at a partial entry or a
    size field that cannot be right (the caller decides whether that is corruption)."""
    pos = start
    while pos + 12 <= end:
        buf = store.read(pos, min(_WALK_CHUNK, end - pos))
        n = len(buf)
        i = 0
        while i + 12 <= n:
            offset, size = _off_size.unpack_from(buf, i)
            total = 12 + size
            if total < _MIN_ENTRY or pos + i + total > end:
                return
            need = _V2_HEADER if total >= _V2_HEADER else total
            if i + need > n:
                break
            magic = buf[i + 16]
            if magic >= 2:
                last = offset + _i32.unpack_from(buf, i + _V2_LAST_DELTA)[0]
                max_ts = _i64.unpack_from(buf, i + _V2_MAX_TS)[0]
            elif magic == 1:
                last = offset
                max_ts = _i64.unpack_from(buf, i + _V1_TS)[0]
            else:
                last = offset
                max_ts = -1
            yield EntryHeader(pos + i, total, magic, last, max_ts)
            i += total
        if i == 0:
            return
        pos += i


class Segment:
    """One segment of a partition log.

    Args:
        directory: the partition folder.
        base_offset: first offset this segment may hold (its file name).
        index_interval_bytes: bytes of appends between sparse index entries.
        cache: the broker-wide cache read handles come from.
        create: a new segment: create both files and open the writer now. Otherwise the files
            exist (start-up) and nothing is opened or read until needed.
    """

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int, cache: HandleCache, *, create: bool = False) -> None:
        self.base_offset = base_offset
        self.log_path = os.path.join(directory, segment_file_name(base_offset, LOG_SUFFIX))
        self.index_path = os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX))
        self.store = Store(self.log_path, cache, create=create)
        self.index = OffsetIndex(
            self.index_path, base_offset, create=create, log_size=lambda: self.store.size, rebuild=self._index_entries_from_log
        )
        # The index leaves memory with the log's read handle. A store is cached only while it
        # has no writer, and ``unload`` keeps an index with unflushed entries, so an index the
        # writer still changes is never dropped.
        self.store.on_evict = self.index.unload
        self.index_interval_bytes = index_interval_bytes
        self._bytes_since_index = 0
        self.next_offset = base_offset
        # None = not known yet (an older segment after a restart): computed by a header walk
        # the first time a fetch or a timestamp lookup needs it.
        self._max_magic: int | None = None
        self._max_timestamp: int | None = None

    # -- state -----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.store.size

    def _scan_meta(self) -> None:
        mm, mt = -1, -1
        size = self.store.size
        for h in walk_headers(self.store.handle(), 0, size):
            if h.magic > mm:
                mm = h.magic
            if h.max_timestamp > mt:
                mt = h.max_timestamp
        self._max_magic, self._max_timestamp = mm, mt

    @property
    def max_magic(self) -> int:
        """Highest message format stored here (-1 when empty)."""
        if self._max_magic is None:
            self._scan_meta()
        assert self._max_magic is not None
        return self._max_magic

    @property
    def max_timestamp(self) -> int:
        if self._max_timestamp is None:
            self._scan_meta()
        assert self._max_timestamp is not None
        return self._max_timestamp

    def mtime_ms(self) -> int:
        return self.store.mtime_ms()

    # -- writes ----------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview, first_offset: int, last_offset: int, max_timestamp: int, magic: int) -> int:
        """Append whole entries holding ``first_offset..last_offset``; returns their position.
        The index entry is added once the bytes are written: a write that fails (a full disk)
        leaves no index entry pointing past the log."""
        pos = self.store.append(data)
        if self._bytes_since_index >= self.index_interval_bytes:
            self.index.append(first_offset, pos)
            self._bytes_since_index = 0
        self._bytes_since_index += len(data)
        self.next_offset = last_offset + 1
        if self._max_magic is not None and magic > self._max_magic:
            self._max_magic = magic
        if self._max_timestamp is not None and max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
        return pos

    def append_entries(self, data: bytes | bytearray | memoryview, entries: Sequence[Entry], data_start: int) -> int:
        """Append validated whole entries as they are (a follower's fetched bytes): ``data`` is
        exactly ``entries``, whose positions count from ``data_start``. Index entries are added
        per entry every ``index_interval_bytes``, as recovery would build them, and only after
        the bytes are written (an index entry never points past the log). Returns the position
        the data was written at."""
        base = self.store.size
        marks: list[tuple[int, int]] = []
        since = self._bytes_since_index
        mm, mt = -1, -1
        for e in entries:
            if since >= self.index_interval_bytes:
                marks.append((e.base_offset, base + e.position - data_start))
                since = 0
            since += e.size
            if e.magic > mm:
                mm = e.magic
            if e.max_timestamp > mt:
                mt = e.max_timestamp
        pos = self.store.append(data)
        for offset, position in marks:
            self.index.append(offset, position)
        self._bytes_since_index = since
        self.next_offset = entries[-1].last_offset + 1
        if self._max_magic is not None and mm > self._max_magic:
            self._max_magic = mm
        if self._max_timestamp is not None and mt > self._max_timestamp:
            self._max_timestamp = mt
        return pos

    def cut_point(self, offset: int) -> tuple[int, int]:
        """Where truncating to ``offset`` cuts this segment: ``(position, next_offset)``, the
        position of the first entry holding an offset >= ``offset`` (an entry straddling
        ``offset`` goes whole) and one past the last offset kept before it. ``(size,
        next_offset)`` if nothing here is at or after ``offset``."""
        size = self.store.size
        fh = self.store.handle()
        index_offset, start = self._lookup(fh, offset)
        cut = -1
        prev_last: int | None = None
        for h in walk_headers(fh, start, size):
            if h.last_offset >= offset:
                cut = h.position
                break
            prev_last = h.last_offset
        if cut < 0:
            return size, self.next_offset
        if prev_last is None and cut > 0:
            # The cut entry is the one the index pointed at: the entry before it lies between
            # the previous index entry and here.
            _, back = self.index.lookup(index_offset - 1)
            for h in walk_headers(fh, back, cut):
                prev_last = h.last_offset
        return cut, (self.base_offset if prev_last is None else prev_last + 1)

    def truncate_to(self, position: int, next_offset: int) -> None:
        """Cut the file at ``position`` (an entry boundary from ``cut_point``), drop the index
        entries at or past it, and recompute next_offset/max_magic/max_timestamp from what is
        left. The file is fsynced: a machine crash must not bring the cut tail back."""
        self.store.truncate(position)
        self.index.truncate_to_position(position)
        self.next_offset = max(next_offset, self.base_offset)
        self._bytes_since_index = position - self.index.last_position()
        if position == 0:
            self.mark_known_empty()
        else:
            self._scan_meta()
        self.flush()

    def load_next_offset(self) -> bool:
        """Set next_offset from the log after a clean shutdown, without a CRC scan (Kafka's
        ``readNextOffset``): walk the headers from the last index entry to the end of the file.
        Returns False if that walk does not end exactly at the end of the file, or the last index
        entry points at the end of a non-empty file (an entry is indexed as it is written, so it
        never does): not what a clean shutdown leaves, the caller recovers the segment instead."""
        size = self.store.size
        start = self.index.last_position()
        last: EntryHeader | None = None
        for h in walk_headers(self.store, start, size):
            last = h
        if last is None:
            # Case: nothing after the last index entry. Only an empty file is clean.
            if size:
                return False
            self.next_offset = self.base_offset
            self.mark_known_empty()
        elif last.position + last.size != size:
            return False
        else:
            self.next_offset = max(last.last_offset + 1, self.base_offset)
        self._bytes_since_index = size - start
        return True

    def _index_entries_from_log(self) -> list[tuple[int, int]]:
        """Index entries for a corrupt index, from a header walk: one every
        ``index_interval_bytes`` as appends add them. An entry is indexed under its last offset
        (the header does not hold a compressed wrapper's first one): a lookup may then start
        one index entry earlier than it could, never later."""
        out: list[tuple[int, int]] = []
        since = 0
        for h in walk_headers(self.store, 0, self.store.size):
            if since >= self.index_interval_bytes:
                out.append((h.last_offset, h.position))
                since = 0
            since += h.size
        return out

    def mark_known_empty(self) -> None:
        self._max_magic = -1
        self._max_timestamp = -1

    def recover(self, entries: list, valid_bytes: int) -> int:
        """Adopt the result of a CRC scan of this (newest) segment: cut the file at
        ``valid_bytes``, rebuild the index, set next_offset/max_magic/max_timestamp.
        Returns the number of bytes cut."""
        cut = self.store.size - valid_bytes
        if cut:
            self.store.truncate(valid_bytes)
        self.index.reset()
        mm, mt = -1, -1
        since = 0
        next_offset = self.base_offset
        for e in entries:
            if since >= self.index_interval_bytes:
                self.index.append(e.base_offset, e.position)
                since = 0
            since += e.size
            next_offset = e.last_offset + 1
            if e.magic > mm:
                mm = e.magic
            if e.max_timestamp > mt:
                mt = e.max_timestamp
        self._bytes_since_index = since
        self.next_offset = max(next_offset, self.base_offset)
        self._max_magic, self._max_timestamp = mm, mt
        return cut

    def flush(self) -> None:
        self.store.flush()
        self.index.flush()

    def seal(self) -> None:
        """This segment stops being the active one (a roll): flush both files and drop the
        writer; later reads open the log through the handle cache."""
        self.flush()
        self.store.seal()

    # -- reads -----------------------------------------------------------------------------
    def _lookup(self, fh: Store | FileHandle, offset: int) -> tuple[int, int]:
        """``index.lookup`` checked against the log: the entry at the position found must
        start at or before the indexed offset (an appended entry is indexed under its first
        offset, a rebuilt one under its last), within this segment, with a size that fits.
        Case: it does not (a damaged index whose entries still increase, which the load-time
        check cannot see): the index is rebuilt from the log, with a warning, and asked again."""
        indexed, pos = self.index.lookup(offset)
        if pos == 0:
            return indexed, pos
        head = fh.read(pos, 12)
        if len(head) == 12:
            entry_offset, size = _off_size.unpack(head)
            if self.base_offset <= entry_offset <= indexed and _MIN_ENTRY <= 12 + size <= self.store.size - pos:
                return indexed, pos
        self.index.rebuild_in_memory(f"entry ({indexed}, {pos}) does not point at an entry starting there")
        return self.index.lookup(offset)

    def locate(self, offset: int, end: int) -> EntryHeader | None:
        """Header of the first entry in ``[0, end)`` whose last offset is >= ``offset``."""
        fh = self.store.handle()
        _, pos = self._lookup(fh, offset)
        for h in walk_headers(fh, pos, end):
            if h.last_offset >= offset:
                return h
        return None

    def read(self, offset: int, max_bytes: int, *, min_one_entry: bool, end: int | None = None) -> FileSlice | None:
        """Bytes from the entry holding ``offset``: at most ``max_bytes`` (so possibly ending in a
        partial entry, as Kafka's reads do), or the whole first entry if ``min_one_entry`` and it
        is bigger. Nothing at or past position ``end`` (an entry boundary) is returned. None if
        this segment holds nothing at or after ``offset`` (before ``end``)."""
        size = self.store.size
        end = size if end is None or end > size else end
        # One handle for the walk and the slice: the bytes sent are the bytes located, whatever
        # the cache evicts meanwhile.
        fh = self.store.handle()
        _, pos = self._lookup(fh, offset)
        for h in walk_headers(fh, pos, end):
            if h.last_offset >= offset:
                break
        else:
            return None
        length = min(max_bytes, end - h.position)
        if min_one_entry and length < h.size:
            length = h.size
        if length <= 0:
            return None
        return FileSlice(fh, h.position, length)

    def find_timestamp(self, timestamp: int) -> EntryHeader | None:
        """First entry whose max timestamp is >= ``timestamp``."""
        for h in walk_headers(self.store.handle(), 0, self.store.size):
            if h.max_timestamp >= timestamp:
                return h
        return None

    # -- lifecycle -------------------------------------------------------------------------
    def delete(self) -> None:
        # Retired first: from here no reader reopens either file by name.
        self.store.retire()
        self.index.delete()
        self.store.delete()

    def close(self) -> None:
        self.index.close()
        self.store.close()

    def __repr__(self) -> str:
        return f"Segment({self.log_path!r}, next_offset={self.next_offset}, size={self.size})"
