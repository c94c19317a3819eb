"""Transaction markers (KIP-98): writing them on a partition leader, and the coordinator's
sender that has every leader of a decided transaction write them.

:class:`MarkerWriter` serves WriteTxnMarkers (from any coordinator, this broker's own
included): each marker becomes one control batch (the transaction's producer id and epoch,
COMMIT or ABORT, the coordinator epoch) appended with acks=-1 to each named partition this
broker leads, as a coordinator's append (``origin="coordinator"``: the log accepts control
batches only so). A marker that reaches a ``__consumer_offsets`` partition completes the
producer's pending transactional offset commits there (the offset manager's
``complete_txn``). Per-partition errors are the append's (NOT_LEADER_FOR_PARTITION,
INVALID_PRODUCER_EPOCH for a marker older than the producer's epoch, ...).

:class:`MarkerSender` is one thread of the coordinator. It keeps every transaction whose
markers are not all written (:class:`~.state.SendMarkers`, with its partitions still to do)
and, until none is left:

* Case A: a partition the metadata does not know (yet: a broker starting up learns its
  topics after the coordinator may have loaded a decided transaction) or with no leader now
  waits for the next round, as Kafka's unknown-partition queue does (topics are never deleted
  here).
* Case B: the partitions led by this broker are written through the :class:`MarkerWriter`
  directly; the others go in one WriteTxnMarkers v0 per leader over the inter-broker channel.
* Case C: NONE is done; INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED are done too
  (the partition already has a newer marker of that producer: the transaction was decided
  again since); any other error (not leader, not enough replicas, a lost connection) is
  retried after ``backoff_s``.
* Case D: done partitions are reported to the coordinator (``report``), which writes
  Complete* once all are; ``report`` answering False (the coordinator lost the id's
  partition, or a newer coordinator epoch took over) drops the transaction here. Each round
  asks first (an empty report), so a job whose partitions keep failing is not retried for a
  coordinator that no longer owns it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from hmbclient.broker.metadata import OFFSETS_TOPIC
from hmbclient.broker.results import AppendResult
from hmbclient.clock import wall_ms
from hmbclient.errors import ErrorCode, HmbError
from hmbclient.protocol.api.txn import WriteTxnMarkersRequest
from hmbclient.protocol.records.control import ControlType, EndTxnMarker, encode_control_batch

from .state import SendMarkers

__all__ = ["MarkerWriter", "MarkerSender", "MARKER_TIMEOUT_MS"]

log = logging.getLogger(__name__)

#: how long a marker append waits for the ISR (Kafka: request.timeout.ms of the coordinator)
MARKER_TIMEOUT_MS = 30_000

TopicPartition = tuple[str, int]
#: (producer id, producer epoch, committed, coordinator epoch, partitions)
Marker = tuple[int, int, bool, int, list[TopicPartition]]
#: per marker, in request order: (producer id, {partition: error code})
MarkerResults = list[tuple[int, dict[TopicPartition, int]]]

_DONE = (ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED)


class MarkerWriter:
    """Writes markers to the partitions this broker leads.

    Args:
        replica_manager: appends (acks=-1, coordinator origin).
        offsets: the offset manager (``complete_txn(partition, producer_id, committed)``);
            None: no transactional offsets here.
    """

    def __init__(self, replica_manager: Any, offsets: Any = None) -> None:
        self.rm = replica_manager
        self.offsets = offsets

    def write(self, markers: list[Marker], respond: Callable[[MarkerResults], None], timeout_ms: int = MARKER_TIMEOUT_MS) -> None:
        """Append every marker; ``respond`` once all are answered (maybe on another thread)."""
        out: MarkerResults = [(m[0], {}) for m in markers]
        left = [len(markers)]
        lock = threading.Lock()
        if not markers:
            respond(out)
            return

        def one(i: int, m: Marker) -> None:
            pid, epoch, committed, coordinator_epoch, tps = m

            def appended(results: dict[TopicPartition, AppendResult]) -> None:
                codes = {tp: (results[tp].error_code if tp in results else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for tp in tps}
                if self.offsets is not None:
                    for (topic, p), code in codes.items():
                        if topic == OFFSETS_TOPIC and code == ErrorCode.NONE:
                            self.offsets.complete_txn(p, pid, committed)
                with lock:
                    out[i] = (pid, codes)
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    respond(out)

            marker = EndTxnMarker(ControlType.COMMIT if committed else ControlType.ABORT, coordinator_epoch)
            now = wall_ms()
            try:
                batch = encode_control_batch(pid, epoch, marker, timestamp_ms=now)
            except ValueError:  # a producer id or epoch that cannot be in a batch
                appended({tp: AppendResult(ErrorCode.INVALID_REQUEST, -1, -1) for tp in tps})
                return
            entries = [(topic, p, batch) for topic, p in tps]
            if not entries:
                appended({})
                return
            self.rm.append_messages(timeout_ms, -1, entries, appended, allow_internal=True, origin="coordinator")

        for i, m in enumerate(markers):
            one(i, m)

    def handle_write_txn_markers(self, header: Any, req: Any, channel: Any) -> None:
        """WriteTxnMarkers v0 (the ClusterAction check is the authorizer's, before this)."""
        resp_cls = type(req).RESPONSE_TYPE
        markers: list[Marker] = []
        for m in req.markers:
            tps = [(t.topic, p) for t in m.topics for p in t.partitions]
            markers.append((m.producer_id, m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch, tps))

        def respond(results: MarkerResults) -> None:
            out = []
            for pid, codes in results:
                by_topic: dict[str, list[tuple[int, int]]] = {}
                for (topic, p), code in codes.items():
                    by_topic.setdefault(topic, []).append((p, code))
                out.append((pid, list(by_topic.items())))
            channel.send(resp_cls.build(markers=out))

        self.write(markers, respond)


class _Job:
    """One transaction's markers still to write."""

    def __init__(self, e: SendMarkers) -> None:
        self.e = e
        self.left: set[TopicPartition] = set(e.partitions)


class MarkerSender:
    """The coordinator's marker thread (the module's Cases A-D).

    Args:
        broker_id: this broker.
        metadata: the metadata cache (partition leaders, broker endpoints, topics).
        writer: writes the markers of the partitions this broker leads.
        channel_for: a BrokerChannel to a broker id on the inter-broker listener (None if
            unknown).
        report: ``report(send_markers, done_partitions) -> still wanted``.
        backoff_s: wait between rounds while markers remain.
        request_timeout_s: bound of one WriteTxnMarkers exchange (and a local write).
    """

    def __init__(
        self,
        broker_id: int,
        metadata: Any,
        writer: MarkerWriter,
        channel_for: Callable[[int], Any],
        report: Callable[[SendMarkers, set[TopicPartition]], bool],
        *,
        backoff_s: float = 0.1,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.writer = writer
        self.channel_for = channel_for
        self.report = report
        self.backoff_s = backoff_s
        self.request_timeout_s = request_timeout_s
        self._jobs: list[_Job] = []
        self._cond = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self._channels: dict[int, Any] = {}

    def start(self, name: str = "txn-markers") -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        with self._cond:
            self._running = False
            self._cond.notify_all()
        # Shut the channels first: a WriteTxnMarkers blocked on a slow broker ends now, so the
        # join below does not wait for its request timeout.
        for ch in list(self._channels.values()):
            ch.shutdown()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for ch in list(self._channels.values()):
            ch.close()
        self._channels.clear()

    def add(self, e: SendMarkers) -> None:
        with self._cond:
            self._jobs.append(_Job(e))
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._jobs:
                    self._cond.wait()
                if not self._running:
                    return
                jobs = list(self._jobs)
            try:
                self._round(jobs)
            except Exception:
                log.exception("transaction marker round failed")
            with self._cond:
                self._jobs = [j for j in self._jobs if j.left]
                if self._jobs and self._running:
                    self._cond.wait(self.backoff_s)

    def _round(self, jobs: list[_Job]) -> None:
        by_leader: dict[int, list[tuple[_Job, list[TopicPartition]]]] = {}
        done: dict[int, set[TopicPartition]] = {}
        for j in jobs:
            if not self.report(j.e, set()):  # Case D: no longer this coordinator's to end
                j.left = set()
                continue
            mine: dict[int, list[TopicPartition]] = {}
            for tp in sorted(j.left):
                leader = self.metadata.leader(*tp)
                if leader is None or leader < 0:  # Case A
                    continue
                mine.setdefault(leader, []).append(tp)
            for leader, tps in mine.items():
                by_leader.setdefault(leader, []).append((j, tps))
        for leader, items in by_leader.items():
            markers: list[Marker] = [(j.e.producer_id, j.e.producer_epoch, j.e.committed, j.e.coordinator_epoch, tps) for j, tps in items]
            results = self._local(markers) if leader == self.broker_id else self._remote(leader, markers)  # Case B
            for (j, _tps), (_pid, codes) in zip(items, results, strict=True):
                for tp, code in codes.items():
                    if code in _DONE:  # Case C
                        if code != ErrorCode.NONE:
                            log.info("marker of %s for %s-%d: %s (counted as written)", j.e.transactional_id, tp[0], tp[1], ErrorCode(code).name)
                        done.setdefault(id(j), set()).add(tp)
                    else:
                        log.debug("marker of %s for %s-%d: %s, retrying", j.e.transactional_id, tp[0], tp[1], code)
        for j in jobs:  # Case D
            finished = done.get(id(j))
            if not finished:
                continue
            j.left -= finished
            if not self.report(j.e, finished):
                j.left = set()

    def _local(self, markers: list[Marker]) -> MarkerResults:
        box: list[MarkerResults] = []
        ev = threading.Event()

        def respond(results: MarkerResults) -> None:
            box.append(results)
            ev.set()

        self.writer.write(markers, respond)
        if not ev.wait(self.request_timeout_s + 1):
            return [(m[0], {tp: ErrorCode.REQUEST_TIMED_OUT for tp in m[4]}) for m in markers]
        return box[0]

    def _remote(self, leader: int, markers: list[Marker]) -> MarkerResults:
        failed: MarkerResults = [(m[0], {tp: ErrorCode.NETWORK_EXCEPTION for tp in m[4]}) for m in markers]
        if not self._running:  # shutting down: no new connection the shutdown cannot see
            return failed
        ch = self._channels.get(leader)
        if ch is None:
            ch = self.channel_for(leader)
            if ch is None:
                return failed
            self._channels[leader] = ch
        req = WriteTxnMarkersRequest[0].build(
            markers=[(pid, epoch, committed, _by_topic(tps), cepoch) for pid, epoch, committed, cepoch, tps in markers]
        )
        try:
            resp = ch.request(req, self.request_timeout_s)
        except HmbError as e:
            log.info("WriteTxnMarkers to broker %d: %s", leader, e)
            ch.close()
            self._channels.pop(leader, None)
            return failed
        out: MarkerResults = []
        answered = list(resp.markers)
        for i, m in enumerate(markers):
            codes = {tp: int(ErrorCode.UNKNOWN_SERVER_ERROR) for tp in m[4]}
            if i < len(answered):
                for t in answered[i].topics:
                    for p in t.partitions:
                        codes[(t.topic, p.partition)] = p.error_code
            out.append((m[0], codes))
        return out


def _by_topic(tps: list[TopicPartition]) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for topic, p in tps:
        out.setdefault(topic, []).append(p)
    return list(out.items())
