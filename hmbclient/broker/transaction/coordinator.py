"""The transaction coordinator's I/O shell: carries out the decisions of :mod:`.state`.

It owns the transactional ids that hash to the ``__transaction_state`` partitions this broker
leads (coordination moves with that leadership, as the group coordinator's moves with
``__consumer_offsets``): on becoming leader it loads the partition's records (the last record
of an id is its state, a tombstone deletes it), on losing it it forgets them. Each decision's
metadata replaces the cached one under one lock; its effects run after the lock is released,
in order: a :class:`~.state.WriteTxnLog` is appended to the id's partition with acks=all and
reported back through :func:`~.state.log_written`; a :class:`~.state.Reply` answers the waiting
request; a :class:`~.state.SendMarkers` goes to the :class:`~.markers.MarkerSender` thread,
which reports written partitions back through :func:`~.state.markers_written` (Complete* is
written once all are).

Serves FindCoordinator with key_type 1 (through the offset manager, which answers
FindCoordinator), InitProducerId with a transactional id (a null id goes to the idempotent
path, :class:`~hmbclient.broker.producer_ids.ProducerIdManager`), AddPartitionsToTxn,
AddOffsetsToTxn (the group's ``__consumer_offsets`` partition joins the transaction), EndTxn,
and WriteTxnMarkers (through its :class:`~.markers.MarkerWriter`). A chore thread runs every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``: it aborts transactions older
than their timeout (the producer's epoch is bumped, so it is fenced), writes again the
Complete* record of a decided transaction whose completion write failed
(:func:`~.state.completion_failed`), and writes the tombstone of ids idle for
``transactional.id.expiration.ms``.

Request checks before the decisions (Kafka's order): the coordinator status (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE); AddPartitionsToTxn answers
UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist and OPERATION_NOT_ATTEMPTED for
the others of that request. PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for old request
versions (:func:`~.state.error_for_version`).

DescribeTransactions answers, per id, TRANSACTIONAL_ID_AUTHORIZATION_FAILED without Describe
on it, the coordinator status when this broker does not coordinate it (NOT_COORDINATOR, ...),
else :func:`~.state.describe`. ListTransactions lists the ids this broker coordinates
(:func:`~.state.list_transactions`), leaving out those the session may not Describe;
COORDINATOR_LOAD_IN_PROGRESS while a partition loads (Kafka's answers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hmbclient.broker.controller.decisions import offsets_topic_replication_factor
from hmbclient.broker.metadata import OFFSETS_TOPIC
from hmbclient.errors import ErrorCode, HmbError
from hmbclient.protocol import records

from .log import (
    TRANSACTION_STATE_TOPIC,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    metadata_of,
    partition_for,
    value_of,
)
from .markers import MarkerSender, MarkerWriter
from .state import (
    Decision,
    Forget,
    Reply,
    SendMarkers,
    TxnConfig,
    TxnDescription,
    TxnMetadata,
    TxnState,
    WriteTxnLog,
    abort_timed_out,
    add_partitions,
    completion_failed,
    describe,
    end_txn,
    error_for_version,
    expire,
    expired,
    init_producer_id,
    list_transactions,
    log_written,
    markers_written,
    needs_new_producer_id,
    on_load,
    retry_completion,
    timed_out,
)

__all__ = ["TransactionCoordinator", "WRITE_TIMEOUT_MS"]

log = logging.getLogger(__name__)

#: How long an append to ``__transaction_state`` may wait for the ISR (Kafka: request.timeout.ms).
WRITE_TIMEOUT_MS = 30_000


def _write_error(code: int) -> ErrorCode:
    """Kafka's mapping of a failed ``__transaction_state`` append for the client
    (TransactionStateManager.appendTransactionToLog)."""
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode(code)


class TransactionCoordinator:
    """Args:
    broker_id: this broker.
    metadata: the metadata cache (leaders of ``__transaction_state``).
    replica_manager: appends and reads ``__transaction_state``; tells leadership changes.
    topics: creates ``__transaction_state`` on first use.
    producer_ids: allocates producer ids (``next_id``), and serves the idempotent path.
    num_partitions / replication_factor: of ``__transaction_state``.
    config: the decisions' settings.
    """

    def __init__(
        self,
        broker_id: int,
        metadata: Any,
        replica_manager: Any,
        topics: Any,
        producer_ids: Any,
        *,
        num_partitions: int,
        replication_factor: int,
        config: TxnConfig,
        clock: Callable[[], float] = time.time,
        abort_interval_ms: int = 10_000,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.rm = replica_manager
        self.topics = topics
        self.producer_ids = producer_ids
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._txns: dict[str, TxnMetadata] = {}
        self._loaded: dict[int, int] = {}  # partition -> coordinator epoch
        self._loading: set[int] = set()
        self._running = False
        self.abort_interval_ms = abort_interval_ms
        #: writes markers on this broker's partitions (WriteTxnMarkers; set by the broker)
        self.marker_writer: MarkerWriter | None = None
        #: a BrokerChannel to another broker (set by the broker; None: markers stay local)
        self.channel_for: Callable[[int], Any] = lambda _broker_id: None
        #: the ``__consumer_offsets`` partition of a group (AddOffsetsToTxn; set by the broker)
        self.group_partition_for: Callable[[str], int] | None = None
        self._sender: MarkerSender | None = None
        #: ``allowed(channel, operation, resource type, name)``: the broker's ACL check
        self.allowed: Callable[[Any, str, str, str], bool] = lambda *_a: True
        self._chore_wake = threading.Event()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._running = True
        if self.marker_writer is None:
            self.marker_writer = MarkerWriter(self.rm)
        self._sender = MarkerSender(self.broker_id, self.metadata, self.marker_writer, self.channel_for, self._markers_done)
        self._sender.start(f"broker-{self.broker_id}-txn-markers")
        threading.Thread(target=self._chores, name=f"broker-{self.broker_id}-txn-chores", daemon=True).start()
        self.rm.add_leadership_listener(self._on_leadership)

    def shutdown(self) -> None:
        self._running = False
        self._chore_wake.set()
        if self._sender is not None:
            self._sender.shutdown()

    def _chores(self) -> None:
        """Abort timed-out transactions and expire idle ids (see the module docstring)."""
        while self._running:
            self._chore_wake.wait(self.abort_interval_ms / 1000.0)
            if not self._running:
                return
            try:
                self.run_chores()
            except Exception:
                log.exception("transaction chores failed")

    def run_chores(self) -> None:
        now = self._now_ms()
        decisions: list[Decision] = []
        with self._lock:
            for tid, txn in list(self._txns.items()):
                if timed_out(txn, now):
                    log.info("aborting transaction of %s: open for %d ms (timeout %d ms)", tid, now - txn.start_ms, txn.timeout_ms)
                    d = abort_timed_out(txn, now)
                elif completion_failed(txn):
                    log.info("writing the completion of %s's transaction again (the last write failed)", tid)
                    d = retry_completion(txn, now)
                elif expired(txn, now, self.config):
                    d = expire(txn, now, self.config)
                else:
                    continue
                self._keep(tid, d)
                decisions.append(d)
        for d in decisions:
            self._effects(d)

    def _on_leadership(self, topic: str, partition: int, leads: bool) -> None:
        if topic == TRANSACTION_STATE_TOPIC:
            self._maybe_load(partition)

    def _maybe_load(self, partition: int) -> None:
        if not self.rm.is_leader(TRANSACTION_STATE_TOPIC, partition):
            with self._lock:
                self._loaded.pop(partition, None)
                for tid in [t for t in self._txns if self.partition_for(t) == partition]:
                    del self._txns[tid]
            return
        with self._lock:
            if partition in self._loaded or partition in self._loading:
                return
            self._loading.add(partition)
        threading.Thread(target=self._load, args=(partition,), name=f"txn-load-{partition}", daemon=True).start()

    def _load(self, partition: int) -> None:
        found: dict[str, TxnMetadata | None] = {}
        epoch = -1
        try:
            p = self.rm.partition(TRANSACTION_STATE_TOPIC, partition)
            epoch = p.leader_epoch if p is not None else -1
            txn_log = self.rm.logs.get_or_create(TRANSACTION_STATE_TOPIC, partition)
            offset, end = txn_log.log_start_offset, txn_log.log_end_offset
            while offset < end and self._running:
                chunk, _ = txn_log.read(offset, 1 << 20, min_one_entry=True)
                if chunk is None:
                    break
                recs = records.decode_records(chunk.read())
                if not recs:
                    break
                for r in recs:
                    offset = r.offset + 1
                    if r.key is None:
                        continue
                    version, tid = decode_key(r.key)
                    if tid is None:
                        log.warning("skipping a %s record with key version %d", TRANSACTION_STATE_TOPIC, version)
                        continue
                    value = decode_value(r.value)
                    found[tid] = None if value is None else metadata_of(tid, value)
        except HmbError as e:
            log.error("loading %s-%d failed: %s", TRANSACTION_STATE_TOPIC, partition, e)
            with self._lock:
                self._loading.discard(partition)
            return
        now = self._now_ms()
        decisions: list[Decision] = []
        with self._lock:
            self._loading.discard(partition)
            if not self.rm.is_leader(TRANSACTION_STATE_TOPIC, partition):
                return
            for tid, txn in found.items():
                if txn is None:
                    self._txns.pop(tid, None)
                else:
                    d = on_load(txn, epoch, now)
                    self._keep(tid, d)
                    decisions.append(d)
            self._loaded[partition] = epoch
        for d in decisions:
            self._effects(d)
        log.info("loaded %d transactional ids from %s-%d", len(found), TRANSACTION_STATE_TOPIC, partition)

    # -- lookup ----------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def ensure_topic(self) -> None:
        if not self.metadata.has_topic(TRANSACTION_STATE_TOPIC):
            live = len(self.metadata.live_broker_ids()) or 1
            self.topics.create(TRANSACTION_STATE_TOPIC, self.num_partitions, offsets_topic_replication_factor(self.replication_factor, live))

    def _status(self, transactional_id: str) -> ErrorCode:
        """NONE if this broker coordinates the id and has its partition loaded, else the error."""
        self.ensure_topic()
        p = self.partition_for(transactional_id)
        leader = self.metadata.leader(TRANSACTION_STATE_TOPIC, p)
        if leader is None or leader < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if leader != self.broker_id:
            return ErrorCode.NOT_COORDINATOR
        if not self.rm.is_leader(TRANSACTION_STATE_TOPIC, p):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        with self._lock:
            if p in self._loaded:
                return ErrorCode.NONE
        self._maybe_load(p)
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    def metadata_of(self, transactional_id: str) -> TxnMetadata | None:
        """The cached metadata (tests, DescribeTransactions later)."""
        with self._lock:
            return self._txns.get(transactional_id)

    # -- running decisions -----------------------------------------------------------------------
    def _keep(self, tid: str, d: Decision) -> None:
        if d.txn is None:
            self._txns.pop(tid, None)
        else:
            self._txns[tid] = d.txn

    def _effects(self, d: Decision) -> None:
        for e in d.effects:
            if isinstance(e, Reply):
                if e.waiter is not None:
                    e.waiter(e)
            elif isinstance(e, WriteTxnLog):
                self._write(e)
            elif isinstance(e, Forget):
                with self._lock:
                    self._txns.pop(e.transactional_id, None)
            elif isinstance(e, SendMarkers):
                if self._sender is not None:
                    self._sender.add(e)

    def _markers_done(self, e: SendMarkers, partitions: set[tuple[str, int]]) -> bool:
        """The sender's report: whether the transaction is still this coordinator's to end."""
        p = self.partition_for(e.transactional_id)
        with self._lock:
            txn = self._txns.get(e.transactional_id)
            if (
                txn is None
                or self._loaded.get(p) != e.coordinator_epoch
                or txn.producer_id != e.producer_id
                or txn.producer_epoch != e.producer_epoch
                or txn.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            ):
                return False
            d = markers_written(txn, partitions, self._now_ms())
            self._keep(e.transactional_id, d)
        self._effects(d)
        return True

    def _write(self, w: WriteTxnLog) -> None:
        tid = w.transactional_id
        p = self.partition_for(tid)
        value = None if w.value is None else encode_value(value_of(w.value))
        buf = records.encode_records(2, records.NONE, [(encode_key(tid), value, self._now_ms())])
        tp = (TRANSACTION_STATE_TOPIC, p)

        def appended(outcome: dict[tuple[str, int], Any]) -> None:
            r = outcome.get(tp)
            code = ErrorCode(r.error_code) if r is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if code != ErrorCode.NONE:
                code = _write_error(code)
            with self._lock:
                txn = self._txns.get(tid)
                if txn is None or txn.pending is None or self._loaded.get(p) is None:
                    return  # the partition moved away meanwhile: the waiting client times out and retries
                d = log_written(txn, code, self._now_ms(), self._loaded[p])
                self._keep(tid, d)
            self._effects(d)

        self.rm.append_messages(WRITE_TIMEOUT_MS, -1, [(TRANSACTION_STATE_TOPIC, p, buf)], appended, allow_internal=True)

    # -- handlers --------------------------------------------------------------------------------
    def handle_init_producer_id(self, header: Any, req: Any, channel: Any) -> None:
        if req.transactional_id is None:
            self.producer_ids.handle_init_producer_id(header, req, channel)
            return
        resp_cls = type(req).RESPONSE_TYPE
        version = header.api_version

        def reply(r: Reply) -> None:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=error_for_version(r.error, "InitProducerId", version), producer_id=r.producer_id, producer_epoch=r.producer_epoch))

        tid = req.transactional_id
        status = self._status(tid) if tid else ErrorCode.NONE
        if status != ErrorCode.NONE:
            reply(Reply(None, status))
            return
        with self._lock:
            txn = self._txns.get(tid)
            fresh = needs_new_producer_id(txn)
        new_pid = None
        if fresh and tid:
            try:
                new_pid = self.producer_ids.next_id()
            except HmbError as e:
                log.error("InitProducerId for %r: %s", tid, e)
                reply(Reply(None, ErrorCode.COORDINATOR_NOT_AVAILABLE))
                return
        with self._lock:
            txn = self._txns.get(tid)
            if tid and new_pid is None and needs_new_producer_id(txn):
                # the id changed under us between the two looks: let the client retry
                d = Decision(txn, (Reply(reply, ErrorCode.CONCURRENT_TRANSACTIONS),))
            else:
                d = init_producer_id(txn, tid, req.transaction_timeout_ms, self._now_ms(), self.config, waiter=reply, new_producer_id=new_pid)
                if d.txn is not None:
                    self._txns[tid] = d.txn
        self._effects(d)

    def _start_decision(self, tid: str, version: int, api: str, reply: Callable[[Reply], None], decide: Callable[[TxnMetadata | None], Decision]) -> None:
        status = self._status(tid) if tid else ErrorCode.NONE
        if status != ErrorCode.NONE:
            reply(Reply(None, status))
            return
        with self._lock:
            d = decide(self._txns.get(tid))
            if d.txn is not None:
                self._txns[tid] = d.txn
        self._effects(d)

    def handle_add_partitions_to_txn(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        version = header.api_version
        wanted = [(t.topic, p) for t in req.topics for p in t.partitions]
        early: dict[tuple[str, int], int] = {}
        for tp in wanted:
            if not self.allowed(channel, "Write", "Topic", tp[0]):
                early[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif tp[0] == TRANSACTION_STATE_TOPIC or self.metadata.partition(*tp) is None:
                early[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        def answer(code_of: Callable[[tuple[str, int]], int]) -> None:
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for tp in wanted:
                by_topic.setdefault(tp[0], []).append((tp[1], code_of(tp)))
            channel.send(resp_cls.build(throttle_time_ms=0, results=list(by_topic.items())))

        if early:
            answer(lambda tp: early.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED))
            return

        def reply(r: Reply) -> None:
            code = error_for_version(r.error, "AddPartitionsToTxn", version)
            answer(lambda _tp: code)

        tid = req.transactional_id
        self._start_decision(
            tid, version, "AddPartitionsToTxn", reply,
            lambda txn: add_partitions(txn, tid, req.producer_id, req.producer_epoch, wanted, self._now_ms(), waiter=reply),
        )

    def handle_add_offsets_to_txn(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        version = header.api_version

        def reply(r: Reply) -> None:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=error_for_version(r.error, "AddOffsetsToTxn", version)))

        if self.group_partition_for is None or not req.group_id:
            reply(Reply(None, ErrorCode.INVALID_REQUEST if not req.group_id else ErrorCode.UNSUPPORTED_VERSION))
            return
        tp = (OFFSETS_TOPIC, self.group_partition_for(req.group_id))
        tid = req.transactional_id
        self._start_decision(
            tid, version, "AddOffsetsToTxn", reply,
            lambda txn: add_partitions(txn, tid, req.producer_id, req.producer_epoch, [tp], self._now_ms(), waiter=reply),
        )

    def handle_end_txn(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        version = header.api_version

        def reply(r: Reply) -> None:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=error_for_version(r.error, "EndTxn", version)))

        tid = req.transactional_id
        self._start_decision(
            tid, version, "EndTxn", reply,
            lambda txn: end_txn(txn, tid, req.producer_id, req.producer_epoch, bool(req.committed), self._now_ms(), waiter=reply),
        )

    def handle_write_txn_markers(self, header: Any, req: Any, channel: Any) -> None:
        if self.marker_writer is None:
            self.marker_writer = MarkerWriter(self.rm)
        self.marker_writer.handle_write_txn_markers(header, req, channel)

    def transactional_ids(self) -> list[TxnMetadata]:
        """Every cached transactional id's metadata (ListTransactions, tests)."""
        with self._lock:
            return list(self._txns.values())

    def handle_describe_transactions(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        out: list[TxnDescription] = []
        for tid in req.transactional_ids:
            if not self.allowed(channel, "Describe", "TransactionalId", tid):
                out.append(describe(None, tid)._replace(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
                continue
            status = self._status(tid) if tid else ErrorCode.NONE
            if status != ErrorCode.NONE:
                out.append(describe(None, tid)._replace(error_code=status))
                continue
            with self._lock:
                out.append(describe(self._txns.get(tid), tid))
        channel.send(resp_cls.build(throttle_time_ms=0, transaction_states=[tuple(d) for d in out]))

    def handle_list_transactions(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        duration = req.duration_filter if header.api_version >= 1 else -1
        with self._lock:
            loading = bool(self._loading)
            txns = list(self._txns.values())
        if loading:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, unknown_state_filters=[], transaction_states=[]))
            return
        visible = [t for t in txns if self.allowed(channel, "Describe", "TransactionalId", t.transactional_id)]
        found, unknown = list_transactions(visible, req.state_filters, req.producer_id_filters, self._now_ms(), duration)
        channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.NONE, unknown_state_filters=unknown, transaction_states=found))
