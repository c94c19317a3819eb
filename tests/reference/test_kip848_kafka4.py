"""hmbclient's consumer-protocol members (``group.protocol=consumer``, KIP-848) on Apache Kafka
4.x, whose coordinator assigns: with Kafka's own VerifiableConsumer (``--group-protocol
consumer``) in the same group. Two of ours join one after the other, the Java member joins,
the members split the partitions (no partition owned by two at once, by the members' callbacks
and the Java member's events), together read every message, commits are accepted by Kafka
(OffsetCommit v9 with the member epoch) and read back; once one of ours leaves, the others take
its partitions.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from waiting import wait_until

from hmbclient import Consumer, Producer, TopicPartition, admin
from hmbclient.consumer.group_admin import describe_broker_group
from hmbclient.testing import kafka_java_process

from .helpers import unique


class Ours:
    """Our Consumer with group.protocol=consumer, polling in a thread."""

    def __init__(self, bootstrap: str, topic: str, group: str, owned: dict[str, set[int]], overlaps: list[Any], lock: threading.Lock, name: str) -> None:
        self.values: list[str] = []
        self.name = name
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer", "group.remote.assignor": "uniform",
            "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200, "value.deserializer": "encoders.StringDecoder"})

        def assign(_c: Any, ps: list[TopicPartition]) -> None:
            with lock:
                for p in ps:
                    if any(p.partition in s for m, s in owned.items() if m != name):
                        overlaps.append((name, p.partition))
                owned.setdefault(name, set()).update(p.partition for p in ps)

        def revoke(_c: Any, ps: list[TopicPartition]) -> None:
            with lock:
                owned.setdefault(name, set()).difference_update(p.partition for p in ps)

        self.consumer.subscribe([topic], on_assign=assign, on_revoke=revoke, on_lost=revoke)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.values.extend(r.value for r in self.consumer.poll(0.2))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.consumer.close()


class JavaConsumerProtocolMember:
    """Kafka's VerifiableConsumer with --group-protocol consumer; its JSON events collected."""

    def __init__(self, bootstrap: str, topic: str, group: str, stderr_path: str) -> None:
        self.values: list[str] = []
        self.assigned: list[list[int]] = []
        self.proc = kafka_java_process(
            "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
            "--group-id", group, "--group-protocol", "consumer", "--verbose", "--enable-autocommit",
            "--reset-policy", "earliest", stderr_path=stderr_path)
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


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    with Producer(metadata_broker_list=bootstrap, request_required_acks=-1, producer_type="async", queue_buffering_max_ms=5) as p:
        for i, v in enumerate(values):
            p.produce(topic, v.encode(), key=f"k{i}".encode())
        assert p.flush(60) == 0


def test_our_consumer_protocol_members_on_kafka4(kafka4: Any, tmp_path: Any) -> None:
    topic, group = unique("k848"), unique("group")
    admin.create_topic(kafka4.bootstrap, topic, 6, 1)
    owned: dict[str, set[int]] = {}
    overlaps: list[Any] = []
    lock = threading.Lock()
    members: list[Any] = []

    def sizes(names: list[str]) -> list[int]:
        with lock:
            return sorted(len(owned.get(n, ())) for n in names)

    try:
        first = [f"first-{i}" for i in range(300)]
        _produce(kafka4.bootstrap, topic, first)
        a = Ours(kafka4.bootstrap, topic, group, owned, overlaps, lock, "a")
        members.append(a)
        wait_until(lambda: set(a.values) >= set(first), 60, "a alone read the first batch", lambda: (len(a.values), owned))
        b = Ours(kafka4.bootstrap, topic, group, owned, overlaps, lock, "b")
        members.append(b)
        wait_until(lambda: sizes(["a", "b"]) == [3, 3], 60, "a and b own 3 partitions each", lambda: owned)
        java = JavaConsumerProtocolMember(kafka4.bootstrap, topic, group, str(tmp_path / "java.log"))
        members.append(java)
        wait_until(lambda: java.assigned and sizes(["a", "b"]) == [2, 2], 60, "the Java member took two partitions",
                   lambda: (owned, java.assigned, (tmp_path / "java.log").read_text()[-2000:]))
        second = [f"second-{i}" for i in range(300)]
        _produce(kafka4.bootstrap, topic, second)
        wait_until(lambda: set(a.values) | set(b.values) | set(java.values) >= set(first) | set(second), 60,
                   "the three members together read both batches", lambda: (owned, java.assigned))
        with lock:
            ours = owned["a"] | owned["b"]
        # Kafka's coordinator accepted our commits (OffsetCommit v9 with the member epoch)
        wait_until(lambda: all(o is not None and o > 0 for o in a.consumer.committed([(topic, p) for p in owned["a"]]).values()), 30,
                   "a's commits are stored by Kafka")
        assert ours.isdisjoint(java.assigned[-1]) and len(ours) + len(java.assigned[-1]) == 6
        # Kafka's ConsumerGroupDescribe read by our codec (what hmb groups shows)
        info = describe_broker_group(kafka4.bootstrap, group)
        assert (info["protocol_type"], info["protocol"], len(info["members"])) == ("consumer", "uniform", 3), info
        with lock:
            by_owner = {frozenset(p for _t, p in m["partitions"]) for m in info["members"]}
            assert frozenset(owned["a"]) in by_owner and frozenset(owned["b"]) in by_owner, (info, owned)
        assert all(m["member_epoch"] > 0 for m in info["members"]) and info["state"] == "Stable", info
        a.stop()
        members.remove(a)
        wait_until(lambda: sizes(["b"]) == [3], 60, "b took a's partitions with the Java member", lambda: (owned, java.assigned))
        third = [f"third-{i}" for i in range(200)]
        _produce(kafka4.bootstrap, topic, third)
        wait_until(lambda: set(b.values) | set(java.values) >= set(third), 60, "b and the Java member read the third batch")
    finally:
        for m in members:
            m.stop()
    assert overlaps == []
