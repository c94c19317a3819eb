"""hmbclient's own consumer-protocol members (``group.protocol=consumer``, KIP-848) on the
embedded broker, in one group with librdkafka's (confluent-kafka ``group.protocol=consumer``).

Every member is polled from this thread; ownership is tracked from the members' assign /
revoke / lost callbacks (hmbclient's run on its member thread: under a lock). Checked: every
message is delivered to some member; at no moment is a partition owned by two members; a
member whose partitions stay put is not revoked through another's join (it keeps consuming);
a member whose epoch went stale is told FENCED_MEMBER_EPOCH, gets ``on_lost`` and rejoins.
The member's pure decisions (:func:`hmbclient.consumer.group_consumer.decide`) are checked
case by case first.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from typing import Any

import pytest
from confluent_kafka import Consumer as RdConsumer
from confluent_kafka import Producer as RdProducer

from hmbclient import Consumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.consumer.config import PollConsumerConfig
from hmbclient.consumer.group_consumer import Answer, MemberState, decide
from hmbclient.errors import ConfigError, ErrorCode
from tests.waiting import wait_until

S = MemberState
OWN = frozenset({("t", 0), ("t", 1)})


def test_decisions() -> None:
    # D5: revoke what left the target (commit first), assign what is new, acknowledge at once
    d = decide(S.STABLE, "m", 3, OWN, Answer(0, "m", 4, 500, frozenset({("t", 1), ("t", 2)})))
    assert (d.state, d.member_epoch, d.revoke, d.assign, d.ack, d.interval_ms) == (S.RECONCILING, 4, {("t", 0)}, {("t", 2)}, True, 500)
    d = decide(S.STABLE, "m", 3, OWN, Answer(0, "m", 3, 500, None))  # null assignment: unchanged
    assert (d.state, d.revoke, d.assign, d.ack) == (S.STABLE, frozenset(), frozenset(), False)
    # D2: fenced -> lost without a commit, epoch 0; D1, D3, D4
    for code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
        d = decide(S.STABLE, "m", 3, OWN, Answer(code))
        assert (d.state, d.member_epoch, d.lost, d.member_id) == (S.FENCED, 0, OWN, "m")
    assert decide(S.STABLE, "m", 3, OWN, Answer(ErrorCode.NOT_COORDINATOR)).rediscover
    d = decide(S.STABLE, "m", 3, OWN, Answer(ErrorCode.UNRELEASED_INSTANCE_ID))
    assert (d.state, d.fatal, d.lost) == (S.CLOSED, ErrorCode.UNRELEASED_INSTANCE_ID, OWN)
    assert decide(S.STABLE, "m", 3, OWN, Answer(ErrorCode.REQUEST_TIMED_OUT)).retry
    assert decide(S.LEAVING, "m", 3, frozenset(), Answer(0, "m", -1)).state is S.CLOSED


def test_config_refuses_classic_settings_with_the_consumer_protocol() -> None:
    base = {"bootstrap.servers": "h:1", "group.id": "g"}
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        Consumer({**base, "group.protocol": "consumer", "partition.assignment.strategy": "range"})
    with pytest.raises(ConfigError, match="group.remote.assignor"):
        Consumer({**base, "group.remote.assignor": "uniform"})
    with pytest.raises(ConfigError):
        Consumer({**base, "group.protocol": "consumer", "group.remote.assignor": "sticky"})


@pytest.mark.parametrize("given", [{"session.timeout.ms": "10000"}, {"heartbeat.interval.ms": "100"},
                                   {"session.timeout.ms": "10000", "heartbeat.interval.ms": "100"}])
def test_session_and_heartbeat_are_the_coordinators_with_the_consumer_protocol(given: dict[str, str]) -> None:
    """Refused as Java's KafkaConsumer refuses them (the same names, in its order), before
    connecting; fine with the classic protocol, whose defaults are Java's."""
    from hmbclient.testing import kafka_java

    base = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
    with pytest.raises(ConfigError, match="cannot be set when group.protocol=consumer") as refused:
        Consumer({**base, "group.protocol": "consumer", **given})
    props = [a for k, v in {"group.protocol": "consumer", **given}.items() for a in ("--consumer-property", f"{k}={v}")]
    java = kafka_java("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", base["bootstrap.servers"],
                      "--topic", "t", "--group", "g", *props, "--timeout-ms", "1000", check=False, timeout_s=60)
    said = re.search(r"ConfigException: (.*) cannot be set when group.protocol=CONSUMER", java.stdout + java.stderr)
    assert java.returncode != 0 and said, java.stderr[-2000:]
    assert str(refused.value).split(": ", 1)[1].startswith(said.group(1) + " cannot be set")
    cfg = PollConsumerConfig.from_properties({**base, "group.protocol": "classic"})
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms) == (45_000, 3_000)
    assert PollConsumerConfig.from_properties({**base, **given, "heartbeat.interval.ms": "100"}).heartbeat_interval_ms == 100


@pytest.fixture
def broker(tmp_path: Any) -> Any:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "b"), num_partitions=6, group_consumer_heartbeat_interval_ms=200,
                        group_initial_rebalance_delay_ms=0) as b:
        yield b


def test_a_connection_without_topic_ids_is_refused_at_subscribe(broker: Any) -> None:
    from hmbclient.errors import UnsupportedByBroker

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "gold", "group.protocol": "consumer", "api.version": "2.1"})
    try:
        with pytest.raises(UnsupportedByBroker, match="group.protocol=classic"):
            c.subscribe(["k848"])
    finally:
        c.close()


class Owners:
    """Who owns what, from every member's callbacks; overlaps and revocations recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: dict[str, set[int]] = {}
        self.overlaps: list[tuple[str, int]] = []
        self.revoked: dict[str, list[int]] = {}
        self.lost: dict[str, list[int]] = {}

    def assign(self, name: str, parts: list[int]) -> None:
        with self.lock:
            for p in parts:
                if any(p in ps for m, ps in self.owned.items() if m != name):
                    self.overlaps.append((name, p))
            self.owned.setdefault(name, set()).update(parts)

    def revoke(self, name: str, parts: list[int], lost: bool = False) -> None:
        with self.lock:
            self.owned.setdefault(name, set()).difference_update(parts)
            (self.lost if lost else self.revoked).setdefault(name, []).extend(parts)

    def sizes(self, names: list[str]) -> list[int]:
        with self.lock:
            return sorted(len(self.owned.get(n, ())) for n in names)


def _ours(broker: Any, owners: Owners, name: str, group: str, **extra: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                  "auto.commit.interval.ms": 100, "group.remote.assignor": "uniform", **extra})
    c.subscribe(["k848"], on_assign=lambda _c, ps: owners.assign(name, [p.partition for p in ps]),
                on_revoke=lambda _c, ps: owners.revoke(name, [p.partition for p in ps]),
                on_lost=lambda _c, ps: owners.revoke(name, [p.partition for p in ps], lost=True))
    return c


def _rd(broker: Any, owners: Owners, name: str, group: str) -> RdConsumer:
    c = RdConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                    "enable.auto.commit": False})
    c.subscribe(["k848"], on_assign=lambda _c, ps: owners.assign(name, [p.partition for p in ps]),
                on_revoke=lambda _c, ps: owners.revoke(name, [p.partition for p in ps]),
                on_lost=lambda _c, ps: owners.revoke(name, [p.partition for p in ps], lost=True))
    return c


def _hmb(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "hmbclient.cli", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _produce(broker: Any, start: int, n: int) -> None:
    p = RdProducer({"bootstrap.servers": broker.bootstrap})
    for i in range(start, start + n):
        p.produce("k848", str(i).encode(), partition=i % 6)
    assert p.flush(15) == 0


def test_mixed_group_of_ours_and_librdkafkas(broker: Any) -> None:
    owners = Owners()
    seen: dict[str, list[int]] = {}
    members: dict[str, Any] = {}

    def poll_all() -> None:
        for name, c in list(members.items()):
            if isinstance(c, RdConsumer):
                m = c.poll(0.02)
                if m is not None and not m.error():
                    seen.setdefault(name, []).append(int(m.value()))
                    c.commit(m, asynchronous=False)
            else:
                seen.setdefault(name, []).extend(int(r.value) for r in c.poll(0.02))

    def balanced() -> bool:
        poll_all()
        sizes = owners.sizes(list(members))
        return sum(sizes) == 6 and sizes[-1] - sizes[0] <= 1 and sizes[0] > 0

    _produce(broker, 0, 300)
    try:
        members["ours-a"] = _ours(broker, owners, "ours-a", "gmix")
        wait_until(balanced, timeout_s=20, what="ours-a alone owns the 6 partitions")
        members["rd-b"] = _rd(broker, owners, "rd-b", "gmix")
        wait_until(balanced, timeout_s=30, what="ours-a and rd-b share 6 partitions")
        # a third member joins: what a and b keep is never revoked (they keep consuming it)
        with owners.lock:
            before = {n: set(owners.owned.get(n, ())) for n in members}
            revoked_before = {n: len(owners.revoked.get(n, [])) for n in members}
        members["ours-c"] = _ours(broker, owners, "ours-c", "gmix")
        wait_until(balanced, timeout_s=30, what="three members share 6 partitions")
        with owners.lock:
            for n, had in before.items():
                kept = had & owners.owned.get(n, set())
                assert kept, f"{n} kept nothing"
                assert kept.isdisjoint(owners.revoked.get(n, [])[revoked_before[n]:]), f"{n} was revoked partitions it kept"
        _produce(broker, 300, 300)
        wait_until(lambda: (poll_all(), {v for vs in seen.values() for v in vs} >= set(range(600)))[1], timeout_s=30,
                   what="every message delivered", diag=lambda: (owners.owned, {n: len(v) for n, v in seen.items()}))
        assert all(seen.get(n) for n in members), {n: len(seen.get(n, [])) for n in members}
        # hmb groups lists the consumer-protocol group and describes it (ConsumerGroupDescribe)
        assert "gmix" in _hmb("groups", "-b", broker.bootstrap).split()
        described = _hmb("groups", "gmix", "-b", broker.bootstrap)
        assert "protocol consumer/uniform" in described and "3 member(s)" in described, described
        assert len([line for line in described.splitlines() if line.startswith("  member ") and " epoch " in line]) == 3, described
        assert all(f"k848   {p} " in described for p in range(6)), described  # every partition with its owner and offsets
        # ours-a leaves; the other two take its partitions
        members.pop("ours-a").close()
        wait_until(balanced, timeout_s=30, what="two members after ours-a left")
    finally:
        for c in members.values():
            c.close()
    assert owners.overlaps == []


def test_stale_member_is_fenced_gets_on_lost_and_rejoins(broker: Any) -> None:
    owners = Owners()
    _produce(broker, 0, 60)
    c = _ours(broker, owners, "a", "gfence")
    try:
        got: list[Any] = []
        wait_until(lambda: (got.extend(c.poll(0.05)), len(got) >= 60)[1], timeout_s=20, what="a consumed everything")
        member = c._member
        assert member is not None and member.member_epoch > 0
        # the coordinator forgets the member's epoch (as after a coordinator move): its next
        # heartbeat is answered FENCED_MEMBER_EPOCH
        coordinator = broker.broker.group_coordinator
        with coordinator._lock:
            coordinator._consumer_groups["gfence"].members[member.member_id].member_epoch += 5
        member.trigger("test")
        wait_until(lambda: (c.poll(0.05), owners.lost.get("a"))[1], timeout_s=20, what="on_lost after fencing")
        assert sorted(owners.lost["a"]) == list(range(6))
        wait_until(lambda: (c.poll(0.05), owners.sizes(["a"]) == [6])[1], timeout_s=20, what="a rejoined and owns all 6 again")
    finally:
        c.close()


def test_static_member_leaves_with_minus_two_and_comes_back_to_its_partitions(broker: Any) -> None:
    """A static member (group.instance.id) leaves with epoch -2: the coordinator keeps its
    partitions for it (no group epoch bump, the other member gets none of them) and the same
    instance, restarted, gets them back; the AIOConsumer speaks the same protocol."""
    import asyncio

    from hmbclient.aio import AIOConsumer

    owners = Owners()
    _produce(broker, 0, 60)
    a = _ours(broker, owners, "a", "gstatic", **{"group.instance.id": "inst-a"})
    b = _ours(broker, owners, "b", "gstatic")
    coordinator = broker.broker.group_coordinator

    def split() -> bool:
        a.poll(0.02)
        b.poll(0.02)
        return owners.sizes(["a", "b"]) == [3, 3]

    try:
        wait_until(split, timeout_s=20, what="a and b own 3 partitions each")
        mine = set(owners.owned["a"])
        epoch = coordinator.consumer_group("gstatic").group_epoch
        a.close()
        group = coordinator.consumer_group("gstatic")
        assert group.group_epoch == epoch and any(m.member_epoch == -2 and m.instance_id == "inst-a" for m in group.members.values())
        for _ in range(5):
            b.poll(0.1)
        assert owners.sizes(["b"]) == [3]  # a's partitions are kept for it

        async def restart() -> set[int]:
            got: set[int] = set()
            async with AIOConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "gstatic", "group.protocol": "consumer",
                                    "group.instance.id": "inst-a", "auto.offset.reset": "earliest"}) as again:
                await again.subscribe(["k848"])
                deadline = asyncio.get_running_loop().time() + 20
                while len(got) < 3 and asyncio.get_running_loop().time() < deadline:
                    b.poll(0.01)
                    got |= {r.partition for r in await again.poll(0.1)}
                    got |= {tp.partition for tp in again.assignment()}
            return got

        assert asyncio.run(restart()) == mine
        assert coordinator.consumer_group("gstatic").group_epoch == epoch  # no rebalance through the restart
    finally:
        b.close()
