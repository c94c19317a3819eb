"""Rebalance convergence of a ZooKeeper consumer group: 10 consumers x 100 partitions.

    .venv/bin/python bench/groups_zk.py              # ~1-2 minutes
    .venv/bin/python bench/groups_zk.py --rounds 3   # quicker
    .venv/bin/python bench/groups_zk.py --cluster    # 3 brokers registered in ZooKeeper

Set-up: a LocalZooKeeper, an embedded broker (or a 3-broker EmbeddedCluster) with one topic of
100 partitions, a producer writing one message to every partition every 20 ms (one Produce
request per tick), and a group of 10 ConsumerConnectors (one stream each) draining on threads,
all in this process.

A *membership change* is an 11th member starting (join) or one member shutting down (leave).
From the instant of the change we measure:

* ``owned``: until ZooKeeper's owner znodes equal the range assignment of the new membership
  and every member reports ``await_rebalance`` (each owns its whole new share);
* ``consuming``: until every partition that changed owner has handed out a message through
  its *new* owner -- the new share is being consumed, end to end.

Each change is repeated ``--rounds`` times (join then leave, alternating); the table prints
medians and maxima in seconds. Target: median < 1 s from a change to the new owner consuming. For reference, Kafka 0.8's
consumer waits ``rebalance.backoff.ms`` = 2000 ms before each claim retry; the second row
runs our loop with that 0.8 setting, to show that a release wakes a waiting claim (owner-node
watch) rather than the backoff timer.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kazoo.client import KazooClient  # noqa: E402

from hmbclient.consumer.connector import Consumer, ConsumerConnector  # noqa: E402
from hmbclient.errors import ConsumerTimeoutError  # noqa: E402
from hmbclient.net import Metadata, NetClient  # noqa: E402
from hmbclient.protocol.api.base import ApiKey  # noqa: E402
from hmbclient.protocol.records import NONE, encode_records  # noqa: E402
from hmbclient.testing.zookeeper import LocalZooKeeper  # noqa: E402
from rebalance.assignors import range_assign  # noqa: E402

PARTITIONS = 100
MEMBERS = 10


class Ticker:
    """One Produce request per tick carrying one message for every partition."""

    def __init__(self, bootstrap: str, topic: str, period_s: float = 0.02) -> None:
        self.client = NetClient(bootstrap)
        self.md = Metadata(self.client)
        self.topic = topic
        self.period_s = period_s
        self.stop = threading.Event()
        self.parts = self.md.partitions_for(topic, 30_000)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _send_all(self) -> None:
        by_leader: dict[int, list[dict[str, Any]]] = {}
        now = f"{time.time():.6f}".encode()
        for p in self.parts:
            leader = self.md.leader(self.topic, p)
            if leader is None:
                self.md.refresh([self.topic])
                continue
            rec = encode_records(2, NONE, [(None, now, None)])
            by_leader.setdefault(leader, []).append({"partition": p, "records": rec})
        futures = []
        for leader, parts in by_leader.items():

            def build(versions: Any, parts: list[dict[str, Any]] = parts) -> Any:
                return versions.build(
                    ApiKey.PRODUCE, transactional_id=None, acks=1, timeout_ms=10_000,
                    topics=[{"topic": self.topic, "partitions": parts}],
                )

            futures.append(self.client.send(leader, build))
        for f in futures:
            f.result(15)

    def _run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                self._send_all()
            except Exception as exc:  # noqa: BLE001 - keep ticking
                logging.getLogger("bench").warning("produce tick failed: %s", exc)
            self.stop.wait(max(0.0, self.period_s - (time.monotonic() - t)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.client.close()


class Group:
    def __init__(self, zk: str, bootstrap: str | None, topic: str, group: str, settings: dict[str, Any]) -> None:
        self.zk, self.bootstrap, self.topic, self.group, self.settings = zk, bootstrap, topic, group, settings
        self.members: list[tuple[str, ConsumerConnector]] = []
        self.lock = threading.Lock()
        self.first_by: dict[tuple[int, str], float] = {}  # (partition, consumer_id) -> first hand-out
        self.threads: list[threading.Thread] = []

    def add(self) -> ConsumerConnector:
        props = {
            "zookeeper.connect": self.zk, "group.id": self.group, "auto.offset.reset": "largest",
            "consumer.timeout.ms": -1, "zookeeper.session.timeout.ms": 6000, "fetch.wait.max.ms": 50,
            "auto.commit.interval.ms": 1000, **self.settings,
        }
        if self.bootstrap:
            props["metadata.broker.list"] = self.bootstrap
        c = Consumer.create(props)
        stream = c.create_message_streams({self.topic: 1})[self.topic][0]
        cid = c.consumer_id

        def drain() -> None:
            try:
                for m in stream:
                    key = (m.partition, cid)
                    if key not in self.first_by:
                        with self.lock:
                            self.first_by.setdefault(key, time.monotonic())
            except (ConsumerTimeoutError, StopIteration):
                pass

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        self.threads.append(t)
        self.members.append((cid, c))
        return c

    def expected(self) -> dict[int, str]:
        threads = [f"{cid}-0" for cid, _ in self.members]
        out = {}
        for tid, tps in range_assign({self.topic: list(range(PARTITIONS))}, {self.topic: threads}).items():
            for _, p in tps:
                out[p] = tid.rsplit("-", 1)[0]
        return out

    def owners(self, admin: KazooClient) -> dict[int, str]:
        base = f"/consumers/{self.group}/owners/{self.topic}"
        res = [(p, admin.get_async(f"{base}/{p}")) for p in range(PARTITIONS)]
        out = {}
        for p, r in res:
            try:
                out[p] = r.get(10)[0].decode().rsplit("-", 1)[0]
            except Exception:  # noqa: BLE001
                pass
        return out

    def measure(self, admin: KazooClient, before: dict[int, str], t0: float, timeout: float = 30) -> tuple[float, float]:
        exp = self.expected()
        moved = {p: cid for p, cid in exp.items() if before.get(p) != cid}
        owned_at = consuming_at = None
        deadline = t0 + timeout
        while time.monotonic() < deadline and (owned_at is None or consuming_at is None):
            now = time.monotonic()
            if owned_at is None and self.owners(admin) == exp and all(c.await_rebalance(0) for _, c in self.members):
                owned_at = now
            if consuming_at is None:
                with self.lock:
                    firsts = [self.first_by.get((p, cid)) for p, cid in moved.items()]
                if all(f is not None and f >= t0 for f in firsts):
                    consuming_at = max([t0, *[f for f in firsts if f is not None]])
            time.sleep(0.005)
        if owned_at is None or consuming_at is None:
            raise SystemExit(f"did not converge within {timeout}s (owned={owned_at}, consuming={consuming_at})")
        return owned_at - t0, consuming_at - t0

    def shutdown(self) -> None:
        for _, c in self.members:
            c.shutdown()


def run_case(label: str, zk: str, bootstrap: str | None, topic: str, rounds: int, settings: dict[str, Any]) -> dict[str, list[float]]:
    group = Group(zk, bootstrap, topic, f"bench-{label}-{int(time.time() * 1000)}", settings)
    admin = KazooClient(zk)
    admin.start(15)
    results: dict[str, list[float]] = {"join owned": [], "join consuming": [], "leave owned": [], "leave consuming": []}
    try:
        t0 = time.monotonic()
        for _ in range(MEMBERS):
            group.add()
        group.measure(admin, {}, t0, timeout=60)
        time.sleep(0.5)
        for r in range(rounds):
            before = group.owners(admin)
            with group.lock:
                group.first_by.clear()
            if r % 2 == 0:
                t0 = time.monotonic()
                group.add()
                kind = "join"
            else:
                cid, c = group.members.pop(len(group.members) // 2)
                t0 = time.monotonic()
                c.shutdown()
                kind = "leave"
            owned, consuming = group.measure(admin, before, t0)
            results[f"{kind} owned"].append(owned)
            results[f"{kind} consuming"].append(consuming)
            print(f"  {label:<22} {kind:<5} owned {owned:6.3f}s  consuming {consuming:6.3f}s", flush=True)
            time.sleep(0.3)
    finally:
        group.shutdown()
        admin.stop()
        admin.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="membership changes per configuration (join/leave alternate)")
    ap.add_argument("--cluster", action="store_true", help="3 brokers registered in ZooKeeper instead of one")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)

    from hmbclient.broker import EmbeddedBroker

    with LocalZooKeeper() as zk, tempfile.TemporaryDirectory() as tmp:
        if args.cluster:
            from hmbclient.broker import EmbeddedCluster

            broker_cm: Any = EmbeddedCluster(brokers=3, zookeeper_connect=zk.connect, num_partitions=PARTITIONS, log_dir=tmp)
        else:
            broker_cm = EmbeddedBroker(port=0, log_dir=tmp, num_partitions=PARTITIONS)
        with broker_cm as brokers:
            bootstrap = brokers.bootstrap
            topic = "bench-rebalance"
            ticker = Ticker(bootstrap, topic)
            ticker.thread.start()
            md_list = None if args.cluster else bootstrap
            print(f"{MEMBERS} consumers x {PARTITIONS} partitions, {args.rounds} membership changes per row, "
                  f"{'3 brokers in ZooKeeper' if args.cluster else 'one broker (partitions from Metadata)'}")
            rows = []
            try:
                for label, settings in (
                    ("hmbclient defaults", {}),
                    ("0.8 backoff (2000 ms)", {"rebalance.backoff.ms": 2000}),
                ):
                    rows.append((label, run_case(label.split()[0], zk.connect, md_list, topic, args.rounds, settings)))
            finally:
                ticker.close()
    print()
    print(f"{'configuration':<24}{'change':<18}{'median s':>10}{'max s':>10}{'n':>4}")
    for label, res in rows:
        for key, vals in res.items():
            if vals:
                print(f"{label:<24}{key:<18}{statistics.median(vals):>10.3f}{max(vals):>10.3f}{len(vals):>4}")
    base = rows[0][1]
    allv = base["join consuming"] + base["leave consuming"]
    print(f"\nmedian convergence (consuming, defaults): {statistics.median(allv):.3f}s  (target < 1 s)")


if __name__ == "__main__":
    main()
