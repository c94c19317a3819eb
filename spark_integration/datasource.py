"""The ``"hmb"`` Spark 4 Python data source: batch and micro-batch streaming reads, and writes
(``df.write`` / ``writeStream``: see :mod:`spark_integration.sink`).

Usage::

    from spark_integration import register
    register(spark)
    df = (spark.read.format("hmb")
          .option("metadata.broker.list", "127.0.0.1:9092")
          .option("topic", "events")
          .option("startingOffsets", "earliest")          # or "latest", or JSON per partition
          .option("endingOffsets", '{"events": {"0": 100, "1": -1}}')
          .load())
    q = (spark.readStream.format("hmb")
         .option("metadata.broker.list", "127.0.0.1:9092").option("topicPattern", r"events\\..*")
         .option("maxOffsetsPerTrigger", 10000)
         .load().writeStream.format("parquet").option("checkpointLocation", ...).start(out))

Schema: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp`` (timestamp is null for messages that carry none, i.e. magic 0).

Planning happens in Spark's planner worker on the driver (metadata and ListOffsets requests,
through :class:`~spark_integration.planner.PartitionPlanner`); each input partition is one
topic-partition :class:`~spark_integration.offsets.OffsetRange` plus its leader, read on an
executor by :func:`spark_integration.reader.read_range_arrow` and handed to Spark as Arrow
record batches (no per-row Python-to-Arrow conversion).

Streaming contract (exactly-once reading):

* Offsets are JSON ``{"topic": {"partition": next_offset}}`` in canonical order; they are the
  only state. ``partitions(start, end)`` reads exactly ``[start, end)`` per partition, and a
  task that cannot fill its range fails (never returns short), so a replayed batch after a
  restart reads the same messages, and the next batch starts where the checkpoint says.
* ``latestOffset(start, limit)`` lists partitions again each time, so new partitions (and
  new topics matching ``topicPattern``) are picked up, starting at their earliest offset.
  ``maxOffsetsPerTrigger`` (``ReadMaxRows``) is shared across partitions in proportion to their
  backlog; ``ReadAllAvailable`` (which Spark passes for some triggers) is honoured as no limit.
* ``Trigger.AvailableNow``: :meth:`HmbStreamReader.prepareForTriggerAvailableNow` records the
  latest offsets at query start; later ``latestOffset`` calls never go beyond them.
* Spark calls ``commit(end)`` late (when planning the next batch) and not at all for the last
  batch of an availableNow run; nothing here depends on it. If ``zookeeper.connect`` and
  ``group.id`` are set, processed offsets are also written to the group's ZooKeeper offsets
  both from ``commit(end)`` and from ``latestOffset(start)`` (a ``start`` is the end of a batch
  Spark has finished), purely for lag monitoring; the checkpoint stays the source of truth.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_integration.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    TopicPartition,
    limit_ends,
    offsets_from_dict,
    offsets_to_dict,
    plan_ranges,
    resolve_offsets,
)
from spark_integration.options import SourceOptions, parse_options
from spark_integration.planner import PartitionPlanner
from spark_integration.reader import read_range_arrow
from spark_integration.settings import ReadSettings
from spark_integration.sink import HmbStreamWriter, HmbWriter
from spark_integration.zk import commit_group_offsets, start_zk_client

__all__ = [
    "SCHEMA",
    "HmbDataSource",
    "HmbBatchReader",
    "HmbStreamReader",
    "RangePartition",
    "register",
]

log = logging.getLogger("hmbclient.spark")

#: The DDL schema of every DataFrame this source returns.
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
)


@dataclass
class RangePartition(InputPartition):
    """One Spark input partition: an offset range, its leader, and how to read it."""

    range: OffsetRange
    leader: tuple[str, int] | None
    settings: ReadSettings

    def __init__(
        self, range: OffsetRange, leader: tuple[str, int] | None, settings: ReadSettings
    ) -> None:
        # InputPartition.__init__ would set .value; this subclass carries typed fields instead.
        self.range = range
        self.leader = leader
        self.settings = settings


def _read(partition: InputPartition) -> Iterator[Any]:
    if isinstance(partition, RangePartition):
        return read_range_arrow(partition.settings, partition.range, partition.leader)
    if type(partition) is InputPartition and partition.value is None:
        # Spark runs one task with InputPartition(None) when a plan has no partitions.
        return iter(())
    raise TypeError(f"format 'hmb' cannot read {partition!r}")


def _subscribed(planner: PartitionPlanner, opts: SourceOptions) -> dict[TopicPartition, Any]:
    """Partitions (with leaders) of every subscribed topic; named topics must exist."""
    if opts.topic_names is not None:
        return planner.partitions(list(opts.topic_names))
    return planner.partitions(None, pattern=opts.topic_pattern)


def _range_partitions(
    ranges: Sequence[OffsetRange],
    leaders: Mapping[TopicPartition, Any],
    settings: ReadSettings,
) -> list[RangePartition]:
    return [
        RangePartition(r, leaders.get(r.topic_partition), settings) for r in ranges if r.count > 0
    ]


class HmbBatchReader(DataSourceReader):
    """``spark.read.format("hmb")``: one input partition per non-empty topic-partition range."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = opts.read_settings()

    def plan(self) -> tuple[list[OffsetRange], dict[TopicPartition, Any]]:
        """Resolve the options against the cluster: every range (empty ones too) and leaders.

        Raises:
            ConfigError: Offsets JSON names unknown partitions or unavailable offsets, or an
                ending offset lies before its starting offset.
            UnknownTopicOrPartitionError: A named topic does not exist.
        """
        with PartitionPlanner(self.settings) as planner:
            leaders = _subscribed(planner, self.opts)
            parts = sorted(leaders)
            earliest = planner.offsets(parts, EARLIEST)
            latest = planner.offsets(parts, LATEST)
        starts = resolve_offsets(
            self.opts.starting_offsets, parts, earliest, latest,
            option="startingOffsets", default="earliest",
        )
        ends = resolve_offsets(
            self.opts.ending_offsets, parts, earliest, latest,
            option="endingOffsets", default="latest",
        )
        return plan_ranges(starts, ends), leaders

    def partitions(self) -> Sequence[InputPartition]:
        ranges, leaders = self.plan()
        planned = _range_partitions(ranges, leaders, self.settings)
        log.info("batch read plans %d ranges: %s", len(planned), [str(p.range) for p in planned])
        return planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)


class HmbStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("hmb")``: micro-batches over planned offset ranges.

    Lives in one long-running Python worker on the driver for the whole query, so it may keep
    small caches (the availableNow target, start offsets of newly seen partitions), but every
    decision that matters for exactly-once is a function of the offsets Spark checkpoints.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = opts.read_settings()
        self._target: dict[TopicPartition, int] | None = None
        self._new_starts: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._last_latest: dict[TopicPartition, int] = {}
        self._zk: Any = None

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        with PartitionPlanner(self.settings) as planner:
            parts = sorted(_subscribed(planner, self.opts))
            earliest = planner.offsets(parts, EARLIEST)
            latest = planner.offsets(parts, LATEST)
        starts = resolve_offsets(
            self.opts.starting_offsets, parts, earliest, latest,
            option="startingOffsets", default="latest",
        )
        log.info("streaming query starts at %s", starts)
        return offsets_to_dict(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        with PartitionPlanner(self.settings) as planner:
            parts = sorted(_subscribed(planner, self.opts))
            self._target = planner.offsets(parts, LATEST)
        log.info("availableNow target offsets: %s", self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        starts = offsets_from_dict(start, what="start offset")
        # Spark plans the next batch only after the previous one finished, so ``start`` is
        # processed data: a good moment to update the group's offsets for lag tools.
        self._commit_group(starts)
        with PartitionPlanner(self.settings) as planner:
            parts = sorted(_subscribed(planner, self.opts))
            if self._target is not None:
                parts = [tp for tp in parts if tp in self._target]
            latest = planner.offsets(parts, LATEST)
            new = [tp for tp in parts if tp not in starts]
            if new:
                earliest = planner.offsets(new, EARLIEST)
                for tp in new:
                    self._new_starts.setdefault(tp, earliest[tp])
        self._last_latest = dict(latest)
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target[tp]) for tp in latest}
        positions = dict(starts)
        for tp in new:
            positions[tp] = self._new_starts[tp]
            log.info("picked up new partition %s-%d at offset %d", tp[0], tp[1], positions[tp])
        # A partition that vanished (topic deleted) keeps its position and makes no progress.
        available = {tp: latest.get(tp, positions[tp]) for tp in positions}
        for tp, pos in positions.items():
            if available[tp] < pos:
                # Never rewind: that would re-read (duplicate) data. Say why nothing moves.
                log.warning(
                    "%s-%d: latest offset %d is behind the query's position %d (topic "
                    "recreated or log truncated?); no progress on it", tp[0], tp[1],
                    available[tp], pos,
                )
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_to_dict(limit_ends(positions, available, max_rows))

    def reportLatestOffset(self) -> dict | None:
        # What the last latestOffset call saw (for the query's progress report); no extra
        # broker round trip per trigger.
        return offsets_to_dict(self._last_latest) if self._last_latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        starts = offsets_from_dict(start, what="start offset")
        ends = offsets_from_dict(end, what="end offset")
        missing = [tp for tp in ends if tp not in starts and tp not in self._new_starts]
        with PartitionPlanner(self.settings) as planner:
            if missing:
                # A batch replayed after a restart that first saw these partitions: they were
                # read from their earliest offset then, and still are.
                earliest = planner.offsets(missing, EARLIEST)
                for tp in missing:
                    self._new_starts[tp] = earliest[tp]
            wanted = [
                tp for tp in ends if ends[tp] > starts.get(tp, self._new_starts.get(tp, 0))
            ]
            leaders = planner.leaders(wanted) if wanted else {}
        full_starts = {tp: starts.get(tp, self._new_starts.get(tp, 0)) for tp in ends}
        # plan_ranges raises if an end lies behind its start (a corrupt or foreign checkpoint).
        return _range_partitions(plan_ranges(full_starts, ends), leaders, self.settings)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        self._commit_group(offsets_from_dict(end, what="end offset"))

    def stop(self) -> None:
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            finally:
                self._zk = None

    # -- group offsets -----------------------------------------------------------------------

    def _commit_group(self, offsets: Mapping[TopicPartition, int]) -> None:
        group, connect = self.opts.group_id, self.opts.zookeeper_connect
        if group is None or connect is None or not offsets:
            return
        # Only forward: a late commit(end) of an older batch must not move the group back.
        todo = {tp: o for tp, o in offsets.items() if o > self._committed.get(tp, -1)}
        if not todo:
            return
        try:
            if self._zk is None:
                self._zk = start_zk_client(connect)
            commit_group_offsets(self._zk, group, todo)
        except Exception as exc:  # noqa: BLE001
            # Group offsets are for lag monitoring only; the checkpoint drives the query, so a
            # ZooKeeper outage must not stop it. The next batch tries again.
            log.warning("group %s: could not record offsets in ZooKeeper: %r", group, exc)
            return
        self._committed.update(todo)


class HmbDataSource(DataSource):
    """Format ``"hmb"``: reads topics of Kafka-protocol brokers through hmbclient."""

    @classmethod
    def name(cls) -> str:
        return "hmb"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return HmbBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HmbStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        # Topics are appended to: "overwrite" has no meaning for a log (Spark's Kafka sink
        # ignores the save mode the same way).
        return HmbWriter(schema, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return HmbStreamWriter(schema, self.options)


def register(spark: Any) -> None:
    """Register the ``"hmb"`` data source with a SparkSession.

    Args:
        spark: The SparkSession (classic; Spark Connect sessions work the same way).
    """
    spark.dataSource.register(HmbDataSource)
