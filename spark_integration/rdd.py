"""Offset ranges become RDD partitions (the design of Spark's Kafka 0.8 direct ``createRDD``).

::

    from spark_integration import OffsetRange, create_rdd, offset_ranges
    params = {"metadata.broker.list": "127.0.0.1:9092"}
    rdd = create_rdd(sc, params, [OffsetRange("events", 0, 0, 100), OffsetRange("events", 1, 0, 80)])
    rdd.count()                      # 180, if the log holds those offsets
    offset_ranges(rdd)               # the ranges behind each partition, in partition order

Contract:

* exactly one RDD partition per offset range, in the order given; partition ``i`` reads
  ``offset_ranges[i]`` on an executor with a SimpleConsumer connected to the partition's
  leader (found on the driver; re-resolved in the task if it moved), in fetches of
  ``fetch.message.max.bytes``; the driver's view of the leader is the partition's preferred
  location;
* a partition yields ``(key, value)`` per message (decoded by ``key_decoder`` /
  ``value_decoder`` when given), or ``message_handler(MessageAndMetadata)``;
* a range the broker cannot fill fails the task with
  :class:`~spark_integration._kafka.OffsetRangeError` naming the range (never a short read);
* the RDD is deterministic: recomputing a partition reads the same offsets again.

The planning helpers (:func:`get_earliest_offsets`, :func:`get_latest_offsets`,
:func:`ranges_from_group_offsets`) and :func:`commit_offset_ranges` close the loop with a
ZooKeeper consumer group, so lag tools keep seeing progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from hmbclient.config import parse_broker_list
from hmbclient.errors import ConfigError
from spark_integration import _kafka
from spark_integration.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    TopicPartition,
)
from spark_integration.zk import commit_group_offsets, read_group_offsets

if TYPE_CHECKING:
    from hmbclient import MessageAndMetadata

__all__ = [
    "KafkaParams",
    "create_rdd",
    "offset_ranges",
    "parse_kafka_params",
    "get_earliest_offsets",
    "get_latest_offsets",
    "ranges_from_group_offsets",
    "commit_offset_ranges",
]

log = logging.getLogger("hmbclient.spark")

_ATTR = "_hmb_offset_ranges"
_KEY_VALUE = itemgetter(2, 3)


@dataclass(frozen=True, slots=True)
class KafkaParams:
    """Parsed ``kafka_params``: read settings plus the optional consumer-group settings."""

    settings: _kafka.ReadSettings
    zookeeper_connect: str | None
    group_id: str | None
    auto_offset_reset: str


_PARAM_KEYS = {
    "metadata.broker.list",
    "bootstrap.servers",
    "fetch.message.max.bytes",
    "socket.timeout.ms",
    "client.id",
    "api.version",
    "refresh.leader.backoff.ms",
    "zookeeper.connect",
    "group.id",
    "auto.offset.reset",
}


def parse_kafka_params(kafka_params: Mapping[str, Any]) -> KafkaParams:
    """Validate ``kafka_params`` (Kafka 0.8 dotted property names).

    Args:
        kafka_params: ``metadata.broker.list`` (required; alias ``bootstrap.servers``),
            ``fetch.message.max.bytes``, ``socket.timeout.ms``, ``client.id``,
            ``api.version``, ``refresh.leader.backoff.ms``; for the group helpers
            ``zookeeper.connect``, ``group.id``, ``auto.offset.reset`` (``smallest`` |
            ``largest``, default ``largest`` as in Kafka 0.8; ``earliest``/``latest`` are
            accepted as synonyms).

    Returns:
        The parsed :class:`KafkaParams`.

    Raises:
        ConfigError: Unknown key, missing broker list, or a bad value.
    """
    unknown = sorted(set(kafka_params) - _PARAM_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown kafka_params key(s): {', '.join(unknown)}; known: {', '.join(sorted(_PARAM_KEYS))}"
        )
    brokers_raw = kafka_params.get("metadata.broker.list") or kafka_params.get("bootstrap.servers")
    if not brokers_raw:
        raise ConfigError("kafka_params needs metadata.broker.list ('host:port,...')")

    def positive(key: str, default: int) -> int:
        raw = kafka_params.get(key, default)
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={raw!r}: expected a positive integer") from None
        if value < 1:
            raise ConfigError(f"{key}={raw!r}: expected a positive integer")
        return value

    reset = str(kafka_params.get("auto.offset.reset", "largest")).strip().lower()
    # The modern names mean the same thing; accept them rather than fail a copied config.
    reset = {"earliest": "smallest", "latest": "largest"}.get(reset, reset)
    if reset not in ("smallest", "largest"):
        raise ConfigError(f"auto.offset.reset={reset!r}: expected 'smallest' or 'largest'")
    brokers = parse_broker_list(brokers_raw)
    if not brokers:
        raise ConfigError("kafka_params needs metadata.broker.list ('host:port,...')")
    settings = _kafka.ReadSettings(
        brokers=brokers,
        fetch_message_max_bytes=positive("fetch.message.max.bytes", 1024 * 1024),
        socket_timeout_ms=positive("socket.timeout.ms", 30_000),
        client_id=str(kafka_params.get("client.id", "hmb-spark")),
        api_version=str(kafka_params.get("api.version", "auto")),
        retry_backoff_ms=positive("refresh.leader.backoff.ms", 200),
    )
    return KafkaParams(
        settings=settings,
        zookeeper_connect=kafka_params.get("zookeeper.connect") or None,
        group_id=kafka_params.get("group.id") or None,
        auto_offset_reset=reset,
    )


class _ReadPartition:
    """The per-partition task: read one range, yield (key, value) or handler results."""

    def __init__(
        self,
        settings: _kafka.ReadSettings,
        key_decoder: Any,
        value_decoder: Any,
        message_handler: Callable[[MessageAndMetadata], Any] | None,
    ) -> None:
        self.settings = settings
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder
        self.message_handler = message_handler

    def __call__(self, items: Iterable[tuple[OffsetRange, tuple[str, int] | None]]) -> Iterator[Any]:
        return chain.from_iterable(self._read(r, leader) for r, leader in items)

    def _read(self, r: OffsetRange, leader: tuple[str, int] | None) -> Iterator[Any]:
        chunks = _kafka.read_chunks(self.settings, r, leader)
        if self.key_decoder is None and self.value_decoder is None and self.message_handler is None:
            # Records are (offset, timestamp, key, value, headers) tuples: per message only C
            # code runs (chain -> map -> itemgetter); Python resumes once per fetch.
            return chain.from_iterable(map(partial(map, _KEY_VALUE), chunks))
        return self._read_decoded(r, chunks)

    def _read_decoded(self, r: OffsetRange, chunks: Iterator[list[Any]]) -> Iterator[Any]:
        kd = self.key_decoder.from_message if self.key_decoder is not None else None
        vd = self.value_decoder.from_message if self.value_decoder is not None else None
        handler = self.message_handler
        if handler is None:
            for chunk in chunks:
                for m in chunk:
                    yield (
                        kd(m[2]) if kd is not None else m[2],
                        vd(m[3]) if vd is not None else m[3],
                    )
        else:
            # Imported here: it brings the high-level consumer (and kazoo) along.
            from hmbclient import MessageAndMetadata

            topic, partition = r.topic, r.partition
            for chunk in chunks:
                for m in chunk:
                    yield handler(
                        MessageAndMetadata(
                            topic,
                            partition,
                            m[0],
                            kd(m[2]) if kd is not None else m[2],
                            vd(m[3]) if vd is not None else m[3],
                        )
                    )


def _parallelize_with_locations(
    sc: Any, items: Sequence[Any], hosts: Sequence[Sequence[str]]
) -> Any:
    """An RDD with one partition per item, each preferring ``hosts[i]`` (Spark's makeRDD).

    PySpark's public API has no way to set preferred locations, so this goes through the
    JVM's ``SparkContext.makeRDD(Seq[(T, Seq[String])])``: each element is one pickled item
    (``byte[]``), read back in the Python worker by the CPickleSerializer.
    """
    from pyspark.core.rdd import RDD
    from pyspark.serializers import CPickleSerializer

    ser = CPickleSerializer()
    jvm = sc._jvm
    pairs = jvm.java.util.ArrayList()
    for item, item_hosts in zip(items, hosts, strict=True):
        host_list = jvm.java.util.ArrayList()
        for h in item_hosts:
            host_list.add(h)
        pairs.add(jvm.scala.Tuple2(bytearray(ser.dumps(item)), jvm.PythonUtils.toSeq(host_list)))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    scala_rdd = sc._jsc.sc().makeRDD(jvm.PythonUtils.toSeq(pairs), tag)
    return RDD(scala_rdd.toJavaRDD(), sc, ser)


def create_rdd(
    sc: Any,
    kafka_params: Mapping[str, Any],
    offset_ranges: Sequence[OffsetRange],
    key_decoder: Any = None,
    value_decoder: Any = None,
    message_handler: Callable[[MessageAndMetadata], Any] | None = None,
) -> Any:
    """An RDD over exactly the given offset ranges, one partition per range.

    Args:
        sc: The SparkContext.
        kafka_params: See :func:`parse_kafka_params` (``metadata.broker.list`` required).
        offset_ranges: The ranges; partition ``i`` reads ``offset_ranges[i]``.
        key_decoder: An ``encoders.Decoder`` for keys (default: raw bytes).
        value_decoder: An ``encoders.Decoder`` for values (default: raw bytes).
        message_handler: Called per message with an ``hmbclient.MessageAndMetadata``
            (topic, partition, offset, key, message; key and message decoded); its results
            are the RDD's elements instead of ``(key, value)``.
            Everything given here must be picklable (it runs on executors).

    Returns:
        A ``pyspark.RDD``; :func:`offset_ranges` returns the ranges behind it.

    Raises:
        ConfigError: Bad ``kafka_params``.
        TypeError: An element of ``offset_ranges`` is not an :class:`OffsetRange`.
        UnknownTopicOrPartitionError: A range names a topic the cluster does not have.

    Reading errors (a range past the end of a log) surface when an action runs: the task
    fails with :class:`~spark_integration._kafka.OffsetRangeError` naming the range.
    """
    params = parse_kafka_params(kafka_params)
    ranges = list(offset_ranges)
    for r in ranges:
        if not isinstance(r, OffsetRange):
            raise TypeError(f"offset_ranges must hold OffsetRange values, got {r!r}")
    if not ranges:
        rdd = sc.emptyRDD()
        setattr(rdd, _ATTR, ())
        return rdd
    with _kafka.Cluster(params.settings) as view:
        topics = sorted({r.topic for r in ranges})
        known = view.partitions(topics)
    absent = sorted({r.topic_partition for r in ranges} - set(known))
    if absent:
        raise ConfigError(
            "offset ranges name partitions the cluster does not have: "
            + ", ".join(f"{t}-{p}" for t, p in absent)
        )
    items = [(r, known.get(r.topic_partition)) for r in ranges]
    hosts = [[leader[0]] if leader else [] for _, leader in items]
    base = _parallelize_with_locations(sc, items, hosts)
    reader = _ReadPartition(params.settings, key_decoder, value_decoder, message_handler)
    rdd = base.mapPartitions(reader, preservesPartitioning=True)
    setattr(rdd, _ATTR, tuple(ranges))
    return rdd


def offset_ranges(rdd: Any) -> tuple[OffsetRange, ...]:
    """The offset ranges behind an RDD returned by :func:`create_rdd`, in partition order.

    Like Spark's ``HasOffsetRanges``, only the RDD returned by ``create_rdd`` carries them
    (take them before ``map``/``filter``; those make new RDDs).

    Raises:
        TypeError: ``rdd`` was not made by :func:`create_rdd`.
    """
    ranges = getattr(rdd, _ATTR, None)
    if ranges is None:
        raise TypeError(
            "offset_ranges() needs the RDD returned by create_rdd() itself; "
            "transformations such as map() return RDDs without offset ranges"
        )
    return tuple(ranges)


def _topic_offsets(
    kafka_params: Mapping[str, Any], topics: Iterable[str], time_: int
) -> dict[TopicPartition, int]:
    params = parse_kafka_params(kafka_params)
    with _kafka.Cluster(params.settings) as view:
        parts = sorted(view.partitions(sorted(set(topics))))
        return view.offsets(parts, time_)


def get_earliest_offsets(
    kafka_params: Mapping[str, Any], topics: Iterable[str]
) -> dict[TopicPartition, int]:
    """Earliest available offset of every partition of ``topics``.

    Returns:
        ``{(topic, partition): offset}``.

    Raises:
        UnknownTopicOrPartitionError: A topic does not exist.
    """
    return _topic_offsets(kafka_params, topics, EARLIEST)


def get_latest_offsets(
    kafka_params: Mapping[str, Any], topics: Iterable[str]
) -> dict[TopicPartition, int]:
    """Latest offset (the next one to be written) of every partition of ``topics``.

    Returns:
        ``{(topic, partition): offset}``.

    Raises:
        UnknownTopicOrPartitionError: A topic does not exist.
    """
    return _topic_offsets(kafka_params, topics, LATEST)


def ranges_from_group_offsets(
    kafka_params: Mapping[str, Any], topics: Iterable[str]
) -> list[OffsetRange]:
    """Ranges from a ZooKeeper group's committed offsets up to the latest offsets.

    ``kafka_params`` must hold ``zookeeper.connect`` and ``group.id``. A partition with
    nothing committed starts at its earliest offset with ``auto.offset.reset=smallest`` and
    at its latest (an empty range) with ``largest`` (the default, as in Kafka 0.8). A
    committed offset outside the available range is clamped the same way.

    Returns:
        One range per partition, in (topic, partition) order, empty ranges included.

    Raises:
        ConfigError: ``zookeeper.connect`` or ``group.id`` missing.
        CoordinationError: ZooKeeper unreachable or holding a malformed offset.
    """
    params = parse_kafka_params(kafka_params)
    if params.zookeeper_connect is None or params.group_id is None:
        raise ConfigError("ranges_from_group_offsets needs zookeeper.connect and group.id")
    with _kafka.Cluster(params.settings) as view:
        parts = sorted(view.partitions(sorted(set(topics))))
        earliest = view.offsets(parts, EARLIEST)
        latest = view.offsets(parts, LATEST)
    committed = read_group_offsets(params.zookeeper_connect, params.group_id, parts)
    ranges = []
    for tp in parts:
        lo, hi = earliest[tp], latest[tp]
        start = committed.get(tp)
        if start is None or not lo <= start <= hi:
            if start is not None:
                log.warning(
                    "group %s: committed offset %d of %s-%d is outside [%d, %d]; using %s",
                    params.group_id, start, tp[0], tp[1], lo, hi, params.auto_offset_reset,
                )
            start = lo if params.auto_offset_reset == "smallest" else hi
        ranges.append(OffsetRange(tp[0], tp[1], start, hi))
    return ranges


def commit_offset_ranges(
    kafka_params: Mapping[str, Any], ranges: Iterable[OffsetRange] | Any
) -> dict[TopicPartition, int]:
    """Commit each range's ``until_offset`` as the group's next offset in ZooKeeper.

    Args:
        kafka_params: Must hold ``zookeeper.connect`` and ``group.id``.
        ranges: Offset ranges, or an RDD made by :func:`create_rdd`.

    Returns:
        ``{(topic, partition): next_offset}`` as written to
        ``/consumers/<group>/offsets/<topic>/<partition>``.

    Raises:
        ConfigError: ``zookeeper.connect`` or ``group.id`` missing.
        CoordinationError: The write failed.
    """
    params = parse_kafka_params(kafka_params)
    if params.zookeeper_connect is None or params.group_id is None:
        raise ConfigError("commit_offset_ranges needs zookeeper.connect and group.id")
    if hasattr(ranges, _ATTR):
        ranges = offset_ranges(ranges)
    return commit_group_offsets(params.zookeeper_connect, params.group_id, list(ranges))
