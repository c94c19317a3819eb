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
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, NoReturn

import tenacity

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
    "arrow_schema",
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


class _EmptyFetch(Exception):
    """A fetch below the high watermark came back empty: the data is there, ask again."""

    def __init__(self, offset: int, high_watermark: int) -> None:
        super().__init__(f"empty fetch at offset {offset} (high watermark {high_watermark})")
        self.offset = offset
        self.high_watermark = high_watermark


def _offset_of(record: Any) -> int:
    # Records are (offset, timestamp, key, value, headers) tuples.
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
            records = records[bisect_left(records, offset, key=_offset_of) :]
        if records:
            return records, max(next_offset, _offset_of(records[-1]) + 1)
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
            records = message_set.messages()
        except OffsetOutOfRangeError as exc:
            raise OffsetRangeError(
                f"offset range {self.range}: the broker answered OffsetOutOfRange for offset "
                f"{offset} (the range is past the end of the log, or the log was truncated or "
                "deleted by retention)"
            ) from exc
        except MessageSizeTooLargeError as exc:
            raise OffsetRangeError(
                f"offset range {self.range}: the message at offset {offset} is larger than "
                f"fetch.message.max.bytes={max_bytes}; raise it"
            ) from exc
        return records, message_set.high_watermark, message_set.next_offset

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
        raise OffsetRangeError(
            f"offset range {offset_range}: ran out of messages at offset {offset} before "
            f"reaching until_offset {offset_range.until_offset} (high watermark "
            f"{high_watermark}, log end offset {log_end}); the range is past the end of the "
            "log, or the log was truncated"
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
    if offset_range.count == 0:
        return
    until = offset_range.until_offset
    reader = _RangeReader(settings, offset_range, leader)
    try:
        offset = offset_range.from_offset
        while offset < until:
            records, offset = reader.records_from(offset)
            if records and _offset_of(records[-1]) >= until:
                records = records[: bisect_left(records, until, key=_offset_of)]
                if records:
                    yield records
                # Everything below ``until`` that the log holds has been read: the broker
                # returned a later offset, so any missing ones were compacted away.
                return
            if records:
                yield records
    finally:
        reader.close()


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
        ``pyarrow.RecordBatch`` with columns key, value, topic, partition, offset, timestamp
        (at most ``rows`` rows each).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema()
    timestamp_type = schema.field("timestamp").type

    def to_batch(records: list[Any]) -> Any:
        count = len(records)
        # Records are (offset, timestamp, key, value, headers) tuples: transpose once.
        offsets, stamps, keys, values, _ = zip(*records, strict=True)
        millis = pa.array(stamps, pa.int64())
        # Kafka's NO_TIMESTAMP (-1, magic 0 messages) becomes SQL NULL; ms -> us for Spark.
        micros = pc.if_else(
            pc.less(millis, 0), pa.scalar(None, pa.int64()), pc.multiply(millis, 1000)
        )
        return pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array([offset_range.topic] * count, pa.string()),
                pa.array([offset_range.partition] * count, pa.int32()),
                pa.array(offsets, pa.int64()),
                micros.cast(timestamp_type),
            ],
            schema=schema,
        )

    pending: list[Any] = []
    for chunk in read_chunks(settings, offset_range, leader):
        pending.extend(chunk)
        while len(pending) >= rows:
            yield to_batch(pending[:rows])
            del pending[:rows]
    if pending:
        yield to_batch(pending)


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
