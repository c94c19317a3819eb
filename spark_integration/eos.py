"""The ``hmb`` sink's exactly-once mode: one Kafka transaction per Spark task.

Turned on by the sink option ``exactlyOnce=true`` (:mod:`spark_integration.sink`); the
at-least-once path is untouched when it is off (the default).

Identity. A write has a *prefix* and a *write id*, fixed on the driver (:func:`plan_for`):

* streaming: prefix ``transactionalIdPrefix`` or ``hmb-sink-<query id>``; write id the query
  id. Spark keeps a query's id in its checkpoint, so a query restarted from its checkpoint has
  the same prefix and write id; the micro-batch id is the *batch id*. Both come to the task as
  Spark's local properties (``sql.streaming.queryId``, ``streaming.sql.batchId``).
* batch (``df.write``): prefix ``transactionalIdPrefix`` or ``hmb-sink-<write id>``; write id a
  fresh UUID per ``DataFrameWriter.save()``; batch id 0.

Spark partition ``p`` of the write uses ``transactional.id = <prefix>-<p>`` (no batch id, no
attempt number in it): every attempt of the same partition -- a retry, a speculative copy, the
same micro-batch replayed after a restart, the next micro-batch -- shares the id, so the newest
``init_transactions()`` fences every older attempt and aborts its open transaction. The
partition's progress marker lives in the consumer group named like the transactional id: the
committed offset of ``(<topic option>, 0)`` is ``batch id + 1`` with ``<write id>/<rows>`` as
its metadata (rows: how many rows of the partition, counted from its first, are committed),
written by ``send_offsets_to_transaction`` in the SAME transaction as the rows, so rows and
marker become visible together or not at all.

Why a row count and not just "done": PySpark's Python writer cannot tell the end of its input
from input cut short by a failure upstream in the same task (a UDF or a source read raising in
the middle of the partition: the writer's iterator simply ends, the task fails afterwards).
Such an attempt commits a prefix of the partition. The next attempt therefore goes through its
whole input and sends only the rows past the committed count: attempts resume, never repeat.

Cases of one task (:func:`write_partition`), labelled in the code:

* (E1) ``init_transactions()``: fences older attempts of ``<prefix>-<p>``; their open
  transaction is aborted, or, if it was already committing, completed before the call returns.
* (E2) OffsetFetch of the marker (:func:`rows_done`): another write id or an older batch: 0
  rows done; this batch: its row count; a later batch: all. (E2a) all done (a replay after a
  restart, a retry of a task whose transaction committed but whose answer was lost): the task
  writes nothing and returns a commit message marked ``skipped``.
* (E3) ``begin_transaction()`` and the rows past the done count sent (the sink's row loop;
  sends are checked as in at-least-once mode, a failed one makes the task fail). (E3a) the
  input held no row past the done count: nothing is committed, the commit message is
  ``skipped``.
* (E4) the marker (the batch and the partition's total row count) sent to the transaction,
  then ``commit_transaction()``.
* (E5) any failure before the commit returned: ``abort_transaction()`` when the producer is
  still able to (never after being fenced), then the producer is closed and the error raised:
  Spark retries the task, which starts again at (E1). A fenced attempt raises
  :class:`TransactionalWriteError` saying so; what it sent is never visible to
  ``read_committed`` readers.

Guarantee: a ``read_committed`` reader sees each row of each (write, batch, partition)
exactly once, provided the rows Spark gives partition ``p`` of a batch are the same in every
attempt (true for the ``hmb`` source and deterministic transforms; a non-deterministic
``repartition()`` or a UDF with random output breaks it). ``read_uncommitted`` readers see the
rows of aborted attempts too. Limits: a task must finish within ``transaction.timeout.ms``
(``transactionTimeoutMs``; the coordinator aborts longer transactions and the task fails
fenced); the marker needs the ``topic`` option (Kafka refuses offsets of unknown topics);
``transactionalIdPrefix`` must be unique per query (two queries sharing it fence each other);
the sink needs brokers with transactions (Kafka 0.11+).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from hmbclient import Producer
from hmbclient.config import ProducerConfig
from hmbclient.errors import (
    ErrorCode,
    HmbError,
    ProducerFencedError,
    TransactionFatalError,
    for_code,
)
from hmbclient.net import is_retriable, retry_policy

__all__ = ["EosPlan", "TransactionalWriteError", "plan_for", "transactional_id", "rows_done", "marker_metadata", "write_partition"]

log = logging.getLogger("spark_integration.eos")

#: Spark's local properties of a micro-batch's jobs (StreamExecution / MicroBatchExecution).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

#: Kafka's API keys of the two requests (E2) sends: the codec (hmbclient.protocol) is not one of
#: spark_integration's front doors, and NetClient's builders take the plain numbers.
_OFFSET_FETCH = 9
_FIND_COORDINATOR = 10


class TransactionalWriteError(HmbError):
    """An exactly-once write task failed; nothing it sent is visible to read_committed readers."""


@dataclass(frozen=True)
class EosPlan:
    """What every task of one exactly-once write shares (picklable, built on the driver).

    Attributes:
        prefix: ``transactionalIdPrefix``, or None: derived from the query id / write id.
        write_id: The batch write's UUID (streaming writes use the query id instead).
        marker_topic: The topic whose partition 0 keys the progress marker (``topic`` option).
        timeout_s: How long init, commit and the marker's fetch may take.
    """

    prefix: str | None
    write_id: str
    marker_topic: str
    timeout_s: float = 60.0


def plan_for(prefix: str | None, marker_topic: str, transaction_timeout_ms: int) -> EosPlan:
    """The plan of one ``save()`` or one streaming query (a new write id each call)."""
    return EosPlan(prefix, str(uuid.uuid4()), marker_topic, max(30.0, transaction_timeout_ms / 1000.0))


def transactional_id(prefix: str, partition: int) -> str:
    """``<prefix>-<partition>``: the same for every attempt of the partition (pure)."""
    return f"{prefix}-{partition}"


def identity(plan: EosPlan, query_id: str | None) -> tuple[str, str]:
    """``(prefix, write id)`` of a task: streaming (a query id) or batch (pure)."""
    write_id = query_id if query_id else plan.write_id
    return (plan.prefix or f"hmb-sink-{write_id}"), write_id


#: (E2) "every row": the marker is of a later batch.
ALL_ROWS = 2**62


def marker_metadata(write_id: str, rows: int) -> str:
    """The marker's metadata: ``<write id>/<rows committed>`` (pure)."""
    return f"{write_id}/{rows}"


def rows_done(marker: tuple[int, str | None] | None, write_id: str, batch_id: int) -> int:
    """(E2) how many rows of this (write, batch, partition) the marker ``(offset, metadata)``
    says are committed: 0, a count, or :data:`ALL_ROWS` for a later batch (pure)."""
    if marker is None:
        return 0
    offset, metadata = marker
    owner, _, count = (metadata or "").rpartition("/")
    if owner != write_id or not count.isdigit() or offset < batch_id + 1:
        return 0
    return int(count) if offset == batch_id + 1 else ALL_ROWS


def _task_identity() -> tuple[int, str | None, int]:
    """``(partition id, query id or None, batch id)`` of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, None, 0
    query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    return ctx.partitionId(), query or None, int(batch) if batch else 0


def _fetch_marker(producer: Producer, group: str, topic: str, timeout_s: float) -> tuple[int, str | None] | None:
    """(E2) the group's committed ``(offset, metadata)`` of ``(topic, 0)``, None if none."""
    client = producer.client
    timeout_ms = timeout_s * 1000.0

    def once() -> tuple[int, str | None] | None:
        found = client.call(
            client.least_loaded_node(),
            lambda v: v.build(_FIND_COORDINATOR, group_id=group, key=group, key_type=0),
            timeout_ms=timeout_ms, api_key=_FIND_COORDINATOR,
        )
        if found.error_code:
            raise for_code(found.error_code)(f"FindCoordinator for group {group!r}")
        client.update_brokers({found.node_id: (found.host, found.port)})
        answer = client.call(
            int(found.node_id),
            lambda v: v.build(_OFFSET_FETCH, group_id=group, topics=[{"topic": topic, "partitions": [0]}]),
            timeout_ms=timeout_ms, api_key=_OFFSET_FETCH,
        )
        if getattr(answer, "error_code", 0):
            raise for_code(answer.error_code)(f"OffsetFetch {group!r}")
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    return None
                if p.error_code:
                    raise for_code(p.error_code)(f"OffsetFetch {group!r} {topic}-0")
                if p.offset >= 0:
                    return int(p.offset), p.metadata
        return None

    result: tuple[int, str | None] | None = retry_policy(
        max_retries=20, backoff_ms=100, deadline_ms=timeout_ms, retry_on=is_retriable
    )(once)
    return result


#: ``send(producer, rows done) -> (rows, rows per topic)``: the sink's row loop (counts every
#: row of the input, sends those past ``rows done``).
SendRows = Callable[[Producer, int], tuple[int, dict[str, int]]]


def write_partition(cfg: ProducerConfig, plan: EosPlan, send: SendRows) -> tuple[int, dict[str, int], bool]:
    """Write one task's rows in one transaction (the cases of the module docstring).

    Args:
        cfg: The sink's producer settings (``transactional.id`` is set here).
        plan: The write's :class:`EosPlan`.
        send: Sends every row of the task with the given producer.

    Returns:
        ``(rows, rows per topic, skipped)``; ``skipped`` when (E2) found the batch committed.

    Raises:
        TransactionalWriteError: fenced by a newer attempt, or the transaction could not commit.
        HmbError: whatever ``send`` raised (the transaction is aborted first).
    """
    partition, query_id, batch_id = _task_identity()
    prefix, write_id = identity(plan, query_id)
    tid = transactional_id(prefix, partition)
    where = f"partition {partition} (transactional.id {tid!r}, batch {batch_id})"
    producer = Producer(cfg.replace(transactional_id=tid))
    try:
        try:
            producer.init_transactions(plan.timeout_s)  # (E1)
            done = rows_done(_fetch_marker(producer, tid, plan.marker_topic, plan.timeout_s), write_id, batch_id)  # (E2)
            if done == ALL_ROWS:  # (E2a)
                log.info("format 'hmb' writer: %s: a later batch is committed; writing nothing", where)
                return 0, {}, True
            producer.begin_transaction()  # (E3)
            rows, per_topic = send(producer, done)
            if rows <= done and done > 0:  # (E3a)
                log.info("format 'hmb' writer: %s: its %d rows are committed; writing nothing", where, done)
                producer.abort_transaction(plan.timeout_s)
                return 0, {}, True
            if done:
                log.warning("format 'hmb' writer: %s: %d rows were committed by an attempt whose input was cut short; "
                            "sending rows %d..%d", where, done, done, rows - 1)
            marker = {(plan.marker_topic, 0): (batch_id + 1, marker_metadata(write_id, rows))}
            producer.send_offsets_to_transaction(marker, tid, plan.timeout_s)  # (E4)
            producer.commit_transaction(plan.timeout_s)
            return rows - done, per_topic, False
        except BaseException as exc:
            _abort_quietly(producer)  # (E5)
            if isinstance(exc, (ProducerFencedError, TransactionFatalError)):
                raise TransactionalWriteError(
                    f"{where}: fenced by a newer attempt of the same partition or timed out "
                    f"(nothing of this attempt is visible to read_committed readers): {exc}"
                ) from exc
            raise
    finally:
        producer.close()


def _abort_quietly(producer: Producer) -> None:
    """(E5) abort the open transaction if the producer still can; an error is already on its way."""
    if producer.transaction_state not in ("InTransaction", "AbortableError", "Aborting"):
        return
    try:
        producer.abort_transaction(10.0)
    except Exception:  # noqa: BLE001 - the coordinator aborts it anyway (fencing or timeout)
        log.debug("abort after a failed exactly-once task failed", exc_info=True)
