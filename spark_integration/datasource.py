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

Schema, Spark's Kafka source's: ``key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int`` (timestamp is null and timestampType -1
for messages that carry none, i.e. magic 0), plus ``headers array<struct<key string, value
binary>>`` with ``includeHeaders``. Every option of Spark's source is taken under its Spark
name (see :mod:`spark_integration.options`); the decisions behind them are pure functions in
:mod:`spark_integration.offsets`.

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
* ``failOnDataLoss``: before each batch the positions are checked against each partition's
  earliest and latest offsets (:func:`~spark_integration.offsets.data_loss`); a loss fails the
  query (:class:`DataLossError`, naming topic-partition and ``[from, to)``) or, with ``false``,
  is logged once and the partition resumes at its earliest offset (``partitions`` then plans
  from there; a task that meets OffsetOutOfRange mid-batch does the same, see the reader).
* ``minOffsetsPerTrigger``: ``latestOffset`` returns ``start`` unchanged (no batch) until the
  backlog reaches it or ``maxTriggerDelay`` has passed since the last batch (availableNow runs
  ignore it).
* Spark calls ``commit(end)`` late (when planning the next batch) and not at all for the last
  batch of an availableNow run; nothing here depends on it. With a group (``group.id`` /
  ``kafka.group.id`` or ``groupIdPrefix``) processed offsets are also written to the group
  (:mod:`spark_integration.progress`: the broker's coordinator, and ZooKeeper with
  ``zookeeper.connect``) both from ``commit(end)`` and from ``latestOffset(start)`` (a
  ``start`` is the end of a batch Spark has finished), purely for lag monitoring; the
  checkpoint stays the source of truth.
"""

from __future__ import annotations

import logging
import tempfile
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

from hmbclient.clock import monotonic_ms
from hmbclient.errors import ConfigError, HmbError
from spark_integration.offsets import (
    EARLIEST,
    LATEST,
    DataLoss,
    OffsetRange,
    TopicPartition,
    data_loss,
    limit_ends,
    offsets_behind_latest,
    offsets_from_dict,
    offsets_to_dict,
    parse_timestamps_json,
    plan_ranges,
    resolve_offsets,
    resolve_timestamp_offsets,
    split_ranges,
    trigger_due,
)
from spark_integration.options import SourceOptions, parse_options
from spark_integration.planner import PartitionPlanner
from spark_integration.progress import GroupProgress, group_for
from spark_integration.reader import ddl_schema, read_range_arrow
from spark_integration.settings import ReadSettings
from spark_integration.sink import HmbStreamWriter, HmbWriter

__all__ = [
    "SCHEMA",
    "DataLossError",
    "HmbDataSource",
    "HmbBatchReader",
    "HmbStreamReader",
    "RangePartition",
    "source_metrics",
    "register",
]

log = logging.getLogger("hmbclient.spark")

#: The DDL schema of the DataFrames this source returns (``includeHeaders`` adds ``headers``).
SCHEMA = ddl_schema(False)


class DataLossError(HmbError):
    """``failOnDataLoss=true`` and offsets the query had not read are gone (names the range)."""


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
    """Partitions (with leaders) of every subscribed topic; named topics must exist, and so
    must every ``assign``-ed partition."""
    if opts.topic_names is None:
        return planner.partitions(None, pattern=opts.topic_pattern)
    found = planner.partitions(list(opts.topic_names))
    if opts.assigned is None:
        return found
    missing = [tp for tp in opts.assigned if tp not in found]
    if missing:
        raise ConfigError(
            "format 'hmb': assign names partitions that do not exist: "
            + ", ".join(f"{t}-{p}" for t, p in missing)
        )
    return {tp: found[tp] for tp in opts.assigned}


def _timestamps(
    parts: Sequence[TopicPartition], at: int | None, by_json: str | None, option: str
) -> dict[TopicPartition, int] | None:
    """The timestamp asked for each partition: ``at`` for all, else the JSON's (which must
    name every partition read, as Spark requires), else None (offsets decide)."""
    if at is not None:
        return {tp: at for tp in parts}
    if by_json is None:
        return None
    given = parse_timestamps_json(by_json, option=option)
    unknown = sorted(set(given) - set(parts))
    missing = sorted(set(parts) - set(given))
    if unknown or missing:
        raise ConfigError(
            f"format 'hmb': {option} must name every partition read"
            + (f"; not read: {', '.join(f'{t}-{p}' for t, p in unknown)}" if unknown else "")
            + (f"; missing: {', '.join(f'{t}-{p}' for t, p in missing)}" if missing else "")
        )
    return given


def _starting(
    planner: PartitionPlanner, opts: SourceOptions, parts: Sequence[TopicPartition],
    earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], default: str,
) -> dict[TopicPartition, int]:
    """Starting offsets: ``startingTimestamp`` > ``startingOffsetsByTimestamp`` >
    ``startingOffsets`` (Spark's precedence)."""
    stamps = _timestamps(
        parts, opts.starting_timestamp, opts.starting_offsets_by_timestamp,
        "startingTimestamp" if opts.starting_timestamp is not None
        else "startingOffsetsByTimestamp",
    )
    if stamps is None:
        return resolve_offsets(
            opts.starting_offsets, parts, earliest, latest,
            option="startingOffsets", default=default,
        )
    return resolve_timestamp_offsets(
        planner.offsets_for_times(stamps), latest,
        option="startingOffsetsByTimestamp" if opts.starting_timestamp is None
        else "startingTimestamp",
        strategy=opts.starting_offsets_by_timestamp_strategy,
    )


def _range_partitions(
    ranges: Sequence[OffsetRange],
    leaders: Mapping[TopicPartition, Any],
    settings: ReadSettings,
    opts: SourceOptions,
) -> list[RangePartition]:
    pieces = split_ranges(
        ranges, min_partitions=opts.min_partitions, max_records=opts.max_records_per_partition
    )
    return [RangePartition(r, leaders.get(r.topic_partition), settings) for r in pieces]


class HmbBatchReader(DataSourceReader):
    """``spark.read.format("hmb")``: one input partition per non-empty topic-partition range
    (more with ``minPartitions`` / ``maxRecordsPerPartition``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = opts.read_settings()

    def plan(self) -> tuple[list[OffsetRange], dict[TopicPartition, Any]]:
        """Resolve the options against the cluster: every range (empty ones too) and leaders.

        Raises:
            ConfigError: Offsets JSON names unknown partitions or unavailable offsets, an
                ending offset lies before its starting offset, or no offset matches a
                starting timestamp (with ``startingOffsetsByTimestampStrategy=error``).
            UnknownTopicOrPartitionError: A named topic does not exist.
        """
        opts = self.opts
        with PartitionPlanner(self.settings) as planner:
            leaders = _subscribed(planner, opts)
            parts = sorted(leaders)
            earliest = planner.offsets(parts, EARLIEST)
            latest = planner.offsets(parts, LATEST)
            starts = _starting(planner, opts, parts, earliest, latest, "earliest")
            stamps = _timestamps(
                parts, opts.ending_timestamp, opts.ending_offsets_by_timestamp,
                "endingOffsetsByTimestamp",
            )
            if stamps is None:
                ends = resolve_offsets(
                    opts.ending_offsets, parts, earliest, latest,
                    option="endingOffsets", default="latest",
                )
            else:  # an ending timestamp no message reaches means latest (as Spark)
                ends = resolve_timestamp_offsets(
                    planner.offsets_for_times(stamps), latest,
                    option="endingOffsetsByTimestamp", strategy="latest",
                )
        return plan_ranges(starts, ends), leaders

    def partitions(self) -> Sequence[InputPartition]:
        ranges, leaders = self.plan()
        planned = _range_partitions(ranges, leaders, self.settings, self.opts)
        log.info("batch read plans %d ranges: %s", len(planned), [str(p.range) for p in planned])
        return planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)


class HmbStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("hmb")``: micro-batches over planned offset ranges.

    Lives in one long-running Python worker on the driver for the whole query, so it may keep
    small caches (the availableNow target, start offsets of newly seen partitions, the time of
    the last batch for ``maxTriggerDelay``), but every decision that matters for exactly-once
    is a function of the offsets Spark checkpoints.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.settings = opts.read_settings()
        self._target: dict[TopicPartition, int] | None = None
        self._new_starts: dict[TopicPartition, int] = {}
        self._last_latest: dict[TopicPartition, int] = {}
        self._last_batch_ms = monotonic_ms()
        self._reported: set[DataLoss] = set()
        self.progress = GroupProgress(
            self.settings,
            group_for(opts.group_id, opts.group_id_prefix),
            to_broker=opts.commit_offsets_to_broker,
            zookeeper=opts.zookeeper_connect,
        )
        if self.progress.group is not None:
            log.info("streaming query records its progress in group %s", self.progress.group)

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        with PartitionPlanner(self.settings) as planner:
            parts = sorted(_subscribed(planner, self.opts))
            earliest = planner.offsets(parts, EARLIEST)
            latest = planner.offsets(parts, LATEST)
            starts = _starting(planner, self.opts, parts, earliest, latest, "latest")
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

    def _loss(self, loss: DataLoss) -> None:
        """Case *data loss*: fail (``failOnDataLoss=true``) or log the range once and go on."""
        if self.opts.fail_on_data_loss:
            raise DataLossError(
                f"format 'hmb': data loss: {loss} (failOnDataLoss=true; set it to false to "
                "skip lost offsets and go on)"
            )
        if loss not in self._reported:
            self._reported.add(loss)
            log.warning("failOnDataLoss=false: data loss: %s", loss)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        starts = offsets_from_dict(start, what="start offset")
        # Spark plans the next batch only after the previous one finished, so ``start`` is
        # processed data: a good moment to update the group's offsets for lag tools.
        self.progress.commit(starts)
        with PartitionPlanner(self.settings) as planner:
            parts = sorted(_subscribed(planner, self.opts))
            if self._target is not None:
                parts = [tp for tp in parts if tp in self._target]
            latest = planner.offsets(parts, LATEST)
            earliest = planner.offsets(parts, EARLIEST)
        new = [tp for tp in parts if tp not in starts]
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
            if tp not in latest:
                continue
            loss = data_loss(tp, pos, earliest[tp], self._last_latest[tp])
            if loss is not None:
                self._loss(loss)
                positions[tp] = loss.resume_at
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ends = limit_ends(positions, available, max_rows)
        if self._target is None:  # availableNow reads what is there, however little
            backlog = sum(max(0, available[tp] - positions[tp]) for tp in positions)
            waited = monotonic_ms() - self._last_batch_ms
            if not trigger_due(
                backlog, self.opts.min_offsets_per_trigger, self.opts.trigger_delay_ms, waited
            ):
                return start  # same offsets: Spark runs no batch this trigger
        if ends != starts:
            self._last_batch_ms = monotonic_ms()
        behind = offsets_behind_latest(ends, self._last_latest)
        if behind:
            log.info("offsets behind latest after this batch: %s", behind)
        return offsets_to_dict(ends)

    def reportLatestOffset(self) -> dict | None:
        # What the last latestOffset call saw (for the query's progress report, where it is
        # ``sources[].latestOffset``; with ``endOffset`` it gives the offsets behind latest,
        # see offsets_behind_latest); no extra broker round trip per trigger.
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
            full_starts = {tp: starts.get(tp, self._new_starts.get(tp, 0)) for tp in ends}
            if not self.opts.fail_on_data_loss:
                # Ranges whose start the log no longer holds begin at its earliest offset.
                lowest = planner.offsets(sorted(full_starts), EARLIEST)
                for tp, pos in full_starts.items():
                    if pos < lowest[tp] or ends[tp] < pos:
                        self._loss(DataLoss(tp[0], tp[1], pos, lowest[tp], lowest[tp],
                                            "are not in the log any more") if pos < lowest[tp]
                                   else DataLoss(tp[0], tp[1], ends[tp], pos, lowest[tp],
                                                 "vanished (topic recreated or log truncated)"))
                        full_starts[tp] = min(max(lowest[tp], 0), ends[tp])
            wanted = [tp for tp in ends if ends[tp] > full_starts[tp]]
            leaders = planner.leaders(wanted) if wanted else {}
        # plan_ranges raises if an end lies behind its start (a corrupt or foreign checkpoint).
        return _range_partitions(plan_ranges(full_starts, ends), leaders, self.settings, self.opts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        self.progress.commit(offsets_from_dict(end, what="end offset"))

    def stop(self) -> None:
        self.progress.close()


class HmbDataSource(DataSource):
    """Format ``"hmb"``: reads topics of Kafka-protocol brokers through hmbclient."""

    @classmethod
    def name(cls) -> str:
        return "hmb"

    def schema(self) -> str:
        flag = str(self.options.get("includeHeaders", "false")).strip().lower()
        # A bad value is refused (naming the option) when the reader parses the options.
        return ddl_schema(flag == "true")

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


def source_metrics(source_progress: Mapping[str, Any]) -> dict[str, str]:
    """Spark's Kafka source metrics for one ``query.lastProgress["sources"][i]`` entry.

    Spark's Python data source API has no ``ReportsSourceMetrics`` (its ``PythonMicroBatchStream``
    does not implement it), so the ``metrics`` map of the progress stays empty for this source.
    The same figures come from what the progress does hold: ``endOffset`` (consumed) and
    ``latestOffset`` (what :meth:`HmbStreamReader.reportLatestOffset` saw).

    Args:
        source_progress: One entry of a progress's ``sources`` (a dict, as PySpark gives it).

    Returns:
        ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``, ``avgOffsetsBehindLatest``
        (strings, as Spark's connector reports them); empty when either offset is missing.
    """
    import json

    end, latest = source_progress.get("endOffset"), source_progress.get("latestOffset")
    if not end or not latest:
        return {}
    as_obj = [json.loads(v) if isinstance(v, str) else v for v in (end, latest)]
    return offsets_behind_latest(
        offsets_from_dict(as_obj[0], what="endOffset"),
        offsets_from_dict(as_obj[1], what="latestOffset"),
    )


#: The entries Spark 4's ``PythonStreamingSourceRunner.init`` puts into the environment map of
#: the registered data source (see :func:`_settle_environment`), with how it computes them.
_STREAMING_RUNNER_ENV = ("SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME")


def register(spark: Any) -> None:
    """Register the ``"hmb"`` data source with a SparkSession.

    Args:
        spark: The SparkSession (classic; Spark Connect sessions work the same way).
    """
    spark.dataSource.register(HmbDataSource)
    _settle_environment(spark)


def _settle_environment(spark: Any) -> None:
    """Put the streaming source runner's four entries into the registered source's environment
    map now, on this thread, with the values the runner would put.

    Why (a race in Spark 4.x, not in this package): every use of a registered Python data source
    -- each query's reader and writer functions, shipped inside its tasks -- shares ONE
    ``java.util.HashMap`` of environment variables (``UserDefinedPythonDataSource
    .createPythonFunction`` passes the registration's own map), and
    ``PythonStreamingSourceRunner.init`` (run when a streaming query on the source starts) puts
    these four keys into it, unsynchronized. The first time, those puts change the map's
    structure: two streaming queries starting together (or one starting while another query's
    task is being serialized) can leave the map's size and entries disagreeing, and every task
    serialized with it afterwards fails to deserialize (``java.io.OptionalDataException`` in
    ``HashMap.readObject``: the task is lost and, with no retries left, the query fails). Seen as
    the intermittent driver exit of tests/spark/test_spark_eos.py's two-query streaming test.
    With the keys already present, the runner's puts only replace values (no structural change).
    The values put here are never used: each runner that starts a Python worker with this map
    (the streaming source runner on the map itself, the planner runner and the executors'
    ``BasePythonRunner`` on their copies) sets all four itself first; they are the runner's own
    where cheaply known (SparkEnv's block manager dirs are not reachable through py4j here: its
    reflection over SparkEnv fails on classes missing from PySpark's jars). Spark Connect
    sessions (no JVM handle here) and other Spark builds are left as they are.
    """
    try:
        jsession = spark._jsparkSession
        source = jsession.sessionState().dataSourceManager().lookupDataSource(HmbDataSource.name())
        env = source.dataSourceCls().envVars()
        conf = jsession.sparkContext().conf()
        values = {
            "SPARK_LOCAL_DIRS": conf.get("spark.local.dir", tempfile.gettempdir()),
            "SPARK_AUTH_SOCKET_TIMEOUT": str(conf.getTimeAsSeconds("spark.python.authenticate.socketTimeout", "15s")),
            "SPARK_BUFFER_SIZE": str(conf.getInt("spark.buffer.size", 65536)),
            "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER",
        }
        for key in _STREAMING_RUNNER_ENV:
            env.putIfAbsent(key, values[key])
    except Exception:  # noqa: BLE001 - a session without the JVM classes this reaches for
        log.debug("format 'hmb': the data source's environment map was not settled", exc_info=True)
