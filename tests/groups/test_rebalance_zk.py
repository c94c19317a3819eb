"""The rebalance loop against a real ZooKeeper, without brokers (fast).

Topics are registered the way brokers do it (``/brokers/ids/<id>``, ``/brokers/topics/<t>``,
written with :mod:`rebalance.paths`) in this module's chroot, and each member's consumer side
is a small recording listener that enforces the group invariant globally: a partition is
never assigned to two members at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.connection import _SESSION_EXPIRED

from rebalance import paths
from rebalance.filters import Blacklist, Whitelist
from rebalance.rebalancer import MemberState, Subscription, ZkRebalancer
from rebalance.registry import TopicPartition

from .conftest import unique, wait_for

pytestmark = pytest.mark.timeout(90)

SESSION_MS = 4000


class Ledger:
    """Who may hand out which partition of which group right now, across all members.

    A paused member (ZooKeeper connection suspended or session lost) hands out nothing, so
    its stale holdings do not count until it resumes -- and when it resumes, none of them may
    be held by anybody else.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holder: dict[tuple[str, TopicPartition], str] = {}
        self.paused: set[str] = set()
        self.violations: list[str] = []

    def take(self, group: str, member: str, tps: Mapping[TopicPartition, str]) -> None:
        with self.lock:
            for tp in tps:
                other = self.holder.get((group, tp))
                if other is not None and other != member and other not in self.paused:
                    self.violations.append(f"{group}: {tp} assigned to {member} while {other} has it")
                self.holder[(group, tp)] = member

    def give_back(self, group: str, member: str, tps: Mapping[TopicPartition, str]) -> None:
        with self.lock:
            for tp in tps:
                if self.holder.get((group, tp)) == member:
                    del self.holder[(group, tp)]

    def pause(self, member: str) -> None:
        with self.lock:
            self.paused.add(member)

    def resume(self, member: str, group: str, holdings: Mapping[TopicPartition, str]) -> None:
        with self.lock:
            self.paused.discard(member)
            for tp in holdings:
                other = self.holder.get((group, tp))
                if other != member:
                    self.violations.append(f"{group}: {member} resumed with {tp}, now {other}'s")


class Member:
    """A rebalancer plus a recording listener (the consumer side, minus the consuming)."""

    def __init__(self, zk: str, group: str, sub: Subscription, ledger: Ledger, name: str, **kw: Any) -> None:
        self.name = name
        self.group = group
        self.ledger = ledger
        self.assigned: dict[TopicPartition, str] = {}
        self.revocations: list[tuple[list[TopicPartition], bool]] = []
        self.pauses = 0
        self.events: list[str] = []
        settings: dict[str, Any] = {
            "session_timeout_ms": SESSION_MS,
            "rebalance_backoff_ms": 100,
            "rebalance_max_retries": 20,
            **kw,
        }
        self.rb = ZkRebalancer(
            zookeeper_connect=zk,
            group=group,
            consumer_id=paths.make_consumer_id(group),
            subscription=sub,
            listener=self,
            status=lambda kind, fields: self.events.append(kind),
            **settings,
        )

    # OwnershipListener
    def on_pause(self) -> None:
        self.pauses += 1
        self.ledger.pause(self.name)

    def on_resume(self) -> None:
        self.ledger.resume(self.name, self.group, dict(self.assigned))

    def on_revoke(self, partitions: Mapping[TopicPartition, str], commit: bool) -> None:
        self.revocations.append((sorted(partitions), commit))
        for tp in partitions:
            self.assigned.pop(tp, None)
        self.ledger.give_back(self.group, self.name, partitions)

    def on_assign(self, partitions: Mapping[TopicPartition, str]) -> None:
        self.ledger.take(self.group, self.name, partitions)
        self.assigned.update(partitions)

    def on_brokers_changed(self, brokers: Any) -> None:
        pass

    def start(self) -> Member:
        self.rb.start()
        return self

    def close(self) -> None:
        self.rb.close()


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def members(zk_connect: str, ledger: Ledger) -> Iterator[Any]:
    made: list[Member] = []

    def make(group: str, sub: Subscription, **kw: Any) -> Member:
        m = Member(zk_connect, group, sub, ledger, f"m{len(made)}", **kw)
        made.append(m)
        return m.start()

    yield make
    for m in made:
        m.close()
    assert not ledger.violations, ledger.violations


@pytest.fixture(scope="module")
def brokers_registered(admin_zk: KazooClient) -> None:
    # What a 0.8 broker writes; the group machinery reads only host/port from it.
    admin_zk.create(
        paths.broker_path(0),
        paths.encode_broker_registration(paths.BrokerRegistration("127.0.0.1", 9)),
        makepath=True,
    )


def make_topic(zk: KazooClient, topic: str, partitions: int) -> None:
    zk.create(
        paths.topic_path(topic),
        paths.encode_topic_assignment({p: [0] for p in range(partitions)}),
        makepath=True,
    )


def share(ms: list[Member]) -> list[int]:
    return [len(m.assigned) for m in ms]


def settle(ms: list[Member], total: int, timeout: float = 20) -> None:
    n = len(ms)

    def ok() -> bool:
        if not all(m.rb.await_rebalance(0.2) for m in ms):
            return False
        counts = share(ms)
        return sum(counts) == total and max(counts) - min(counts) <= 1 and min(counts) >= total // n

    wait_for(ok, timeout, f"{n} members to share {total} partitions (now {share(ms)})")


def owner_map(zk: KazooClient, group: str, topic: str) -> dict[int, str]:
    base = paths.consumer_owners_path(group, topic)
    out = {}
    for p in zk.get_children(base) if zk.exists(base) else []:
        try:
            out[int(p)] = zk.get(f"{base}/{p}")[0].decode()
        except Exception:  # noqa: BLE001
            pass
    return out


def test_registration_and_owner_znodes_have_the_java_format(
    admin_zk: KazooClient, brokers_registered: None, members: Any
) -> None:
    topic, group = unique("fmt"), unique("g")
    make_topic(admin_zk, topic, 4)
    m = members(group, Subscription(topic_counts={topic: 2}))
    assert m.rb.await_rebalance(10)
    cid = m.rb.consumer_id
    assert re.fullmatch(re.escape(group) + r"_[^-]+(-[^-]+)*-\d{13}-[0-9a-f]{8}", cid), cid
    # the helpers name the znodes Java 0.8 reads
    assert (paths.consumer_registration_path(group, cid), paths.owner_path(group, topic, 0)) == (
        f"/consumers/{group}/ids/{cid}", f"/consumers/{group}/owners/{topic}/0")
    data, stat = admin_zk.get(paths.consumer_registration_path(group, cid))
    assert stat.ephemeralOwner == m.rb.zk.client_id[0]
    text = data.decode()
    # Field set and order as Kafka 0.8's ZookeeperConsumerConnector writes them (compact JSON).
    assert re.fullmatch(
        r'\{"version":1,"subscription":\{"' + re.escape(topic) + r'":2\},"pattern":"static","timestamp":"\d{13}"\}',
        text,
    ), text
    assert list(json.loads(text)) == ["version", "subscription", "pattern", "timestamp"]
    # Owners: ephemeral, holding "<consumer_id>-<thread>"; range over 2 threads: 0,1 | 2,3.
    own = owner_map(admin_zk, group, topic)
    assert own == {0: f"{cid}-0", 1: f"{cid}-0", 2: f"{cid}-1", 3: f"{cid}-1"}
    for p in range(4):
        _, ostat = admin_zk.get(paths.owner_path(group, topic, p))
        assert ostat.ephemeralOwner == m.rb.zk.client_id[0]


def test_wildcard_registration_format(admin_zk: KazooClient, brokers_registered: None, members: Any) -> None:
    group = unique("g")
    prefix = unique("wl").replace("-", "_")
    make_topic(admin_zk, f"{prefix}.a", 2)
    w = members(group, Subscription(topic_filter=Whitelist(rf"{prefix}\..*"), num_streams=3))
    assert w.rb.await_rebalance(10)
    data, _ = admin_zk.get(paths.consumer_registration_path(group, w.rb.consumer_id))
    obj = json.loads(data)
    assert list(obj) == ["version", "subscription", "pattern", "timestamp"]
    assert obj["pattern"] == "white_list" and obj["subscription"] == {rf"{prefix}\..*": 3}

    group2 = unique("g")
    b = members(group2, Subscription(topic_filter=Blacklist("x, y"), num_streams=1))
    assert b.rb.await_rebalance(10)
    obj = json.loads(admin_zk.get(paths.consumer_registration_path(group2, b.rb.consumer_id))[0])
    assert obj["pattern"] == "black_list" and obj["subscription"] == {"x|y": 1}


def test_members_join_and_leave_partitions_move_without_overlap(
    admin_zk: KazooClient, brokers_registered: None, members: Any, ledger: Ledger
) -> None:
    topic, group = unique("jl"), unique("g")
    make_topic(admin_zk, topic, 12)
    sub = Subscription(topic_counts={topic: 1})
    ms = [members(group, sub)]
    settle(ms, 12)
    for _ in range(4):
        ms.append(members(group, sub))
        settle(ms, 12)
    assert sorted(share(ms)) == [2, 2, 2, 3, 3]
    # Leaving: a clean close releases at once; the others take over.
    for _ in range(3):
        gone = ms.pop(1)
        gone.close()
        settle(ms, 12)
    assert share(ms) == [6, 6]
    own = owner_map(admin_zk, group, topic)
    assert Counter(t.rsplit("-", 1)[0] for t in own.values()) == {m.rb.consumer_id: 6 for m in ms}
    # Every revocation before a release was a committing one (clean membership changes).
    assert all(commit for m in ms for _, commit in m.revocations)
    assert not ledger.violations


def test_owner_watcher_never_sees_a_partition_owned_twice(
    admin_zk: KazooClient, brokers_registered: None, members: Any, zk_connect: str
) -> None:
    topic, group = unique("ow"), unique("g")
    make_topic(admin_zk, topic, 12)
    base = paths.consumer_owners_path(group, topic)
    admin_zk.ensure_path(base)
    seen: dict[int, dict[int, str]] = {}  # partition -> {czxid: owner}
    problems: list[str] = []
    lock = threading.Lock()
    watched: set[int] = set()
    watcher = KazooClient(zk_connect)
    watcher.start(timeout=15)

    def watch_partition(p: int) -> None:
        @watcher.DataWatch(f"{base}/{p}")
        def on_data(data: bytes | None, stat: Any, event: Any = None) -> None:
            if data is None or stat is None:
                return
            with lock:
                per = seen.setdefault(p, {})
                old = per.get(stat.czxid)
                if old is not None and old != data.decode():
                    problems.append(f"partition {p}: node {stat.czxid} changed owner {old} -> {data!r}")
                per[stat.czxid] = data.decode()

    @watcher.ChildrenWatch(base)
    def on_children(children: list[str]) -> None:
        for c in children:
            p = int(c)
            if p not in watched:
                watched.add(p)
                watch_partition(p)

    sub = Subscription(topic_counts={topic: 2})
    ms = [members(group, sub) for _ in range(2)]
    settle(ms, 12)
    for _ in range(3):
        extra = members(group, sub)
        ms.append(extra)
        settle(ms, 12)
        ms.remove(extra)
        extra.close()
        settle(ms, 12)
    watcher.stop()
    watcher.close()
    assert not problems, problems
    assert len(seen) == 12
    # Ownership moved (several nodes per partition were observed), always through a release.
    assert sum(len(v) for v in seen.values()) > 12


def test_claim_waits_for_the_previous_owner_without_releasing_anything(
    admin_zk: KazooClient, brokers_registered: None, members: Any, zk_connect: str
) -> None:
    topic, group = unique("cw"), unique("g")
    make_topic(admin_zk, topic, 4)
    squatter = KazooClient(zk_connect)
    squatter.start(timeout=15)
    # A previous owner that has not released partition 3 yet.
    squatter.create(paths.owner_path(group, topic, 3), b"ghost-0", ephemeral=True, makepath=True)
    m = members(group, Subscription(topic_counts={topic: 1}))
    wait_for(lambda: len(m.assigned) == 3, 10, "the three free partitions to be claimed")
    assert not m.rb.stable
    assert "claim_conflict" in m.events
    # The behaviour under test is an absence: for this window the waiting claim releases nothing.
    time.sleep(0.5)
    assert len(m.assigned) == 3 and not m.revocations, "nothing released while waiting"
    t0 = time.monotonic()
    squatter.stop()  # session closed: its ephemeral owner node goes away
    squatter.close()
    assert m.rb.await_rebalance(10)
    assert len(m.assigned) == 4
    assert time.monotonic() - t0 < 3, "a release wakes the waiting claim (owner-node watch)"


def test_claims_out_of_retries_await_release_without_reporting_stable(
    admin_zk: KazooClient, brokers_registered: None, members: Any, zk_connect: str
) -> None:
    topic, group = unique("ar"), unique("g")
    make_topic(admin_zk, topic, 4)
    squatter = KazooClient(zk_connect)
    squatter.start(timeout=15)
    squatter.create(paths.owner_path(group, topic, 0), b"ghost-0", ephemeral=True, makepath=True)
    m = members(group, Subscription(topic_counts={topic: 1}), rebalance_max_retries=1)
    # Two claim attempts, then the round ends with partition 0 still held elsewhere.
    wait_for(lambda: m.rb.state is MemberState.AWAITING_RELEASE, 10, "the round to give up on partition 0")
    assert "rebalance_incomplete" in m.events
    assert len(m.assigned) == 3 and not m.revocations, "nothing released while waiting"
    assert not m.rb.await_rebalance(0.5), "a share with a partition missing is not stable"
    squatter.stop()  # session closed: its owner node goes away, the watch starts a round
    squatter.close()
    assert m.rb.await_rebalance(10)
    assert m.rb.state is MemberState.STABLE and len(m.assigned) == 4


def test_expired_session_reregisters_and_takes_its_share_back(
    admin_zk: KazooClient, brokers_registered: None, members: Any, zk_connect: str, ledger: Ledger
) -> None:
    topic, group = unique("ex"), unique("g")
    make_topic(admin_zk, topic, 12)
    sub = Subscription(topic_counts={topic: 1})
    a, b = members(group, sub), members(group, sub)
    settle([a, b], 12)
    old_session = a.rb.zk.client_id
    # Expire a's session on the server: attach to it from another client and close it.
    thief = KazooClient(zk_connect, client_id=old_session)
    thief.start(timeout=15)
    thief.stop()
    thief.close()
    wait_for(lambda: a.rb.zk.client_id is not None and a.rb.zk.client_id[0] != old_session[0], 20, "a new session")
    settle([a, b], 12)
    assert a.rb.state is MemberState.STABLE
    assert a.pauses >= 1
    # The session's partitions were given up without a commit (a new owner may be committing).
    assert any(not commit for _, commit in a.revocations)
    data, stat = admin_zk.get(paths.consumer_registration_path(group, a.rb.consumer_id))
    assert stat.ephemeralOwner == a.rb.zk.client_id[0]
    own = owner_map(admin_zk, group, topic)
    assert Counter(t.rsplit("-", 1)[0] for t in own.values()) == {a.rb.consumer_id: 6, b.rb.consumer_id: 6}
    assert not ledger.violations


def test_client_side_session_loss_cleans_its_own_leftovers_at_once(
    admin_zk: KazooClient, brokers_registered: None, members: Any
) -> None:
    topic, group = unique("lo"), unique("g")
    make_topic(admin_zk, topic, 6)
    a = members(group, Subscription(topic_counts={topic: 1}))
    assert a.rb.await_rebalance(10)
    old = a.rb.zk.client_id[0]
    t0 = time.monotonic()
    # kazoo's test hook: the client believes its session expired, while the server still holds
    # it (and its ephemeral nodes) until the session timeout.
    a.rb.zk._call(_SESSION_EXPIRED, None)
    wait_for(lambda: a.rb.zk.client_id is not None and a.rb.zk.client_id[0] != old, 20, "a new session")
    wait_for(lambda: a.rb.stable and len(a.assigned) == 6, 20, "share regained")
    took = time.monotonic() - t0
    assert took < SESSION_MS / 1000, f"took {took:.2f}s: it waited for the server to expire leftovers"
    for p in range(6):
        _, stat = admin_zk.get(paths.owner_path(group, topic, p))
        assert stat.ephemeralOwner == a.rb.zk.client_id[0]


def test_whitelist_member_picks_up_new_topics_and_blacklist_excludes(
    admin_zk: KazooClient, brokers_registered: None, members: Any
) -> None:
    prefix = unique("wt").replace("-", "_")
    make_topic(admin_zk, f"{prefix}.one", 3)
    make_topic(admin_zk, f"{prefix}.skip", 3)
    w = members(unique("g"), Subscription(topic_filter=Whitelist(rf"{prefix}\.(one|two)"), num_streams=2))
    b = members(unique("g"), Subscription(topic_filter=Blacklist(rf"(?!{prefix}\.).*|{prefix}\.skip"), num_streams=1))
    wait_for(lambda: w.rb.stable and len(w.assigned) == 3, 10, "whitelist share")
    wait_for(lambda: b.rb.stable and len(b.assigned) == 3, 10, "blacklist share")
    assert {t for t, _ in w.assigned} == {f"{prefix}.one"}
    assert {t for t, _ in b.assigned} == {f"{prefix}.one"}
    make_topic(admin_zk, f"{prefix}.two", 2)
    wait_for(lambda: len(w.assigned) == 5, 10, "the new topic picked up")
    wait_for(lambda: len(b.assigned) == 5, 10, "the new topic picked up by the blacklist")
    assert {t for t, _ in w.assigned} == {f"{prefix}.one", f"{prefix}.two"}
    assert f"{prefix}.skip" not in {t for t, _ in b.assigned}
