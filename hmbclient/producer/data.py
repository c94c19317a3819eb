"""The producer's nouns: ProducerData in, ProducerBatch in the pipeline, RecordMetadata out.

Futures are per batch, not per message: a :class:`ProducerBatch` owns one
``concurrent.futures.Future`` resolving to the batch's base offset (None when the broker gives
no real offset: acks=0, HMB). ``send`` hands back a :class:`SendFutures` sequence; indexing it
makes a tiny :class:`RecordFuture` (batch, index) whose ``result()`` derives
``RecordMetadata(topic, partition, base_offset + index)``. So a message costs no future, no
lock and no callback on the hot path; only the messages a caller actually looks at get an
object.

Invariant: a batch's future is completed exactly once (offset or error); every message of a
ProducerData handed to ``send`` is in exactly one batch, so no message is silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, overload

__all__ = ["ProducerData", "RecordMetadata", "ProducerBatch", "RecordFuture", "SendFutures"]


class ProducerData(NamedTuple):
    """Messages for one topic sharing one key (Kafka 0.8 ``ProducerData``).

    All messages of one ProducerData go to the same partition, in order. ``messages`` is a
    list (a single non-list value is taken as one message).
    """

    topic: str
    key: Any = None
    messages: Any = ()


class RecordMetadata(NamedTuple):
    """Where a message landed. ``offset`` is None when the broker reported none (acks=0, HMB)."""

    topic: str
    partition: int
    offset: int | None


class ProducerBatch:
    """Messages bound for one partition, sent (and completed) together.

    Attributes:
        topic, partition: the destination.
        items: ``(key, value, timestamp_ms)`` tuples (timestamp None = the batch's).
        nbytes: approximate encoded size.
        created_ms: wall-clock creation time (the default record timestamp).
        future: resolves to the base offset (or None) or fails with the final error.
        attempts: sends tried so far.
    """

    __slots__ = (
        "topic",
        "partition",
        "items",
        "nbytes",
        "created_ms",
        "future",
        "attempts",
        "base_offset",
        "deadline",
        "solo",
    )

    def __init__(self, topic: str, partition: int, created_ms: int) -> None:
        self.topic = topic
        self.partition = partition
        self.items: list[tuple[Any, ...]] = []  # (key, value, timestamp[, headers])
        self.nbytes = 0
        self.created_ms = created_ms
        self.future: Future[int | None] = Future()
        self.attempts = 0
        self.base_offset: int | None = None
        self.deadline = 0.0  # monotonic ms when the open batch must close (queue.buffering.max.ms)
        self.solo = False  # never merged with other batches (after the broker found a merge too large)

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def messages(self) -> list[Any]:
        return [it[1] for it in self.items]

    def complete(self, base_offset: int | None) -> None:
        self.base_offset = base_offset
        if not self.future.done():
            self.future.set_result(base_offset)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {len(self.items)} messages, attempts={self.attempts})"


class RecordFuture:
    """The future of one message: a view of its batch's future (``concurrent.futures`` API)."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self.batch = batch
        self.index = index

    def _meta(self, base: int | None) -> RecordMetadata:
        b = self.batch
        return RecordMetadata(b.topic, b.partition, None if base is None else base + self.index)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """RecordMetadata(topic, partition, offset); raises the send's error or TimeoutError."""
        return self._meta(self.batch.future.result(timeout))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self.batch.future.exception(timeout)

    def done(self) -> bool:
        return self.batch.future.done()

    def running(self) -> bool:
        return not self.batch.future.done()

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        """Messages cannot be taken back once handed to send: always False."""
        return False

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self.batch.future.add_done_callback(lambda _f: fn(self))

    def __repr__(self) -> str:
        return f"RecordFuture({self.batch.topic}-{self.batch.partition} #{self.index}, done={self.done()})"


class SendFutures(Sequence[RecordFuture]):
    """The futures of one ``send`` call, one per message, in order; built lazily.

    ``segments`` are ``(batch, first_index, count)`` runs (usually one).
    """

    __slots__ = ("segments", "_len")

    def __init__(self, segments: list[tuple[ProducerBatch, int, int]], total: int = -1) -> None:
        self.segments = segments
        if total < 0:
            total = 0
            for seg in segments:
                total += seg[2]
        self._len = total

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> RecordFuture: ...
    @overload
    def __getitem__(self, i: slice) -> list[RecordFuture]: ...
    def __getitem__(self, i: int | slice) -> RecordFuture | list[RecordFuture]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("SendFutures index out of range")
        for batch, start, count in self.segments:
            if i < count:
                return RecordFuture(batch, start + i)
            i -= count
        raise IndexError(i)  # pragma: no cover

    def __iter__(self) -> Iterator[RecordFuture]:
        for batch, start, count in self.segments:
            for j in range(start, start + count):
                yield RecordFuture(batch, j)

    def batches(self) -> list[ProducerBatch]:
        return [s[0] for s in self.segments]

    def wait(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Wait for every message; returns their RecordMetadata (raises the first error)."""
        return [f.result(timeout) for f in self]

    def __repr__(self) -> str:
        return f"SendFutures({self._len} messages in {len(self.segments)} batch(es))"
