"""Rebalances of a 10-member group over 100 partitions: what an 11th member's join costs the
members whose partitions do not move (eager vs cooperative), what a rolling restart of 10 static
members costs (rebalances counted), and how long until all 11 consume after a join.

    .venv/bin/python bench/groups.py                        # every scenario, ~3-4 minutes
    .venv/bin/python bench/groups.py --rounds 1             # a quick look
    .venv/bin/python bench/groups.py --scenarios pause,restart

Scenario ``pause`` (hmbclient's broker group members, ``BrokerGroupMember``, as threads of this
process, each with its own connection; the members journal their assign/revoke callbacks and do
not fetch): 10 members settle; at ``t0`` an 11th joins; once the 11 hold the 100 partitions (none
twice) the round ends. A member's *unmoved* partitions are those it owned before ``t0`` and still
owns after; its pause is the longest time one of them was not owned (revoked until assigned
back), the time a fetching consumer could not consume them, a lower bound of its consumption
pause. Rows: ``range`` (eager: every member revokes everything, then gets most of it back),
``cooperative-sticky`` (goal: 0 ms) and ``consumer (KIP-848)`` (``ConsumerProtocolMember``,
``group.protocol=consumer``: the coordinator's uniform assignor, revocations acknowledged by
heartbeat, the heartbeat interval the broker's ``group.consumer.heartbeat.interval.ms``, here
the same 200 ms; goal: 0 ms; its "rebalances" are group epoch bumps). Also printed: until all 11 hold the partitions, and the
rebalances (generations) a join took (cooperative: two, the follow-up hands over what was
revoked). The 11th then leaves and the 10 settle before the next round.

Scenario ``restart``: 10 members settle, then each in turn is closed and a new member is started
in its place (a rolling restart; the next one only once the new member owns partitions again).
Rows: static members (``group.instance.id``; goal: no rebalance at all) and dynamic ones
(LeaveGroup on close, a new member id on start). Printed: rebalances (the group's generation as
the members hold it at the end minus at the start) and the median time from closing a member to
the group holding every partition again.

Scenario ``consume`` (the earlier figure, connectors that fetch): until all 11 *consume* after
the join of an 11th, with these rows:

on one embedded broker (``group.initial.rebalance.delay.ms=0``), one topic of 100
partitions, a producer writing one message to every partition every 20 ms (``groups_zk.Ticker``):

* ``hmbclient broker``: hmbclient ConsumerConnectors with ``group.protocol=broker`` (range), the
  group balanced by the broker's group coordinator;
* ``kafka-python``: KafkaConsumers (range) in the same kind of group on the same broker;
* ``hmbclient zookeeper``: hmbclient ConsumerConnectors balanced through ZooKeeper (a
  LocalZooKeeper), as ``bench/groups_zk.py`` runs them.

Broker-mode members hear of a rebalance through their next heartbeat; both kinds use the same
``heartbeat.interval.ms`` (200) and ``session.timeout.ms`` (6000).

Readiness rule (bench/_common.py), as far as each client lets it apply: the 11th member is
connected to the broker (the leader of every partition and the coordinator, one broker) before
``t0`` where the client has a call for that. kafka-python's KafkaConsumer connects, probes
ApiVersions and fetches metadata (``topics()``) before ``t0``; it subscribes at ``t0``. hmbclient's
ConsumerConnector connects nothing until its streams are created (its documented contract), so
its connection set-up -- a few milliseconds on 127.0.0.1 -- stays inside its figure, in both
modes: the one difference left weighs against hmbclient.

Per round: 10 members settle; at ``t0`` an 11th starts. Converged once the 11 members' owned
partitions (tracked from their assign/revoke callbacks) split the 100 partitions with none
twice, and every member has handed out a message after ``t0`` and after its latest
assignment; the figure is the latest of those first hand-outs minus ``t0``. The 11th member is
then shut down and the group settles again before the next round. Medians and maxima are
printed (and minima), with the machine's load at start and end; nothing asserted. Goal: broker mode <= ZooKeeper mode, both < 1 s.

(``bench/groups_zk.py`` measures a narrower thing -- until each partition that *changed owner*
is consumed by its new owner; here every member must consume again, which for the eager broker
protocol, where every member gives up everything, is the honest figure.)
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import loadavg  # noqa: E402
from groups_zk import Ticker  # noqa: E402

from hmbclient.consumer.connector import Consumer, ConsumerEvent  # noqa: E402
from hmbclient.consumer.group import BrokerGroupMember  # noqa: E402
from hmbclient.consumer.group_consumer import ConsumerProtocolMember  # noqa: E402
from hmbclient.consumer.offsets import KafkaOffsetStorage  # noqa: E402
from hmbclient.errors import ConsumerTimeoutError  # noqa: E402
from hmbclient.net import Metadata, NetClient  # noqa: E402
from rebalance.rebalancer import Subscription  # noqa: E402

PARTITIONS = 100
MEMBERS = 10
SESSION_MS = 6000
HEARTBEAT_MS = 200
#: the pause row of group.protocol=consumer (its "assignor" name in the table)
KIP848 = "consumer (KIP-848)"


class Member:
    """What the measurement needs of any member: owned partitions and its first hand-out since
    a reset (``t0``) or its latest assignment, whichever is later."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.handed_after: float | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def assigned(self, partitions: set[int]) -> None:
        with self.lock:
            self.owned |= partitions
            self.handed_after = None

    def revoked(self, partitions: set[int]) -> None:
        with self.lock:
            self.owned -= partitions

    def handed_out(self) -> None:
        if self.handed_after is None:
            now = time.monotonic()
            with self.lock:
                if self.handed_after is None:
                    self.handed_after = now

    def reset(self) -> None:
        with self.lock:
            self.handed_after = None

    def join(self) -> None:
        """Start joining the group (``t0`` is taken just before)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class HmbMember(Member):
    def __init__(self, props: dict[str, Any], topic: str) -> None:
        super().__init__()
        self.connector = Consumer.create(props, status_listener=self._event)
        self.topic = topic

    def join(self) -> None:
        """Create the stream: the connector connects and joins here."""
        stream = self.connector.create_message_streams({self.topic: 1})[self.topic][0]

        def drain() -> None:
            while not self.stop.is_set():
                try:
                    for _ in stream:
                        self.handed_out()
                    return  # StopIteration: shut down
                except ConsumerTimeoutError:
                    continue

        self.thread = threading.Thread(target=drain, daemon=True)
        self.thread.start()

    def _event(self, e: ConsumerEvent) -> None:
        if e.kind == "partitions_assigned":
            self.assigned({p for _, p in e.fields["partitions"]})
        elif e.kind == "partitions_revoked":
            self.revoked({p for _, p in e.fields["partitions"]})

    def close(self) -> None:
        self.stop.set()
        self.connector.shutdown()


class KafkaPythonMember(Member):
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__()
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.revoked({tp.partition for tp in revoked})

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.assigned({tp.partition for tp in assigned})

        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="latest",
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            partition_assignment_strategy=[RangePartitionAssignor], fetch_max_wait_ms=50,
        )
        consumer.topics()  # connected, ApiVersions and metadata: before t0 (module docstring)
        self.consumer, self.listener, self.topic = consumer, Listener(), topic

    def join(self) -> None:
        """Subscribe and poll: the join starts here."""
        consumer = self.consumer
        consumer.subscribe([self.topic], listener=self.listener)

        def run() -> None:
            try:
                while not self.stop.is_set():
                    if consumer.poll(timeout_ms=50):
                        self.handed_out()
            finally:
                consumer.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)
        else:
            self.consumer.close()


def converged(members: list[Member]) -> float | None:
    owned: list[set[int]] = []
    latest = 0.0
    for m in members:
        with m.lock:
            if m.handed_after is None or not m.owned:
                return None
            owned.append(set(m.owned))
            latest = max(latest, m.handed_after)
    if sum(len(s) for s in owned) != PARTITIONS or set().union(*owned) != set(range(PARTITIONS)):
        return None
    return latest


def wait_converged(members: list[Member], t0: float, timeout: float = 60) -> float:
    for m in members:
        m.reset()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = converged(members)
        if at is not None:
            return at - t0
        time.sleep(0.005)
    raise SystemExit(f"{len(members)} members did not converge within {timeout}s: "
                     f"{[(len(m.owned), m.handed_after) for m in members]}")


def run_row(label: str, make: Callable[[], Member], rounds: int) -> list[float]:
    members = [make() for _ in range(MEMBERS)]
    for m in members:
        m.join()
    out: list[float] = []
    try:
        wait_converged(members, time.monotonic(), timeout=120)
        for _ in range(rounds):
            time.sleep(0.5)
            # Reset before the join: hand-outs of the 10 from before t0 do not count.
            for m in members:
                m.reset()
            joining = make()  # connected where the client allows it (module docstring)
            members.append(joining)
            t0 = time.monotonic()
            joining.join()
            seconds = wait_converged(members, t0)
            out.append(seconds)
            print(f"  {label:<22} join of member 11: all consuming after {seconds:6.3f}s", flush=True)
            members.pop().close()
            wait_converged(members, time.monotonic(), timeout=120)
    finally:
        for m in members:
            m.close()
    return out


# ---------------------------------------------------------------- scenarios pause and restart


class GroupMember:
    """A bare ``BrokerGroupMember`` whose listener journals ownership: per partition, since when
    it is owned, and the longest time it was not owned since :meth:`mark`."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **options: Any) -> None:
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.revoked_at: dict[int, float] = {}
        self.gap: dict[int, float] = {}
        self.client = NetClient(bootstrap, client_id=name, request_timeout_ms=10_000, name=f"io-{name}")
        self.metadata = Metadata(self.client, allow_auto_topic_creation=False)
        storage = KafkaOffsetStorage(self.client, group)
        self.member: Any
        if options.get("assignor") == KIP848:
            # group.protocol=consumer: the coordinator assigns (its uniform assignor) and sets
            # the heartbeat interval (the broker's group.consumer.heartbeat.interval.ms)
            self.member = ConsumerProtocolMember(
                client=self.client, offsets=storage, group=group, consumer_id=name,
                subscription=Subscription(topic_counts={topic: 1}), listener=self,
                metadata_partitions=self._partitions, remote_assignor="uniform", session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=30_000, retry_backoff_ms=50,
            )
        else:
            self.member = BrokerGroupMember(
                client=self.client, offsets=storage, group=group, consumer_id=name,
                subscription=Subscription(topic_counts={topic: 1}), listener=self,
                metadata_partitions=self._partitions, session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS, rebalance_timeout_ms=30_000, retry_backoff_ms=50, **options,
            )
        storage.generation = self.member.commit_generation

    def _partitions(self, topics: list[str] | None) -> dict[str, list[int]]:
        view = self.metadata.refresh(topics, timeout_ms=10_000)
        return {n: sorted(i.partitions) for n, i in view.topics.items() if (topics is None or n in topics) and i.partitions}

    # the OwnershipListener
    def on_pause(self) -> None:
        pass

    def on_resume(self) -> None:
        pass

    def on_brokers_changed(self, brokers: Any) -> None:
        pass

    def on_revoke(self, partitions: Mapping[tuple[str, int], str], commit: bool) -> None:
        now = time.monotonic()
        with self.lock:
            for _, p in partitions:
                self.owned.discard(p)
                self.revoked_at[p] = now

    def on_assign(self, partitions: Mapping[tuple[str, int], str]) -> None:
        now = time.monotonic()
        with self.lock:
            for _, p in partitions:
                self.owned.add(p)
                since = self.revoked_at.pop(p, None)
                if since is not None:
                    self.gap[p] = max(self.gap.get(p, 0.0), now - since)

    def mark(self) -> set[int]:
        with self.lock:
            self.revoked_at.clear()
            self.gap.clear()
            return set(self.owned)

    def pause_of(self, partitions: set[int]) -> float:
        """The longest time one of ``partitions`` was not owned since :meth:`mark`."""
        with self.lock:
            return max((self.gap.get(p, 0.0) for p in partitions), default=0.0)

    def close(self) -> None:
        try:
            self.member.close()
        finally:
            self.client.close()


def settled(members: list[GroupMember]) -> bool:
    owned: list[int] = []
    for m in members:
        if not m.member.stable:
            return False
        with m.lock:
            owned.extend(m.owned)
    generations = {m.member.generation_id for m in members}
    return len(generations) == 1 and sorted(owned) == list(range(PARTITIONS))


def wait_settled(members: list[GroupMember], timeout: float = 90) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if settled(members):
            return time.monotonic()
        time.sleep(0.005)
    raise SystemExit(f"{len(members)} members did not settle within {timeout}s: "
                     f"{[(len(m.owned), m.member.state.name, m.member.generation_id) for m in members]}")


def pause_row(bootstrap: str, topic: str, assignor: str, rounds: int, stamp: int) -> tuple[list[float], list[float], list[int]]:
    """(pauses of unmoved members in s, one per member per round; until settled in s; rebalances per join)."""
    slug = assignor.split()[0]
    group = f"bench-pause-{slug}-{stamp}"
    members = [GroupMember(bootstrap, group, topic, f"{slug}-{i}", assignor=assignor) for i in range(MEMBERS)]
    pauses: list[float] = []
    settle: list[float] = []
    rebalances: list[int] = []
    try:
        for m in members:
            m.member.start()
        wait_settled(members, 120)
        for _ in range(rounds):
            before = {id(m): m.mark() for m in members}
            generation = members[0].member.generation_id
            joining = GroupMember(bootstrap, group, topic, f"{slug}-11", assignor=assignor)
            t0 = time.monotonic()
            joining.member.start()
            done = wait_settled([*members, joining])
            settle.append(done - t0)
            rebalances.append(members[0].member.generation_id - generation)
            row = []
            for m in members:
                with m.lock:
                    unmoved = before[id(m)] & m.owned
                row.append(m.pause_of(unmoved))
            pauses.extend(row)
            print(f"  {assignor:<20} join: unmoved members paused median {statistics.median(row) * 1000:7.1f} ms, "
                  f"max {max(row) * 1000:7.1f} ms; all 11 hold the partitions after {settle[-1]:.3f}s, "
                  f"{rebalances[-1]} rebalance(s)", flush=True)
            joining.close()
            wait_settled(members)
    finally:
        for m in members:
            m.close()
    return pauses, settle, rebalances


def restart_row(bootstrap: str, topic: str, static: bool, stamp: int) -> tuple[int, list[float]]:
    """(rebalances during a rolling restart of 10, seconds each restarted member took to own again)."""
    kind = "static" if static else "dynamic"
    group = f"bench-restart-{kind}-{stamp}"

    def make(i: int, n: int) -> GroupMember:
        instance = {"group_instance_id": f"instance-{i}"} if static else {}
        return GroupMember(bootstrap, group, topic, f"{kind}-{i}-{n}", **instance)

    members = [make(i, 0) for i in range(MEMBERS)]
    took: list[float] = []
    try:
        for m in members:
            m.member.start()
        wait_settled(members, 120)
        start_generation = members[0].member.generation_id
        for i in range(MEMBERS):
            members[i].close()
            t0 = time.monotonic()
            members[i] = make(i, 1)
            members[i].member.start()
            took.append(wait_settled(members) - t0)
        end_generation = max(m.member.generation_id for m in members)
    finally:
        for m in members:
            m.close()
    rebalances = end_generation - start_generation
    print(f"  {kind:<20} rolling restart of {MEMBERS}: {rebalances} rebalance(s); a restarted member "
          f"owned partitions again after a median {statistics.median(took):.3f}s (max {max(took):.3f}s)", flush=True)
    return rebalances, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="joins of an 11th member per row (default 5)")
    ap.add_argument("--scenarios", default="pause,restart,consume", help="comma-separated: pause, restart, consume")
    args = ap.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    scenarios = set(args.scenarios.split(","))
    if "pause" in scenarios or "restart" in scenarios:
        run_member_scenarios(args.rounds, scenarios)
    if "consume" in scenarios:
        run_consume(args.rounds)


def run_member_scenarios(rounds: int, scenarios: set[str]) -> None:
    from hmbclient.broker import EmbeddedBroker

    load_start = loadavg()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(
        port=0, log_dir=tmp, num_partitions=PARTITIONS, group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=1000, group_consumer_heartbeat_interval_ms=HEARTBEAT_MS,
    ) as broker:
        topic = "bench-rebalance"
        creator = NetClient(broker.bootstrap)
        try:
            Metadata(creator).partitions_for(topic, 30_000)  # auto-created with num.partitions
        finally:
            creator.close()
        stamp = int(time.time() * 1000)
        print(f"{MEMBERS} members of hmbclient's broker group member (threads), {PARTITIONS} partitions, "
              f"one embedded broker, heartbeat {HEARTBEAT_MS} ms, session {SESSION_MS} ms")
        if "pause" in scenarios:
            results = {a: pause_row(broker.bootstrap, topic, a, rounds, stamp) for a in ("range", "cooperative-sticky", KIP848)}
            print(f"\n{'11th joins':<22}{'pause median ms':>16}{'pause max ms':>14}{'settled median s':>18}{'rebalances':>12}")
            for assignor, (pauses, settle, rebalances) in results.items():
                print(f"{assignor:<22}{statistics.median(pauses) * 1000:>16.1f}{max(pauses) * 1000:>14.1f}"
                      f"{statistics.median(settle):>18.3f}{statistics.median(rebalances):>12}")
        if "restart" in scenarios:
            print()
            static = restart_row(broker.bootstrap, topic, True, stamp)
            dynamic = restart_row(broker.bootstrap, topic, False, stamp)
            print(f"\nrolling restart of {MEMBERS}: static {static[0]} rebalance(s) (goal 0), dynamic {dynamic[0]}")
    print(f"load (/proc/loadavg) at start: {load_start}; at end: {loadavg()} ({os.cpu_count()} cores)\n")


def run_consume(rounds: int) -> None:
    from hmbclient.broker import EmbeddedBroker
    from hmbclient.testing.zookeeper import LocalZooKeeper

    rows: list[tuple[str, list[float]]] = []
    load_start = loadavg()
    with LocalZooKeeper() as zk, tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(
        port=0, log_dir=tmp, num_partitions=PARTITIONS, group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=1000, group_consumer_heartbeat_interval_ms=HEARTBEAT_MS,
    ) as broker:
        topic = "bench-groups"
        ticker = Ticker(broker.bootstrap, topic)
        ticker.thread.start()
        common = {"auto.offset.reset": "largest", "consumer.timeout.ms": 200, "fetch.wait.max.ms": 50,
                  "auto.commit.interval.ms": 1000}
        stamp = int(time.time() * 1000)
        broker_props = {**common, "group.protocol": "broker", "bootstrap.servers": broker.bootstrap,
                        "group.id": f"bench-broker-{stamp}", "session.timeout.ms": SESSION_MS,
                        "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": "range"}
        zk_props = {**common, "zookeeper.connect": zk.connect, "metadata.broker.list": broker.bootstrap,
                    "group.id": f"bench-zk-{stamp}", "zookeeper.session.timeout.ms": SESSION_MS}
        print(f"{MEMBERS} members + 1 joining, {PARTITIONS} partitions, one embedded broker, "
              f"group.initial.rebalance.delay.ms=0, {rounds} rounds per row")
        try:
            rows.append(("hmbclient broker", run_row("hmbclient broker", lambda: HmbMember(broker_props, topic), rounds)))
            rows.append(("kafka-python", run_row("kafka-python", lambda: KafkaPythonMember(broker.bootstrap, f"bench-kp-{stamp}", topic), rounds)))
            rows.append(("hmbclient zookeeper", run_row("hmbclient zookeeper", lambda: HmbMember(zk_props, topic), rounds)))
        finally:
            ticker.close()
    print()
    print(f"{'members':<24}{'median s':>10}{'min s':>10}{'max s':>10}{'n':>4}")
    for label, vals in rows:
        print(f"{label:<24}{statistics.median(vals):>10.3f}{min(vals):>10.3f}{max(vals):>10.3f}{len(vals):>4}")
    medians = {label: statistics.median(vals) for label, vals in rows}
    print(f"\ngoal: broker mode <= ZooKeeper mode, both < 1 s -> broker {medians['hmbclient broker']:.3f}s, "
          f"ZooKeeper {medians['hmbclient zookeeper']:.3f}s")
    print(f"load (/proc/loadavg) at start: {load_start}; at end: {loadavg()} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
