"""Spark integration: topics read by Spark executors, through hmbclient.

Three ways in, best first:

1. **The ``"hmb"`` data source** (recommended): ``register(spark)``, then
   ``spark.read.format("hmb")`` / ``spark.readStream.format("hmb")``. Batch and micro-batch
   streaming with Spark's Kafka source options (``maxOffsetsPerTrigger``, timestamps,
   ``failOnDataLoss``, ``minPartitions``, ...), ``Trigger.AvailableNow`` and exactly-once
   reading from checkpointed offsets. See :mod:`spark_integration.datasource`.
2. **Offset ranges as RDD partitions**: ``create_rdd(sc, kafka_params, [OffsetRange(...)])``,
   with helpers to plan ranges (earliest/latest, from a ZooKeeper group's committed offsets)
   and to commit the processed ranges back to the group. See :mod:`spark_integration.rdd`.
3. **A receiver-style DStream** (``create_stream``) for parity with Spark's old
   ``KafkaUtils.createStream``; DStreams are deprecated in Spark, prefer 1.

Modules: :mod:`~spark_integration.options` (validated options, on hmbclient's config classes),
:mod:`~spark_integration.planner` (driver side: partitions, leaders, offsets),
:mod:`~spark_integration.reader` (executor side: one offset range),
:mod:`~spark_integration.offsets` (pure planning), :mod:`~spark_integration.zk` (group offsets
in ZooKeeper), :mod:`~spark_integration.progress` (a streaming query's progress in a group:
the broker's coordinator and/or ZooKeeper), :mod:`~spark_integration.settings` (what tasks
receive).

This package is a leaf: it imports hmbclient's public API (``SimpleConsumer``, ``Consumer``,
the ``hmbclient.net`` Metadata view and retry policy, ``hmbclient.config``'s config classes,
``hmbclient.errors``), ``rebalance.paths``, kazoo, tenacity, pyarrow and pyspark only.
Everything shipped to executors is picklable; consumers are created inside tasks and closed there.
"""

from spark_integration.offsets import OffsetRange
from spark_integration.rdd import (
    commit_offset_ranges,
    create_rdd,
    get_earliest_offsets,
    get_latest_offsets,
    offset_ranges,
    ranges_from_group_offsets,
)
from spark_integration.reader import OffsetRangeError
from spark_integration.receiver import HmbReceiver, create_stream
from spark_integration.settings import ReadSettings
from spark_integration.zk import commit_group_offsets, read_group_offsets


def register(spark: object) -> None:
    """Register the ``"hmb"`` data source with ``spark`` (a SparkSession).

    Args:
        spark: The SparkSession.
    """
    from spark_integration.datasource import register as _register

    _register(spark)


__all__ = [
    "OffsetRange",
    "OffsetRangeError",
    "ReadSettings",
    "create_rdd",
    "offset_ranges",
    "get_earliest_offsets",
    "get_latest_offsets",
    "ranges_from_group_offsets",
    "commit_offset_ranges",
    "read_group_offsets",
    "commit_group_offsets",
    "register",
    "create_stream",
    "HmbReceiver",
]
