"""Partition reassignment, the same kafka-python script against a 3-node Apache Kafka 4.x cluster
(KRaft) and our 3-broker cluster (ZooKeeper): the answers and error codes of
AlterPartitionReassignments / ListPartitionReassignments must be the same.

The script: a cancel with nothing in progress, an unknown partition, an unknown topic, a broker
that does not exist, a broker named twice, a negative broker id, a real move (answered, listed
until done, ending with the target replicas), and listing partitions not being moved.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import admin
from hmbclient.broker import EmbeddedCluster
from hmbclient.testing import ApacheKafka


@pytest.fixture(scope="module")
def kafka3() -> Iterator[ApacheKafka]:
    with ApacheKafka(nodes=3) as kafka:
        yield kafka


@pytest.fixture(scope="module")
def ours(zookeeper: Any) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(brokers=3, zookeeper_connect=f"{zookeeper.connect}/reassign-ref-{uuid.uuid4().hex[:8]}",
                         offsets_topic_replication_factor=1) as c:
        yield c


def _name(err: Any) -> str | None:
    return None if err is None else err.__name__


def _script(bootstrap: str) -> dict[str, Any]:
    """Run the scenario (broker ids differ: Kafka's are 1-based, ours 0-based; none is in the
    answer)."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    ids = sorted(admin.describe_cluster(bootstrap)["brokers"])
    topic = f"reassign-{uuid.uuid4().hex[:8]}"
    admin.create_topic(bootstrap, topic, 1, 2)
    wait_until(lambda: all(len(p.isr) == 2 for p in admin.describe_topics(bootstrap, [topic])), 30, "the topic's ISR")
    before = admin.describe_topics(bootstrap, [topic])[0].replicas
    missing = next(b for b in ids if b not in before)
    target = [before[1], missing]
    tp = TopicPartition(topic, 0)
    out: dict[str, Any] = {}
    client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="reassign-reference", request_timeout_ms=30_000)
    try:
        def one(what: str, replicas: list[int] | None, at: Any = tp) -> None:
            out[what] = {str(k.partition): _name(v) for k, v in client.alter_partition_reassignments({at: replicas}).items()}

        one("cancel-nothing", None)
        one("unknown-partition", [ids[0], ids[1]], TopicPartition(topic, 9))
        one("unknown-topic", [ids[0], ids[1]], TopicPartition(topic + "-nope", 0))
        one("no-such-broker", [before[0], 4242])
        one("broker-twice", [before[0], before[0]])
        one("negative-broker", [before[0], -1])
        out["listed-idle"] = client.list_partition_reassignments([tp])
        out["listed-idle-unknown"] = client.list_partition_reassignments({topic + "-nope": [0]})
        one("move", target)
        wait_until(lambda: not client.list_partition_reassignments(), 60, "the move done")
        # Metadata reaches every broker a moment later (Kafka's too).
        wait_until(lambda: list(admin.describe_topics(bootstrap, [topic])[0].replicas) == target, 30, "the metadata of the move")
        # the assignment is random: the end state is compared as "the target, with a whole ISR"
        wait_until(lambda: sorted(admin.describe_topics(bootstrap, [topic])[0].isr) == sorted(target), 30, "the target's ISR")
        after = admin.describe_topics(bootstrap, [topic])[0]
        out["after"] = (list(after.replicas) == target, sorted(after.isr) == sorted(target), after.leader in target)
        one("cancel-after-done", None)
    finally:
        client.close()
    return out


def test_same_answers_as_kafka(kafka3: ApacheKafka, ours: EmbeddedCluster) -> None:
    theirs = _script(kafka3.bootstrap)
    mine = _script(ours.bootstrap)
    assert theirs["after"] == (True, True, True)
    assert theirs["cancel-nothing"] == {"0": "NoReassignmentInProgressError"}  # the script sees errors at all
    assert mine == theirs
