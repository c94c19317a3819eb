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

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, overload

__all__ = [
    "ProducerData",
    "RecordMetadata",
    "ProducerBatch",
    "RecordFuture",
    "SendFutures",
    "OneSendFuture",
    "DeliveryReport",
    "DeliveryQueue",
    "BatchOutcome",
]


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

    The messages are kept as columns, not one tuple each: ``send`` appends a value (and, only
    once some message of the batch has a key or headers, a key and a headers entry), and the
    encoder reads whole columns. A batch whose messages all have a null key and no headers
    (the common case) has ``keys`` and ``headers`` None and costs one list append per message.

    Attributes:
        topic, partition: the destination.
        values: the message values, in order.
        keys: the message keys (aligned with ``values``), or None when every key is null.
        headers: each message's headers (a tuple of ``(name, bytes | None)``, or None), aligned
            with ``values``, or None when no message has any; set together with ``keys``.
        items: ``(key, value, None)`` tuples (``(key, value, None, headers)`` for a message
            with headers), built on demand from the columns; the timestamp of every message is
            the batch's ``created_ms``.
        nbytes: approximate encoded size.
        created_ms: wall-clock creation time (the timestamp of its records).
        future: resolves to the base offset (or None) or fails with the final error.
        attempts: sends tried so far.
        seq, wire, maybe_stored: an idempotent producer's sequence state (see idempotence.py).
    """

    __slots__ = (
        "topic",
        "partition",
        "values",
        "keys",
        "headers",
        "nbytes",
        "created_ms",
        "future",
        "attempts",
        "base_offset",
        "deadline",
        "solo",
        "seq",
        "wire",
        "maybe_stored",
        "cbs",
        "reports",
    )

    def __init__(self, topic: str, partition: int, created_ms: int) -> None:
        self.topic = topic
        self.partition = partition
        self.values: list[Any] = []
        self.keys: list[Any] | None = None
        self.headers: list[Any] | None = None
        self.nbytes = 0
        self.created_ms = created_ms
        self.future: Future[int | None] = Future()
        self.attempts = 0
        self.base_offset: int | None = None
        self.deadline = 0.0  # monotonic ms when the open batch must close (queue.buffering.max.ms)
        self.solo = False  # never merged with other batches (after the broker found a merge too large)
        # Idempotence (see idempotence.py): the batch's first sequence once sent (-1: none);
        # ``wire``: the batches sent together as one record batch (a retry resends exactly
        # them); ``maybe_stored``: a send's answer was lost, so the broker may hold it.
        self.seq = -1
        self.wire: list[ProducerBatch] | None = None
        self.maybe_stored = False
        # produce(): each message's on_delivery (aligned with ``values``; None: no callback),
        # or None while no message of the batch has one; ``reports``: where the batch goes
        # once complete, for poll() to serve them (set together with ``cbs``).
        self.cbs: list[Any] | None = None
        self.reports: DeliveryQueue | None = None

    def add_keyed(self, start: int, key: Any, n: int, headers: Any) -> None:
        """Record the key (and headers) of the ``n`` messages just appended at ``start``:
        the keyed form of the batch, entered the first time a message has a key or headers."""
        keys = self.keys
        hdrs = self.headers
        if keys is None or hdrs is None:
            keys = self.keys = [None] * start
            hdrs = self.headers = [None] * start
        keys.extend([key] * n)
        hdrs.extend([headers] * n)

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def messages(self) -> list[Any]:
        return list(self.values)

    @property
    def items(self) -> list[tuple[Any, ...]]:
        values = self.values
        keys = self.keys
        if keys is None:
            return [(None, v, None) for v in values]
        hdrs = self.headers or [None] * len(values)
        return [(k, v, None) if h is None else (k, v, None, h) for k, v, h in zip(keys, values, hdrs, strict=True)]

    @items.setter
    def items(self, items: list[tuple[Any, ...]]) -> None:
        self.values = [it[1] for it in items]
        if any(it[0] is not None or (len(it) > 3 and it[3]) for it in items):
            self.keys = [it[0] for it in items]
            self.headers = [it[3] if len(it) > 3 and it[3] else None for it in items]
        else:
            self.keys = self.headers = None

    def add_report(self, start: int, n: int, on_delivery: Any, reports: DeliveryQueue) -> None:
        """Record the ``on_delivery`` of the ``n`` messages just appended at ``start`` (None:
        none), entering the reporting form of the batch on the first callback."""
        cbs = self.cbs
        if cbs is None:
            cbs = self.cbs = [None] * start
            self.reports = reports
        if n == 1:
            cbs.append(on_delivery)
        else:
            cbs.extend([on_delivery] * n)

    def complete(self, base_offset: int | None) -> None:
        self.base_offset = base_offset
        if not self.future.done():
            self.future.set_result(base_offset)
            if self.reports is not None:
                self.reports.put(self)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
            if self.reports is not None:
                self.reports.put(self)

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {len(self.values)} messages, attempts={self.attempts})"


class DeliveryReport(NamedTuple):
    """The second argument of a ``produce(..., on_delivery=cb)`` callback: where the message
    landed (``offset`` None when it failed or the broker gave none: acks=0, HMB) and what it
    was. Attributes, where confluent-kafka's Message has methods (``msg.offset`` there is
    ``msg.offset()``)."""

    topic: str
    partition: int
    offset: int | None
    key: Any
    value: Any
    headers: Any
    timestamp: int


class DeliveryQueue:
    """Batches whose messages have delivery callbacks, once complete (acknowledged or failed),
    in completion order, waiting for ``poll()`` / ``flush()`` to serve them in the caller's
    thread. ``put`` runs on the thread that completes the batch; ``wait`` blocks a poller
    until one arrives."""

    __slots__ = ("done", "cond", "waiters")

    def __init__(self) -> None:
        self.done: deque[ProducerBatch] = deque()
        self.cond = threading.Condition()
        self.waiters = 0

    def put(self, batch: ProducerBatch) -> None:
        self.done.append(batch)
        if self.waiters:
            with self.cond:
                self.cond.notify_all()

    def wait(self, timeout_s: float | None) -> None:
        """Return once a batch is waiting, or after ``timeout_s``."""
        with self.cond:
            self.waiters += 1
            try:
                if not self.done:
                    self.cond.wait(timeout_s)
            finally:
                self.waiters -= 1


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


class OneSendFuture(SendFutures):
    """The futures of a ``send`` of one message: a SendFutures of length 1 that holds its
    batch and index itself (``segments`` is built when asked). Made without ``__init__`` on
    the producer's hot path: ``f = object.__new__(OneSendFuture); f._batch = b; f._index = i``."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:  # for other callers
        self._batch = batch
        self._index = index

    @property
    def segments(self) -> list[tuple[ProducerBatch, int, int]]:  # type: ignore[override]
        return [(self._batch, self._index, 1)]

    @property
    def _len(self) -> int:  # type: ignore[override]
        return 1

    def __len__(self) -> int:
        return 1

    def __iter__(self) -> Iterator[RecordFuture]:
        yield RecordFuture(self._batch, self._index)


class BatchOutcome:
    """What one ``Producer.produce_batch`` call queued, per accumulator batch: which of the
    call's messages (by index into its ``values``) went to which batch. Its messages' outcomes
    are their batches' futures, so a caller that only needs the failures pays nothing per
    acknowledged message: no report object and no callback (compare ``on_delivery``).

    ``segments`` are ``(batch, indices, lo, hi)``: the call's messages ``indices[lo:hi]``
    (``range(lo, hi)`` when ``indices`` is None: the call's messages all went to one
    partition) are, in that order, consecutive messages of ``batch``.
    """

    __slots__ = ("segments", "count")

    def __init__(self, segments: list[tuple[ProducerBatch, list[int] | None, int, int]], count: int) -> None:
        self.segments = segments
        self.count = count

    def __len__(self) -> int:
        return self.count

    def done(self) -> bool:
        """Every message acknowledged or failed (after ``flush()`` returned 0: True)."""
        return all(s[0].future.done() for s in self.segments)

    def failed(self) -> list[tuple[int, BaseException | None]]:
        """The call's messages not acknowledged, as ``(index, error)`` in index order: those
        whose batch failed (``error`` is the batch's error), and those whose batch is not done
        yet (``error`` None). Empty when every message was acknowledged."""
        out: list[tuple[int, BaseException | None]] = []
        for batch, indices, lo, hi in self.segments:
            future = batch.future
            if future.done():
                err = future.exception()
                if err is None:
                    continue
            else:
                err = None
            span = range(lo, hi) if indices is None else indices[lo:hi]
            out.extend([(i, err) for i in span])
        out.sort(key=_first)
        return out

    def __repr__(self) -> str:
        return f"BatchOutcome({self.count} messages in {len(self.segments)} batch(es))"


def _first(item: tuple[int, Any]) -> int:
    return item[0]
