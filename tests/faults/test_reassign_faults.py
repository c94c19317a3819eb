"""Partition reassignment through controller crashes: rounds of throttled moves, each with the
controller killed -9 while the move is in progress, a producer (acks=-1) writing all along.

Each round picks a partition and a target of two brokers that differs from its replicas,
throttles the move (so it is still going when the controller dies), starts it, kills the
controller, restarts it, removes the throttle and waits for the new controller to finish the
move. At the end every acknowledged value is read back, each partition's replicas are its last
target with a whole ISR, and no reassignment is left. The bounded version is
``tests/broker/test_reassignment.py::test_controller_killed_mid_reassignment``; this one (the
``chaos`` marker, ``make chaos``) runs several rounds on one cluster.
"""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import pytest
from kazoo.client import KazooClient
from waiting import wait_until

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer, admin, zkpaths
from hmbclient.broker import EmbeddedCluster

pytestmark = pytest.mark.filterwarnings(
    "ignore:read_text is deprecated:DeprecationWarning", "ignore:open_text is deprecated:DeprecationWarning"
)

ROUNDS = 6
PARTITIONS = 3
RATE = 200_000
RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def _read_all(cluster: EmbeddedCluster, topic: str) -> list[bytes]:
    out: list[bytes] = []
    for p in range(PARTITIONS):
        leader = admin.describe_topics(cluster.bootstrap, [topic])[p].leader
        b = cluster.broker(leader)
        c = SimpleConsumer(b.host, b.port, client_id="reassign-chaos")
        try:
            offset = 0
            while True:
                got = list(c.fetch(FetchRequest(topic, p, offset, 1 << 20)))
                if not got:
                    break
                out += [mo.message.value for mo in got]
                offset = got[-1].next_offset
        finally:
            c.close()
    return out


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_chaos_reassignments_through_controller_kills(zookeeper: Any, fault_summary: Any) -> None:
    rng = random.Random(27)
    chroot = f"{zookeeper.connect}/reassign-chaos-{uuid.uuid4().hex[:8]}"
    topic = "moves"
    zk = KazooClient(hosts=chroot)
    with EmbeddedCluster(brokers=3, zookeeper_connect=chroot, processes=True, replication_factor=2, offsets_topic_replication_factor=1,
                         replication_quota_window_num=2, zookeeper_session_timeout_ms=3000) as cluster:
        zk.start(timeout=10)
        admin.create_topic(cluster.bootstrap, topic, PARTITIONS, 2)
        cluster.await_isr(topic)
        acked: list[bytes] = []
        stop = threading.Event()
        producer = Producer(metadata_broker_list=cluster.bootstrap, request_required_acks=-1, message_send_max_retries=100,
                            retry_backoff_ms=200, request_timeout_ms=10_000)

        def write() -> None:
            i = 0
            pad = b"x" * 1000
            while not stop.is_set():
                v = f"v{i}-".encode() + pad
                try:
                    for f in producer.send(ProducerData(topic, f"k{i}".encode(), [v])):
                        f.result(timeout=60)
                    acked.append(v)
                except Exception:
                    pass  # not acknowledged: may or may not be stored
                i += 1

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        kills = 0
        try:
            for _ in range(ROUNDS):
                p = rng.randrange(PARTITIONS)
                now = tuple(zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])[p])
                choices = [t for t in ((0, 1), (1, 2), (2, 0), (1, 0), (2, 1), (0, 2)) if set(t) != set(now)]
                target = list(rng.choice(choices))
                n = len(acked)
                wait_until(lambda n=n: len(acked) >= n + 200, 60, "writes before the move")
                for b in range(3):
                    admin.incremental_alter_configs(cluster.bootstrap, "broker", str(b), dict.fromkeys(RATES, str(RATE)))
                admin.incremental_alter_configs(cluster.bootstrap, "topic", topic, dict.fromkeys(REPLICAS, "*"))
                assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, p): target}) == {(topic, p): (0, None)}
                old = cluster.controller_id()
                cluster.kill(old)
                kills += 1
                cluster.restart(old)
                for b in range(3):
                    admin.incremental_alter_configs(cluster.bootstrap, "broker", str(b), {}, delete=RATES)
                admin.incremental_alter_configs(cluster.bootstrap, "topic", topic, {}, delete=REPLICAS)
                wait_until(lambda p=p, target=target: zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])[p] == target
                           and not admin.list_partition_reassignments(cluster.bootstrap), 90, f"the move of {topic}-{p} to {target}")
                cluster.await_isr(topic, timeout_s=60)
            n = len(acked)
            wait_until(lambda: len(acked) >= n + 200, 60, "writes after the last move")
        finally:
            stop.set()
            writer.join(timeout=120)
            producer.close()
        cluster.await_isr(topic, timeout_s=60)
        held = set(_read_all(cluster, topic))
        lost = [v for v in acked if v not in held]
        fault_summary(f"reassign chaos: {ROUNDS} moves, {kills} controller kills, {len(acked)} acked, {len(lost)} lost")
        assert not lost, f"{len(lost)} acknowledged values lost, e.g. {lost[:3]}"
        zk.stop()
        zk.close()
