"""The ``"hmb"`` data source's writer: ``df.write.format("hmb")`` and ``writeStream.format("hmb")``.

Usage::

    (df.selectExpr("CAST(user AS STRING) AS key", "to_json(struct(*)) AS value")
       .write.mode("append").format("hmb")        # topics are appended to
       .option("metadata.broker.list", "127.0.0.1:9092")
       .option("topic", "events")                       # unless a `topic` column says
       .option("compression.codec", "lz4")              # any producer setting, Kafka's name
       .save())

Columns, as Spark's Kafka sink names them: ``value`` (required; string or binary; a null value
is a tombstone only when the row has a key), ``key`` (optional; string or binary),
``topic`` (optional; string: the row's topic, else the ``topic`` option), ``partition``
(optional; int: else the producer's partitioner picks, ``hash(key) % n`` or random),
``headers`` (optional; array of struct<key: string, value: binary>). Other columns are ignored.

Options: ``metadata.broker.list`` (required; alias ``bootstrap.servers``), ``topic``, and any
:class:`hmbclient.config.ProducerConfig` setting by its Kafka name (``compression.codec``,
``request.required.acks``, ``batch.num.messages``, ``queue.buffering.max.ms``,
``message.send.max.retries``, ...); an unknown key fails the write before any task runs.
``request.required.acks`` defaults to -1 here (every in-sync replica), where the producer's own
default is 1.

Contract, per Spark task: the task's rows are sent with hmbclient's async Producer in row order
per partition; before the task returns its commit message the producer is flushed and every
send's outcome checked; if any send failed (a refused topic, a broker down, a row without a
value or topic) the task raises an error naming the row, the topic and the cause, and Spark
retries it (``spark.task.maxFailures``), then fails the job. A job or micro-batch is reported
successful only when every task committed.

Output modes of ``writeStream.format("hmb")``: ``append``, and ``complete`` (Spark hands the
whole result table each micro-batch; it is appended to the topic, as Spark's Kafka sink does:
a topic cannot be truncated). ``update`` is refused by Spark itself for every Python data
source: its streaming write builder lacks ``SupportsStreamingUpdateAsAppend``, which Spark's
own Kafka sink has. :func:`write_stream_update` gives the same semantics, an append of each
micro-batch's changed rows, through ``foreachBatch`` and this sink's batch form; the
guarantee is the same (at-least-once: a replayed micro-batch writes its changed rows again).

Guarantee: at-least-once, as Spark's Kafka sink. Duplicates come from retried tasks (the rows a
failed attempt already sent are sent again), speculative task copies, a micro-batch replayed
after a restart before its commit reached the checkpoint, and the producer's own retries of a
request whose answer was lost. Nothing acknowledged is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructType

from hmbclient import Producer
from hmbclient.config import (
    BrokerList,
    ConfigBase,
    ProducerConfig,
    config_class,
    parse_broker_list,
    setting,
)
from hmbclient.errors import ConfigError, HmbError
from rebalance.paths import TOPIC_NAME_RULE, is_valid_topic_name

__all__ = [
    "SinkOptions",
    "SinkError",
    "parse_sink_options",
    "HmbWriter",
    "HmbStreamWriter",
    "SinkCommit",
    "write_stream_update",
]

log = logging.getLogger("spark_integration.sink")

#: Sends checked (and the producer flushed) at least this often, so a task's memory stays
#: bounded by this many pending futures whatever its partition's size.
_CHECK_EVERY = 20_000


class SinkError(HmbError):
    """A write task could not send every row (names the row, topic and cause)."""


@config_class
class SinkOptions(ConfigBase):
    """The sink's own options; every other option is a producer setting."""

    metadata_broker_list: BrokerList = setting(
        aliases=("bootstrap.servers", "kafka.bootstrap.servers"),
        convert=parse_broker_list,
        doc="metadata.broker.list: host:port[,host:port] of brokers to start from",
    )
    topic: str | None = setting(None, doc="topic: where rows without a topic column go")
    path: str | None = setting(None, doc="path: not used (topics are options)")
    checkpoint_location: str | None = setting(None, prop="checkpointLocation", doc="checkpointLocation: Spark's own (streaming)")
    # Spark passes a named streaming query's name (writeStream.queryName) among the options.
    query_name: str | None = setting(None, prop="queryName", doc="queryName: Spark's own (streaming)")

    def _validate(self) -> None:
        super()._validate()
        if self.topic is not None and not is_valid_topic_name(self.topic):
            self._fail(f"topic {self.topic!r} is not a legal topic name ({TOPIC_NAME_RULE})")


def _given(options: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in options.items() if v is not None and not (isinstance(v, str) and not v.strip())}


def parse_sink_options(options: Mapping[str, Any]) -> tuple[SinkOptions, ProducerConfig]:
    """Split Spark's option map into the sink's options and an async ProducerConfig.

    Raises:
        ConfigError: an unknown key, a missing broker list, or a bad value (message starts with
            ``format 'hmb' writer``).
    """
    try:
        own, producer_props = SinkOptions.split_properties(_given(options))
        opts = SinkOptions.from_properties(own)
        settings: dict[str, Any] = {
            "request_required_acks": -1,
            "client_id": "hmb-spark-sink",
            **ProducerConfig.resolve_properties(producer_props),
            "metadata_broker_list": list(opts.metadata_broker_list),
            "producer_type": "async",
        }
        cfg = ProducerConfig(**settings)
    except ConfigError as exc:
        raise ConfigError(f"format 'hmb' writer: {exc}") from None
    return opts, cfg


_ALLOWED_TYPES: dict[str, tuple[type, ...]] = {
    "value": (StringType, BinaryType),
    "key": (StringType, BinaryType),
    "topic": (StringType,),
    "partition": (IntegerType, LongType),
}


def check_schema(schema: StructType) -> None:
    """Refuse a DataFrame the sink cannot write (before any task runs).

    Raises:
        ConfigError: no ``value`` column, or a known column of the wrong type.
    """
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ConfigError(f"format 'hmb' writer: the DataFrame needs a 'value' column (string or binary); it has {sorted(fields)}")
    for name, types in _ALLOWED_TYPES.items():
        if name in fields and not isinstance(fields[name], types):
            want = " or ".join(t.__name__.replace("Type", "").lower() for t in types)
            raise ConfigError(f"format 'hmb' writer: column {name!r} must be {want}, not {fields[name].simpleString()}")


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task wrote: rows per topic."""

    rows: int
    per_topic: dict[str, int]


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _headers(value: Any) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    out = []
    for h in value:
        name, data = (h["key"], h["value"]) if isinstance(h, dict) else (h[0], h[1])
        out.append((str(name), _as_bytes(data)))
    return out


def write_task(opts: SinkOptions, cfg: ProducerConfig, batches: Iterator[Any]) -> SinkCommit:
    """Send every row of one task's Arrow batches; returns the commit message.

    Raises:
        SinkError: a row without a value or topic, a refused topic or partition, a broker that
            cannot be reached, or any send that failed; the message names the Spark partition,
            the row (its index within that partition) and the topic.
    """
    try:
        producer = Producer(cfg)
    except HmbError as e:
        raise SinkError(f"cannot start a producer for brokers {cfg.metadata_broker_list}: {e}") from e
    where = _task_name()
    row = 0
    per_topic: dict[str, int] = {}
    pending: list[tuple[int, str, Any]] = []
    try:
        for batch in batches:
            names = batch.schema.names
            cols = {name: batch.column(names.index(name)).to_pylist() for name in ("value", "key", "topic", "partition", "headers") if name in names}
            values = cols["value"]
            keys = cols.get("key")
            topics = cols.get("topic")
            partitions = cols.get("partition")
            headers = cols.get("headers")
            for i in range(len(values)):
                topic = topics[i] if topics is not None and topics[i] is not None else opts.topic
                key = _as_bytes(keys[i]) if keys is not None else None
                value = _as_bytes(values[i])
                if topic is None:
                    raise SinkError(f"{where} row {row}: no topic (the row's topic column is null and no 'topic' option is set)")
                if value is None and key is None:
                    raise SinkError(f"{where} row {row} to {topic!r}: value is null (a null value is only a tombstone for a keyed row)")
                part = partitions[i] if partitions is not None else None
                try:
                    fut = producer.send_record(topic, value, key, partition=part, headers=_headers(headers[i]) if headers is not None else None)
                except (HmbError, ValueError, TypeError) as e:
                    raise SinkError(f"{where} row {row} to {topic!r}: {type(e).__name__}: {e}") from e
                pending.append((row, topic, fut))
                per_topic[topic] = per_topic.get(topic, 0) + 1
                row += 1
                if len(pending) >= _CHECK_EVERY:
                    _settle(producer, pending)
        _settle(producer, pending)
    finally:
        producer.close()
    return SinkCommit(row, per_topic)


def _task_name() -> str:
    """``"partition N"`` of the running Spark task (row numbers count within it)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"partition {ctx.partitionId()}" if ctx is not None else "task"


def _settle(producer: Producer, pending: list[tuple[int, str, Any]]) -> None:
    """Flush and check every pending send; raise for the first failure (after counting all)."""
    producer.flush()
    failed = []
    for row, topic, fut in pending:
        try:
            fut.result(timeout=0)
        except Exception as exc:
            failed.append((row, topic, exc))
    pending.clear()
    if failed:
        first_row, first_topic, cause = failed[0]
        raise SinkError(f"{len(failed)} row(s) not acknowledged; first: row {first_row} to {first_topic!r}: {type(cause).__name__}: {cause}") from cause


class _SinkTasks:
    """What the batch and the streaming writer share: checks on the driver, one task per
    partition on the executors."""

    def __init__(self, schema: StructType, options: Mapping[str, Any]) -> None:
        check_schema(schema)
        self.opts, self.cfg = parse_sink_options(options)
        if self.opts.topic is None and "topic" not in schema.fieldNames():
            raise ConfigError("format 'hmb' writer: set the 'topic' option or give the DataFrame a 'topic' column")

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        return write_task(self.opts, self.cfg, iterator)


def _rows(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.rows for m in messages if isinstance(m, SinkCommit))


class HmbWriter(_SinkTasks, DataSourceArrowWriter):
    """Batch writes (``df.write.mode("append").format("hmb")``)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("format 'hmb' writer: %d rows written by %d tasks", _rows(messages), len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("format 'hmb' writer: job aborted; %d rows of committed tasks stay in their topics (at-least-once)", _rows(messages))


class HmbStreamWriter(_SinkTasks, DataSourceStreamArrowWriter):
    """Streaming writes (``writeStream.format("hmb")``): each micro-batch as a batch write."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        log.info("format 'hmb' writer: micro-batch %d: %d rows", batchId, _rows(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("format 'hmb' writer: micro-batch %d aborted; it is replayed (at-least-once)", batchId)


def write_stream_update(df: Any, options: Mapping[str, Any]) -> Any:
    """``df.writeStream`` in ``update`` output mode into format ``"hmb"``: each micro-batch's
    changed rows are appended to the topic (what Spark's Kafka sink does in update mode).

    The options are checked here, before the query starts, as the sink checks them.

    Args:
        df: A streaming DataFrame with the sink's columns (``value``, optional ``key``,
            ``topic``, ``partition``, ``headers``).
        options: The sink's options (``metadata.broker.list``, ``topic``, producer settings).

    Returns:
        The ``DataStreamWriter`` (set ``checkpointLocation``, a trigger, then ``start()``).

    Raises:
        ConfigError: A bad option or column (before any batch runs).
    """
    given = {str(k): v for k, v in options.items()}
    _SinkTasks(df.schema, given)  # refuse bad options and columns now, not in batch 0

    def write_batch(batch: Any, batch_id: int) -> None:
        writer = batch.write.mode("append").format("hmb")
        for key, value in given.items():
            writer = writer.option(key, value)
        writer.save()
        log.info("format 'hmb' writer: update-mode micro-batch %d written", batch_id)

    return df.writeStream.outputMode("update").foreachBatch(write_batch)
