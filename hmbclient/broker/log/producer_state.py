"""Producer state of one partition: what an idempotent producer already wrote here.

Kafka's ``ProducerStateManager`` in our nouns. For every producer id seen in the log the state
keeps its epoch, the metadata of its last :data:`BATCHES_TO_RETAIN` (5) batches (first/last
sequence, first/last offset, max timestamp) and its last timestamp. The log owns one
:class:`ProducerStateManager`; every call happens under the log's lock.

Contract of a leader's append (``check_batch``, a pure function of the entry and the batch
header; ``ProducerStateManager.prepare`` applies it to every batch of a payload in order):

- Case A (duplicate): same producer and epoch, and the batch's sequence range equals one of the
  5 retained batches: nothing is appended and the answer is success with that batch's
  original offsets (Kafka answers DUPLICATE_SEQUENCE_NUMBER this way since 1.0).
- Case B (fenced): an epoch older than the one held: INVALID_PRODUCER_EPOCH.
- Case C (new producer): no entry: base sequence 0 appends; any other is UNKNOWN_PRODUCER_ID
  (a producer id never issued, or whose state expired or was deleted with the log).
- Case D (new epoch): base sequence 0 appends (the retained batches are forgotten); any other
  is OUT_OF_ORDER_SEQUENCE_NUMBER.
- Case E (same epoch): the base sequence follows the last one (``last + 1``, wrapping from
  2**31-1 to 0) and appends; anything else (a gap, a replay older than the window, a huge
  sequence) is OUT_OF_ORDER_SEQUENCE_NUMBER.
- Case F (a transaction marker, KIP-98): no sequence check; an epoch older than the one held
  is INVALID_PRODUCER_EPOCH. The marker keeps the producer's batches (its sequences go on
  across transactions); one of a newer epoch (the abort of a fenced producer) starts that
  epoch with none.

A refused batch refuses the whole payload, and nothing of it is stored. Batches without a
producer id (-1) and v0/v1 entries carry no state and are never checked.

Replicas and rebuilds (``apply``) take the batches as the leader wrote them, with no check, so a
follower's state equals the leader's for the same log prefix and a new leader recognises the
last batches of the old one.

Durability (invariant: the state describes exactly the batches below ``end_offset``):

- A snapshot ``<offset:020d>.snapshot`` holds the state of the log prefix below ``offset``; the
  log writes one when it rolls a segment (``offset`` = the new segment's base) and at a clean
  close (the log end). Written to ``.tmp``, fsynced, renamed.
- Start-up loads the newest snapshot at or below the log end and rebuilds from there by reading
  batch headers to the log end (after an unclean shutdown: the active segment). With no sound
  snapshot the rebuild reads the active segment: a roll snapshots any state that has (or ever
  had) producers, so no idempotent batch written by this code lies before it (a log older
  than producer state is not searched, as Kafka does for logs without snapshots). A snapshot
  that fails its CRC is deleted with a warning and the next older one is tried.
- Truncation (KIP-101 follower truncation) deletes the snapshots past the new end and reloads
  the same way; retention drops producers whose last batch is below the new log start and the
  snapshots below it; ``remove_expired`` drops producers silent for
  ``producer.id.expiration.ms`` (Kafka's name and default, 24 hours).

Transactions (KIP-98): each entry also keeps the first offset of its producer's open
transaction here (set by its first transactional batch, cleared by a marker) and the
coordinator epoch of its last marker, so a rebuild knows the open transactions (the log's last
stable offset); ``apply`` reports each transaction a replayed marker closes, from which the log
rebuilds its aborted-transaction index. A producer with a transaction open never expires.

Snapshot file layout (big-endian; not Kafka's, which keeps one batch per producer; version 1,
without txn_first_offset and coordinator_epoch, is still read)::

    version:int16(2) crc:uint32(crc32c of what follows) count:int32
    count x [producer_id:int64 epoch:int16 last_timestamp:int64 txn_first_offset:int64
             coordinator_epoch:int32 batches:int8
             batches x [first_seq:int32 last_seq:int32 first_offset:int64 last_offset:int64 max_timestamp:int64]]
"""

from __future__ import annotations

import enum
import logging
import os
import re
import struct
from collections.abc import Callable, Iterable
from typing import NamedTuple

from crc32c import crc32c

from hmbclient.broker.log.checkpoint import TMP_SUFFIX, fsync_dir
from hmbclient.errors import CorruptRecordError, ErrorCode, StorageError, for_code
from hmbclient.protocol.records.control import control_record, decode_end_txn_marker

__all__ = [
    "BATCHES_TO_RETAIN",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "SNAPSHOT_SUFFIX",
    "BatchHeader",
    "BatchMetadata",
    "Decision",
    "ProducerStateEntry",
    "ProducerStateManager",
    "Verdict",
    "apply_batch",
    "check_batch",
    "in_sequence",
    "last_sequence",
    "producer_batches",
]

log = logging.getLogger("hmbclient.broker.log.producer_state")

BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_INT32_MAX = 2**31 - 1
_SNAPSHOT_VERSION = 2  # 1: without txn_first_offset / coordinator_epoch (still read)

# RecordBatch v2 header up to the record count (see protocol.records.v2): baseOffset, batchLength,
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, firstTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence.
_V2_FIELDS = struct.Struct(">qiibIhiqqqhi")
_V2_HEADER = _V2_FIELDS.size  # 57
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")

_snap_head = struct.Struct(">hIi")
_snap_entry_v1 = struct.Struct(">qhqb")
_snap_entry = struct.Struct(">qhqqib")
_snap_batch = struct.Struct(">iiqqq")



def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record (sequences wrap from 2**31-1 to 0)."""
    s = base_sequence + last_offset_delta
    return s - _INT32_MAX - 1 if s > _INT32_MAX else s


class BatchHeader(NamedTuple):
    """The producer fields of one RecordBatch v2 and where the log put it."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False
    #: a commit/abort marker (KIP-98): no sequence, only its epoch counts
    is_control: bool = False
    #: a marker's type (0 ABORT, 1 COMMIT) and coordinator epoch; -1 for data batches
    control_type: int = -1
    coordinator_epoch: int = -1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerStateEntry(NamedTuple):
    """One producer's state in one partition (immutable: updates make a new entry)."""

    producer_id: int
    epoch: int
    batches: tuple[BatchMetadata, ...]
    last_timestamp: int
    #: first offset of the producer's open transaction here (KIP-98), -1 when none is open
    txn_first_offset: int = -1
    #: coordinator epoch of the producer's last marker here, -1 before any
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, batch: BatchHeader) -> BatchMetadata | None:
        if batch.producer_epoch != self.epoch:
            return None
        first, last = batch.base_sequence, batch.last_sequence
        for b in self.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        return None


class Verdict(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    REFUSE = "refuse"


class Decision(NamedTuple):
    verdict: Verdict
    error_code: int = ErrorCode.NONE
    reason: str = ""
    duplicate: BatchMetadata | None = None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``next_seq`` directly follows ``last_seq`` (sequences wrap from 2**31-1 to 0)."""
    return next_seq == last_seq + 1 or (last_seq == _INT32_MAX and next_seq == 0)


_APPEND = Decision(Verdict.APPEND)


def check_batch(entry: ProducerStateEntry | None, batch: BatchHeader) -> Decision:
    """Decide a leader's append of one idempotent batch (the cases of the module docstring)."""
    pid, epoch, seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
    if batch.is_control:  # Case F: a transaction marker carries no sequence
        if entry is not None and epoch < entry.epoch:
            return Decision(
                Verdict.REFUSE, ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {pid}: marker epoch {epoch} is older than the current epoch {entry.epoch}"
            )
        return _APPEND
    # Case E first, being the common one: a batch that follows the last one cannot equal a
    # retained batch (their sequences are all at or below the last), so Case A cannot apply.
    if entry is not None and epoch == entry.epoch and entry.batches and in_sequence(entry.batches[-1].last_seq, seq):
        return _APPEND
    if entry is not None:
        dup = entry.find_duplicate(batch)
        if dup is not None:  # Case A
            return Decision(Verdict.DUPLICATE, duplicate=dup)
        if epoch < entry.epoch:  # Case B
            return Decision(
                Verdict.REFUSE, ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {pid}: epoch {epoch} is older than the current epoch {entry.epoch}"
            )
    if entry is None:  # Case C
        if seq != 0:
            return Decision(
                Verdict.REFUSE, ErrorCode.UNKNOWN_PRODUCER_ID, f"producer {pid} is unknown here and its first batch has sequence {seq}, not 0"
            )
        return _APPEND
    if epoch != entry.epoch:  # Case D
        if seq != 0:
            return Decision(
                Verdict.REFUSE, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, f"producer {pid}: new epoch {epoch} starts at sequence {seq}, not 0"
            )
        return _APPEND
    if in_sequence(entry.last_seq, seq):  # Case E (an entry without batches: seq must be 0)
        return _APPEND
    return Decision(
        Verdict.REFUSE,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        f"producer {pid} epoch {epoch}: sequence {seq} does not follow the last sequence {entry.last_seq}",
    )


def _check_epoch(entry: ProducerStateEntry | None, batch: BatchHeader) -> Decision:
    if entry is not None and batch.producer_epoch < entry.epoch:
        return Decision(
            Verdict.REFUSE, ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {batch.producer_id}: epoch {batch.producer_epoch} is older than the current epoch {entry.epoch}"
        )
    return _APPEND


def apply_batch(entry: ProducerStateEntry | None, batch: BatchHeader) -> ProducerStateEntry:
    """The entry after ``batch`` was written (no check: leaders check first, replicas trust)."""
    if batch.is_control:
        # A marker adds no sequence and closes the open transaction; one of a newer epoch (a
        # fenced producer's abort) starts the new epoch with no batches, so its producer's
        # first batch is sequence 0.
        if entry is not None and entry.epoch == batch.producer_epoch:
            return ProducerStateEntry(entry.producer_id, entry.epoch, entry.batches, max(entry.last_timestamp, batch.max_timestamp), -1, batch.coordinator_epoch)
        return ProducerStateEntry(batch.producer_id, batch.producer_epoch, (), batch.max_timestamp, -1, batch.coordinator_epoch)
    pid, epoch, first_seq, last_seq, first_offset, last_offset, max_ts, txn, _, _, _ = batch
    meta = BatchMetadata(first_seq, last_seq, first_offset, last_offset, max_ts)
    if entry is None:
        return ProducerStateEntry(pid, epoch, (meta,), max_ts, first_offset if txn else -1)
    # KIP-98: the first transactional batch opens the producer's transaction here
    open_at = entry.txn_first_offset
    if txn and open_at < 0:
        open_at = first_offset
    if entry.epoch != epoch:
        return ProducerStateEntry(pid, epoch, (meta,), max(entry.last_timestamp, max_ts), open_at, entry.coordinator_epoch)
    kept = entry.batches
    batches = (*kept[1:], meta) if len(kept) >= BATCHES_TO_RETAIN else (*kept, meta)
    return ProducerStateEntry(pid, epoch, batches, max(entry.last_timestamp, max_ts), open_at, entry.coordinator_epoch)


def producer_batches(buf: bytes | bytearray | memoryview, limit: int | None = None) -> list[BatchHeader]:
    """The idempotent v2 batches of a validated payload with offsets assigned (in order).
    Entries of other formats and batches without a producer id are skipped."""
    out: list[BatchHeader] = []
    n = len(buf) if limit is None else limit
    pos = 0
    unpack = _V2_FIELDS.unpack_from
    while pos + _V2_HEADER <= n:
        # One unpack per batch: this runs on every append (the produce path).
        base, length, _epoch, magic, _crc, attrs, delta, _first_ts, max_ts, pid, epoch, seq = unpack(buf, pos)
        if magic >= 2 and pid >= 0:
            s = seq + delta
            last = s - _INT32_MAX - 1 if s > _INT32_MAX else s
            if attrs & 0x20:  # a marker (KIP-98): its type and coordinator epoch too
                out.append(BatchHeader(pid, epoch, seq, last, base, base + delta, max_ts, bool(attrs & 0x10), True, *_marker_of(buf, pos)))
            else:
                out.append(BatchHeader(pid, epoch, seq, last, base, base + delta, max_ts, bool(attrs & 0x10)))
        pos += 12 + length
    return out


def _marker_of(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(type, coordinator epoch) of the control batch at ``pos``; (-1, -1) for a control record
    that is not a commit/abort marker (or is malformed: the CRC checks already passed)."""
    try:
        key, value = control_record(buf, pos)
        m = decode_end_txn_marker(key, value)
    except CorruptRecordError:
        return -1, -1
    return int(m.control_type), m.coordinator_epoch


#: ``(producer_id, first_offset, marker_offset, aborted)`` of a transaction a replayed marker
#: closed (the log rebuilds its aborted-transaction index from these).
CompletedCallback = Callable[[int, int, int, bool], None]


class _Plan(NamedTuple):
    duplicate: BatchMetadata | None
    updates: dict[int, ProducerStateEntry]


# A reader of the log's bytes from an offset to the log end: yields chunks of whole entries.
LogReader = Callable[[int], Iterable[bytes]]


class ProducerStateManager:
    """The producer state of one partition (see the module docstring). Not thread-safe: the
    log calls it under its lock.

    Args:
        directory: the partition folder (snapshots live there).
        expiration_ms: ``producer.id.expiration.ms``.
    """

    def __init__(self, directory: str, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.end_offset = 0  # the state describes the batches below this offset
        self._has_snapshots = bool(self.snapshot_offsets())

    # -- leader appends ------------------------------------------------------------------------
    def prepare(self, batches: list[BatchHeader], check_sequence: bool = True) -> _Plan:
        """Check a payload's idempotent batches in order.

        ``check_sequence`` False is a coordinator's append (TxnOffsetCommit, markers): only
        an epoch older than the producer's is refused (Kafka checks sequences of clients only).

        Returns:
            ``(duplicate, updates)``: the duplicate's metadata (append nothing; answer its
            offsets) or None, and the entries to ``commit`` once the bytes are written.
        Raises:
            BrokerError: INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID or
                OUT_OF_ORDER_SEQUENCE_NUMBER (nothing may be written).
        """
        if len(batches) == 1 and check_sequence:  # what producers send: one batch per partition per request
            b = batches[0]
            current = self.producers.get(b.producer_id)
            if check_batch(current, b) is _APPEND:
                return _Plan(None, {b.producer_id: apply_batch(current, b)})
        updates: dict[int, ProducerStateEntry] = {}
        for b in batches:
            current = updates.get(b.producer_id) or self.producers.get(b.producer_id)
            d = check_batch(current, b) if check_sequence else _check_epoch(current, b)
            if d.verdict is Verdict.DUPLICATE:
                return _Plan(d.duplicate, {})
            if d.verdict is Verdict.REFUSE:
                raise for_code(d.error_code)(d.reason)
            updates[b.producer_id] = apply_batch(current, b)
        return _Plan(None, updates)

    def commit(self, updates: dict[int, ProducerStateEntry], end_offset: int) -> None:
        self.producers.update(updates)
        self.end_offset = end_offset

    # -- replicas and rebuilds -----------------------------------------------------------------
    def apply(self, batches: Iterable[BatchHeader], end_offset: int, on_completed: CompletedCallback | None = None) -> None:
        producers = self.producers
        for b in batches:
            prev = producers.get(b.producer_id)
            if on_completed is not None and b.is_control and prev is not None and prev.txn_first_offset >= 0 and b.control_type >= 0:
                on_completed(b.producer_id, prev.txn_first_offset, b.first_offset, b.control_type == 0)
            producers[b.producer_id] = apply_batch(prev, b)
        self.end_offset = end_offset

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction (KIP-98)."""
        return {pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def advance(self, end_offset: int) -> None:
        """Batches without producer state were appended up to ``end_offset``."""
        self.end_offset = end_offset

    # -- housekeeping --------------------------------------------------------------------------
    def remove_expired(self, now_ms: int) -> int:
        # a producer with a transaction open is kept until its marker (as Kafka)
        gone = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= self.expiration_ms and e.txn_first_offset < 0]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def truncate_head(self, log_start_offset: int) -> None:
        """Retention moved the log start: forget producers whose last batch is gone, and the
        snapshots below the log start."""
        gone = [pid for pid, e in self.producers.items() if e.last_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]
        for off in self.snapshot_offsets():
            if off < log_start_offset:
                self._delete_snapshot(off)

    def clear(self, end_offset: int) -> None:
        """The log was emptied and starts at ``end_offset``: no state, no snapshot."""
        self.producers = {}
        self.end_offset = end_offset
        for off in self.snapshot_offsets():
            self._delete_snapshot(off)

    # -- snapshots -----------------------------------------------------------------------------
    def _path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")

    def snapshot_offsets(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except OSError as e:
            raise StorageError(f"cannot list {self.directory}: {e}") from e
        return sorted(int(m.group(1)) for m in map(SNAPSHOT_FILE.match, names) if m)

    def _delete_snapshot(self, offset: int) -> None:
        try:
            os.unlink(self._path(offset))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"cannot delete {self._path(offset)}: {e}") from e

    def take_snapshot(self) -> None:
        """Write the state as ``<end_offset>.snapshot`` (fsynced, then renamed into place).

        A partition that never had idempotent producers (no state and no snapshot) writes
        none: its rebuild finds nothing anyway, and plain topics keep their folders as before.
        """
        if not self.producers and not self._has_snapshots:
            return
        self._has_snapshots = True
        body: list[bytes] = [_i32.pack(len(self.producers))]
        for e in self.producers.values():
            body.append(_snap_entry.pack(e.producer_id, e.epoch, e.last_timestamp, e.txn_first_offset, e.coordinator_epoch, len(e.batches)))
            body.extend(_snap_batch.pack(*b) for b in e.batches)
        data = b"".join(body)
        blob = _i16.pack(_SNAPSHOT_VERSION) + struct.pack(">I", crc32c(data)) + data
        path = self._path(self.end_offset)
        tmp = path + TMP_SUFFIX
        try:
            with open(tmp, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(self.directory)
        except OSError as e:
            raise StorageError(f"cannot write producer state snapshot {path}: {e}") from e

    def _read_snapshot(self, offset: int) -> dict[int, ProducerStateEntry] | None:
        path = self._path(offset)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e}") from e
        try:
            version, crc, count = _snap_head.unpack_from(blob, 0)
            if version not in (1, _SNAPSHOT_VERSION) or crc32c(blob[6:]) != crc:
                return None
            pos = _snap_head.size
            out: dict[int, ProducerStateEntry] = {}
            for _ in range(count):
                if version == 1:
                    pid, epoch, last_ts, nb = _snap_entry_v1.unpack_from(blob, pos)
                    tfo, cepoch = -1, -1
                    pos += _snap_entry_v1.size
                else:
                    pid, epoch, last_ts, tfo, cepoch, nb = _snap_entry.unpack_from(blob, pos)
                    pos += _snap_entry.size
                batches = []
                for _ in range(nb):
                    batches.append(BatchMetadata(*_snap_batch.unpack_from(blob, pos)))
                    pos += _snap_batch.size
                out[pid] = ProducerStateEntry(pid, epoch, tuple(batches), last_ts, tfo, cepoch)
            if pos != len(blob):
                return None
            return out
        except struct.error:
            return None

    def load(
        self, log_start_offset: int, log_end_offset: int, fallback_start: int, read_from: LogReader, on_completed: CompletedCallback | None = None
    ) -> int:
        """Rebuild the state of ``[.., log_end_offset)``: the newest sound snapshot at or below
        the end (snapshots past it are deleted), then the batches after it read from the log.

        Args:
            log_start_offset: the log start (producers whose last batch is below it are gone).
            log_end_offset: the log end.
            fallback_start: where to start reading when there is no sound snapshot.
            read_from: ``read_from(offset)`` yields the log's bytes from the entry holding
                ``offset`` to the end, in chunks of whole entries.
            on_completed: told of every transaction a replayed marker closes.
        Returns:
            The offset the replay started at (the snapshot's, or ``fallback_start``).
        """
        self.producers = {}
        start = fallback_start
        for off in reversed(self.snapshot_offsets()):
            if off > log_end_offset:
                self._delete_snapshot(off)
                continue
            state = self._read_snapshot(off)
            if state is None:
                log.warning("%s: producer state snapshot %d is corrupt: deleted", self.directory, off)
                self._delete_snapshot(off)
                continue
            self.producers = state
            start = off
            break
        self.end_offset = start
        if start < log_end_offset:
            for chunk in read_from(max(start, log_start_offset)):
                self.apply((b for b in producer_batches(chunk) if b.first_offset >= start), log_end_offset, on_completed)
        self.end_offset = log_end_offset
        self.truncate_head(log_start_offset)
        return start

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.directory!r}, producers={len(self.producers)}, end={self.end_offset})"

