"""The broker-facing half of the Spark integration, on hmbclient's public SimpleConsumer.

Two users:

* the driver (planning): :class:`Cluster` lists partitions with their leaders and asks
  leaders for earliest/latest offsets;
* executors (reading): :func:`read_range` / :func:`read_range_arrow` read exactly one
  :class:`~spark_integration.offsets.OffsetRange` from the partition's leader, in fetches of
  ``fetch_message_max_bytes``.

Everything a task needs travels in picklable values (:class:`ReadSettings`, the range, the
leader's ``(host, port)``); consumers are created inside the task and always closed.

Read contract: ``read_range`` yields every message the log holds with ``from_offset <= offset
< until_offset``, in offset order, and nothing else, or raises :class:`OffsetRangeError`
naming the range. It never returns short: a broker that has no more messages before
``until_offset`` (range past the end, a truncated log) is an error, because a Spark partition
that silently yields fewer messages than planned breaks exactly-once. Offsets missing *inside*
a range (a compacted log, transaction markers) are skipped: the broker proved nothing lies
there by returning a later offset.
Leader moves and lost connections are retried a few times (re-resolving the leader from the
broker list); OffsetOutOfRange is not retried.
"""

from __future__ import annotations

import logging
import re
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hmbclient.errors import (
    BrokerError,
    HmbError,
    KafkaConnectionError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from spark_integration.offsets import EARLIEST, LATEST, OffsetRange, TopicPartition

__all__ = [
    "ReadSettings",
    "OffsetRangeError",
    "Cluster",
    "read_chunks",
    "read_range",
    "read_range_arrow",
    "ARROW_BATCH_ROWS",
]

log = logging.getLogger("hmbclient.spark")

Leader = tuple[str, int]

#: Rows per Arrow record batch handed to Spark by the data source.
ARROW_BATCH_ROWS = 8192

# Empty fetches below the high watermark retried before a range counts as unreadable
# (backoff 20 ms doubling, capped at 0.5 s: about 3 s in all).
_EMPTY_FETCH_RETRIES = 8


class OffsetRangeError(HmbError):
    """An offset range could not be read completely; the message names the range."""


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How to reach the cluster and read from it (picklable; shipped to every task).

    Attributes:
        brokers: Bootstrap ``(host, port)`` pairs (``metadata.broker.list``).
        fetch_message_max_bytes: Bytes asked per partition per fetch.
        socket_timeout_ms: SimpleConsumer socket timeout.
        client_id: Client id sent to brokers.
        api_version: ``"auto"`` or a pinned version set / dialect name.
        max_retries: Attempts after a leader move or connection loss before failing the task.
        retry_backoff_ms: Pause before such a retry (``refresh.leader.backoff.ms``).
    """

    brokers: tuple[tuple[str, int], ...]
    fetch_message_max_bytes: int = 1024 * 1024
    socket_timeout_ms: int = 30_000
    client_id: str = "hmb-spark"
    api_version: str = "auto"
    max_retries: int = 3
    retry_backoff_ms: int = 200


def _simple_consumer(settings: ReadSettings, host: str, port: int) -> Any:
    from hmbclient import SimpleConsumer

    return SimpleConsumer(
        host,
        port,
        so_timeout_ms=settings.socket_timeout_ms,
        # SO_RCVBUF: room for a whole fetch response keeps the kernel from throttling the read.
        buffer_size=max(65_536, min(settings.fetch_message_max_bytes + 65_536, 4 << 20)),
        client_id=settings.client_id,
        api_version=settings.api_version,
        fetch_message_max_bytes=settings.fetch_message_max_bytes,
    )


class Cluster:
    """Driver-side planning view: partitions, leaders, offsets. Use as a context manager.

    Metadata comes from hmbclient's ``net.Metadata`` over the bootstrap list (never creating
    topics); offsets come from one SimpleConsumer per leader. Everything is closed on exit.
    """

    def __init__(self, settings: ReadSettings) -> None:
        from hmbclient.net import Metadata, NetClient

        self.settings = settings
        self._net = NetClient(
            list(settings.brokers),
            client_id=settings.client_id,
            api_version=settings.api_version,
            request_timeout_ms=settings.socket_timeout_ms,
            name="hmbclient-io-spark-planner",
        )
        self._metadata = Metadata(self._net, allow_auto_topic_creation=False)
        self._consumers: dict[Leader, Any] = {}
        self._leaders: dict[TopicPartition, Leader | None] = {}

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the metadata client and every consumer this view opened."""
        consumers, self._consumers = self._consumers, {}
        for leader in list(consumers):
            _close_quietly(consumers[leader])
        self._net.close()

    def _consumer(self, leader: Leader) -> Any:
        consumer = self._consumers.get(leader)
        if consumer is None:
            consumer = self._consumers[leader] = _simple_consumer(self.settings, *leader)
        return consumer

    def _drop(self, leader: Leader) -> None:
        consumer = self._consumers.pop(leader, None)
        if consumer is not None:
            _close_quietly(consumer)

    def _refresh(self, topics: list[str] | None) -> Any:
        view = self._metadata.refresh(topics)
        for name, info in view.topics.items():
            for p, pinfo in info.partitions.items():
                node = pinfo.leader
                self._leaders[(name, p)] = view.brokers.get(node) if node >= 0 else None
        return view

    def partitions(
        self, topics: Sequence[str] | None, *, pattern: str | None = None
    ) -> dict[TopicPartition, Leader | None]:
        """Every partition of ``topics`` (or of the topics matching ``pattern``) with its leader.

        Args:
            topics: Topic names, or None to list all topics and filter by ``pattern``.
            pattern: A regex that must match a whole topic name (used when ``topics`` is None).

        Returns:
            ``{(topic, partition): (host, port), or None while leaderless}``, sorted.

        Raises:
            UnknownTopicOrPartitionError: A named topic does not exist.
            KafkaConnectionError / RequestTimedOutError: No broker answered.
        """
        view = self._refresh(sorted(set(topics)) if topics is not None else None)
        if topics is not None:
            missing = [t for t in topics if t not in view.topics or not view.topics[t].partitions]
            if missing:
                raise UnknownTopicOrPartitionError(
                    f"topic(s) {', '.join(missing)} do not exist on "
                    + ",".join(f"{h}:{p}" for h, p in self.settings.brokers)
                )
            chosen = sorted(set(topics))
        else:
            assert pattern is not None
            rx = re.compile(pattern)
            chosen = sorted(t for t in view.topics if rx.fullmatch(t))
        return {
            (t, p): self._leaders.get((t, p))
            for t in chosen
            for p in sorted(view.topics[t].partitions)
        }

    def leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Leader | None]:
        """Fresh leaders of ``partitions`` (one metadata request for their topics)."""
        wanted = list(partitions)
        self._refresh(sorted({t for t, _ in wanted}))
        return {tp: self._leaders.get(tp) for tp in wanted}

    def offsets(self, partitions: Iterable[TopicPartition], time_: int) -> dict[TopicPartition, int]:
        """Earliest (``EARLIEST``) or latest (``LATEST``) offset of each partition.

        Args:
            partitions: The partitions.
            time_: ``offsets.EARLIEST`` (-2) or ``offsets.LATEST`` (-1).

        Returns:
            ``{(topic, partition): offset}``; latest is the next offset to be written.

        Raises:
            BrokerError: A leader refused for a reason other than a moved leader.
            KafkaConnectionError: A partition had no reachable leader after the retries.
        """
        from hmbclient import EARLIEST_TIME, LATEST_TIME

        if time_ not in (EARLIEST, LATEST):
            raise ValueError(f"time_ must be EARLIEST or LATEST, got {time_}")
        when = EARLIEST_TIME if time_ == EARLIEST else LATEST_TIME
        wanted = list(partitions)
        unknown = [tp for tp in wanted if self._leaders.get(tp) is None]
        if unknown:
            self.leaders(unknown)
        result: dict[TopicPartition, int] = {}
        for tp in wanted:
            attempt = 0
            while True:
                leader = self._leaders.get(tp)
                error: Exception
                if leader is None:
                    error = KafkaConnectionError(f"{tp[0]}-{tp[1]} has no leader")
                else:
                    try:
                        offs = self._consumer(leader).get_offsets_before(
                            tp[0], tp[1], when, max_num_offsets=1
                        )
                        result[tp] = int(offs[0]) if offs else 0
                        break
                    except (BrokerError, KafkaConnectionError, RequestTimedOutError) as exc:
                        if isinstance(exc, BrokerError) and not (
                            exc.invalid_metadata or exc.retriable
                        ):
                            raise
                        error = exc
                        self._drop(leader)
                attempt += 1
                if attempt > self.settings.max_retries:
                    raise error
                time.sleep(self.settings.retry_backoff_ms / 1000)
                self.leaders([tp])
        return result


def _close_quietly(consumer: Any) -> None:
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing must not mask the error being handled
        log.debug("closing a consumer failed", exc_info=True)


def _find_leader(settings: ReadSettings, topic: str, partition: int) -> Leader:
    with Cluster(settings) as view:
        leader = view.leaders([(topic, partition)])[(topic, partition)]
    if leader is None:
        raise KafkaConnectionError(f"{topic}-{partition} has no leader right now")
    return leader


def read_chunks(settings: ReadSettings, r: OffsetRange, leader: Leader | None) -> Iterator[list[Any]]:
    """Yield the messages of ``r`` as lists (one per fetch), in offset order.

    Each element is an hmbclient ``MessageAndOffset`` (a ``Record``: offset, timestamp, key,
    value, headers; ``.message.key`` etc. also work). Lists let callers convert a whole fetch
    with one comprehension instead of paying a generator step per message.

    Args:
        settings: Cluster and fetch settings.
        r: The range; every message the log holds in ``[from_offset, until_offset)``.
        leader: The leader found at planning time, or None to look it up here.

    Raises:
        OffsetRangeError: The broker has no messages left before ``until_offset``, answered
            OffsetOutOfRange, a single message is larger than ``fetch_message_max_bytes``, or
            the leader stayed unreachable after ``max_retries`` attempts. Names the range.
    """
    if r.count == 0:
        return
    from hmbclient import FetchRequest

    offset = r.from_offset
    until = r.until_offset
    consumer: Any = None
    failures = 0
    empties = 0
    try:
        while offset < until:
            try:
                if consumer is None:
                    if leader is None:
                        leader = _find_leader(settings, r.topic, r.partition)
                    consumer = _simple_consumer(settings, *leader)
                message_set = consumer.fetch(
                    FetchRequest(r.topic, r.partition, offset, settings.fetch_message_max_bytes)
                )
                records = message_set.messages()
            except OffsetOutOfRangeError as exc:
                raise OffsetRangeError(
                    f"offset range {r}: the broker answered OffsetOutOfRange for offset {offset} "
                    "(the range is past the end of the log, or the log was truncated or deleted "
                    "by retention)"
                ) from exc
            except MessageSizeTooLargeError as exc:
                raise OffsetRangeError(
                    f"offset range {r}: the message at offset {offset} is larger than "
                    f"fetch.message.max.bytes={settings.fetch_message_max_bytes}; raise it"
                ) from exc
            except (BrokerError, KafkaConnectionError, RequestTimedOutError, OSError) as exc:
                retriable = not isinstance(exc, BrokerError) or exc.invalid_metadata or exc.retriable
                failures += 1
                if not retriable or failures > settings.max_retries:
                    raise OffsetRangeError(
                        f"offset range {r}: reading offset {offset} from leader {leader} "
                        f"failed: {exc!r}"
                    ) from exc
                log.info("offset range %s: %r; retrying with a fresh leader", r, exc)
                if consumer is not None:
                    _close_quietly(consumer)
                consumer = None
                leader = None
                time.sleep(settings.retry_backoff_ms / 1000)
                continue
            failures = 0
            # The message set already dropped records below ``offset`` (compressed wrappers and
            # v2 batches start early); cut at ``until`` with a binary search, not a scan.
            if records and records[0].offset < offset:
                records = records[bisect_left(records, offset, key=_offset_of):]
            if not records:
                # Some brokers (Tansu under load) answer an empty fetch below their high
                # watermark: the data is there, ask again. Past the watermark it is not.
                hw = message_set.high_watermark
                empties += 1
                if (hw < 0 or hw > offset) and empties <= _EMPTY_FETCH_RETRIES:
                    log.debug("offset range %s: empty fetch at %d (hw %d); retrying", r, offset, hw)
                    time.sleep(min(0.01 * 2**empties, 0.5))
                    continue
                _raise_no_progress(consumer, r, offset, hw)
            empties = 0
            if records[-1].offset >= until:
                records = records[: bisect_left(records, until, key=_offset_of)]
                if records:
                    yield records
                # Everything below ``until`` that the log holds has been read: the broker
                # returned a later offset, so any missing ones were compacted away.
                return
            offset = records[-1].offset + 1
            yield records
    finally:
        if consumer is not None:
            _close_quietly(consumer)


def _offset_of(record: Any) -> int:
    return record[0]


def read_range(settings: ReadSettings, r: OffsetRange, leader: Leader | None) -> Iterator[Any]:
    """Yield the messages of ``r`` one by one (see :func:`read_chunks` for the contract)."""
    for chunk in read_chunks(settings, r, leader):
        yield from chunk


def _raise_no_progress(consumer: Any, r: OffsetRange, offset: int, high_watermark: int) -> None:
    """Fetches at ``offset`` gave nothing: the log ends before ``until_offset``."""
    from hmbclient import LATEST_TIME

    try:
        latest = consumer.get_offsets_before(r.topic, r.partition, LATEST_TIME, max_num_offsets=1)
        end: int | None = int(latest[0]) if latest else None
    except HmbError:
        end = None
    raise OffsetRangeError(
        f"offset range {r}: ran out of messages at offset {offset} before reaching "
        f"until_offset {r.until_offset} (high watermark {high_watermark}, log end offset "
        f"{end}); the range is past the end of the log, or the log was truncated"
    )


def read_range_arrow(
    settings: ReadSettings, r: OffsetRange, leader: Leader | None, rows: int = ARROW_BATCH_ROWS
) -> Iterator[Any]:
    """:func:`read_chunks` as Arrow record batches of the data source schema.

    Yields:
        ``pyarrow.RecordBatch`` with columns key, value, topic, partition, offset, timestamp
        (at most ``rows`` rows each).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema()
    ts_type = schema.field("timestamp").type
    pending: list[Any] = []

    def flush(recs: list[Any]) -> Any:
        n = len(recs)
        # Records are (offset, timestamp, key, value, headers) tuples: transpose once.
        offsets, stamps, keys, values, _ = zip(*recs, strict=True)
        ms = pa.array(stamps, pa.int64())
        # Kafka's NO_TIMESTAMP (-1, magic 0 messages) becomes SQL NULL; ms -> us for Spark.
        us = pc.if_else(pc.less(ms, 0), pa.scalar(None, pa.int64()), pc.multiply(ms, 1000))
        return pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array([r.topic] * n, pa.string()),
                pa.array([r.partition] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                us.cast(ts_type),
            ],
            schema=schema,
        )

    for chunk in read_chunks(settings, r, leader):
        pending.extend(chunk)
        while len(pending) >= rows:
            yield flush(pending[:rows])
            del pending[:rows]
    if pending:
        yield flush(pending)


def arrow_schema() -> Any:
    """The Arrow schema Spark expects for :data:`~spark_integration.datasource.SCHEMA`."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
