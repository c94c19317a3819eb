"""One consumer group on Apache Kafka 4.x shared by hmbclient's ConsumerConnector
(``group.protocol=broker``: JoinGroup/SyncGroup/Heartbeat through Kafka's coordinator) and
Kafka's own VerifiableConsumer (the classic protocol, RangeAssignor): members join one after
the other, one leaves, and every message is delivered to some member (duplicates allowed only
around a rebalance, so they are not counted). Both members hold partitions at the same time,
which only happens if Kafka accepted our member's JoinGroup/SyncGroup in the Java member's group.

Also the seeds' design on a modern broker: two ConsumerConnectors balanced through a separate
ZooKeeper (``zookeeper.connect`` + ``metadata.broker.list``) fetching from Kafka 4.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from waiting import wait_until

from hmbclient import Consumer, Producer, ProducerData, admin
from hmbclient.errors import ConsumerTimeoutError
from hmbclient.testing import kafka_java_process

from .helpers import unique, zookeeper_owners


class JavaMember:
    """A VerifiableConsumer (classic protocol) whose JSON events are collected by a thread."""

    def __init__(self, bootstrap: str, topic: str, group: str, stderr_path: str) -> None:
        self.values: list[str] = []
        self.assigned: list[list[int]] = []
        self.proc = kafka_java_process(
            "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
            "--group-id", group, "--group-protocol", "classic", "--verbose", "--enable-autocommit",
            "--reset-policy", "earliest", "--session-timeout", "10000", stderr_path=stderr_path)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("name") == "record_data":
                self.values.append(event["value"])
            elif event.get("name") == "partitions_assigned":
                self.assigned.append(sorted(p["partition"] for p in event["partitions"]))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._thread.join(10)


class OurMember:
    """hmbclient's ConsumerConnector, group.protocol=broker, iterating in a thread."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.values: list[str] = []
        self.partitions: set[int] = set()
        self.connector = Consumer.create({
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "broker",
            "partition.assignment.strategy": "range", "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 200, "auto.commit.interval.ms": 200})
        self._stop = threading.Event()
        self.stream = self.connector.create_message_streams({topic: 1})[topic][0]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for mam in self.stream:
                    self.values.append(mam.message.decode())
                    self.partitions.add(mam.partition)
            except ConsumerTimeoutError:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.connector.shutdown()


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer(metadata_broker_list=bootstrap, request_required_acks=-1)
    try:
        for i, v in enumerate(values):
            producer.send(ProducerData(topic, f"k{i}".encode(), [v.encode()]))
    finally:
        producer.close()


def test_mixed_group_ours_and_javas_classic_consumer(kafka4, tmp_path):
    topic, group = unique("mixed"), unique("group")
    admin.create_topic(kafka4.bootstrap, topic, 4, 1)
    first = [f"first-{i}" for i in range(400)]
    _produce(kafka4.bootstrap, topic, first)
    members: list[Any] = []
    try:
        java = JavaMember(kafka4.bootstrap, topic, group, str(tmp_path / "java-member.log"))
        members.append(java)
        wait_until(lambda: set(java.values) >= set(first), 60, "the Java member alone read the first batch",
                   lambda: (len(java.values), java.assigned, (tmp_path / "java-member.log").read_text()[-2000:]))
        ours = OurMember(kafka4.bootstrap, topic, group)
        members.append(ours)
        # One group: after the rebalance each member owns two of the four partitions.
        wait_until(lambda: java.assigned and len(java.assigned[-1]) == 2, 60,
                   "the Java member gave up two partitions to ours", lambda: java.assigned)
        second = [f"second-{i}" for i in range(400)]
        _produce(kafka4.bootstrap, topic, second)
        wait_until(lambda: set(java.values) | set(ours.values) >= set(first) | set(second), 60,
                   "the two members together read both batches",
                   lambda: (len(set(java.values) | set(ours.values)), java.assigned, ours.partitions))
        assert ours.partitions and ours.partitions.isdisjoint(java.assigned[-1])
        assert any(v.startswith("second-") for v in java.values)
        assert any(v.startswith("second-") for v in ours.values)
        # The Java member leaves: ours takes over every partition and reads what follows.
        java.stop()
        members.remove(java)
        third = [f"third-{i}" for i in range(200)]
        _produce(kafka4.bootstrap, topic, third)
        wait_until(lambda: set(ours.values) >= set(third), 60, "ours alone read the third batch",
                   lambda: (len(ours.values), ours.partitions))
        assert ours.partitions == {0, 1, 2, 3}
    finally:
        for m in members:
            m.stop()


class OurZkMember(OurMember):
    """hmbclient's ConsumerConnector balanced through a separate ZooKeeper (the 0.8 design)
    while it fetches from Kafka 4 (which has no ZooKeeper of its own)."""

    def __init__(self, zookeeper: str, bootstrap: str, topic: str, group: str) -> None:
        self.values = []
        self.partitions = set()
        self.connector = Consumer.create({
            "zookeeper.connect": zookeeper, "metadata.broker.list": bootstrap, "group.id": group,
            "auto.offset.reset": "smallest", "consumer.timeout.ms": 200, "auto.commit.interval.ms": 200})
        self._stop = threading.Event()
        self.stream = self.connector.create_message_streams({topic: 1})[topic][0]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()


def test_zookeeper_group_over_kafka4(kafka4, zookeeper):
    zk = f"{zookeeper.connect}/{unique('zk-group')}"
    topic, group = unique("zkgrp"), unique("group")
    admin.create_topic(kafka4.bootstrap, topic, 4, 1)
    members = [OurZkMember(zk, kafka4.bootstrap, topic, group)]
    try:
        first = [f"a-{i}" for i in range(200)]
        _produce(kafka4.bootstrap, topic, first)
        wait_until(lambda: set(members[0].values) >= set(first), 60, "one member read batch a")
        members.append(OurZkMember(zk, kafka4.bootstrap, topic, group))
        # The rebalance takes a while on a loaded machine: wait until ZooKeeper's owner znodes
        # name both members, then small batches until the second has read some (bounded: 20).
        wait_until(lambda: len(zookeeper_owners(zk, group, topic)) == 2, 120, "two members own partitions",
                   lambda: zookeeper_owners(zk, group, topic))
        sent = list(first)
        for round_ in range(20):
            batch = [f"b{round_}-{i}" for i in range(40)]
            _produce(kafka4.bootstrap, topic, batch)
            sent += batch
            wait_until(lambda b=batch: set(members[0].values) | set(members[1].values) >= set(b), 60,
                       "the two members read the batch")
            if members[1].partitions:
                break
        assert members[1].partitions and members[0].partitions
        assert set(members[0].values) | set(members[1].values) == set(sent)
    finally:
        for m in members:
            m.stop()
