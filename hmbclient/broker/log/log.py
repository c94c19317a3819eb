"""Log: the segments of one topic-partition, append at the end, read anywhere.

Contract:
* ``append(buf)`` takes the bytes a producer sent (MessageSet v0/v1 or RecordBatch v2), lets
  ``records.assign_offsets`` validate them per batch (CRC, size) and stamp broker offsets, and
  writes the result untouched otherwise; it returns an ``AppendInfo``. Nothing is written when
  validation fails.
* ``read(offset, max_bytes)`` returns a ``FileSlice`` of one segment (sent with sendfile) or
  None at the log end; OffsetOutOfRangeError outside ``[log_start_offset, log_end_offset]``.
* Segments roll before an append would take the active one past ``segment_bytes``; the folder
  holds ``<base offset:020d>.log`` + ``.index`` pairs and nothing else.
* Start-up: every file name is checked (a malformed name or an index without its log is a
  StorageError: we refuse to guess); the newest segment is CRC-scanned and cut at the first
  invalid entry (a torn write or garbage from a crash); older segments are trusted as Kafka does.

Concurrency: one lock serialises writers (append, roll, retention, flush). Readers take no lock:
they bisect ``_segments``, an immutable tuple that writers replace whole (copy-on-write), and a
segment's size only grows after its bytes are in the file.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
import time
from bisect import bisect_right
from typing import Any, NamedTuple

from crc32c import crc32c

from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, FileSlice, Segment
from hmbclient.errors import (
    CorruptRecordError,
    ErrorCode,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    ProtocolError,
    StorageError,
    for_code,
)
from hmbclient.protocol import records
from hmbclient.protocol.records import v2 as _v2

__all__ = ["Log", "AppendInfo"]

log = logging.getLogger("hmbclient.broker.log")

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index)$")
_CLEANED_SUFFIX = ".cleaned"
_RECOVERY_CHUNK = 8 * 1024 * 1024
_RecordListTooLarge = for_code(ErrorCode.RECORD_LIST_TOO_LARGE)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    num_records: int
    max_timestamp: int
    magic: int
    size: int


def _now_ms() -> int:
    return int(time.time() * 1000)


_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_V2_MAGIC_AT = 16
_V2_LAST_DELTA_AT = struct.calcsize(">qiibIh")  # 23
_V2_MAX_TS_AT = struct.calcsize(">qiibIhiq")  # 35
_V2_COUNT_AT = struct.calcsize(">qiibIhiqqqhi")  # 57


def _assign_offsets_v2(buf: Any, next_offset: int, max_message_bytes: int) -> tuple[bytearray, int, int, int, int] | None:
    """Per-batch validation and offset stamping of a payload made only of v2 RecordBatches
    (what every modern producer sends); None if any entry is another format, which then goes
    through ``records.assign_offsets``.

    Why not always ``records.assign_offsets``: it also decodes every record of every batch,
    which is most of the broker's CPU on the produce path. The batch CRC-32C (computed in C)
    covers attributes, offsets deltas, timestamps, producer fields, the record count and every
    record byte, so corruption between producer and log is caught here per batch; the checks on
    the header are the same ones. Raises as ``records.assign_offsets`` does.
    """
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes | bytearray) else memoryview(buf)
    n = len(mv)
    pos = 0
    spans: list[int] = []
    count = 0
    max_ts = -1
    while pos < n:
        if pos + _v2.RECORDS_OFFSET > n:
            if pos + 17 <= n and mv[pos + _V2_MAGIC_AT] != 2:
                return None
            raise CorruptRecordError(f"truncated entry at {pos}")
        if mv[pos + _V2_MAGIC_AT] != 2:
            return None
        size = _i32.unpack_from(mv, pos + 8)[0]
        if size < _v2.MIN_SIZE:
            raise CorruptRecordError(f"record batch at {pos}: length {size} is too small")
        end = pos + 12 + size
        if end > n:
            raise CorruptRecordError(f"partial entry at {pos}: {end - n} bytes missing")
        if end - pos > max_message_bytes:
            raise MessageSizeTooLargeError(f"entry of {end - pos} bytes is over max.message.bytes={max_message_bytes}")
        if crc32c(mv[pos + _v2.ATTRIBUTES_OFFSET : end]) != struct.unpack_from(">I", mv, pos + _v2.CRC_OFFSET)[0]:
            raise CorruptRecordError(f"record batch at {pos}: CRC mismatch")
        k = _i32.unpack_from(mv, pos + _V2_COUNT_AT)[0]
        if k <= 0 or _i32.unpack_from(mv, pos + _V2_LAST_DELTA_AT)[0] != k - 1:
            raise CorruptRecordError(f"record batch at {pos}: {k} records but lastOffsetDelta disagrees")
        if k * _v2.MIN_RECORD_SIZE > size - (_v2.RECORDS_OFFSET - 12) and not mv[pos + _v2.ATTRIBUTES_OFFSET + 1] & 0x07:
            raise CorruptRecordError(f"record batch at {pos}: {k} records cannot fit in {size} bytes")
        ts = _i64.unpack_from(mv, pos + _V2_MAX_TS_AT)[0]
        if ts > max_ts:
            max_ts = ts
        spans.append(pos)
        spans.append(k)
        count += k
        pos = end
    out = bytearray(mv)
    off = next_offset
    pack = _i64.pack_into
    for i in range(0, len(spans), 2):
        pack(out, spans[i], off)
        off += spans[i + 1]
    return out, count, next_offset + count - 1, max_ts, 2 if count else -1


class Log:
    """One partition's log in ``directory`` (created if missing).

    Args:
        directory: the partition folder (``<log_dir>/<topic>-<partition>``).
        config: roll/flush/retention settings.
    Raises:
        StorageError: a malformed segment file name, an index without its log, or I/O failure.
    """

    def __init__(self, directory: str, config: LogConfig) -> None:
        self.directory = directory
        self.config = config
        self._lock = threading.Lock()
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()
        self.recovered_bytes_cut = 0
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create log folder {directory}: {e}") from e
        self._segments: tuple[Segment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._load()

    # -- start-up --------------------------------------------------------------------------
    def _load(self) -> None:
        logs: set[int] = set()
        indexes: set[int] = set()
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(LOG_SUFFIX + _CLEANED_SUFFIX) and _SEGMENT_FILE.match(name[: -len(_CLEANED_SUFFIX)]):
                # A compaction rewrite that never reached its rename: the original is intact.
                log.warning("%s: removing unfinished compaction output %s", self.directory, name)
                os.unlink(os.path.join(self.directory, name))
                continue
            m = _SEGMENT_FILE.match(name)
            if m is None:
                raise StorageError(
                    f"{self.directory}: unexpected file {name!r} (segment files are "
                    f"<20-digit base offset>{LOG_SUFFIX} and {INDEX_SUFFIX})"
                )
            (logs if m.group(2) == "log" else indexes).add(int(m.group(1)))
        orphans = indexes - logs
        if orphans:
            names = ", ".join(f"{b:020d}{INDEX_SUFFIX}" for b in sorted(orphans))
            raise StorageError(f"{self.directory}: index without its log: {names}")
        bases = sorted(logs)
        if not bases:
            seg = Segment(self.directory, 0, self.config.index_interval_bytes)
            seg.mark_known_empty()
            self._set_segments((seg,))
            return
        segs = [Segment(self.directory, b, self.config.index_interval_bytes) for b in bases]
        for seg, nxt in zip(segs, segs[1:], strict=False):
            seg.next_offset = nxt.base_offset
        self._recover(segs[-1])
        if segs[-1].next_offset < segs[-1].base_offset:
            raise StorageError(f"{segs[-1].log_path}: next offset below base offset")
        self._set_segments(tuple(segs))

    def _recover(self, seg: Segment) -> None:
        size = seg.store.size
        pos = 0
        chunk = _RECOVERY_CHUNK
        entries: list = []
        expect = seg.base_offset
        while pos < size:
            buf = seg.store.read(pos, min(chunk, size - pos))
            try:
                found, valid = records.scan_entries(buf, verify_crc=True)
            except (CorruptRecordError, ProtocolError):
                found, valid = [], 0
            for e in found:
                # An entry whose offsets go backwards is garbage that happens to pass the CRC.
                if e.base_offset < expect and e.last_offset < expect:
                    valid = e.position
                    break
                entries.append(e._replace(position=e.position + pos))
                expect = e.last_offset + 1
            else:
                pos += valid
                if valid == len(buf):
                    chunk = _RECOVERY_CHUNK
                    continue
                # Stopped inside this chunk: an entry straddling the chunk end (read more),
                # or the first bad entry (cut here).
                head = seg.store.read(pos, 12)
                if len(head) == 12:
                    n = int.from_bytes(head[8:12], "big", signed=True)
                    if n > 0 and pos + 12 + n <= size and 12 + n > len(buf) - valid:
                        chunk = max(_RECOVERY_CHUNK, 12 + n)
                        continue
                break
            pos += valid
            break
        cut = seg.recover(entries, pos)
        self.recovered_bytes_cut = cut
        if cut:
            log.warning("%s: recovery cut %d bytes of torn or corrupt tail at position %d", seg.log_path, cut, pos)

    def _set_segments(self, segs: tuple[Segment, ...]) -> None:
        # Publish both tuples; readers may see the pair from either side of this assignment,
        # and both are consistent views on their own (bases only grows or loses a prefix).
        self._bases = tuple(s.base_offset for s in segs)
        self._segments = segs

    # -- state -----------------------------------------------------------------------------
    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._segments

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        # One replica: everything appended is committed.
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- writes ----------------------------------------------------------------------------
    def append(self, buf: bytes | bytearray | memoryview) -> AppendInfo:
        """Validate, assign offsets and append one produce payload.

        Returns:
            AppendInfo of what was written (count 0 and nothing written for an empty payload).
        Raises:
            CorruptRecordError: bad CRC or malformed entries (nothing written).
            MessageSizeTooLargeError: an entry over ``max_message_bytes``.
            BrokerError 18 (RECORD_LIST_TOO_LARGE): the payload is bigger than a segment.
            StorageError: the write failed.
        """
        with self._lock:
            active = self._segments[-1]
            first = active.next_offset
            fast = _assign_offsets_v2(buf, first, self.config.max_message_bytes)
            new: bytes | bytearray
            if fast is not None:
                new, count, last, max_ts, magic = fast
            else:
                new, count, last, max_ts, magic = records.assign_offsets(
                    buf, first, max_message_bytes=self.config.max_message_bytes
                )
            if count == 0:
                return AppendInfo(first, first - 1, 0, -1, magic, 0)
            n = len(new)
            if n > self.config.segment_bytes:
                raise _RecordListTooLarge(f"{n} bytes is over the segment size {self.config.segment_bytes}")
            if active.size and active.size + n > self.config.segment_bytes:
                active = self._roll(first)
            active.append(new, first, last, max_ts, magic)
            self._unflushed_messages += count
            fm = self.config.flush_interval_messages
            if fm is not None and self._unflushed_messages >= fm:
                self._flush_locked()
            return AppendInfo(first, last, count, max_ts, magic, n)

    def _roll(self, base_offset: int) -> Segment:
        old = self._segments[-1]
        old.flush()
        seg = Segment(self.directory, base_offset, self.config.index_interval_bytes)
        seg.mark_known_empty()
        self._set_segments((*self._segments, seg))
        log.debug("%s: rolled to segment %d", self.directory, base_offset)
        return seg

    def roll(self) -> None:
        """Start a new segment now (if the active one is not empty)."""
        with self._lock:
            if self._segments[-1].size:
                self._roll(self._segments[-1].next_offset)

    def _flush_locked(self) -> None:
        self._segments[-1].flush()
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if ``flush_interval_ms`` has passed with unflushed messages; True if it did."""
        interval = self.config.flush_interval_ms
        if interval is None or not self._unflushed_messages:
            return False
        if now_ms - self._last_flush_ms < interval:
            return False
        with self._lock:
            if self._unflushed_messages:
                self._flush_locked()
        return True

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole non-active segments past ``retention_ms`` (by last write) or while the
        log is over ``retention_bytes`` (oldest first). Returns how many were deleted."""
        rms, rbytes = self.config.retention_ms, self.config.retention_bytes
        if rms is None and rbytes is None:
            return 0
        with self._lock:
            segs = self._segments
            drop = 0
            if rms is not None:
                while drop < len(segs) - 1 and now_ms - segs[drop].mtime_ms() > rms:
                    drop += 1
            if rbytes is not None:
                excess = sum(s.size for s in segs) - rbytes
                for s in segs[:drop]:
                    excess -= s.size
                while drop < len(segs) - 1 and excess - segs[drop].size >= 0:
                    excess -= segs[drop].size
                    drop += 1
            if not drop:
                return 0
            gone = segs[:drop]
            self._set_segments(segs[drop:])
        for s in gone:
            s.delete()
            log.info("%s: retention deleted segment %d", self.directory, s.base_offset)
        return drop

    def compact(self) -> int:
        """Keep only the newest record per key in the non-active segments (``compact`` logs,
        i.e. ``__consumer_offsets``). Returns how many records were dropped.

        Each rewritten segment is written to ``<name>.log.cleaned``, fsynced, and renamed over
        the old file (atomic), then the index is rebuilt; offsets are kept (a kept record becomes
        a one-record batch at its own offset, so gaps are fine). Readers holding the old segment
        keep reading the old file through its open descriptor. A ``.cleaned`` file found at
        start-up is an unfinished rewrite and is deleted.
        """
        if not self.config.compact:
            return 0
        with self._lock:
            segs = self._segments
            if len(segs) < 2:
                return 0
            latest: dict[bytes, int] = {}
            for seg in segs:
                for r in records.decode_records(seg.store.read(0, seg.size)):
                    if r.key is not None:
                        latest[r.key] = r.offset
            dropped = 0
            out: list[Segment] = []
            for seg in segs[:-1]:
                recs = records.decode_records(seg.store.read(0, seg.size))
                keep = [r for r in recs if r.key is None or latest.get(r.key) == r.offset]
                if len(keep) == len(recs):
                    out.append(seg)
                    continue
                dropped += len(recs) - len(keep)
                out.append(self._rewrite(seg, keep))
            self._set_segments((*out, segs[-1]))
        if dropped:
            log.info("%s: compaction dropped %d superseded records", self.directory, dropped)
        return dropped

    def _rewrite(self, seg: Segment, keep: list) -> Segment:
        tmp = seg.log_path + _CLEANED_SUFFIX
        parts = [
            records.encode_records(2, records.NONE, [(r.key, r.value, r.timestamp)], base_offset=r.offset, timestamp_ms=r.timestamp)
            for r in keep
        ]
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b"".join(parts))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, seg.log_path)
        except OSError as e:
            raise StorageError(f"compaction of {seg.log_path} failed: {e}") from e
        next_offset = seg.next_offset
        seg.index.close()
        new = Segment(self.directory, seg.base_offset, self.config.index_interval_bytes)
        self._recover(new)
        new.next_offset = next_offset
        return new

    # -- reads -----------------------------------------------------------------------------
    def _check_offset(self, offset: int, segs: tuple[Segment, ...]) -> None:
        start, end = segs[0].base_offset, segs[-1].next_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}] of {self.directory}")

    def read(self, offset: int, max_bytes: int, *, min_one_entry: bool = False) -> tuple[FileSlice | None, int]:
        """Read from ``offset``.

        Args:
            offset: the first offset wanted.
            max_bytes: most bytes to return (a partial trailing entry may be included).
            min_one_entry: return the whole first entry even if bigger than ``max_bytes``
                (Fetch v3+, KIP-74), so a consumer can always make progress.
        Returns:
            ``(slice, magic)``: the slice (None when nothing is at or after ``offset``) and the
            highest message format in its segment (for down-conversion decisions).
        Raises:
            OffsetOutOfRangeError: offset outside ``[log_start_offset, log_end_offset]``.
        """
        segs, bases = self._segments, self._bases
        self._check_offset(offset, segs)
        i = bisect_right(bases, offset) - 1
        if i < 0:
            i = 0
        while i < len(segs):
            seg = segs[i]
            sl = seg.read(offset, max_bytes, min_one_entry=min_one_entry)
            if sl is not None:
                return sl, seg.max_magic
            i += 1
        return None, -1

    def offsets_before(self, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
        """Kafka 0.8 ``getOffsetsBefore``: segment base offsets (plus the log end) whose segment
        was last written at or before ``timestamp``, newest first; -1 = latest, -2 = earliest."""
        segs = self._segments
        points = [(s.base_offset, s.mtime_ms()) for s in segs]
        if segs[-1].size > 0:
            points.append((segs[-1].next_offset, now_ms))
        if timestamp == -1:
            start = len(points) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = -1
            for i in range(len(points) - 1, -1, -1):
                if points[i][1] <= timestamp:
                    start = i
                    break
        n = min(max_num_offsets, start + 1)
        return [points[start - j][0] for j in range(n)]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first message with timestamp >= ``timestamp``, or None."""
        for seg in self._segments:
            if seg.max_timestamp < timestamp:
                continue
            h = seg.find_timestamp(timestamp)
            if h is None:
                continue
            data = seg.store.read(h.position, h.size)
            for rec in records.decode_records(data):
                if rec.timestamp >= timestamp:
                    return rec.offset, rec.timestamp
        return None

    def close(self) -> None:
        with self._lock:
            for s in self._segments:
                try:
                    s.flush()
                except StorageError as e:
                    log.warning("%s", e)
                s.close()

    def __repr__(self) -> str:
        return f"Log({self.directory!r}, start={self.log_start_offset}, end={self.log_end_offset})"
