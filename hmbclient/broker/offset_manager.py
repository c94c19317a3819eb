"""OffsetManager: the group offset store (OffsetCommit, OffsetFetch, FindCoordinator).

As in Kafka 0.8.2: a group's coordinator is the leader of partition
``abs(java_hash(group)) % offsets_topic_num_partitions`` of the internal, compacted topic
``__consumer_offsets`` (created on first use). A commit is appended through the replica
manager (acks -1, the same DelayedProduce path as any produce) and put in the in-memory cache
only when that append completes, so a fetch never returns an offset the log does not hold.
Fetches are served from the cache.

Log format (Kafka's, so Kafka tooling could read it): key = version 1 int16, group string,
topic string, partition int32; value = version 1 int16, offset int64, metadata string,
commit timestamp int64, expire timestamp int64; one RecordBatch v2 per commit request.

Loading: when this broker starts leading an offsets partition (start-up, a leader move), a
thread replays that partition into the cache; until it is done, requests for its groups get
ErrorCode.COORDINATOR_LOAD_IN_PROGRESS (14), which clients retry (OffsetsLoadInProgress in 0.8.2).
Requests for a group this broker does not coordinate get ErrorCode.NOT_COORDINATOR (16).

OffsetCommit v0 (ZooKeeper-backed in Kafka 0.8.1) is served from this same store.
"""

from __future__ import annotations

import logging
import struct
import threading
from typing import TYPE_CHECKING, Any

from hmbclient.broker.apis import _make, _shape
from hmbclient.broker.controller.decisions import offsets_topic_replication_factor
from hmbclient.broker.metadata import NO_LEADER, OFFSETS_TOPIC, MetadataCache
from hmbclient.broker.replica_manager import ReplicaManager
from hmbclient.broker.results import AppendResult
from hmbclient.broker.topics import TopicManager
from hmbclient.clock import wall_ms
from hmbclient.errors import ErrorCode, HmbError
from hmbclient.protocol import records

if TYPE_CHECKING:
    from hmbclient.config import BrokerConfig

__all__ = ["OffsetManager", "OFFSETS_TOPIC", "java_string_hash", "partition_for_group"]

log = logging.getLogger("hmbclient.broker.offsets")

MAX_METADATA_BYTES = 4096
_FIND_COORDINATOR_WAIT_MS = 3000


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


OffsetEntry = tuple[int, str, int]  # offset, metadata, commit timestamp


class OffsetManager:
    """Group offsets of the groups this broker coordinates.

    Args:
        broker_id: this broker.
        metadata: this broker's metadata cache.
        replica_manager: to append commits and to read partitions while loading.
        topics: to create the offsets topic on first use.
        config: ``offsets_topic_num_partitions``, ``offsets_retention_minutes``.
    """

    def __init__(self, broker_id: int, metadata: MetadataCache, replica_manager: ReplicaManager, topics: TopicManager, config: BrokerConfig) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.rm = replica_manager
        self.topics = topics
        self.num_partitions = config.offsets_topic_num_partitions
        self.replication_factor = config.offsets_topic_replication_factor
        self.retention_ms = config.offsets_retention_minutes * 60_000
        self._cache: dict[str, dict[tuple[str, int], OffsetEntry]] = {}
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._lock = threading.Lock()
        self._running = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        # Coordination moves with the leadership of the group's offsets partition: load on
        # becoming its leader, forget on losing it.
        self.rm.add_leadership_listener(self._on_leadership)

    def shutdown(self) -> None:
        self._running = False

    def _on_leadership(self, topic: str, partition: int, leads: bool) -> None:
        if topic == OFFSETS_TOPIC:
            self._maybe_load(partition)

    def _maybe_load(self, partition: int) -> None:
        """Start loading ``partition`` if this broker now leads it; forget it if not."""
        leads = self.rm.is_leader(OFFSETS_TOPIC, partition)
        with self._lock:
            if not leads:
                if partition in self._loaded:
                    self._loaded.discard(partition)
                    for g in [g for g in self._cache if self.partition_for(g) == partition]:
                        del self._cache[g]
                return
            if partition in self._loaded or partition in self._loading:
                return
            self._loading.add(partition)
        threading.Thread(target=self._load, args=(partition,), name=f"offsets-load-{partition}", daemon=True).start()

    def _load(self, partition: int) -> None:
        loaded: dict[str, dict[tuple[str, int], OffsetEntry]] = {}
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
                recs = records.decode_records(found.read())
                if not recs:
                    break
                for r in recs:
                    offset = r.offset + 1
                    if r.key is None:
                        continue
                    k = decode_key(r.key)
                    if k is None:
                        continue
                    group, topic, part = k
                    if r.value is None:  # a tombstone deletes the offset
                        loaded.get(group, {}).pop((topic, part), None)
                    else:
                        loaded.setdefault(group, {})[(topic, part)] = decode_value(r.value)
                    n += 1
        except (HmbError, struct.error, UnicodeDecodeError) as e:
            log.error("loading offsets partition %d failed: %s", partition, e)
        finally:
            with self._lock:
                for g, offs in loaded.items():
                    self._cache.setdefault(g, {}).update(offs)
                self._loading.discard(partition)
                self._loaded.add(partition)
        log.info("loaded %d offset commits from %s-%d", n, OFFSETS_TOPIC, partition)

    # -- coordinator lookup ----------------------------------------------------------------------
    def partition_for(self, group: str) -> int:
        return partition_for_group(group, self.num_partitions)

    def _ensure_topic(self) -> None:
        if not self.metadata.has_topic(OFFSETS_TOPIC):
            live = len(self.metadata.live_broker_ids()) or 1
            rf = offsets_topic_replication_factor(self.replication_factor, live)
            self.topics.create(OFFSETS_TOPIC, self.num_partitions, rf)

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
        if key_type != 0:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="transactions are not supported", node_id=-1, host="", port=-1))
            return
        self._ensure_topic()

        def answer() -> None:
            leader = self.metadata.leader(OFFSETS_TOPIC, self.partition_for(key))
            ep = self.metadata.broker(leader) if leader is not None and leader >= 0 else None
            if ep is None:
                channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="the coordinator's broker is down", node_id=-1, host="", port=-1))
                return
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, node_id=ep.node_id, host=ep.host, port=ep.port))

        # A just-created offsets topic is served once the controller elected its leaders: the
        # answer waits for that (bounded) instead of sending the client into a retry loop.
        self.topics.when_ready([OFFSETS_TOPIC], _FIND_COORDINATOR_WAIT_MS, answer)

    def handle_offset_commit(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        v = header.api_version
        group = req.group_id
        now = wall_ms()
        code = ErrorCode.INVALID_GROUP_ID if group is None else self._group_state(group)
        results: dict[tuple[str, int], int] = {}
        items: list[tuple[bytes, bytes, int]] = []
        pending: dict[tuple[str, int], OffsetEntry] = {}
        for t in req.topics:
            for p in t.partitions:
                tp = (t.topic, p.partition)
                if code:
                    results[tp] = code
                    continue
                metadata = p.metadata or ""
                if len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
                    results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                ts = now
                if v == 1 and p.timestamp not in (-1, None):
                    ts = p.timestamp
                items.append((encode_key(group, t.topic, p.partition), encode_value(p.offset, metadata, ts, ts + self.retention_ms), now))
                pending[tp] = (p.offset, metadata, ts)

        def respond(outcome: dict[tuple[str, int], AppendResult] | None) -> None:
            if outcome is not None:
                r = next(iter(outcome.values()), None)
                err = r.error_code if r is not None else ErrorCode.NONE
                if err == ErrorCode.NONE:
                    with self._lock:
                        self._cache.setdefault(group, {}).update(pending)
                for tp in pending:
                    # A failed append means the coordinator moved or the log broke: retriable.
                    results[tp] = ErrorCode.NONE if err == ErrorCode.NONE else (ErrorCode.NOT_COORDINATOR if err in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_FOR_PARTITION) else ErrorCode.COORDINATOR_NOT_AVAILABLE)
            shape = _shape(resp_cls, "topics", "partitions")
            topics = []
            for t in req.topics:
                topics.append((t.topic, [_make(shape, partition=p.partition, error_code=results.get((t.topic, p.partition), ErrorCode.NONE)) for p in t.partitions]))
            channel.send(resp_cls.build(throttle_time_ms=0, topics=topics))

        if not items:
            respond(None)
            return
        buf = records.encode_records(2, records.NONE, items, timestamp_ms=now)
        self.rm.append_messages(5000, -1, [(OFFSETS_TOPIC, self.partition_for(group), buf)], respond, allow_internal=True)

    def handle_offset_fetch(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        group = req.group_id
        code = ErrorCode.INVALID_GROUP_ID if group is None else self._group_state(group)
        shape = _shape(resp_cls, "topics", "partitions")
        # Offsets not committed again within offsets.retention.minutes are forgotten, as Kafka
        # expires them (the log keeps them until compaction; the answer no longer does).
        oldest = wall_ms() - self.retention_ms
        with self._lock:
            cached = {tp: e for tp, e in self._cache.get(group, {}).items() if e[2] >= oldest} if not code else {}
        if req.topics is None:
            wanted: list[tuple[str, list[int]]] = []
            by_topic: dict[str, list[int]] = {}
            for topic, part in sorted(cached):
                by_topic.setdefault(topic, []).append(part)
            wanted = list(by_topic.items())
        else:
            wanted = [(t.topic, list(t.partitions)) for t in req.topics]
        topics = []
        for topic, parts in wanted:
            plist = []
            for p in parts:
                off, meta, _ = cached.get((topic, p), (-1, "", -1))
                plist.append(_make(shape, partition=p, offset=off, committed_leader_epoch=-1, metadata=meta, error_code=code))
            topics.append((topic, plist))
        channel.send(resp_cls.build(throttle_time_ms=0, topics=topics, error_code=code))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        """The cached offsets of a group (tests, tools)."""
        with self._lock:
            return {tp: e[0] for tp, e in self._cache.get(group, {}).items()}
