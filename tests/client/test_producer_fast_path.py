"""The async producer's single-message path (one bytes value, a null key, a topic already
known: ``Producer._queue_one``) against real brokers: it meets the checks of the general path
(partitioner, message size, queue bound, closed producer), and keyless and keyed messages
sharing one batch (the batch's key column starts part-way) arrive with the right keys."""

from __future__ import annotations

from typing import Any

import pytest
from waiting import wait_until

from hmbclient import Producer, ProducerData
from hmbclient.errors import MessageSizeTooLargeError, ProducerClosedError, QueueFullError
from hmbclient.producer.accumulator import TopicState
from hmbclient.producer.data import OneSendFuture, ProducerBatch, RecordMetadata
from partitioners import DefaultPartitioner, Murmur2Partitioner

from .conftest import BrokerHandle, create_topic, read_all, read_partition, unique

pytestmark = pytest.mark.timeout(120)


class _Recording:
    """Partition ``calls`` in turn; remembers the keys it was asked about."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.keys: list[Any] = []

    def partition(self, key: Any, num_partitions: int) -> int:
        self.keys.append(key)
        return self.answer


def test_single_messages_take_the_partitioner_and_the_checks(broker: BrokerHandle) -> None:
    topic = unique("fast")
    create_topic(broker.bootstrap, topic, 3)
    part = _Recording(2)
    with Producer(metadata_broker_list=broker.bootstrap, producer_type="async", partitioner=part, message_max_bytes=500) as p:
        p.partitions_for(topic)
        p.send(ProducerData(topic, None, [b"first"]))  # the topic is known from here on
        assert p._acc is not None and topic in p._acc.topics
        futs = [p.send(ProducerData(topic, None, [b"m%d" % i]))[0] for i in range(50)]
        assert [f.result(20).partition for f in futs] == [2] * 50
        assert [f.result(20).offset for f in futs] == list(range(1, 51))
        assert part.keys == [None] * 51
        with pytest.raises(MessageSizeTooLargeError, match="500"):
            p.send(ProducerData(topic, None, [b"x" * 501]))
        part.answer = 3
        with pytest.raises(ValueError, match="partitioner returned 3"):
            p.send(ProducerData(topic, None, [b"x"]))
        p.flush()
    got = read_all(broker.host, broker.port, topic, 3)
    assert [r.value for r in got[2]] == [b"first"] + [b"m%d" % i for i in range(50)]
    assert got[0] == got[1] == []
    with pytest.raises(ProducerClosedError):
        p.send(ProducerData(topic, None, [b"late"]))


def test_keyless_and_keyed_messages_share_a_batch(broker: BrokerHandle) -> None:
    topic = unique("mixed")
    create_topic(broker.bootstrap, topic, 1)
    sent: list[tuple[bytes | None, bytes]] = []
    # a long linger and a large batch: every message below lands in one batch
    with Producer(metadata_broker_list=broker.bootstrap, producer_type="async", queue_buffering_max_ms=2000, batch_num_messages=1000) as p:
        p.partitions_for(topic)
        p.send(ProducerData(topic, None, [b"warm"]))
        sent.append((None, b"warm"))
        futs = []
        for i in range(30):
            key = b"k%d" % i if i % 7 == 3 else None
            futs.append(p.send(ProducerData(topic, key, [b"v%d" % i]))[0])
            sent.append((key, b"v%d" % i))
        futs.append(p.send_record(topic, b"with-headers", headers=[("h", b"1")]))
        sent.append((None, b"with-headers"))
        assert len({id(f.batch) for f in futs}) == 1
        p.flush()
        assert [f.result(1).offset for f in futs] == list(range(1, 32))
    records = read_partition(broker.host, broker.port, topic, 0)
    assert [(r.key, r.value) for r in records] == sent
    assert records[-1].headers == (("h", b"1"),)
    assert all(r.headers == () for r in records[:-1])


def test_single_messages_wait_for_room_and_fail_when_told(broker: BrokerHandle) -> None:
    topic = unique("bound")
    create_topic(broker.bootstrap, topic, 1)
    with Producer(
        metadata_broker_list=broker.bootstrap,
        producer_type="async",
        queue_buffering_max_messages=5,
        queue_enqueue_timeout_ms=0,
        queue_buffering_max_ms=60_000,
        batch_num_messages=5,
    ) as p:
        p.partitions_for(topic)
        futs = [p.send(ProducerData(topic, None, [b"%d" % i]))[0] for i in range(5)]
        with pytest.raises(QueueFullError):
            p.send(ProducerData(topic, None, [b"over"]))
        p.flush()
        assert [f.result(20).offset for f in futs] == list(range(5))
        wait_until(lambda: p._acc is not None and p._acc.queued == 0, 20, "the queue emptied")
        room = p.send(ProducerData(topic, None, [b"room"]))[0]
        p.flush()
        assert room.result(20).offset == 5


def test_one_send_future_is_a_sequence_of_one() -> None:
    batch = ProducerBatch("t", 0, 0)
    one = OneSendFuture(batch, 7)
    assert len(one) == 1 and one.segments == [(batch, 7, 1)] and one.batches() == [batch]
    assert [(f.batch, f.index) for f in one] == [(batch, 7)]
    assert (one[0].batch, one[0].index) == (one[-1].batch, one[-1].index) == (batch, 7)
    assert len(one[0:5]) == 1
    with pytest.raises(IndexError):
        one[1]
    batch.complete(100)
    assert one.wait(1) == [RecordMetadata("t", 0, 107)]
    assert callable(one.index)  # Sequence.index is still a method, not shadowed


def test_a_topic_that_grows_leaves_the_one_partition_shortcut() -> None:
    ts = TopicState("t", 1)
    assert ts.sole is ts.parts[0]
    ts.grow(3)
    assert ts.sole is None and [q.partition for q in ts.parts] == [0, 1, 2]
    assert TopicState("u", 2).sole is None


@pytest.mark.parametrize("api_version", ["0.8", "0.10"])
def test_merged_batches_in_the_legacy_formats(tmp_path: Any, api_version: str) -> None:
    """Before RecordBatch v2 a request's record set is built from items (``Unit.items``):
    batches merged into one request keep their order, keys and (MessageSet v1) their own
    creation times."""
    from hmbclient.broker import EmbeddedBroker

    broker = EmbeddedBroker(port=0, log_dir=str(tmp_path / "log")).start()
    try:
        topic = unique("legacy")
        sent: list[tuple[bytes | None, bytes]] = []
        with Producer(
            metadata_broker_list=broker.bootstrap, producer_type="async", api_version=api_version,
            batch_num_messages=50, queue_buffering_max_ms=60_000,
        ) as p:
            p.partitions_for(topic)
            for i in range(230):  # batches of 50 close on their own; flush takes them at once
                key = b"k%d" % i if i % 9 == 0 else None
                p.send(ProducerData(topic, key, [b"v%d" % i]))
                sent.append((key, b"v%d" % i))
            p.flush()
        host, port = broker.bootstrap.rsplit(":", 1)
        records = read_partition(host, int(port), topic, 0, api_version=api_version)
        assert [(r.key, r.value) for r in records] == sent
        if api_version == "0.10":
            stamps = [r.timestamp for r in records]
            assert all(t > 0 for t in stamps) and stamps == sorted(stamps)
    finally:
        broker.close()


@pytest.mark.parametrize("cls", [DefaultPartitioner, Murmur2Partitioner])
def test_hashed_partitioners_fast_cases_keep_the_contract(cls: type) -> None:
    """The producer's common cases (a null or bytes key, an int count) take a shortcut in the
    hashed partitioners: the same answers and refusals as the general path."""
    import random

    p = cls(random.Random(7))
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError):
            p.partition(None, bad)
    assert p.partition(None, 1) == 0
    assert p.partition(b"user-1", 5) == p.partition("user-1", 5) == p.partition(bytearray(b"user-1"), 5)
    assert [p.partition(None, 6) for _ in range(300)] != [0] * 300
    seeded = [cls(random.Random(11)).partition(None, 1000) for _ in range(3)]
    assert seeded == [seeded[0]] * 3  # a seeded rng gives a reproducible choice


def test_single_keyed_messages_take_the_partitioner_and_the_checks(broker: BrokerHandle) -> None:
    topic = unique("keyed")
    create_topic(broker.bootstrap, topic, 4)
    part = Murmur2Partitioner()
    with Producer(metadata_broker_list=broker.bootstrap, producer_type="async", partitioner=part, message_max_bytes=500) as p:
        p.partitions_for(topic)
        p.send(ProducerData(topic, b"warm", [b"w"]))  # the topic is known from here on
        sent: dict[int, list[tuple[bytes | None, bytes]]] = {0: [], 1: [], 2: [], 3: []}
        sent[part.partition(b"warm", 4)].append((b"warm", b"w"))
        futs = []
        for i in range(120):
            key = b"user-%d" % (i % 17) if i % 5 else None  # keyless ones in between
            fut = p.send(ProducerData(topic, key, [b"v%d" % i]))[0]
            futs.append(fut)
            if key is not None:
                assert fut.batch.partition == part.partition(key, 4)
            sent[fut.batch.partition].append((key, b"v%d" % i))
        with pytest.raises(MessageSizeTooLargeError, match="500"):
            p.send(ProducerData(topic, b"k" * 100, [b"x" * 401]))  # key + value over the limit
        p.send(ProducerData(topic, b"k" * 100, [b"x" * 400]))[0].result(20)  # exactly at it
        sent[part.partition(b"k" * 100, 4)].append((b"k" * 100, b"x" * 400))
        p.flush()
        assert all(f.done() and f.exception() is None for f in futs)
    got = read_all(broker.host, broker.port, topic, 4)
    assert {n: [(r.key, r.value) for r in recs] for n, recs in got.items()} == sent
