"""Log: the segments of one topic-partition, append at the end, read anywhere.

Contract:
* ``append(buf, leader_epoch=None)`` takes the bytes a producer sent (MessageSet v0/v1 or
  RecordBatch v2), lets ``records.assign_offsets`` validate them per batch (CRC, size) and stamp
  broker offsets (and, given a ``leader_epoch``, every v2 batch's partitionLeaderEpoch), and
  writes the result untouched otherwise; it returns an ``AppendInfo``. Nothing is written when
  validation fails.
* ``append_as_follower(buf)`` takes bytes fetched from the leader, offsets already assigned:
  every whole entry is validated (CRC, sizes, offsets continuing the log), a partial trailing
  entry (a fetch cut at its byte limit) is ignored, and the bytes are written unchanged.
* ``read(offset, max_bytes, max_offset=None)`` returns a ``FileSlice`` of one segment (sent with
  sendfile) or None at the log end (or at ``max_offset``, the high watermark for consumers);
  OffsetOutOfRangeError outside ``[log_start_offset, log_end_offset]``.
* High watermark: ``0 <= log_start_offset <= high_watermark <= log_end_offset`` always. The
  replica manager moves it (``update_high_watermark`` forward only, ``set_high_watermark`` after
  a restart or truncation; a single-replica leader moves it to the log end after each append).
  The one exception keeps callers that predate replication working: ``append`` without a
  ``leader_epoch`` treats the log as its own only replica and moves it to the log end. Retention
  and compaction never touch offsets at or past it.
* Log start offset: the first segment's base, or past it inside that segment after DeleteRecords
  (``increment_log_start_offset``: never past the high watermark; whole segments below it are
  deleted with retention's rule; a follower takes its leader's). Reads below it are
  OffsetOutOfRangeError, ``offsets_before``/``offset_for_timestamp`` answer nothing below it,
  and the last stable offset never is below it. It lives in memory; the LogManager checkpoints
  it (``log-start-offset-checkpoint``) and gives it back at start-up
  (``restore_log_start_offset``). A truncation below it moves it back to the new end.
* ``truncate_to(offset)`` drops every entry holding an offset >= ``offset`` (a follower whose
  tail the leader does not have); ``truncate_fully_and_start_at(offset)`` empties the log.
* ``leader_epochs`` (``LeaderEpochCache``, ``leader-epoch-checkpoint`` in the folder) learns from
  the v2 batches appended, forgets entries truncated away, and is cleared when a legacy v0/v1
  entry is appended: those carry no epoch, so KIP-101 truncation needs RecordBatch v2 (as in
  Kafka); without it the follower falls back to the high watermark.
* Segments roll before an append would take the active one past ``segment_bytes``; the folder
  holds ``<base offset:020d>.log`` + ``.index`` pairs, ``leader-epoch-checkpoint`` and the
  producer state snapshots ``<offset:020d>.snapshot``, nothing else.
* ``producer_state`` (``ProducerStateManager``, see ``producer_state``) holds what idempotent
  producers wrote: ``append`` checks every idempotent batch against it under the lock (a
  refused payload raises the Kafka error and writes nothing; a retried batch already in the
  log writes nothing and returns its original offsets with ``duplicate=True``);
  ``append_as_follower`` feeds it unchecked; a roll and ``close`` snapshot it; start-up,
  ``truncate_to``, emptying and retention rebuild or trim it.
* Transactions (KIP-98, ``txns``, a ``txn_state.LogTxnState``): ``append`` refuses control
  batches unless ``origin="coordinator"`` (WriteTxnMarkers) and checks transactional batches; every
  append (leader or follower) updates the open transactions and the aborted-transaction index
  (``<base>.txnindex``); ``last_stable_offset`` and ``aborted_transactions`` answer
  ``read_committed`` fetches. Start-up and truncation rebuild it from the producer state
  (which keeps each producer's open transaction) and the index files.
* Start-up: every file name is checked (a malformed name or an index without its log is a
  StorageError: we refuse to guess). The recovery point is the active (newest) segment's base
  offset: a roll fsyncs the segment it closes (log and index), so everything before the active
  segment survived any crash and is trusted, as Kafka trusts what is below its recovery point.
  Cases for the active segment:

  - after an unclean shutdown (``clean_shutdown=False``, the default): it is CRC-scanned and cut
    at the first invalid entry (a torn write or garbage from a crash), and its index is rebuilt;
  - after a clean shutdown (the LogManager found its clean-shutdown marker): its next offset is
    read from the headers after its last index entry (no CRC scan); if those do not end exactly
    at the end of the file it is recovered as after an unclean shutdown.

  - the closed segments after an unclean shutdown (the case is in ``_verify_closed``): each is
    CRC-scanned too, without keeping its entries. A crash does not damage them (a roll
    fsynced them), but a damaged disk or a stray write can, and an unclean shutdown is when
    such damage is looked for (decision: a full scan on every start-up would cost a read of
    the whole log after each clean restart; a scan on read would cost sendfile). At the first
    entry that fails its CRC, its size or its offset order, the log is truncated to the offset
    it should have started at (``truncate_to``: later segments, epochs, producer state go too)
    and an error is logged: a follower fetches the rest from its leader again; a leader has
    lost it (as a single replica in Kafka would).

  After a clean shutdown no other segment is opened or has its index read at start-up (see
  ``Segment``: files are opened lazily through the ``HandleCache``, indexes read on first
  lookup), so start-up costs a folder listing per partition plus the active segment's work,
  however many segments there are.
  Epoch entries at or past the recovered log end are dropped; the high watermark starts at the
  log start until the LogManager restores it from its checkpoint.

Concurrency: one lock serialises writers (append, roll, truncation, retention, flush, high
watermark moves, the cleaner's swap of a segment group: ``replace_segments``). Readers take no lock: they bisect ``_segments``, an immutable tuple that
writers replace whole (copy-on-write), and a segment's size only grows after its bytes are in the
file, except under truncation, which cuts the one segment holding the new end in place (a read
racing with it may come back short, as in Kafka). The high watermark's position is published
with it as one tuple ``(offset, segment, file position)``, so a consumer read stops at an entry
boundary without walking headers.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import threading
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from crc32c import crc32c

from hmbclient.broker.log import cleaner
from hmbclient.broker.log.checkpoint import TMP_SUFFIX
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.epochs import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from hmbclient.broker.log.producer_state import (
    SNAPSHOT_FILE,
    ProducerStateManager,
    producer_batches,
)
from hmbclient.broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, FileSlice, Segment
from hmbclient.broker.log.store import HandleCache, SegmentGoneError
from hmbclient.broker.log.txn_state import TXN_INDEX_FILE, LogTxnState
from hmbclient.clock import wall_ms
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

__all__ = ["Log", "AppendInfo", "DELETE_SUFFIX"]

log = logging.getLogger("hmbclient.broker.log")

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index)$")
_CLEANED_SUFFIX = ".cleaned"
# A partition folder being deleted: ``<topic>-<partition>.<32 hex>-delete`` (as Kafka names it).
DELETE_SUFFIX = "-delete"
_RECOVERY_CHUNK = 8 * 1024 * 1024
_MIN_ENTRY = 14  # smallest size field of any entry (a magic 0 message)
_RecordListTooLarge = for_code(ErrorCode.RECORD_LIST_TOO_LARGE)
_InvalidRecord = for_code(ErrorCode.INVALID_RECORD)
# Read handles of Logs built without a LogManager (tools, tests): one cache for the process.
_SHARED_CACHE = HandleCache()


def _first_bad_entry(seg: Segment) -> tuple[int, int] | None:
    """``(offset, position)`` of ``seg``'s first invalid entry (CRC, size, offsets going
    backwards, a partial entry at the end): the offset it should have started at and where it
    starts; None if every entry is sound. Reads the segment in chunks and keeps no entries."""
    size = seg.store.size
    pos = 0
    expect = seg.base_offset
    chunk = _RECOVERY_CHUNK
    while pos < size:
        buf = seg.store.read(pos, min(chunk, size - pos))
        try:
            found, valid = records.scan_entries(buf, verify_crc=True)
        except (CorruptRecordError, ProtocolError):
            found, valid = [], 0
        for e in found:
            if e.last_offset < expect:
                return expect, pos + e.position
            expect = e.last_offset + 1
        pos += valid
        if valid == len(buf):
            chunk = _RECOVERY_CHUNK
            continue
        head = seg.store.read(pos, 12)
        if len(head) == 12:
            n = int.from_bytes(head[8:12], "big", signed=True)
            if n > 0 and pos + 12 + n <= size and 12 + n > len(buf) - valid:
                chunk = max(_RECOVERY_CHUNK, 12 + n)  # an entry straddling the chunk end
                continue
        return expect, pos
    return None


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    num_records: int
    max_timestamp: int
    magic: int
    size: int
    #: an idempotent producer's retry of a batch already in the log: nothing was written and
    #: the offsets are the original batch's
    duplicate: bool = False


_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")
_V2_MAGIC_AT = 16
_V2_EPOCH_AT = _v2.EPOCH_OFFSET  # 12: partitionLeaderEpoch, not covered by the CRC
_V2_LAST_DELTA_AT = struct.calcsize(">qiibIh")  # 23
_V2_MAX_TS_AT = struct.calcsize(">qiibIhiq")  # 35
_V2_COUNT_AT = struct.calcsize(">qiibIhiqqqhi")  # 57


def _assign_offsets_v2(
    buf: Any, next_offset: int, max_message_bytes: int, leader_epoch: int | None = None, control_ok: bool = True
) -> tuple[bytearray, int, int, int, int] | None:
    """Per-batch validation and offset stamping of a payload made only of v2 RecordBatches
    (what every modern producer sends); None if any entry is another format, which then goes
    through ``records.assign_offsets``. With ``leader_epoch``, each batch's partitionLeaderEpoch
    is set too, in the same pass over the batch starts (it is outside the CRC, like the offset).

    Why not always ``records.assign_offsets``: it also decodes every record of every batch,
    which is most of the broker's CPU on the produce path. The batch CRC-32C (computed in C)
    covers attributes, offsets deltas, timestamps, producer fields, the record count and every
    record byte, so corruption between producer and log is caught here per batch; the checks on
    the header are the same ones. Raises as ``records.assign_offsets`` does, and
    INVALID_RECORD for a control batch unless ``control_ok`` (KIP-98: clients may not write one).
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
        if not control_ok and mv[pos + _v2.ATTRIBUTES_OFFSET + 1] & 0x20:
            raise _InvalidRecord("clients are not allowed to write control records")
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
    if leader_epoch is None:
        for i in range(0, len(spans), 2):
            pack(out, spans[i], off)
            off += spans[i + 1]
    else:
        pack_epoch = _i32.pack_into
        for i in range(0, len(spans), 2):
            pack(out, spans[i], off)
            pack_epoch(out, spans[i] + _V2_EPOCH_AT, leader_epoch)
            off += spans[i + 1]
    return out, count, next_offset + count - 1, max_ts, 2 if count else -1


def _has_control(buf: bytes | bytearray) -> bool:
    """Whether a validated v2 payload holds a control batch (attributes bit 5)."""
    n = len(buf)
    pos = 0
    while pos + _v2.ATTRIBUTES_OFFSET + 2 <= n:
        if buf[pos + _V2_MAGIC_AT] >= 2 and buf[pos + _v2.ATTRIBUTES_OFFSET + 1] & 0x20:
            return True
        pos += 12 + _i32.unpack_from(buf, pos + 8)[0]
    return False


def _whole_entries(buf: bytes | bytearray) -> int:
    """The length of the prefix of ``buf`` made of whole entries."""
    n = len(buf)
    pos = 0
    while pos + 12 <= n:
        end = pos + 12 + _i32.unpack_from(buf, pos + 8)[0]
        if end > n or end <= pos + 12:
            break
        pos = end
    return pos


def _stamp_epoch(buf: bytes | bytearray, leader_epoch: int) -> tuple[bytes | bytearray, list[tuple[int, int, int]]]:
    """The slow path's epoch stamp: set partitionLeaderEpoch in every v2 batch of an already
    validated payload (a header walk; v0/v1 entries have no such field). Returns the stamped
    bytes (a copy if anything changed) and ``(magic, epoch, base_offset)`` per top-level entry,
    in order, for the epoch cache."""
    events: list[tuple[int, int, int]] = []
    out: bytearray | None = None
    n = len(buf)
    pos = 0
    while pos + _V2_MAGIC_AT < n:
        magic = buf[pos + _V2_MAGIC_AT]
        if magic >= 2:
            if out is None:
                out = bytearray(buf)
            _i32.pack_into(out, pos + _V2_EPOCH_AT, leader_epoch)
        events.append((magic, leader_epoch, _i64.unpack_from(buf, pos)[0]))
        pos += 12 + _i32.unpack_from(buf, pos + 8)[0]
    return (buf if out is None else out), events



class Log:
    """One partition's log in ``directory`` (created if missing).

    Args:
        directory: the partition folder (``<log_dir>/<topic>-<partition>``).
        config: roll/flush/retention settings.
        cache: the broker-wide cache of read handles (the LogManager's); None: a cache shared
            by every Log of the process built without one.
        clean_shutdown: the folder was left by a clean shutdown (``close``): the active segment
            is not CRC-scanned at start-up (see the module docstring).
    Raises:
        StorageError: a malformed segment file name, an index without its log, a malformed
            ``leader-epoch-checkpoint``, or I/O failure.
    """

    def __init__(self, directory: str, config: LogConfig, *, cache: HandleCache | None = None, clean_shutdown: bool = False) -> None:
        self.directory = directory
        self.config = config
        self._cache = _SHARED_CACHE if cache is None else cache
        self._clean_shutdown = clean_shutdown
        self._lock = threading.Lock()
        self._unflushed_messages = 0
        self._last_flush_ms = wall_ms()
        self._deleted = False
        self.recovered_bytes_cut = 0
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create log folder {directory}: {e}") from e
        self._segments: tuple[Segment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._view: tuple[tuple[Segment, ...], tuple[int, ...]] = ((), ())
        #: the log start offset: the first segment's base, or past it after DeleteRecords
        #: (``increment_log_start_offset``); ``_set_segments`` keeps it >= that base
        self._start = 0
        #: where a damaged closed segment's first bad entry starts (the log is cut there)
        self._corrupt_from: int | None = None
        self._load()
        self.leader_epochs = LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT))
        end = self.log_end_offset
        # Deferred writes: these truncations are made again by every start-up until an append
        # (which flushes the cache first) makes them stale.
        past_end = [e for e in self.leader_epochs.entries() if e.start_offset > end]
        if self.leader_epochs.truncate_from_end(end, defer_write=True):
            # Case: an entry at the log end is an epoch that wrote nothing yet (the usual state
            # of a partition whose leader got no data since its election): not worth a warning.
            # One past the end describes data that is gone (a crash cut it).
            if past_end:
                log.warning("%s: dropped leader epochs %s starting after the log end %d", directory, past_end, end)
            else:
                log.debug("%s: dropped the leader epoch starting at the log end %d (it wrote nothing)", directory, end)
        self.leader_epochs.truncate_from_start(self.log_start_offset, defer_write=True)
        self._hw = self.log_start_offset
        self._hw_mark: tuple[int, Segment, int] = (self._hw, self.segments[0], 0)
        self.producer_state = ProducerStateManager(directory, config.producer_id_expiration_ms)
        self.txns = LogTxnState(directory)
        self._load_producer_state(clean_shutdown)
        if self._corrupt_from is not None:
            self.truncate_to(self._corrupt_from)

    # -- start-up --------------------------------------------------------------------------
    def _load(self) -> None:
        cleaner.complete_interrupted_cleaning(self.directory)
        logs: set[int] = set()
        indexes: set[int] = set()
        leftovers: list[str] = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(LOG_SUFFIX + _CLEANED_SUFFIX) and _SEGMENT_FILE.match(name[: -len(_CLEANED_SUFFIX)]):
                # A compaction rewrite that never reached its rename: the original is intact.
                leftovers.append(name)
                continue
            if name == LEADER_EPOCH_CHECKPOINT or SNAPSHOT_FILE.match(name) or TXN_INDEX_FILE.match(name):
                continue
            if name.endswith(TMP_SUFFIX) and (SNAPSHOT_FILE.match(name[: -len(TMP_SUFFIX)]) or TXN_INDEX_FILE.match(name[: -len(TMP_SUFFIX)])):
                leftovers.append(name)  # a snapshot write that never reached its rename
                continue
            if name == LEADER_EPOCH_CHECKPOINT + TMP_SUFFIX:
                # A checkpoint write that never reached its rename: the old file is intact.
                leftovers.append(name)
                continue
            m = _SEGMENT_FILE.match(name)
            if m is None:
                raise StorageError(
                    f"{self.directory}: unexpected file {name!r} (segment files are "
                    f"<20-digit base offset>{LOG_SUFFIX} and {INDEX_SUFFIX}, plus {LEADER_EPOCH_CHECKPOINT})"
                )
            (logs if m.group(2) == "log" else indexes).add(int(m.group(1)))
        orphans = indexes - logs
        if orphans:
            names = ", ".join(f"{b:020d}{INDEX_SUFFIX}" for b in sorted(orphans))
            raise StorageError(f"{self.directory}: index without its log: {names}")
        # Only now that the folder is known to be sound: a refused start-up changes nothing.
        for name in leftovers:
            log.warning("%s: removing unfinished write %s", self.directory, name)
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError as e:
                raise StorageError(f"{self.directory}: cannot remove {name}: {e}") from e
        bases = sorted(logs)
        if not bases:
            self._set_segments((self._new_segment(0),))
            return
        interval, cache = self.config.index_interval_bytes, self._cache
        segs = [Segment(self.directory, b, interval, cache) for b in bases]
        for seg, nxt in zip(segs, segs[1:], strict=False):
            seg.next_offset = nxt.base_offset
        active = segs[-1]
        if not (self._clean_shutdown and active.load_next_offset()):
            if self._clean_shutdown:
                log.warning("%s: the active segment is not as a clean shutdown leaves it: recovering it", active.log_path)
            self._recover(active)
        if not self._clean_shutdown:
            self._corrupt_from = self._verify_closed(segs[:-1])
        if segs[-1].next_offset < segs[-1].base_offset:
            raise StorageError(f"{segs[-1].log_path}: next offset below base offset")
        self._set_segments(tuple(segs))

    def _verify_closed(self, segs: list[Segment]) -> int | None:
        """CRC-scan closed segments in order; the offset the first bad entry should have held
        (None: all sound). See the module docstring."""
        for seg in segs:
            bad = _first_bad_entry(seg)
            if bad is not None:
                offset, position = bad
                log.error("%s: corrupt entry at position %d of a closed segment, where offset %d should start: truncating "
                          "the log to %d (a follower fetches the rest from its leader again)", seg.log_path, position, offset, offset)
                # Cut here first: the header walk of truncate_to cannot step over a damaged
                # size field; truncate_to then drops the later segments, epochs and state.
                seg.truncate_to(position, offset)
                return offset
        return None

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

    def _load_producer_state(self, clean_shutdown: bool, *, truncating: bool = False) -> None:
        """Snapshot at or below the log end, then the batches after it (producer_state's
        contract), reading at most the active segment.

        Why the active segment is enough without a sound snapshot: a roll snapshots a state
        that has (or ever had) producers, so with no snapshot at or below the end, every
        idempotent batch this broker wrote since the last one is in the active segment
        (batches of a broker that predates producer state are not looked for, as Kafka does
        for logs without snapshots). Cases without any snapshot: after a clean shutdown there
        is nothing to read (close snapshots a state with producers); a truncation of a log whose
        state is empty has nothing to find either (its start-up or its appends would have put
        them in the state)."""
        ps = self.producer_state
        end = self.log_end_offset
        if not ps.snapshot_offsets() and (clean_shutdown or (truncating and not ps.producers)):
            ps.advance(end)
            self.txns.load(list(self._bases), ps.open_transactions(), end, [], end)
            return
        replayed: list[tuple[int, int, int, bool]] = []
        start = ps.load(self.log_start_offset, end, self._segments[-1].base_offset, self._chunks_from, lambda *t: replayed.append(t))
        self.txns.load(list(self._bases), ps.open_transactions(), start, replayed, end)

    def _chunks_from(self, offset: int) -> Iterator[bytes]:
        """The log's bytes from the segment holding ``offset`` to the end, in chunks of whole
        entries (the producer state's rebuild reads batch headers from them)."""
        segs, bases = self._view
        i = max(bisect_right(bases, offset) - 1, 0)
        for seg in segs[i:]:
            size = seg.size
            pos = 0
            while pos < size:
                buf = seg.store.read(pos, min(_RECOVERY_CHUNK, size - pos))
                whole = _whole_entries(buf)
                if whole == 0:
                    if len(buf) < 12:
                        break
                    need = 12 + _i32.unpack_from(buf, 8)[0]
                    if need <= len(buf) or pos + need > size:
                        break  # cannot be right; recovery already cut what was torn
                    buf = seg.store.read(pos, need)
                    whole = len(buf)
                yield buf[:whole]
                pos += whole

    def _new_segment(self, base_offset: int) -> Segment:
        seg = Segment(self.directory, base_offset, self.config.index_interval_bytes, self._cache, create=True)
        seg.mark_known_empty()
        return seg

    def _set_segments(self, segs: tuple[Segment, ...], start: int | None = None) -> None:
        # The log start stays where DeleteRecords put it unless segments below it went (then
        # it is the new first base), or a truncation names it (``start``).
        self._start = max(self._start, segs[0].base_offset) if start is None else start
        # Readers that need both take ``_view``, one object: the cleaner replaces segments in
        # the middle, so a ``_segments`` and a ``_bases`` read apart may not match.
        self._bases = bases = tuple(s.base_offset for s in segs)
        self._segments = segs
        self._view = (segs, bases)

    # -- state -----------------------------------------------------------------------------
    @property
    def segments(self) -> tuple[Segment, ...]:
        return self._segments

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which every message is committed (consumers read up to here)."""
        return self._hw

    @property
    def last_stable_offset(self) -> int:
        """How far a ``read_committed`` consumer reads: the high watermark, or the first offset
        of the oldest open transaction if lower (KIP-98)."""
        # Kafka's rule: an open transaction whose first records DeleteRecords removed keeps
        # the LSO at the log start (it stays open until its marker), never below it.
        return max(self.txns.last_stable_offset(self._hw), self._start)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions with records in
        ``[fetch_offset, upper_bound)`` (a ``read_committed`` Fetch's answer)."""
        return self.txns.aborted_transactions(fetch_offset, upper_bound)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- high watermark --------------------------------------------------------------------
    def _clamp(self, offset: int) -> int:
        segs = self._segments
        return max(self._start, min(offset, segs[-1].next_offset))

    def _set_hw_locked(self, hw: int) -> None:
        # The mark is what lets a consumer read stop at the high watermark without a header
        # walk: computed here, once per move (O(1) when the HW is the log end, the common
        # single-replica case), instead of on every read.
        segs = self._segments
        active = segs[-1]
        if hw == active.next_offset:
            mark = (hw, active, active.size)
        else:
            seg, pos = self._cut_for(hw, segs, self._bases)
            mark = (hw, seg, pos)
        self._hw_mark = mark
        self._hw = hw

    def update_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward to ``offset`` (clamped to ``[log_start_offset,
        log_end_offset]``); never backwards. Returns True if it moved."""
        with self._lock:
            # Called after every append on a single-replica leader: kept to a few loads.
            # (No lower clamp needed: moving forward stays above the log start.)
            active = self._segments[-1]
            end = active.next_offset
            if offset >= end:
                if end <= self._hw:
                    return False
                self._hw_mark = (end, active, active.store.size)
                self._hw = end
                return True
            if offset <= self._hw:
                return False
            self._set_hw_locked(offset)
            return True

    def set_high_watermark(self, offset: int) -> None:
        """Set the high watermark to ``offset`` (clamped), backwards too: a restart restoring
        the checkpointed value, or a follower taking the leader's."""
        with self._lock:
            self._set_hw_locked(self._clamp(offset))

    @staticmethod
    def _cut_for(offset: int, segs: tuple[Segment, ...], bases: tuple[int, ...]) -> tuple[Segment, int]:
        """``(segment, position)``: where the entries holding offsets >= ``offset`` start (an
        entry straddling ``offset`` counts as after it)."""
        j = bisect_right(bases, offset) - 1
        if j < 0:
            return segs[0], 0
        seg = segs[j]
        if offset == seg.base_offset:
            return seg, 0
        # Snapshot the size first: anything appended later holds offsets >= the log end >= offset.
        size = seg.size
        h = seg.locate(offset, size)
        return seg, (size if h is None else h.position)

    # -- writes ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._deleted:
            raise StorageError(f"{self.directory}: the log was deleted")

    def append(self, buf: bytes | bytearray | memoryview, *, leader_epoch: int | None = None, origin: str = "client") -> AppendInfo:
        """Validate, assign offsets and append one produce payload (the leader's append).

        Args:
            buf: the record set of one partition of a Produce request.
            leader_epoch: the leader's epoch: stamped into every v2 batch's partitionLeaderEpoch
                and recorded in ``leader_epochs`` if it is new; the caller then owns the high
                watermark (``update_high_watermark``). None is the append of a caller that knows
                nothing of replication: batches stay as the producer sent them, the epoch cache
                is left alone, and the log is its own only replica, so the high watermark moves
                to the new log end (what every append did before replication).
            origin: "client" (a producer) or "coordinator" (Kafka's AppendOrigin): only a
                coordinator writes control batches (WriteTxnMarkers; a client's is refused with
                INVALID_RECORD), and its transactional batches (TxnOffsetCommit) have their
                producer epoch checked but not their sequence, as Kafka.
        Returns:
            AppendInfo of what was written (count 0 and nothing written for an empty payload).
        Raises:
            CorruptRecordError: bad CRC or malformed entries (nothing written).
            MessageSizeTooLargeError: an entry over ``max_message_bytes``.
            BrokerError 18 (RECORD_LIST_TOO_LARGE): the payload is bigger than a segment.
            BrokerError: a producer's batch refused (sequence, epoch, transaction state).
            StorageError: the write failed, or the log was deleted.
        """
        with self._lock:
            if self._deleted:
                self._check_open()
            active = self._segments[-1]
            first = active.next_offset
            coordinator = origin == "coordinator"
            fast = _assign_offsets_v2(buf, first, self.config.max_message_bytes, leader_epoch, coordinator)
            new: bytes | bytearray
            events: list[tuple[int, int, int]] | None = None
            if fast is not None:
                new, count, last, max_ts, magic = fast
            else:
                new, count, last, max_ts, magic = records.assign_offsets(
                    buf, first, max_message_bytes=self.config.max_message_bytes
                )
                if leader_epoch is not None and count:
                    new, events = _stamp_epoch(new, leader_epoch)
            if count == 0:
                return AppendInfo(first, first - 1, 0, -1, magic, 0)
            n = len(new)
            if n > self.config.segment_bytes:
                raise _RecordListTooLarge(f"{n} bytes is over the segment size {self.config.segment_bytes}")
            # Idempotent producers: refused (raises, nothing written) or a duplicate (nothing
            # written, the original offsets answered) before anything changes.
            batches = producer_batches(new) if magic >= 2 else None
            if fast is None and magic >= 2 and not coordinator and _has_control(new):
                raise _InvalidRecord("clients are not allowed to write control records")
            # KIP-98: only a payload touching transactions pays for their checks (the hot path
            # of idempotent producers does not)
            txn_batches = None
            if batches and (coordinator or self.txns.state.ongoing or batches[0].is_transactional or (len(batches) > 1 and any(b.is_transactional for b in batches))):
                txn_batches = batches
            if txn_batches:
                self.txns.check(txn_batches, self.producer_state.producers, markers=coordinator)
            updates = None
            if batches:
                plan = self.producer_state.prepare(batches, check_sequence=not coordinator)
                if plan.duplicate is not None:
                    d = plan.duplicate
                    return AppendInfo(d.first_offset, d.last_offset, 0, -1, magic, 0, True)
                updates = plan.updates
            # The epoch cache learns before the bytes are written (as Kafka's append does): if
            # the write then fails, an entry starting at the log end describes nothing yet.
            if events is not None:
                self._learn_epochs(events)
            elif leader_epoch is not None and leader_epoch > self.leader_epochs.latest_epoch:
                self.leader_epochs.assign(leader_epoch, first)
            if self.leader_epochs.dirty:
                # The epoch of these bytes must survive whatever they survive.
                self.leader_epochs.flush()
            if active.size and active.size + n > self.config.segment_bytes:
                active = self._roll(first)
            pos = active.append(new, first, last, max_ts, magic)
            if txn_batches:
                self.txns.appended(txn_batches, active.base_offset)
            if updates:
                self.producer_state.commit(updates, last + 1)
            else:
                self.producer_state.advance(last + 1)
            if leader_epoch is None:
                # _set_hw_locked for the log end, inlined: the append knows where it ends.
                self._hw_mark = (last + 1, active, pos + n)
                self._hw = last + 1
            self._unflushed_messages += count
            fm = self.config.flush_interval_messages
            if fm is not None and self._unflushed_messages >= fm:
                self._flush_locked()
            return AppendInfo(first, last, count, max_ts, magic, n)

    def _learn_epochs(self, events: list[tuple[int, int, int]]) -> None:
        """Feed ``(magic, epoch, base_offset)`` per appended entry, in log order, to the cache:
        a v2 batch with a newer epoch starts that epoch; a v0/v1 entry (no epoch field) makes
        the cache unable to describe the log, so it is cleared (Kafka's rule)."""
        cache = self.leader_epochs
        for magic, epoch, base in events:
            if magic >= 2:
                if epoch > cache.latest_epoch:
                    cache.assign(epoch, base)
            elif cache.latest_epoch >= 0:
                log.info("%s: a v%d entry at offset %d carries no leader epoch: clearing the epoch cache", self.directory, magic, base)
                cache.clear()

    def append_as_follower(self, buf: bytes | bytearray | memoryview) -> AppendInfo:
        """Append bytes fetched from the leader, as they are (offsets already assigned).

        Every whole entry is validated (CRC and sizes, every format, compressed wrappers
        decoded); a partial trailing entry (the fetch was cut at its byte limit) is ignored.
        The first entry must start at ``log_end_offset`` and each next one right after the one
        before; a compacted log (``config.compact``) accepts forward gaps, which the leader's
        compaction leaves. The epoch cache learns each v2 batch's partitionLeaderEpoch that is
        newer than its latest (and is cleared by a v0/v1 entry, see ``append``). Segments roll
        between entries as for the leader.

        Returns:
            AppendInfo of what was appended (count 0 and nothing written if no whole entry).
        Raises:
            CorruptRecordError: a corrupt entry, or offsets that do not continue the log (the
                message names them); nothing is written.
            StorageError: the write failed, or the log was deleted.
        """
        entries, valid = records.scan_entries(buf, verify_crc=True)
        mv = memoryview(buf).cast("B") if not isinstance(buf, bytes | bytearray) else memoryview(buf)
        n = len(mv)
        if valid < n and n - valid >= 12:
            size = _i32.unpack_from(mv, valid + 8)[0]
            if size < _MIN_ENTRY or valid + 12 + size <= n:
                # The entry is all there (or its size cannot be right) and still did not scan.
                raise CorruptRecordError(f"follower append: corrupt entry at byte {valid} of {n}")
        with self._lock:
            self._check_open()
            leo = self._segments[-1].next_offset
            if not entries:
                return AppendInfo(leo, leo - 1, 0, -1, -1, 0)
            expect = leo
            gaps = self.config.compact
            for e in entries:
                if e.base_offset != expect and not (gaps and e.base_offset > expect):
                    where = "the log end offset" if expect == leo else "the offset after the previous entry"
                    raise CorruptRecordError(
                        f"follower append to {self.directory}: entry at byte {e.position} starts at offset "
                        f"{e.base_offset}, expected {expect} ({where})"
                    )
                if e.last_offset < e.base_offset:
                    raise CorruptRecordError(f"follower append: entry at byte {e.position} ends at {e.last_offset}, before its base offset {e.base_offset}")
                expect = e.last_offset + 1
            self._learn_epochs([(e.magic, _i32.unpack_from(mv, e.position + _V2_EPOCH_AT)[0] if e.magic >= 2 else -1, e.base_offset) for e in entries])
            if self.leader_epochs.dirty:
                self.leader_epochs.flush()
            limit = self.config.segment_bytes
            active = self._segments[-1]
            filled = active.size
            run = 0
            ps = self.producer_state
            for k, e in enumerate(entries):
                if filled and filled + e.size > limit:
                    if k > run:
                        self._write_entries(active, mv, entries[run:k])
                        pbs = self._producer_batches_of(mv, entries[run:k])
                        self.txns.appended(pbs, active.base_offset)
                        ps.apply(pbs, e.base_offset)
                    ps.advance(e.base_offset)
                    active = self._roll(e.base_offset)
                    run, filled = k, 0
                filled += e.size
            self._write_entries(active, mv, entries[run:])
            pbs = self._producer_batches_of(mv, entries[run:])
            self.txns.appended(pbs, active.base_offset)
            ps.apply(pbs, entries[-1].last_offset + 1)
            count = sum(e.count for e in entries)
            self._unflushed_messages += count
            fm = self.config.flush_interval_messages
            if fm is not None and self._unflushed_messages >= fm:
                self._flush_locked()
            return AppendInfo(
                entries[0].base_offset,
                entries[-1].last_offset,
                count,
                max(e.max_timestamp for e in entries),
                max(e.magic for e in entries),
                valid,
            )

    @staticmethod
    def _producer_batches_of(mv: memoryview, run: list) -> list:
        out: list = []
        for e in run:
            if e.magic >= 2:
                out.extend(producer_batches(mv[e.position : e.position + e.size]))
        return out

    @staticmethod
    def _write_entries(seg: Segment, mv: memoryview, run: list) -> None:
        start = run[0].position
        seg.append_entries(mv[start : run[-1].position + run[-1].size], run, start)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry holding an offset >= ``offset`` (a follower's tail the leader does
        not have). An entry straddling ``offset`` (a compressed wrapper, a v2 batch) goes whole,
        so the log end may end up below ``offset``. Segments whose base is >= ``offset`` are
        deleted, the one holding the new end is cut and its index trimmed; the epoch cache
        forgets epochs starting at or after the new end and the high watermark is clamped to it.
        Nothing happens if ``offset`` is at or past the log end; below the log start the log is
        emptied and starts at ``offset``.

        Raises:
            ValueError: a negative offset.
            StorageError: the files could not be cut or deleted.
        """
        if offset < 0:
            raise ValueError(f"cannot truncate to a negative offset {offset}")
        with self._lock:
            self._check_open()
            segs = self._segments
            if offset >= segs[-1].next_offset:
                return
            if offset <= segs[0].base_offset:
                self._truncate_fully_locked(offset)
                return
            i = bisect_left(self._bases, offset) - 1  # the last segment with base < offset
            seg = segs[i]
            gone = segs[i + 1 :]
            cut, new_end = seg.cut_point(offset)
            self._set_segments(segs[: i + 1])
            # Deleted under the lock: a roll must never reopen a base offset being deleted.
            for s in gone:
                s.delete()
            seg.truncate_to(cut, new_end)
            # Kafka's rule: a truncation below the log start moves it back to the new end.
            self._start = min(self._start, new_end)
            self.leader_epochs.truncate_from_end(new_end)
            self._set_hw_locked(min(self._hw, new_end))
            # The state of the batches cut away must go too: reload from the newest snapshot
            # at or below the new end (those past it are deleted) and the log after it.
            self._load_producer_state(clean_shutdown=False, truncating=True)
        log.info("%s: truncated to offset %d (log end now %d, %d segments deleted)", self.directory, offset, new_end, len(gone))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset`` (a follower so far behind
        that the leader no longer has its log end). The epoch cache is cleared; the log start,
        the log end and the high watermark become ``offset``.

        Raises:
            ValueError: a negative offset.
            StorageError: the files could not be deleted or created.
        """
        if offset < 0:
            raise ValueError(f"cannot start a log at a negative offset {offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)
        log.info("%s: emptied, starting at offset %d", self.directory, offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        # Old files go first (retired, so no reader reopens their names; slices already cut keep
        # their handles), so the new segment never reopens an old file with the same base offset.
        for s in self._segments:
            s.delete()
        self._set_segments((self._new_segment(offset),), start=offset)
        self.leader_epochs.clear()
        self.producer_state.clear(offset)
        self.txns.clear()
        self._set_hw_locked(offset)

    def _roll(self, base_offset: int) -> Segment:
        old = self._segments[-1]
        # Flushed (log and index) and its writer dropped: this is what lets start-up trust
        # every segment but the active one, and keeps one writer open per partition.
        old.seal()
        self.txns.flush()
        # The producer state of everything below the new segment survives what it survives
        # (a partition that never saw an idempotent producer writes no snapshot).
        self.producer_state.advance(base_offset)
        self.producer_state.take_snapshot()
        seg = self._new_segment(base_offset)
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
        self._last_flush_ms = wall_ms()

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
        log is over ``retention_bytes`` (oldest first), but never a segment holding an offset at
        or past the high watermark (uncommitted data may still be truncated and replaced).
        Moves the epoch cache's first entry up to the new log start. Returns how many segments
        were deleted."""
        rms, rbytes = self.config.retention_ms, self.config.retention_bytes
        if rms is None and rbytes is None:
            return 0
        with self._lock:
            segs = self._segments
            # Segment k may go only if everything in it is below the high watermark.
            deletable = 0
            while deletable < len(segs) - 1 and segs[deletable + 1].base_offset <= self._hw:
                deletable += 1
            drop = 0
            if rms is not None:
                while drop < deletable and now_ms - segs[drop].mtime_ms() > rms:
                    drop += 1
            if rbytes is not None:
                excess = sum(s.size for s in segs) - rbytes
                for s in segs[:drop]:
                    excess -= s.size
                while drop < deletable and excess - segs[drop].size >= 0:
                    excess -= segs[drop].size
                    drop += 1
            if not drop:
                return 0
            gone = segs[:drop]
            self._drop_head_locked(drop)
        for s in gone:
            s.delete()
            log.info("%s: retention deleted segment %d", self.directory, s.base_offset)
        return drop

    def _drop_head_locked(self, drop: int) -> None:
        """Forget the first ``drop`` segments (the caller deletes their files after the lock,
        retention's rule: a reader holding a handle keeps reading, one without retries on the
        new tuple) and what went with them."""
        if drop:
            self._set_segments(self._segments[drop:])
            self.producer_state.truncate_head(self._segments[0].base_offset)
        self.leader_epochs.truncate_from_start(self._start)
        self.txns.segments_changed(self._bases, self._start, self.log_end_offset)

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start up to ``offset`` (DeleteRecords on the leader; a follower taking
        its leader's log start), and delete the whole segments below it. Returns True if it
        moved (the caller checkpoints it: ``LogManager.checkpoint_log_start_offsets``).

        Cases: (a) ``offset`` past the high watermark: OffsetOutOfRangeError, nothing changes
        (a follower caps the leader's value at its own high watermark first); (b) at or below
        the log start: nothing to do, False; (c) otherwise the start moves, segments whose
        next segment starts at or below it are deleted (never the active one), the epoch
        cache, the producer state (retention's rule: producers whose last batch went) and the
        aborted-transaction index forget what is below it. Records of the first kept segment
        below the new start stay in the file, unreadable (``read`` refuses offsets below the
        start), as in Kafka. An open transaction that started below it stays open; the LSO is
        the log start until its marker (``last_stable_offset``).

        Raises:
            OffsetOutOfRangeError: case (a).
            StorageError: the log was deleted, or a segment file could not be removed.
        """
        with self._lock:
            self._check_open()
            if offset > self._hw:  # (a)
                raise OffsetOutOfRangeError(f"offset {offset} is past the high watermark {self._hw} of {self.directory}")
            if offset <= self._start:  # (b)
                return False
            self._start = offset  # (c)
            segs = self._segments
            drop = 0
            while drop < len(segs) - 1 and segs[drop + 1].base_offset <= offset:
                drop += 1
            gone = segs[:drop]
            self._drop_head_locked(drop)
        for s in gone:
            s.delete()
        log.info("%s: log start offset moved to %d (%d segments deleted)", self.directory, offset, len(gone))
        return True

    def restore_log_start_offset(self, offset: int) -> None:
        """Start-up: the log start from ``log-start-offset-checkpoint`` (the LogManager, before
        the high watermark). Below the first segment's base it is that base; past the log end
        (the tail was lost in a crash) the log is emptied and starts there: what was below it
        was deleted on purpose.

        Raises:
            StorageError: the files could not be deleted or created.
        """
        with self._lock:
            self._check_open()
            if offset <= self._start:
                return
            if offset > self.log_end_offset:
                log.warning("%s: checkpointed log start %d is past the recovered log end %d: starting empty there",
                            self.directory, offset, self.log_end_offset)
                self._truncate_fully_locked(offset)
                return
            self._start = offset
            if self._hw < offset:
                self._set_hw_locked(offset)
            segs = self._segments
            drop = 0
            while drop < len(segs) - 1 and segs[drop + 1].base_offset <= offset:
                drop += 1
            gone = segs[:drop]
            self._drop_head_locked(drop)
        for s in gone:
            s.delete()

    def compact(self) -> int:
        """Clean the whole cleanable range now, as one pass of the log cleaner from the log
        start (tools, tests; the broker's ``LogCleaner`` threads clean ``compact`` logs on their
        own). Returns how many records were dropped; 0 for a log that is not ``compact``.

        Raises:
            StorageError: I/O failure (see ``cleaner.clean_log``).
        """
        if not self.config.compact:
            return 0
        result = cleaner.clean_log(self, self.log_start_offset)
        return 0 if result is None else result.dropped

    def replace_segments(self, old: tuple[Segment, ...], commit: Callable[[], None], entries: list[Any]) -> bool:
        """The cleaner's swap (see ``cleaner``): under the lock, if ``old`` are still consecutive
        segments of this log, none the active one, all below the high watermark, run ``commit``
        (the file renames that put the cleaned file in their place) and publish the new segment,
        its index built from ``entries`` (the cleaned file's, positions from 0). False when the
        log changed meanwhile (truncation, retention, deletion): nothing was done.

        Raises:
            OSError: from ``commit`` (start-up completes a committed swap).
        """
        with self._lock:
            segs = self._segments
            i = next((k for k, s in enumerate(segs) if s is old[0]), -1)
            n = len(old)
            if self._deleted or i < 0 or i + n >= len(segs) or any(a is not b for a, b in zip(segs[i : i + n], old, strict=True)):
                return False
            if old[-1].next_offset > self._hw:
                return False
            commit()
            new = Segment(self.directory, old[0].base_offset, self.config.index_interval_bytes, self._cache)
            new.recover(entries, new.size)
            new.next_offset = old[-1].next_offset
            new.seal()
            self._set_segments((*segs[:i], new, *segs[i + n :]))
            # The high watermark's mark must not name a replaced segment.
            self._set_hw_locked(self._hw)
        return True

    # -- reads -----------------------------------------------------------------------------
    def _check_offset(self, offset: int, segs: tuple[Segment, ...]) -> None:
        start, end = max(self._start, segs[0].base_offset), segs[-1].next_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{start}, {end}] of {self.directory}")

    def read(
        self, offset: int, max_bytes: int, *, min_one_entry: bool = False, max_offset: int | None = None
    ) -> tuple[FileSlice | None, int]:
        """Read from ``offset``.

        Args:
            offset: the first offset wanted.
            max_bytes: most bytes to return (a partial trailing entry may be included).
            min_one_entry: return the whole first entry even if bigger than ``max_bytes``
                (Fetch v3+, KIP-74), so a consumer can always make progress.
            max_offset: exclusive upper bound (the high watermark, for consumer fetches):
                nothing holding an offset at or past it is returned, cut at the entry boundary.
                Reading at or past it is not an error: ``(None, -1)``, nothing to read yet.
                When it is the current high watermark, its position is known without a walk.
        Returns:
            ``(slice, magic)``: the slice (None when nothing is at or after ``offset``, below
            ``max_offset``) and the highest message format in its segment (for down-conversion
            decisions); magic is -1 with no slice.
        Raises:
            OffsetOutOfRangeError: offset outside ``[log_start_offset, log_end_offset]``.
            StorageError: I/O failure, or the log was deleted.
        """
        while True:
            segs, bases = self._view
            try:
                return self._read(segs, bases, offset, max_bytes, min_one_entry, max_offset)
            except SegmentGoneError:
                # Case: a segment of this snapshot was deleted or replaced under the reader
                # (retention, truncation, compaction) and its handle had been evicted. A fresh
                # snapshot answers instead (OffsetOutOfRange if the offset went with it). A
                # writer retires segments under the lock and publishes the new tuple before it
                # lets go, so waiting for the lock once tells "being replaced" from "gone for
                # good" (the log deleted, or files removed behind its back): a real error.
                if self._segments is segs:
                    with self._lock:
                        pass
                    if self._segments is segs:
                        raise

    def _read(
        self, segs: tuple[Segment, ...], bases: tuple[int, ...], offset: int, max_bytes: int, min_one_entry: bool, max_offset: int | None
    ) -> tuple[FileSlice | None, int]:
        self._check_offset(offset, segs)
        i = bisect_right(bases, offset) - 1
        if i < 0:
            i = 0
        if max_offset is None:
            while i < len(segs):
                seg = segs[i]
                sl = seg.read(offset, max_bytes, min_one_entry=min_one_entry)
                if sl is not None:
                    return sl, seg.max_magic
                i += 1
            return None, -1
        if offset >= max_offset:
            return None, -1
        mark = self._hw_mark
        cseg = mark[1]
        if mark[0] == max_offset:
            # Use the mark only if its segment is in this reader's snapshot (a compaction or a
            # truncation may have replaced it since); otherwise compute the cut from the snapshot.
            j = bisect_right(bases, cseg.base_offset) - 1
            if j >= 0 and segs[j] is cseg:
                cpos = mark[2]
            else:
                cseg, cpos = self._cut_for(max_offset, segs, bases)
        else:
            cseg, cpos = self._cut_for(max_offset, segs, bases)
        cbase = cseg.base_offset
        while i < len(segs):
            seg = segs[i]
            if seg.base_offset >= cbase:
                # The segment holding the cut (nothing after it is below max_offset).
                if seg is not cseg:
                    return None, -1
                sl = seg.read(offset, max_bytes, min_one_entry=min_one_entry, end=cpos)
                return (sl, seg.max_magic) if sl is not None else (None, -1)
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
        points[0] = (max(points[0][0], self._start), points[0][1])
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
        start = self._start
        for seg in self._segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            h = seg.find_timestamp(timestamp)
            if h is None:
                continue
            pos, size = h.position, seg.size
            if seg.base_offset < start:
                # The segment the log start is in: begin no earlier than the entry holding it.
                at = seg.locate(start, size)
                if at is not None and at.position > pos:
                    pos = at.position
            while pos + 12 <= size:  # usually one entry: the first whose max timestamp is late enough
                n = 12 + int.from_bytes(seg.store.read(pos + 8, 4), "big")
                for rec in records.decode_records(seg.store.read(pos, n)):
                    if rec.timestamp >= timestamp and rec.offset >= start:
                        return rec.offset, rec.timestamp
                pos += n
        return None

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> bool:
        """Flush and close every segment. Returns True if every flush succeeded (only then may
        the LogManager mark the shutdown clean)."""
        ok = True
        with self._lock:
            try:
                self.leader_epochs.flush_written()
            except StorageError as e:
                log.warning("%s", e)
                ok = False
            for s in self._segments:
                try:
                    s.flush()
                except StorageError as e:
                    log.warning("%s", e)
                    ok = False
                s.close()
            if not self._deleted:
                try:
                    self.txns.flush()
                except StorageError as e:
                    log.warning("%s", e)
                    ok = False
            if ok and not self._deleted:
                try:
                    self.producer_state.take_snapshot()
                except StorageError as e:
                    log.warning("%s", e)
                    ok = False
        return ok

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget idempotent producers silent for ``producer_id_expiration_ms``; how many."""
        with self._lock:
            return self.producer_state.remove_expired(now_ms)

    def delete(self) -> None:
        """Delete the partition folder (StopReplica with delete). The folder is first renamed to
        ``<name>.<random hex>-delete`` (atomic, so a crash leaves either the intact partition
        or a folder the LogManager removes at start-up), then removed. Slices already cut stay
        readable through their handles until pending fetches are done with them; later reads
        and writes raise StorageError.

        Raises:
            StorageError: the folder could not be renamed or removed.
        """
        with self._lock:
            if self._deleted:
                return
            self._deleted = True
            doomed = f"{self.directory}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            try:
                os.rename(self.directory, doomed)
            except OSError as e:
                self._deleted = False
                raise StorageError(f"cannot rename {self.directory} for deletion: {e}") from e
            for s in self._segments:
                # No reader reopens a name that is going (the folder was renamed anyway).
                s.store.retire()
            try:
                shutil.rmtree(doomed)
            except OSError as e:
                raise StorageError(f"cannot remove {doomed}: {e}") from e
        log.info("%s: deleted", self.directory)

    def __repr__(self) -> str:
        return f"Log({self.directory!r}, start={self.log_start_offset}, end={self.log_end_offset}, hw={self._hw})"
