"""OffsetManager: the group offset store (OffsetCommit, OffsetFetch, FindCoordinator) and the
store of the group coordinator's group records.

As in Kafka 0.8.2: a group's coordinator is the leader of partition
``abs(java_hash(group)) % offsets_topic_num_partitions`` of the internal, compacted topic
``__consumer_offsets`` (created on first use). A commit is appended through the replica
manager (acks -1, the same DelayedProduce path as any produce) and put in the in-memory cache
only when that append completes, so a fetch never returns an offset the log does not hold.
Fetches are served from the cache.

Log format (Kafka's, so Kafka tooling could read it): key = version 1 int16, group string,
topic string, partition int32; value = version 1 int16, offset int64, metadata string,
commit timestamp int64, expire timestamp int64; one RecordBatch v2 per commit request.

Group records (Kafka's, Kafka 0.9+): key = version 2 int16, group string; value = version
int16 (we write 3, read 0-3), protocol_type string, generation int32, protocol nullable string,
leader nullable string, [v2+ current_state_timestamp int64], members [member_id string, [v3+
group_instance_id nullable string], client_id string, client_host string, [v1+
rebalance_timeout int32], session_timeout int32, subscription bytes, assignment bytes]. The
coordinator writes one when a generation's assignment is decided (before any member sees it)
and when a group becomes empty; a null value (tombstone) deletes the group.

Loading: when this broker starts leading an offsets partition (start-up, a leader move), a
thread replays that partition into the cache and hands the partition's groups (the last record
of each; groups with offsets only come back Empty) to the group coordinator; until it is done,
requests for its groups get ErrorCode.COORDINATOR_LOAD_IN_PROGRESS (14), which clients retry
(OffsetsLoadInProgress in 0.8.2). When the leadership moves away, the partition's offsets and
groups are dropped here. Requests for a group this broker does not coordinate get
ErrorCode.NOT_COORDINATOR (16).

OffsetCommit/OffsetFetch v0 with a ZooKeeper (Kafka 0.8.2): the ZooKeeper group offsets
``/consumers/<group>/offsets/<topic>/<partition>`` (the decimal next offset; metadata is not
kept), served by EVERY broker, not only the coordinator, so a client sending v0 to any broker
and a ZooKeeper-group consumer (``offsets.storage=zookeeper``) see each other's commits. A
commit writes the znodes (parents created) and answers NONE per partition; a fetch answers
offset -1 with error NONE for a partition without a committed offset (0.8.2's answer;
0.8.1 answered UNKNOWN_TOPIC_OR_PARTITION, which kafka-python also accepts as "nothing
committed"). A group name that cannot be a znode name answers INVALID_GROUP_ID, an illegal topic
name INVALID_TOPIC_EXCEPTION, metadata over MAX_METADATA_BYTES OFFSET_METADATA_TOO_LARGE, and
ZooKeeper unreachable or slower than the store's bound COORDINATOR_NOT_AVAILABLE (retriable).
The ZooKeeper calls run on a small pool of this manager's own threads, never on the thread that
handed the request over (it may be a network processor). A standalone broker (no ZooKeeper)
serves v0 from this same store, like v1+.

Transactional offset commits (TxnOffsetCommit, KIP-98; the pure rules are
:mod:`hmbclient.broker.transaction.offsets`): the offsets are appended as ordinary commit
records in a transactional batch of the producer (its id and epoch, base sequence 0, as a
coordinator's append: the log checks the epoch, not the sequence) and kept *pending*, invisible
to OffsetFetch, until the producer's marker reaches the group's offsets partition
(``complete_txn``, called by the marker writer): a COMMIT makes them the group's offsets, an
ABORT drops them. Loading replays the same: transactional records pend until their marker. A
pending offset wins over the committed one when its marker commits it (Kafka also compares log
positions with a plain commit appended meanwhile; we do not).

From v1 a commit names a generation and member: the coordinator checks them against the group
(Kafka's rules: a member of the current generation, or no generation at all for a group without
members). v1+ always go to the coordinator and ``__consumer_offsets``.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from hmbclient.broker.controller.decisions import offsets_topic_replication_factor
from hmbclient.broker.coordinator.state import GroupRecord, MemberRecord
from hmbclient.broker.metadata import (
    NO_LEADER,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    MetadataCache,
)
from hmbclient.broker.replica_manager import ReplicaManager
from hmbclient.broker.results import AppendResult
from hmbclient.broker.topics import TopicManager
from hmbclient.broker.transaction import offsets as txn_offsets
from hmbclient.clock import wall_ms
from hmbclient.errors import CoordinationError, ErrorCode, HmbError, ProtocolError
from hmbclient.protocol import records
from hmbclient.protocol.records.control import (
    ControlType,
    batch_header,
    control_record,
    decode_control_type,
    encode_transactional_batch,
)
from hmbclient.protocol.types import Array, Bytes, Int32, Int64, NullableString, String, Struct
from hmbclient.zkpaths import is_valid_topic_name

if TYPE_CHECKING:
    from hmbclient.broker.config import BrokerConfig
    from hmbclient.broker.controller.store import CoordinationStore

__all__ = [
    "OffsetManager",
    "OFFSETS_TOPIC",
    "GroupHooks",
    "java_string_hash",
    "partition_for_group",
    "encode_group_key",
    "decode_group_key",
    "encode_group_value",
    "decode_group_value",
]

log = logging.getLogger("hmbclient.broker.offsets")

MAX_METADATA_BYTES = 4096
_FIND_COORDINATOR_WAIT_MS = 3000
#: How long a commit or a group record may wait for the ISR (Kafka's offsets.commit.timeout.ms).
COMMIT_TIMEOUT_MS = 5000


_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` of Java (UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    for unit in struct.unpack(f">{len(s.encode('utf-16-be')) // 2}H", s.encode("utf-16-be")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_group(group: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(group.hashCode) % n`` (abs maps MIN_VALUE to 0 via a mask)."""
    return (java_string_hash(group) & 0x7FFFFFFF) % num_partitions


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return _i16.pack(len(b)) + b


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _i16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return "", pos
    return buf[pos : pos + n].decode("utf-8"), pos + n


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return _i16.pack(1) + _str(group) + _str(topic) + _i32.pack(partition)


def encode_value(offset: int, metadata: str, commit_ts: int, expire_ts: int) -> bytes:
    return _i16.pack(1) + _i64.pack(offset) + _str(metadata) + _i64.pack(commit_ts) + _i64.pack(expire_ts)


def decode_key(buf: bytes) -> tuple[str, str, int] | None:
    (version,) = _i16.unpack_from(buf, 0)
    if version not in (0, 1):
        return None  # group metadata (version 2) and newer: not ours
    group, pos = _read_str(buf, 2)
    topic, pos = _read_str(buf, pos)
    (partition,) = _i32.unpack_from(buf, pos)
    return group, topic, partition


def decode_value(buf: bytes) -> tuple[int, str, int]:
    (version,) = _i16.unpack_from(buf, 0)
    (offset,) = _i64.unpack_from(buf, 2)
    metadata, pos = _read_str(buf, 10)
    (ts,) = _i64.unpack_from(buf, pos)
    return offset, metadata, ts


GROUP_KEY_VERSION = 2
GROUP_VALUE_VERSION = 3


def encode_group_key(group: str) -> bytes:
    return _i16.pack(GROUP_KEY_VERSION) + _str(group)


def decode_group_key(buf: bytes) -> str | None:
    """The group of a group-record key; None for any other key (offset commits: version 0/1)."""
    (version,) = _i16.unpack_from(buf, 0)
    if version != GROUP_KEY_VERSION:
        return None
    group, _ = _read_str(buf, 2)
    return group


def _group_value_schema(version: int) -> Struct:
    member: list[Any] = [("member_id", String)]
    if version >= 3:
        member.append(("group_instance_id", NullableString))
    member += [("client_id", String), ("client_host", String)]
    if version >= 1:
        member.append(("rebalance_timeout", Int32))
    member += [("session_timeout", Int32), ("subscription", Bytes), ("assignment", Bytes)]
    fields: list[Any] = [("protocol_type", String), ("generation", Int32), ("protocol", NullableString), ("leader", NullableString)]
    if version >= 2:
        fields.append(("current_state_timestamp", Int64))
    fields.append(("members", Array(*member, name="member_metadata")))
    return Struct(f"GroupMetadataValue_v{version}", fields)


_GROUP_VALUE_SCHEMAS = {v: _group_value_schema(v) for v in range(GROUP_VALUE_VERSION + 1)}


def encode_group_value(record: GroupRecord) -> bytes:
    """A group record in value version 3."""
    schema = _GROUP_VALUE_SCHEMAS[GROUP_VALUE_VERSION]
    members = [
        (m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms, m.subscription, m.assignment)
        for m in record.members
    ]
    out: list[Any] = [_i16.pack(GROUP_VALUE_VERSION)]
    schema.write(out, (record.protocol_type, record.generation_id, record.protocol_name, record.leader_id, record.state_timestamp_ms, members))
    return b"".join(out)


def decode_group_value(buf: bytes) -> GroupRecord:
    """A group record of value version 0-3 (older versions lack fields: a v0 member's
    rebalance timeout is its session timeout, as in Kafka).

    Raises:
        ProtocolError: an unknown version or malformed bytes.
    """
    (version,) = _i16.unpack_from(buf, 0)
    schema = _GROUP_VALUE_SCHEMAS.get(version)
    if schema is None:
        raise ProtocolError(f"unknown group metadata value version {version}")
    v = schema.decode(memoryview(buf), 2, exact=False)
    members = tuple(
        MemberRecord(
            m.member_id,
            m.group_instance_id if version >= 3 else None,
            m.client_id,
            m.client_host,
            m.rebalance_timeout if version >= 1 else m.session_timeout,
            m.session_timeout,
            bytes(m.subscription),
            bytes(m.assignment),
        )
        for m in v.members
    )
    return GroupRecord(v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp if version >= 2 else -1, members)


def _commit_error(code: int) -> int:
    """An append error of a commit as the client sees it (Kafka's maybeConvertOffsetCommitError)."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code


OffsetEntry = tuple[int, str, int]  # offset, metadata, commit timestamp

#: An (Txn)OffsetCommit's parts: per partition a refusal (results) or a record and its entry.
_CommitParts = tuple[dict[tuple[str, int], int], list[tuple[bytes, bytes, int]], dict[tuple[str, int], OffsetEntry]]


def _commit_records(group: str, topics: Any, code: int, now: int, retention_ms: int,
                    timestamp_of: Callable[[Any], int] | None = None) -> _CommitParts:
    """The records of an OffsetCommit or TxnOffsetCommit (pure): each partition of ``topics``
    is refused with the group's ``code`` when it is not NONE, with OFFSET_METADATA_TOO_LARGE
    when its metadata is over MAX_METADATA_BYTES, else becomes a commit record (committed at
    ``timestamp_of(partition)`` or ``now``, expiring ``retention_ms`` later, saturated at
    int64: a retention of up to 2^63-1 ms is legal on the wire) and its cache entry.

    Returns:
        ``(results, items, pending)``: refusals by partition, ``(key, value, now)`` records,
        and ``(offset, metadata, commit timestamp)`` by partition.
    """
    results: dict[tuple[str, int], int] = {}
    items: list[tuple[bytes, bytes, int]] = []
    pending: dict[tuple[str, int], OffsetEntry] = {}
    for t in topics:
        for p in t.partitions:
            tp = (t.topic, p.partition)
            if code:
                results[tp] = code
                continue
            metadata = p.metadata or ""
            if len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            ts = now if timestamp_of is None else timestamp_of(p)
            expire = min(ts + retention_ms, 2**63 - 1)
            items.append((encode_key(group, t.topic, p.partition), encode_value(p.offset, metadata, ts, expire), now))
            pending[tp] = (p.offset, metadata, ts)
    return results, items, pending


def _append_error(outcome: Mapping[tuple[str, int], AppendResult]) -> tuple[int, AppendResult | None]:
    """The error of a commit's one-partition append, and its result (None: nothing appended)."""
    r = next(iter(outcome.values()), None)
    return (r.error_code if r is not None else ErrorCode.NONE), r


def _commit_answer(req: Any, results: Mapping[tuple[str, int], int]) -> Any:
    """The (Txn)OffsetCommit answer: every partition of ``req`` with its code in ``results``
    (NONE when absent)."""
    resp_cls = type(req).RESPONSE_TYPE
    shape = resp_cls.nested("topics", "partitions")
    topics = [(t.topic, [shape.build(partition=p.partition, error_code=results.get((t.topic, p.partition), ErrorCode.NONE))
                         for p in t.partitions]) for t in req.topics]
    return resp_cls.build(throttle_time_ms=0, topics=topics)


def _group_record_error(code: int) -> int:
    """An append error of a group record as the coordinator answers it (Kafka's storeGroup):
    a timed-out write makes the members rejoin; a record too large for the log is the server's
    failure."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return code


class GroupHooks(Protocol):
    """What the offset manager asks of the group coordinator."""

    def load_partition(self, partition: int, groups: Mapping[str, GroupRecord | None]) -> None:
        """The groups of an offsets partition this broker now leads (None: offsets only)."""

    def unload_partition(self, partition: int) -> None:
        """This broker no longer leads the offsets partition: forget its groups."""

    def validate_offset_commit(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None, *, api_version: int = 9) -> int:
        """May the commit be stored? NONE or the error code for every partition."""

    def validate_offset_fetch(self, group_id: str, member_id: str, member_epoch: int) -> int:
        """OffsetFetch v9+ naming its member: NONE or the group's error code."""


class OffsetManager:
    """Group offsets of the groups this broker coordinates.

    Args:
        broker_id: this broker.
        metadata: this broker's metadata cache.
        replica_manager: to append commits and to read partitions while loading.
        topics: to create the offsets topic on first use.
        config: ``offsets_topic_num_partitions``, ``offsets_retention_minutes``.
        store: the coordination store; one with ZooKeeper serves v0 from the ZooKeeper group
            offsets (None, or a store without ZooKeeper: v0 is served like v1+).
    """

    def __init__(self, broker_id: int, metadata: MetadataCache, replica_manager: ReplicaManager, topics: TopicManager, config: BrokerConfig, store: CoordinationStore | None = None) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.rm = replica_manager
        self.topics = topics
        self.num_partitions = config.offsets_topic_num_partitions
        self.replication_factor = config.offsets_topic_replication_factor
        self.retention_ms = config.offsets_retention_minutes * 60_000
        self._cache: dict[str, dict[tuple[str, int], OffsetEntry]] = {}
        #: group -> its pending transactional offsets (values are OffsetEntry)
        self._txn: dict[str, txn_offsets.GroupTxnOffsets] = {}
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._lock = threading.Lock()
        self._running = False
        #: the group coordinator (None: no groups, offsets only), set by the broker
        self.coordinator: GroupHooks | None = None
        #: the transaction coordinator (FindCoordinator key_type 1), set by the broker
        self.transactions: Any = None
        self._zk_store = store if store is not None and store.offsets_in_zookeeper else None
        # ZooKeeper I/O of v0 requests: off the caller's thread, a few at a time.
        self._zk_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"broker-{broker_id}-zk-offsets") if self._zk_store is not None else None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        # Coordination moves with the leadership of the group's offsets partition: load on
        # becoming its leader, forget on losing it.
        self.rm.add_leadership_listener(self._on_leadership)

    def shutdown(self) -> None:
        self._running = False
        if self._zk_pool is not None:
            self._zk_pool.shutdown(wait=False, cancel_futures=True)

    def _on_leadership(self, topic: str, partition: int, leads: bool) -> None:
        if topic == OFFSETS_TOPIC:
            self._maybe_load(partition)

    def _maybe_load(self, partition: int) -> None:
        """Start loading ``partition`` if this broker now leads it; forget it if not."""
        leads = self.rm.is_leader(OFFSETS_TOPIC, partition)
        if not leads:
            with self._lock:
                self._loaded.discard(partition)
                for g in [g for g in self._cache if self.partition_for(g) == partition]:
                    del self._cache[g]
                for g in [g for g in self._txn if self.partition_for(g) == partition]:
                    del self._txn[g]
            # Unconditionally (a no-op for a partition the coordinator does not have): a load
            # still running re-checks the leadership when it is done.
            if self.coordinator is not None:
                self.coordinator.unload_partition(partition)
            return
        with self._lock:
            if partition in self._loaded or partition in self._loading:
                return
            self._loading.add(partition)
        threading.Thread(target=self._load, args=(partition,), name=f"offsets-load-{partition}", daemon=True).start()

    def _load(self, partition: int) -> None:
        loaded: dict[str, dict[tuple[str, int], OffsetEntry]] = {}
        groups: dict[str, GroupRecord | None] = {}
        pend: dict[str, txn_offsets.GroupTxnOffsets] = {}
        n = 0
        try:
            # A new leader's log may end with entries its followers have not copied yet; they
            # will be committed (a leader never truncates), so the whole log is loaded.
            offsets_log = self.rm.logs.get_or_create(OFFSETS_TOPIC, partition)
            offset = offsets_log.log_start_offset
            end = offsets_log.log_end_offset
            while offset < end and self._running:
                found, _ = offsets_log.read(offset, 1 << 20, min_one_entry=True)
                if found is None:
                    break
                buf = found.read()
                entries, _ = records.scan_entries(buf, verify_crc=False)
                if not entries:
                    break
                mv = memoryview(buf)
                for e in entries:
                    offset = e.last_offset + 1
                    pid = -1
                    if e.magic >= 2:
                        hdr = batch_header(mv, e.position)
                        if hdr.is_control:
                            # a transaction marker: the producer's pending offsets end (KIP-98)
                            key, _value = control_record(mv, e.position)
                            ctype = decode_control_type(key)
                            if ctype in (ControlType.COMMIT, ControlType.ABORT):
                                self._complete_loaded(pend, loaded, hdr.producer_id, ctype == ControlType.COMMIT)
                            continue
                        if hdr.is_transactional:
                            pid = hdr.producer_id
                    for r in records.decode_records(bytes(mv[e.position : e.position + e.size])):
                        if r.key is None:
                            continue
                        k = decode_key(r.key)
                        if k is None:
                            self._load_group_record(r.key, r.value, groups)
                            continue
                        group, topic, part = k
                        if pid >= 0 and r.value is not None:
                            st = txn_offsets.prepare(pend.get(group, txn_offsets.GroupTxnOffsets()), pid, {(topic, part): decode_value(r.value)})
                            pend[group] = txn_offsets.appended(st, pid, [(topic, part)], r.offset)
                        elif r.value is None:  # a tombstone deletes the offset
                            loaded.get(group, {}).pop((topic, part), None)
                        else:
                            loaded.setdefault(group, {})[(topic, part)] = decode_value(r.value)
                        n += 1
        except (HmbError, struct.error, UnicodeDecodeError) as e:
            log.error("loading offsets partition %d failed: %s", partition, e)
        finally:
            # The coordinator gets the groups before the partition counts as loaded, so no
            # request finds the offsets loaded and the groups missing.
            if self.coordinator is not None:
                present: dict[str, GroupRecord | None] = {g: r for g, r in groups.items() if r is not None}
                present.update((g, None) for g, offs in loaded.items() if offs and g not in present)
                try:
                    self.coordinator.load_partition(partition, present)
                except Exception:
                    log.exception("loading the groups of %s-%d failed", OFFSETS_TOPIC, partition)
            # The leadership may have moved while we read: the listener that saw it move ran
            # before this check or will run after it, so either way nothing stale is kept.
            with self._lock:
                still_leader = self.rm.is_leader(OFFSETS_TOPIC, partition)
                self._loading.discard(partition)
                if still_leader:
                    for g, offs in loaded.items():
                        self._cache.setdefault(g, {}).update(offs)
                    for g, st in pend.items():
                        if txn_offsets.pending_producers(st):
                            self._txn[g] = st
                    self._loaded.add(partition)
            if not still_leader and self.coordinator is not None:
                self.coordinator.unload_partition(partition)
        log.info("loaded %d offset commits and %d groups from %s-%d", n, sum(1 for r in groups.values() if r is not None), OFFSETS_TOPIC, partition)

    @staticmethod
    def _complete_loaded(
        pend: dict[str, txn_offsets.GroupTxnOffsets], loaded: dict[str, dict[tuple[str, int], OffsetEntry]], producer_id: int, committed: bool
    ) -> None:
        for g, st in list(pend.items()):
            if producer_id in st.pending:
                pend[g], won = txn_offsets.complete(st, producer_id, committed, {})
                loaded.setdefault(g, {}).update({tp: c.value for tp, c in won.items()})

    def complete_txn(self, partition: int, producer_id: int, committed: bool) -> None:
        """A marker of ``producer_id`` reached offsets partition ``partition``: its pending
        transactional offsets there become committed (COMMIT) or are dropped (ABORT)."""
        with self._lock:
            for g, st in list(self._txn.items()):
                if producer_id not in st.pending or self.partition_for(g) != partition:
                    continue
                st, won = txn_offsets.complete(st, producer_id, committed, {})
                if won:
                    self._cache.setdefault(g, {}).update({tp: c.value for tp, c in won.items()})
                if txn_offsets.pending_producers(st):
                    self._txn[g] = st
                else:
                    del self._txn[g]

    def pending_txn_offsets(self, group: str) -> dict[int, dict[tuple[str, int], int]]:
        """producer id -> pending offsets of ``group`` (tests, tools)."""
        with self._lock:
            st = self._txn.get(group)
            return {} if st is None else {pid: {tp: c.value[0] for tp, c in offs.items()} for pid, offs in st.pending.items()}

    def handle_txn_offset_commit(self, header: Any, req: Any, channel: Any) -> None:
        """TxnOffsetCommit v0-2 (see the module docstring)."""
        group = req.group_id
        pid, epoch = req.producer_id, req.producer_epoch
        now = wall_ms()
        code = ErrorCode.INVALID_GROUP_ID if not group else self._group_state(group)
        results, items, pending = _commit_records(group, req.topics, code, now, self.retention_ms)

        def respond(outcome: dict[tuple[str, int], AppendResult] | None) -> None:
            if outcome is not None:
                err, r = _append_error(outcome)
                with self._lock:
                    st = self._txn.get(group, txn_offsets.GroupTxnOffsets())
                    if err == ErrorCode.NONE and r is not None:
                        st = txn_offsets.appended(st, pid, list(pending), r.base_offset)
                    else:
                        st = txn_offsets.failed(st, pid, list(pending))
                    if txn_offsets.pending_producers(st):
                        self._txn[group] = st
                    else:
                        self._txn.pop(group, None)
                for tp in pending:
                    results[tp] = _commit_error(err)
            channel.send(_commit_answer(req, results))

        if not items:
            respond(None)
            return
        try:
            buf = encode_transactional_batch(records.NONE, items, pid, epoch, 0, timestamp_ms=now)
        except ValueError:
            for tp in pending:
                results[tp] = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            respond(None)
            return
        with self._lock:
            self._txn[group] = txn_offsets.prepare(self._txn.get(group, txn_offsets.GroupTxnOffsets()), pid, pending)
        self.rm.append_messages(COMMIT_TIMEOUT_MS, -1, [(OFFSETS_TOPIC, self.partition_for(group), buf)], respond, allow_internal=True, origin="coordinator")

    @staticmethod
    def _load_group_record(key: Any, value: Any, groups: dict[str, GroupRecord | None]) -> None:
        try:
            group = decode_group_key(bytes(key))
            if group is None:
                return
            # The last record of a group wins; a tombstone deletes the group.
            groups[group] = None if value is None else decode_group_value(bytes(value))
        except (ProtocolError, struct.error, UnicodeDecodeError) as e:
            log.warning("skipping a malformed group record in %s: %s", OFFSETS_TOPIC, e)

    # -- coordinator lookup ----------------------------------------------------------------------
    def partition_for(self, group: str) -> int:
        return partition_for_group(group, self.num_partitions)

    def _ensure_topic(self) -> None:
        if not self.metadata.has_topic(OFFSETS_TOPIC):
            live = len(self.metadata.live_broker_ids()) or 1
            rf = offsets_topic_replication_factor(self.replication_factor, live)
            self.topics.create(OFFSETS_TOPIC, self.num_partitions, rf)

    def group_status(self, group: str) -> int:
        """NONE if this broker coordinates ``group`` and has it loaded, else the error:
        COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        return self._group_state(group)

    def _group_state(self, group: str) -> int:
        """0 if this broker coordinates ``group`` and has its offsets loaded, else the error."""
        self._ensure_topic()
        p = self.partition_for(group)
        leader = self.metadata.leader(OFFSETS_TOPIC, p)
        if leader is None or leader == NO_LEADER:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if leader != self.broker_id:
            return ErrorCode.NOT_COORDINATOR
        if not self.rm.is_leader(OFFSETS_TOPIC, p):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # the LeaderAndIsr is on its way
        with self._lock:
            if p in self._loaded:
                return ErrorCode.NONE
        self._maybe_load(p)
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    def is_loading(self) -> bool:
        with self._lock:
            return bool(self._loading)

    # -- handlers --------------------------------------------------------------------------------
    def handle_find_coordinator(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        if header.api_version == 0:
            key, key_type = req.group_id, 0
        else:
            key, key_type = req.key, req.key_type
        txns = self.transactions
        if key_type == 1 and txns is not None:
            if not key:
                channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message="empty transactional id", node_id=-1, host="", port=-1))
                return
            topic, partition = TRANSACTION_STATE_TOPIC, txns.partition_for(key)
            txns.ensure_topic()
        elif key_type != 0:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="transactions are not supported", node_id=-1, host="", port=-1))
            return
        else:
            topic, partition = OFFSETS_TOPIC, self.partition_for(key)
            self._ensure_topic()
        # As Metadata does: when this broker is the coordinator, a client is told its address on
        # the listener the request came in on, so it stays on its security protocol.
        session = getattr(channel, "session", None)
        here, listener = getattr(session, "advertised", None), getattr(session, "listener", None)

        def answer() -> None:
            leader = self.metadata.leader(topic, partition)
            ep = self.metadata.broker(leader) if leader is not None and leader >= 0 else None
            addr = None if ep is None else here if here and ep.node_id == self.broker_id else ep.address(listener)
            if ep is None or addr is None:
                why = "the coordinator's broker is down" if ep is None else f"the coordinator's broker has no {listener} listener"
                channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=why, node_id=-1, host="", port=-1))
                return
            host, port = addr
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, node_id=ep.node_id, host=host, port=port))

        # A just-created offsets topic is served once the controller elected its leaders: the
        # answer waits for that (bounded) instead of sending the client into a retry loop.
        self.topics.when_ready([topic], _FIND_COORDINATOR_WAIT_MS, answer)

    # -- v0: ZooKeeper group offsets (Kafka 0.8.2) -------------------------------------------------
    @staticmethod
    def _zk_name_error(group: Any, topic: Any) -> int:
        """NONE, or the error for a group or topic that cannot name an offsets znode."""
        if not isinstance(group, str) or not group or "/" in group or group in (".", ".."):
            return ErrorCode.INVALID_GROUP_ID
        if not is_valid_topic_name(topic):
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        return ErrorCode.NONE

    def _run_zk(self, work: Callable[[], None], fail: Callable[[], None]) -> None:
        pool = self._zk_pool
        try:
            if pool is None:
                raise RuntimeError("no ZooKeeper offsets pool")
            pool.submit(work)
        except RuntimeError:  # shut down: the client retries elsewhere
            fail()

    def _zk_offset_commit(self, req: Any, channel: Any) -> None:
        store = self._zk_store
        assert store is not None
        resp_cls = type(req).RESPONSE_TYPE
        shape = resp_cls.nested("topics", "partitions")
        group = req.group_id

        def answer(code_of: Callable[[str, Any], int]) -> None:
            topics = [(t.topic, [shape.build(partition=p.partition, error_code=code_of(t.topic, p)) for p in t.partitions]) for t in req.topics]
            channel.send(resp_cls.build(throttle_time_ms=0, topics=topics))

        def work() -> None:
            results: dict[tuple[str, int], int] = {}
            for t in req.topics:
                for p in t.partitions:
                    tp = (t.topic, p.partition)
                    code = self._zk_name_error(group, t.topic)
                    if not code and p.partition < 0:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if not code and len((p.metadata or "").encode("utf-8")) > MAX_METADATA_BYTES:
                        code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    if not code:
                        try:
                            store.write_offset(group, t.topic, p.partition, p.offset)
                        except CoordinationError as e:
                            log.info("v0 commit of group %s to ZooKeeper failed: %s", group, e)
                            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                        except ValueError:
                            code = ErrorCode.UNKNOWN_SERVER_ERROR
                    results[tp] = code
            answer(lambda topic, p: results.get((topic, p.partition), ErrorCode.UNKNOWN_SERVER_ERROR))

        self._run_zk(work, lambda: answer(lambda _t, _p: ErrorCode.COORDINATOR_NOT_AVAILABLE))

    def _zk_offset_fetch(self, req: Any, channel: Any) -> None:
        store = self._zk_store
        assert store is not None
        resp_cls = type(req).RESPONSE_TYPE
        shape = resp_cls.nested("topics", "partitions")
        group = req.group_id
        wanted = [(t.topic, list(t.partitions)) for t in req.topics or ()]

        def answer(entry_of: Callable[[str, int], tuple[int, int]]) -> None:
            topics = []
            for topic, parts in wanted:
                plist = []
                for p in parts:
                    off, code = entry_of(topic, p)
                    plist.append(shape.build(partition=p, offset=off, committed_leader_epoch=-1, metadata="", error_code=code))
                topics.append((topic, plist))
            channel.send(resp_cls.build(throttle_time_ms=0, topics=topics, error_code=ErrorCode.NONE))

        def work() -> None:
            results: dict[tuple[str, int], tuple[int, int]] = {}
            for topic, parts in wanted:
                for p in parts:
                    code = self._zk_name_error(group, topic)
                    if not code and p < 0:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    off: int | None = None
                    if not code:
                        try:
                            off = store.read_offset(group, topic, p)
                        except CoordinationError as e:
                            log.info("v0 fetch of group %s from ZooKeeper failed: %s", group, e)
                            code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                        except ValueError as e:  # a znode holding something else than an offset
                            log.warning("v0 fetch of group %s: %s", group, e)
                            code = ErrorCode.UNKNOWN_SERVER_ERROR
                    results[(topic, p)] = (-1 if off is None else off, code)
            answer(lambda topic, p: results.get((topic, p), (-1, ErrorCode.UNKNOWN_SERVER_ERROR)))

        self._run_zk(work, lambda: answer(lambda _t, _p: (-1, ErrorCode.COORDINATOR_NOT_AVAILABLE)))

    # -- v1+ (and v0 without ZooKeeper): the coordinator's offsets topic -----------------------------
    def handle_offset_commit(self, header: Any, req: Any, channel: Any) -> None:
        if header.api_version == 0 and self._zk_store is not None:
            self._zk_offset_commit(req, channel)
            return
        v = header.api_version
        group = req.group_id
        now = wall_ms()
        code = ErrorCode.INVALID_GROUP_ID if group is None else self._group_state(group)
        if not code and self.coordinator is not None:
            # v0 names no generation: it commits as a consumer outside group management.
            generation = req.generation_id if v >= 1 else -1
            member = req.member_id if v >= 1 else ""
            code = self.coordinator.validate_offset_commit(group, generation, member, getattr(req, "group_instance_id", None), api_version=v)
        retention_ms = self.retention_ms
        if 2 <= v <= 4 and req.retention_time_ms >= 0:
            retention_ms = req.retention_time_ms
        # v1 may name each partition's commit timestamp (-1: now)
        timestamp_of = (lambda p: now if p.timestamp in (-1, None) else p.timestamp) if v == 1 else None
        results, items, pending = _commit_records(group, req.topics, code, now, retention_ms, timestamp_of)

        def respond(outcome: dict[tuple[str, int], AppendResult] | None) -> None:
            if outcome is not None:
                err, _ = _append_error(outcome)
                if err == ErrorCode.NONE:
                    with self._lock:
                        self._cache.setdefault(group, {}).update(pending)
                for tp in pending:
                    # A failed append: the coordinator moved (NOT_COORDINATOR) or the ISR is
                    # short (COORDINATOR_NOT_AVAILABLE); both retriable.
                    results[tp] = _commit_error(err)
            channel.send(_commit_answer(req, results))

        if not items:
            respond(None)
            return
        buf = records.encode_records(2, records.NONE, items, timestamp_ms=now)
        self.rm.append_messages(COMMIT_TIMEOUT_MS, -1, [(OFFSETS_TOPIC, self.partition_for(group), buf)], respond, allow_internal=True)

    # -- group records (for the coordinator) ---------------------------------------------------------
    def store_group(self, group: str, record: GroupRecord, callback: Callable[[int], None]) -> None:
        """Append ``record`` (acks -1) and call ``callback`` with NONE or the coordinator's
        error code once the ISR has it (or it failed)."""
        now = wall_ms()
        buf = records.encode_records(2, records.NONE, [(encode_group_key(group), encode_group_value(record), now)], timestamp_ms=now)
        self._append_for_group(group, buf, lambda code: callback(_group_record_error(code)))

    def delete_group(self, group: str, callback: Callable[[int], None]) -> None:
        """Write tombstones for the group's record and every offset it committed, then forget
        the offsets; ``callback`` gets NONE or the error."""
        now = wall_ms()
        with self._lock:
            offsets = list(self._cache.get(group, {}))
        items: list[tuple[bytes, bytes | None, int]] = [(encode_group_key(group), None, now)]
        items += [(encode_key(group, topic, part), None, now) for topic, part in offsets]
        buf = records.encode_records(2, records.NONE, items, timestamp_ms=now)

        def done(code: int) -> None:
            if code == ErrorCode.NONE:
                with self._lock:
                    cached = self._cache.get(group, {})
                    for tp in offsets:
                        cached.pop(tp, None)
                    if not cached:
                        self._cache.pop(group, None)
            callback(_commit_error(code))

        self._append_for_group(group, buf, done)

    def delete_offsets(self, group: str, partitions: list[tuple[str, int]], callback: Callable[[int], None]) -> None:
        """Write tombstones for the group's offsets of ``partitions`` (OffsetDelete), then forget
        them; ``callback`` gets NONE or the error."""
        now = wall_ms()
        items: list[tuple[bytes, bytes | None, int]] = [(encode_key(group, topic, part), None, now) for topic, part in partitions]
        if not items:
            callback(ErrorCode.NONE)
            return
        buf = records.encode_records(2, records.NONE, items, timestamp_ms=now)

        def done(code: int) -> None:
            if code == ErrorCode.NONE:
                with self._lock:
                    cached = self._cache.get(group, {})
                    for tp in partitions:
                        cached.pop(tp, None)
                    if not cached:
                        self._cache.pop(group, None)
            callback(_commit_error(code))

        self._append_for_group(group, buf, done)

    def _append_for_group(self, group: str, buf: bytes, callback: Callable[[int], None]) -> None:
        tp = (OFFSETS_TOPIC, self.partition_for(group))

        def appended(outcome: dict[tuple[str, int], AppendResult]) -> None:
            r = outcome.get(tp)
            callback(r.error_code if r is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

        self.rm.append_messages(COMMIT_TIMEOUT_MS, -1, [(tp[0], tp[1], buf)], appended, allow_internal=True)

    def handle_offset_fetch(self, header: Any, req: Any, channel: Any) -> None:
        if header.api_version == 0 and self._zk_store is not None:
            self._zk_offset_fetch(req, channel)
            return
        resp_cls = type(req).RESPONSE_TYPE
        if header.api_version >= 8:
            # v8+: several groups in one request; v9: the asking member and its epoch
            # (checked for consumer-protocol members: UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH)
            shape = resp_cls.nested("groups", "topics", "partitions")
            groups = []
            for g in req.groups:
                code = ErrorCode.INVALID_GROUP_ID if g.group_id is None else self._group_state(g.group_id)
                member_id = getattr(g, "member_id", None)
                if not code and member_id is not None and self.coordinator is not None:
                    code = self.coordinator.validate_offset_fetch(g.group_id, member_id, g.member_epoch)
                topics = self._fetched(g.group_id, g.topics, code, shape)
                groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
            channel.send(resp_cls.build(throttle_time_ms=0, groups=groups))
            return
        group = req.group_id
        code = ErrorCode.INVALID_GROUP_ID if group is None else self._group_state(group)
        topics = self._fetched(group, req.topics, code, resp_cls.nested("topics", "partitions"))
        channel.send(resp_cls.build(throttle_time_ms=0, topics=topics, error_code=code))

    def _fetched(self, group: str, asked: Any, code: int, shape: Any) -> list[tuple[str, list[Any]]]:
        """One group's committed offsets for an OffsetFetch answer (``asked`` None: all)."""
        # Offsets not committed again within offsets.retention.minutes are forgotten, as Kafka
        # expires them (the log keeps them until compaction; the answer no longer does).
        oldest = wall_ms() - self.retention_ms
        with self._lock:
            cached = {tp: e for tp, e in self._cache.get(group, {}).items() if e[2] >= oldest} if not code else {}
        if asked is None:
            by_topic: dict[str, list[int]] = {}
            for topic, part in sorted(cached):
                by_topic.setdefault(topic, []).append(part)
            wanted = list(by_topic.items())
        else:
            wanted = [(t.topic, list(t.partitions)) for t in asked]
        topics = []
        for topic, parts in wanted:
            plist = []
            for p in parts:
                off, meta, _ = cached.get((topic, p), (-1, "", -1))
                plist.append(shape.build(partition=p, offset=off, committed_leader_epoch=-1, metadata=meta, error_code=code))
            topics.append((topic, plist))
        return topics

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The cached offsets of a group (tests, tools)."""
        with self._lock:
            return {tp: e[0] for tp, e in self._cache.get(group, {}).items()}
