"""Replica fetchers: a follower's threads that copy its leaders' logs (Kafka's
``ReplicaFetcherThread``), one thread per leader broker.

Each followed partition goes through two states, set in one place (``_PartitionFetch.state``):

    TRUNCATING --(OffsetForLeaderEpoch answered, log truncated)--> FETCHING
    FETCHING   --(OFFSET_OUT_OF_RANGE)--> TRUNCATING

Truncation (KIP-101, with KIP-279's fix): the follower asks the leader for the end offset of
the follower's latest leader epoch. The leader answers ``(epoch, end offset)`` with the largest
epoch it knows that is not above the one asked. If that epoch is the one asked, the follower
truncates to ``min(end offset, its LEO)``; if it is older, the follower looks up the end of that
same epoch in its own cache and truncates to the smaller of the two ends. Truncating by epoch
instead of by the high watermark is what keeps a follower from throwing away acknowledged
messages that a leader change left only in its log (KIP-101 scenario 1) and from keeping a
divergent tail (scenario 2). A follower with no epoch in its cache (empty log, or only legacy
v0/v1 messages, which carry no epoch) truncates to its high watermark, as Kafka does.

Fetching: Fetch v5 with ``replica_id`` = this broker, from each partition's log end, with its
log start (the leader's low watermark for DeleteRecords); ``append_as_follower`` adds whole
entries and learns epochs from the batches; the follower's HW becomes ``min(leader's HW, own
LEO)`` and its log start the leader's (capped at that HW; segments below it are deleted and
the start checkpointed before the next fetch reports it). A leader whose log starts after the
follower's LEO (retention, DeleteRecords) makes the follower start over at the leader's log
start.

Throttling (``broker.replication_quota``): a partition whose replica here is throttled
(``follower.replication.throttled.replicas``) and not in the ISR is left out of the fetch while
the follower's rate is over ``follower.replication.throttled.rate``; what it gets is recorded.

Errors: a lost connection or an error code backs off ``replica.fetch.backoff.ms`` and retries;
a write the disk refuses (full, I/O error: nothing was written) backs off and fetches the same
offset again, without truncating (logged once until a write succeeds); fetched bytes that fail
validation send the partition back to TRUNCATING;
a partition whose leader says it is not the leader waits for the controller's next
LeaderAndIsr, which moves it to another fetcher.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from hmbclient.broker.channel import BrokerChannel, ChannelSecurity
from hmbclient.broker.metadata import BrokerEndpoint
from hmbclient.broker.partition import Partition, Role
from hmbclient.errors import CorruptRecordError, ErrorCode, HmbError, StorageError
from hmbclient.protocol.api import FetchRequest, ListOffsetsRequest
from hmbclient.protocol.api.cluster import OffsetForLeaderEpochRequest

if TYPE_CHECKING:
    from hmbclient.broker.replica_manager import ReplicaManager

__all__ = ["ReplicaFetcherManager", "FetchState", "Truncation", "truncation_offset"]

log = logging.getLogger("hmbclient.broker.replica_fetcher")

TP = tuple[str, int]
_EARLIEST = -2
_LATEST = -1


class EpochLookup(Protocol):
    """The follower's leader-epoch cache, as the truncation rule reads it."""

    @property
    def latest_epoch(self) -> int: ...

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...


class Truncation(NamedTuple):
    """Where a follower truncates, and whether that is final or only a step (KIP-279: ask again
    for the follower's new latest epoch)."""

    offset: int
    final: bool


def truncation_offset(epochs: EpochLookup, log_end_offset: int, high_watermark: int, leader_epoch: int, leader_end_offset: int) -> Truncation:
    """Where a follower truncates, given the leader's OffsetForLeaderEpoch answer
    ``(leader_epoch, leader_end_offset)`` to the follower's latest epoch (pure; KIP-101/279).

    Case A: the leader knows no epoch at or below ours (``-1``): nothing we have is known to be
            the leader's; keep what was committed (our high watermark).
    Case B: the leader answered for our own latest epoch: truncate to its end of that epoch (or
            keep our log if it is shorter). Final.
    Case C: the leader answered an older epoch (our latest was never the leader's): our logs
            agree at most up to the end of that older epoch in both logs. If we have that very
            epoch, this is final; if not, our end of the largest epoch below it is only a step:
            after truncating there, ask again for our (now older) latest epoch. Each step drops
            at least our latest epoch, so the rounds end.
    Case D: we have no epoch at or below the leader's answer: fall back to our high watermark.
    """
    if leader_epoch < 0 or leader_end_offset < 0:  # Case A
        return Truncation(min(high_watermark, log_end_offset), True)
    target = min(leader_end_offset, log_end_offset)  # Case B
    if leader_epoch < epochs.latest_epoch:  # Case C
        own_epoch, own_end = epochs.end_offset_for(leader_epoch, log_end_offset)
        if own_end < 0:  # Case D
            return Truncation(min(target, high_watermark), True)
        return Truncation(min(target, own_end), own_epoch == leader_epoch)
    return Truncation(target, True)


class FetchState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"


@dataclass
class _PartitionFetch:
    partition: Partition
    leader_epoch: int
    state: FetchState = FetchState.TRUNCATING
    #: the last append was refused by the disk (logged once until one succeeds)
    storage_error: bool = False


class _FetcherThread:
    """Fetches every partition this broker follows from one leader."""

    def __init__(self, manager: ReplicaFetcherManager, leader: BrokerEndpoint) -> None:
        self.manager = manager
        self.leader = leader
        rm = manager.replica_manager
        self.channel = BrokerChannel(leader.host, leader.port, f"broker-{rm.broker_id}-fetcher-{leader.node_id}", security=manager.security)
        self.parts: dict[TP, _PartitionFetch] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"broker-{rm.broker_id}-replica-fetcher-{leader.node_id}", daemon=True)

    def add(self, partitions: Iterable[Partition]) -> None:
        with self.lock:
            for p in partitions:
                self.parts[p.tp] = _PartitionFetch(p, p.leader_epoch)

    def remove(self, tps: Iterable[TP]) -> None:
        with self.lock:
            for tp in tps:
                self.parts.pop(tp, None)

    def empty(self) -> bool:
        with self.lock:
            return not self.parts

    def _snapshot(self) -> list[_PartitionFetch]:
        with self.lock:
            return list(self.parts.values())

    def _still_mine(self, pf: _PartitionFetch) -> bool:
        with self.lock:
            return self.parts.get(pf.partition.tp) is pf and pf.partition.role is Role.FOLLOWER

    def _backoff(self) -> None:
        self.stop_event.wait(self.manager.backoff_ms / 1000.0)

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                parts = self._snapshot()
                if not parts:
                    self.stop_event.wait(0.05)
                    continue
                try:
                    truncating = [pf for pf in parts if pf.state is FetchState.TRUNCATING]
                    if truncating:
                        self._truncate(truncating)
                    fetching = [pf for pf in parts if pf.state is FetchState.FETCHING]
                    if fetching:
                        self._fetch(fetching)
                    elif truncating:
                        # Every truncation was refused (e.g. the leader is not on our epoch yet):
                        # pause before asking again instead of spinning.
                        self._backoff()
                    else:
                        self.stop_event.wait(0.05)
                except HmbError as e:
                    if not self.stop_event.is_set():
                        log.info("fetcher from broker %d: %s; retrying", self.leader.node_id, e)
                        self.channel.close()
                        self._backoff()
                except Exception:
                    log.exception("fetcher from broker %d failed; retrying", self.leader.node_id)
                    self.channel.close()
                    self._backoff()
        finally:
            self.channel.close()

    # -- truncation ------------------------------------------------------------------------------
    def _truncate(self, parts: list[_PartitionFetch]) -> None:
        ask: list[_PartitionFetch] = []
        for pf in parts:
            if pf.partition.log.leader_epochs.latest_epoch < 0:
                # No epoch known (an empty log, or legacy messages only): the high watermark is
                # the best this follower knows to be committed.
                self._truncate_to(pf, pf.partition.log.high_watermark, "no leader epoch known: to the high watermark")
            else:
                ask.append(pf)
        if not ask:
            return
        topics: dict[str, list[tuple[int, int, int]]] = {}
        for pf in ask:
            p = pf.partition
            topics.setdefault(p.topic, []).append((p.partition, pf.leader_epoch, p.log.leader_epochs.latest_epoch))
        req = OffsetForLeaderEpochRequest[3](
            replica_id=self.manager.replica_manager.broker_id,
            topics=[(t, [(part, current, latest) for part, current, latest in ps]) for t, ps in topics.items()],
        )
        resp = self.channel.request(req, self.manager.request_timeout_s)
        answers = {(t.topic, p.partition): p for t in resp.topics for p in t.partitions}
        for pf in ask:
            a = answers.get(pf.partition.tp)
            if a is None or a.error_code:
                code = a.error_code if a is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                log.info("%s-%d: OffsetForLeaderEpoch from broker %d failed with error %d; retrying", *pf.partition.tp, self.leader.node_id, code)
                continue
            self._truncate_by_epoch(pf, a.leader_epoch, a.end_offset)

    def _truncate_by_epoch(self, pf: _PartitionFetch, leader_epoch: int, leader_end: int) -> None:
        p = pf.partition
        step = truncation_offset(p.log.leader_epochs, p.log.log_end_offset, p.log.high_watermark, leader_epoch, leader_end)
        why = f"epoch {p.log.leader_epochs.latest_epoch}: the leader has epoch {leader_epoch} up to {leader_end}"
        self._truncate_to(pf, step.offset, why if step.final else why + "; asking again", final=step.final)

    def _truncate_to(self, pf: _PartitionFetch, offset: int, why: str, *, final: bool = True) -> None:
        p = pf.partition
        with p.lock:
            if not self._still_mine(pf):
                return
            if offset < p.log.log_end_offset:
                log.info("%s-%d: truncating %d -> %d (%s)", p.topic, p.partition, p.log.log_end_offset, offset, why)
                p.log.truncate_to(offset)
            if final:
                pf.state = FetchState.FETCHING

    # -- fetching --------------------------------------------------------------------------------
    def _allowance(self, p: Partition) -> int | None:
        """Bytes this follower may fetch for a throttled replica now (None: not throttled)."""
        rm = self.manager.replica_manager
        throttles = rm.throttles
        if throttles is None:
            return None
        # The ISR as the last UpdateMetadata told (a leader's ISR changes reach followers so).
        meta = rm.metadata.partition(p.topic, p.partition)
        isr = meta.isr if meta is not None else p.isr
        return throttles.follower_allowance(p.topic, p.partition, rm.broker_id, rm.broker_id in isr)

    def _fetch(self, parts: list[_PartitionFetch]) -> None:
        rm = self.manager.replica_manager
        topics: dict[str, list[tuple[int, int, int, int]]] = {}
        throttled: set[TP] = set()
        held_back = False
        for pf in parts:
            p = pf.partition
            allowance = self._allowance(p)
            if allowance == 0:  # over the follower's throttle: left out of this fetch
                held_back = True
                continue
            if allowance is not None:
                throttled.add(p.tp)
            topics.setdefault(p.topic, []).append((p.partition, p.log.log_end_offset, p.log.log_start_offset, self.manager.fetch_max_bytes))
        if not topics:
            if held_back:
                self.stop_event.wait(0.05)
            return
        req = FetchRequest[5](
            replica_id=rm.broker_id,
            max_wait_ms=self.manager.fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=self.manager.fetch_max_bytes * max(1, len(parts)),
            isolation_level=0,
            topics=[(t, [(part, off, start, mb) for part, off, start, mb in ps]) for t, ps in topics.items()],
        )
        resp = self.channel.request(req, self.manager.request_timeout_s + self.manager.fetch_wait_max_ms / 1000.0)
        by_tp = {pf.partition.tp: pf for pf in parts}
        failed = False
        for t in resp.topics:
            for a in t.partitions:
                found = by_tp.get((t.topic, a.partition))
                if found is None or not self._still_mine(found):
                    continue
                if a.error_code == ErrorCode.NONE:
                    if (t.topic, a.partition) in throttled and a.records and rm.throttles is not None:
                        rm.throttles.follower_fetched(len(a.records))
                    if not self._append(found, a.records, a.high_watermark, a.log_start_offset):
                        failed = True
                elif a.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(found)
                else:
                    failed = True
                    log.debug("%s-%d: fetch from broker %d: error %d", *found.partition.tp, self.leader.node_id, a.error_code)
        if failed:
            self._backoff()

    def _append(self, pf: _PartitionFetch, data: bytes | None, leader_hw: int, leader_log_start: int = -1) -> bool:
        """Append what the leader sent, take its high watermark and its log start (DeleteRecords,
        retention: the segments below go here too, and the start is checkpointed before the
        next fetch reports it); False when the disk refused it (back off)."""
        p = pf.partition
        with p.lock:
            if not self._still_mine(pf):
                return True
            if data:
                try:
                    p.log.append_as_follower(data)
                except CorruptRecordError as e:
                    log.error("%s-%d: cannot append what broker %d sent: %s; truncating again", p.topic, p.partition, self.leader.node_id, e)
                    pf.state = FetchState.TRUNCATING
                    return True
                except StorageError as e:
                    # Case: the disk refused the write (full, I/O error). Nothing was written
                    # (the log undoes a partial write), so nothing is to be truncated: the
                    # same offset is fetched again after the backoff, until space returns.
                    if not pf.storage_error:
                        log.error("%s-%d: cannot write what broker %d sent: %s; fetching it again after %d ms until the disk takes it",
                                  p.topic, p.partition, self.leader.node_id, e, self.manager.backoff_ms)
                    pf.storage_error = True
                    return False
                if pf.storage_error:
                    log.warning("%s-%d: the disk takes writes again", p.topic, p.partition)
                    pf.storage_error = False
            p.follower_high_watermark(leader_hw)
            try:
                if p.follower_log_start(leader_log_start):
                    self.manager.replica_manager.logs.checkpoint_log_start_offsets()
            except StorageError as e:
                log.error("%s-%d: cannot move the log start to the leader's %d: %s", p.topic, p.partition, leader_log_start, e)
                return False
        return True

    def _out_of_range(self, pf: _PartitionFetch) -> None:
        """The leader has no data at our LEO: behind its log start (retention) -> start over at
        its log start; beyond its log end (should not happen after epoch truncation) -> truncate
        to its log end."""
        p = pf.partition
        rm = self.manager.replica_manager
        ends = {}
        for ts in (_EARLIEST, _LATEST):
            req = ListOffsetsRequest[1](replica_id=rm.broker_id, topics=[(p.topic, [(p.partition, ts)])])
            resp = self.channel.request(req, self.manager.request_timeout_s)
            a = resp.topics[0].partitions[0]
            if a.error_code:
                self._backoff()
                return
            ends[ts] = a.offset
        with p.lock:
            if not self._still_mine(pf):
                return
            leo = p.log.log_end_offset
            if leo > ends[_LATEST]:
                log.warning("%s-%d: LEO %d is past the leader's end %d: truncating", p.topic, p.partition, leo, ends[_LATEST])
                p.log.truncate_to(ends[_LATEST])
            elif leo < ends[_EARLIEST]:
                log.warning("%s-%d: LEO %d is before the leader's log start %d: starting over there", p.topic, p.partition, leo, ends[_EARLIEST])
                p.log.truncate_fully_and_start_at(ends[_EARLIEST])

    def start(self) -> None:
        self.thread.start()

    def shutdown(self) -> None:
        self.stop_event.set()
        # For good (not close): wakes a fetch parked on the leader now, and the thread cannot
        # open a new connection between its stop check and its next request.
        self.channel.shutdown()

    def join(self, timeout: float) -> None:
        if self.thread.is_alive():
            self.thread.join(timeout)


class ReplicaFetcherManager:
    """The fetcher threads of one broker, one per leader it follows.

    Args:
        replica_manager: whose follower partitions are fetched.
        fetch_wait_max_ms, fetch_max_bytes, backoff_ms: ``replica.fetch.*``.
        request_timeout_s: how long a fetcher waits for an answer beyond the fetch's own wait.
    """

    def __init__(
        self,
        replica_manager: ReplicaManager,
        *,
        fetch_wait_max_ms: int = 500,
        fetch_max_bytes: int = 1 << 20,
        backoff_ms: int = 200,
        request_timeout_s: float = 10.0,
        security: ChannelSecurity | None = None,
    ) -> None:
        self.replica_manager = replica_manager
        #: TLS/SASL of the channels to the leaders (their inter-broker listener)
        self.security = security
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.backoff_ms = backoff_ms
        self.request_timeout_s = request_timeout_s
        self._threads: dict[BrokerEndpoint, _FetcherThread] = {}
        self._lock = threading.Lock()
        self._closed = False

    def add_partitions(self, leader: BrokerEndpoint, partitions: list[Partition]) -> None:
        with self._lock:
            if self._closed:
                return
            t = self._threads.get(leader)
            if t is None:
                t = _FetcherThread(self, leader)
                self._threads[leader] = t
                t.add(partitions)
                t.start()
            else:
                t.add(partitions)

    def remove_partitions(self, tps: Iterable[TP]) -> None:
        tps = list(tps)
        idle: list[_FetcherThread] = []
        with self._lock:
            for ep, t in list(self._threads.items()):
                t.remove(tps)
                if t.empty():
                    del self._threads[ep]
                    idle.append(t)
        for t in idle:
            t.shutdown()

    def fetching(self) -> dict[int, list[TP]]:
        """Leader id -> partitions fetched from it (tests, tools)."""
        with self._lock:
            return {ep.node_id: sorted(t.parts) for ep, t in self._threads.items()}

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads.values())
            self._threads.clear()
        for t in threads:
            t.shutdown()
        for t in threads:
            t.join(5.0)
