"""Turning batches into Produce requests, and the async producer's sender thread.

:class:`Dispatcher` is shared by the sync and async paths: it groups :class:`Unit` s by leader,
encodes each unit's messages as one record set (the record format follows the Produce
version the connection speaks: v0-1 MessageSet v0, v2 v1, v3+ RecordBatch v2, which is encoded
straight from the batches' value/key columns by ``v2.encode_batches``), sends
one Produce request per broker and maps each partition's answer back to its batches
(base offsets derived per batch: the unit's base offset plus the messages before it).

:class:`SendEngine` is the one engine of both paths (the async :class:`SenderThread` runs it;
a sync ``send`` runs it in the caller's thread until its batches are complete). It loops: close lingering batches whose time is up, drain sendable units,
refresh metadata when asked (or when it is older than the refresh interval), send, and process
completions that the I/O thread queued. Retriable failures (error.retriable, lost connections,
timeouts) invalidate the topic's metadata and put the unit's batches back at the *front* of
their partition's queue after a backoff taken from the tenacity policy; once a batch has used
``message_send_max_retries`` retries, or on a non-retriable error, its future fails with the
error and ``on_error`` runs. Hooks run on this thread; their exceptions are logged.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from tenacity import Retrying

from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.errors import (
    ErrorCode,
    HmbError,
    KafkaConnectionError,
    LeaderNotAvailableError,
    MessageSizeTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    UnresolvedSequenceError,
    UnsupportedByBroker,
    for_code,
)
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.retry import backoff_ms, retry_policy
from hmbclient.net.versions import BrokerVersions, produce_magic
from hmbclient.producer.accumulator import RecordAccumulator, Unit
from hmbclient.producer.data import ProducerBatch
from hmbclient.producer.idempotence import (
    BATCHES_UNRESOLVED,
    IDEMPOTENCE_OFF,
    PRODUCER_ID_ASSIGNED,
    PRODUCER_ID_RENEWED,
    IdempotenceState,
    ProducerEvent,
)
from hmbclient.producer.metrics import ProducerMetrics
from hmbclient.producer.transaction import COORDINATOR_MOVED, RETRY, TransactionManager, classify
from hmbclient.protocol.api.admin import InitProducerIdV3Request
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.records import encode_records
from hmbclient.protocol.records.base import TRANSACTIONAL_MASK
from hmbclient.protocol.records.v2 import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    encode_batches,
)

__all__ = ["Dispatcher", "SendEngine", "SenderThread"]

# What a broker answers when a merged record set is over its limits (message.max.bytes, or
# the segment size).
_TOO_LARGE = (MessageSizeTooLargeError, for_code(ErrorCode.RECORD_LIST_TOO_LARGE))
# Failures after which the broker may hold the batch (the answer was lost or came too late,
# or it was written to fewer replicas than asked): an idempotent retry keeps its sequence.
_MAYBE_STORED = (KafkaConnectionError, RequestTimedOutError, for_code(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND))
# Answers that mean the broker's producer state and ours disagree: bump the epoch (KIP-360).
_STATE_LOST = (
    for_code(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    for_code(ErrorCode.UNKNOWN_PRODUCER_ID),
    for_code(ErrorCode.INVALID_PRODUCER_EPOCH),
)
_DUPLICATE = int(ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
# An idempotent (not transactional) producer's InitProducerId carries no real timeout (Kafka's
# Java client sends Integer.MAX_VALUE).
_IDEMPOTENT_TIMEOUT_MS = 2**31 - 1
_NO_PRODUCER = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)
# First pause before retrying a transactional request: CONCURRENT_TRANSACTIONS, the usual
# answer to the first AddPartitionsToTxn after a commit while the coordinator writes the
# markers, clears within milliseconds (Kafka's Java client waits 20 ms there, KAFKA-5477).
_TXN_RETRY_MS = 20.0

log = logging.getLogger("hmbclient.producer")


def find_coordinator(client: NetClient, key: str, key_type: int, timeout_ms: float) -> int:
    """The node id of the coordinator of a group (``key_type`` 0) or a transactional id (1).

    Raises:
        UnsupportedByBroker: a transaction coordinator asked of a broker whose FindCoordinator
            has no key type (v0: before Kafka 0.11).
        HmbError: the answer's error (COORDINATOR_NOT_AVAILABLE while Kafka creates its
            internal topic: retriable), or a lost connection.
    """

    def build(versions: BrokerVersions) -> Any:
        if key_type and versions.version(ApiKey.FIND_COORDINATOR) < 1:
            raise UnsupportedByBroker(f"{versions.dialect.broker_label} has no transaction coordinator (FindCoordinator v0)")
        return versions.build(ApiKey.FIND_COORDINATOR, group_id=key, key=key, key_type=key_type)

    found = client.call(client.least_loaded_node(), build, timeout_ms=timeout_ms, api_key=ApiKey.FIND_COORDINATOR)
    if found.error_code:
        raise for_code(found.error_code)(f"FindCoordinator for {'transactional id' if key_type else 'group'} {key!r}")
    client.update_brokers({found.node_id: (found.host, found.port)})
    return int(found.node_id)


def call_hook(hooks: dict[str, Any], name: str, *args: Any) -> None:
    fn = hooks.get(name)
    if fn is None:
        return
    try:
        fn(*args)
    except Exception:
        log.exception("callback_handler.%s failed", name)


class Dispatcher:
    """Builds and sends Produce requests; interprets the answers. Thread-compatible."""

    def __init__(
        self,
        client: NetClient,
        metadata: Metadata,
        *,
        acks: int,
        request_timeout_ms: int,
        codec_for: Callable[[str], int],
        hooks: dict[str, Any],
    ) -> None:
        self.client = client
        self.metadata = metadata
        self.acks = acks
        self.request_timeout_ms = request_timeout_ms
        self.codec_for = codec_for
        self.hooks = hooks
        self.real_offsets = client.dialect.real_offsets
        self._versions: dict[int, BrokerVersions] = {}
        self.idem: IdempotenceState | None = None  # set by an idempotent producer's engine
        self.metrics: ProducerMetrics | None = None  # set by a producer that keeps metrics
        self.transactional_id: str | None = None  # set by a transactional producer's engine
        self.batch_flags = 0  # TRANSACTIONAL_MASK for a transactional producer

    def versions(self, node: int) -> BrokerVersions:
        versions = self._versions.get(node)
        if versions is None:
            versions = self.client.versions(node).result(timeout=self.client.request_timeout_ms / 1000.0 + 1.0)
            self._versions[node] = versions
        return versions

    def forget_node(self, node: int) -> None:
        self._versions.pop(node, None)

    def group_by_leader(self, units: Sequence[Unit]) -> tuple[dict[int, list[Unit]], list[Unit]]:
        """(units per leader node, units whose leader is unknown)."""
        by_node: dict[int, list[Unit]] = {}
        orphans: list[Unit] = []
        leader = self.metadata.leader
        for unit in units:
            node = leader(unit.topic, unit.partition)
            if node is None:
                orphans.append(unit)
            else:
                unit.node = node
                by_node.setdefault(node, []).append(unit)
        return by_node, orphans

    def send(self, node: int, units: list[Unit]) -> Future[Any]:
        """Encode ``units`` and send them to ``node`` in one Produce request.

        Raises:
            HmbError: the connection cannot be used (caller treats it like a failed send).
        """
        for unit in units:
            for b in unit.batches:
                b.attempts += 1
        versions = self.versions(node)
        metrics = self.metrics
        magic = produce_magic(versions.version(ApiKey.PRODUCE))
        topics: dict[str, list[tuple[int, bytes | bytearray]]] = {}
        idem = self.idem
        for unit in units:
            codec = self.codec_for(unit.topic)
            if magic == 2:
                seq = unit.batches[0].seq
                producer = (idem.producer_id, idem.epoch, seq) if idem is not None and seq >= 0 else _NO_PRODUCER
                records = encode_batches(
                    codec, [(b.values, b.keys, b.headers, b.created_ms) for b in unit.batches], 0, producer, self.batch_flags
                )
            else:
                records = encode_records(magic, codec, unit.items(), 0, unit.batches[0].created_ms)
            topics.setdefault(unit.topic, []).append((unit.partition, records))
        if metrics is not None:
            now = wall_ms()  # batches carry their wall-clock creation time (their timestamp)
            metrics.request(
                sum(unit.count for unit in units),
                [len(r) for parts in topics.values() for _, r in parts],
                [max(0, now - b.created_ms) for unit in units for b in unit.batches if b.attempts == 1],
            )
        if "before_send" in self.hooks:
            call_hook(self.hooks, "before_send", [b for unit in units for b in unit.batches], node)
        req = versions.build(
            ApiKey.PRODUCE,
            transactional_id=self.transactional_id,
            acks=self.acks,
            timeout_ms=self.request_timeout_ms,
            topics=list(topics.items()),
        )
        return self.client.send(
            node,
            req,
            timeout_ms=self.request_timeout_ms + 2_000,
            expect_response=self.acks != 0,
        )

    def apply(self, units: list[Unit], resp: Any, exc: BaseException | None) -> list[tuple[Unit, BaseException]]:
        """Complete the units a response acknowledged; return the failed ones with their error.

        A whole-request failure (``exc``) fails every unit with it.
        """
        failed: list[tuple[Unit, BaseException]] = []
        if exc is not None:
            if isinstance(exc, KafkaConnectionError) or getattr(exc, "invalid_metadata", False):
                for unit in units:
                    self.forget_node(unit.node)
            return [(unit, exc) for unit in units]
        if resp is None:  # acks=0: no answer, no offsets
            for unit in units:
                self._complete(unit, None)
            return failed
        answers: dict[tuple[str, int], Any] = {}
        for topic_answer in resp.topics:
            for answer in topic_answer.partitions:
                answers[(topic_answer.topic, answer.partition)] = answer
        for unit in units:
            answer = answers.get((unit.topic, unit.partition))
            if answer is None:
                failed.append((unit, UnknownTopicOrPartitionError(f"{unit.topic}-{unit.partition}: missing from the Produce answer")))
            elif answer.error_code == _DUPLICATE and self.idem is not None:
                # The broker holds this batch from an earlier attempt (too far back to know
                # its offset): delivered, once.
                base = answer.base_offset
                self._complete(unit, base if self.real_offsets and base is not None and base >= 0 else None)
            elif answer.error_code:
                failed.append((unit, for_code(answer.error_code)(f"produce to {unit.topic}-{unit.partition} (node {unit.node})")))
            else:
                self._complete(unit, answer.base_offset if self.real_offsets else None)
        return failed

    def _complete(self, unit: Unit, base: int | None) -> None:
        hook = self.hooks.get("on_delivery")
        for b in unit.batches:
            b.complete(base)
            if base is not None:
                base += len(b.values)
            if hook is not None:
                call_hook(self.hooks, "on_delivery", b)

    def fail(self, unit: Unit, err: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.failed(unit.count)
        for b in unit.batches:
            b.fail(err)
            call_hook(self.hooks, "on_error", b, err)


class SendEngine:
    """The one send engine, sync and async: drain ready units from the accumulator, send them
    (one Produce request per leader), apply the answers and decide each failure's fate (retry
    at the front of its partition's queue after a backoff, or fail). See the module docstring.

    Driven by :meth:`run`, in one thread at a time: the async producer's
    :class:`SenderThread`, or a sync ``send`` in its caller's thread (the producer holds a lock
    so that one caller drives while others wait their turn; each drives until its own batches
    are complete, completing anyone's on the way).
    """

    def __init__(
        self,
        acc: RecordAccumulator,
        dispatcher: Dispatcher,
        metadata: Metadata,
        policy: Retrying,
        *,
        max_retries: int,
        retry_backoff_ms: float,
        refresh_topics: Callable[[], None],
        idempotence: IdempotenceState | None = None,
        emit: Callable[[ProducerEvent], None] | None = None,
        transaction: TransactionManager | None = None,
    ) -> None:
        self.acc = acc
        self.dispatcher = dispatcher
        self.idem = idempotence
        dispatcher.idem = idempotence
        self.txn = transaction
        if transaction is not None:
            assert idempotence is not None, "a transactional producer is idempotent"
            dispatcher.transactional_id = transaction.transactional_id
            dispatcher.batch_flags = TRANSACTIONAL_MASK
        self.emit = emit
        self.metadata = metadata
        self.policy = policy
        self.max_retries = max_retries
        self.retry_backoff_ms = retry_backoff_ms
        self.refresh_topics = refresh_topics
        self.completions: deque[tuple[list[Unit], Any, BaseException | None]] = deque()
        self.in_flight = 0
        self._next_metadata_attempt = 0.0

    # called on the I/O thread
    def _on_done(self, units: list[Unit], fut: Future[Any]) -> None:
        exc = fut.exception()
        self.completions.append((units, None if exc is not None else fut.result(), exc))
        acc = self.acc
        with acc.lock:
            if acc.sender_waiting:
                acc.work.notify()

    def finished(self) -> bool:
        """The async sender's end (lock held): closing, and nothing queued or in flight."""
        return self.acc.closing and not self.acc.queued and not self.in_flight and not self.completions

    def run(self, done: Callable[[], bool], deadline_ms: float | None = None) -> None:
        """Drive the engine until ``done()`` (asked with the accumulator's lock held); with
        ``deadline_ms`` (monotonic), never sleep past it (``done`` decides what it means)."""
        acc = self.acc
        hooks = self.dispatcher.hooks
        after_batching = hooks.get("after_batching")
        while True:
            with acc.lock:
                while True:
                    if done():
                        return
                    now = monotonic_ms()
                    closed = acc.close_expired(now) if acc.lingering else []
                    identity_due = False
                    idem = self.idem
                    if idem is not None and idem.wanted:
                        # No identity yet, or a bump asked: nothing new goes out; once nothing
                        # is in flight, ask for one (see idempotence.py).
                        units: list[Unit] = []
                        wake = acc.linger_wake()
                        if acc.queued and not self.in_flight and not self.completions:
                            identity_due = now >= idem.retry_at
                            wake = min(wake, idem.retry_at)
                    else:
                        units, wake = acc.drain(now)
                    if units or closed or self.completions or identity_due or (acc.queued and self._metadata_due(now)):
                        break
                    acc.sender_wake_at = wake
                    acc.sender_waiting = True
                    timeout = None if wake == float("inf") else max(0.0, (wake - now) / 1000.0)
                    if deadline_ms is not None:
                        t1 = max(0.0, (deadline_ms - now) / 1000.0)
                        timeout = t1 if timeout is None else min(timeout, t1)
                    if self._metadata_wanted:
                        t2 = max(0.0, (self._next_metadata_attempt - now) / 1000.0)
                        timeout = t2 if timeout is None else min(timeout, t2)
                    acc.work.wait(timeout)
                    acc.sender_waiting = False
                    acc.sender_wake_at = float("inf")
            if after_batching is not None:
                for b in closed:
                    call_hook(hooks, "after_batching", b)
            while self.completions:
                self._complete(*self.completions.popleft())
            if acc.queued and self._metadata_due(monotonic_ms()):
                self._refresh_metadata()
            if identity_due:
                self._init_identity()
            if units:
                self._send(units)

    _metadata_wanted = False
    _metadata_failures = 0

    def _metadata_due(self, now: float) -> bool:
        if now < self._next_metadata_attempt:
            return False
        topics = list(self.acc.topics)
        self._metadata_wanted = bool(topics) and self.metadata.needs_refresh(topics, now)
        return self._metadata_wanted

    def _refresh_metadata(self) -> None:
        self._next_metadata_attempt = monotonic_ms() + self.retry_backoff_ms
        try:
            self.metadata.refresh(list(self.acc.topics), timeout_ms=self.dispatcher.request_timeout_ms)
            self.refresh_topics()
            self._metadata_failures = 0
        except HmbError as e:
            # Loud once per outage; the retries that follow are routine.
            self._metadata_failures += 1
            log.log(logging.WARNING if self._metadata_failures == 1 else logging.DEBUG, "metadata refresh failed: %s", e)
        self._metadata_wanted = False

    def _send(self, units: list[Unit]) -> None:
        if self.txn is not None:
            units = self._txn_gate(units)
        by_node, orphans = self.dispatcher.group_by_leader(units)
        for unit in orphans:
            self.metadata.invalidate(unit.topic)
            for b in unit.batches:
                b.attempts += 1
            err = LeaderNotAvailableError(f"{unit.topic}-{unit.partition}: no known leader")
            self._retry_or_fail(unit, err)
        idem = self.idem
        for node, node_units in by_node.items():
            if idem is not None:
                for unit in node_units:
                    if unit.batches[0].seq < 0:
                        self._sequence(unit, idem)
            try:
                fut = self.dispatcher.send(node, node_units)
            except HmbError as e:
                self.dispatcher.forget_node(node)
                for unit in node_units:
                    if getattr(e, "retriable", False):
                        self.metadata.invalidate(unit.topic)
                    self._retry_or_fail(unit, e)
                continue
            except Exception as e:  # encoding failed: a bad message, not a broker problem
                for unit in node_units:
                    self._retry_or_fail(unit, e)
                continue
            self.in_flight += 1
            fut.add_done_callback(functools.partial(self._on_done, node_units))

    def _complete(self, units: list[Unit], resp: Any, exc: BaseException | None) -> None:
        self.in_flight -= 1
        failed = self.dispatcher.apply(units, resp, exc)
        failed_ids = {id(unit) for unit, _ in failed}
        acc = self.acc
        with acc.lock:
            for unit in units:
                if id(unit) not in failed_ids:
                    acc.release(unit)
        for unit, err in failed:
            if getattr(err, "invalid_metadata", False) or isinstance(err, KafkaConnectionError):
                self.metadata.invalidate(unit.topic)
            if isinstance(err, _MAYBE_STORED):
                for b in unit.batches:
                    b.maybe_stored = True
            self._retry_or_fail(unit, err)

    def _retry_or_fail(self, unit: Unit, err: BaseException) -> None:
        attempts = max(b.attempts for b in unit.batches)
        acc = self.acc
        idem = self.idem
        head = unit.batches[0]
        sequenced = idem is not None and head.seq >= 0
        if sequenced and isinstance(err, _STATE_LOST) and self.txn is None:
            # The broker refused the batch (so it stored nothing of this attempt) because its
            # state for us differs from ours: bump, then re-sequence or fail what is queued.
            assert idem is not None
            idem.ask_bump(f"{type(err).__name__} for {unit.topic}-{unit.partition}")
            if attempts <= self.max_retries and not acc.closing_hard:
                with acc.lock:
                    acc.requeue_front(unit, 0.0)
                return
        if sequenced and isinstance(err, _TOO_LARGE) and len(unit.batches) > 1 and not head.maybe_stored:
            # Not stored: give the sequences back, then split as below.
            assert idem is not None
            idem.rewind(unit.topic, unit.partition, head.seq)
            for b in unit.batches:
                b.seq = -1
                b.wire = None
        if isinstance(err, _TOO_LARGE) and len(unit.batches) > 1 and head.seq < 0:
            # The broker found the merged record set too large: undo the merge, send the
            # batches one by one (same order, at once; this does not use up a retry).
            log.info("%s-%s: %d merged batches too large for the broker; sending them one by one", unit.topic, unit.partition, len(unit.batches))
            for b in unit.batches:
                b.solo = True
                b.attempts -= 1
            with acc.lock:
                acc.requeue_front(unit, 0.0)
            return
        if getattr(err, "retriable", False) and attempts <= self.max_retries and not acc.closing_hard:
            wait = backoff_ms(self.policy, max(1, attempts))
            log.info("retrying %s-%s (%d messages, attempt %d) in %.0f ms: %s", unit.topic, unit.partition, unit.count, attempts, wait, err)
            if self.dispatcher.metrics is not None:
                self.dispatcher.metrics.retried(unit.count)
            with acc.lock:
                acc.requeue_front(unit, monotonic_ms() + wait)
            return
        log.warning("giving up on %s-%s (%d messages) after %d attempts: %s", unit.topic, unit.partition, unit.count, attempts, err)
        if sequenced and not head.maybe_stored:
            assert idem is not None
            idem.rewind(unit.topic, unit.partition, head.seq)
        if self.txn is not None:
            self.txn.fail(err)  # (T4) the transaction cannot commit any more
        self.dispatcher.fail(unit, err)
        with acc.lock:
            acc.release(unit)

    # -- idempotence (the state and its contract: idempotence.py) ---------------------------

    @staticmethod
    def _sequence(unit: Unit, idem: IdempotenceState) -> None:
        """A unit sent for the first time gets its sequences; its batches become one group."""
        base = idem.assign(unit.topic, unit.partition, unit.count)
        group = unit.batches
        for b in group:
            b.seq = base
            b.wire = group
            base = (base + len(b.values)) & 0x7FFFFFFF

    def _event(self, kind: str, reason: str, count: int = 0) -> None:
        idem = self.idem
        event = ProducerEvent(kind, idem.producer_id if idem else -1, idem.epoch if idem else -1, reason, count)
        if self.emit is not None:
            try:
                self.emit(event)
            except Exception:
                log.exception("producer event listener failed")

    def _init_identity(self) -> None:
        """InitProducerId (nothing in flight): the first identity, or a bump. Then every
        queued batch with an old sequence is re-sequenced later or, if the broker may hold
        it, failed with UnresolvedSequenceError."""
        idem = self.idem
        assert idem is not None
        client = self.dispatcher.client
        first = idem.producer_id == -1
        try:
            node = client.least_loaded_node()
            versions = self.dispatcher.versions(node)
            if versions.version(ApiKey.PRODUCE) < 3 or not versions.has(ApiKey.INIT_PRODUCER_ID):
                raise UnsupportedByBroker(
                    f"broker {node} speaks Produce v{versions.version(ApiKey.PRODUCE)}"
                    f"{'' if versions.has(ApiKey.INIT_PRODUCER_ID) else ' and no InitProducerId'}: "
                    "enable.idempotence needs Kafka 0.11+ (RecordBatch v2)"
                )
            fields = idem.bump_fields()
            ranges = versions.ranges
            if ranges is not None and ranges.get(ApiKey.INIT_PRODUCER_ID, (0, 0))[1] >= 3:
                # KIP-360: v3 with the current id/epoch bumps the epoch (see admin.py).
                request: Any = InitProducerIdV3Request(transaction_timeout_ms=_IDEMPOTENT_TIMEOUT_MS, **fields)
                resp = client.call(node, lambda v: request, timeout_ms=self.dispatcher.request_timeout_ms)
                if resp.error_code and fields["producer_id"] >= 0 and not for_code(resp.error_code).retriable:
                    # A broker that will not bump (Tansu answers UNKNOWN_SERVER_ERROR): a new id
                    # serves an idempotent producer as well.
                    log.info("InitProducerId epoch bump refused (error %d); asking for a new producer id", resp.error_code)
                    request = InitProducerIdV3Request(transaction_timeout_ms=_IDEMPOTENT_TIMEOUT_MS)
                    resp = client.call(node, lambda v: request, timeout_ms=self.dispatcher.request_timeout_ms)
            else:  # v0-1: no id/epoch to give; the broker issues a new producer id
                resp = client.call(
                    node,
                    lambda v: v.build(ApiKey.INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=_IDEMPOTENT_TIMEOUT_MS),
                    timeout_ms=self.dispatcher.request_timeout_ms,
                )
            if resp.error_code:
                raise for_code(resp.error_code)(f"InitProducerId (node {node})")
        except UnsupportedByBroker as e:
            if idem.explicit:
                self._fail_queued(e)
                idem.retry_at = monotonic_ms() + self.retry_backoff_ms
                return
            log.info("idempotence off: %s", e)
            self.idem = self.dispatcher.idem = None
            self._event(IDEMPOTENCE_OFF, str(e))
            return
        except HmbError as e:
            if not getattr(e, "retriable", False) and not isinstance(e, KafkaConnectionError):
                log.warning("InitProducerId failed: %s; failing the queued messages", e)
                self._fail_queued(e)
            else:
                log.info("InitProducerId failed, retrying: %s", e)
            idem.retry_at = monotonic_ms() + max(self.retry_backoff_ms, 1)
            return
        reason = idem.reason
        idem.reset(resp.producer_id, resp.producer_epoch)
        acc = self.acc
        with acc.lock:
            unresolved = acc.remove_ready(lambda b: b.seq >= 0 and b.maybe_stored)
            for b in acc.ready_batches():
                b.seq = -1
                b.wire = None
        if first:
            log.info("idempotent producer: producer id %d, epoch %d", idem.producer_id, idem.epoch)
            self._event(PRODUCER_ID_ASSIGNED, reason)
        else:
            log.warning("idempotent producer: new producer id %d / epoch %d after %s", idem.producer_id, idem.epoch, reason)
            self._event(PRODUCER_ID_RENEWED, reason)
        if unresolved:
            err = UnresolvedSequenceError(
                f"the broker's producer state was lost ({reason}) while this batch's answer was unknown; "
                "not sent again so that it cannot be stored twice (it is stored once or not at all)"
            )
            hooks = self.dispatcher.hooks
            for b in unresolved:
                b.fail(err)
                call_hook(hooks, "on_error", b, err)
            log.warning("idempotent producer: %d batches (%d messages) failed: %s", len(unresolved), sum(len(b.values) for b in unresolved), err)
            self._event(BATCHES_UNRESOLVED, reason, sum(len(b.values) for b in unresolved))

    # -- transactions (the state and its cases: transaction.py) -------------------------------

    def _give_up(self, unit: Unit, err: BaseException) -> None:
        """Fail a unit that was never sent (its sequences were never assigned)."""
        self.dispatcher.fail(unit, err)
        with self.acc.lock:
            self.acc.release(unit)

    def _txn_gate(self, units: list[Unit]) -> list[Unit]:
        """The units that may go out now: (T4) none unless the transaction is sending; (T3)
        only those whose partition is in the transaction (the others are added first)."""
        txn = self.txn
        assert txn is not None
        if not txn.sending:
            err = txn.unsent_error()
            for unit in units:
                self._give_up(unit, err)
            return []
        missing = txn.missing((u.topic, u.partition) for u in units)
        if missing:
            try:
                self._add_partitions(missing)
            except HmbError as e:
                if classify(e) == RETRY and monotonic_ms() - txn.started_ms < txn.timeout_ms:
                    log.info("AddPartitionsToTxn %s: %s; retrying", missing, e)
                    retry_at = monotonic_ms() + min(backoff_ms(self.policy, 1), _TXN_RETRY_MS)
                    keep = []
                    with self.acc.lock:
                        for unit in units:
                            if (unit.topic, unit.partition) in txn.partitions:
                                keep.append(unit)
                            else:
                                self.acc.requeue_front(unit, retry_at)
                    return keep
                log.warning("AddPartitionsToTxn %s failed: %s", missing, e)
                txn.fail(e)
        if not txn.sending:
            err = txn.unsent_error()
            for unit in units:
                self._give_up(unit, err)
            return []
        return units

    def _txn_call(self, build: Callable[[BrokerVersions], Any], what: str) -> Any:
        """One request to the transaction coordinator (found first: FindCoordinator key_type 1).

        Raises:
            HmbError: a lost connection, or the answer's top-level error (the coordinator is
                forgotten when it moved).
        """
        txn = self.txn
        assert txn is not None
        client = self.dispatcher.client
        timeout = self.dispatcher.request_timeout_ms
        node = txn.coordinator
        if node is None:
            node = find_coordinator(client, txn.transactional_id, 1, timeout)
            txn.coordinator = node
        try:
            resp = client.call(node, build, timeout_ms=timeout)
        except (KafkaConnectionError, RequestTimedOutError):
            txn.coordinator = None
            raise
        code = getattr(resp, "error_code", 0)
        if code:
            if code in COORDINATOR_MOVED:
                txn.coordinator = None
            raise for_code(code)(f"{what} (transactional id {txn.transactional_id!r}, coordinator {node})")
        return resp

    def _txn_retrying(self, fn: Callable[[], Any], deadline_ms: float | None) -> Any:
        """``fn()`` retried while its error classifies RETRY, until ``deadline_ms``."""
        left = None if deadline_ms is None else max(0.0, deadline_ms - monotonic_ms())
        policy = retry_policy(
            max_retries=1 << 30,
            backoff_ms=max(1.0, min(self.retry_backoff_ms, _TXN_RETRY_MS)),
            deadline_ms=left,
            retry_on=lambda e: classify(e) == RETRY,
        )
        return policy(fn)

    def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        """(T3) AddPartitionsToTxn; the partitions it accepted join ``txn.partitions``."""
        txn = self.txn
        idem = self.idem
        assert txn is not None and idem is not None
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        resp = self._txn_call(
            lambda v: v.build(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                transactional_id=txn.transactional_id,
                producer_id=idem.producer_id,
                producer_epoch=idem.epoch,
                topics=list(by_topic.items()),
            ),
            "AddPartitionsToTxn",
        )
        first: BaseException | None = None
        for topic in resp.results:
            for r in topic.results:
                if not r.error_code:
                    txn.partitions.add((topic.topic, r.partition))
                elif r.error_code != ErrorCode.OPERATION_NOT_ATTEMPTED or first is None:
                    err = for_code(r.error_code)(f"AddPartitionsToTxn {topic.topic}-{r.partition}")
                    if first is None or getattr(first, "errno", 0) == ErrorCode.OPERATION_NOT_ATTEMPTED:
                        first = err
        if first is not None:
            raise first

    def txn_init(self, deadline_ms: float | None) -> None:
        """(T1) InitProducerId with the transactional id, through its coordinator.

        Raises:
            HmbError: the coordinator's refusal, or the last retriable error at the deadline.
        """
        txn = self.txn
        idem = self.idem
        assert txn is not None and idem is not None

        def attempt() -> Any:
            return self._txn_call(
                lambda v: v.build(
                    ApiKey.INIT_PRODUCER_ID,
                    transactional_id=txn.transactional_id,
                    transaction_timeout_ms=txn.timeout_ms,
                ),
                "InitProducerId",
            )

        resp = self._txn_retrying(attempt, deadline_ms)
        with self.acc.lock:
            idem.reset(resp.producer_id, resp.producer_epoch)
        log.info("transactional producer %r: producer id %d, epoch %d", txn.transactional_id, resp.producer_id, resp.producer_epoch)
        self._event(PRODUCER_ID_ASSIGNED, f"init_transactions({txn.transactional_id!r})")

    def txn_add_offsets(self, group_id: str, offsets: dict[tuple[str, int], tuple[int, str | None]], deadline_ms: float | None) -> None:
        """(T5) AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator.

        Raises:
            HmbError: the first error that is not retriable, or the last one at the deadline.
        """
        txn = self.txn
        idem = self.idem
        assert txn is not None and idem is not None
        if not txn.offsets_added:
            self._txn_retrying(
                lambda: self._txn_call(
                    lambda v: v.build(
                        ApiKey.ADD_OFFSETS_TO_TXN,
                        transactional_id=txn.transactional_id,
                        producer_id=idem.producer_id,
                        producer_epoch=idem.epoch,
                        group_id=group_id,
                    ),
                    "AddOffsetsToTxn",
                ),
                deadline_ms,
            )
            txn.offsets_added = True
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), (off, meta) in sorted(offsets.items()):
            by_topic.setdefault(t, []).append({"partition": p, "offset": off, "committed_leader_epoch": -1, "metadata": meta})
        client = self.dispatcher.client
        timeout = self.dispatcher.request_timeout_ms
        group_node: list[int | None] = [None]

        def commit() -> None:
            node = group_node[0]
            if node is None:
                node = group_node[0] = find_coordinator(client, group_id, 0, timeout)
            try:
                resp = client.call(
                    node,
                    lambda v: v.build(
                        ApiKey.TXN_OFFSET_COMMIT,
                        transactional_id=txn.transactional_id,
                        group_id=group_id,
                        producer_id=idem.producer_id,
                        producer_epoch=idem.epoch,
                        topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                    ),
                    timeout_ms=timeout,
                )
            except (KafkaConnectionError, RequestTimedOutError):
                group_node[0] = None
                raise
            for topic in resp.topics:
                for r in topic.partitions:
                    if r.error_code:
                        if r.error_code in COORDINATOR_MOVED:
                            group_node[0] = None
                        raise for_code(r.error_code)(f"TxnOffsetCommit {topic.topic}-{r.partition} for group {group_id!r}")

        self._txn_retrying(commit, deadline_ms)

    def txn_end(self, committed: bool, deadline_ms: float | None) -> None:
        """(T6) EndTxn: the coordinator writes the markers and completes the transaction.

        Raises:
            HmbError: the coordinator's refusal, or the last retriable error at the deadline.
        """
        txn = self.txn
        idem = self.idem
        assert txn is not None and idem is not None
        self._txn_retrying(
            lambda: self._txn_call(
                lambda v: v.build(
                    ApiKey.END_TXN,
                    transactional_id=txn.transactional_id,
                    producer_id=idem.producer_id,
                    producer_epoch=idem.epoch,
                    committed=committed,
                ),
                "EndTxn(commit)" if committed else "EndTxn(abort)",
            ),
            deadline_ms,
        )

    def _fail_queued(self, err: BaseException) -> None:
        """Fail every ready batch (no identity can be had for them)."""
        acc = self.acc
        with acc.lock:
            failed: list[ProducerBatch] = acc.remove_ready(lambda b: True)
        hooks = self.dispatcher.hooks
        for b in failed:
            b.fail(err)
            call_hook(hooks, "on_error", b, err)

    def abort(self, err: BaseException) -> None:
        """Fail everything still queued with ``err`` (the driver is gone)."""
        self.acc.fail_all(err)


class SenderThread(threading.Thread):
    """The async producer's background sender: runs the :class:`SendEngine` until the
    accumulator is closing and empty."""

    def __init__(self, engine: SendEngine) -> None:
        super().__init__(name="hmbclient-producer-sender", daemon=True)
        self.engine = engine
        self.stopped = threading.Event()

    def run(self) -> None:
        engine = self.engine
        try:
            engine.run(engine.finished)
        except BaseException:  # pragma: no cover - a bug: fail loudly, release callers
            log.exception("producer sender thread crashed")
            engine.abort(KafkaConnectionError("producer sender thread crashed; see the log"))
        finally:
            self.stopped.set()
