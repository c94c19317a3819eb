"""Our broker group member against Apache Kafka 4's own group coordinator (the reference), beside
Kafka's Java consumer (VerifiableConsumer, classic protocol):

* cooperative-sticky: a Java member with Kafka's CooperativeStickyAssignor leads, our members
  join with ours; when another of ours joins, no member (ours or Java's) has a partition revoked
  that it still owns afterwards, and every partition has one owner;
* static membership: our static members on Kafka's coordinator; one restarted within the session
  timeout gets its partitions back and the others see no rebalance (same generation).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.testing import kafka_java_process

from .conftest import unique
from .members import Member
from .test_broker_groups import create_topic

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 12


class JavaMember:
    """VerifiableConsumer with the CooperativeStickyAssignor; ownership from its JSON events."""

    def __init__(self, bootstrap: str, topic: str, group: str, stderr_path: str) -> None:
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.revoked: set[int] = set()
        self.proc = kafka_java_process(
            "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
            "--group-id", group, "--group-protocol", "classic", "--session-timeout", "10000",
            "--assignment-strategy", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            stderr_path=stderr_path,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            partitions = {p["partition"] for p in event.get("partitions", ())}
            with self.lock:
                if event.get("name") == "partitions_assigned":
                    self.owned |= partitions
                elif event.get("name") == "partitions_revoked":
                    self.owned -= partitions
                    self.revoked |= partitions

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._thread.join(10)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


def test_cooperative_sticky_with_kafkas_coordinator_and_java_assignor(apache_kafka: Any, members: list[Member], tmp_path: Any) -> None:
    bootstrap = apache_kafka.bootstrap
    topic, group = unique("coop4"), unique("g-coop4")
    create_topic(bootstrap, topic, PARTITIONS)
    java = JavaMember(bootstrap, topic, group, str(tmp_path / "java.err"))
    try:
        wait_until(lambda: len(java.owned) == PARTITIONS, 60, "the Java member owns the topic")

        def settled(n: int) -> bool:
            with java.lock:
                got = [p for m in members for _, p in m.journal.owned] + list(java.owned)
            return len(members) + 1 == n and sorted(got) == list(range(PARTITIONS)) and all(m.member.stable for m in members) and len({m.generation for m in members}) == 1

        for i in range(2):
            members.append(Member(bootstrap, group, topic, f"ours{i}", assignor="cooperative-sticky").start())
        wait_until(lambda: settled(3) and min(len(java.owned), *(len(m.journal.owned) for m in members)) == PARTITIONS // 3, 60, "three members share the topic")
        before = {m.name: {p for _, p in m.journal.owned} for m in members}
        with java.lock:
            java_before = set(java.owned)
            java.revoked.clear()
        for m in members:
            m.journal.mark()
        members.append(Member(bootstrap, group, topic, "ours2", assignor="cooperative-sticky").start())
        wait_until(lambda: settled(4) and all(len(m.journal.owned) == PARTITIONS // 4 for m in members), 60, "four members share the topic")
        for m in members[:2]:
            now = {p for _, p in m.journal.owned}
            assert now <= before[m.name] and {p for _, p in m.journal.taken_away()} == before[m.name] - now
        with java.lock:
            assert java.owned <= java_before and java.revoked == java_before - java.owned
    finally:
        java.stop()


def test_a_static_member_restarts_on_kafkas_coordinator_without_a_rebalance(apache_kafka: Any, members: list[Member]) -> None:
    bootstrap = apache_kafka.bootstrap
    topic, group = unique("static4"), unique("g-static4")
    create_topic(bootstrap, topic, PARTITIONS)
    for i in range(3):
        members.append(Member(bootstrap, group, topic, f"s{i}", group_instance_id=f"instance-{i}").start())

    def settled() -> bool:
        owned = [tp for m in members for tp in m.journal.owned]
        return len(owned) == len(set(owned)) == PARTITIONS and len({m.generation for m in members}) == 1 and all(m.member.stable for m in members)

    wait_until(settled, 60, "three static members settled")
    generation = members[0].generation
    for m in members:
        m.journal.mark()
    before = set(members[1].journal.owned)
    members[1].close()
    members[1] = Member(bootstrap, group, topic, "s1-again", group_instance_id="instance-1").start()
    wait_until(lambda: members[1].journal.owned == before, 30, "the restarted member owns its old partitions")
    assert members[1].generation == generation
    for m in (members[0], members[2]):
        assert m.member.await_rebalance(15) and m.generation == generation and m.journal.taken_away() == set()
