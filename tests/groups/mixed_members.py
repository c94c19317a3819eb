"""The members of a mixed group (classic and consumer-protocol, every client): each runs its own
poll loop on its own thread and commits synchronously after each batch, and tells a shared
:class:`Ledger` what it was assigned and revoked (from its callbacks), what it was delivered and
what it committed. :func:`mixed_group` runs the scenario of ``test_kip848_migration.py`` (on our
broker and on Apache Kafka 4, ``tests/reference/test_kip848_migration_kafka4.py``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdTopicPartition

from hmbclient import Consumer
from tests.waiting import wait_until

#: Kafka admits a classic member into a group only if it shares a protocol name with every other
#: classic member (so that the group can go back to classic). librdkafka's cooperative-sticky
#: cannot be listed with an eager assignor, so kafka-python and aiokafka list, last, a round
#: robin assignor (eager) under that name: as classic members of a consumer group they never
#: assign, the coordinator does; the name is what they share.
SHARED_PROTOCOL = "cooperative-sticky"


class Ledger:
    """Who owns which partition (from the callbacks), the committed positions, the deliveries."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, str] = {}
        self.overlaps: list[tuple[str, int, str]] = []
        self.committed: dict[int, int] = {}
        self.start: dict[tuple[str, int], int] = {}
        self.delivered: dict[tuple[int, int], int] = {}
        self.below_committed: list[tuple[str, int, int, int]] = []
        self.errors: list[str] = []

    def assign(self, name: str, parts: list[int]) -> None:
        with self.lock:
            for p in parts:
                held = self.owner.get(p)
                if held is not None and held != name:
                    self.overlaps.append((name, p, held))
                self.owner[p] = name
                self.start[(name, p)] = self.committed.get(p, 0)

    def revoke(self, name: str, parts: list[int]) -> None:
        with self.lock:
            for p in parts:
                if self.owner.get(p) == name:
                    del self.owner[p]

    def deliver(self, name: str, records: list[tuple[int, int]]) -> None:
        with self.lock:
            for p, off in records:
                start = self.start.get((name, p), 0)
                if off < start:
                    self.below_committed.append((name, p, off, start))
                self.delivered[(p, off)] = self.delivered.get((p, off), 0) + 1

    def commit(self, positions: dict[int, int]) -> None:
        with self.lock:
            for p, pos in positions.items():
                self.committed[p] = max(self.committed.get(p, 0), pos)

    def release(self, name: str) -> None:
        with self.lock:
            for p in [p for p, n in self.owner.items() if n == name]:
                del self.owner[p]

    def owned_by(self, name: str) -> set[int]:
        with self.lock:
            return {p for p, n in self.owner.items() if n == name}


class Runner(threading.Thread):
    """One member's poll loop: ``step()`` polls, delivers and commits, until stopped."""

    def __init__(self, name: str, ledger: Ledger, body: Callable[[Runner], None]) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger, self.body, self.stopping, self.closed = ledger, body, threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            self.body(self)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.ledger.errors.append(f"{self.name}: {e!r}")
        finally:
            self.closed.set()

    def stop(self) -> None:
        self.stopping.set()
        assert self.closed.wait(30), f"{self.name} did not close"


def hmb_member(bootstrap: str, group: str, topic: str) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        led = r.ledger
        c.subscribe([topic], on_assign=lambda _c, ps: led.assign(r.name, [p.partition for p in ps]),
                    on_revoke=lambda _c, ps: led.revoke(r.name, [p.partition for p in ps]),
                    on_lost=lambda _c, ps: led.revoke(r.name, [p.partition for p in ps]))
        try:
            while not r.stopping.is_set():
                records = c.poll(0.1)
                if records:
                    led.deliver(r.name, [(x.partition, x.offset) for x in records])
                    try:
                        c.commit()
                        led.commit({x.partition: x.offset + 1 for x in records})
                    except Exception:  # noqa: BLE001 - a commit refused through a rebalance: an uncommitted window
                        pass
        finally:
            led.release(r.name)  # it consumes no more (a closing client may not call its revoke callback)
            c.close()

    return body


def rd_member(bootstrap: str, group: str, topic: str, classic: bool = False) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if classic:
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 300, "session.timeout.ms": 10_000})
        else:
            conf["group.protocol"] = "consumer"
        c = RdConsumer(conf)
        led = r.ledger
        c.subscribe([topic], on_assign=lambda _c, ps: led.assign(r.name, [p.partition for p in ps]),
                    on_revoke=lambda _c, ps: led.revoke(r.name, [p.partition for p in ps]),
                    on_lost=lambda _c, ps: led.revoke(r.name, [p.partition for p in ps]))
        try:
            while not r.stopping.is_set():
                msgs = [m for m in c.consume(100, 0.1) if not m.error()]
                if msgs:
                    led.deliver(r.name, [(m.partition(), m.offset()) for m in msgs])
                    last: dict[int, int] = {}
                    for m in msgs:
                        last[m.partition()] = m.offset() + 1
                    try:
                        c.commit(offsets=[RdTopicPartition(topic, p, o) for p, o in last.items()], asynchronous=False)
                        led.commit(last)
                    except Exception:  # noqa: BLE001 - an uncommitted window
                        pass
        finally:
            led.release(r.name)  # it consumes no more (a closing client may not call its revoke callback)
            c.close()

    return body


def kafka_python_member(bootstrap: str, group: str, topic: str) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        led = r.ledger

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                led.revoke(r.name, [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                led.assign(r.name, [tp.partition for tp in assigned])

        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        class SharedName(RoundRobinPartitionAssignor):  # type: ignore[misc]
            name = SHARED_PROTOCOL

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=r.name, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=10_000, heartbeat_interval_ms=300,
                          partition_assignment_strategy=[RangePartitionAssignor, RoundRobinPartitionAssignor, SharedName])
        c.subscribe([topic], listener=Listener())
        try:
            while not r.stopping.is_set():
                batch = c.poll(timeout_ms=100)
                records = [(x.partition, x.offset) for rs in batch.values() for x in rs]
                if records:
                    led.deliver(r.name, records)
                    try:
                        c.commit()
                        led.commit({p: o + 1 for p, o in records})
                    except Exception:  # noqa: BLE001 - an uncommitted window
                        pass
        finally:
            led.release(r.name)  # it consumes no more (a closing client may not call its revoke callback)
            c.close()

    return body


def aiokafka_member(bootstrap: str, group: str, topic: str) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        class SharedName(RoundRobinPartitionAssignor):  # type: ignore[misc]
            name = SHARED_PROTOCOL

        led = r.ledger

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                led.revoke(r.name, [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                led.assign(r.name, [tp.partition for tp in assigned])

        async def main() -> None:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=r.name, enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=10_000, heartbeat_interval_ms=300,
                                 partition_assignment_strategy=(RoundRobinPartitionAssignor, SharedName))
            await c.start()
            c.subscribe([topic], listener=Listener())
            try:
                while not r.stopping.is_set():
                    batch = await c.getmany(timeout_ms=100)
                    records = [(x.partition, x.offset) for rs in batch.values() for x in rs]
                    if records:
                        led.deliver(r.name, records)
                        try:
                            await c.commit()
                            led.commit({p: o + 1 for p, o in records})
                        except Exception:  # noqa: BLE001 - an uncommitted window
                            pass
            finally:
                led.release(r.name)
                await c.stop()

        asyncio.run(main())

    return body


def produce_numbers(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = RdProducer({"bootstrap.servers": bootstrap})
    for i in range(start, start + n):
        p.produce(topic, str(i).encode(), key=str(i).encode())
    assert p.flush(15) == 0


def mixed_group(bootstrap: str, group: str, topic: str, kinds: dict[str, Callable[[str, str, str], Callable[[Runner], None]]], *, mixed_check: Callable[[], bool] | None = None,
                downgrade_check: Callable[[], bool] | None = None, partitions: int = 10) -> Ledger:
    """The scenario: ``kinds`` (name -> member factory) in order; the first is classic and
    starts the group alone, the second (hmbclient's consumer-protocol member) upgrades it, the
    others join; every member owns partitions (then ``mixed_check``); the first leaves; with
    ``downgrade_check``, the consumer-protocol members ("hmb*", "rd-consumer*") leave and the
    classic members left consume as a classic group. Messages are produced before and between
    the steps and each batch must be delivered. Returns the ledger."""
    ledger = Ledger()
    runners: dict[str, Runner] = {}
    names = list(kinds)
    total = [0]

    def start(name: str) -> None:
        runners[name] = Runner(name, ledger, kinds[name](bootstrap, group, topic))
        runners[name].start()

    def produce(n: int) -> None:
        produce_numbers(bootstrap, topic, total[0], n)
        total[0] += n

    def all_delivered() -> bool:
        with ledger.lock:
            return len({po for po in ledger.delivered if po[1] >= 0}) >= total[0]

    def diag() -> Any:
        with ledger.lock:
            return {"owner": dict(ledger.owner), "delivered": len(ledger.delivered), "errors": ledger.errors}

    def settled(members: list[str]) -> Callable[[], bool]:
        def ok() -> bool:
            with ledger.lock:
                owners = set(ledger.owner.values())
                return len(ledger.owner) == partitions and owners <= set(members)

        return ok

    try:
        produce(200)  # the topic exists before anyone subscribes
        start(names[0])
        wait_until(all_delivered, timeout_s=20, what=f"{names[0]} alone consumed the first messages", diag=diag)
        for name in names[1:]:
            start(name)
        wait_until(lambda: all(ledger.owned_by(n) for n in names), timeout_s=30, what="every member owns partitions", diag=diag)
        if mixed_check is not None:
            assert mixed_check(), "the group is not one mixed group"
        produce(300)
        wait_until(all_delivered, timeout_s=20, what="every message delivered to the mixed group", diag=diag)
        leaving = names[0]
        runners.pop(leaving).stop()
        produce(200)
        wait_until(all_delivered, timeout_s=20, what=f"every message delivered after {leaving} left", diag=diag)
        if downgrade_check is not None:
            for name in [n for n in names if n.startswith(("hmb", "rd-consumer"))]:
                if name in runners:
                    runners.pop(name).stop()
            wait_until(downgrade_check, timeout_s=20, what="the group is classic again", diag=diag)
            wait_until(settled(list(runners)), timeout_s=30, what="the classic members own every partition", diag=diag)
            produce(200)
            wait_until(all_delivered, timeout_s=20, what="every message delivered after the downgrade", diag=diag)
    finally:
        for r in runners.values():
            r.stopping.set()
        for r in runners.values():
            r.closed.wait(30)
    return ledger
