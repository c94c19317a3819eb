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

Hand-out without a lock per message (cases labelled in the code)
----------------------------------------------------------------
The connector's streams get their records from the fetcher already built as
:class:`MessageAndMetadata` (the decoder's lead form, see ``record_class``), and ``next()`` hands
them out from the current chunk's plain list iterator. ``next(stream)`` (and ``for m in stream``)
reach a C-level ``itertools.chain`` over the chunks' iterators through the type's ``__next__``
(a property giving the chain's ``__next__``): per message no Python frame, no lock. Python code
runs once per chunk, when the chain asks its source (:meth:`KafkaStream._next_chunk`, under the
stream's lock) for the next chunk's iterator. With ``key_decoder``/``value_decoder``, a Python
step decodes each message taken from the chain.

Invariant: a message is handed out exactly when the consuming thread's step of the chunk's list
iterator returned it. That step is one C call, atomic under the GIL (CPython's default build;
a build without the GIL would need the lock back), and so is ``list(iterator)``, which takes all
the rest at once. So:

* (position) the partition's position -- the offset after the last message handed out, what a
  commit writes (``pti.consumed``) -- is read under the stream's lock: for the current chunk
  from what its iterator has left (``__length_hint__``, one C call), for any other partition
  (or before the current chunk's first message is out) from the position stored when its
  last chunk was cut.
* (cut) revoke, reset, pause and close cut the current chunk under the lock with one
  ``list(iterator)``: whatever the consuming thread had taken before is out, the rest never
  leaves, and the position moves past the last message out.
  After ``revoke`` returns not one more message of that partition leaves this stream, and the
  position it returned is exactly what was handed out -- the commit that follows (before the
  owner znode is released) loses nothing and duplicates nothing.
* (pause) ``set_paused`` (ZooKeeper connection suspended) cuts the current chunk and queues its
  rest first again: hand-out resumes there.
* (floor) a chunk becomes current only with its records at or after the partition's position
  (a compressed wrapper, a reset): nothing is handed out twice.
* (renew) an exception raised by the source (``consumer_timeout_ms``, a chunk's error, a second
  thread iterating at once) ends its chain, so a fresh chain is in place before it propagates;
  the source hands a fresh chain the current chunk's iterator again while it has messages left.
  ``close`` ends the chain for good (StopIteration from then on).

A stream is iterated by one thread (one stream per consuming thread, as Kafka's); a second
thread that needs a chunk while another waits for one gets IllegalStateError.

The feeding side (the hand-off)
-------------------------------
Users only iterate a stream. The fetcher and the connector feed and steer it through its
hand-off methods, all thread-safe: :meth:`~KafkaStream.put` (a fetched chunk; blocks while
the queue is full), :meth:`~KafkaStream.put_error`, :meth:`~KafkaStream.reset_position`
(auto_offset_reset), :meth:`~KafkaStream.revoke` (rebalance), :meth:`~KafkaStream.set_paused`
and :meth:`~KafkaStream.close` (shutdown). The subscribe/poll consumer takes batches with
:meth:`~KafkaStream.take` (under the lock, the same cases); its asyncio front registers a
one-shot :meth:`~KafkaStream.add_waiter` that the next ``put`` (or ``close``) calls from the
feeding thread.

(record class) A stream carries ``record_class``, what the fetcher has the decoder build each
chunk's records as (:meth:`~KafkaStream.record_tail`), with no Record made first:
:class:`MessageAndMetadata` (the default, the connector's streams) in the decoder's lead form
(``tail=(MessageAndMetadata, (topic, partition), True)``); or a NamedTuple whose fields are a
decoded Record's (``offset, timestamp, key, value, headers``) followed by ``topic, partition``
(``tail=(record_class, (topic, partition))``: the subscribe/poll consumer's ConsumerRecords,
which ``poll`` hands out as they are); or None: Records. ``next()`` hands out the records as
built (decoded when the stream has decoders: MessageAndMetadata only); every kind keeps
``offset``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain, islice
from operator import attrgetter, length_hint
from typing import TYPE_CHECKING, Any, NamedTuple

from hmbclient.errors import ConsumerTimeoutError, HmbError, IllegalStateError

if TYPE_CHECKING:  # pragma: no cover
    from hmbclient.protocol.records.base import Tail

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

    ``consumed``: next offset to hand out, the offset after the last message handed out (what a
    commit writes); None until known. Read from its stream (case position), so it is exact at
    the moment it is read.
    ``fetch_offset``: next offset to fetch; None means "resolve auto_offset_reset first".
    ``committed``: the last offset committed for it (skip needless commits).
    ``revoked``: set under the stream lock once the partition is taken away; never cleared
    (a partition that comes back gets a fresh PartitionTopicInfo).
    ``high_watermark``: the partition's high watermark from the last Fetch answer (-1: none
    yet); ``high_watermark - consumed`` is its lag.
    """

    __slots__ = (
        "topic", "partition", "stream", "thread_id", "_consumed", "fetch_offset", "committed", "revoked",
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
        # The position, except while a chunk of this partition is current (the stream knows).
        self._consumed: int | None = offset
        self.fetch_offset: int | None = offset
        self.committed: int | None = offset
        self.revoked = False
        self.high_watermark = -1

    @property
    def consumed(self) -> int | None:
        """The offset after the last message handed out (None until known)."""
        return self.stream.position(self)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def __repr__(self) -> str:
        return (
            f"PartitionTopicInfo({self.topic}-{self.partition}, consumed={self._consumed}, "
            f"fetch={self.fetch_offset}, revoked={self.revoked})"
        )


class FetchedChunk(NamedTuple):
    """Records of one partition from one fetch (``error`` set: raise it at this point)."""

    pti: PartitionTopicInfo
    records: list[Any]
    error: BaseException | None = None


class _ChunkSource:
    """The hand-out chain's source: each chunk's iterator, from :meth:`KafkaStream._next_chunk`
    (a plain ``__next__``, not a generator: it may be entered by a second thread, which then
    gets a clear error, and it can raise and be asked again)."""

    __slots__ = ("_stream",)

    def __init__(self, stream: KafkaStream) -> None:
        self._stream = stream

    def __iter__(self) -> _ChunkSource:
        return self

    def __next__(self) -> Iterator[Any]:
        stream = self._stream
        try:
            return stream._next_chunk()
        except StopIteration:
            raise  # closed: this chain ends for good
        except BaseException:
            stream._renew()  # (renew) the exception ends this chain
            raise


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
        record_class: type | None = MessageAndMetadata,
    ) -> None:
        self.name = name
        #: (record class) what the fetcher decodes this stream's records as; None: Records.
        self.record_class = record_class
        self._cap = max(1, queued_max_chunks)
        self._timeout_s = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000.0
        self._key_decode = key_decoder.from_message if key_decoder is not None else None
        self._value_decode = value_decoder.from_message if value_decoder is not None else None
        # The Condition shares the plain lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._chunks: deque[FetchedChunk] = deque()
        # The current chunk: its partition, its records (all at or after the partition's
        # position when it became current) and their list iterator, which the chain shares.
        self._cur_pti: PartitionTopicInfo | None = None
        self._cur_records: list[Any] = []
        self._cur_iter: Iterator[Any] | None = None
        self._paused = False
        self._closed = False
        self._in_source = False  # a thread is in _next_chunk (waits released the lock)
        # add_waiter's one-shot callbacks, called by the next put or close.
        self._waiters: list[Callable[[], None]] = []
        self._hand_out: Callable[[], Any]
        self._chain_next: Callable[[], Any]
        self._renew()

    def __iter__(self) -> KafkaStream:
        return self

    if TYPE_CHECKING:

        def __next__(self) -> MessageAndMetadata:
            """The next message.

            Raises:
                ConsumerTimeoutError: nothing arrived within ``consumer_timeout_ms``.
                StopIteration: the connector was shut down.
                HmbError: a chunk carried an error (e.g. a message larger than
                    ``fetch_message_max_bytes``, or a corrupt record set).
            """
            ...

    else:
        # next(stream) looks __next__ up on the type: this property gives the C-level step of
        # the current chain (or _next_decoded), so a message costs no Python frame and no lock.
        __next__ = property(attrgetter("_hand_out"))

    def _renew(self) -> None:
        # (renew) A fresh chain over the chunks' iterators: at the start, and whenever an
        # exception from the source ended the last one (consuming thread, or a second thread).
        self._chain_next = chain.from_iterable(_ChunkSource(self)).__next__
        if self._key_decode is None and self._value_decode is None:
            self._hand_out = self._chain_next
        else:
            self._hand_out = self._next_decoded

    def _next_decoded(self) -> MessageAndMetadata:
        # A stream with decoders: the message taken from the chain, decoded outside the lock
        # (user decoders may be slow).
        record = self._chain_next()
        key, value = record[3], record[4]
        if self._key_decode is not None:
            key = self._key_decode(key)
        if self._value_decode is not None:
            value = self._value_decode(value)
        return _new_message_and_metadata(MessageAndMetadata, (record[0], record[1], record[2], key, value))

    def _next_chunk(self) -> Iterator[Any]:
        # The chain's source, on the consuming thread, once per chunk: the current chunk's
        # iterator while it has messages left (a renewed chain picks it up), else the next
        # chunk's, waiting (with the timeout) while there is none or hand-out is paused.
        deadline = None
        with self._cond:
            if self._in_source:
                raise IllegalStateError(
                    f"stream {self.name} is iterated by two threads at once: one stream per consuming thread"
                )
            self._in_source = True
            try:
                while True:
                    if self._closed:
                        raise StopIteration
                    if not self._paused:
                        if self._cur_pti is not None:
                            if length_hint(self._cur_iter):
                                return self._cur_iter  # type: ignore[return-value]
                            self._cut()  # handed out to its end
                        while self._chunks:
                            it = self._install(self._pop())
                            if it is not None:
                                return it
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
            finally:
                self._in_source = False

    # ------------------------------------------------------------------ the current chunk (lock held)

    def _pop(self) -> FetchedChunk:
        chunk = self._chunks.popleft()
        self._cond.notify_all()  # room for a blocked fetcher
        return chunk

    def _install(self, chunk: FetchedChunk) -> Iterator[Any] | None:
        # Make ``chunk`` current (case floor); None when nothing of it is to be handed out.
        # Raises the chunk's error.
        pti = chunk.pti
        if pti.revoked:
            return None
        if chunk.error is not None:
            raise chunk.error
        records = chunk.records
        floor = pti._consumed
        if records and floor is not None and records[0].offset < floor:
            # (floor) below the position (a compressed wrapper, a reset): never hand out twice
            records = [record for record in records if record.offset >= floor]
        if not records:
            return None
        self._cur_pti = pti
        self._cur_records = records
        it = self._cur_iter = iter(records)
        return it

    def _cut(self) -> list[Any]:
        # (cut) Stop handing out the current chunk: take its rest in one C-level step (a
        # message is out iff the consuming thread's step got it first) and move the
        # partition's position past the last message handed out (kept when none was).
        pti = self._cur_pti
        if pti is None:
            return []
        records = self._cur_records
        rest = list(self._cur_iter)  # type: ignore[arg-type]
        out = len(records) - len(rest)
        if out:
            pti._consumed = records[out - 1].offset + 1
        self._cur_pti = None
        self._cur_iter = None
        self._cur_records = []
        return rest

    def _position(self, pti: PartitionTopicInfo) -> int | None:
        # (position) Lock held. After the last message handed out, not at the next one: a gap
        # (aborted or compacted records) is not skipped before a message beyond it is out.
        if pti is self._cur_pti:
            records = self._cur_records
            out = len(records) - length_hint(self._cur_iter)
            if out:
                return records[out - 1].offset + 1
        return pti._consumed

    def position(self, pti: PartitionTopicInfo) -> int | None:
        """The offset after the last message of ``pti`` handed out (``pti.consumed``).

        Args:
            pti: a partition this stream carries.

        Returns:
            The position, exact at the moment read; None until known.
        """
        with self._lock:
            return self._position(pti)

    def record_tail(self, pti: PartitionTopicInfo) -> Tail | None:
        """(record class) The ``tail`` the fetcher decodes ``pti``'s records with.

        Args:
            pti: a partition this stream carries.

        Returns:
            ``decode_records``' tail, or None for Records.
        """
        cls = self.record_class
        if cls is None:
            return None
        if cls is MessageAndMetadata:
            return (cls, (pti.topic, pti.partition), True)
        return (cls, (pti.topic, pti.partition))

    def take(self, max_records: int, timeout_s: float | None) -> list[tuple[PartitionTopicInfo, list[Any]]]:
        """Hand out up to ``max_records`` raw records at once, grouped by partition (the batch
        form of ``next()`` that :class:`hmbclient.Consumer`'s ``poll`` uses; not decoded).

        Returns as soon as at least one record is out and no further chunk is queued; waits
        up to ``timeout_s`` (None: forever) for the first. Same invariant as ``next()``: the
        records are taken from the current chunk's iterator under the stream's lock, so
        ``revoke`` stops hand-out.

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
                    if pti is not None:
                        got = list(islice(self._cur_iter, left))  # type: ignore[arg-type]
                        if got:
                            out.append((pti, got))
                            left -= len(got)
                            if not left:
                                return out
                        self._cut()  # fewer than asked: handed out to its end
                    if self._chunks:
                        if self._chunks[0].error is not None and out:
                            return out  # hand out what came before; raise on the next call
                        self._install(self._pop())
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
                self._cut()  # (cut)
            self._cond.notify_all()
            return pti._consumed

    def reset_position(self, pti: PartitionTopicInfo, offset: int) -> None:
        """Reset a partition's position (auto_offset_reset): drop its queued chunks."""
        with self._cond:
            if pti.revoked:
                return
            if self._cur_pti is pti:
                self._cut()  # (cut)
            pti._consumed = offset
            if self._chunks:
                self._chunks = deque(chunk for chunk in self._chunks if chunk.pti is not pti)
            self._cond.notify_all()

    def set_paused(self, paused: bool) -> None:
        """Hold hand-out (True: the ZooKeeper connection is suspended) or resume it."""
        with self._cond:
            self._paused = paused
            pti = self._cur_pti
            if paused and pti is not None:
                rest = self._cut()  # (pause) its rest is handed out first on resume
                if rest:
                    self._chunks.appendleft(FetchedChunk(pti, rest))
            self._cond.notify_all()

    def close(self) -> None:
        """Shut the stream: queued chunks are dropped, iteration ends (StopIteration)."""
        with self._cond:
            self._closed = True
            self._cut()  # (cut)
            self._chunks.clear()
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()

    def put_error(self, pti: PartitionTopicInfo, error: HmbError, stop: threading.Event) -> None:
        """Queue an error to be raised when iteration reaches it."""
        self.put(FetchedChunk(pti, [], error), stop)
