"""Classic and consumer-protocol members in one group (KIP-848's online migration, issue #24).

The pure cases first (K1-K5, U, D of :mod:`hmbclient.broker.coordinator.consumer_group`), then
one group on the embedded broker mixing hmbclient's ``Consumer`` (``group.protocol=consumer``),
confluent-kafka with ``group.protocol=consumer``, confluent-kafka classic cooperative-sticky,
kafka-python and aiokafka (classic, eager). The group starts classic (kafka-python alone), is
upgraded when hmbclient's consumer-protocol member joins, the others join, one leaves, and it
is downgraded to classic when the consumer-protocol members have left.

Every member runs its own poll loop on its own thread and commits synchronously after each
batch; the ledger records, from the members' assign / revoke callbacks, who owns what (an
assignment to one member of a partition another still holds is an overlap) and, per partition,
the highest committed position when each member was given it. Checked: every message
delivered; no overlap; every delivery at or above the committed position its member started
from (so a message delivered twice was never committed: duplicates only inside uncommitted
windows).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer
from confluent_kafka import TopicPartition as RdTopicPartition

from hmbclient import Consumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.coordinator import consumer_group as cg
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api.consumer_protocol import (
    ConsumerProtocolMemberMetadata,
    decode_member_assignment,
)
from tests.waiting import wait_until

TOPIC = "mig"
PARTS = 10
TOPICS = {TOPIC: (uuid.uuid4(), 4)}


def _meta(owned: list[int] | None = None) -> tuple[tuple[str, bytes], ...]:
    if owned is None:
        return (("range", ConsumerProtocolMemberMetadata[0](topics=[TOPIC], user_data=None).encode()),)
    return (("cooperative-sticky", ConsumerProtocolMemberMetadata[1](topics=[TOPIC], user_data=None, owned_partitions=[(TOPIC, owned)]).encode()),)


def _assigned(raw: bytes) -> set[int]:
    return {int(p) for e in decode_member_assignment(raw).assigned_partitions for p in e.partitions}


class _Req:
    """A ConsumerGroupHeartbeat as consumer_group.heartbeat reads it."""

    def __init__(self, member_id: str, epoch: int, owned: list[int] | None = None) -> None:
        self.member_id, self.member_epoch, self.instance_id = member_id, epoch, None
        self.subscribed_topic_names = [TOPIC] if epoch == 0 else None
        self.server_assignor, self.rebalance_timeout_ms, self.subscribed_topic_regex = None, -1, None
        tid = TOPICS[TOPIC][0]
        self.topic_partitions = None if owned is None else [type("TP", (), {"topic_id": tid, "partitions": owned})()]


def test_classic_members_in_a_consumer_group_decisions() -> None:
    g = cg.ConsumerGroup("g")
    # K1 v4+ without a member id: MEMBER_ID_REQUIRED, nobody added
    a = cg.classic_join(g, "", None, _meta(), 10_000, 20_000, True, TOPICS, 0, new_member_id="A")
    assert (a.error_code, a.member_id, g.members) == (ErrorCode.MEMBER_ID_REQUIRED, "A", {})
    a = cg.classic_join(g, "A", None, _meta(), 10_000, 20_000, True, TOPICS, 0)
    assert (a.error_code, a.generation_id, a.protocol_name) == (0, g.assignment_epoch, "range")
    err, raw = cg.classic_sync(g, "A", a.generation_id, 0)  # K2
    assert (err, _assigned(raw)) == (0, {0, 1, 2, 3})
    assert cg.classic_sync(g, "A", a.generation_id + 1, 0)[0] == ErrorCode.ILLEGAL_GENERATION
    assert cg.classic_heartbeat(g, "nobody", 1, 0) == ErrorCode.UNKNOWN_MEMBER_ID
    assert cg.classic_heartbeat(g, "A", a.generation_id, 10) == ErrorCode.NONE  # K3
    # a consumer-protocol member joins: A is asked to rejoin, B gets nothing A still holds
    b = cg.heartbeat(g, _Req("", 0), TOPICS, 20, 45_000, new_member_id="B")
    assert b.assignment == {}
    assert cg.classic_heartbeat(g, "A", a.generation_id, 30) == ErrorCode.REBALANCE_IN_PROGRESS
    # K5 A commits with its generation until it rejoins; anything else is ILLEGAL_GENERATION
    assert cg.validate_commit(g, "A", a.generation_id, api_version=2) == ErrorCode.NONE
    assert cg.validate_commit(g, "A", a.generation_id + 5, api_version=2) == ErrorCode.ILLEGAL_GENERATION
    # an eager member rejoins owning nothing: it gets its half at the new epoch
    a2 = cg.classic_join(g, "A", None, _meta(), 10_000, 20_000, True, TOPICS, 40)
    assert a2.generation_id == g.assignment_epoch > a.generation_id
    mine = _assigned(cg.classic_sync(g, "A", a2.generation_id, 40)[1])
    assert len(mine) == 2
    b = cg.heartbeat(g, _Req("B", b.member_epoch, []), TOPICS, 50, 45_000)
    assert set(b.assignment[TOPIC]) == {0, 1, 2, 3} - mine
    assert cg.classic_heartbeat(g, "A", a2.generation_id, 60) == ErrorCode.NONE
    # a cooperative member reports what it owns: it keeps current & target and revokes the rest
    c = cg.classic_join(g, "", None, _meta([]), 10_000, 20_000, False, TOPICS, 70, new_member_id="C")
    assert c.member_id == "C"
    assert cg.classic_join(g, "D", None, _meta([]), 10_000, 20_000, False, TOPICS, 75).error_code == 0  # four members: one partition each
    a3 = cg.classic_join(g, "A", None, _meta(sorted(mine)), 10_000, 20_000, True, TOPICS, 80)
    kept = _assigned(cg.classic_sync(g, "A", a3.generation_id, 80)[1])
    assert kept < mine and len(kept) == 1 and a3.generation_id == a2.generation_id  # epoch unchanged until revoked
    assert cg.classic_heartbeat(g, "A", a3.generation_id, 90) == ErrorCode.REBALANCE_IN_PROGRESS
    # D: B (the consumer-protocol member) leaves: classic members only, the group downgrades
    assert not cg.should_downgrade(g, "bidirectional")
    cg.heartbeat(g, _Req("B", -1), TOPICS, 100, 45_000)
    assert cg.should_downgrade(g, "bidirectional") and not cg.should_downgrade(g, "upgrade")
    generation, protocol, members = cg.downgrade_record(g)
    assert generation == g.group_epoch and [m.member_id for m, _, _ in members] == ["A", "C", "D"]
    assert protocol in ("range", "cooperative-sticky")
    assert cg.classic_leave(g, "A", TOPICS, 110) == ErrorCode.NONE and cg.classic_leave(g, "A", TOPICS, 110) == ErrorCode.UNKNOWN_MEMBER_ID


def test_upgrade_keeps_the_classic_members_and_their_assignment() -> None:
    from hmbclient.broker.coordinator.state import Member
    from hmbclient.protocol.api.consumer_protocol import ConsumerProtocolMemberAssignment

    raw = ConsumerProtocolMemberAssignment[0](assigned_partitions=[(TOPIC, [0, 1])], user_data=None).encode()
    m = Member("A", "cid", "/h", 10_000, 20_000, "consumer", _meta(), assignment=raw)
    g = cg.upgrade("g", 7, [(m, _meta()[0][1])], TOPICS, 0)
    assert g is not None and g.group_epoch == g.assignment_epoch == 7
    assert g.members["A"].member_epoch == 7 and g.members["A"].current == {TOPIC: frozenset({0, 1})}
    assert cg.upgrade("g", 7, [(Member("X", "c", "/h", 1, 1, "connect", ()), b"")], TOPICS, 0) is None
    assert cg.upgrade("g", 7, [(m, b"\x00")], TOPICS, 0) is None  # not the consumer protocol: refused


# -- the mixed group on the embedded broker --------------------------------------------------------


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


def _hmb_member(bootstrap: str, group: str) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        led = r.ledger
        c.subscribe([TOPIC], on_assign=lambda _c, ps: led.assign(r.name, [p.partition for p in ps]),
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
            c.close()

    return body


def _rd_member(bootstrap: str, group: str, classic: bool) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if classic:
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 300, "session.timeout.ms": 10_000})
        else:
            conf["group.protocol"] = "consumer"
        c = RdConsumer(conf)
        led = r.ledger
        c.subscribe([TOPIC], on_assign=lambda _c, ps: led.assign(r.name, [p.partition for p in ps]),
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
                        c.commit(offsets=[RdTopicPartition(TOPIC, p, o) for p, o in last.items()], asynchronous=False)
                        led.commit(last)
                    except Exception:  # noqa: BLE001 - an uncommitted window
                        pass
        finally:
            c.close()

    return body


def _kafka_python_member(bootstrap: str, group: str) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        led = r.ledger

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                led.revoke(r.name, [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                led.assign(r.name, [tp.partition for tp in assigned])

        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=r.name, enable_auto_commit=False,
                          auto_offset_reset="earliest", session_timeout_ms=10_000, heartbeat_interval_ms=300)
        c.subscribe([TOPIC], listener=Listener())
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
            c.close()

    return body


def _aiokafka_member(bootstrap: str, group: str) -> Callable[[Runner], None]:
    def body(r: Runner) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        led = r.ledger

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                led.revoke(r.name, [tp.partition for tp in revoked])

            def on_partitions_assigned(self, assigned: Any) -> None:
                led.assign(r.name, [tp.partition for tp in assigned])

        async def main() -> None:
            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=r.name, enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=10_000, heartbeat_interval_ms=300)
            await c.start()
            c.subscribe([TOPIC], listener=Listener())
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
                await c.stop()

        asyncio.run(main())

    return body


def _produce(bootstrap: str, start: int, n: int) -> None:
    p = RdProducer({"bootstrap.servers": bootstrap})
    for i in range(start, start + n):
        p.produce(TOPIC, str(i).encode(), partition=i % PARTS)
    assert p.flush(15) == 0


@pytest.fixture
def broker(tmp_path: Any) -> Any:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "b"), num_partitions=PARTS, group_consumer_heartbeat_interval_ms=200,
                        group_initial_rebalance_delay_ms=0) as b:
        yield b


def mixed_group(bootstrap: str, group: str, kinds: dict[str, Callable[[str, str], Callable[[Runner], None]]], *, mixed_check: Callable[[], bool] | None = None,
                downgrade_check: Callable[[], bool] | None = None) -> Ledger:
    """Run the scenario of the module docstring with ``kinds`` (name -> member factory; the
    first is classic and starts alone, "hmb" is the consumer-protocol member that upgrades the
    group); the ledger at the end."""
    ledger = Ledger()
    runners: dict[str, Runner] = {}
    names = list(kinds)
    total = [0]

    def start(name: str) -> None:
        runners[name] = Runner(name, ledger, kinds[name](bootstrap, group))
        runners[name].start()

    def produce(n: int) -> None:
        _produce(bootstrap, total[0], n)
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
                return len(ledger.owner) == PARTS and owners <= set(members)

        return ok

    try:
        start(names[0])
        produce(200)
        wait_until(all_delivered, timeout_s=20, what=f"{names[0]} alone consumed the first messages", diag=diag)
        for name in names[1:]:
            start(name)
        wait_until(lambda: all(ledger.owned_by(n) for n in names), timeout_s=30, what="every member owns partitions", diag=diag)
        if mixed_check is not None:
            assert mixed_check(), "the group is not one mixed group"
        produce(300)
        wait_until(all_delivered, timeout_s=20, what="every message delivered to the mixed group", diag=diag)
        leaving = names[-1]
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


def test_one_group_mixing_every_client_and_both_protocols(broker: Any) -> None:
    coordinator = broker.broker.group_coordinator
    kinds = {
        "kafka-python": _kafka_python_member,
        "hmb": _hmb_member,
        "rd-consumer": lambda b, g: _rd_member(b, g, classic=False),
        "aiokafka": _aiokafka_member,
        "rd-coop": lambda b, g: _rd_member(b, g, classic=True),
    }

    def mixed() -> bool:
        group = coordinator.consumer_group("gmig")
        return group is not None and sum(m.classic is not None for m in group.members.values()) == 3 and len(group.members) == 5

    def classic_again() -> bool:
        return coordinator.consumer_group("gmig") is None and coordinator.group("gmig") is not None

    started = time.monotonic()
    ledger = mixed_group(broker.bootstrap, "gmig", kinds, mixed_check=mixed, downgrade_check=classic_again)
    assert ledger.errors == []
    assert ledger.overlaps == [], ledger.overlaps
    assert ledger.below_committed == [], ledger.below_committed[:10]
    assert time.monotonic() - started < 60
