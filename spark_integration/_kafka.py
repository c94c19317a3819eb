"""The broker-facing half of the Spark integration, on hmbclient's public SimpleConsumer.

Two users:

* the driver (planning): :class:`ClusterView` lists partitions with their leaders and asks
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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hmbclient.errors import (
    BrokerError,
    HmbError,
    KafkaConnectionError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from spark_integration.offsets import EARLIEST, LATEST, OffsetRange, TopicPartition

__all__ = [
    "ReadSettings",
    "OffsetRangeError",
    "ClusterView",
    "read_range",
    "read_range_arrow",
    "ARROW_BATCH_ROWS",
]

log = logging.getLogger("hmbclient.spark")

Leader = tuple[str, int]

#: Rows per Arrow record batch handed to Spark by the data source.
ARROW_BATCH_ROWS = 8192


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
    )


@dataclass
class ClusterView:
    """Driver-side planning view: partitions, leaders, offsets. Use as a context manager.

    One SimpleConsumer per broker it talks to, closed on exit.
    """

    settings: ReadSettings
    _consumers: dict[Leader, Any] = field(default_factory=dict)
    _leaders: dict[TopicPartition, Leader] = field(default_factory=dict)

    def __enter__(self) -> ClusterView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every consumer this view opened."""
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            try:
                consumer.close()
            except Exception:  # noqa: BLE001 - closing must not mask the real error
                log.debug("closing a planning consumer failed", exc_info=True)

    def _consumer(self, leader: Leader) -> Any:
        consumer = self._consumers.get(leader)
        if consumer is None:
            consumer = self._consumers[leader] = _simple_consumer(self.settings, *leader)
        return consumer

    def _metadata(self, topics: list[str] | None) -> dict[str, dict[int, Leader | None]]:
        last: Exception | None = None
        for host, port in self.settings.brokers:
            try:
                return _topic_metadata(self._consumer((host, port)), topics)
            except (KafkaConnectionError, RequestTimedOutError, OSError) as exc:
                last = exc
                self._drop((host, port))
        raise KafkaConnectionError(
            f"no broker of {self.settings.brokers} answered a metadata request: {last!r}"
        )

    def _drop(self, leader: Leader) -> None:
        consumer = self._consumers.pop(leader, None)
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass

    def partitions(
        self, topics: Sequence[str] | None, *, pattern: str | None = None
    ) -> dict[TopicPartition, Leader | None]:
        """Every partition of ``topics`` (or of the topics matching ``pattern``) with its leader.

        Args:
            topics: Topic names, or None to list all topics and filter by ``pattern``.
            pattern: A regex that must match a whole topic name (used when ``topics`` is None).

        Returns:
            ``{(topic, partition): (host, port) or None when leaderless}``.

        Raises:
            UnknownTopicOrPartitionError: A named topic does not exist.
        """
        meta = self._metadata(list(topics) if topics is not None else None)
        if topics is not None:
            missing = [t for t in topics if not meta.get(t)]
            if missing:
                raise UnknownTopicOrPartitionError(
                    f"topic(s) {', '.join(missing)} do not exist on {self.settings.brokers}"
                )
            chosen = list(topics)
        else:
            assert pattern is not None
            rx = re.compile(pattern)
            chosen = sorted(t for t in meta if rx.fullmatch(t))
        result: dict[TopicPartition, Leader | None] = {}
        for topic in chosen:
            for partition, leader in sorted(meta[topic].items()):
                result[(topic, partition)] = leader
                if leader is not None:
                    self._leaders[(topic, partition)] = leader
        return result

    def leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Leader | None]:
        """Leaders of ``partitions`` (asks for metadata of their topics)."""
        wanted = list(partitions)
        meta = self._metadata(sorted({t for t, _ in wanted}))
        out = {}
        for topic, partition in wanted:
            leader = meta.get(topic, {}).get(partition)
            out[(topic, partition)] = leader
            if leader is not None:
                self._leaders[(topic, partition)] = leader
        return out

    def offsets(self, partitions: Iterable[TopicPartition], time_: int) -> dict[TopicPartition, int]:
        """Earliest (``EARLIEST``) or latest (``LATEST``) offset of each partition.

        Args:
            partitions: The partitions.
            time_: ``offsets.EARLIEST`` (-2) or ``offsets.LATEST`` (-1).

        Returns:
            ``{(topic, partition): offset}``; latest is the next offset to be written.

        Raises:
            BrokerError: A leader refused (after one metadata refresh for a moved leader).
            KafkaConnectionError: A partition has no reachable leader.
        """
        from hmbclient import EARLIEST_TIME, LATEST_TIME

        when = EARLIEST_TIME if time_ == EARLIEST else LATEST_TIME
        assert time_ in (EARLIEST, LATEST)
        wanted = list(partitions)
        unknown = [tp for tp in wanted if tp not in self._leaders]
        if unknown:
            self.leaders(unknown)
        result: dict[TopicPartition, int] = {}
        for tp in wanted:
            for attempt in range(self.settings.max_retries + 1):
                leader = self._leaders.get(tp)
                if leader is None:
                    error: Exception = KafkaConnectionError(f"{tp[0]}-{tp[1]} has no leader")
                else:
                    try:
                        offs = self._consumer(leader).get_offsets_before(
                            tp[0], tp[1], when, max_num_offsets=1
                        )
                        result[tp] = int(offs[0]) if offs else 0
                        break
                    except (BrokerError, KafkaConnectionError, RequestTimedOutError) as exc:
                        if isinstance(exc, BrokerError) and not exc.invalid_metadata:
                            raise
                        error = exc
                        self._drop(leader)
                if attempt == self.settings.max_retries:
                    raise error
                time.sleep(self.settings.retry_backoff_ms / 1000)
                self.leaders([tp])
        return result


def _topic_metadata(consumer: Any, topics: list[str] | None) -> dict[str, dict[int, Leader | None]]:
    """``{topic: {partition: leader (host, port) or None}}`` from one broker's metadata."""
    raise NotImplementedError("waiting for the SimpleConsumer metadata call")


def _find_leader(settings: ReadSettings, topic: str, partition: int) -> Leader:
    with ClusterView(settings) as view:
        leader = view.leaders([(topic, partition)])[(topic, partition)]
    if leader is None:
        raise KafkaConnectionError(f"{topic}-{partition} has no leader right now")
    return leader


def read_range(settings: ReadSettings, r: OffsetRange, leader: Leader | None) -> Iterator[Any]:
    """Yield the messages of ``r`` (hmbclient ``MessageAndOffset`` records), in order.

    Args:
        settings: Cluster and fetch settings.
        r: The range; every offset in ``[from_offset, until_offset)`` that exists is yielded.
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
            except OffsetOutOfRangeError as exc:
                raise OffsetRangeError(
                    f"offset range {r}: the broker answered OffsetOutOfRange for offset {offset} "
                    "(the range is past the end of the log, or the log was truncated or deleted "
                    "by retention)"
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
                    consumer.close()
                consumer = None
                leader = None
                time.sleep(settings.retry_backoff_ms / 1000)
                continue
            before = offset
            for mo in message_set:
                o = mo.offset
                if o < offset:
                    # A compressed wrapper decodes whole; skip what precedes our position.
                    continue
                if o >= until:
                    offset = until
                    break
                offset = o + 1
                yield mo
            if offset == before:
                _raise_no_progress(consumer, r, offset, settings)
            failures = 0
    finally:
        if consumer is not None:
            consumer.close()


def _raise_no_progress(consumer: Any, r: OffsetRange, offset: int, settings: ReadSettings) -> None:
    """A fetch at ``offset`` gave nothing usable: say why, naming the range."""
    from hmbclient import LATEST_TIME

    try:
        latest = consumer.get_offsets_before(r.topic, r.partition, LATEST_TIME, max_num_offsets=1)
        end = int(latest[0]) if latest else None
    except HmbError:
        end = None
    if end is not None and offset < end and end >= r.until_offset:
        raise OffsetRangeError(
            f"offset range {r}: the message at offset {offset} does not fit in "
            f"fetch.message.max.bytes={settings.fetch_message_max_bytes}; raise it"
        )
    raise OffsetRangeError(
        f"offset range {r}: ran out of messages at offset {offset} before reaching "
        f"until_offset {r.until_offset} (log end offset is {end}); the range is past the end "
        "of the log, or the log was compacted or truncated"
    )


def read_range_arrow(
    settings: ReadSettings, r: OffsetRange, leader: Leader | None, rows: int = ARROW_BATCH_ROWS
) -> Iterator[Any]:
    """:func:`read_range` as Arrow record batches of the data source schema.

    Yields:
        ``pyarrow.RecordBatch`` with columns key, value, topic, partition, offset, timestamp.
    """
    import pyarrow as pa

    schema = arrow_schema()
    ts_type = schema.field("timestamp").type
    topic = r.topic
    partition = r.partition
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    stamps: list[int | None] = []

    def flush() -> Any:
        n = len(offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(offsets, pa.int64()),
                pa.array(stamps, pa.int64()).cast(ts_type),
            ],
            schema=schema,
        )
        keys.clear()
        values.clear()
        offsets.clear()
        stamps.clear()
        return batch

    for mo in read_range(settings, r, leader):
        m = mo.message
        keys.append(m.key)
        values.append(m.value)
        offsets.append(mo.offset)
        ts = m.timestamp
        # Kafka's NO_TIMESTAMP (-1, magic 0 messages) becomes SQL NULL; ms -> us for Spark.
        stamps.append(ts * 1000 if ts is not None and ts >= 0 else None)
        if len(offsets) >= rows:
            yield flush()
    if offsets:
        yield flush()


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
