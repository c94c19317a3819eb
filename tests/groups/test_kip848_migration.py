"""Classic and consumer-protocol members in one group (KIP-848's online migration, issue #24).

The pure cases first (K1-K5, U, D of :mod:`hmbclient.broker.coordinator.consumer_group`), the
coordinator's handlers under each ``group.consumer.migration.policy`` (with an in-memory store
and clock), then
one group on the embedded broker mixing hmbclient's ``Consumer`` (``group.protocol=consumer``),
confluent-kafka with ``group.protocol=consumer``, confluent-kafka classic cooperative-sticky,
kafka-python and aiokafka (classic, eager). The group starts classic (confluent-kafka
cooperative-sticky alone), is upgraded when hmbclient's consumer-protocol member joins, the
others join, kafka-python leaves, and the group is downgraded to classic when the
consumer-protocol members have left (the two classic members left rebalance as a classic group).

Every member runs its own poll loop on its own thread and commits synchronously after each
batch; the ledger records, from the members' assign / revoke callbacks, who owns what (an
assignment to one member of a partition another still holds is an overlap) and, per partition,
the highest committed position when each member was given it. Checked: every message
delivered; no overlap; every delivery at or above the committed position its member started
from (so a message delivered twice was never committed: duplicates only inside uncommitted
windows).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.coordinator import consumer_group as cg
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api.consumer_protocol import (
    ConsumerProtocolMemberMetadata,
    decode_member_assignment,
)
from tests.groups.mixed_members import (
    aiokafka_member,
    hmb_member,
    kafka_python_member,
    mixed_group,
    rd_member,
)

TOPIC = "mig"
PARTS = 10
TOPICS = {TOPIC: (uuid.uuid4(), 4)}


def _meta(owned: list[int] | None = None) -> tuple[tuple[str, bytes], ...]:
    if owned is None:
        eager = ConsumerProtocolMemberMetadata[0](topics=[TOPIC], user_data=None).encode()
        return (("range", eager), ("cooperative-sticky", eager))
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
    assert cg.validate_fetch(g, "A", a.generation_id + 5) == ErrorCode.ILLEGAL_GENERATION  # as Kafka's
    # an eager member rejoins owning nothing: it gets its half at the new epoch
    a2 = cg.classic_join(g, "A", None, _meta(), 10_000, 20_000, True, TOPICS, 40)
    assert a2.generation_id == g.assignment_epoch > a.generation_id
    mine = _assigned(cg.classic_sync(g, "A", a2.generation_id, 40)[1])
    assert len(mine) == 2
    b = cg.heartbeat(g, _Req("B", b.member_epoch, []), TOPICS, 50, 45_000)
    assert set(b.assignment[TOPIC]) == {0, 1, 2, 3} - mine
    assert cg.classic_heartbeat(g, "A", a2.generation_id, 60) == ErrorCode.NONE
    # a cooperative member reports what it owns: it keeps current & target and revokes the rest
    eager_only = (("roundrobin", _meta()[0][1]),)
    assert cg.classic_join(g, "", None, eager_only, 10_000, 20_000, False, TOPICS, 70, new_member_id="X").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
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


@pytest.fixture
def broker(tmp_path: Any) -> Any:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "b"), num_partitions=PARTS, group_consumer_heartbeat_interval_ms=200,
                        group_initial_rebalance_delay_ms=0) as b:
        yield b


def test_one_group_mixing_every_client_and_both_protocols(broker: Any) -> None:
    coordinator = broker.broker.group_coordinator
    kinds = {
        "rd-coop": lambda b, g, t: rd_member(b, g, t, classic=True),
        "hmb": hmb_member,
        "rd-consumer": rd_member,
        "aiokafka": aiokafka_member,
        "kafka-python": kafka_python_member,
    }

    def mixed() -> bool:
        group = coordinator.consumer_group("gmig")
        return group is not None and sum(m.classic is not None for m in group.members.values()) == 3 and len(group.members) == 5

    def classic_again() -> bool:
        return coordinator.consumer_group("gmig") is None and coordinator.group("gmig") is not None

    started = time.monotonic()
    ledger = mixed_group(broker.bootstrap, "gmig", TOPIC, kinds, partitions=PARTS, mixed_check=mixed, downgrade_check=classic_again)
    assert ledger.errors == []
    assert ledger.overlaps == [], ledger.overlaps
    assert ledger.below_committed == [], ledger.below_committed[:10]
    assert time.monotonic() - started < 60


# -- the shell: the migration policy, upgrade and downgrade through the handlers -------------------


class _Store:
    """An in-memory GroupStore (the coordinator's only I/O besides the channels)."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def group_status(self, group: str) -> int:
        return ErrorCode.NONE

    def partition_for(self, group: str) -> int:
        return 0

    def is_loading(self) -> bool:
        return False

    def store_group(self, group: str, record: Any, callback: Any) -> None:
        self.records.append(record)
        callback(ErrorCode.NONE)

    def delete_group(self, group: str, callback: Any) -> None:
        callback(ErrorCode.NONE)


class _Channel:
    def __init__(self) -> None:
        self.answers: list[Any] = []

    def send(self, response: Any) -> None:
        self.answers.append(response)


class _Header:
    def __init__(self, version: int) -> None:
        self.api_version, self.client_id = version, "test"


@pytest.mark.parametrize("policy", ["disabled", "downgrade", "bidirectional"])
def test_the_migration_policy_through_the_coordinator(policy: str) -> None:
    from hmbclient.broker.coordinator.coordinator import GroupCoordinator
    from hmbclient.broker.coordinator.state import GroupConfig
    from hmbclient.protocol.api import (
        ConsumerGroupHeartbeatRequest,
        HeartbeatRequest,
        JoinGroupRequest,
        SyncGroupRequest,
    )
    from hmbclient.protocol.api.consumer_protocol import ConsumerProtocolMemberAssignment

    clock = [1_000]
    coordinator = GroupCoordinator(_Store(), GroupConfig(1_000, 30_000, 0, consumer_migration_policy=policy), now_ms=lambda: clock[0])
    coordinator.consumer_topics = lambda: TOPICS
    coordinator.start(reapers=False)
    coordinator.load_partition(0, {})

    def join(member_id: str) -> Any:
        ch = _Channel()
        req = JoinGroupRequest[5].build(group_id="g", session_timeout_ms=6_000, rebalance_timeout_ms=9_000, member_id=member_id,
                                        group_instance_id=None, protocol_type="consumer", protocols=list(_meta()))
        coordinator.handle_join_group(_Header(5), JoinGroupRequest[5].decode(req.encode()), ch)
        clock[0] += 1
        coordinator.advance_clock()
        return ch.answers[0]

    def heartbeat(member_id: str, generation: int) -> int:
        ch = _Channel()
        req = HeartbeatRequest[3].build(group_id="g", generation_id=generation, member_id=member_id, group_instance_id=None)
        coordinator.handle_heartbeat(_Header(3), HeartbeatRequest[3].decode(req.encode()), ch)
        return int(ch.answers[0].error_code)

    def consumer_heartbeat(member_id: str, epoch: int) -> Any:
        ch = _Channel()
        req = ConsumerGroupHeartbeatRequest[1].build(group_id="g", member_id=member_id, member_epoch=epoch, subscribed_topic_names=[TOPIC] if epoch == 0 else None)
        coordinator.handle_consumer_group_heartbeat(_Header(1), ConsumerGroupHeartbeatRequest[1].decode(req.encode()), ch)
        return type(ch.answers[0]).decode(ch.answers[0].encode())  # as the member reads it

    try:
        a_id = join("").member_id
        joined = join(a_id)
        assert joined.error_code == 0 and joined.leader == a_id  # a classic group, A leads
        everything = ConsumerProtocolMemberAssignment[0](assigned_partitions=[(TOPIC, [0, 1, 2, 3])], user_data=None).encode()
        ch = _Channel()
        req = SyncGroupRequest[3].build(group_id="g", generation_id=joined.generation_id, member_id=a_id, group_instance_id=None,
                                        assignments=[(a_id, everything)])
        coordinator.handle_sync_group(_Header(3), SyncGroupRequest[3].decode(req.encode()), ch)
        assert ch.answers[0].error_code == 0
        b = consumer_heartbeat("", 0)
        if policy in ("disabled", "downgrade"):  # no upgrade
            assert b.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL and coordinator.consumer_group("g") is None
            return
        # U: the group is a consumer group; B gets nothing A still holds, A is asked to rejoin
        group = coordinator.consumer_group("g")
        assert b.error_code == 0 and group is not None and coordinator.group("g") is None and len(group.members) == 2
        assert b.assignment.topic_partitions == []
        assert heartbeat(a_id, joined.generation_id) == ErrorCode.REBALANCE_IN_PROGRESS
        again = join(a_id)  # an eager member rejoins owning nothing: no leader, generation = member epoch
        assert (again.error_code, again.leader, again.generation_id) == (0, "", group.members[a_id].member_epoch)
        b = consumer_heartbeat(b.member_id, b.member_epoch)
        assert len(b.assignment.topic_partitions[0].partitions) == 2
        # D: B leaves; A alone, classic: the group is classic again and rebalances
        assert consumer_heartbeat(b.member_id, -1).error_code == 0
        classic = coordinator.group("g")
        assert coordinator.consumer_group("g") is None and classic is not None and classic.state.name == "PREPARING_REBALANCE"
        assert set(classic.members) == {a_id}
    finally:
        coordinator.shutdown()
