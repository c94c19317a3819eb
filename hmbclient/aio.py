"""asyncio front of the producer and the subscribe/poll consumer: :class:`AIOProducer` and
:class:`AIOConsumer`. Same engines, same guarantees; no call blocks the event loop.

Usage::

    async with AIOProducer(metadata_broker_list="h:9092") as producer:
        metadata = await producer.send("events", b"value", key=b"k")
    async with AIOConsumer({"bootstrap.servers": "h:9092", "group.id": "g"}) as consumer:
        await consumer.subscribe(["events"])
        async for record in consumer:
            ...

How each call avoids blocking the loop (the cases)
---------------------------------------------------
* (send) ``AIOProducer.send`` queues the message into the async :class:`~hmbclient.Producer`
  (``send_record``: an append to the accumulator, no I/O) and awaits an asyncio future that the
  sender thread's batch future settles through ``loop.call_soon_threadsafe``: one wake-up of
  the loop per *batch*, not per message, and no thread per call. The first send to a topic
  first looks its partitions up in the loop's default executor (metadata is network I/O).
* (full queue) The producer is built with ``queue.enqueue.timeout.ms=0``, so a full queue
  raises at once instead of blocking; ``send`` then parks in a first-come queue of sends
  waiting for room and tries again when woken, for as long as the configured
  ``queue.enqueue.timeout.ms`` allows (-1: forever), then raises QueueFullError. Each settled
  batch wakes as many parked sends as it held messages (the room it made), not all of them:
  waking every parked send for every batch made the loop's work per batch grow with the
  number waiting (400 sends through a 20-message queue: ~4,000 failed tries instead of ~400,
  up to ~380 in one loop iteration, 5x the loop's CPU), and their garbage (an exception and a
  wait set-up each) made a full collection during the wait likely, which in a large heap
  held the loop 0.3-0.5 s under load. No parked send is left behind: a send parks only while
  a batch of ours is in flight (one that will settle and wake some); when none is (the queue
  was filled by the producer's other users) it polls every 5 ms instead; a woken send that
  finds the queue full again parks again, and one that leaves without queueing its message
  (timeout, cancellation, an error) passes its wake-up on to the next. A new send may still
  take room before a parked one (no strict first-come order across the two).
* (flush, close, subscribe, assign, committed) They wait on the network by nature; they run
  in a thread (``asyncio.to_thread`` / the consumer's worker) and are awaited.
* (poll) ``AIOConsumer.poll`` takes what the fetchers already queued, on the loop thread,
  without waiting (``Consumer._poll_ready``: the stream's lock, no I/O). When nothing is
  queued it registers a one-shot waiter on the consumer's stream
  (:meth:`~hmbclient.consumer.stream.KafkaStream.add_waiter`) and awaits it: the fetcher
  thread that queues the next chunk calls ``loop.call_soon_threadsafe``, and the loop takes
  the chunk. Why this and not a worker thread running ``Consumer.poll``: the fetchers hand
  records over through the stream's bounded queue (what bounds memory and keeps revocation
  exact), not through futures, so the stream's own wake-up is the fetcher-side "future"; it
  costs one thread hand-off per chunk instead of two (fetcher -> worker -> loop), and under
  the GIL every hand-off can wait a switch interval. When an auto commit or a rejoin is due
  (network I/O), that one poll runs ``Consumer.poll`` on the consumer's single worker thread.
* (commit) ``AIOConsumer.commit`` uses the consumer's own asynchronous commit (its commit
  thread, commits in call order) and awaits its future, so a commit never waits behind a poll.

Invariant: the loop thread only ever takes locks held for microseconds (the stream's, the
accumulator's); anything that may wait for a broker runs elsewhere and is awaited.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hmbclient.consumer.poll_consumer import Consumer, ConsumerRecord, TopicPartition
from hmbclient.errors import QueueFullError
from hmbclient.metrics import Metrics
from hmbclient.producer import Producer, RecordMetadata
from hmbclient.producer.config import ProducerConfig

__all__ = ["AIOProducer", "AIOConsumer"]


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    # From another thread: nobody awaits any more once the loop is closed.
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AIOProducer:
    """An asyncio producer over one async :class:`hmbclient.Producer`.

    Args:
        config: a ProducerConfig or a mapping of property names (``producer_type`` is made
            ``async``); or None and keyword settings.
        **settings: ProducerConfig settings in any spelling (``metadata_broker_list``...).

    Raises:
        ConfigError: unknown keys or bad values.
    """

    def __init__(self, config: ProducerConfig | Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        if isinstance(config, ProducerConfig):
            cfg = config.replace(**settings) if settings else config
        elif isinstance(config, Mapping):
            cfg = ProducerConfig.from_properties(config, **settings)
        else:
            cfg = ProducerConfig(**settings)
        self._enqueue_timeout_ms = cfg.queue_enqueue_timeout_ms
        self.producer = Producer(cfg.replace(producer_type="async", queue_enqueue_timeout_ms=0))
        self._topics: set[str] = set()
        self._lookups: dict[str, asyncio.Future[Any]] = {}
        #: How many times a send found the queue full and waited for room.
        self.waits_for_room = 0
        # batch -> [(index in batch, asyncio future)]; touched on the loop thread only.
        self._waiting: dict[Any, list[tuple[int, asyncio.Future[RecordMetadata]]]] = {}
        # Sends parked until a settled batch makes room, oldest first; loop thread only.
        self._room: deque[asyncio.Future[None]] = deque()

    async def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """Send one message and wait until it is acknowledged.

        Args:
            topic: the topic.
            value: bytes or what the producer's serializer takes.
            key: bytes, None, or what the key serializer takes.
            partition: an explicit partition (None: the partitioner picks).
            headers: ``(name, bytes or None)`` pairs.

        Returns:
            RecordMetadata(topic, partition, offset).

        Raises:
            QueueFullError: the queue stayed full past ``queue.enqueue.timeout.ms``.
            HmbError: the broker refused the message (after the producer's retries).
        """
        return await self._queue(topic, value, key, partition, headers)

    def send_nowait(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one message to a topic already sent to, without a coroutine per message.

        Args:
            topic: a topic this producer already sent to (``send`` looks new ones up first).
            value: bytes or what the producer's serializer takes.
            key: bytes, None, or what the key serializer takes.
            partition: an explicit partition (None: the partitioner picks).
            headers: ``(name, bytes or None)`` pairs.

        Returns:
            An asyncio future of the message's RecordMetadata.

        Raises:
            QueueFullError: the queue is full now (``send`` waits for room instead).
            HmbError: see ``send``.
        """
        future = self.producer.send_record(topic, value, key, partition=partition, headers=list(headers) if headers else None)
        return self._bridge(future.batch, future.index)

    async def _queue(self, topic: str, value: Any, key: Any, partition: int | None, headers: Any) -> RecordMetadata:
        loop = asyncio.get_running_loop()
        if topic not in self._topics:
            # Case (send): the topic's metadata once, in the default executor, however many
            # sends to it are waiting.
            lookup = self._lookups.get(topic)
            if lookup is None:
                lookup = self._lookups[topic] = loop.run_in_executor(None, self.producer.partitions_for, topic)
            try:
                await lookup
            finally:
                self._lookups.pop(topic, None)
            self._topics.add(topic)
        deadline = None if self._enqueue_timeout_ms < 0 else time.monotonic() + self._enqueue_timeout_ms / 1000
        woken = False  # a wake-up was taken (by this send: it parked and was woken)
        room: asyncio.Future[None] | None = None
        try:
            while True:
                try:
                    future = self.send_nowait(topic, value, key, partition=partition, headers=headers)
                    break
                except QueueFullError:
                    # Case (full queue): wait for room, never block the loop.
                    self.waits_for_room += 1
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise
                    if not self._waiting:
                        # none of our batches in flight: no settle will wake us
                        await asyncio.sleep(0.005 if left is None else min(0.005, left))
                        continue
                    room = loop.create_future()
                    self._room.append(room)
                    try:
                        if left is None:
                            await room
                        else:
                            await asyncio.wait_for(room, left)  # cancels ``room`` on timeout
                    except TimeoutError:
                        pass  # the next try raises QueueFullError unless room came meanwhile
                    woken = woken or room.done() and not room.cancelled()
        except BaseException:
            if woken or room is not None and room.done() and not room.cancelled():
                self._make_room(1)  # leaving with a wake-up taken and no message queued: pass it on
            raise
        return await future

    def _bridge(self, batch: Any, index: int) -> asyncio.Future[RecordMetadata]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        entries = self._waiting.get(batch)
        if entries is None:
            entries = self._waiting[batch] = []
            batch.future.add_done_callback(lambda _f: _call_soon(loop, self._settle, batch))
        entries.append((index, future))
        return future

    def _make_room(self, n: int) -> None:
        # Wake the ``n`` oldest parked sends (loop thread); a timed-out one is skipped.
        room = self._room
        while n > 0 and room:
            parked = room.popleft()
            if not parked.done():
                parked.set_result(None)
                n -= 1

    def _settle(self, batch: Any) -> None:
        # On the loop thread: the batch is acknowledged or failed; settle its messages, and wake
        # as many parked sends as it made room for.
        entries = self._waiting.pop(batch, ())
        if self._room:
            self._make_room(len(batch.values))
        error = batch.future.exception()
        base = None if error is not None else batch.future.result()
        for index, future in entries:
            if future.done():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(RecordMetadata(batch.topic, batch.partition, None if base is None else base + index))

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it (in a thread).

        Args:
            timeout: seconds (None: no limit).

        Returns:
            Messages still unacknowledged (0: all done).
        """
        return await asyncio.to_thread(self.producer.flush, timeout)

    async def close(self, timeout: float | None = None) -> None:
        """Flush and close the producer (in a thread).

        Args:
            timeout: seconds to wait for unacknowledged messages (None: no limit).
        """
        await asyncio.to_thread(self.producer.close, timeout)

    async def __aenter__(self) -> AIOProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AIOConsumer:
    """An asyncio consumer over one :class:`hmbclient.Consumer` (and one worker thread for the
    calls that wait on the network).

    Args:
        config: a PollConsumerConfig or a mapping of Kafka property names; or None and settings.
        **settings: further settings (any spelling).

    Raises:
        ConfigError: unknown keys or bad values.
    """

    def __init__(self, config: Any = None, /, **settings: Any) -> None:
        self.consumer = Consumer(config, **settings)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hmb-aio-consumer")

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    async def subscribe(self, topics: Any, **callbacks: Any) -> None:
        """``Consumer.subscribe`` (joins the group: network I/O, in the worker).

        Args:
            topics: topic names or a pattern.
            **callbacks: ``on_assign``, ``on_revoke``, ``on_lost`` (called on the group's thread).
        """
        await self._run(lambda: self.consumer.subscribe(topics, **callbacks))

    async def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """``Consumer.assign`` (reads committed offsets: in the worker).

        Args:
            partitions: ``(topic, partition)`` pairs.
        """
        await self._run(self.consumer.assign, list(partitions))

    async def poll(self, timeout: float | None = None, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records, awaiting up to ``timeout`` seconds for the first (see the module docstring).

        Args:
            timeout: seconds (None: until records come).
            max_records: most records returned (default ``max.poll.records``).

        Returns:
            The records; empty on timeout or once the consumer is closed meanwhile.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: nothing subscribed or assigned.
            HmbError: as ``Consumer.poll``.
        """
        consumer = self.consumer
        ready = consumer._poll_ready(max_records)  # case (poll): what is queued, no wait
        if ready is None:
            return await self._blocking_poll(timeout, max_records)
        if ready or timeout == 0:
            return ready
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        stream = consumer._stream
        consumer._in_poll = True  # a wait in poll counts as polling (max.poll.interval.ms)
        try:
            while True:
                woken: asyncio.Future[None] = loop.create_future()

                def wake(woken: asyncio.Future[None] = woken) -> None:
                    _call_soon(loop, _set_done, woken)

                if stream.add_waiter(wake):
                    left = None if deadline is None else deadline - loop.time()
                    if left is not None and left <= 0:
                        stream.remove_waiter(wake)
                        return []
                    done, _ = await asyncio.wait({woken}, timeout=left)
                    if not done:
                        stream.remove_waiter(wake)
                        return []
                if consumer._closed:
                    return []
                ready = consumer._poll_ready(max_records)
                if ready is None:
                    left = None if deadline is None else max(0.0, deadline - loop.time())
                    return await self._blocking_poll(left, max_records)
                if ready:
                    return ready
        finally:
            consumer._in_poll = False

    async def _blocking_poll(self, timeout: float | None, max_records: int | None) -> list[ConsumerRecord]:
        # An auto commit or a rejoin is due: Consumer.poll does that I/O, on the worker.
        records: list[ConsumerRecord] = await self._run(self.consumer.poll, timeout, max_records)
        return records

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self.consumer._closed:
            for record in await self.poll(0.5):
                yield record

    async def commit(self, offsets: Mapping[tuple[str, int], int] | None = None) -> dict[TopicPartition, int]:
        """Commit (the positions, or ``offsets``) and await the coordinator's answer.

        Args:
            offsets: ``{(topic, partition): offset}``; None: every assigned partition's position.

        Returns:
            The offsets committed.
        """
        future = self.consumer.commit(offsets, asynchronous=True)
        assert future is not None
        return await asyncio.wrap_future(future)

    async def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int | None]:
        """``Consumer.committed``, in a thread.

        Args:
            partitions: ``(topic, partition)`` pairs.

        Returns:
            ``{TopicPartition: offset or None}``.
        """
        return await asyncio.to_thread(self.consumer.committed, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        """``Consumer.assignment`` (no I/O)."""
        return self.consumer.assignment()

    @property
    def metrics_registry(self) -> Metrics:
        """``Consumer.metrics_registry``: what the exporters of :mod:`hmbclient.metrics_exporters` read."""
        return self.consumer.metrics_registry

    def metrics(self) -> dict[str, dict[str, float]]:
        """``Consumer.metrics`` (no I/O): ``{group: {name: value}}`` under Kafka's names.

        Returns:
            ``{group: {name: value}}``.
        """
        return self.consumer.metrics()

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """``Consumer.seek`` (no I/O).

        Args:
            partition: an assigned ``(topic, partition)``.
            offset: the next offset to hand out.
        """
        self.consumer.seek(partition, offset)

    async def close(self) -> None:
        """Close the consumer (a waiting poll returns empty), then the worker."""
        await asyncio.to_thread(self.consumer.close)
        self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AIOConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
