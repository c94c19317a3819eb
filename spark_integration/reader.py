"""The executor-side range reader: exactly one offset range, read from the partition's leader.

:func:`read_chunks` (and :func:`read_range`, :func:`read_range_arrow` on top of it) read one
:class:`~spark_integration.offsets.OffsetRange` with a SimpleConsumer connected to the
partition's leader, in fetches of ``fetch_message_max_bytes``. A task receives the picklable
:class:`~spark_integration.settings.ReadSettings`, the range and the leader found at planning
time; it opens its own consumer and always closes it.

Read contract: ``read_chunks`` yields every message the log holds with ``from_offset <= offset
< until_offset``, in offset order, and nothing else, or raises :class:`OffsetRangeError`
naming the range. It never returns short: a broker that has no more messages before
``until_offset`` (range past the end, a truncated log) is an error, because a Spark partition
that silently yields fewer messages than planned breaks exactly-once. Offsets missing *inside*
a range (a compacted log, transaction markers, with read_committed aborted records) are
skipped: the broker proved nothing lies there by returning a later offset, or a set whose
entries end later (``next_offset``) though it holds no record, as a trailing marker does.

``failOnDataLoss=false`` (``ReadSettings.fail_on_data_loss``) relaxes "never short" for data
the log no longer holds: an OffsetOutOfRange answer (retention deleted the offsets while the
batch ran) makes the reader look up the earliest offset, log the lost range at WARNING
(``topic-partition: offsets [from, to) ...``) and go on from there; a log that ends before
``until_offset`` (truncated, recreated) logs ``[log end, until)`` and ends the range.

Columns: the timestamp type of each record (Spark's ``timestampType``: 0 CreateTime,
1 LogAppendTime, -1 none for magic 0) is read from the attributes of the batch or wrapper
holding it (:func:`timestamp_types`, a walk over entry headers); ``headers`` is added when
``include_headers`` is set.

Columnar path: fetches are decoded with ``decode_segments`` (hmbclient's record decoder with
runs of records that share one layout -- what producers write -- left unbuilt), and
:func:`read_range_arrow` takes such a run's keys, values and timestamp deltas as strided
slices of its bytes straight into Arrow arrays (``pyarrow.compute.binary_slice`` over the run
viewed as fixed-size rows): no Python object per record. Other records (headers, mixed layouts,
v0/v1, read_committed sets with aborted transactions) go through ``Record`` values as before;
:func:`read_chunks` builds every run's records.

Retries, each per fetch and through tenacity:

* a moved leader or a lost connection (:func:`~spark_integration.settings.is_transient`):
  look the leader up again from the broker list and fetch again, up to ``max_retries`` times
  with a pause of ``retry_backoff_ms``; OffsetOutOfRange and anything else is not retried;
* an empty fetch below the high watermark (some brokers, Tansu under load, answer one while
  the data is there): fetch again after 20 ms, doubling up to 0.5 s, at most 8 times (about
  2 s in all). An empty fetch at or past the high watermark is the end of the log.
"""

from __future__ import annotations

import logging
import struct
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

import tenacity

from hmbclient.consumer import (
    UniformRun,
    cut_segments,
    expand_segments,
    last_offset,
)
from hmbclient.errors import (
    BrokerError,
    HmbError,
    KafkaConnectionError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
)
from hmbclient.net import retry_policy
from spark_integration.offsets import OffsetRange
from spark_integration.planner import find_leader
from spark_integration.settings import (
    Leader,
    ReadSettings,
    close_quietly,
    is_transient,
    open_consumer,
)

__all__ = [
    "OffsetRangeError",
    "read_chunks",
    "read_range",
    "read_range_arrow",
    "arrow_batches",
    "arrow_schema",
    "timestamp_types",
    "ddl_schema",
    "ARROW_BATCH_ROWS",
]

log = logging.getLogger("hmbclient.spark")

#: Rows per Arrow record batch handed to Spark by the data source.
ARROW_BATCH_ROWS = 8192

# Empty fetches below the high watermark retried before a range counts as unreadable.
_EMPTY_FETCH_RETRIES = 8
_EMPTY_FETCH_FIRST_PAUSE_S = 0.02
_EMPTY_FETCH_MAX_PAUSE_S = 0.5


class OffsetRangeError(HmbError):
    """An offset range could not be read completely; the message names the range."""


class _DataGone(OffsetRangeError):
    """The log no longer holds ``offset`` (OffsetOutOfRange) or ends before the range does."""

    def __init__(self, message: str, offset: int, log_end: int | None) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_end = log_end


_ENTRY_HEAD = struct.Struct(">qi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def timestamp_types(buf: Any) -> list[tuple[int, int]]:
    """``(last offset, timestamp type)`` of each complete entry of a record set, in order.

    The type is bit 3 of a v2 batch's or a v1 message's attributes (1 = LogAppendTime, else 0,
    CreateTime); v0 messages have none (-1). A compressed v1 wrapper's type holds for its inner
    messages, whose last offset is the wrapper's.
    """
    out: list[tuple[int, int]] = []
    n = len(buf)
    pos = 0
    while pos + 17 <= n:
        offset, size = _ENTRY_HEAD.unpack_from(buf, pos)
        end = pos + 12 + size
        if size <= 0 or end > n:
            break
        magic = buf[pos + 16]
        if magic == 2 and pos + 27 <= n:
            attrs = _I16.unpack_from(buf, pos + 21)[0]
            out.append((offset + _I32.unpack_from(buf, pos + 23)[0], 1 if attrs & 0x08 else 0))
        elif magic == 1 and pos + 18 <= n:
            out.append((offset, 1 if buf[pos + 17] & 0x08 else 0))
        else:
            out.append((offset, -1))
        pos = end
    return out


class _EmptyFetch(Exception):
    """A fetch below the high watermark came back empty: the data is there, ask again."""

    def __init__(self, offset: int, high_watermark: int) -> None:
        super().__init__(f"empty fetch at offset {offset} (high watermark {high_watermark})")
        self.offset = offset
        self.high_watermark = high_watermark


def _offset_of(record: Any) -> int:
    # Records are (offset, timestamp, key, value, headers) tuples; a UniformRun starts with
    # its first offset too.
    return record[0]


class _RangeReader:
    """The fetches of one range: the leader's consumer, replaced after a transient failure."""

    def __init__(
        self, settings: ReadSettings, offset_range: OffsetRange, leader: Leader | None
    ) -> None:
        self.settings = settings
        self.range = offset_range
        self.leader = leader
        self.consumer: Any = None
        #: ``timestamp_types`` of the last fetch's record set.
        self.types: list[tuple[int, int]] = []

    def close(self) -> None:
        if self.consumer is not None:
            close_quietly(self.consumer)
            self.consumer = None

    def records_from(self, offset: int) -> tuple[list[Any], int]:
        """The records of the next fetch at ``offset`` that holds records or moves on (none
        below ``offset``), and the offset after it.

        Raises:
            OffsetRangeError: The log ends before the range does, or the fetch failed.
        """
        policy = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_EmptyFetch),
            stop=tenacity.stop_after_attempt(_EMPTY_FETCH_RETRIES + 1),
            wait=tenacity.wait_exponential(
                multiplier=_EMPTY_FETCH_FIRST_PAUSE_S, max=_EMPTY_FETCH_MAX_PAUSE_S
            ),
            retry_error_callback=self._still_empty,
        )
        found: tuple[list[Any], int] = policy(self._nonempty_fetch, offset)
        return found

    def _nonempty_fetch(self, offset: int) -> tuple[list[Any], int]:
        records, high_watermark, next_offset = self._fetch(offset)
        # The message set already dropped records below ``offset`` except inside compressed
        # wrappers and v2 batches, which start early: cut with a binary search, not a scan.
        if records and _offset_of(records[0]) < offset:
            records = cut_segments(records, offset, None)
        if records:
            return records, max(next_offset, last_offset(records[-1]) + 1)
        if next_offset > offset:
            return records, next_offset  # only markers (or aborted records) up to there
        if high_watermark < 0 or high_watermark > offset:
            log.debug("offset range %s: empty fetch at %d (high watermark %d); retrying",
                      self.range, offset, high_watermark)
            raise _EmptyFetch(offset, high_watermark)
        self._raise_log_ends(offset, high_watermark)

    def _still_empty(self, state: tenacity.RetryCallState) -> NoReturn:
        assert state.outcome is not None
        empty = state.outcome.exception()
        assert isinstance(empty, _EmptyFetch)
        self._raise_log_ends(empty.offset, empty.high_watermark)

    def _fetch(self, offset: int) -> tuple[list[Any], int, int]:
        """One fetch at ``offset``: its records, the high watermark and the set's
        ``next_offset``, after retries."""
        policy = retry_policy(
            max_retries=self.settings.max_retries,
            backoff_ms=self.settings.retry_backoff_ms,
            # A fixed pause (the cap equals the first wait): refresh.leader.backoff.ms.
            backoff_max_ms=self.settings.retry_backoff_ms,
            retry_on=is_transient,
        ).copy(before_sleep=self._forget_leader)
        try:
            result: tuple[list[Any], int, int] = policy(self._fetch_once, offset)
        except (BrokerError, KafkaConnectionError, OSError) as exc:
            raise OffsetRangeError(
                f"offset range {self.range}: reading offset {offset} from leader {self.leader} "
                f"failed: {exc!r}"
            ) from exc
        return result

    def _fetch_once(self, offset: int) -> tuple[list[Any], int, int]:
        from hmbclient import FetchRequest

        topic, partition = self.range.topic, self.range.partition
        if self.consumer is None:
            if self.leader is None:
                self.leader = find_leader(self.settings, topic, partition)
            self.consumer = open_consumer(self.settings, self.leader)
        max_bytes = self.settings.fetch_message_max_bytes
        try:
            message_set = self.consumer.fetch(FetchRequest(topic, partition, offset, max_bytes))
            records = message_set.segments()
        except OffsetOutOfRangeError as exc:
            raise _DataGone(
                f"offset range {self.range}: the broker answered OffsetOutOfRange for offset "
                f"{offset} (the range is past the end of the log, or the log was truncated or "
                "deleted by retention)",
                offset,
                None,
            ) from exc
        except MessageSizeTooLargeError as exc:
            raise OffsetRangeError(
                f"offset range {self.range}: the message at offset {offset} is larger than "
                f"fetch.message.max.bytes={max_bytes}; raise it"
            ) from exc
        self.types = timestamp_types(message_set.buffer) if records else []
        return records, message_set.high_watermark, message_set.next_offset

    def earliest(self) -> int:
        """The partition's earliest offset now (asked of the leader)."""
        from hmbclient import EARLIEST_TIME

        if self.consumer is None:
            self.leader = self.leader or find_leader(
                self.settings, self.range.topic, self.range.partition
            )
            self.consumer = open_consumer(self.settings, self.leader)
        got = self.consumer.get_offsets_before(
            self.range.topic, self.range.partition, EARLIEST_TIME, max_num_offsets=1
        )
        return int(got[0]) if got else 0

    def _forget_leader(self, state: tenacity.RetryCallState) -> None:
        # tenacity's before_sleep: the next attempt looks the leader up again.
        assert state.outcome is not None
        log.info("offset range %s: %r; retrying with a fresh leader", self.range,
                 state.outcome.exception())
        self.close()
        self.leader = None

    def _raise_log_ends(self, offset: int, high_watermark: int) -> NoReturn:
        """Fetches at ``offset`` gave nothing: the log ends before ``until_offset``."""
        from hmbclient import LATEST_TIME

        offset_range = self.range
        try:
            latest = self.consumer.get_offsets_before(
                offset_range.topic, offset_range.partition, LATEST_TIME, max_num_offsets=1
            )
            log_end: int | None = int(latest[0]) if latest else None
        except HmbError:
            log_end = None
        raise _DataGone(
            f"offset range {offset_range}: ran out of messages at offset {offset} before "
            f"reaching until_offset {offset_range.until_offset} (high watermark "
            f"{high_watermark}, log end offset {log_end}); the range is past the end of the "
            "log, or the log was truncated",
            offset,
            log_end if log_end is not None else high_watermark,
        )


def read_chunks(
    settings: ReadSettings, offset_range: OffsetRange, leader: Leader | None
) -> Iterator[list[Any]]:
    """Yield the messages of ``offset_range`` as lists (one per fetch), in offset order.

    Each element is an hmbclient ``MessageAndOffset`` (a ``Record``: offset, timestamp, key,
    value, headers; ``.message.key`` etc. also work). Lists let callers convert a whole fetch
    with one comprehension instead of paying a generator step per message.

    Args:
        settings: Cluster and fetch settings.
        offset_range: Every message the log holds in ``[from_offset, until_offset)``.
        leader: The leader found at planning time, or None to look it up here.

    Raises:
        OffsetRangeError: The broker has no messages left before ``until_offset``, answered
            OffsetOutOfRange, a single message is larger than ``fetch_message_max_bytes``, or
            the leader stayed unreachable after ``max_retries`` attempts. Names the range.
    """
    for segments, _ in _typed_chunks(settings, offset_range, leader):
        yield expand_segments(segments)


def _typed_chunks(
    settings: ReadSettings, offset_range: OffsetRange, leader: Leader | None
) -> Iterator[tuple[list[Any], list[tuple[int, int]]]]:
    """:func:`read_chunks` with each fetch's :func:`timestamp_types`, as ``decode_segments``
    lists (runs of one layout not built)."""
    if offset_range.count == 0:
        return
    until = offset_range.until_offset
    reader = _RangeReader(settings, offset_range, leader)
    try:
        offset = offset_range.from_offset
        while offset < until:
            try:
                records, offset = reader.records_from(offset)
            except _DataGone as gone:
                if settings.fail_on_data_loss:
                    # Callers (and users' logs) see the public error type, as before.
                    raise OffsetRangeError(str(gone)) from gone.__cause__
                resume = _skip_lost(reader, gone, offset)
                if resume is None or resume >= until:
                    return
                offset = resume
                continue
            if records and last_offset(records[-1]) >= until:
                records = cut_segments(records, None, until)
                if records:
                    yield records, reader.types
                # Everything below ``until`` that the log holds has been read: the broker
                # returned a later offset, so any missing ones were compacted away.
                return
            if records:
                yield records, reader.types
    finally:
        reader.close()


def _skip_lost(reader: _RangeReader, gone: _DataGone, offset: int) -> int | None:
    """failOnDataLoss=false: log the lost offsets; where to go on (None: the range is done)."""
    from spark_integration.offsets import DataLoss

    until = reader.range.until_offset
    topic, partition = reader.range.topic_partition
    resume: int | None
    if gone.log_end is not None or reader.earliest() <= offset:
        # The log ends (or OffsetOutOfRange above its end): [offset, until) is not there.
        lost = DataLoss(topic, partition, offset, until, until,
                        "are past the end of the log (topic recreated or log truncated)")
        resume = None
    else:
        earliest = reader.earliest()
        lost = DataLoss(topic, partition, offset, min(earliest, until), min(earliest, until),
                        "were deleted before they were read (retention or DeleteRecords)")
        resume = earliest
    log.warning("failOnDataLoss=false: data loss in offset range %s: %s", reader.range, lost)
    return resume


def read_range(
    settings: ReadSettings, offset_range: OffsetRange, leader: Leader | None
) -> Iterator[Any]:
    """Yield the messages of ``offset_range`` one by one (see :func:`read_chunks`)."""
    for chunk in read_chunks(settings, offset_range, leader):
        yield from chunk


def read_range_arrow(
    settings: ReadSettings,
    offset_range: OffsetRange,
    leader: Leader | None,
    rows: int = ARROW_BATCH_ROWS,
) -> Iterator[Any]:
    """:func:`read_chunks` as Arrow record batches of the data source schema.

    Yields:
        ``pyarrow.RecordBatch`` with columns key, value, topic, partition, offset, timestamp,
        timestampType (and headers with ``settings.include_headers``), at most ``rows`` rows.
    """
    return arrow_batches(
        _typed_chunks(settings, offset_range, leader), offset_range.topic,
        offset_range.partition, include_headers=settings.include_headers, rows=rows,
    )


def arrow_batches(
    chunks: Iterable[tuple[list[Any], list[tuple[int, int]]]],
    topic: str,
    partition: int,
    *,
    include_headers: bool = False,
    rows: int = ARROW_BATCH_ROWS,
) -> Iterator[Any]:
    """Fetched messages as Arrow record batches of the data source schema, at most ``rows``
    rows each (the part of :func:`read_range_arrow` without I/O).

    Args:
        chunks: Per fetch, its ``decode_segments`` list (``Record`` values and
            ``UniformRun`` values, in offset order) and its :func:`timestamp_types`.
        topic: The topic column's value.
        partition: The partition column's value.
        include_headers: Add the ``headers`` column.
        rows: The most rows per batch.

    Yields:
        ``pyarrow.RecordBatch`` values; a run's columns are strided slices of its bytes.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema(include_headers)
    timestamp_type = schema.field("timestamp").type
    headers_type = schema.field("headers").type if include_headers else None

    def micros(millis: Any) -> Any:
        # Kafka's NO_TIMESTAMP (-1, magic 0 messages) becomes SQL NULL; ms -> us for Spark.
        return pc.if_else(
            pc.less(millis, 0), pa.scalar(None, pa.int64()), pc.multiply(millis, 1000)
        ).cast(timestamp_type)

    def constant(value: Any, type_: Any, count: int) -> Any:
        return pa.repeat(pa.scalar(value, type_), count)

    def records_batch(records: list[Any], types: list[int]) -> Any:
        count = len(records)
        # Records are (offset, timestamp, key, value, headers) tuples: transpose once.
        offsets, stamps, keys, values, headers = zip(*records, strict=True)
        columns = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            constant(topic, pa.string(), count),
            constant(partition, pa.int32(), count),
            pa.array(offsets, pa.int64()),
            micros(pa.array(stamps, pa.int64())),
            pa.array(types, pa.int32()),
        ]
        if headers_type is not None:
            columns.append(pa.array(
                [[{"key": _text(k), "value": v} for k, v in h] if h else None for h in headers],
                headers_type,
            ))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def run_batch(run: UniformRun, type_: int) -> Any:
        # The run as ``count`` fixed-size rows of ``stride`` bytes: each field is one strided
        # slice (binary_slice), in C, however many records.
        count = run.records
        rows = pa.Array.from_buffers(
            pa.binary(run.stride), count,
            [None, pa.py_buffer(run.data).slice(run.pos, count * run.stride)],
        )

        def field(at: int, length: int) -> Any:
            if length < 0:
                return pa.nulls(count, pa.binary())
            if length == 0:
                return constant(b"", pa.binary(), count)
            return pc.binary_slice(rows, at, at + length).cast(pa.binary())

        if run.append_ts is not None:
            millis = constant(run.append_ts, pa.int64(), count)
        else:  # timestamp deltas: one byte each (< 0x80, checked), zigzag-decoded
            deltas = pa.Array.from_buffers(
                pa.uint8(), count, [None, pc.binary_slice(rows, run.ts_at, run.ts_at + 1).buffers()[1]]
            ).cast(pa.int64())
            zigzag = pc.bit_wise_xor(
                pc.shift_right(deltas, 1), pc.negate(pc.bit_wise_and(deltas, 1))
            )
            millis = pc.add(zigzag, run.base_ts)
        columns = [
            field(run.key_at, run.key_len),
            field(run.value_at, run.value_len),
            constant(topic, pa.string(), count),
            constant(partition, pa.int32(), count),
            pa.array(range(run.offset, run.offset + count), pa.int64()),
            micros(millis),
            constant(type_, pa.int32(), count),
        ]
        if headers_type is not None:
            columns.append(pa.nulls(count, headers_type))
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def batches(segments: list[Any], spans: list[tuple[int, int]]) -> Iterator[Any]:
        """One record batch per run, and per stretch of records between runs."""
        plain: list[Any] = []
        for seg in segments:
            if type(seg) is UniformRun:
                if plain:
                    yield records_batch(plain, _types_of(plain, spans))
                    plain = []
                yield run_batch(seg, _type_at(spans, seg.offset))
            else:
                plain.append(seg)
        if plain:
            yield records_batch(plain, _types_of(plain, spans))

    pending: list[Any] = []
    pending_rows = 0
    for segments, spans in chunks:
        for batch in batches(segments, spans):
            pending.append(batch)
            pending_rows += batch.num_rows
            while pending_rows >= rows:
                merged = pa.concat_batches(pending) if len(pending) > 1 else pending[0]
                yield merged.slice(0, rows)
                rest = merged.slice(rows)
                pending = [rest] if rest.num_rows else []
                pending_rows -= rows
    if pending:
        yield pa.concat_batches(pending) if len(pending) > 1 else pending[0]


def _text(key: Any) -> str:
    return key.decode("utf-8", "replace") if isinstance(key, (bytes, bytearray)) else str(key)


def _type_at(spans: list[tuple[int, int]], offset: int) -> int:
    """The timestamp type of the record at ``offset``, from its fetch's entries."""
    at = bisect_left(spans, offset, key=_first)
    return spans[at][1] if at < len(spans) else -1


def _first(pair: tuple[int, int]) -> int:
    return pair[0]


def _types_of(records: list[Any], spans: list[tuple[int, int]]) -> list[int]:
    """Each record's timestamp type, from its fetch's ``(last offset, type)`` entries."""
    kinds = {kind for _, kind in spans}
    if len(kinds) == 1:
        return [kinds.pop()] * len(records)
    lasts = [last for last, _ in spans]
    out = []
    for record in records:
        at = bisect_left(lasts, _offset_of(record))
        out.append(spans[at][1] if at < len(spans) else -1)
    return out


def arrow_schema(include_headers: bool = False) -> Any:
    """The Arrow schema Spark expects for the data source's schema (:func:`ddl_schema`)."""
    import pyarrow as pa

    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(
            ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
        )
    return pa.schema(fields)


def ddl_schema(include_headers: bool = False) -> str:
    """The data source's schema as DDL: Spark's Kafka source columns, in its order."""
    ddl = (
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int"
    )
    return ddl + (", headers array<struct<key: string, value: binary>>" if include_headers else "")
