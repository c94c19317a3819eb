"""KafkaStream: the high-level consumer's iterator, one per consuming thread (Kafka 0.8's
``kafka.consumer.KafkaStream``, handed out by ``ConsumerConnector.createMessageStreams``).

Contract
--------
* A stream hands out :class:`MessageAndMetadata` ``(topic, partition, offset, key, message)``
  from the partitions the rebalance gave to its thread id; it may merge several partitions
  (and, for filters, several topics), and each partition feeds exactly one stream.
* Fetchers push *chunks* (the decoded records of one partition from one fetch) into the
  stream's bounded queue (``queued_max_message_chunks``); a full queue blocks the fetcher, so
  memory stays bounded whatever the consumer's pace.
* ``consumer_timeout_ms`` >= 0: ``next()`` raises :class:`ConsumerTimeoutError` when no
  message arrives in time; the stream stays usable. After ``shutdown`` it raises StopIteration.

Invariant (why there is one lock per stream, taken once per ``next()``)
-------------------------------------------------------------------
A message is handed out only while its partition is owned. Handing out a message and
recording its consumed position (``pti.consumed``, the offset that will be committed) happen
under the stream's lock, and :meth:`KafkaStream.revoke` takes the same lock to mark the
partition revoked and read its final position. So after ``revoke`` returns not one more
message of that partition leaves this stream, and the position it returned is exactly what
was handed out -- the commit that follows (before the owner znode is released) loses nothing
and duplicates nothing. An uncontended lock costs ~0.1 us, small against the per-message work;
everything else (chunk decoding, CRCs) happens per chunk in the fetcher.
``set_paused`` (ZooKeeper connection suspended) blocks hand-out the same way.

The feeding side (the hand-off)
-------------------------------
Users only iterate a stream. The fetcher and the connector feed and steer it through its
hand-off methods, all thread-safe: :meth:`~KafkaStream.put` (a fetched chunk; blocks while
the queue is full), :meth:`~KafkaStream.put_error`, :meth:`~KafkaStream.reset_position`
(auto_offset_reset), :meth:`~KafkaStream.revoke` (rebalance), :meth:`~KafkaStream.set_paused`
and :meth:`~KafkaStream.close` (shutdown). The subscribe/poll consumer takes batches with
:meth:`~KafkaStream.take`; its asyncio front registers a one-shot :meth:`~KafkaStream.add_waiter`
that the next ``put`` (or ``close``) calls from the feeding thread.

(record class) A stream may carry ``record_class``: a NamedTuple whose fields are a decoded
Record's (``offset, timestamp, key, value, headers``) followed by ``topic, partition``. The
fetcher then has the decoder build each chunk's records as that class directly
(``decode_records(..., tail=(record_class, (topic, partition)))``), with no Record made
first. The subscribe/poll consumer's stream gets its ConsumerRecords that way, and ``poll``
hands a chunk's records out as they are. Such a record keeps ``offset`` (what
``next()``/``take()`` read).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, NamedTuple

from hmbclient.errors import ConsumerTimeoutError, HmbError

__all__ = ["MessageAndMetadata", "KafkaStream", "PartitionTopicInfo", "FetchedChunk"]

# namedtuple's __new__ is a Python function; tuple.__new__ builds the same object in C.
_new_message_and_metadata = tuple.__new__


class MessageAndMetadata(NamedTuple):
    """One consumed message: where it came from, its decoded key and its decoded value."""

    topic: str
    partition: int
    offset: int
    key: Any
    message: Any

    @property
    def next_offset(self) -> int:
        """The offset a commit records after this message (``offset + 1``)."""
        return self.offset + 1


class PartitionTopicInfo:
    """The consumer's state for one owned partition (Java's ``PartitionTopicInfo``).

    ``consumed``: next offset to hand out (what a commit writes); None until known.
    ``fetch_offset``: next offset to fetch; None means "resolve auto_offset_reset first".
    ``committed``: the last offset committed for it (skip needless commits).
    ``revoked``: set under the stream lock once the partition is taken away; never cleared
    (a partition that comes back gets a fresh PartitionTopicInfo).
    ``high_watermark``: the partition's high watermark from the last Fetch answer (-1: none
    yet); ``high_watermark - consumed`` is its lag.
    """

    __slots__ = (
        "topic", "partition", "stream", "thread_id", "consumed", "fetch_offset", "committed", "revoked",
        "high_watermark",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        stream: KafkaStream,
        thread_id: str,
        offset: int | None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.stream = stream
        self.thread_id = thread_id
        self.consumed: int | None = offset
        self.fetch_offset: int | None = offset
        self.committed: int | None = offset
        self.revoked = False
        self.high_watermark = -1

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return (
            f"PartitionTopicInfo({self.topic}-{self.partition}, consumed={self.consumed}, "
            f"fetch={self.fetch_offset}, revoked={self.revoked})"
        )


class FetchedChunk(NamedTuple):
    """Records of one partition from one fetch (``error`` set: raise it at this point)."""

    pti: PartitionTopicInfo
    records: list[Any]
    error: BaseException | None = None


class KafkaStream:
    """An iterator of MessageAndMetadata; see the module docstring.

    Created by the ConsumerConnector; users only iterate it.
    """

    def __init__(
        self,
        name: str,
        *,
        queued_max_chunks: int,
        consumer_timeout_ms: int = -1,
        key_decoder: Any = None,
        value_decoder: Any = None,
        record_class: type | None = None,
    ) -> None:
        self.name = name
        #: (record class) what the fetcher decodes this stream's records as; None: Records.
        self.record_class = record_class
        self._cap = max(1, queued_max_chunks)
        self._timeout_s = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000.0
        self._key_decode = key_decoder.from_message if key_decoder is not None else None
        self._value_decode = value_decoder.from_message if value_decoder is not None else None
        # The Condition shares the plain lock, so the hot path can take the lock directly.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._chunks: deque[FetchedChunk] = deque()
        self._cur_pti: PartitionTopicInfo | None = None
        self._cur_iter: Iterator[Any] | None = None
        self._paused = False
        self._closed = False
        # add_waiter's one-shot callbacks, called by the next put or close.
        self._waiters: list[Callable[[], None]] = []

    def __iter__(self) -> KafkaStream:
        return self

    def __next__(self) -> MessageAndMetadata:
        """The next message.

        Raises:
            ConsumerTimeoutError: nothing arrived within ``consumer_timeout_ms``.
            StopIteration: the connector was shut down.
            HmbError: a chunk carried an error (e.g. a message larger than
                ``fetch_message_max_bytes``, or a corrupt record set).
        """
        # Fast path (one C-level lock round trip): the current chunk still has a message at or
        # after the position, and nothing paused or revoked the partition.
        lock = self._lock
        lock.acquire()
        try:
            pti = self._cur_pti
            if pti is not None and not self._paused and not pti.revoked and not self._closed:
                floor = pti.consumed
                for record in self._cur_iter:  # type: ignore[union-attr]
                    offset = record.offset
                    if floor is None or offset >= floor:
                        pti.consumed = offset + 1
                        break
                    # Below the position (a compressed wrapper, a reset): never hand out twice.
                else:
                    record = self._next_slow()
                    pti = self._cur_pti
            else:
                record = self._next_slow()
                pti = self._cur_pti
            topic, partition = pti.topic, pti.partition  # type: ignore[union-attr]
        finally:
            lock.release()
        # Decode outside the lock: user decoders may be slow.
        key, value = record.key, record.value
        if self._key_decode is not None:
            key = self._key_decode(key)
        if self._value_decode is not None:
            value = self._value_decode(value)
        return _new_message_and_metadata(MessageAndMetadata, (topic, partition, record.offset, key, value))

    def _next_slow(self) -> Any:
        # Called with the lock held: move to the next chunk, waiting (with the timeout) while
        # there is none or hand-out is paused. Leaves _cur_pti set to the record's partition.
        deadline = None
        while True:
            if self._closed:
                raise StopIteration
            if not self._paused:
                pti = self._cur_pti
                if pti is not None and not pti.revoked:
                    floor = pti.consumed
                    for record in self._cur_iter:  # type: ignore[union-attr]
                        if floor is None or record.offset >= floor:
                            pti.consumed = record.offset + 1
                            return record
                if self._next_chunk(False):
                    continue
            if self._timeout_s is None:
                self._cond.wait()
            else:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._timeout_s
                left = deadline - now
                if left <= 0:
                    raise ConsumerTimeoutError(
                        f"no message on stream {self.name} for {int(self._timeout_s * 1000)} ms"
                    )
                self._cond.wait(left)

    def _next_chunk(self, holding: bool) -> bool:
        """With the lock held, the current chunk done: make the next queued one current
        (chunks of revoked partitions are dropped). The one hand-off of ``next()`` and ``take``.

        Args:
            holding: records are already out in this call (``take``): a chunk carrying an error
                stays queued, to be raised by the next call, after what came before it.

        Returns:
            True when a chunk is current; False when none is queued (or, holding, the next one
            carries an error).

        Raises:
            HmbError: the next chunk carries an error (not holding).
        """
        self._cur_iter = None
        self._cur_pti = None
        chunks = self._chunks
        while chunks:
            chunk = chunks[0]
            if chunk.error is not None and holding:
                return False
            chunks.popleft()
            self._cond.notify_all()  # room for a blocked fetcher
            if chunk.pti.revoked:
                continue
            if chunk.error is not None:
                raise chunk.error
            self._cur_pti = chunk.pti
            self._cur_iter = iter(chunk.records)
            return True
        return False

    def take(self, max_records: int, timeout_s: float | None) -> list[tuple[PartitionTopicInfo, list[Any]]]:
        """Hand out up to ``max_records`` raw records at once, grouped by partition (the batch
        form of ``next()`` that :class:`hmbclient.Consumer`'s ``poll`` uses; not decoded).

        Returns as soon as at least one record is out and no further chunk is queued; waits
        up to ``timeout_s`` (None: forever) for the first. Same invariant as ``next()``: each
        partition's position moves under the stream's lock, so ``revoke`` stops hand-out.

        Args:
            max_records: at most this many records (at least 1).
            timeout_s: longest wait for the first record; 0 only takes what is queued.

        Returns:
            ``[(partition info, records), ...]``; empty on timeout or once the stream is closed.

        Raises:
            HmbError: a queued chunk carried an error (raised when no records precede it).
        """
        out: list[tuple[PartitionTopicInfo, list[Any]]] = []
        left = max(1, max_records)
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while True:
                if self._closed:
                    return out
                if not self._paused:
                    pti = self._cur_pti
                    if pti is not None and not pti.revoked:
                        got = list(islice(self._cur_iter, left))  # type: ignore[arg-type]
                        exhausted = len(got) < left
                        floor = pti.consumed
                        if got and floor is not None and got[0].offset < floor:
                            # Below the position (a compressed wrapper, a reset): never twice.
                            got = [record for record in got if record.offset >= floor]
                        if got:
                            pti.consumed = got[-1].offset + 1
                            out.append((pti, got))
                            left -= len(got)
                            if not left:
                                return out
                        if not exhausted:
                            continue
                    if self._next_chunk(bool(out)):
                        continue
                if out:
                    return out
                if deadline is None:
                    self._cond.wait()
                else:
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        return out
                    self._cond.wait(wait)

    def __repr__(self) -> str:
        return f"KafkaStream({self.name!r}, queued={len(self._chunks)})"

    @property
    def capacity(self) -> int:
        """The most chunks the queue holds (``queued_max_message_chunks``) before ``put`` waits."""
        return self._cap

    @property
    def queued(self) -> int:
        """Chunks fetched and waiting to be handed out (at most ``queued_max_message_chunks``)."""
        return len(self._chunks)

    # ------------------------------------------------------------------ the hand-off (fetcher, connector)

    def put(self, chunk: FetchedChunk, stop: threading.Event) -> bool:
        """Put a chunk, waiting while the queue is full (fetcher threads).

        Returns:
            False when the chunk was dropped: its partition was revoked, the stream closed,
            or ``stop`` was set while waiting.
        """
        with self._cond:
            while len(self._chunks) >= self._cap:
                if chunk.pti.revoked or self._closed or stop.is_set():
                    return False
                self._cond.wait(0.1)
            if chunk.pti.revoked or self._closed:
                return False
            self._chunks.append(chunk)
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for wake in waiters:  # outside the lock: they only schedule work elsewhere
            wake()
        return True

    def add_waiter(self, wake: Callable[[], None]) -> bool:
        """Call ``wake()`` once, from the feeding thread, when the next chunk is queued or the
        stream closes (how :mod:`hmbclient.aio` waits without a thread). Keep it short.

        Args:
            wake: the one-shot callback.

        Returns:
            False, and nothing registered, when there is something to take already (a chunk
            queued, or one partly handed out) or the stream is closed: take it instead.
        """
        with self._cond:
            if self._chunks or self._cur_pti is not None or self._closed:
                return False
            self._waiters.append(wake)
            return True

    def remove_waiter(self, wake: Callable[[], None]) -> None:
        """Forget a callback of :meth:`add_waiter` that is no longer wanted (timed out).

        Args:
            wake: the callback given to ``add_waiter``.
        """
        with self._cond:
            if wake in self._waiters:
                self._waiters.remove(wake)

    def revoke(self, pti: PartitionTopicInfo) -> int | None:
        """Stop handing out ``pti``'s messages; return its final consumed position."""
        with self._cond:
            pti.revoked = True
            if self._chunks:
                self._chunks = deque(chunk for chunk in self._chunks if chunk.pti is not pti)
            if self._cur_pti is pti:
                self._cur_iter = None
                self._cur_pti = None
            self._cond.notify_all()
            return pti.consumed

    def reset_position(self, pti: PartitionTopicInfo, offset: int) -> None:
        """Reset a partition's position (auto_offset_reset): drop its queued chunks."""
        with self._cond:
            if pti.revoked:
                return
            pti.consumed = offset
            if self._chunks:
                self._chunks = deque(chunk for chunk in self._chunks if chunk.pti is not pti)
            if self._cur_pti is pti:
                self._cur_iter = None
                self._cur_pti = None
            self._cond.notify_all()

    def set_paused(self, paused: bool) -> None:
        """Hold hand-out (True: the ZooKeeper connection is suspended) or resume it."""
        with self._cond:
            self._paused = paused
            self._cond.notify_all()

    def close(self) -> None:
        """Shut the stream: queued chunks are dropped, iteration ends (StopIteration)."""
        with self._cond:
            self._closed = True
            self._chunks.clear()
            self._cur_iter = None
            self._cur_pti = None
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()

    def put_error(self, pti: PartitionTopicInfo, error: HmbError, stop: threading.Event) -> None:
        """Queue an error to be raised when iteration reaches it."""
        self.put(FetchedChunk(pti, [], error), stop)
