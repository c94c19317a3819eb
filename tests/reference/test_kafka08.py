"""hmbclient -> Apache Kafka 0.8.2.2, the release whose design the SDK follows, with ZooKeeper.

0.8.2.2 (org.apache.kafka:kafka_2.11, Scala 2.11) runs on this Java 17 as it is: no
``--add-opens`` was needed, so the seeds' own version is the one tested (not a later release
with the ZooKeeper consumer).

* produce with every codec 0.8 knows (none, gzip, snappy, lz4) through ``api_version="auto"``
  (the ApiVersions probe fails on 0.8 and the client falls back to the 0.8 versions) and the
  pinned ``"0.8"``; SimpleConsumer fetches and asks offsets; Java's ZooKeeper consumer reads
  every message back;
* a mixed ZooKeeper group: our ConsumerConnector (``zookeeper.connect``) and Java's
  ZookeeperConsumerConnector (tests/java/kafka-0.8/ZkGroupMember.java) in one group, members
  joining one after another and one Java member killed -9: every message is delivered, and the
  only duplicates are messages the killed member had received (its uncommitted window).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import (
    EARLIEST_TIME,
    LATEST_TIME,
    Consumer,
    FetchRequest,
    Producer,
    ProducerData,
    SimpleConsumer,
)
from hmbclient.errors import ConsumerTimeoutError
from hmbclient.testing import ApacheKafka, kafka_java, kafka_java_process
from hmbclient.testing.apache_kafka import jar_version

from .helpers import unique, zookeeper_owners

VERSION = "0.8.2.2"


@pytest.fixture(scope="module")
def kafka08() -> Any:
    with ApacheKafka(version=VERSION) as kafka:  # and a LocalZooKeeper of its own
        yield kafka


def test_the_jars_are_0_8_2_2():
    assert jar_version(VERSION) == "0.8.2.2"


def _java_read(kafka08: Any, topic: str, count: int) -> list[str]:
    """Java's ZooKeeper consumer, in a fresh group, reads ``count`` messages of ``topic``."""
    done = kafka_java("ZkGroupMember", str(kafka08.zookeeper_connect), unique("reader"), topic, "1", str(count),
                      version=VERSION, timeout_s=120)
    return [line.split("\t", 2)[2] for line in done.stdout.splitlines() if line.count("\t") >= 2]


@pytest.mark.parametrize("api_version", ["auto", "0.8"])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_produce_fetch_and_java_reads_back(kafka08, api_version, codec):
    topic = unique(f"k08-{codec}")
    msgs = [f"{codec}-{api_version}-{i}" for i in range(150)]
    producer = Producer(metadata_broker_list=kafka08.bootstrap, compression_codec=codec, api_version=api_version,
                        request_required_acks=-1, batch_num_messages=40, message_send_max_retries=5)
    try:
        futures = producer.send(ProducerData(topic, b"key", [m.encode() for m in msgs]))
        assert [f.result(timeout=30).offset for f in futures] == list(range(150))
    finally:
        producer.close()
    consumer = SimpleConsumer("127.0.0.1", kafka08.ports[0]["PLAINTEXT"], api_version=api_version)
    try:
        got: list[Any] = []
        while len(got) < 150:
            batch = list(consumer.fetch(FetchRequest(topic, 0, got[-1].next_offset if got else 0, 4096)))
            assert batch, f"fetch stalled at {len(got)}"
            got += batch
        assert consumer.get_offsets_before(topic, 0, LATEST_TIME, 1) == [150]
        assert consumer.get_offsets_before(topic, 0, EARLIEST_TIME, 1) == [0]
    finally:
        consumer.close()
    assert [m.message.value.decode() for m in got] == msgs
    assert {m.message.key for m in got} == {b"key"}
    assert _java_read(kafka08, topic, 150) == msgs


class JavaMember:
    def __init__(self, zk: str, group: str, topic: str, log: str) -> None:
        self.values: list[str] = []
        self.partitions: set[int] = set()
        self.proc = kafka_java_process("ZkGroupMember", zk, group, topic, "2", version=VERSION, stderr_path=log)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split("\t", 2)
            if len(parts) == 3:
                self.partitions.add(int(parts[0]))
                self.values.append(parts[2])

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no commit, no deregistration; its ZooKeeper session expires
        self.proc.wait(30)
        self._thread.join(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self._thread.join(10)


class OurMember:
    def __init__(self, zk: str, group: str, topic: str) -> None:
        self.values: list[str] = []
        self.partitions: set[int] = set()
        self.connector = Consumer.create({
            "zookeeper.connect": zk, "group.id": group, "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 200, "auto.commit.interval.ms": 200, "zookeeper.session.timeout.ms": 6000,
            "rebalance.backoff.ms": 500, "rebalance.max.retries": 20})
        self.streams = self.connector.create_message_streams({topic: 2})[topic]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(s,), daemon=True) for s in self.streams]
        for t in self._threads:
            t.start()

    def _run(self, stream: Any) -> None:
        while not self._stop.is_set():
            try:
                for mam in stream:
                    self.values.append(mam.message.decode())
                    self.partitions.add(mam.partition)
            except ConsumerTimeoutError:
                continue

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)
        self.connector.shutdown()


def test_mixed_zookeeper_group_with_a_member_killed(kafka08, tmp_path):
    zk = str(kafka08.zookeeper_connect)
    topic, group = unique("k08-group"), unique("mixed")
    kafka_java("kafka.admin.TopicCommand", "--zookeeper", zk, "--create", "--topic", topic, "--partitions", "6",
               "--replication-factor", "1", version=VERSION)
    sent: list[str] = []

    def produce(tag: str, n: int) -> list[str]:
        batch = [f"{tag}-{i}" for i in range(n)]
        producer = Producer(metadata_broker_list=kafka08.bootstrap, request_required_acks=-1, message_send_max_retries=10)
        try:
            for i, v in enumerate(batch):
                producer.send(ProducerData(topic, f"k{i}".encode(), [v.encode()]))
        finally:
            producer.close()
        sent.extend(batch)
        return batch

    members: list[Any] = []

    def union() -> Counter[str]:
        return Counter(v for m in members for v in m.values)

    def delivered(batch: list[str], what: str) -> None:
        wait_until(lambda: set(union()) >= set(batch), 90, what,
                   lambda: [(type(m).__name__, len(m.values), sorted(m.partitions)) for m in members])

    try:
        j1 = JavaMember(zk, group, topic, str(tmp_path / "j1.log"))
        members.append(j1)
        delivered(produce("one", 300), "the first Java member alone read batch one")
        ours = OurMember(zk, group, topic)
        members.append(ours)
        delivered(produce("two", 300), "Java + ours read batch two")
        j2 = JavaMember(zk, group, topic, str(tmp_path / "j2.log"))
        members.append(j2)
        # The third member's JVM start and rebalance take a while on a loaded machine: wait until
        # ZooKeeper's owner znodes name three members, then small batches until all three have
        # read some (bounded: at most 20 batches).
        wait_until(lambda: len(zookeeper_owners(zk, group, topic)) == 3, 120, "three members own partitions",
                   lambda: zookeeper_owners(zk, group, topic))
        for round_ in range(20):
            delivered(produce(f"three{round_}", 60), f"two Java members + ours read batch three{round_}")
            if all(m.partitions for m in members) and any(v.startswith("three") for v in j2.values):
                break
        assert all(m.partitions for m in members), [sorted(m.partitions) for m in members]
        before_kill = set(j1.values)
        j1.kill()
        four = produce("four", 300)
        delivered(four, "after the kill -9, ours + the other Java member read batch four")
        alive = [ours, j2]
        wait_until(lambda: set(v for m in alive for v in m.values) >= set(four), 90, "survivors read batch four")
        assert ours.partitions and j2.partitions
        counts = union()
        assert set(counts) == set(sent), f"missing: {sorted(set(sent) - set(counts))[:10]}"
        duplicates = {v for v, c in counts.items() if c > 1}
        assert duplicates <= before_kill, sorted(duplicates - before_kill)[:10]
    finally:
        for m in members:
            m.stop()
