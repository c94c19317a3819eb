"""Kafka 4's consumer group protocol (KIP-848) in the embedded coordinator.

Pure decisions (:mod:`hmbclient.broker.coordinator.consumer_group`): joins, epochs, the
two assignors, reconciliation (a partition reaches its new owner only after the previous
owner's heartbeat stopped listing it), fencing, leave and session expiry. Then librdkafka
(confluent-kafka, ``group.protocol=consumer``) against our broker: three members join and
leave one at a time, every message is consumed, and at no moment do two members own one
partition (ownership tracked from the members' assign/revoke callbacks, all polled from this
thread, so the record is one consistent timeline).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.coordinator import consumer_group as cg
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ConsumerGroupHeartbeatRequest
from tests.waiting import wait_until

T1 = uuid.UUID(int=11)
TOPICS = {"a": (T1, 4)}


def _hb(member_id: str, epoch: int, owned: list[int] | None = None, subscribe: list[str] | None = None, assignor: str | None = None) -> Any:
    tps = None if owned is None else [{"topic_id": T1, "partitions": owned}]
    return ConsumerGroupHeartbeatRequest[1].build(
        group_id="g", member_id=member_id, member_epoch=epoch, subscribed_topic_names=subscribe, topic_partitions=tps, server_assignor=assignor
    )


def _parts(ans: cg.HeartbeatAnswer) -> list[int]:
    assert ans.assignment is not None
    return sorted(ans.assignment.get("a", ()))


def test_partitions_move_only_after_their_owner_revoked_them() -> None:
    g = cg.ConsumerGroup("g")
    a = cg.heartbeat(g, _hb("A", 0, [], ["a"]), TOPICS, 0, 45_000)
    assert (a.error_code, a.member_id, _parts(a)) == (0, "A", [0, 1, 2, 3]) and a.member_epoch == g.group_epoch
    b = cg.heartbeat(g, _hb("B", 0, [], ["a"]), TOPICS, 10, 45_000)
    assert _parts(b) == [] and b.member_epoch == g.assignment_epoch  # A still holds them all
    # A is told to keep two (epoch unchanged until it has revoked the others)
    a2 = cg.heartbeat(g, _hb("A", a.member_epoch, [0, 1, 2, 3]), TOPICS, 20, 45_000)
    assert _parts(a2) == [0, 1] and a2.member_epoch == a.member_epoch
    b2 = cg.heartbeat(g, _hb("B", b.member_epoch, []), TOPICS, 30, 45_000)
    assert _parts(b2) == []  # still nothing: A has not revoked
    a_quiet = cg.heartbeat(g, _hb("A", a.member_epoch, None), TOPICS, 35, 45_000)  # A reports nothing new
    assert _parts(a_quiet) == [0, 1] and _parts(cg.heartbeat(g, _hb("B", b.member_epoch, []), TOPICS, 36, 45_000)) == []
    a3 = cg.heartbeat(g, _hb("A", a.member_epoch, [0, 1]), TOPICS, 40, 45_000)
    assert a3.member_epoch == g.assignment_epoch
    b3 = cg.heartbeat(g, _hb("B", b.member_epoch, []), TOPICS, 50, 45_000)
    assert _parts(b3) == [2, 3]


def test_fencing_unknown_members_leave_and_session_expiry() -> None:
    g = cg.ConsumerGroup("g")
    a = cg.heartbeat(g, _hb("A", 0, [], ["a"]), TOPICS, 0, 1_000)
    assert cg.heartbeat(g, _hb("A", a.member_epoch + 5, [0]), TOPICS, 1, 1_000).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert cg.heartbeat(g, _hb("Z", 3, []), TOPICS, 1, 1_000).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert cg.heartbeat(g, _hb("A", 0, [], ["a"], assignor="sticky"), TOPICS, 1, 1_000).error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    b = cg.heartbeat(g, _hb("B", 0, [], ["a"]), TOPICS, 2, 1_000)
    epoch = g.group_epoch
    left = cg.heartbeat(g, _hb("B", -1), TOPICS, 3, 1_000)
    assert (left.error_code, left.member_epoch, g.group_epoch) == (0, -1, epoch + 1) and "B" not in g.members
    assert cg.heartbeat(g, _hb("B", b.member_epoch, []), TOPICS, 4, 1_000).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # A's session (1 s) runs out; a newcomer's heartbeat expires it and gets every partition
    c = cg.heartbeat(g, _hb("C", 0, [], ["a"]), TOPICS, 5_000, 1_000)
    assert "A" not in g.members and _parts(c) == [0, 1, 2, 3]
    assert cg.validate_commit(g, "C", c.member_epoch) == 0
    assert cg.validate_commit(g, "C", c.member_epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert cg.validate_commit(g, "A", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    # an admin's commit (no member, epoch -1) only while the group is empty (Kafka's C1)
    assert cg.validate_commit(g, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert cg.validate_commit(cg.ConsumerGroup("empty"), "", -1) == 0
    assert cg.validate_commit(g, "C", c.member_epoch, api_version=8) == ErrorCode.UNSUPPORTED_VERSION  # v9+ only
    assert cg.validate_fetch(g, "C", c.member_epoch) == 0 and cg.validate_fetch(g, "C", c.member_epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert cg.validate_fetch(g, "A", 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_assignors() -> None:
    subs = {"m1": ("a", "b"), "m2": ("a",), "m3": ("a", "b")}
    rng = cg.assign("range", subs, {"a": 5, "b": 2}, {})
    assert {m: {t: sorted(p) for t, p in a.items()} for m, a in rng.items()} == {
        "m1": {"a": [0, 1], "b": [0]},
        "m2": {"a": [2, 3]},
        "m3": {"a": [4], "b": [1]},
    }
    uni = cg.assign("uniform", subs, {"a": 5, "b": 2}, {})
    sizes = sorted(sum(len(p) for p in a.values()) for a in uni.values())
    assert sizes == [2, 2, 3] and set().union(*[{(t, p) for t, ps in a.items() for p in ps} for a in uni.values()]) == {
        *(("a", p) for p in range(5)), *(("b", p) for p in range(2))
    }
    assert all(t in subs[m] for m, a in uni.items() for t in a)
    # sticky: a fourth member takes from the others, nobody else moves
    again = cg.assign("uniform", {**subs, "m4": ("a", "b")}, {"a": 5, "b": 2}, uni)
    for m in subs:
        assert {(t, p) for t, ps in again[m].items() for p in ps} <= {(t, p) for t, ps in uni[m].items() for p in ps}


# -- librdkafka against our broker ------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Any) -> Any:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "b"), num_partitions=6, group_consumer_heartbeat_interval_ms=300, group_initial_rebalance_delay_ms=0) as b:
        yield b


def test_librdkafka_consumer_protocol_members_share_partitions(broker: Any) -> None:
    n = 600
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(n):
        p.produce("k848", str(i).encode(), partition=i % 6)
    assert p.flush(15) == 0
    owned: dict[str, set[int]] = {}
    overlaps: list[tuple[str, int]] = []
    seen: list[int] = []

    def member(name: str) -> Consumer:
        def on_assign(c: Any, parts: Any) -> None:
            for x in parts:
                if any(x.partition in ps for m, ps in owned.items() if m != name):
                    overlaps.append((name, x.partition))
            owned.setdefault(name, set()).update(x.partition for x in parts)

        def on_revoke(c: Any, parts: Any) -> None:
            owned.setdefault(name, set()).difference_update(x.partition for x in parts)

        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g848", "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe(["k848"], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        return c

    members: dict[str, Consumer] = {}

    def poll_all() -> None:
        for c in list(members.values()):
            m = c.poll(0.05)
            if m is not None and not m.error():
                seen.append(int(m.value()))
                c.commit(m, asynchronous=False)

    def balanced(k: int) -> bool:
        poll_all()
        sizes = sorted(len(owned.get(x, ())) for x in members)
        return len(sizes) == k and sum(sizes) == 6 and sizes[-1] - sizes[0] <= 1

    for name in ("a", "b", "c"):
        members[name] = member(name)
        k = len(members)
        wait_until(lambda k=k: balanced(k), timeout_s=30, what=f"{k} members sharing 6 partitions")
    members.pop("b").close()
    owned.pop("b", None)
    wait_until(lambda: balanced(2), timeout_s=30, what="2 members after b left")
    deadline = time.monotonic() + 30
    while len(set(seen)) < n and time.monotonic() < deadline:
        poll_all()
    for c in members.values():
        c.close()
    assert overlaps == []
    assert set(seen) == set(range(n))
    # duplicates only from a commit lost in a move (each message is committed right after it is seen)
    assert len(seen) - n <= 6, f"{len(seen) - n} duplicates"


def test_static_member_restart_keeps_its_partitions_without_a_rebalance() -> None:
    g = cg.ConsumerGroup("g")

    def join(mid: str, instance: str, now: int) -> cg.HeartbeatAnswer:
        req = ConsumerGroupHeartbeatRequest[1].build(group_id="g", member_id=mid, member_epoch=0, instance_id=instance, subscribed_topic_names=["a"], topic_partitions=[])
        return cg.heartbeat(g, req, TOPICS, now, 1_000)

    a = join("A", "i-a", 0)
    b = join("B", "i-b", 1)
    a = cg.heartbeat(g, _hb("A", a.member_epoch, [0, 1, 2, 3]), TOPICS, 2, 1_000)
    a = cg.heartbeat(g, _hb("A", a.member_epoch, _parts(a)), TOPICS, 3, 1_000)
    b = cg.heartbeat(g, _hb("B", b.member_epoch, []), TOPICS, 4, 1_000)
    a_parts, b_parts, epoch = _parts(a), _parts(b), g.group_epoch
    assert sorted(a_parts + b_parts) == [0, 1, 2, 3] and a_parts and b_parts
    assert join("A2", "i-a", 5).error_code == ErrorCode.UNRELEASED_INSTANCE_ID  # A is still active
    left = cg.heartbeat(g, _hb("A", -2), TOPICS, 6, 1_000)
    assert left.member_epoch == -2 and g.group_epoch == epoch  # no rebalance
    assert _parts(cg.heartbeat(g, _hb("B", b.member_epoch, b_parts), TOPICS, 7, 1_000)) == b_parts  # B gets none of A's
    back = join("A2", "i-a", 8)
    assert (back.error_code, back.member_id, _parts(back), g.group_epoch) == (0, "A2", a_parts, epoch)
    # a static member that left and never came back is dropped when its session runs out
    cg.heartbeat(g, _hb("A2", -2), TOPICS, 9, 1_000)
    b = cg.heartbeat(g, _hb("B", b.member_epoch, b_parts), TOPICS, 1_005, 1_000)
    assert "A2" in g.members and _parts(b) == b_parts  # still reserved
    b = cg.heartbeat(g, _hb("B", b.member_epoch, b_parts), TOPICS, 1_500, 1_000)
    assert "A2" not in g.members and g.group_epoch > epoch
    b = cg.heartbeat(g, _hb("B", b.member_epoch, _parts(b)), TOPICS, 1_501, 1_000)
    assert _parts(b) == [0, 1, 2, 3]
