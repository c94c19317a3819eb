"""``hmbclient.aio`` against the embedded broker, each test an ``asyncio.run`` (pytest-asyncio
is not a dependency): AIOProducer's awaited sends acknowledged at dense offsets (many in flight
at once, and through a full queue), AIOConsumer reading them back with ``async for``, commits
awaited and read back; and the event loop stays responsive: a ticker task keeps ticking while
``poll`` waits on an empty topic, while ``send`` waits for room in a full queue, and while a
group is joined.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.aio import AIOConsumer, AIOProducer
from hmbclient.broker import BrokerProcess, EmbeddedBroker
from hmbclient.errors import ConsumerClosedError, QueueFullError

from .conftest import create_topic, unique

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("aio")), group_initial_rebalance_delay_ms=0) as b:
        yield b.bootstrap


class Ticker:
    """A task counting 10 ms ticks: if anything blocks the loop, the count falls behind.

    The objects alive when it starts are frozen (``gc.freeze``) until it stops, so a full
    collection in the window scans what the code under test made since, not the whole test
    process's heap: in ``make test`` that heap holds over 250,000 objects once the suite is
    merely collected (a full collection of it took 0.16 s of CPU), and any allocation on the
    loop thread may trigger one. With a heap of that size a bench of the full-queue case at load
    13-20 saw a 0.80 s generation-2 collection on the loop thread make a 0.83 s gap. The
    loop's own work and its own garbage still count."""

    def __init__(self) -> None:
        self.ticks = 0
        self.worst_gap = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.worst_gap = max(self.worst_gap, now - last)
            last = now
            self.ticks += 1

    def __enter__(self) -> Ticker:
        gc.freeze()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        gc.unfreeze()


def test_aio_producer_sends_and_aio_consumer_reads_them_back(bootstrap: str) -> None:
    topic, group = unique("aio"), unique("aio-g")
    create_topic(bootstrap, topic, 3)

    async def main() -> None:
        async with AIOProducer(metadata_broker_list=bootstrap, queue_buffering_max_ms=2) as producer:
            metas = await asyncio.gather(*(producer.send(topic, b"v%03d" % i, key=b"k%d" % i, partition=i % 3) for i in range(300)))
            assert await producer.flush(10) == 0
        by_partition: dict[int, list[int]] = {}
        for m in metas:
            by_partition.setdefault(m.partition, []).append(m.offset)
        assert {p: sorted(o) for p, o in by_partition.items()} == {p: list(range(100)) for p in range(3)}

        consumer = AIOConsumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        async with consumer:
            with Ticker() as ticker:
                await consumer.subscribe([topic])
            assert ticker.worst_gap < 0.5, f"the loop stalled {ticker.worst_gap:.3f}s while joining"
            got = []
            async for record in consumer:
                got.append(record)
                if len(got) == 300:
                    break
            assert sorted(r.value for r in got) == sorted(b"v%03d" % i for i in range(300))
            assert all(r.key == b"k%d" % int(r.value[1:]) for r in got)
            committed = await consumer.commit()
            assert committed == {(topic, p): 100 for p in range(3)}
            assert await consumer.committed([(topic, p) for p in range(3)]) == {(topic, p): 100 for p in range(3)}
        with pytest.raises(ConsumerClosedError):
            await consumer.poll(0)

    asyncio.run(main())


def test_the_loop_keeps_ticking_while_poll_waits_and_send_waits_for_room(bootstrap: str) -> None:
    topic = unique("aio-idle")
    create_topic(bootstrap, topic, 1)

    async def main() -> None:
        consumer = AIOConsumer({"bootstrap.servers": bootstrap, "fetch.max.wait.ms": 500})
        async with consumer:
            await consumer.assign([(topic, 0)])
            with Ticker() as ticker:
                started = time.monotonic()
                assert await consumer.poll(1.5) == []  # nothing there: poll waits its whole timeout
                waited = time.monotonic() - started
            assert waited >= 1.4, waited
            # ~150 ticks of 10 ms fit in 1.5 s; a blocked loop would manage ~1.
            assert ticker.ticks >= 60 and ticker.worst_gap < 0.3, (ticker.ticks, ticker.worst_gap)

            # A queue of 20 messages and 400 sends: send waits (awaiting acks) for room.
            async with AIOProducer(metadata_broker_list=bootstrap, queue_buffering_max_messages=20, batch_num_messages=10,
                                   queue_buffering_max_ms=5) as producer:
                with Ticker() as ticker:
                    metas = await asyncio.gather(*(producer.send(topic, b"m%d" % i) for i in range(400)))
                assert sorted(m.offset for m in metas) == list(range(400))
                assert producer.waits_for_room > 0, "the queue never filled: the case is not exercised"
                # Each settled batch wakes as many waiting sends as it made room for: 380 sends find
                # the queue full on arrival, and each of the 40 batches' 10 wake-ups fails at most
                # once (when the batch settled before the sender freed its room): <= 780 tries.
                # Waking every waiting send per batch took ~10 tries per send (2,751-4,540 seen).
                assert producer.waits_for_room <= 2 * 400, producer.waits_for_room
                assert ticker.worst_gap < 0.3, ticker.worst_gap
            # The poll waiting in the worker wakes up for records produced meanwhile.
            records = []
            while len(records) < 400:
                records += await consumer.poll(5)
            assert [r.offset for r in records] == list(range(400))

    asyncio.run(main())


def test_sends_waiting_for_room_time_out_or_are_cancelled_and_the_rest_go_on(tmp_path: Any) -> None:
    # The broker is a process frozen with SIGSTOP while the queue is full, so no batch settles.
    with BrokerProcess(str(tmp_path)) as bp:
        topic = unique("aio-park")
        create_topic(bp.bootstrap, topic, 1)

        async def main() -> None:
            settings = dict(metadata_broker_list=bp.bootstrap, queue_buffering_max_messages=20, batch_num_messages=10,
                            queue_buffering_max_ms=5, request_timeout_ms=60_000)
            async with AIOProducer(**settings, queue_enqueue_timeout_ms=300) as timed, AIOProducer(**settings) as patient:
                await asyncio.gather(timed.send(topic, b"warm"), patient.send(topic, b"warm"))
                # flush: the sender frees a batch's room just after settling it; wait for that too
                assert await timed.flush(10) == 0 and await patient.flush(10) == 0
                bp.pause()
                assert bp.proc is not None
                wait_until(lambda: Path(f"/proc/{bp.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
                           5, "the broker process stopped")
                try:
                    loop = asyncio.get_running_loop()
                    full = [loop.create_task(p.send(topic, b"f%d" % i)) for p in (timed, patient) for i in range(20)]
                    await asyncio.sleep(0.05)  # the 40 are queued (in flight, unanswered): both queues full
                    started = time.monotonic()
                    late = await asyncio.gather(*(timed.send(topic, b"late") for _ in range(5)), return_exceptions=True)
                    assert all(isinstance(e, QueueFullError) for e in late), late
                    assert 0.25 <= time.monotonic() - started < 5
                    # 30 sends wait for room on the patient producer; the 25 oldest are cancelled
                    parked = [loop.create_task(patient.send(topic, b"p%d" % i)) for i in range(30)]
                    await asyncio.sleep(0.05)
                    assert patient.waits_for_room == 30
                    for t in parked[:25]:
                        t.cancel()
                finally:
                    bp.resume()
                metas = await asyncio.wait_for(asyncio.gather(*full, *parked[25:]), 30)
                # the 40 that filled the queues and the 5 not cancelled, after the two "warm" ones
                assert sorted(m.offset for m in metas) == list(range(2, 47))
                assert all(t.cancelled() for t in parked[:25])
                assert (await timed.send(topic, b"after")).offset == 47

        asyncio.run(main())


def test_close_ends_a_waiting_aio_poll(bootstrap: str) -> None:
    topic = unique("aio-close")
    create_topic(bootstrap, topic, 1)

    async def main() -> None:
        consumer = AIOConsumer({"bootstrap.servers": bootstrap})
        await consumer.assign([(topic, 0)])
        waiting = asyncio.ensure_future(consumer.poll(30))
        await asyncio.sleep(0.2)  # let the poll start waiting (its result is checked below)
        started = time.monotonic()
        await consumer.close()
        assert await asyncio.wait_for(waiting, 5) == []
        assert time.monotonic() - started < 5

    asyncio.run(main())


def test_aio_producer_refuses_unknown_settings_and_reports_the_brokers_refusal(tmp_path: Any) -> None:
    from hmbclient.errors import ConfigError, MessageSizeTooLargeError

    with pytest.raises(ConfigError):
        AIOProducer(metadata_broker_list="127.0.0.1:1", linger_msx=5)
    with pytest.raises(ConfigError):
        AIOConsumer({"bootstrap.servers": "127.0.0.1:1", "max.poll.recordz": 5})

    async def main(bootstrap: str, topic: str) -> Any:
        # The broker refuses the 5000-byte batch (message.max.bytes=1000): the error reaches the
        # awaited send through the batch future; a small message afterwards goes through.
        async with AIOProducer(metadata_broker_list=bootstrap, message_max_bytes=100_000, batch_num_messages=1) as producer:
            with pytest.raises(MessageSizeTooLargeError):
                await producer.send(topic, b"x" * 5000)
            return await producer.send(topic, b"small")

    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "log"), message_max_bytes=1000) as b:
        topic = unique("aio-big")
        create_topic(b.bootstrap, topic, 1)
        assert asyncio.run(main(b.bootstrap, topic)).offset is not None
