"""A group on a 3-node ZooKeeper ensemble survives the ensemble leader's death.

The connect string names all three servers (``h:p1,h:p2,h:p3``). Killing the leader drops the
sessions connected to it and makes the followers stop serving until a new leader is elected;
members go SUSPENDED (they stop handing out messages), reconnect to a live server within the
session timeout with their sessions intact, resume, and the group keeps consuming: every
message produced before, during and after the election is consumed, none twice.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from hmbclient.consumer.connector import ConsumerEvent

from .conftest import PARTITIONS, Collector, unique, wait_balanced, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def ensemble() -> Iterator[Any]:
    from hmbclient.testing.zookeeper import LocalZooKeeperEnsemble

    with LocalZooKeeperEnsemble(3) as ens:
        ens.wait_for_leader()
        yield ens


@pytest.fixture(scope="module")
def lone_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("ens")), num_partitions=PARTITIONS) as b:
        yield b


def test_group_keeps_consuming_when_the_zookeeper_leader_dies(
    ensemble: Any, lone_broker: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique("ens"), unique("g")
    zk = ensemble.connect
    assert zk.count(",") == 2
    admin = KazooClient(zk)
    admin.start(timeout=15)
    producer = make_producer(lone_broker.bootstrap)
    producer.partitions(topic)
    events: list[ConsumerEvent] = []
    settings = {"metadata_broker_list": lone_broker.bootstrap, "zookeeper_session_timeout_ms": 8000}
    consumers = [make_consumer(group, zk=zk, status_listener=events.append, **settings) for _ in range(2)]
    col, done = Collector(), threading.Event()
    for c in consumers:
        col.consume(c.consumer_id, c.create_message_streams({topic: 1})[topic][0], until=done)
    wait_balanced(admin, group, topic, consumers, PARTITIONS)

    sent: list[tuple[int, bytes]] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            for p in range(PARTITIONS):
                v = f"{p}-{i}".encode()
                producer.send(topic, p, [v])
                sent.append((p, v))
            i += 1
            time.sleep(0.02)  # pacing: a steady stream across the election

    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    wait_for(lambda: len(col.messages) >= 5 * PARTITIONS, 30, "consumption under way")
    leader = ensemble.leader()
    assert leader is not None
    before = len(col.messages)
    ensemble.kill(leader)
    ensemble.wait_for_leader()
    # The group resumes: messages keep arriving after the election.
    wait_for(lambda: len(col.messages) > before + 5 * PARTITIONS, 60, "consumption after the election")
    resumed = len(col.messages)
    wait_for(lambda: len(col.messages) >= resumed + 5 * PARTITIONS, 30, "steady consumption after the election")
    stop.set()
    feeder.join(10)
    wait_for(lambda: Counter(col.values()) == Counter(sent), 60, "every message consumed")
    done.set()
    col.join(30)
    assert Counter(col.values()) == Counter(sent), "nothing lost, nothing twice"
    # Same sessions, same owners: no member lost its session or its share.
    kinds = [e.kind for e in events]
    assert "zookeeper_suspended" in kinds, kinds  # the election was felt...
    assert "zookeeper_lost" not in kinds  # ...but every session survived it
    assert all(len(c.owned_partitions()) == PARTITIONS // 2 for c in consumers)
    admin.stop()
    admin.close()
