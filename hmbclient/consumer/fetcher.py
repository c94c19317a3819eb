"""Fetchers of the high-level consumer: one thread per leader broker, filling stream queues.

Contract
--------
* :class:`FetcherManager` receives owned partitions (:class:`PartitionTopicInfo`) from the
  connector, finds each one's leader from Metadata and hands it to that broker's
  :class:`_BrokerFetcher`. A broker fetcher sends one Fetch for all its partitions
  (``fetch_min_bytes``, ``fetch_wait_max_ms``, ``fetch_message_max_bytes`` per partition),
  decodes each partition's records once (CRC checked; as the stream's ``record_class`` when it
  has one) and pushes them as one chunk into the partition's stream; a full stream queue
  blocks it (bounded memory).
* A partition whose position is unknown (nothing committed) or out of range is reset with
  ListOffsets to the earliest (``smallest``) or latest (``largest``) offset, as
  ``auto_offset_reset`` says; its consumed position moves with it.
* Not-leader / unknown-partition / connection errors send the partition back to the leader
  finder, which refreshes Metadata and retries after ``refresh_leader_backoff_ms``.
* A message larger than ``fetch_message_max_bytes`` cannot make progress: the stream raises
  MessageSizeTooLargeError when it reaches that point (as the Java consumer does), and the
  partition is no longer fetched. A corrupt record set raises CorruptRecordError the same way.
* ``isolation_level`` 1 (read_committed): Fetch and ListOffsets ask for committed data only;
  the broker answers up to the last stable offset with the aborted transactions of the set,
  whose records are dropped (``control.read_committed``). Whatever the level, control batches
  (transaction markers) never reach a stream, and a set that holds none but them (or only
  aborted records) still moves the partition's fetch offset past it.
* Revocation never waits for a fetcher: a revoked partition's chunk is refused by the stream
  (see :mod:`.stream`), and :meth:`FetcherManager.remove` just forgets the partition.

Pipelining (cases labelled in the code)
---------------------------------------
* (pipeline) A broker fetcher keeps at most one Fetch in flight, but sends the next one as soon
  as the previous answer arrives, before decoding and queueing it: each partition's fetch
  position (``fetch_offset``) is moved past the answer's last complete entry by a header walk
  (:func:`.message_set.last_offset_of`, nothing decoded), so the broker works while this
  thread decodes. Answers are handled in the order sent, by the one fetcher thread, which
  alone moves ``fetch_offset``.
* (back-pressure) The next Fetch is sent early only when every stream the answer feeds keeps
  a free slot once the answer's chunks are queued (``queued + chunks < capacity``); otherwise
  it is sent after the answer was queued (the put waits for hand-out). Memory per broker stays
  bounded: the streams' queues, one answer being queued and one Fetch in flight.
* (retired) A Fetch names each partition with the :class:`PartitionTopicInfo` it was built
  from. Its answer for a partition is dropped when that info was revoked (rebalance, seek,
  pause), removed or moved to another fetcher, or its position changed meanwhile: a fetch in
  flight for a retired partition's old position never reaches a stream, and a paused or
  retired partition is never put in a new Fetch. A partition error or an oversized message
  in an answer stops the early send for that round (the error is handled first).
* The high watermark of each answered partition is kept on its info (``high_watermark``, for
  the lag metric); a Fetch answer is recorded in the consumer's metrics once (latency, bytes),
  never per record.

Threads: the leader finder and the broker fetchers; the connector's rebalance thread calls
``add``/``remove``. Shared maps are swapped whole (copy-on-write) under one small lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, NamedTuple

from hmbclient.clock import monotonic_ms
from hmbclient.errors import (
    CorruptRecordError,
    HmbError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    UnsupportedByBroker,
    for_code,
)
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from hmbclient.protocol.records import decode_records
from hmbclient.protocol.records.control import read_committed

from .message_set import last_offset_of
from .stream import FetchedChunk, KafkaStream, PartitionTopicInfo

if TYPE_CHECKING:  # pragma: no cover
    from .metrics import ConsumerMetrics

__all__ = ["FetcherManager", "list_offsets"]

log = logging.getLogger("hmbclient.consumer")

TopicPartition = tuple[str, int]


def list_offsets(
    client: NetClient,
    node_id: int,
    partitions: Iterable[TopicPartition],
    latest: bool,
    timeout_ms: float,
    isolation_level: int = 0,
) -> dict[TopicPartition, int | BaseException]:
    """Earliest or latest offset of each partition from its leader ``node_id`` (latest with
    ``isolation_level`` 1: the last stable offset).

    Returns:
        ``{tp: offset}`` or ``{tp: error}`` per partition.
    """
    timestamp = LATEST_TIMESTAMP if latest else EARLIEST_TIMESTAMP
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)

    def build(versions: BrokerVersions) -> Any:
        return versions.build(
            ApiKey.LIST_OFFSETS,
            replica_id=-1,
            isolation_level=isolation_level,
            topics=[
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": p, "timestamp": timestamp, "max_num_offsets": 1, "current_leader_epoch": -1}
                        for p in partition_ids
                    ],
                }
                for topic, partition_ids in by_topic.items()
            ],
        )

    resp = client.call(node_id, build, timeout_ms=timeout_ms)
    out: dict[TopicPartition, int | BaseException] = {}
    for topic in resp.topics:
        for answer in topic.partitions:
            tp = (topic.topic, answer.partition)
            if answer.error_code:
                out[tp] = for_code(answer.error_code)(f"ListOffsets {topic.topic}-{answer.partition}")
            elif hasattr(answer, "old_style_offsets"):  # v0: a list of offsets
                offsets = list(answer.old_style_offsets)
                out[tp] = offsets[0] if offsets else 0
            else:
                out[tp] = int(answer.offset)
    return out


class _InFlight(NamedTuple):
    """A Fetch sent: what each partition was asked from, by which info (to drop the answer of
    a partition retired meanwhile)."""

    future: Future[Any]
    asked: dict[TopicPartition, tuple[PartitionTopicInfo, int]]
    wait_s: float
    sent_ms: float

    def result(self) -> Any:
        # The I/O thread enforces the request deadline; the margin guards against a hang.
        return self.future.result(timeout=self.wait_s)


class _Answer(NamedTuple):
    """One partition's part of a Fetch answer, its position already moved past it."""

    pti: PartitionTopicInfo
    start: int
    raw: Any
    aborted: Any
    error: BaseException | None


class _BrokerFetcher:
    """One thread fetching every partition led by one broker."""

    def __init__(self, manager: FetcherManager, node_id: int) -> None:
        self.manager = manager
        self.node_id = node_id
        self.partitions: dict[TopicPartition, PartitionTopicInfo] = {}
        self._wake = threading.Event()
        self._stop = manager._stop
        self.thread = threading.Thread(target=self._run, name=f"hmb-fetcher-{node_id}", daemon=True)
        self.thread.start()

    def add(self, pti: PartitionTopicInfo) -> None:
        with self.manager._lock:
            self.partitions = {**self.partitions, pti.tp: pti}
        self._wake.set()

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        with self.manager._lock:
            parts = dict(self.partitions)
            for tp in tps:
                parts.pop(tp, None)
            self.partitions = parts

    def _drop(self, pti: PartitionTopicInfo) -> None:
        with self.manager._lock:
            if self.partitions.get(pti.tp) is pti:
                parts = dict(self.partitions)
                del parts[pti.tp]
                self.partitions = parts

    def _run(self) -> None:
        manager = self.manager
        ahead: _InFlight | None = None  # the pipelined Fetch, sent before the last answer was queued
        while not self._stop.is_set():
            try:
                if ahead is None:
                    parts = self._fetchable()
                    if parts is None:
                        continue  # (reset) done, or nothing to fetch yet
                    ahead = self._send(parts)
                inflight, ahead = ahead, None
                resp = inflight.result()
                latency_ms = monotonic_ms() - inflight.sent_ms
                answers, clean = self._advance(inflight, resp)
                if clean and self._has_room(answers):
                    # (pipeline) the next Fetch goes out before this answer is decoded and queued
                    nxt = self._next_parts()
                    if nxt:
                        ahead = self._send(nxt)
                self._deliver_all(answers, latency_ms)
            except HmbError as exc:
                ahead = None
                if self._stop.is_set():
                    return
                log.info("fetcher for broker %s: %s; finding leaders again", self.node_id, exc)
                manager.metadata.invalidate()
                for pti in list(self.partitions.values()):
                    self._drop(pti)
                    manager._leaderless(pti)
                self._stop.wait(manager.refresh_leader_backoff_s)
            except Exception:  # noqa: BLE001 - keep fetching other partitions
                ahead = None
                log.exception("fetcher for broker %s failed", self.node_id)
                self._stop.wait(manager.refresh_leader_backoff_s)

    def _reset(self, ptis: list[PartitionTopicInfo]) -> None:
        manager = self.manager
        try:
            offsets = list_offsets(
                manager.client, self.node_id, [pti.tp for pti in ptis], manager.reset_to_latest,
                manager.request_timeout_ms, manager.isolation_level,
            )
        except UnsupportedByBroker as exc:
            # A broker without ListOffsets (HMB): its logs are never truncated, so the earliest
            # offset is 0; the latest cannot be asked for, so "largest" starts at 0 too.
            if manager.reset_to_latest:
                log.warning("%s; auto.offset.reset=largest cannot be honoured, starting at 0", exc)
            offsets = {pti.tp: 0 for pti in ptis}
        for pti in ptis:
            offset = offsets.get(pti.tp)
            if isinstance(offset, int):
                log.info(
                    "%s-%s: no usable committed offset, starting at %s (%s)",
                    pti.topic, pti.partition, offset, "largest" if manager.reset_to_latest else "smallest",
                )
                pti.stream.reset_position(pti, offset)
                pti.fetch_offset = offset
            else:
                self._drop(pti)
                manager._leaderless(pti)

    def _next_parts(self) -> dict[TopicPartition, PartitionTopicInfo] | None:
        # The partitions of a pipelined Fetch: owned and not retired; None when one of them
        # (a partition added meanwhile, an out-of-range one) needs a reset first.
        parts = {tp: pti for tp, pti in self.partitions.items() if not pti.revoked}
        if any(pti.fetch_offset is None for pti in parts.values()):
            return None
        return parts

    def _fetchable(self) -> dict[TopicPartition, PartitionTopicInfo] | None:
        # Between Fetches (nothing in flight): wait for partitions, resolve unknown positions.
        parts = {tp: pti for tp, pti in self.partitions.items() if not pti.revoked}
        if not parts:
            self._wake.wait(0.5)
            self._wake.clear()
            return None
        need_reset = [pti for pti in parts.values() if pti.fetch_offset is None]
        if need_reset:
            self._reset(need_reset)
            return None
        return parts

    def _has_room(self, answers: list[_Answer]) -> bool:
        # (back-pressure) Send ahead only if every stream fed by this answer still has a free
        # slot once the answer's chunks are queued; otherwise the next Fetch waits for the
        # hand-out (the put blocks), as without pipelining.
        pending: dict[int, int] = {}
        streams: dict[int, KafkaStream] = {}
        for answer in answers:
            stream = answer.pti.stream
            key = id(stream)
            streams[key] = stream
            pending[key] = pending.get(key, 0) + 1
        return all(streams[key].queued + n < streams[key].capacity for key, n in pending.items())

    def _send(self, parts: dict[TopicPartition, PartitionTopicInfo]) -> _InFlight:
        manager = self.manager
        by_topic: dict[str, list[tuple[int, int]]] = {}
        asked: dict[TopicPartition, tuple[PartitionTopicInfo, int]] = {}
        for tp, pti in parts.items():
            offset = pti.fetch_offset
            assert offset is not None
            asked[tp] = (pti, offset)
            by_topic.setdefault(tp[0], []).append((tp[1], offset))
        size = manager.fetch_max_bytes

        def build(versions: BrokerVersions) -> Any:
            # One positional row per partition at the connection's Fetch version (the version
            # drops the fields it lacks, as in SimpleConsumer).
            row = versions.request_class(ApiKey.FETCH).nested("topics", "partitions").row(
                "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "log_start_offset"
            )
            return versions.build(
                ApiKey.FETCH,
                replica_id=-1,
                max_wait_ms=manager.max_wait_ms,
                min_bytes=manager.min_bytes,
                max_bytes=0x7FFFFFFF,
                isolation_level=manager.isolation_level,
                session_id=0,
                session_epoch=-1,
                topics=[(topic, [row(p, offset, size, -1, -1) for p, offset in asks]) for topic, asks in by_topic.items()],
                forgotten_topics_data=[],
            )

        timeout_ms = manager.request_timeout_ms + manager.max_wait_ms
        future = manager.client.send(self.node_id, build, timeout_ms=timeout_ms, api_key=ApiKey.FETCH)
        return _InFlight(future, asked, timeout_ms / 1000.0 + 1.0, monotonic_ms())

    def _advance(self, inflight: _InFlight, resp: Any) -> tuple[list[_Answer], bool]:
        # One Fetch answer, before anything is decoded: keep the partitions still owned by the
        # info the Fetch was sent for (case retired: a retired or dropped partition's answer is
        # dropped), move each one's fetch position past its last complete entry (a header
        # walk), and say whether the answer is clean (no partition error, no oversized message)
        # so the next Fetch may go out at once.
        top_error = getattr(resp, "error_code", 0)
        if top_error:
            raise for_code(top_error)(f"Fetch from broker {self.node_id}")
        manager = self.manager
        read_committed_ = manager.isolation_level != 0
        current = self.partitions
        answers: list[_Answer] = []
        clean = True
        for topic in resp.topics:
            for answer in topic.partitions:
                tp = (topic.topic, answer.partition)
                sent = inflight.asked.get(tp)
                if sent is None:
                    continue
                pti, start = sent
                if pti.revoked or current.get(tp) is not pti or pti.fetch_offset != start:
                    continue  # (retired)
                hw = getattr(answer, "high_watermark", -1)
                if hw is not None and hw >= 0:
                    pti.high_watermark = hw
                if answer.error_code:
                    clean = False
                    answers.append(_Answer(pti, start, None, None, for_code(answer.error_code)(f"Fetch {topic.topic}-{answer.partition}")))
                    continue
                raw = answer.records
                if raw is None or len(raw) == 0:
                    continue
                last = last_offset_of(raw)  # of the last complete entry, control batches included
                if last is None:
                    clean = False  # not one whole message: too large (an error when delivered)
                elif last >= start:
                    pti.fetch_offset = last + 1
                aborted = None
                if read_committed_ and hasattr(answer, "aborted_transactions"):
                    aborted = answer.aborted_transactions or []
                answers.append(_Answer(pti, start, raw, aborted, None))
        return answers, clean

    def _deliver_all(self, answers: list[_Answer], latency_ms: float) -> None:
        records = nbytes = 0
        for answer in answers:
            if self._stop.is_set():
                return
            pti = answer.pti
            if pti.revoked:
                continue
            if answer.error is not None:
                self._partition_error(pti, answer.error)
            else:
                queued = self._deliver(pti, answer.raw, answer.start, answer.aborted)
                if queued:
                    records += queued
                    nbytes += len(answer.raw)
        metrics = self.manager.metrics
        if metrics is not None:
            metrics.fetch(latency_ms, records, nbytes)  # once per answer, never per record

    def _deliver(self, pti: PartitionTopicInfo, raw: Any, start: int, aborted: Any = None) -> int:
        # One partition's record bytes from a fetch at offset ``start`` (its fetch position
        # already moved past them by _advance): decode (CRC checked; read_committed: without
        # the aborted transactions) and queue them as one chunk, or queue the error the
        # stream will raise. Returns how many records were queued.
        cls = pti.stream.record_class
        tail = None if cls is None else (cls, (pti.topic, pti.partition))
        try:
            records = read_committed(raw, aborted, tail) if aborted else decode_records(raw, tail)
        except CorruptRecordError as exc:
            self._drop(pti)
            pti.stream.put_error(pti, exc, self._stop)
            return 0
        if records and records[0].offset < start:
            records = [r for r in records if r.offset >= start]
        if not records:
            if last_offset_of(raw) is not None:
                return 0  # only markers, aborted records or records before ``start``: skipped
            # Bytes came back but not one whole message: it is bigger than
            # fetch_message_max_bytes and no retry can make progress.
            self._drop(pti)
            pti.stream.put_error(
                pti,
                MessageSizeTooLargeError(
                    f"{pti.topic}-{pti.partition} at offset {start}: a message is larger than "
                    f"fetch.message.max.bytes ({self.manager.fetch_max_bytes}); raise it to consume"
                ),
                self._stop,
            )
            return 0
        return len(records) if pti.stream.put(FetchedChunk(pti, records), self._stop) else 0

    def _partition_error(self, pti: PartitionTopicInfo, exc: BaseException) -> None:
        manager = self.manager
        if isinstance(exc, OffsetOutOfRangeError):
            log.warning("%s-%s: offset %s out of range; applying auto.offset.reset", pti.topic, pti.partition, pti.fetch_offset)
            pti.fetch_offset = None
            return
        if getattr(exc, "retriable", False) or getattr(exc, "invalid_metadata", False):
            manager.metadata.invalidate(pti.topic)
            self._drop(pti)
            manager._leaderless(pti)
            return
        log.error("%s-%s: fetch failed: %s", pti.topic, pti.partition, exc)
        self._drop(pti)
        pti.stream.put_error(pti, exc if isinstance(exc, HmbError) else HmbError(str(exc)), self._stop)


class FetcherManager:
    """Leader finding and per-broker fetchers for one ConsumerConnector.

    Args:
        client / metadata: the connector's NetClient and Metadata.
        fetch_max_bytes: ``fetch_message_max_bytes`` (per partition per fetch).
        min_bytes / max_wait_ms: ``fetch_min_bytes`` / ``fetch_wait_max_ms``.
        auto_offset_reset: ``"smallest"`` or ``"largest"``.
        refresh_leader_backoff_ms: wait before retrying a leaderless partition.
        request_timeout_ms: bound on one request (``socket_timeout_ms``).
        isolation_level: 0 read_uncommitted, 1 read_committed (``isolation.level``).
        metrics: the consumer's :class:`~.metrics.ConsumerMetrics` (one record per Fetch
            answer), or None.
    """

    def __init__(
        self,
        client: NetClient,
        metadata: Metadata,
        *,
        fetch_max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        auto_offset_reset: str,
        refresh_leader_backoff_ms: int,
        request_timeout_ms: int,
        isolation_level: int = 0,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        self.client = client
        self.isolation_level = isolation_level
        self.metrics = metrics
        self.metadata = metadata
        self.fetch_max_bytes = fetch_max_bytes
        self.min_bytes = min_bytes
        # 0 goes out as 1 ms: some brokers (Tansu) answer a zero-wait Fetch with no topics at
        # all, which would leave the fetcher spinning without ever receiving data.
        self.max_wait_ms = max(1, max_wait_ms)
        self.reset_to_latest = auto_offset_reset == "largest"
        self.refresh_leader_backoff_s = refresh_leader_backoff_ms / 1000.0
        self.request_timeout_ms = request_timeout_ms
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._fetchers: dict[int, _BrokerFetcher] = {}
        self._no_leader: dict[TopicPartition, PartitionTopicInfo] = {}
        self._finder_wake = threading.Event()
        self._finder = threading.Thread(target=self._find_leaders, name="hmb-leader-finder", daemon=True)
        self._finder.start()

    def add(self, ptis: Iterable[PartitionTopicInfo]) -> None:
        """Start fetching these partitions (their leaders are looked up first)."""
        for pti in ptis:
            self._leaderless(pti)

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions (a chunk already in flight is refused by the stream)."""
        tps = list(tps)
        with self._lock:
            no_leader = dict(self._no_leader)
            for tp in tps:
                no_leader.pop(tp, None)
            self._no_leader = no_leader
        for fetcher in list(self._fetchers.values()):
            fetcher.remove(tps)

    def close(self) -> None:
        """Stop every fetcher thread (waits briefly for them)."""
        self._stop.set()
        self._finder_wake.set()
        for fetcher in list(self._fetchers.values()):
            fetcher._wake.set()
        deadline = time.monotonic() + 5
        for thread in [self._finder, *(fetcher.thread for fetcher in self._fetchers.values())]:
            thread.join(max(0.0, deadline - time.monotonic()))

    def assigned(self) -> dict[TopicPartition, int | None]:
        """Partitions per leader broker (``tp -> node id``, None while looking for a leader)."""
        out: dict[TopicPartition, int | None] = {tp: None for tp in self._no_leader}
        for node_id, fetcher in self._fetchers.items():
            for tp in fetcher.partitions:
                out[tp] = node_id
        return out

    def _leaderless(self, pti: PartitionTopicInfo) -> None:
        if pti.revoked:
            return
        with self._lock:
            self._no_leader = {**self._no_leader, pti.tp: pti}
        self._finder_wake.set()

    def _find_leaders(self) -> None:
        while not self._stop.is_set():
            self._finder_wake.wait(1.0)
            self._finder_wake.clear()
            if self._stop.is_set():
                return
            pending = {tp: pti for tp, pti in self._no_leader.items() if not pti.revoked}
            if not pending:
                continue
            topics = sorted({tp[0] for tp in pending})
            try:
                if self.metadata.needs_refresh(topics) or any(
                    self.metadata.leader(t, p) is None for t, p in pending
                ):
                    self.metadata.refresh(topics, timeout_ms=self.request_timeout_ms)
            except HmbError as exc:
                log.info("leader lookup for %s failed: %s", topics, exc)
                self._stop.wait(self.refresh_leader_backoff_s)
                self._finder_wake.set()
                continue
            placed = []
            for tp, pti in pending.items():
                leader = self.metadata.leader(*tp)
                if leader is None:
                    continue
                fetcher = self._fetchers.get(leader)
                if fetcher is None:
                    fetcher = self._fetchers[leader] = _BrokerFetcher(self, leader)
                if not pti.revoked:
                    fetcher.add(pti)
                placed.append((tp, pti))
            with self._lock:
                no_leader = dict(self._no_leader)
                for tp, pti in placed:
                    if no_leader.get(tp) is pti:
                        del no_leader[tp]
                self._no_leader = no_leader
            if self._no_leader:
                self._stop.wait(self.refresh_leader_backoff_s)
                self._finder_wake.set()
