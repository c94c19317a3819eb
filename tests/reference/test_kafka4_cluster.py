"""hmbclient -> a 3-node Apache Kafka 4.x cluster (KRaft, every node broker + controller):
the producer (acks=all, min.insync.replicas=2) keeps writing while the node leading the
partition is killed -9 and brought back; every acknowledged message is read back by Kafka's
Java consumer. Also checks the harness itself: the quorum survives one node down, and the
restarted node rejoins the ISR.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import Producer, ProducerData, admin
from hmbclient.testing import ApacheKafka

from .helpers import java_read_all, unique


@pytest.fixture(scope="module")
def kafka3() -> Any:
    with ApacheKafka(nodes=3, extra_config={"min.insync.replicas": "2"}) as kafka:
        yield kafka


def test_acked_messages_survive_a_leader_kill(kafka3):
    topic = unique("k3")
    admin.create_topic(kafka3.bootstrap, topic, 2, 3)
    wait_until(lambda: all(len(p.isr) == 3 for p in admin.describe_topics(kafka3.bootstrap, [topic])), 30,
               "a full ISR on both partitions")
    acked: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    producer = Producer(metadata_broker_list=kafka3.bootstrap, request_required_acks=-1,
                        message_send_max_retries=30, retry_backoff_ms=200, request_timeout_ms=10_000)

    def run() -> None:
        i = 0
        while not stop.is_set() and i < 3000:
            batch = [f"m{j}".encode() for j in range(i, i + 10)]
            try:
                for f, v in zip(producer.send(ProducerData(topic, f"k{i}".encode(), batch)), batch, strict=True):
                    f.result(timeout=60)
                    acked.append(v)
            except BaseException as e:  # a message given up: recorded, the test fails on it
                errors.append(e)
            i += 10

    writer = threading.Thread(target=run, daemon=True)
    writer.start()
    try:
        wait_until(lambda: len(acked) >= 300, 60, "300 acks before the kill")
        leader = admin.describe_topics(kafka3.bootstrap, [topic])[0].leader
        node = leader - 1  # node ids are 1-based, nodes 0-based
        kafka3.kill(node)
        n_at_kill = len(acked)
        wait_until(lambda: len(acked) >= n_at_kill + 300 or errors, 120, "acks again after the kill")
        kafka3.restart(node)
        writer.join(180)
        assert not writer.is_alive()
    finally:
        stop.set()
        producer.close()
    assert not errors, errors[:3]
    assert len(acked) == 3000
    wait_until(lambda: all(len(p.isr) == 3 for p in admin.describe_topics(kafka3.bootstrap, [topic])), 60,
               "the restarted node back in the ISR")
    records = java_read_all(kafka3.bootstrap, topic, 3000)
    # Nothing lost. (A retry after the kill may write a message twice: the producer is not
    # idempotent, so duplicates are allowed, losses never.)
    assert set(acked) <= {r[4] for r in records}
