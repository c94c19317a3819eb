"""Idempotent producers of other clients against the embedded broker, through a proxy that loses
Produce answers (``hmbclient.testing.FaultProxy``): every value is stored exactly once and in
send order per partition.

kafka-python 3 runs with its default settings (idempotent by default; the test checks that it
is); confluent-kafka with ``enable.idempotence=true``. The proxy closes the connection instead of
passing on every 5th Produce answer: the broker stored the batch, the producer never heard, and
retries it with the same sequence. Before the broker de-duplicated, the same run stored
thousands of duplicates (issue 21). The values are read back straight from the broker and
judged: nothing missing, nothing twice, each partition in the order the values were sent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.testing import FaultProxy, drop_every

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 3
N = 1500


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("idem-peers")), num_partitions=PARTITIONS) as b:
        yield b


def read_back(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every value of every partition, in offset order (straight from the broker)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        while any(c.position(tp) < ends[tp] for tp in tps):
            got = c.poll(timeout_ms=2000)
            if not got and all(c.position(tp) >= ends[tp] for tp in tps):
                break
            for tp, msgs in got.items():
                out[tp.partition].extend(m.value for m in msgs)
        return out
    finally:
        c.close()


def judge(stored: dict[int, list[bytes]], sent: dict[int, list[bytes]]) -> None:
    for p in range(PARTITIONS):
        got = stored[p]
        dups = len(got) - len(set(got))
        lost = set(sent[p]) - set(got)
        assert dups == 0, f"partition {p}: {dups} duplicates"
        assert not lost, f"partition {p}: {len(lost)} lost, e.g. {sorted(lost)[:3]}"
        assert got == sent[p], f"partition {p}: stored out of send order"


def _values() -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(N):
        sent[i % PARTITIONS].append(b"v-%05d" % i)
    return sent


def test_kafka_python_default_settings_through_a_dropping_proxy(broker: EmbeddedBroker) -> None:
    from kafka import KafkaProducer

    topic = f"idem-kp-{uuid.uuid4().hex[:8]}"
    sent = _values()
    with FaultProxy((broker.host, broker.port), drop_every(5)) as proxy:
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, linger_ms=0, batch_size=200)
        try:
            assert producer.config["enable_idempotence"], "kafka-python 3 is expected to be idempotent by default"
            futures = []
            for i in range(N):
                futures.append(producer.send(topic, value=b"v-%05d" % i, partition=i % PARTITIONS))
            producer.flush(timeout=120)
            errors = [f.exception for f in futures if f.failed()]
            assert not errors, errors[:3]
            assert all(f.succeeded() for f in futures)
        finally:
            producer.close(timeout=10)
        assert proxy.stats()["dropped"] > 0, "the proxy never dropped an answer: the test proved nothing"
        assert proxy.failure is None
    judge(read_back(broker.bootstrap, topic), sent)


def test_confluent_kafka_enable_idempotence_through_a_dropping_proxy(broker: EmbeddedBroker) -> None:
    from confluent_kafka import Producer

    topic = f"idem-ck-{uuid.uuid4().hex[:8]}"
    sent = _values()
    failed: list[str] = []
    delivered = 0

    def on_delivery(err: object, msg: object) -> None:
        nonlocal delivered
        if err is not None:
            failed.append(str(err))
        else:
            delivered += 1

    with FaultProxy((broker.host, broker.port), drop_every(5)) as proxy:
        producer = Producer({"bootstrap.servers": proxy.bootstrap, "enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 10})
        for i in range(N):
            producer.produce(topic, value=b"v-%05d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
            producer.poll(0)
        left = producer.flush(120)
        assert left == 0, f"{left} messages never delivered"
        assert not failed, failed[:3]
        assert delivered == N
        assert proxy.stats()["dropped"] > 0, "the proxy never dropped an answer: the test proved nothing"
        assert proxy.failure is None
    judge(read_back(broker.bootstrap, topic), sent)
