"""Cooperative incremental rebalancing (KIP-429, the ``cooperative-sticky`` assignor).

Pure: the sticky balance and the cooperative rule (a partition changing owner is first left
out, assigned only in the follow-up rebalance after its owner revoked it), claims of several
owners settled by generation, and the subscription's generation read from every place a client
writes it. On the wire, on the embedded broker: our members and confluent-kafka's
(``partition.assignment.strategy=cooperative-sticky``) in one group; a member joins and the
members whose partitions do not move never see them revoked (from their assignment callbacks);
every partition has one owner at the end; a member offering only eager assignors is refused
with INCONSISTENT_GROUP_PROTOCOL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import EmbeddedBroker
from hmbclient.consumer.assignors import (
    MemberSubscription,
    cooperative_sticky_assign,
    sticky_assign,
)
from hmbclient.consumer.group import _member_subscription
from hmbclient.errors import InconsistentGroupProtocolError
from hmbclient.protocol.api.consumer_protocol import (
    ConsumerProtocolMemberMetadata,
    decode_member_metadata,
)

from .conftest import unique
from .members import Member
from .test_broker_groups import create_topic

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 12


def subs(owned: dict[str, list[tuple[str, int]]], topics: dict[str, list[str]] | None = None, generation: int = 1) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription((topics or {}).get(m, ["t"]), None, tuple(o), generation) for m, o in owned.items()}


def test_a_new_member_gets_partitions_only_after_their_owners_revoked_them() -> None:
    parts = {"t": list(range(100))}
    first = cooperative_sticky_assign(parts, subs({f"m{i:02d}": [] for i in range(10)}))
    assert sorted(len(v) for v in first.values()) == [10] * 10
    owned = {**first, "m10": []}
    phase1 = cooperative_sticky_assign(parts, subs(owned, generation=2))
    assert phase1["m10"] == []  # everything is still owned by someone
    for m, share in phase1.items():
        assert set(share) <= set(owned[m])  # nobody gets a partition another one owns
    revoked = {tp for m in owned for tp in set(owned[m]) - set(phase1[m])}
    assert len(revoked) == 9  # 100 = 1 x 10 + 10 x 9: nine members give one each
    phase2 = cooperative_sticky_assign(parts, subs(phase1, generation=3))
    assert set(phase2["m10"]) == revoked
    assert all(phase2[m] == phase1[m] for m in phase1 if m != "m10")
    assert sorted(len(v) for v in phase2.values()) == [9] * 10 + [10]


def test_a_leaving_member_s_partitions_go_at_once_and_nothing_else_moves() -> None:
    parts = {"t": list(range(12))}
    first = cooperative_sticky_assign(parts, subs({"a": [], "b": [], "c": []}))
    after = cooperative_sticky_assign(parts, subs({"a": first["a"], "b": first["b"]}, generation=2))
    assert set(first["a"]) <= set(after["a"]) and set(first["b"]) <= set(after["b"])
    assert sorted(after["a"] + after["b"]) == [("t", p) for p in range(12)]


def test_claims_are_settled_by_generation_and_subscriptions_may_differ() -> None:
    parts = {"t": [0, 1], "u": [0, 1, 2, 3]}
    members = {
        "old": MemberSubscription(["t", "u"], None, (("t", 0), ("u", 0)), 3),
        "new": MemberSubscription(["t", "u"], None, (("t", 0),), 4),
        "only-u": MemberSubscription(["u"], None, (), -1),
    }
    balanced = sticky_assign(parts, members)
    assert ("t", 0) in balanced["new"]
    assert all(tp[0] == "u" for tp in balanced["only-u"])
    assert sorted(tp for s in balanced.values() for tp in s) == sorted((t, p) for t, ps in parts.items() for p in ps)
    assert max(map(len, balanced.values())) - min(map(len, balanced.values())) <= 1
    coop = cooperative_sticky_assign(parts, members)
    assert ("t", 0) not in coop["old"]  # lost the claim: "new" holds it from a later generation


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_owned_generation_is_read_wherever_a_client_writes_it(version: int) -> None:
    fields: dict[str, Any] = {"topics": ["t"], "owned_partitions": [("t", [1, 2])], "generation_id": 7, "rack_id": None}
    # Java writes the generation in user_data as 4 bytes; librdkafka's sticky user_data ends with it.
    fields["user_data"] = (7).to_bytes(4, "big") if version < 2 else None
    meta = ConsumerProtocolMemberMetadata[version](**{k: v for k, v in fields.items() if k in ConsumerProtocolMemberMetadata[version]._fields})
    sub = _member_subscription(decode_member_metadata(meta.encode()), "i")
    assert (sub.topics, sub.group_instance_id, tuple(sub.owned_partitions), sub.generation) == (("t",), "i", (("t", 1), ("t", 2)), 7)


# ----------------------------------------------------------------------------------- on the wire


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("coop")), group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000) as b:
        yield b


class Librdkafka:
    """A confluent-kafka member polling on a thread, journaling its incremental callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.owned: set[int] = set()
        self.taken_away: set[int] = set()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(bootstrap, group, topic, name), daemon=True)
        self.thread.start()

    def _run(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300, "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False, "error_cb": lambda e: self.errors.append(str(e)),
        })  # fmt: skip

        def on_assign(c: Any, partitions: list[Any]) -> None:
            self.owned |= {p.partition for p in partitions}

        def on_revoke(c: Any, partitions: list[Any]) -> None:
            gone = {p.partition for p in partitions}
            self.owned -= gone
            self.taken_away |= gone

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not self.stop.is_set():
                consumer.poll(0.1)
        finally:
            consumer.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.mark.parametrize("leader", ["ours", "librdkafka"])
def test_a_mixed_cooperative_group_moves_only_what_must_move(broker: EmbeddedBroker, leader: str) -> None:
    topic, group = unique("coop"), unique("g-coop")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    ours: list[Member] = []
    theirs: list[Librdkafka] = []
    try:
        if leader == "librdkafka":  # the first member to join leads (assigns)
            theirs.append(Librdkafka(broker.bootstrap, group, topic, "rdk0"))
            wait_until(lambda: len(theirs[0].owned) == PARTITIONS, 30, "librdkafka owns the topic")
        for i in range(2):
            ours.append(Member(broker.bootstrap, group, topic, f"ours{i}", assignor="cooperative-sticky").start())
        if leader == "ours":
            theirs.append(Librdkafka(broker.bootstrap, group, topic, "rdk0"))

        def owners() -> list[int]:
            return [p for m in ours for _, p in m.journal.owned] + [p for r in theirs for p in r.owned]

        def settled(n: int) -> bool:
            got = owners()
            sizes = [len(m.journal.owned) for m in ours] + [len(r.owned) for r in theirs]
            return sorted(got) == list(range(PARTITIONS)) and max(sizes) - min(sizes) <= 1 and len(sizes) == n and all(m.member.stable for m in ours)

        wait_until(lambda: settled(3), 30, "three members share the topic", diag=lambda: (owners(), [r.errors for r in theirs]))
        before = {m.name: {p for _, p in m.journal.owned} for m in ours}
        rdk_before = set(theirs[0].owned)
        for m in ours:
            m.journal.mark()
        theirs[0].taken_away.clear()
        # A fourth member joins (ours), then a fifth (librdkafka's).
        ours.append(Member(broker.bootstrap, group, topic, "ours2", assignor="cooperative-sticky").start())
        wait_until(lambda: settled(4), 30, "four members share the topic", diag=owners)
        theirs.append(Librdkafka(broker.bootstrap, group, topic, "rdk1"))
        wait_until(lambda: settled(5), 30, "five members share the topic", diag=owners)
        for m in ours[:2]:
            now = {p for _, p in m.journal.owned}
            gone = {p for _, p in m.journal.taken_away()}
            assert now <= before[m.name] and gone == before[m.name] - now, (m.name, before[m.name], now, gone)
            assert all(kind != "lost" for kind, _, _ in m.journal.events)
        assert theirs[0].owned <= rdk_before and theirs[0].taken_away == rdk_before - theirs[0].owned
        assert not any(r.errors for r in theirs)
    finally:
        for m in ours:
            m.close()
        for r in theirs:
            r.close()


def test_members_that_share_no_assignor_are_refused(broker: EmbeddedBroker) -> None:
    topic, group = unique("coop-mix"), unique("g-coop-mix")
    create_topic(broker.bootstrap, topic, 2)
    first = Member(broker.bootstrap, group, topic, "coop", assignor="cooperative-sticky").start()
    eager = Member(broker.bootstrap, group, topic, "eager", assignor="range")
    try:
        wait_until(lambda: first.member.stable, 20, "the cooperative member settled")
        with pytest.raises(InconsistentGroupProtocolError):
            eager.member.start(timeout_s=10)
    finally:
        eager.close()
        first.close()


@pytest.mark.parametrize("seed", range(40))
def test_random_groups_converge_without_double_owners(seed: int) -> None:
    """Random topics, subscriptions and memberships: every round of the cooperative protocol
    (assign, revoke what is gone, rejoin) gives each partition at most one owner, only to a
    subscriber; it converges to a full assignment within two rounds; with equal subscriptions
    the shares differ by at most one and a member keeps what it owned up to its quota."""
    import random

    rng = random.Random(seed)
    topics = {f"t{i}": list(range(rng.randint(1, 12))) for i in range(rng.randint(1, 3))}
    equal = rng.random() < 0.5
    names = [f"m{i}" for i in range(rng.randint(1, 7))]
    wants = {m: sorted(topics) if equal else sorted(rng.sample(sorted(topics), rng.randint(1, len(topics)))) for m in names}
    owned: dict[str, list[tuple[str, int]]] = {m: [] for m in names}
    generation = 1
    for step in range(4):
        if step:  # membership changes: someone leaves, someone joins
            if len(owned) > 1 and rng.random() < 0.5:
                owned.pop(rng.choice(sorted(owned)))
            joiner = f"n{step}"
            owned[joiner] = []
            wants[joiner] = sorted(topics) if equal else sorted(rng.sample(sorted(topics), rng.randint(1, len(topics))))
        for _ in range(2):  # the rebalance and its follow-up
            generation += 1
            members = {m: MemberSubscription(wants[m], None, tuple(owned[m]), generation - 1) for m in owned}
            result = cooperative_sticky_assign(topics, members)
            seen = [tp for share in result.values() for tp in share]
            assert len(seen) == len(set(seen))
            for m, share in result.items():
                assert all(t in wants[m] for t, _ in share)
                assert all(tp in owned[m] or all(tp not in owned[o] for o in owned) for tp in share)
            owned = {m: list(result[m]) for m in owned}
        subscribed = {(t, p) for m in owned for t in wants[m] for p in topics[t]}
        assert {tp for share in owned.values() for tp in share} == subscribed
        if equal:
            sizes = [len(s) for s in owned.values()]
            assert max(sizes) - min(sizes) <= 1
