"""hmbclient's subscribe/poll ``Consumer`` on Apache Kafka 4.x, in one group with Kafka's own
VerifiableConsumer (the classic protocol): the two split the partitions, together read every
message, and once the Java member leaves ours owns every partition and reads what follows;
then the offsets API against Kafka's answers: end/beginning offsets, offsets_for_times and a
commit read back with ``committed`` (Kafka's coordinator storing it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from waiting import wait_until

from hmbclient import Consumer, Producer, TopicPartition, admin

from .helpers import unique
from .test_groups_kafka4 import JavaMember


class PollMember:
    """Our Consumer, polling in a thread (auto commit every 200 ms)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.values: list[str] = []
        self.partitions: set[int] = set()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 200, "session.timeout.ms": 10_000, "value.deserializer": "encoders.StringDecoder"})
        self.consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in self.consumer.poll(0.2):
                self.values.append(record.value)
                self.partitions.add(record.partition)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.consumer.close()


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    with Producer(metadata_broker_list=bootstrap, request_required_acks=-1, producer_type="async", queue_buffering_max_ms=5) as p:
        for i, v in enumerate(values):
            p.produce(topic, v.encode(), key=f"k{i}".encode())
        assert p.flush(60) == 0


def test_poll_consumer_and_javas_consumer_in_one_group_then_the_offsets_api(kafka4: Any, tmp_path: Any) -> None:
    topic, group = unique("pollmix"), unique("group")
    admin.create_topic(kafka4.bootstrap, topic, 4, 1)
    start_ms = int(time.time() * 1000)
    first = [f"first-{i}" for i in range(400)]
    _produce(kafka4.bootstrap, topic, first)
    members: list[Any] = []
    try:
        java = JavaMember(kafka4.bootstrap, topic, group, str(tmp_path / "java-member.log"))
        members.append(java)
        wait_until(lambda: set(java.values) >= set(first), 60, "the Java member alone read the first batch",
                   lambda: (len(java.values), java.assigned, (tmp_path / "java-member.log").read_text()[-2000:]))
        ours = PollMember(kafka4.bootstrap, topic, group)
        members.append(ours)
        wait_until(lambda: java.assigned and len(java.assigned[-1]) == 2, 60,
                   "the Java member gave up two partitions to ours", lambda: java.assigned)
        second = [f"second-{i}" for i in range(400)]
        _produce(kafka4.bootstrap, topic, second)
        wait_until(lambda: set(java.values) | set(ours.values) >= set(first) | set(second), 60,
                   "the two members together read both batches",
                   lambda: (len(set(java.values) | set(ours.values)), java.assigned, ours.partitions))
        assert ours.partitions and ours.partitions.isdisjoint(java.assigned[-1])
        assert any(v.startswith("second-") for v in ours.values)
        java.stop()
        members.remove(java)
        third = [f"third-{i}" for i in range(200)]
        _produce(kafka4.bootstrap, topic, third)
        wait_until(lambda: set(ours.values) >= set(third), 60, "ours alone read the third batch",
                   lambda: (len(ours.values), ours.partitions))
        assert ours.consumer.assignment() == {TopicPartition(topic, p) for p in range(4)}
    finally:
        for m in members:
            m.stop()

    # The offsets API against Kafka's answers.
    tps = [TopicPartition(topic, p) for p in range(4)]
    with Consumer({"bootstrap.servers": kafka4.bootstrap, "group.id": group, "enable.auto.commit": False}) as c:
        ends = c.end_offsets(tps)
        assert sum(ends.values()) == 1000 and c.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        # Ours auto-committed everything it read before leaving.
        assert c.committed(tps) == ends
        found = c.offsets_for_times(dict.fromkeys(tps, start_ms))
        assert all(f is not None and f.offset == 0 and f.timestamp >= start_ms for f in found.values()), found
        assert c.offsets_for_times(dict.fromkeys(tps, int(time.time() * 1000) + 3_600_000)) == dict.fromkeys(tps)
        c.assign(tps)
        c.seek(tps[0], 5)
        c.commit()
        assert c.committed([tps[0]]) == {tps[0]: 5}
