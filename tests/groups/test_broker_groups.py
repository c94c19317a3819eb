"""Groups balanced by the brokers' group coordinator (``group.protocol=broker``), over Tansu: no
ZooKeeper anywhere in this module.

Tansu has a classic group coordinator (JoinGroup v0-9, MEMBER_ID_REQUIRED, a short delay
before a join completes) and keeps committed offsets; the tests check what a user of the
connector relies on: every message exactly once across 1, 2 and 3 members; joins and leaves
mid-stream without a duplicate (commit before revoke); a member killed with SIGKILL loses its
partitions after the session timeout, and the only duplicates are what it handed out after its
last commit; a group shared with kafka-python members, either of them leading. The pure parts
(assignors, the member state table, spreading a share over streams) are checked without a
server, against kafka-python's own assignors where they should agree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.consumer.assignors import (
    MemberSubscription,
    range_assign,
    roundrobin_assign,
    streams_for,
)
from hmbclient.consumer.connector import Consumer, ConsumerConnector, ConsumerEvent, Whitelist
from hmbclient.consumer.group import (
    _TRANSITIONS,
    Event,
    IllegalTransition,
    MemberState,
    next_state,
)
from hmbclient.errors import ConfigError, CoordinationError
from hmbclient.net import NetClient
from hmbclient.protocol.api.base import ApiKey

from .conftest import Collector, Producer, drain, unique

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 12

#: Settings that keep the module fast: short sessions and heartbeats, quick commits, and a
#: rebalance timeout that bounds how long a join may wait for a member that never rejoins.
FAST = {
    "group.protocol": "broker",
    "auto.offset.reset": "smallest",
    "consumer.timeout.ms": 1500,
    "session.timeout.ms": 4000,
    "heartbeat.interval.ms": 300,
    "max.poll.interval.ms": 15000,
    "auto.commit.interval.ms": 200,
    "rebalance.backoff.ms": 100,
    "fetch.wait.max.ms": 50,
    "refresh.leader.backoff.ms": 50,
    "socket.timeout.ms": 10000,
}

MEMBER_PROC = Path(__file__).with_name("broker_member_proc.py")


def start_victim(bootstrap: str, group: str, topic: str, props: dict[str, Any]) -> tuple[subprocess.Popen[str], list[tuple[int, bytes]], list[str], threading.Thread]:
    """A broker-mode member in a subprocess (broker_member_proc.py) to be killed with SIGKILL:
    returns the process, the (partition, value) it printed as handed out, its READY lines and the
    thread reading its output."""
    proc = subprocess.Popen(
        [sys.executable, str(MEMBER_PROC), bootstrap, group, topic, "delay=0.02",
         *(f"{k}={v}" for k, v in props.items())],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    victim: list[tuple[int, bytes]] = []
    ready: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("READY"):
                ready.append(line)
            elif line.startswith("M "):
                _, partition, _, value = line.rstrip("\n").split(" ", 3)
                victim.append((int(partition), value.encode()))

    reader = threading.Thread(target=read, name="victim-reader", daemon=True)
    reader.start()
    return proc, victim, ready, reader


# --------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def tansu() -> Iterator[Any]:
    from hmbclient.testing.tansu import LocalTansu

    with LocalTansu() as t:
        yield t


@pytest.fixture
def make_member(tansu: Any) -> Iterator[Callable[..., ConsumerConnector]]:
    """``make_member(group, **overrides)`` -> a broker-mode connector, shut down after the test."""
    made: list[ConsumerConnector] = []

    def make(group: str, **overrides: Any) -> ConsumerConnector:
        status = overrides.pop("status_listener", None)
        props = {**FAST, "bootstrap.servers": tansu.bootstrap, "group.id": group}
        c = Consumer.create(props, status_listener=status, **overrides)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()


@pytest.fixture
def producer(tansu: Any) -> Iterator[Producer]:
    p = Producer(tansu.bootstrap)
    yield p
    p.close()


def call(bootstrap: str, api_key: ApiKey, **fields: Any) -> Any:
    client = NetClient(bootstrap)
    try:
        node = client.bootstrap_ids[0]
        if api_key in (ApiKey.OFFSET_FETCH, ApiKey.OFFSET_COMMIT):
            found = client.call(node, lambda v: v.build(ApiKey.FIND_COORDINATOR, group_id=fields["group_id"], key=fields["group_id"], key_type=0))
            client.update_brokers({found.node_id: (found.host, found.port)})
            node = found.node_id
        return client.call(node, lambda v: v.build(api_key, **fields), timeout_ms=15_000)
    finally:
        client.close()


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    resp = call(
        bootstrap,
        ApiKey.CREATE_TOPICS,
        topics=[{"topic": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}],
        timeout_ms=10_000,
        validate_only=False,
    )
    assert resp.topics[0].error_code == 0, resp


def committed(bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    resp = call(bootstrap, ApiKey.OFFSET_FETCH, group_id=group, topics=[{"topic": topic, "partitions": list(range(partitions))}])
    return {p.partition: p.offset for t in resp.topics for p in t.partitions}


class Events:
    """A status listener keeping every event (the connector calls it on its own threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[ConsumerEvent] = []

    def __call__(self, event: ConsumerEvent) -> None:
        with self.lock:
            self.items.append(event)

    def of(self, kind: str) -> list[ConsumerEvent]:
        with self.lock:
            return [e for e in self.items if e.kind == kind]


def balanced(members: list[ConsumerConnector], partitions: int = PARTITIONS) -> bool:
    """Every member settled under the current generation, owning an even share, no overlap."""
    if not all(m.await_rebalance(0.5) for m in members):
        return False
    shares = [set(m.owned_partitions()) for m in members]
    union = set().union(*shares)
    lo, hi = partitions // len(members), -(-partitions // len(members))
    return (
        len(union) == partitions
        and sum(len(s) for s in shares) == partitions
        and all(lo <= len(s) <= hi for s in shares)
    )


def wait_balanced(members: list[ConsumerConnector], partitions: int = PARTITIONS, timeout_s: float = 60) -> None:
    wait_until(
        lambda: balanced(members, partitions),
        timeout_s,
        f"{len(members)} members balanced over {partitions} partitions",
        diag=lambda: [(m.consumer_id, m._rebalancer.state if m._rebalancer else None,
                       sorted(m.owned_partitions())) for m in members],
    )


# --------------------------------------------------------------------- pure parts


def test_assignors_match_the_java_consumer_examples() -> None:
    # RangeAssignor's javadoc: C0, C1 on t0, t1 with 3 partitions each.
    members = {"C0": MemberSubscription(("t0", "t1")), "C1": MemberSubscription(("t0", "t1"))}
    partitions = {"t0": [0, 1, 2], "t1": [0, 1, 2]}
    assert range_assign(partitions, members) == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }
    # RoundRobinAssignor's javadoc (different subscriptions): C0 {t0}, C1 {t0, t1}, C2 {t0, t1, t2}
    # with 1, 2 and 3 partitions -> C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
    members = {
        "C0": MemberSubscription(("t0",)),
        "C1": MemberSubscription(("t0", "t1")),
        "C2": MemberSubscription(("t0", "t1", "t2")),
    }
    partitions = {"t0": [0], "t1": [0, 1], "t2": [0, 1, 2]}
    assert roundrobin_assign(partitions, members) == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }
    # Static members (group.instance.id) come first, by instance id.
    members = {"a": MemberSubscription(("t",)), "z": MemberSubscription(("t",), "instance-1")}
    assert range_assign({"t": [0, 1, 2]}, members) == {"z": [("t", 0), ("t", 1)], "a": [("t", 2)]}


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_assignors_agree_with_kafka_python(name: str) -> None:
    """Where a kafka-python member leads, it must hand out what we would, and vice versa."""
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    theirs_cls = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[name]
    ours = {"range": range_assign, "roundrobin": roundrobin_assign}[name]
    partitions = {"a": list(range(7)), "b": list(range(3)), "c": list(range(5))}
    subscriptions = {
        "m-3": ("a", "b", "c"),
        "m-1": ("a", "c"),
        "m-2": ("a", "b", "c"),
        "m-10": ("b",),
    }
    if name == "roundrobin":
        # kafka-python 3.0's round robin fails on members with different subscriptions (its
        # skip loop takes the next (instance id, member id) pair for a member id); the Java
        # examples above cover those.
        subscriptions = dict.fromkeys(subscriptions, ("a", "b", "c"))

    class Cluster:
        """The one question kafka-python's assignors ask the cluster."""

        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(partitions[topic])

    class Meta:
        def __init__(self, topics: tuple[str, ...]) -> None:
            self.topics = list(topics)

    class Member:
        def __init__(self, member_id: str, topics: tuple[str, ...]) -> None:
            self.member_id, self.group_instance_id, self.metadata = member_id, None, Meta(topics)

    theirs = theirs_cls.assign(Cluster(), [Member(m, t) for m, t in subscriptions.items()])
    expected = {
        m: sorted((t, p) for t, ps in a.assignment for p in ps) for m, a in theirs.items()
    }
    got = ours(partitions, {m: MemberSubscription(t) for m, t in subscriptions.items()})
    assert got == expected


def test_streams_for_spreads_a_share_over_streams() -> None:
    share = [("t", 5), ("t", 1), ("u", 0), ("t", 3)]
    assert streams_for("c", share, {"t": 2, "u": 1}, 0) == {
        ("t", 1): "c-0", ("t", 3): "c-1", ("t", 5): "c-0", ("u", 0): "c-0",
    }
    assert streams_for("c", share, None, 3) == {("t", 1): "c-0", ("t", 3): "c-1", ("t", 5): "c-2", ("u", 0): "c-0"}
    # A partition of a topic we did not subscribe to (another client's leader) is not taken.
    assert streams_for("c", [("x", 0)], {"t": 1}, 0) == {}


def test_member_state_table() -> None:
    # Every state can close, CLOSED absorbs everything, and the happy path is drawn.
    for state in MemberState:
        assert next_state(state, Event.CLOSE) is MemberState.CLOSED
        assert set(_TRANSITIONS) == set(MemberState)
    assert all(next_state(MemberState.CLOSED, e) is MemberState.CLOSED for e in Event)
    path = [Event.START, Event.COORDINATOR_FOUND, Event.JOINED, Event.SYNCED]
    state = MemberState.NEW
    for event in path:
        state = next_state(state, event)
    assert state is MemberState.STABLE
    assert next_state(MemberState.STABLE, Event.REJOIN) is MemberState.JOINING
    assert next_state(MemberState.STABLE, Event.COORDINATOR_LOST) is MemberState.REDISCOVERING
    assert next_state(MemberState.REDISCOVERING, Event.COORDINATOR_FOUND) is MemberState.STABLE
    assert next_state(MemberState.REDISCOVERING, Event.FENCED) is MemberState.DISCOVERING
    # Nothing is handed out before a SyncGroup: no way from JOINING to STABLE but through SYNCING.
    with pytest.raises(IllegalTransition):
        next_state(MemberState.JOINING, Event.SYNCED)
    with pytest.raises(IllegalTransition):
        next_state(MemberState.NEW, Event.JOINED)


def test_config_picks_the_protocol_and_needs_its_servers() -> None:
    from hmbclient.config import ConsumerConfig

    assert ConsumerConfig(group_id="g", bootstrap_servers="h:1").group_coordination == "broker"
    assert ConsumerConfig(group_id="g", zookeeper_connect="h:2").group_coordination == "zookeeper"
    with pytest.raises(ConfigError, match="bootstrap.servers"):
        ConsumerConfig(group_id="g", group_coordination="broker", zookeeper_connect="h:2")
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        ConsumerConfig(group_id="g")
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        ConsumerConfig(group_id="g", bootstrap_servers="h:1", session_timeout_ms=1000, heartbeat_interval_ms=1000)
    # group.protocol is group.coordination's alias for the connector (Kafka 4 gives the name
    # to classic|consumer on the poll Consumer); Kafka's values are refused here.
    props = {"group.id": "g", "bootstrap.servers": "h:1", "zookeeper.connect": "h:2"}
    assert ConsumerConfig.from_properties({**props, "group.protocol": "broker"}).group_coordination == "broker"
    assert ConsumerConfig.from_properties({**props, "group.coordination": "zookeeper"}).group_coordination == "zookeeper"
    with pytest.raises(ConfigError, match="group.coordination"):
        ConsumerConfig.from_properties({**props, "group.protocol": "consumer"})


def test_unreachable_brokers_fail_create_message_streams(unused_port: int) -> None:
    c = Consumer.create({**FAST, "bootstrap.servers": f"127.0.0.1:{unused_port}", "group.id": "nobody",
                         "socket.timeout.ms": 1500})
    try:
        started = time.monotonic()
        with pytest.raises(CoordinationError, match="no group coordinator"):
            c.create_message_streams({"t": 1})
        assert time.monotonic() - started < 15
    finally:
        c.shutdown()


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------- against Tansu


@pytest.mark.parametrize("members", [1, 2, 3])
def test_members_share_a_topic_and_get_every_message_once(
    tansu: Any, make_member: Any, producer: Producer, members: int
) -> None:
    check_members_get_every_message_once(tansu.bootstrap, make_member, producer, members, "bg")


def check_members_get_every_message_once(bootstrap: str, make_member: Any, producer: Producer, members: int, prefix: str) -> None:
    """``members`` broker-mode members of one group: every message exactly once, each from its
    partition's owner, and the final commits at the end of every partition."""
    topic, group = unique(prefix), unique("g")
    create_topic(bootstrap, topic)
    connectors = [make_member(group) for _ in range(members)]
    streams = [(f"c{i}", s) for i, c in enumerate(connectors) for s in c.create_message_streams({topic: 2})[topic]]
    wait_balanced(connectors)
    sent = producer.spread(topic, 15)  # after the group settled: each partition has one owner
    got = drain(streams, timeout=90)
    assert Counter(got.values()) == Counter(sent)
    # Each message came from its partition's owner: shares are disjoint, so no other member saw it.
    owner_of = {p: i for i, c in enumerate(connectors) for (_, p) in c.owned_partitions()}
    assert all(owner_of[m.partition] == int(tag[1:]) for tag, m in got.messages)
    for c in connectors:
        c.shutdown()
    # Final commits went to the coordinator: the group resumes at the end of every partition.
    assert committed(bootstrap, group, topic) == {p: 15 for p in range(PARTITIONS)}


def test_join_and_leave_mid_stream_lose_nothing_and_repeat_nothing(
    tansu: Any, make_member: Any, producer: Producer
) -> None:
    topic, group = unique("bg-move"), unique("g")
    create_topic(tansu.bootstrap, topic)
    events = Events()
    stop = threading.Event()
    collector = Collector()
    sent: set[tuple[int, bytes]] = set()

    def produce() -> None:
        batch = 0
        while not stop.is_set():
            sent.update(producer.spread(topic, 2, tag=f"b{batch}-"))
            batch += 1
            time.sleep(0.05)  # a steady trickle while members come and go (the pace is the point)

    first = [make_member(group, status_listener=events) for _ in range(2)]
    for i, c in enumerate(first):
        collector.consume(f"c{i}", c.create_message_streams({topic: 1})[topic][0], until=stop)
    wait_balanced(first)
    feeder = threading.Thread(target=produce, name="feeder", daemon=True)
    feeder.start()
    wait_until(lambda: len(collector.messages) > 100, 30, "messages flowing to two members")

    third = make_member(group, status_listener=events)
    collector.consume("c2", third.create_message_streams({topic: 1})[topic][0], until=stop)
    wait_balanced([*first, third])
    seen = len(collector.messages)
    wait_until(lambda: len(collector.messages) > seen + 100, 30, "messages flowing to three members")

    first[0].shutdown()  # a graceful leave: commit, revoke, LeaveGroup
    wait_balanced([first[1], third])
    seen = len(collector.messages)
    wait_until(lambda: len(collector.messages) > seen + 100, 30, "messages flowing after the leave")

    stop.set()
    feeder.join(30)
    collector.join(90)
    counts = Counter(collector.values())
    assert set(counts) == sent, f"lost {len(sent - set(counts))} messages"
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} messages handed out twice: {sorted(duplicates)[:10]}"
    uncommitted = [e for e in events.of("partitions_revoked") if not e.fields["committed"]]
    assert not uncommitted, uncommitted
    assert len(events.of("rebalance_completed")) >= 5  # 2 joins, a join of a third, a leave


def test_killed_member_loses_its_partitions_after_the_session_timeout(
    tansu: Any, make_member: Any, producer: Producer
) -> None:
    topic, group = unique("bg-kill"), unique("g")
    create_topic(tansu.bootstrap, topic)
    session_ms = 3000
    props = {**FAST, "session.timeout.ms": session_ms, "auto.commit.interval.ms": 500,
             "consumer.timeout.ms": 500}
    proc, victim, ready, reader = start_victim(tansu.bootstrap, group, topic, props)
    try:
        survivor = make_member(group, **{"session.timeout.ms": session_ms})
        survivor_stream = survivor.create_message_streams({topic: 1})[topic][0]
        collector = Collector()
        done = threading.Event()
        collector.consume("survivor", survivor_stream, until=done)
        wait_until(lambda: ready and survivor.await_rebalance(0.5) and len(survivor.owned_partitions()) == PARTITIONS // 2,
                   60, "the survivor and the process sharing the topic")
        # Two members: the process owns what the survivor does not (its READY line may show
        # a share from before the survivor joined).
        victim_partitions = set(range(PARTITIONS)) - {p for _, p in survivor.owned_partitions()}
        # Produced once both settled, so the process really gets its half to consume.
        sent = producer.spread(topic, 40)
        # Kill it in the middle of its share, past at least one auto commit.
        wait_until(lambda: len(victim) > 60, 30, "the process consuming")
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(10)
        wait_until(lambda: survivor.await_rebalance(0.5) and len(survivor.owned_partitions()) == PARTITIONS,
                   60, "the survivor owning every partition")
        moved_after = time.monotonic() - killed_at
        assert moved_after >= session_ms / 1000 * 0.8, f"partitions moved after {moved_after:.1f}s, before the session ran out"
        wait_until(lambda: set(collector.values()) | set(victim) >= sent, 60, "every message consumed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    done.set()
    collector.join(30)
    reader.join(10)
    total = Counter(collector.values()) + Counter(victim)
    assert set(total) == sent
    duplicates = {k: n for k, n in total.items() if n > 1}
    # The only repeats are what the killed member handed out after its last commit, each at
    # most twice, all on its partitions.
    assert all(n == 2 for n in duplicates.values())
    assert {k for k in duplicates} <= set(victim)
    assert {p for p, _ in duplicates} <= victim_partitions
    print(f"\nkilled member handed out {len(victim)} messages; {len(duplicates)} of them "
          f"(its uncommitted window) were consumed again; partitions moved after {moved_after:.1f}s")


@pytest.mark.parametrize(("first", "strategy"), [("hmbclient", "range"), ("kafka-python", "roundrobin")])
def test_a_group_shared_with_kafka_python(
    tansu: Any, make_member: Any, producer: Producer, first: str, strategy: str
) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    topic, group = unique("bg-mixed"), unique("g")
    create_topic(tansu.bootstrap, topic)
    before = producer.spread(topic, 5, tag="before-")
    stop = threading.Event()
    theirs: list[tuple[int, bytes]] = []
    their_assignment: list[set[int]] = [set()]
    errors: list[BaseException] = []

    def kafka_python_member() -> None:
        try:
            kc = KafkaConsumer(
                topic,
                bootstrap_servers=tansu.bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                auto_commit_interval_ms=200,
                session_timeout_ms=4000,
                heartbeat_interval_ms=300,
                max_poll_interval_ms=15000,
                partition_assignment_strategy=[
                    {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[strategy]
                ],
            )
            try:
                while not stop.is_set():
                    for records in kc.poll(timeout_ms=100).values():
                        theirs.extend((r.partition, r.value) for r in records)
                    their_assignment[0] = {tp.partition for tp in kc.assignment()}
            finally:
                kc.close()  # commits what it consumed, then leaves
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    other = threading.Thread(target=kafka_python_member, name="kafka-python", daemon=True)
    events = Events()
    ours = make_member(group, partition_assignment_strategy=strategy, status_listener=events)
    collector = Collector()
    if first == "kafka-python":
        other.start()
        wait_until(lambda: their_assignment[0], 60, "kafka-python owning partitions", diag=lambda: errors)
    collector.consume("ours", ours.create_message_streams({topic: 1})[topic][0], until=stop)
    if first == "hmbclient":
        wait_until(lambda: ours.await_rebalance(0.5), 60, "hmbclient owning partitions")
        other.start()

    def shared() -> bool:
        mine = {p for _, p in ours.owned_partitions()}
        return (
            ours.await_rebalance(0.5)
            and bool(mine) and bool(their_assignment[0])
            and not mine & their_assignment[0]
            and mine | their_assignment[0] == set(range(PARTITIONS))
        )

    wait_until(shared, 60, "hmbclient and kafka-python sharing the partitions",
               diag=lambda: (sorted(ours.owned_partitions()), their_assignment[0], errors))
    assert not errors, errors
    mine = {p for _, p in ours.owned_partitions()}
    assert len(mine) == PARTITIONS // 2
    led = [e.fields["leader"] for e in events.of("joined")]
    assert led[-1] is (first == "hmbclient"), f"expected the {first} member to lead (joined events: {led})"

    after = producer.spread(topic, 5, tag="after-")
    wait_until(lambda: set(collector.values()) | set(theirs) >= before | after, 60, "every message consumed")
    stop.set()
    other.join(30)
    collector.join(60)
    assert not errors, errors
    total = Counter(collector.values()) + Counter(theirs)
    assert total == Counter(before | after), "a message was lost or consumed twice"
    # Messages produced after the group settled went to their partition's owner.
    assert {p for p, v in collector.values() if v.startswith(b"after-")} <= mine
    assert {p for p, v in theirs if v.startswith(b"after-")} <= their_assignment[0]


def test_topic_filter_follows_new_topics(tansu: Any, make_member: Any, producer: Producer) -> None:
    prefix, group = unique("bgf"), unique("g")
    create_topic(tansu.bootstrap, f"{prefix}-a", 3)
    a = producer.spread(f"{prefix}-a", 4)
    c = make_member(group)
    streams = c.create_message_streams_by_filter(Whitelist(f"{prefix}-.*"), 2)
    wait_until(lambda: c.await_rebalance(0.5) and len(c.owned_partitions()) == 3, 60, "the filter's first topic owned")
    create_topic(tansu.bootstrap, f"{prefix}-b", 2)
    b = producer.spread(f"{prefix}-b", 4)
    wait_until(lambda: c.await_rebalance(0.5) and len(c.owned_partitions()) == 5, 60,
               "the new matching topic owned after a rebalance", diag=lambda: c.owned_partitions())
    got = drain([(f"s{i}", s) for i, s in enumerate(streams)], timeout=60)
    assert Counter((m.topic, m.partition, m.message) for _, m in got.messages) == Counter(
        [(f"{prefix}-a", p, v) for p, v in a] + [(f"{prefix}-b", p, v) for p, v in b]
    )


def test_a_coordinator_that_goes_away_is_found_again() -> None:
    """The broker stops (the coordinator is lost) and comes back empty on the same port (Tansu
    keeps nothing in memory storage): the member looks the coordinator up again, learns it was
    forgotten, revokes without a commit, joins anew and consumes on."""
    from hmbclient.testing.tansu import LocalTansu

    broker = LocalTansu().start()
    try:
        topic, group = unique("bg-gone"), unique("g")
        events = Events()
        create_topic(broker.bootstrap, topic, 2)
        member = Consumer.create({**FAST, "bootstrap.servers": broker.bootstrap, "group.id": group},
                                 status_listener=events)
        try:
            stream = member.create_message_streams({topic: 1})[topic][0]
            wait_until(lambda: member.await_rebalance(0.5) and len(member.owned_partitions()) == 2, 60,
                       "the member owning the topic")
            p = Producer(broker.bootstrap)
            first = p.spread(topic, 3, tag="a")
            p.close()
            assert Counter(drain([("m", stream)]).values()) == Counter(first)

            broker.stop()
            wait_until(lambda: events.of("coordinator_lost"), 30, "the coordinator lost")
            broker.start()  # same port, nothing remembered
            create_topic(broker.bootstrap, topic, 2)
            p = Producer(broker.bootstrap)
            second = p.spread(topic, 3, tag="b")
            p.close()
            wait_until(lambda: events.of("fenced") and member.await_rebalance(0.5)
                       and len(member.owned_partitions()) == 2, 60, "the member joined again",
                       diag=lambda: [(e.kind, dict(e.fields)) for e in events.items[-12:]])
            assert Counter(drain([("m", stream)]).values()) == Counter(second)
            kinds = [e.kind for e in events.items]
            assert kinds.index("coordinator_lost") < max(i for i, k in enumerate(kinds) if k == "coordinator_found")
        finally:
            member.shutdown()
    finally:
        broker.stop()
