"""Offset ranges become RDD partitions (the design of Spark's Kafka 0.8 direct ``createRDD``).

::

    from spark_integration import OffsetRange, create_rdd, offset_ranges
    params = {"metadata.broker.list": "127.0.0.1:9092"}
    ranges = [OffsetRange("events", 0, 0, 100), OffsetRange("events", 1, 0, 80)]
    rdd = create_rdd(sc, params, ranges)
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
  :class:`~spark_integration.reader.OffsetRangeError` naming the range (never a short read);
* the RDD is deterministic: recomputing a partition reads the same offsets again.

The planning helpers (:func:`get_earliest_offsets`, :func:`get_latest_offsets`,
:func:`ranges_from_group_offsets`) and :func:`commit_offset_ranges` close the loop with a
ZooKeeper consumer group, so lag tools keep seeing progress.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from hmbclient.errors import ConfigError
from spark_integration.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    TopicPartition,
)
from spark_integration.options import KafkaParams, parse_kafka_params
from spark_integration.planner import PartitionPlanner
from spark_integration.reader import read_chunks
from spark_integration.settings import Leader, ReadSettings
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


class _ReadPartition:
    """The per-partition task: read one range, yield (key, value) or handler results."""

    def __init__(
        self,
        settings: ReadSettings,
        key_decoder: Any,
        value_decoder: Any,
        message_handler: Callable[[MessageAndMetadata], Any] | None,
    ) -> None:
        self.settings = settings
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder
        self.message_handler = message_handler

    def __call__(self, items: Iterable[tuple[OffsetRange, Leader | None]]) -> Iterator[Any]:
        return chain.from_iterable(self._read(r, leader) for r, leader in items)

    def _read(self, offset_range: OffsetRange, leader: Leader | None) -> Iterator[Any]:
        chunks = read_chunks(self.settings, offset_range, leader)
        if self.key_decoder is None and self.value_decoder is None and self.message_handler is None:
            # Records are (offset, timestamp, key, value, headers) tuples: per message only C
            # code runs (chain -> map -> itemgetter); Python resumes once per fetch.
            return chain.from_iterable(map(partial(map, _KEY_VALUE), chunks))
        return self._read_decoded(offset_range, chunks)

    def _read_decoded(
        self, offset_range: OffsetRange, chunks: Iterator[list[Any]]
    ) -> Iterator[Any]:
        decode_key = _decoding(self.key_decoder)
        decode_value = _decoding(self.value_decoder)
        handler = self.message_handler
        if handler is None:
            for chunk in chunks:
                for record in chunk:
                    yield decode_key(record[2]), decode_value(record[3])
            return
        # Imported here: it brings the high-level consumer (and kazoo) along.
        from hmbclient import MessageAndMetadata

        topic, partition = offset_range.topic, offset_range.partition
        for chunk in chunks:
            for record in chunk:
                message = MessageAndMetadata(
                    topic, partition, record[0], decode_key(record[2]), decode_value(record[3])
                )
                yield handler(message)


def _decoding(decoder: Any) -> Callable[[Any], Any]:
    """``decoder.from_message``, or the identity when there is no decoder (raw bytes)."""
    if decoder is None:
        return _identity
    from_message: Callable[[Any], Any] = decoder.from_message
    return from_message


def _identity(value: Any) -> Any:
    return value


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

    serializer = CPickleSerializer()
    jvm = sc._jvm
    pairs = jvm.java.util.ArrayList()
    for item, item_hosts in zip(items, hosts, strict=True):
        host_list = jvm.java.util.ArrayList()
        for host in item_hosts:
            host_list.add(host)
        pickled = bytearray(serializer.dumps(item))
        pairs.add(jvm.scala.Tuple2(pickled, jvm.PythonUtils.toSeq(host_list)))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    scala_rdd = sc._jsc.sc().makeRDD(jvm.PythonUtils.toSeq(pairs), tag)
    return RDD(scala_rdd.toJavaRDD(), sc, serializer)


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
    fails with :class:`~spark_integration.reader.OffsetRangeError` naming the range.
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
    settings = params.read_settings()
    with PartitionPlanner(settings) as planner:
        topics = sorted({r.topic for r in ranges})
        known = planner.partitions(topics)
    absent = sorted({r.topic_partition for r in ranges} - set(known))
    if absent:
        raise ConfigError(
            "offset ranges name partitions the cluster does not have: "
            + ", ".join(f"{t}-{p}" for t, p in absent)
        )
    items = [(r, known.get(r.topic_partition)) for r in ranges]
    hosts = [[leader[0]] if leader else [] for _, leader in items]
    base = _parallelize_with_locations(sc, items, hosts)
    reader = _ReadPartition(settings, key_decoder, value_decoder, message_handler)
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
    with PartitionPlanner(params.read_settings()) as planner:
        parts = sorted(planner.partitions(sorted(set(topics))))
        return planner.offsets(parts, time_)


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
    with PartitionPlanner(params.read_settings()) as planner:
        parts = sorted(planner.partitions(sorted(set(topics))))
        earliest = planner.offsets(parts, EARLIEST)
        latest = planner.offsets(parts, LATEST)
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
