"""The 11th member joining a 10-member group over 100 partitions: how long until all 11 consume.

    .venv/bin/python bench/groups.py              # 5 rounds per row, ~2-3 minutes
    .venv/bin/python bench/groups.py --rounds 1   # a quick look

Three rows on one embedded broker (``group.initial.rebalance.delay.ms=0``), one topic of 100
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import loadavg  # noqa: E402
from groups_zk import Ticker  # noqa: E402

from hmbclient.consumer.connector import Consumer, ConsumerEvent  # noqa: E402
from hmbclient.errors import ConsumerTimeoutError  # noqa: E402

PARTITIONS = 100
MEMBERS = 10
SESSION_MS = 6000
HEARTBEAT_MS = 200


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="joins of an 11th member per row (default 5)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.CRITICAL)

    from hmbclient.broker import EmbeddedBroker
    from hmbclient.testing.zookeeper import LocalZooKeeper

    rows: list[tuple[str, list[float]]] = []
    load_start = loadavg()
    with LocalZooKeeper() as zk, tempfile.TemporaryDirectory() as tmp, EmbeddedBroker(
        port=0, log_dir=tmp, num_partitions=PARTITIONS, group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=1000,
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
              f"group.initial.rebalance.delay.ms=0, {args.rounds} rounds per row")
        try:
            rows.append(("hmbclient broker", run_row("hmbclient broker", lambda: HmbMember(broker_props, topic), args.rounds)))
            rows.append(("kafka-python", run_row("kafka-python", lambda: KafkaPythonMember(broker.bootstrap, f"bench-kp-{stamp}", topic), args.rounds)))
            rows.append(("hmbclient zookeeper", run_row("hmbclient zookeeper", lambda: HmbMember(zk_props, topic), args.rounds)))
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
