"""RecordAccumulator: per-partition batches between ``send`` and the sender thread.

State (all guarded by ``lock``; the sender and every caller thread share it):

* per partition (:class:`PartitionQueue`, the partition's queue of batches): at most one *open*
  batch taking new messages, a FIFO of *ready* (closed) batches, ``muted`` while a Produce
  request for the partition is in flight, and ``retry_at`` (monotonic ms) during a retry
  backoff.
* ``queued``: messages handed to ``send`` and not yet completed (acknowledged or failed). It is
  the bound of ``queue_buffering_max_messages``: memory stays bounded whatever the load,
  in-flight batches included.
* ``closed``: the producer refuses new messages; ``closing``: the sender sends what is queued
  and stops; ``closing_hard``: no more retries either.

A sync producer has one the same way (no linger, no message bound); its ``send`` drives the
sender's engine in the caller's thread. Messages enter only through :meth:`append` (and its
form for a group of keyed messages, :meth:`append_group`).

Transitions: a batch opens on the first message for its partition; it closes (open -> ready)
when it reaches ``batch_num_messages`` or ``batch_max_bytes`` (in the appending thread, in
:meth:`append`, which also keeps every batch under ``batch_max_bytes``) or when
its ``queue_buffering_max_ms`` deadline passes (in the sender, via the ``lingering`` FIFO,
which is in deadline order because the linger time is constant). The sender takes *all*
ready batches of an unmuted partition at once (up to ``max_request_bytes``) and mutes it, so a
partition has one request in flight and retried batches go back to the *front* of its queue:
per-partition order holds under retries.

Hot path cost per ``send``: one lock acquire and a list append/extend; no per-message lock,
future or callback. The sender is notified only when a batch closes or when a new batch's
deadline is earlier than the time the sender is sleeping until.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Literal, overload

from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.errors import ProducerClosedError, QueueFullError
from hmbclient.producer.data import DeliveryQueue, OneSendFuture, ProducerBatch, SendFutures

__all__ = ["PartitionQueue", "TopicState", "RecordAccumulator", "Unit"]

_INF = float("inf")
_new = object.__new__


class PartitionQueue:
    """The batches of one partition between ``send`` and the broker: the open batch taking
    new messages and the FIFO of ready (closed) ones. Guarded by the accumulator's lock."""

    __slots__ = ("topic", "partition", "open", "ready", "muted", "retry_at")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.open: ProducerBatch | None = None
        self.ready: deque[ProducerBatch] = deque()
        self.muted = False
        self.retry_at = 0.0


class TopicState:
    """A topic's partition queues, indexed by partition id; ``sole`` is the queue of a topic
    with one partition (no partitioner to ask), else None. Grow it with :meth:`grow`."""

    __slots__ = ("name", "parts", "sole")

    def __init__(self, name: str, num_partitions: int) -> None:
        self.name = name
        self.parts = [PartitionQueue(name, p) for p in range(num_partitions)]
        self.sole: PartitionQueue | None = self.parts[0] if num_partitions == 1 else None

    def grow(self, num_partitions: int) -> None:
        """The topic now has ``num_partitions`` partitions (lock held)."""
        parts = self.parts
        parts.extend(PartitionQueue(self.name, p) for p in range(len(parts), num_partitions))
        self.sole = parts[0] if len(parts) == 1 else None


class Unit:
    """The batches of one partition that travel in one Produce request (merged into one
    record set)."""

    __slots__ = ("topic", "partition", "batches", "queue", "count", "node")

    def __init__(
        self, topic: str, partition: int, batches: list[ProducerBatch], queue: PartitionQueue | None
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.batches = batches
        self.queue = queue  # where the batches go back on a retry (None: sync mode)
        self.count = sum(len(b.values) for b in batches)
        self.node = -1

    def items(self) -> list[Any]:
        """The ``(key, value, timestamp)`` items of all batches, in order (the record formats
        before RecordBatch v2 take items; v2 encodes the batches' columns directly). A
        message's timestamp is its batch's creation time: merged batches after the first get
        theirs written into their items (the first batch's is the record set's default)."""
        batches = self.batches
        if len(batches) == 1:
            return batches[0].items
        first_ts = batches[0].created_ms
        out: list[Any] = []
        for b in batches:
            ts = b.created_ms
            if ts == first_ts:
                out.extend(b.items)
            else:
                out.extend([(it[0], it[1], ts, *it[3:]) for it in b.items])
        return out


class RecordAccumulator:
    """See the module docstring."""

    def __init__(
        self,
        *,
        batch_num_messages: int,
        batch_max_bytes: int,
        linger_ms: float,
        max_messages: int,
        enqueue_timeout_ms: int,
        max_request_bytes: int,
    ) -> None:
        self.batch_num_messages = batch_num_messages
        self.last_index = batch_num_messages - 1  # a batch closes once it holds this index
        self.batch_max_bytes = batch_max_bytes
        self.linger_ms = float(linger_ms)
        self.max_messages = max_messages
        self.enqueue_timeout_ms = enqueue_timeout_ms
        self.max_request_bytes = max_request_bytes
        self.lock = threading.Lock()
        self.work = threading.Condition(self.lock)  # the sender waits here
        self.space = threading.Condition(self.lock)  # callers wait here (full queue, flush)
        self.topics: dict[str, TopicState] = {}
        self.queued = 0
        self.lingering: deque[tuple[float, ProducerBatch, PartitionQueue]] = deque()
        self.ready_count = 0  # partitions may have ready batches (a hint for the sender)
        self.sender_wake_at = _INF
        self.sender_waiting = False
        self.closed = False  # the producer refuses new messages (set first thing by close())
        # send() takes a message at once while ``queued`` is below this: max_messages while
        # open, -1 once closed (then every send goes through ``admit``, which says why not).
        self.admit_below = max_messages
        self.closing = False  # the sender finishes what is queued, then stops
        self.closing_hard = False  # close() ran out of time: no more retries
        self.flushing = 0
        self.after_batching: Any = None  # hook, called by the sender
        self.reports = DeliveryQueue()  # completed batches with produce() callbacks

    # -- caller side (lock held) -----------------------------------------------------------

    def wait_for_space(self, n: int) -> None:
        """Block per queue_enqueue_timeout_ms until ``n`` more messages fit (lock held).

        Raises:
            QueueFullError: 0 = at once, >0 = after that many ms.
        """
        t = self.enqueue_timeout_ms
        if t == 0:
            raise QueueFullError(
                f"async queue full ({self.queued} of queue_buffering_max_messages={self.max_messages} "
                "messages waiting); queue_enqueue_timeout_ms=0 drops instead of waiting"
            )
        deadline = None if t < 0 else monotonic_ms() + t
        # A send larger than the whole bound is let in once the queue is empty.
        while self.queued and self.queued + n > self.max_messages:
            if self.closing:
                return
            if deadline is None:
                self.space.wait()
            else:
                left = deadline - monotonic_ms()
                if left <= 0:
                    raise QueueFullError(
                        f"async queue still full after queue_enqueue_timeout_ms={t} "
                        f"({self.queued} of {self.max_messages} messages waiting)"
                    )
                self.space.wait(left / 1000.0)

    def close(self) -> None:
        """Refuse new messages from now on (lock not needed: two plain stores)."""
        self.closed = True
        self.admit_below = -1

    def admit(self, n: int) -> None:
        """Room for ``n`` more messages in an open accumulator, or the reason why not (lock
        held; the caller saw ``queued >= admit_below``).

        Raises:
            QueueFullError: see :meth:`wait_for_space`.
            ProducerClosedError: closed before or while waiting.
        """
        if not self.closed and self.queued + n > self.max_messages and self.queued:
            self.wait_for_space(n)
        if self.closed:
            raise ProducerClosedError("producer closed while send() was queueing")

    def open_batch(self, queue: PartitionQueue) -> ProducerBatch:
        """Start the open batch of ``queue`` (lock held)."""
        b = ProducerBatch(queue.topic, queue.partition, wall_ms())
        deadline = monotonic_ms() + self.linger_ms
        b.deadline = deadline
        queue.open = b
        self.lingering.append((deadline, b, queue))
        if deadline < self.sender_wake_at and self.sender_waiting:
            self.work.notify()
        return b

    def close_batch(self, queue: PartitionQueue) -> None:
        """open -> ready (lock held)."""
        b = queue.open
        if b is None:
            return
        queue.open = None
        queue.ready.append(b)
        self.ready_count += 1
        if self.sender_waiting:
            self.work.notify()

    @overload
    def append(
        self, queue: PartitionQueue, values: list[Any], key: bytes | None, nbytes: int, headers: Any = ...,
        timestamp: int | None = ..., on_delivery: Any = ..., handle: Literal[True] = ...,
    ) -> SendFutures: ...

    @overload
    def append(
        self, queue: PartitionQueue, values: list[Any], key: bytes | None, nbytes: int, headers: Any,
        timestamp: int | None, on_delivery: Any, handle: Literal[False],
    ) -> None: ...

    def append(
        self,
        queue: PartitionQueue,
        values: list[Any],
        key: bytes | None,
        nbytes: int,
        headers: Any = None,
        timestamp: int | None = None,
        on_delivery: Any = None,
        handle: bool = True,
    ) -> SendFutures | None:
        """Add checked messages to the open batch of ``queue``: the one way in (lock taken here).

        In order: room in the queue (waiting per queue_enqueue_timeout_ms), a producer not
        closed meanwhile, and the batch: rolled over when the messages do not fit (every batch
        stays under ``batch_max_bytes``), closed once full. ``nbytes`` is the messages'
        estimated size. Returns the messages' futures; nothing with ``handle=False``
        (produce(): no future per message, its report comes through ``on_delivery``).

        ``timestamp`` (ms; None: the batch's creation time): the messages go in a batch of
        their own stamped with it, closed at once (the sender may still merge it with its
        neighbours into one record set, each keeping its timestamp). ``on_delivery``: the
        messages' produce() callback, served by poll() once their batch completes.

        Messages with a key each: :meth:`append_group`.

        Raises:
            QueueFullError, ProducerClosedError: see :meth:`admit`.
        """
        n = len(values)
        # acquire/release, not ``with``: the lock's __exit__ alone measured ~75 ns of a ~1 us send.
        lock = self.lock
        lock.acquire()
        try:
            if self.queued + n > self.admit_below:
                self.admit(n)
            batch = queue.open
            if batch is None or timestamp is not None or (batch.nbytes + nbytes > self.batch_max_bytes and batch.values):
                if batch is not None:
                    self.close_batch(queue)  # keep every batch under the cap
                batch = self.open_batch(queue)
                if timestamp is not None:
                    batch.created_ms = timestamp
            column = batch.values
            start = len(column)
            keys = batch.keys
            if n == 1:
                column.append(values[0])
                if keys is not None:
                    keys.append(key)
                    batch.headers.append(headers)  # type: ignore[union-attr]  # set with keys
                elif key is not None or headers is not None:
                    batch.add_keyed(start, key, 1, headers)
            else:
                column.extend(values)
                if key is not None or headers is not None or keys is not None:
                    batch.add_keyed(start, key, n, headers)
            if on_delivery is not None or batch.cbs is not None:
                batch.add_report(start, n, on_delivery, self.reports)
            nbytes += batch.nbytes
            batch.nbytes = nbytes
            self.queued += n
            if start + n > self.last_index or nbytes >= self.batch_max_bytes or timestamp is not None:
                self.close_batch(queue)
        finally:
            lock.release()
        if not handle:
            return None
        if n == 1:
            # OneSendFuture without __init__: about half the cost of SendFutures(...)
            futures = _new(OneSendFuture)
            futures._batch = batch
            futures._index = start
            return futures
        return SendFutures([(batch, start, n)], n)

    def append_group(
        self, queue: PartitionQueue, values: list[Any], keys: list[Any], sizes: list[int], on_delivery: Any
    ) -> list[tuple[ProducerBatch, int, int]]:
        """(B1) :meth:`append` for messages with a key each (Producer.produce_batch); lock
        taken here.

        ``keys`` is each message's own key, aligned with ``values``, and ``sizes`` each
        message's estimated size; no headers, no timestamp. The group is admitted whole (one
        lock, one ``admit``), then filled batch after batch with the same per-message rule as
        one message at a time: a message that does not fit a non-empty batch rolls it over; a
        batch closes once it holds ``batch_num_messages`` or reaches ``batch_max_bytes``.

        Returns:
            ``(batch, i, j)`` per batch the group entered, in order: ``values[i:j]`` went to
            ``batch`` (one tuple per batch, nothing per message).

        Raises:
            QueueFullError, ProducerClosedError: see :meth:`admit`.
        """
        n = len(values)
        entered: list[tuple[ProducerBatch, int, int]] = []
        cap = self.batch_max_bytes
        per_batch = self.last_index + 1
        lock = self.lock
        lock.acquire()
        try:
            if self.queued + n > self.admit_below:
                self.admit(n)
            batch = queue.open
            i = 0
            while i < n:
                if batch is None:
                    batch = self.open_batch(queue)
                column = batch.values
                start = len(column)
                nb = batch.nbytes
                limit = min(n, i + per_batch - start)
                j = i
                while j < limit:
                    s = sizes[j]
                    if nb + s > cap and (j > i or start):
                        break  # does not fit a non-empty batch: roll over
                    nb += s
                    j += 1
                    if nb >= cap:
                        break
                m = j - i
                if m:
                    column.extend(values[i:j])
                    bkeys = batch.keys
                    if bkeys is None:
                        batch.add_keyed(start, None, 0, None)
                        bkeys = batch.keys
                        assert bkeys is not None
                    bkeys.extend(keys[i:j])
                    batch.headers.extend([None] * m)  # type: ignore[union-attr]  # set with keys
                    if on_delivery is not None or batch.cbs is not None:
                        batch.add_report(start, m, on_delivery, self.reports)
                    batch.nbytes = nb
                    self.queued += m
                    entered.append((batch, i, j))
                if j < n or start + m > self.last_index or nb >= cap:
                    self.close_batch(queue)
                    batch = None
                i = j
        finally:
            lock.release()
        return entered

    def add_topic(self, name: str, num_partitions: int) -> TopicState:
        """The queues of topic ``name`` (made with ``num_partitions`` partitions if new)."""
        with self.lock:
            ts = self.topics.get(name)
            if ts is None:
                ts = self.topics[name] = TopicState(name, max(1, num_partitions))
            return ts

    def grow_topics(self, partitions: dict[str, int]) -> None:
        """Topics that gained partitions (``{name: partition count}``) get their new queues."""
        with self.lock:
            for name, n in partitions.items():
                ts = self.topics.get(name)
                if ts is not None and n > len(ts.parts):
                    ts.grow(n)

    def wait_until_empty(self, deadline_ms: float | None, sender_alive: Any) -> bool:
        """Close lingering batches now and wait until nothing is queued (flush). False when
        ``deadline_ms`` (monotonic) passed first; returns early once ``sender_alive()`` is false."""
        with self.lock:
            self.flushing += 1
            try:
                self.work.notify()
                while self.queued:
                    if not sender_alive():
                        break
                    if deadline_ms is None:
                        self.space.wait(1.0)
                    else:
                        left = deadline_ms - monotonic_ms()
                        if left <= 0:
                            return False
                        self.space.wait(min(left / 1000.0, 1.0))
            finally:
                self.flushing -= 1
        return True

    def stop(self) -> None:
        """Tell the sender to finish what is queued and stop (``closing``; ``closing_hard``
        too if anything is still queued: no more retries)."""
        with self.lock:
            self.closing = True
            if self.queued:
                self.closing_hard = True
            self.work.notify_all()
            self.space.notify_all()

    def fail_all(self, err: BaseException) -> None:
        """Fail every batch still queued (ready or open) with ``err`` (the sender is gone)."""
        with self.lock:
            for topic in self.topics.values():
                for queue in topic.parts:
                    batches = list(queue.ready)
                    if queue.open is not None:
                        batches.append(queue.open)
                    queue.ready.clear()
                    queue.open = None
                    for b in batches:
                        b.fail(err)
                        self.queued -= len(b.values)
            self.space.notify_all()

    # -- sender side -----------------------------------------------------------------------

    def close_expired(self, now_ms: float) -> list[ProducerBatch]:
        """Close open batches whose linger deadline passed; returns them (lock held)."""
        closed: list[ProducerBatch] = []
        lingering = self.lingering
        force = self.flushing > 0 or self.closing
        while lingering:
            deadline, b, queue = lingering[0]
            if deadline > now_ms and not force:
                break
            lingering.popleft()
            if queue.open is b:
                queue.open = None
                queue.ready.append(b)
                self.ready_count += 1
                closed.append(b)
        return closed

    def drain(self, now_ms: float) -> tuple[list[Unit], float]:
        """Take the sendable batches (lock held): for each unmuted partition out of backoff,
        all its ready batches up to max_request_bytes. Returns (units, next wake-up ms)."""
        units: list[Unit] = []
        wake = self.lingering[0][0] if self.lingering else _INF
        if not self.ready_count:
            return units, wake
        cap = self.max_request_bytes
        remaining = 0
        for topic in self.topics.values():
            for queue in topic.parts:
                ready = queue.ready
                if not ready:
                    continue
                if queue.muted:
                    remaining += 1
                    continue
                if queue.retry_at > now_ms:
                    remaining += 1
                    if queue.retry_at < wake:
                        wake = queue.retry_at
                    continue
                head = ready.popleft()
                wire = head.wire
                if wire is not None:
                    # Sent before with a sequence: exactly the same batches go again (the
                    # broker recognises a retry by its producer id, epoch and sequences).
                    taken = [head]
                    for _ in range(len(wire) - 1):
                        taken.append(ready.popleft())
                else:
                    taken = [head]
                    size = head.nbytes
                    # A batch split off after MESSAGE_TOO_LARGE travels alone.
                    while ready and not head.solo and not ready[0].solo and size + ready[0].nbytes <= cap:
                        b = ready.popleft()
                        size += b.nbytes
                        taken.append(b)
                if ready:
                    remaining += 1
                queue.muted = True
                units.append(Unit(queue.topic, queue.partition, taken, queue))
        self.ready_count = remaining
        return units, wake

    def linger_wake(self) -> float:
        """When the first lingering batch must close (monotonic ms; inf: none) (lock held)."""
        return self.lingering[0][0] if self.lingering else _INF

    def remove_ready(self, pred: Any) -> list[ProducerBatch]:
        """Take out of the queues every ready batch for which ``pred(batch)`` is true (lock
        held; nothing may be in flight). They no longer count as queued."""
        removed: list[ProducerBatch] = []
        for topic in self.topics.values():
            for queue in topic.parts:
                if not queue.ready:
                    continue
                keep: deque[ProducerBatch] = deque()
                for b in queue.ready:
                    (removed if pred(b) else keep).append(b)
                queue.ready = keep
        if removed:
            self.queued -= sum(len(b.values) for b in removed)
            self.space.notify_all()
        return removed

    def ready_batches(self) -> list[ProducerBatch]:
        """Every ready batch, partition by partition in queue order (lock held)."""
        return [b for topic in self.topics.values() for queue in topic.parts for b in queue.ready]

    def requeue_front(self, unit: Unit, retry_at: float) -> None:
        """Put a unit's batches back at the head of its partition queue (lock held)."""
        queue = unit.queue
        assert queue is not None
        queue.ready.extendleft(reversed(unit.batches))
        queue.muted = False
        queue.retry_at = retry_at
        self.ready_count += 1

    def release(self, unit: Unit) -> None:
        """A unit is finished (acknowledged or failed for good) (lock held)."""
        queue = unit.queue
        if queue is not None:
            queue.muted = False
            if queue.ready:
                self.ready_count += 1
        self.queued -= unit.count
        self.space.notify_all()

    def has_work(self) -> bool:
        return bool(self.queued)
