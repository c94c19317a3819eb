"""Transactional producers and read_committed consumers of other clients against the embedded
broker (KIP-98, issue 23): confluent-kafka (librdkafka) commits, aborts, is fenced by a second
producer of the same ``transactional.id``, and sends a consumer group's offsets in its
transaction; kafka-python's transactional producer commits and aborts. A read_committed reader
(confluent-kafka's; kafka-python's too) sees exactly the committed values, a read_uncommitted one sees the aborted ones too (so the
test can tell the two apart), and the group's offsets appear only once committed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    with EmbeddedBroker(
        port=0,
        log_dir=str(tmp_path_factory.mktemp("txn-peers")),
        num_partitions=2,
        transaction_abort_timed_out_transaction_cleanup_interval_ms=200,
    ) as b:
        yield b


def ck_producer(bootstrap: str, tid: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})


def read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value the reader gets up to the partitions' ends (confluent-kafka consumer)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        eof: set[int] = set()
        for _ in range(200):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                    if len(eof) == partitions:
                        break
                    continue
                raise AssertionError(m.error())
            eof.discard(m.partition())
            out.append(m.value())
        assert len(eof) == partitions, f"{isolation} reader never reached the end of {topic}: {eof}"
        return sorted(out)
    finally:
        c.close()


def test_confluent_commit_abort_and_read_committed(broker: EmbeddedBroker) -> None:
    topic = f"txn-ck-{uuid.uuid4().hex[:8]}"
    p = ck_producer(broker.bootstrap, f"tid-{topic}")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"c1-%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"a-%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c2", partition=0)
    p.commit_transaction(30)
    committed = sorted([b"c1-%d" % i for i in range(10)] + [b"c2"])
    assert read_all(broker.bootstrap, topic, "read_committed") == committed
    assert read_all(broker.bootstrap, topic, "read_uncommitted") == sorted(committed + [b"a-%d" % i for i in range(10)])


def test_confluent_zombie_is_fenced(broker: EmbeddedBroker) -> None:
    from confluent_kafka import KafkaException

    topic = f"txn-zombie-{uuid.uuid4().hex[:8]}"
    tid = f"tid-{topic}"
    zombie = ck_producer(broker.bootstrap, tid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(30)
    fresh = ck_producer(broker.bootstrap, tid)
    fresh.init_transactions(30)  # aborts the zombie's open transaction, bumps the epoch
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=1)
    fresh.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        zombie.produce(topic, b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    assert e.value.args[0].fatal() or "fenced" in str(e.value).lower(), e.value
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"fresh"]


def test_confluent_send_offsets_to_transaction(broker: EmbeddedBroker) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = f"txn-offs-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    p = ck_producer(broker.bootstrap, f"tid-{topic}")
    p.init_transactions(30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        meta = c.list_topics(timeout=10)
        assert meta is not None
        tp = TopicPartition(topic, 0)

        def committed() -> int:
            return c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset

        for offset, commit in ((5, False), (7, True)):
            p.begin_transaction()
            p.produce(topic, b"x-%d" % offset, partition=0)
            p.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], c.consumer_group_metadata(), 30)
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
            if commit:
                wait_until(lambda o=offset: committed() == o, timeout_s=10, what=f"offset {offset} committed")
            else:
                assert committed() == -1001, tp  # the aborted offset never shows
        # pending offsets are visible only once committed
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], c.consumer_group_metadata(), 30)
        assert committed() == 7
        p.commit_transaction(30)
        wait_until(lambda: committed() == 9, timeout_s=10, what="offset 9 committed")
    finally:
        c.close()


def test_kafka_python_transactional_producer(broker: EmbeddedBroker) -> None:
    from kafka import KafkaProducer

    topic = f"txn-kp-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tid-{topic}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send(topic, b"k-%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"dropped", partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    assert read_all(broker.bootstrap, topic, "read_committed") == sorted(b"k-%d" % i for i in range(5))
    assert kp_read(broker.bootstrap, topic, "read_committed") == sorted(b"k-%d" % i for i in range(5))
    assert kp_read(broker.bootstrap, topic, "read_uncommitted") == sorted([b"dropped"] + [b"k-%d" % i for i in range(5)])


def kp_read(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """What kafka-python's consumer with ``isolation_level`` reads up to its end offsets."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level=isolation)
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)  # read_committed: the last stable offsets
        out: list[bytes] = []
        for _ in range(50):
            if all(c.position(tp) >= ends[tp] for tp in tps):
                break
            for msgs in c.poll(timeout_ms=500).values():
                out.extend(m.value for m in msgs)
        assert all(c.position(tp) >= ends[tp] for tp in tps), f"{isolation} reader stuck before {ends}"
        return sorted(out)
    finally:
        c.close()


def test_confluent_transactions_through_lost_answers(broker: EmbeddedBroker) -> None:
    """Every 4th answer to Produce, AddPartitionsToTxn and EndTxn is lost (the proxy closes the
    connection instead): librdkafka retries them; 0 committed values lost, 0 aborted visible,
    0 duplicates. When a commit's answer is lost librdkafka may call the commit abortable while
    the coordinator has committed it; its abort then gets INVALID_TXN_STATE (as from Kafka:
    EndTxn(abort) on a committed transaction), which librdkafka makes fatal. That transaction's
    outcome is unknown to the application: it must be all visible or all invisible, and a new
    producer with the same id goes on (as an application would)."""
    from confluent_kafka import KafkaError, KafkaException

    from hmbclient.protocol.api import ApiKey
    from hmbclient.testing import FaultProxy
    from hmbclient.testing.faultproxy import drop_when

    lossy = {int(ApiKey.PRODUCE), int(ApiKey.ADD_PARTITIONS_TO_TXN), int(ApiKey.END_TXN)}
    topic = f"txn-lossy-{uuid.uuid4().hex[:8]}"
    committed: dict[int, list[bytes]] = {0: [], 1: []}
    aborted: set[bytes] = set()
    unknown: list[set[bytes]] = []
    with FaultProxy((broker.host, broker.port), drop_when(lambda a: a.api_key in lossy and a.nth % 4 == 0)) as proxy:
        p = ck_producer(proxy.bootstrap, f"tid-{topic}", **{"message.timeout.ms": 60_000})
        p.init_transactions(30)
        for t in range(21):
            values = [(i % 2, b"t%02d-%d" % (t, i)) for i in range(6)]
            p.begin_transaction()
            for part, v in values:
                p.produce(topic, v, partition=part)
            commit = t % 3 != 2
            try:
                if commit:
                    p.commit_transaction(60)
                else:
                    p.abort_transaction(60)
            except KafkaException as e:
                err = e.args[0]
                assert err.txn_requires_abort() or err.retriable(), err
                try:
                    if err.txn_requires_abort():
                        p.abort_transaction(60)
                        commit = False
                    else:
                        p.commit_transaction(60) if commit else p.abort_transaction(60)
                except KafkaException as e2:
                    fatal = e2.args[0]
                    assert fatal.fatal() and fatal.code() == KafkaError.INVALID_TXN_STATE, fatal
                    unknown.append({v for _, v in values})
                    p = ck_producer(proxy.bootstrap, f"tid-{topic}", **{"message.timeout.ms": 60_000})
                    p.init_transactions(30)
                    continue
            for part, v in values:
                if commit:
                    committed[part].append(v)
                else:
                    aborted.add(v)
        assert proxy.stats()["dropped"] > 0, "the proxy never dropped an answer: the test proved nothing"
        assert proxy.failure is None
    got = read_all(broker.bootstrap, topic, "read_committed")
    for txn in unknown:  # atomic: all or nothing
        seen = txn & set(got)
        assert seen in (set(), txn), f"a transaction of unknown outcome is partly visible: {sorted(seen)}"
        got = [v for v in got if v not in txn]
    want = sorted(committed[0] + committed[1])
    assert not set(got) & aborted, "aborted values are visible"
    assert len(got) == len(set(got)), "duplicates"
    assert got == want
    assert len(want) >= 6 * 10
