"""Static membership (KIP-345) on the embedded broker's coordinator, with our members and with
confluent-kafka's (``group.instance.id``): a static member restarted within the session timeout
gets its partitions back and the others see no rebalance (same generation, nothing revoked);
a second member with a running member's instance id fences it (FENCED_INSTANCE_ID: it stops,
owning nothing) and takes its partitions, again without a rebalance."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import EmbeddedBroker
from hmbclient.consumer.group import MemberState
from hmbclient.errors import FencedInstanceIdError
from hmbclient.protocol.api.base import ApiKey

from .conftest import unique
from .members import Member
from .test_broker_groups import call, create_topic

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("static")), group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000) as b:
        yield b


@pytest.fixture
def members(broker: EmbeddedBroker) -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


def settled(group: list[Member]) -> bool:
    owned = [tp for m in group for tp in m.journal.owned]
    return len(owned) == len(set(owned)) == PARTITIONS and len({m.generation for m in group}) == 1 and all(m.member.stable for m in group)


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(broker: EmbeddedBroker, members: list[Member]) -> None:
    topic, group = unique("static"), unique("g-static")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    for i in range(3):
        members.append(Member(broker.bootstrap, group, topic, f"s{i}", group_instance_id=f"instance-{i}").start())
    wait_until(lambda: settled(members), 30, "three static members settled")
    generation = members[0].generation
    for m in members:
        m.journal.mark()
    before = set(members[1].journal.owned)
    members[1].close()  # no LeaveGroup: the coordinator keeps the member for its session
    members[1] = Member(broker.bootstrap, group, topic, "s1-again", group_instance_id="instance-1").start()
    wait_until(lambda: members[1].journal.owned == before, 20, "the restarted member owns its old partitions")
    assert members[1].generation == generation
    for m in (members[0], members[2]):
        assert m.member.await_rebalance(10)
        assert m.generation == generation and m.journal.taken_away() == set()

    # The same instance id again while it runs: the older one is fenced and stops.
    old = members[1]
    members.append(Member(broker.bootstrap, group, topic, "s1-twin", group_instance_id="instance-1").start())
    wait_until(lambda: old.member.state is MemberState.CLOSED, 20, "the fenced member stopped")
    assert isinstance(old.member.fatal_error, FencedInstanceIdError) and not old.journal.owned
    assert old.journal.events[-1][0] == "lost"
    wait_until(lambda: members[-1].journal.owned == before, 20, "the twin owns the partitions")
    for m in (members[0], members[2]):
        assert m.member.await_rebalance(10) and m.generation == generation and m.journal.taken_away() == set()

    # DescribeGroups v4 names the instances; an admin's LeaveGroup v3 by instance id alone
    # removes that member (a rebalance), which then joins again as a new member.
    described = call(broker.bootstrap, ApiKey.DESCRIBE_GROUPS, groups=[group], include_authorized_operations=False)
    assert sorted(m.group_instance_id for m in described.groups[0].members) == ["instance-0", "instance-1", "instance-2"]
    left = call(broker.bootstrap, ApiKey.LEAVE_GROUP, group_id=group, members=[{"member_id": "", "group_instance_id": "instance-2"}])
    assert (left.error_code, [(m.group_instance_id, m.error_code) for m in left.members]) == (0, [("instance-2", 0)])
    removed_id = members[2].member.member_id
    wait_until(lambda: settled([members[0], members[2], members[-1]]) and members[2].member.member_id != removed_id, 20, "the removed member rejoined")
    assert members[0].generation > generation


def test_a_confluent_kafka_static_member_restarts_without_a_rebalance(broker: EmbeddedBroker, members: list[Member]) -> None:
    from confluent_kafka import Consumer

    topic, group = unique("static-cf"), unique("g-static-cf")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    for i in range(2):
        members.append(Member(broker.bootstrap, group, topic, f"ours{i}", group_instance_id=f"ours-{i}").start())

    def run_librdkafka(owned: list[set[int]], stop: threading.Event) -> None:
        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group, "group.instance.id": "librdkafka-0",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range",
            "enable.auto.commit": False,
        })  # fmt: skip

        def on_assign(c: Any, partitions: list[Any]) -> None:
            owned.append({p.partition for p in partitions})

        consumer.subscribe([topic], on_assign=on_assign)
        try:
            while not stop.is_set():
                consumer.poll(0.1)
        finally:
            consumer.close()

    def start_librdkafka() -> tuple[list[set[int]], threading.Event, threading.Thread]:
        owned: list[set[int]] = []
        stop = threading.Event()
        thread = threading.Thread(target=run_librdkafka, args=(owned, stop), daemon=True)
        thread.start()
        return owned, stop, thread

    first, stop, thread = start_librdkafka()
    try:
        wait_until(lambda: first and sum(len(m.journal.owned) for m in members) + len(first[-1]) == PARTITIONS and all(m.member.stable for m in members) and members[0].generation == members[1].generation, 30, "three members settled")
        generation = members[0].generation
        mine = first[-1]
        for m in members:
            m.journal.mark()
    finally:
        stop.set()
        thread.join(10)
    again, stop, thread = start_librdkafka()
    try:
        wait_until(lambda: again, 20, "librdkafka assigned again")
        assert again[-1] == mine
        for m in members:
            assert m.member.await_rebalance(10) and m.generation == generation and m.journal.taken_away() == set()
    finally:
        stop.set()
        thread.join(10)
