"""ReplicaManager: the partitions this broker hosts, as leader or follower.

Kafka's ``ReplicaManager`` after the purgatory refactoring (KAFKA-1583), with 0.8.2 replication:

* The controller's LeaderAndIsr makes each local replica a leader or a follower
  (:meth:`become_leader_or_follower`); followers are handed to the replica fetchers, which
  truncate by leader epoch and then fetch from their leader. StopReplica takes replicas offline
  (and may delete them).
* ``append_messages`` appends to the partitions this broker leads and answers at once for
  acks 0/1; for acks=-1 it parks a DelayedProduce that completes when the high watermark passes
  the appended messages (every ISR member has them) or the request times out.
  ``min.insync.replicas`` refuses an acks=-1 append to a too-small ISR (NOT_ENOUGH_REPLICAS) and
  fails one whose ISR shrank below it before the HW got there (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
* ``fetch_messages`` reads up to the high watermark for consumers (only committed messages)
  and up to the log end for followers (``replica_id`` >= 0, which must be an assigned replica);
  a follower's fetch offset is its log end offset, which may move the HW and so complete
  waiting produces and consumer fetches. A fetch that finds less than ``min_bytes`` parks a
  DelayedFetch. A follower outside the ISR whose replica is throttled
  (``leader.replication.throttled.replicas``, ``broker.replication_quota``) gets at most the
  throttle's allowance (nothing while the leader's rate is over its bound).
* ``delete_records`` (DeleteRecords) moves the log start of each partition this broker leads
  (``Partition.delete_records_on_leader``: its cases), checkpoints the log starts before
  anything answers, and parks a DelayedDeleteRecords until every live follower reported a log
  start at least as high (followers send theirs in every Fetch v5+, and take the leader's from
  its answers: ``replica_fetcher``). Followers' fetches re-check the parked operations.
* A background thread drops followers that stopped catching up from the ISR
  (``replica.lag.time.max.ms``) and checkpoints the high watermarks and the log starts.

Per-partition errors are codes, never exceptions: UNKNOWN_TOPIC_OR_PARTITION (not hosted here
and unknown), LEADER_NOT_AVAILABLE (offline), NOT_LEADER_FOR_PARTITION, OFFSET_OUT_OF_RANGE,
CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TOPIC (internal topic written by a client),
NOT_ENOUGH_REPLICAS(_AFTER_APPEND), KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple

from hmbclient.broker.delayed import (
    DelayedDeleteRecords,
    DelayedFetch,
    DelayedProduce,
    DeleteRecordsStatus,
    FetchWait,
    ProduceStatus,
)
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.log.segment import FileSlice
from hmbclient.broker.metadata import NO_LEADER, BrokerEndpoint, MetadataCache, is_internal_topic
from hmbclient.broker.metrics import BrokerMetrics
from hmbclient.broker.partition import IsrWriter, Partition, Role
from hmbclient.broker.purgatory import Purgatory
from hmbclient.broker.replication_quota import ReplicationThrottles
from hmbclient.broker.results import TP, AppendResult, FetchInfo, FetchResult
from hmbclient.clock import monotonic_ms
from hmbclient.errors import (
    BrokerError,
    CorruptRecordError,
    ErrorCode,
    OffsetOutOfRangeError,
    ProtocolError,
    StorageError,
)
from hmbclient.protocol import records

__all__ = ["ReplicaManager", "PartitionState", "LeadershipListener"]

log = logging.getLogger("hmbclient.broker.replica_manager")

_EMPTY = b""

LeadershipListener = Callable[[str, int, bool], None]
"""``(topic, partition, is_leader)`` after this broker became leader or stopped leading."""


class PartitionState(NamedTuple):
    """One partition of a LeaderAndIsr request, as the replica manager applies it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


class ReplicaManager:
    """The replicas of one broker.

    Args:
        broker_id: this broker.
        metadata: the broker's metadata cache (for error codes on partitions not hosted here).
        logs: the partition logs.
        min_insync_replicas: ``min.insync.replicas``.
        replica_lag_time_max_ms: ``replica.lag.time.max.ms``.
        hw_checkpoint_interval_ms: how often HWs are saved.
        isr_writer: writes a leader's ISR change (ZooKeeper or the standalone store).
        now_ms: the purgatories' and partitions' monotonic clock.
    """

    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        logs: LogManager,
        *,
        min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = 10_000,
        hw_checkpoint_interval_ms: int = 5_000,
        isr_writer: IsrWriter | None = None,
        now_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.logs = logs
        self.min_insync_replicas = min_insync_replicas
        #: ``topic -> min.insync.replicas`` (dynamic topic configs); None: the broker's setting
        self.min_insync_for: Callable[[str], int] | None = None
        #: replication throttles (``replication_quota``; None: none)
        self.throttles: ReplicationThrottles | None = None
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.hw_checkpoint_interval_ms = hw_checkpoint_interval_ms
        self.isr_writer = isr_writer if isr_writer is None else self._metered(isr_writer)
        self._now_ms = now_ms
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("produce", now_ms)
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", now_ms)
        self.delete_records_purgatory: Purgatory[DelayedDeleteRecords] = Purgatory("delete-records", now_ms)
        self._partitions: dict[TP, Partition] = {}
        self._lock = threading.RLock()
        self._append_listeners: list[Callable[[str, int], None]] = []
        self._leadership_listeners: list[LeadershipListener] = []
        self.fetchers: Any = None  # ReplicaFetcherManager, set by the broker
        self.metrics: BrokerMetrics | None = None  # the broker's sensors, set by the broker
        self._stop = threading.Event()
        # Set after LeaderAndIsr made leaders: the chores flush their new epochs at once.
        self._new_epochs = threading.Event()
        self._chores: threading.Thread | None = None

    def _metered(self, writer: IsrWriter) -> IsrWriter:
        """``writer`` counting the ISR shrinks and expansions it wrote (IsrShrinksPerSec...)."""

        def write(topic: str, partition: int, leader: int, epoch: int, isr: tuple[int, ...], controller_epoch: int, version: int) -> int | None:
            p = self._partitions.get((topic, partition))
            before = len(p.isr) if p is not None else len(isr)
            written = writer(topic, partition, leader, epoch, isr, controller_epoch, version)
            if written is not None and self.metrics is not None:
                self.metrics.isr_changed(before, len(isr))
            return written

        return write

    def under_replicated(self) -> int:
        """Led partitions whose ISR is smaller than their replica set."""
        return sum(1 for p in self.leader_partitions() if len(p.isr) < len(p.replicas))

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.produce_purgatory.start()
        self.fetch_purgatory.start()
        self.delete_records_purgatory.start()
        self._stop.clear()
        self._chores = threading.Thread(target=self._run_chores, name=f"broker-{self.broker_id}-replica-chores", daemon=True)
        self._chores.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._new_epochs.set()
        if self._chores is not None:
            self._chores.join(timeout=10)
            self._chores = None
        if self.fetchers is not None:
            self.fetchers.shutdown()
        # Parked requests answer now (a fetch with what is there, a produce with a timeout)
        # instead of holding their connections until the sockets close.
        self.fetch_purgatory.shutdown(complete_pending=True)
        self.produce_purgatory.shutdown(complete_pending=True)
        self.delete_records_purgatory.shutdown(complete_pending=True)
        self.checkpoint_high_watermarks()

    def _run_chores(self) -> None:
        tick_ms = max(50, min(self.replica_lag_time_max_ms // 2, 1000))
        next_checkpoint = self._now_ms() + self.hw_checkpoint_interval_ms
        while True:
            self._new_epochs.wait(tick_ms / 1000.0)
            self._new_epochs.clear()
            if self._stop.is_set():
                break
            try:
                for p in self.leader_partitions():
                    if p.maybe_shrink_isr(self.replica_lag_time_max_ms):
                        self._hw_moved(p.tp)
                self._flush_leader_epochs()
                if self._now_ms() >= next_checkpoint:
                    next_checkpoint = self._now_ms() + self.hw_checkpoint_interval_ms
                    self.checkpoint_high_watermarks()
            except Exception:
                log.exception("replica chores failed")

    def _flush_leader_epochs(self) -> None:
        """fsync the leader-epoch checkpoints an election left pending, here rather than in the
        first append of each partition: a Log fsyncs a pending epoch before it writes bytes of
        that epoch, so after a topic of 1,000 partitions is created the first produce to each
        paid an fsync on the request path (a tenth of the broker's time in the first seconds of
        1,000 partitions x 100 producers). A flush that fails leaves the cache pending; the
        append then tries again and reports the error to its producer."""
        for p in self.leader_partitions():
            epochs = p.log.leader_epochs
            if epochs.dirty:
                try:
                    epochs.flush()
                except StorageError as e:
                    log.warning("%s-%d: leader epoch checkpoint not flushed yet: %s", p.topic, p.partition, e)

    def checkpoint_high_watermarks(self) -> None:
        try:
            self.logs.checkpoint_high_watermarks()
        except StorageError as e:
            log.error("high watermark checkpoint failed: %s", e)
        try:
            self.logs.checkpoint_log_start_offsets()
        except StorageError as e:
            log.error("log start offset checkpoint failed: %s", e)

    # -- listeners ---------------------------------------------------------------------------------
    def add_append_listener(self, fn: Callable[[str, int], None]) -> None:
        """``fn(topic, partition)`` after every successful append as leader."""
        self._append_listeners.append(fn)

    def add_leadership_listener(self, fn: LeadershipListener) -> None:
        self._leadership_listeners.append(fn)

    # -- partitions --------------------------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def partitions(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def leader_partitions(self) -> list[Partition]:
        return [p for p in self.partitions() if p.role is Role.LEADER]

    def is_leader(self, topic: str, partition: int) -> bool:
        p = self._partitions.get((topic, partition))
        return p is not None and p.role is Role.LEADER

    def _not_here(self, topic: str, partition: int) -> int:
        meta = self.metadata.partition(topic, partition)
        if meta is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if meta.leader == NO_LEADER:
            return ErrorCode.LEADER_NOT_AVAILABLE
        return ErrorCode.NOT_LEADER_FOR_PARTITION

    def leader_log(self, topic: str, partition: int) -> tuple[int, Log | None]:
        """``(0, log)`` if this broker leads the partition, else ``(error code, None)``."""
        p = self._partitions.get((topic, partition))
        if p is None or p.role is not Role.LEADER:
            return self._not_here(topic, partition), None
        return ErrorCode.NONE, p.log

    def fetch_end(self, topic: str, partition: int, from_replica: bool, isolation_level: int = 0) -> tuple[int, Log | None, int]:
        """What a waiting fetch may read up to: the HW for consumers (the last stable offset
        for read_committed ones), the LEO for followers."""
        code, partition_log = self.leader_log(topic, partition)
        if code or partition_log is None:
            return code, None, -1
        if from_replica:
            return ErrorCode.NONE, partition_log, partition_log.log_end_offset
        return ErrorCode.NONE, partition_log, partition_log.last_stable_offset if isolation_level == 1 else partition_log.high_watermark

    # -- LeaderAndIsr / StopReplica ------------------------------------------------------------------
    def become_leader_or_follower(self, states: Iterable[PartitionState], leaders: dict[int, BrokerEndpoint]) -> dict[TP, int]:
        """Apply the controller's decisions; per-partition error codes."""
        results: dict[TP, int] = {}
        new_followers: list[tuple[Partition, BrokerEndpoint]] = []
        changed_leadership: list[tuple[TP, bool]] = []
        with self._lock:
            for st in states:
                tp = (st.topic, st.partition)
                if self.broker_id not in st.replicas:
                    results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                p = self._partitions.get(tp)
                if p is None:
                    try:
                        partition_log = self.logs.get_or_create(st.topic, st.partition)
                    except StorageError as e:
                        log.error("cannot open %s-%d: %s", st.topic, st.partition, e)
                        results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                        continue
                    p = Partition(st.topic, st.partition, self.broker_id, partition_log, self.isr_writer, self._now_ms)
                    self._partitions[tp] = p
                if p.is_stale(st.leader_epoch):
                    log.warning("%s-%d: ignoring LeaderAndIsr with leader epoch %d (have %d)", st.topic, st.partition, st.leader_epoch, p.leader_epoch)
                    results[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
                    continue
                was_leader = p.is_leader
                if st.leader == self.broker_id:
                    if self.fetchers is not None:
                        self.fetchers.remove_partitions([tp])
                    p.make_leader(st.leader_epoch, st.isr, st.replicas, st.zk_version, st.controller_epoch)
                    if not was_leader:
                        changed_leadership.append((tp, True))
                    log.info("%s-%d: leader, epoch %d, ISR %s", st.topic, st.partition, st.leader_epoch, list(st.isr))
                else:
                    if p.make_follower(st.leader, st.leader_epoch, st.isr, st.replicas, st.zk_version, st.controller_epoch):
                        leader = leaders.get(st.leader) if st.leader != NO_LEADER else None
                        if self.fetchers is not None:
                            self.fetchers.remove_partitions([tp])
                        if leader is not None:
                            new_followers.append((p, leader))
                    if was_leader:
                        changed_leadership.append((tp, False))
                results[tp] = ErrorCode.NONE
        if self.fetchers is not None:
            by_leader: dict[BrokerEndpoint, list[Partition]] = {}
            for p, ep in new_followers:
                by_leader.setdefault(ep, []).append(p)
            for ep, parts in by_leader.items():
                self.fetchers.add_partitions(ep, parts)
        if any(leads for _, leads in changed_leadership):
            self._new_epochs.set()
        for tp, _ in changed_leadership:
            self._leadership_moved(tp)
        for tp, leads in changed_leadership:
            for fn in self._leadership_listeners:
                fn(tp[0], tp[1], leads)
        return results

    def stop_replicas(self, tps: Iterable[TP], delete: bool) -> dict[TP, int]:
        results: dict[TP, int] = {}
        stopped: list[TP] = []
        with self._lock:
            tps = list(tps)
            if self.fetchers is not None:
                self.fetchers.remove_partitions(tps)
            for tp in tps:
                p = self._partitions.get(tp)
                if p is not None:
                    was_leader = p.is_leader
                    p.make_offline()
                    if delete:
                        del self._partitions[tp]
                    if was_leader:
                        stopped.append(tp)
                if delete:
                    try:
                        self.logs.delete_log(*tp)
                    except StorageError as e:
                        results[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                        log.error("deleting %s-%d failed: %s", tp[0], tp[1], e)
                        continue
                results[tp] = ErrorCode.NONE
        for tp in stopped:
            self._leadership_moved(tp)
            for fn in self._leadership_listeners:
                fn(tp[0], tp[1], False)
        return results

    def _leadership_moved(self, tp: TP) -> None:
        # Parked requests of a partition this broker no longer leads answer now (Case A).
        self.fetch_purgatory.check_and_complete(tp)
        self.produce_purgatory.check_and_complete(tp)
        self.delete_records_purgatory.check_and_complete(tp)

    def _hw_moved(self, tp: TP) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    def last_offset_for_leader_epoch(self, topic: str, partition: int, epoch: int) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch as the leader answers it: ``(error, epoch, end offset)``."""
        code, partition_log = self.leader_log(topic, partition)
        if code or partition_log is None:
            return code, -1, -1
        found_epoch, end = partition_log.leader_epochs.end_offset_for(epoch, partition_log.log_end_offset)
        return ErrorCode.NONE, found_epoch, end

    # -- appends -----------------------------------------------------------------------------------
    def append_messages(
        self,
        timeout_ms: int,
        acks: int,
        entries: list[tuple[str, int, Any]],
        respond: Callable[[dict[TP, AppendResult]], None],
        *,
        allow_internal: bool = False,
        origin: str = "client",
    ) -> None:
        """Append each ``(topic, partition, records bytes)`` and call ``respond`` with the
        per-partition results: at once for acks 0/1, through a DelayedProduce for acks -1.
        ``origin`` "coordinator": transaction markers and TxnOffsetCommit (see ``Log.append``)."""
        results: dict[TP, AppendResult] = {}
        appended: list[tuple[TP, int]] = []
        duplicates: list[tuple[TP, int]] = []
        for topic, partition, buf in entries:
            tp = (topic, partition)
            p = self._partitions.get(tp)
            if p is None or p.role is not Role.LEADER:
                results[tp] = AppendResult(self._not_here(topic, partition), -1, -1)
                continue
            if not allow_internal and is_internal_topic(topic):
                results[tp] = AppendResult(ErrorCode.INVALID_TOPIC_EXCEPTION, -1, -1)
                continue
            try:
                code, info = p.append_as_leader(buf if buf is not None else _EMPTY, acks, self.min_isr(topic), origin)
            except BrokerError as e:
                log.info("append to %s-%d refused: %s", topic, partition, e)
                results[tp] = AppendResult(e.errno, -1, -1)
                continue
            except (CorruptRecordError, ProtocolError) as e:
                log.info("append to %s-%d refused: %s", topic, partition, e)
                results[tp] = AppendResult(ErrorCode.CORRUPT_MESSAGE, -1, -1)
                continue
            except StorageError as e:
                log.error("append to %s-%d failed: %s", topic, partition, e)
                results[tp] = AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)
                continue
            if code or info is None:
                results[tp] = AppendResult(code, -1, -1)
                continue
            if self.metrics is not None and info.num_records:
                self.metrics.appended(topic, info.num_records, len(buf))
            results[tp] = AppendResult(ErrorCode.NONE, info.first_offset, p.log.log_start_offset)
            if info.num_records:
                appended.append((tp, info.last_offset + 1))
            elif info.duplicate:
                # A retried batch already in the log: answered like the original, so acks=-1
                # still waits until the original is replicated (as Kafka does).
                duplicates.append((tp, info.last_offset + 1))
        if self.metrics is not None:
            for r in results.values():
                if r.error_code:
                    self.metrics.append_failed()
        for tp, _ in appended:
            self.fetch_purgatory.check_and_complete(tp)
            for fn in self._append_listeners:
                fn(*tp)
        if acks == -1 and (appended or duplicates):
            ends = dict(appended + duplicates)
            statuses = {tp: ProduceStatus(ends.get(tp, 0), r, pending=tp in ends) for tp, r in results.items()}
            op = DelayedProduce(timeout_ms, statuses, self, respond)
            self.produce_purgatory.try_complete_else_watch(op, list(ends))
        else:
            respond(results)

    def min_isr(self, topic: str) -> int:
        """``min.insync.replicas`` of ``topic`` (its dynamic override, else the broker's)."""
        return self.min_insync_replicas if self.min_insync_for is None else self.min_insync_for(topic)

    def acks_status(self, topic: str, partition: int, required_offset: int) -> int | None:
        """For DelayedProduce: None while waiting, else the partition's final error code."""
        p = self._partitions.get((topic, partition))
        if p is None:
            return self._not_here(topic, partition)
        return p.acks_status(required_offset, self.min_isr(topic))

    # -- DeleteRecords -----------------------------------------------------------------------------
    def low_watermark(self, topic: str, partition: int) -> tuple[int, int]:
        """For DelayedDeleteRecords: ``(error, low watermark)`` (see ``Partition.low_watermark``)."""
        p = self._partitions.get((topic, partition))
        lw = None if p is None else p.low_watermark(self.metadata.live_broker_ids())
        if p is None or lw is None:
            return self._not_here(topic, partition), -1
        return ErrorCode.NONE, lw

    def delete_records(self, timeout_ms: int, offsets: dict[TP, int], respond: Callable[[dict[TP, DeleteRecordsStatus]], None]) -> None:
        """Move each partition's log start to its offset (-1: the high watermark) and call
        ``respond`` with ``{tp: DeleteRecordsStatus}`` once every live replica followed, or at
        ``timeout_ms`` (see the module docstring)."""
        statuses: dict[TP, DeleteRecordsStatus] = {}
        moved = False
        for tp, offset in offsets.items():
            p = self._partitions.get(tp)
            if p is None or p.role is not Role.LEADER:
                statuses[tp] = DeleteRecordsStatus(-1, self._not_here(*tp), pending=False)
                continue
            try:
                code, target = p.delete_records_on_leader(offset)
            except StorageError as e:
                log.error("DeleteRecords on %s-%d: %s", tp[0], tp[1], e)
                code, target = ErrorCode.KAFKA_STORAGE_ERROR, -1
            statuses[tp] = DeleteRecordsStatus(target, code, pending=not code)
            moved = moved or not code
        if moved:
            try:
                # Durable before anyone hears of it: a kill -9 must not bring the records back.
                self.logs.checkpoint_log_start_offsets()
            except StorageError as e:
                log.error("log start offset checkpoint after DeleteRecords failed: %s", e)
                for st in statuses.values():
                    if st.pending:
                        st.error_code, st.pending = ErrorCode.KAFKA_STORAGE_ERROR, False
        for tp, st in statuses.items():
            if st.pending:
                # Readers parked below the new start answer now (DelayedFetch Case B).
                self.fetch_purgatory.check_and_complete(tp)
        pending: list[Hashable] = [tp for tp, st in statuses.items() if st.pending]
        if not pending:
            respond(statuses)
            return
        op = DelayedDeleteRecords(timeout_ms, statuses, self, respond)
        self.delete_records_purgatory.try_complete_else_watch(op, pending)

    # -- fetches -----------------------------------------------------------------------------------
    def read(
        self,
        infos: list[FetchInfo],
        max_bytes: int,
        max_magic: int,
        min_one_entry: bool,
        waits: list[FetchWait] | None = None,
        replica_id: int = -1,
    ) -> list[FetchResult]:
        """Read every partition now (no waiting).

        Args:
            infos: partitions and offsets, in response order.
            max_bytes: budget across partitions (Fetch v3+), each partition also capped by its own.
            max_magic: highest message format the response may carry; data stored in a newer one
                is down-converted (and then sent from memory, not with sendfile).
            min_one_entry: the first partition with data returns at least one whole entry (KIP-74).
            waits: if given, filled with what a DelayedFetch needs to watch each partition.
            replica_id: a follower's broker id (reads to the log end and records its progress),
                or -1 for a consumer (reads below the high watermark only).
        """
        out: list[FetchResult] = []
        remaining = max_bytes
        from_replica = replica_id >= 0
        for info in infos:
            p = self._partitions.get((info.topic, info.partition))
            code: int = ErrorCode.NONE
            if p is None or p.role is not Role.LEADER:
                code = self._not_here(info.topic, info.partition)
            elif from_replica and replica_id not in p.replicas:
                code = ErrorCode.REPLICA_NOT_AVAILABLE
            if code or p is None:
                out.append(FetchResult(code, -1, -1, _EMPTY, 0))
                if waits is not None:
                    waits.append(FetchWait(-1, 0))
                continue
            partition_log = p.log
            leo = partition_log.log_end_offset
            hw = partition_log.high_watermark
            lso = partition_log.last_stable_offset
            committed = info.isolation_level == 1 and not from_replica
            end = leo if from_replica else lso if committed else hw
            start = partition_log.log_start_offset
            limit = min(info.max_bytes, remaining)
            one_entry = min_one_entry
            allowance = self._replica_allowance(info.topic, info.partition, replica_id) if from_replica else None
            if allowance is not None:  # a throttled replica (replication_quota)
                limit, one_entry = min(limit, allowance), allowance > 0
            data: FileSlice | bytes = _EMPTY
            n = 0
            if limit > 0 or one_entry:
                try:
                    found, magic = partition_log.read(info.offset, max(limit, 0), min_one_entry=one_entry, max_offset=end)
                except OffsetOutOfRangeError:
                    out.append(FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, _EMPTY, 0, lso))
                    if waits is not None:
                        waits.append(FetchWait(-1, 0))
                    continue
                except StorageError as e:
                    out.append(self._storage_failure(info.topic, info.partition, e, hw, start))
                    if waits is not None:
                        waits.append(FetchWait(-1, 0))
                    continue
                if found is not None:
                    data = self._down_convert(found, max_magic) if magic > max_magic else found
                    n = len(data)
            if n:
                remaining -= n
                min_one_entry = False
                if allowance is not None and self.throttles is not None:
                    self.throttles.leader_sent(n)
            if from_replica:
                if p.on_follower_fetch(replica_id, info.offset, leo, info.log_start_offset):
                    self._hw_moved(p.tp)
                    hw = partition_log.high_watermark
                if info.log_start_offset >= 0:
                    self.delete_records_purgatory.check_and_complete(p.tp)
            # read_committed: the aborted transactions with records in what was read (KIP-98)
            aborted = partition_log.aborted_transactions(info.offset, end) if committed and n else None
            out.append(FetchResult(ErrorCode.NONE, hw, start, data, n, lso, aborted))
            if waits is not None:
                waits.append(FetchWait(end, n))
        return out

    @staticmethod
    def _storage_failure(topic: str, partition: int, e: StorageError, hw: int, start: int) -> FetchResult:
        """A read that failed under a fetch (the log deleted by a StopReplica racing it, or an
        I/O error): KAFKA_STORAGE_ERROR for that partition (retriable; the client refreshes
        its metadata), the request's other partitions still served."""
        log.warning("fetch of %s-%d: %s", topic, partition, e)
        return FetchResult(ErrorCode.KAFKA_STORAGE_ERROR, hw, start, _EMPTY, 0)

    @staticmethod
    def _down_convert(found: FileSlice, to_magic: int) -> bytes:
        buf = found.read()
        # Convert whole entries only: the converter works on complete messages, and a client
        # reading an old format re-fetches from the next offset anyway.
        _, valid = records.scan_entries(buf, verify_crc=False)
        if valid:
            return bytes(records.convert_records(memoryview(buf)[:valid], to_magic))
        if len(buf) < 12:
            return _EMPTY
        # Not even the first entry fits: send the start of its conversion, cut at the limit,
        # as Kafka 0.8 sent a partial message; an old client then knows to fetch bigger.
        whole = found.store.read(found.position, 12 + int.from_bytes(buf[8:12], "big"))
        return bytes(records.convert_records(whole, to_magic))[: len(found)]

    def fetch_messages(
        self,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        infos: list[FetchInfo],
        max_magic: int,
        min_one_entry: bool,
        respond: Callable[[list[FetchResult]], None],
        replica_id: int = -1,
    ) -> None:
        """Read now and respond if ``min_bytes`` are there (or an error, or no wait); else park
        a DelayedFetch that responds when the data arrives or ``max_wait_ms`` passes."""
        metrics = self.metrics
        if metrics is not None:
            answer = respond

            def respond(results: list[FetchResult]) -> None:
                per_topic: dict[str, int] = {}
                for info, r in zip(infos, results, strict=False):
                    if r.size:
                        per_topic[info.topic] = per_topic.get(info.topic, 0) + r.size
                metrics.fetched(per_topic, replica_id >= 0)
                answer(results)

        waits: list[FetchWait] = []
        results = self.read(infos, max_bytes, max_magic, min_one_entry, waits, replica_id)
        total = 0
        failed = False
        for r in results:
            total += r.size
            if r.error_code:
                failed = True
        if max_wait_ms <= 0 or not infos or total >= min_bytes or failed:
            respond(results)
            return

        from_replica = replica_id >= 0

        def complete() -> None:
            if from_replica:
                # The follower's progress was recorded by the first read; this one only answers.
                respond(self._read_for_replica_answer(infos, max_bytes, min_one_entry, replica_id))
            else:
                respond(self.read(infos, max_bytes, max_magic, min_one_entry))

        op = DelayedFetch(max_wait_ms, min_bytes, infos, waits, from_replica, self, complete)
        self.fetch_purgatory.try_complete_else_watch(op, [(i.topic, i.partition) for i in infos])

    def _replica_allowance(self, topic: str, partition: int, replica_id: int) -> int | None:
        """Bytes a follower may get for the partition now (None: not throttled)."""
        throttles = self.throttles
        if throttles is None:
            return None
        p = self._partitions.get((topic, partition))
        return throttles.leader_allowance(topic, partition, replica_id, p is not None and replica_id in p.isr)

    def _read_for_replica_answer(self, infos: list[FetchInfo], max_bytes: int, min_one_entry: bool, replica_id: int = -1) -> list[FetchResult]:
        """A parked follower fetch answers with the data up to the log end (its fetch offset was
        already recorded as its log end when the request arrived)."""
        out: list[FetchResult] = []
        remaining = max_bytes
        for info in infos:
            code, partition_log = self.leader_log(info.topic, info.partition)
            if code or partition_log is None:
                out.append(FetchResult(code, -1, -1, _EMPTY, 0))
                continue
            hw, start = partition_log.high_watermark, partition_log.log_start_offset
            limit, one_entry = min(info.max_bytes, remaining), min_one_entry
            allowance = self._replica_allowance(info.topic, info.partition, replica_id) if replica_id >= 0 else None
            if allowance is not None:
                limit, one_entry = min(limit, allowance), allowance > 0
            try:
                found, _ = partition_log.read(info.offset, max(limit, 0), min_one_entry=one_entry, max_offset=partition_log.log_end_offset) \
                    if limit > 0 or one_entry else (None, 0)
            except OffsetOutOfRangeError:
                out.append(FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, _EMPTY, 0))
                continue
            except StorageError as e:
                out.append(self._storage_failure(info.topic, info.partition, e, hw, start))
                continue
            n = 0 if found is None else len(found)
            if n:
                remaining -= n
                min_one_entry = False
                if allowance is not None and self.throttles is not None:
                    self.throttles.leader_sent(n)
            out.append(FetchResult(ErrorCode.NONE, hw, start, found if found is not None else _EMPTY, n))
        return out
