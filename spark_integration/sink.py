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

Guarantee (the default, ``exactlyOnce`` unset or false): at-least-once, as Spark's Kafka sink.
Duplicates come from retried tasks (the rows a failed attempt already sent are sent again),
speculative task copies, a micro-batch replayed after a restart before its commit reached the
checkpoint, and the producer's own retries of a request whose answer was lost. Nothing
acknowledged is dropped.

Exactly-once mode (``exactlyOnce=true``; design and cases in :mod:`spark_integration.eos`):
each task writes its rows in one Kafka transaction with ``transactional.id``
``<prefix>-<partition>`` and commits, in the same transaction, a progress marker (the
micro-batch id, or the batch write's id) to a consumer group of the same name; a retried,
speculative or replayed attempt fences the earlier ones and writes nothing when the marker says
its batch is committed. Readers must read ``read_committed`` to see each row exactly once.
Options: ``exactlyOnce`` (default false), ``transactionalIdPrefix`` (default
``hmb-sink-<query id>`` streaming, ``hmb-sink-<uuid>`` per batch write), ``transactionTimeoutMs``
(alias ``transaction.timeout.ms``; default 60 000: a task must finish within it). The mode needs
the ``topic`` option (it keys the marker) and refuses a ``transactional.id`` option.

Cases: (S1) at-least-once task: :func:`write_task`; (S2) exactly-once task:
:func:`spark_integration.eos.write_partition` around the same row loop (:func:`send_rows`).
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
from hmbclient.errors import ConfigError, HmbError, MessageSizeTooLargeError, UnsupportedByBroker
from hmbclient.producer import BatchOutcome
from rebalance.paths import TOPIC_NAME_RULE, is_valid_topic_name
from spark_integration import eos

__all__ = [
    "SinkOptions",
    "SinkError",
    "parse_sink_options",
    "HmbWriter",
    "HmbStreamWriter",
    "SinkCommit",
    "write_stream_update",
    "send_rows",
]

log = logging.getLogger("spark_integration.sink")

#: Sends checked (and the producer flushed) after the Arrow batch that reaches this many rows
#: since the last check, so a task's memory stays bounded whatever its partition's size.
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
    exactly_once: bool = setting(
        False, prop="exactlyOnce", doc="exactlyOnce: one transaction per task; read with read_committed"
    )
    transactional_id_prefix: str | None = setting(
        None,
        prop="transactionalIdPrefix",
        doc="transactionalIdPrefix: exactly-once: transactional.id is <prefix>-<partition> (unique per query)",
    )
    transaction_timeout_ms: int | None = setting(
        None,
        prop="transactionTimeoutMs",
        aliases=("transaction.timeout.ms",),
        min=1,
        doc="transactionTimeoutMs: exactly-once: the coordinator aborts a task's transaction open longer",
    )

    def _validate(self) -> None:
        super()._validate()
        if self.topic is not None and not is_valid_topic_name(self.topic):
            self._fail(f"topic {self.topic!r} is not a legal topic name ({TOPIC_NAME_RULE})")
        if self.exactly_once and self.topic is None:
            self._fail("exactlyOnce=true needs the 'topic' option (partition 0 of it keys each task's progress marker)")
        if not self.exactly_once and (self.transactional_id_prefix is not None or self.transaction_timeout_ms is not None):
            self._fail("transactionalIdPrefix and transactionTimeoutMs are for exactlyOnce=true")


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
        if any(k.strip().lower() in ("transactional.id", "transactional_id", "transactionalid") for k in producer_props):
            raise ConfigError("'transactional.id' is set per task by the sink: use exactlyOnce=true (and transactionalIdPrefix)")
        txn: dict[str, Any] = {}
        if opts.exactly_once and opts.transaction_timeout_ms is not None:
            txn["transaction_timeout_ms"] = opts.transaction_timeout_ms
        settings: dict[str, Any] = {
            "request_required_acks": -1,
            "client_id": "hmb-spark-sink",
            **ProducerConfig.resolve_properties(producer_props),
            "metadata_broker_list": list(opts.metadata_broker_list),
            "producer_type": "async",
            **txn,
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
    #: exactly-once: the task found all its rows of this batch already committed (eos E2).
    skipped: bool = False


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


def _binary_list(column: Any) -> list[Any]:
    """An Arrow string or binary column as a list of ``bytes`` / None: a string column is
    cast to binary in Arrow (the same UTF-8 bytes, no copy), so no row is encoded in Python."""
    import pyarrow as pa

    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    return column.to_pylist()


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
    try:
        rows, per_topic = send_rows(producer, opts, batches)
    finally:
        producer.close()
    return SinkCommit(rows, per_topic)


class _Window:
    """The rows sent since the last check, and how to find the failed ones.

    Two kinds of span, in row order: (R1) a ``produce_batch`` call's rows and its
    :class:`~hmbclient.producer.BatchOutcome`, which names its failed rows by index (no
    report is made per row); (R2, and R1 redone row by row) rows queued with ``produce`` and
    one shared callback, :meth:`delivered`, so no row has a future or a closure of its own. A
    failed report carries the row's key and value objects: :meth:`check` finds the row by the
    identity of those objects among the span's columns (each kept as the list the rows were
    sent from), so the error names the first failed row in row order. (Identity can be shared
    only by equal contents, e.g. CPython's one-byte objects; then the first row with that key
    and value is named.)"""

    __slots__ = ("failed", "spans")

    def __init__(self) -> None:
        self.failed: list[tuple[Any, BaseException]] = []
        #: (first row, outcome, None, None, topic) for R1; (first row, None, keys or None,
        #: values, topics list or None, default topic) for the rows sent with produce().
        self.spans: list[tuple[int, BatchOutcome | None, list[Any] | None, list[Any] | None, list[Any] | None, str | None]] = []

    def delivered(self, err: BaseException | None, report: Any) -> None:
        if err is not None:
            self.failed.append((report, err))

    def check(self, producer: Producer) -> None:
        """Flush and check every send of the window; raise for the first failed row."""
        producer.flush()
        failed = self.failed
        spans = self.spans
        self.failed = []
        self.spans = []
        by_id = {(id(r.key), id(r.value)): (r, e) for r, e in failed}
        count = len(failed)
        first: tuple[int, str, BaseException | None] | None = None
        for start, outcome, keys, values, topics, default in spans:
            if outcome is not None:
                lost = outcome.failed()
                if lost:
                    count += len(lost)
                    if first is None:
                        first = (start + lost[0][0], str(default), lost[0][1])
                continue
            if first is not None or not by_id:
                continue
            assert values is not None
            for i, v in enumerate(values):
                hit = by_id.get((id(keys[i]) if keys is not None else id(None), id(v)))
                if hit is not None:
                    topic = topics[i] if topics is not None and topics[i] is not None else default
                    first = (start + i, str(topic), hit[1])
                    break
        if first is None:
            if not failed:
                return
            # not found by identity (cannot happen): name the report instead
            r, e = failed[0]
            raise SinkError(f"{count} row(s) not acknowledged; first: a row to {r.topic!r}: {type(e).__name__}: {e}") from e
        row, topic, cause = first
        if cause is None:  # flush returned with the row's batch not done (the sender stopped)
            raise SinkError(f"{count} row(s) not acknowledged; first: row {row} to {topic!r}: no answer before the producer stopped")
        raise SinkError(f"{count} row(s) not acknowledged; first: row {row} to {topic!r}: {type(cause).__name__}: {cause}") from cause


def send_rows(producer: Producer, opts: SinkOptions, batches: Iterator[Any], skip: int = 0) -> tuple[int, dict[str, int]]:
    """Send every row of ``batches`` with ``producer`` and check every send.

    Cases: (R1) a batch with only ``value`` (and ``key``) columns, wholly past ``skip``: one
    ``produce_batch`` of the two columns without a delivery callback (nulls checked in Arrow
    first; its outcome names the failed rows by index after the flush, so an acknowledged row
    costs nothing after the send; a call refused before queueing anything, e.g. a too-large
    row, is redone row by row with ``produce`` so the error names the row); (R2) any
    other batch: row by row, with the row's topic, partition and headers.

    Args:
        producer: The task's producer.
        opts: The sink's options.
        batches: The task's Arrow batches.
        skip: Rows at the start already written (exactly-once resume): counted, not sent.

    Returns:
        ``(rows, rows per topic)``: rows counts every row, per topic the sent ones.

    Raises:
        SinkError: as :func:`write_task`.
    """
    where = _task_name()
    row = 0
    per_topic: dict[str, int] = {}
    window = _Window()
    cb = window.delivered
    produce = producer.produce
    produce_batch = producer.produce_batch
    since_check = 0
    for batch in batches:
        names = batch.schema.names
        n = batch.num_rows
        if n == 0:
            continue
        value_col = batch.column(names.index("value"))
        key_col = batch.column(names.index("key")) if "key" in names else None
        values = _binary_list(value_col)
        keys = _binary_list(key_col) if key_col is not None else None
        if row >= skip and not ("topic" in names or "partition" in names or "headers" in names):
            # (R1)
            topic = opts.topic
            if topic is None:
                raise SinkError(f"{where} row {row}: no topic (the row's topic column is null and no 'topic' option is set)")
            if value_col.null_count and (key_col is None or key_col.null_count):
                for i, v in enumerate(values):
                    if v is None and (keys is None or keys[i] is None):
                        raise SinkError(f"{where} row {row + i} to {topic!r}: value is null (a null value is only a tombstone for a keyed row)")
            i = 0
            try:
                try:
                    # One call for the batch: per partition one accumulator append, and no
                    # report per row: the outcome names the failed rows after the flush.
                    window.spans.append((row, produce_batch(topic, values, keys), None, None, None, topic))
                    refused = False
                except (MessageSizeTooLargeError, UnsupportedByBroker, ValueError, TypeError):
                    refused = True  # nothing was queued: row by row below names the row
                if refused:
                    window.spans.append((row, None, keys, values, None, topic))
                    for k, v in zip(keys if keys is not None else [None] * n, values):  # noqa: B905 (one batch)
                        produce(topic, v, k, None, None, None, cb)
                        i += 1
            except (HmbError, ValueError, TypeError) as e:
                raise SinkError(f"{where} row {row + i} to {topic!r}: {type(e).__name__}: {e}") from e
            per_topic[topic] = per_topic.get(topic, 0) + n
            row += n
            since_check += n
        else:
            # (R2)
            topics = batch.column(names.index("topic")).to_pylist() if "topic" in names else None
            partitions = batch.column(names.index("partition")).to_pylist() if "partition" in names else None
            headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
            window.spans.append((row, None, keys, values, topics, opts.topic))
            for i in range(n):
                topic = topics[i] if topics is not None and topics[i] is not None else opts.topic
                key = keys[i] if keys is not None else None
                value = values[i]
                if topic is None:
                    raise SinkError(f"{where} row {row}: no topic (the row's topic column is null and no 'topic' option is set)")
                if value is None and key is None:
                    raise SinkError(f"{where} row {row} to {topic!r}: value is null (a null value is only a tombstone for a keyed row)")
                if row < skip:
                    row += 1
                    continue
                part = partitions[i] if partitions is not None else None
                try:
                    produce(topic, value, key, part, _headers(headers[i]) if headers is not None else None, None, cb)
                except (HmbError, ValueError, TypeError) as e:
                    raise SinkError(f"{where} row {row} to {topic!r}: {type(e).__name__}: {e}") from e
                per_topic[topic] = per_topic.get(topic, 0) + 1
                row += 1
                since_check += 1
        if since_check >= _CHECK_EVERY:
            window.check(producer)
            since_check = 0
    window.check(producer)
    return row, per_topic


def _task_name() -> str:
    """``"partition N"`` of the running Spark task (row numbers count within it)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return f"partition {ctx.partitionId()}" if ctx is not None else "task"


class _SinkTasks:
    """What the batch and the streaming writer share: checks on the driver, one task per
    partition on the executors."""

    def __init__(self, schema: StructType, options: Mapping[str, Any]) -> None:
        check_schema(schema)
        self.opts, self.cfg = parse_sink_options(options)
        if self.opts.topic is None and "topic" not in schema.fieldNames():
            raise ConfigError("format 'hmb' writer: set the 'topic' option or give the DataFrame a 'topic' column")
        self.eos: eos.EosPlan | None = None
        if self.opts.exactly_once:
            assert self.opts.topic is not None  # SinkOptions refuses exactlyOnce without it
            self.eos = eos.plan_for(self.opts.transactional_id_prefix, self.opts.topic, self.cfg.transaction_timeout_ms)

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        if self.eos is None:
            return write_task(self.opts, self.cfg, iterator)  # (S1)
        rows, per_topic, skipped = eos.write_partition(  # (S2)
            self.cfg, self.eos, lambda producer, done: send_rows(producer, self.opts, iterator, done)
        )
        return SinkCommit(rows, per_topic, skipped)


def _rows(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.rows for m in messages if isinstance(m, SinkCommit))


class HmbWriter(_SinkTasks, DataSourceArrowWriter):
    """Batch writes (``df.write.mode("append").format("hmb")``)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("format 'hmb' writer: %d rows written by %d tasks", _rows(messages), len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.eos is None:
            log.warning("format 'hmb' writer: job aborted; %d rows of committed tasks stay in their topics (at-least-once)", _rows(messages))
        else:
            log.warning("format 'hmb' writer: job aborted; %d rows of committed tasks are committed (exactly-once per task)", _rows(messages))


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
