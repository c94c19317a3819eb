"""``Producer.produce_batch()``: many keyed messages through one accumulator call per partition.

Against a real embedded broker, every message read back from it:

* per-partition order; each key lands where ``produce()`` puts it (read back per partition);
* a group larger than one batch rolls over across batches (small ``batch_max_bytes``), each
  batch under the cap, nothing lost or reordered;
* a too-large message (or a bad type) refuses the whole call with nothing queued;
* delivery failures reach the callback once per message, naming the message (its key and value);
* without a callback, the returned outcome names exactly the messages the broker refused, by
  index (one partition, several partitions with keys, several without), and no report is made;
* a transactional producer: refused outside a transaction, committed inside one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient import Producer
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import MessageSizeTooLargeError, TransactionStateError
from hmbclient.producer import DeliveryReport
from partitioners import DefaultPartitioner

from .conftest import create_topic, read_partition, unique

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """An embedded broker taking record batches up to 20000 bytes, creating no topic on its own."""
    log_dir = str(tmp_path_factory.mktemp("pbatch") / "log")
    with EmbeddedBroker(port=0, log_dir=log_dir, message_max_bytes=20_000, auto_create_topics_enable=False) as b:
        yield b


class Reports:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, DeliveryReport]] = []
        self.lock = threading.Lock()

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        with self.lock:
            self.calls.append((err, report))


def _producer(b: EmbeddedBroker, **kw: Any) -> Producer:
    kw.setdefault("producer_type", "async")
    kw.setdefault("batch_max_bytes", 10_000)
    kw.setdefault("queue_buffering_max_ms", 2)
    return Producer(metadata_broker_list=b.bootstrap, **kw)


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_keys_go_where_produce_puts_them_in_order(broker: EmbeddedBroker, ptype: str) -> None:
    topic = unique("pbatch-keys")
    create_topic(broker.bootstrap, topic, 4)
    n = 600
    keys: list[bytes | None] = [b"k%d" % (i % 37) for i in range(n)]
    keys[5] = None  # a null key among keyed ones
    values = [b"v%d" % i for i in range(n)]
    cb = Reports()
    with _producer(broker, producer_type=ptype) as p:
        p.produce_batch(topic, values[:300], keys[:300], on_delivery=cb)
        p.produce_batch(topic, values[300:], keys[300:], on_delivery=cb)
        assert p.flush(30) == 0
    assert len(cb.calls) == n and all(e is None for e, _ in cb.calls)
    part = DefaultPartitioner()
    got: dict[bytes, tuple[int, bytes | None]] = {}
    for p_ in range(4):
        recs = read_partition(broker.host, broker.port, topic, p_)
        idx = [values.index(r.value) for r in recs]
        assert idx == sorted(idx), f"partition {p_} out of order"
        for r in recs:
            got[r.value] = (p_, r.key)
    assert len(got) == n
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        if k is not None:
            assert got[v] == (part.partition(k, 4), k), i
    # The reports carry each message's partition and offset as stored.
    for _, r in cb.calls:
        assert got[r.value][0] == r.partition and r.offset is not None


def test_a_group_spans_batches_under_the_cap(broker: EmbeddedBroker) -> None:
    topic = unique("pbatch-roll")
    create_topic(broker.bootstrap, topic, 1)
    values = [b"%04d" % i + b"x" * 90 for i in range(500)]
    keys = [b"key-%d" % i for i in range(500)]
    # sync: nothing sends until flush(), so the batches can be looked at as queued.
    with _producer(broker, producer_type="sync", batch_max_bytes=2_000) as p:
        acc = p._acc
        assert acc is not None
        p.produce_batch(topic, values, keys)
        queue = acc.topics[topic].parts[0]
        batches = list(queue.ready) + ([queue.open] if queue.open is not None else [])
        assert len(batches) >= 20  # 500 x ~110 bytes in batches of at most 2000
        assert all(b.nbytes <= 2_000 for b in batches)
        assert [v for b in batches for v in b.values] == values
        assert [k for b in batches for k in (b.keys or [])] == keys
        assert p.flush(30) == 0
    recs = read_partition(broker.host, broker.port, topic, 0)
    assert [(r.key, r.value) for r in recs] == list(zip(keys, values, strict=True))


def test_a_refused_message_queues_nothing(broker: EmbeddedBroker) -> None:
    topic = unique("pbatch-big")
    create_topic(broker.bootstrap, topic, 2)
    with _producer(broker, message_max_bytes=1000) as p:
        values = [b"a", b"b", b"x" * 990, b"c"]
        keys = [b"k1", b"k2", b"k" * 20, b"k3"]  # message 2: 1010 bytes with its key
        with pytest.raises(MessageSizeTooLargeError, match="message 2"):
            p.produce_batch(topic, values, keys)
        with pytest.raises(TypeError, match="message 1"):
            p.produce_batch(topic, [b"a", "str"], None)
        with pytest.raises(ValueError, match="keys"):
            p.produce_batch(topic, [b"a"], [b"k", b"l"])
        acc = p._acc
        assert acc is not None and acc.queued == 0
        p.produce_batch(topic, [b"ok"], [b"k1"])
        assert p.flush(30) == 0
    stored = [r.value for q in range(2) for r in read_partition(broker.host, broker.port, topic, q)]
    assert stored == [b"ok"]


def test_failures_are_reported_per_message(broker: EmbeddedBroker) -> None:
    """The broker (message_max_bytes=20000) refuses a batch holding a 30000-byte message; every
    message of the refused batch gets its own failed report, the others succeed."""
    topic = unique("pbatch-fail")
    create_topic(broker.bootstrap, topic, 1)
    cb = Reports()
    with _producer(broker, message_max_bytes=100_000, message_send_max_retries=0) as p:
        values = [b"s1", b"s2", b"y" * 30_000, b"s3"]
        p.produce_batch(topic, values, [b"a", b"b", b"c", b"d"], on_delivery=cb)
        assert p.flush(30) == 0
    assert len(cb.calls) == 4
    by_value = {r.value: (e, r) for e, r in cb.calls}
    err, r = by_value[b"y" * 30_000]
    assert isinstance(err, MessageSizeTooLargeError) and r.key == b"c" and r.offset is None
    assert by_value[b"s3"][0] is None  # rolled into a batch of its own
    stored = [rec.value for rec in read_partition(broker.host, broker.port, topic, 0)]
    assert b"s3" in stored and b"y" * 30_000 not in stored


@pytest.mark.parametrize(("partitions", "keyed"), [(1, False), (3, True), (3, False)])
def test_the_outcome_names_exactly_the_refused_messages(broker: EmbeddedBroker, partitions: int, keyed: bool) -> None:
    """No on_delivery: after the flush, ``outcome.failed()`` lists exactly the messages the
    broker refused (30000-byte values, over its message_max_bytes=20000; each rolls into a
    batch of its own under batch_max_bytes=10000), by index and in index order, with the
    broker's error; every other message is stored, and no delivery report was queued."""
    topic = unique("pbatch-outcome")
    create_topic(broker.bootstrap, topic, partitions)
    n = 300
    big = {0, 5, 6, 41, 150, n - 1}
    values = [b"y" * 30_000 if i in big else b"v%d" % i for i in range(n)]
    keys = [b"k%d" % (i % 7) for i in range(n)] if keyed else None
    with _producer(broker, message_max_bytes=100_000, message_send_max_retries=0) as p:
        outcome = p.produce_batch(topic, values, keys)
        assert len(outcome) == n
        assert p.flush(30) == 0 and outcome.done()
        acc = p._acc
        assert acc is not None and not acc.reports.done  # nothing for poll() to serve
        failed = outcome.failed()
    assert [i for i, _ in failed] == sorted(big)
    assert all(isinstance(e, MessageSizeTooLargeError) for _, e in failed), failed
    stored = sorted(r.value for q in range(partitions) for r in read_partition(broker.host, broker.port, topic, q))
    assert stored == sorted(v for i, v in enumerate(values) if i not in big)
    # the refused batches are the big messages' own: the rows beside them are not named
    assert sorted(hi - lo for b, _, lo, hi in outcome.segments if b.future.exception() is not None) == [1] * len(big)


def test_transactional_producer(broker: EmbeddedBroker) -> None:
    topic = unique("pbatch-txn")
    create_topic(broker.bootstrap, topic, 2)
    p = Producer(metadata_broker_list=broker.bootstrap, transactional_id=unique("tid"), request_required_acks=-1,
                 producer_type="async", queue_buffering_max_ms=2)
    try:
        p.init_transactions(10)
        with pytest.raises(TransactionStateError):
            p.produce_batch(topic, [b"early"], [b"k"])
        p.begin_transaction()
        p.produce_batch(topic, [b"t%d" % i for i in range(50)], [b"k%d" % i for i in range(50)])
        p.commit_transaction(10)
    finally:
        p.close()
    stored = sorted(r.value for q in range(2) for r in read_partition(broker.host, broker.port, topic, q))
    assert stored == sorted(b"t%d" % i for i in range(50))


class _Recording:
    """A partitioner answering ``len(key) % n`` (0 for None), recording every key it is asked."""

    def __init__(self) -> None:
        self.keys: list[Any] = []

    def partition(self, key: Any, num_partitions: int) -> int:
        self.keys.append(key)
        return 0 if key is None else len(key) % num_partitions


def test_a_custom_partitioner_is_asked_per_message(broker: EmbeddedBroker) -> None:
    topic = unique("pbatch-custom")
    create_topic(broker.bootstrap, topic, 3)
    part = _Recording()
    keys: list[bytes | None] = [b"a", b"bb", b"a", None, b"ccc", b"bb"]
    values = [b"v%d" % i for i in range(len(keys))]
    with _producer(broker, partitioner=part) as p:
        p.produce_batch(topic, values, keys)
        assert p.flush(30) == 0
    assert part.keys == keys
    stored = {q: [r.value for r in read_partition(broker.host, broker.port, topic, q)] for q in range(3)}
    assert stored == {0: [b"v3", b"v4"], 1: [b"v0", b"v2"], 2: [b"v1", b"v5"]}
