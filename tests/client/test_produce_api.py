"""``Producer.produce()`` / ``poll()`` / ``flush()``: confluent-kafka's shape on the one engine.

Against real brokers (Tansu and the embedded broker, the ``broker`` fixture), sync and async
producers alike, every message read back straight from the broker:

* order per partition; key, explicit partition, headers and timestamp honoured;
* each message's on_delivery called exactly once, from poll/flush in the caller's thread, with
  the offset it was stored at; poll's and flush's return values;
* errors reach the callbacks (the broker refusing a too-large message), errors found before
  queueing are raised (unknown topic with auto-create off, bad input), nothing half-queued;
* a full async queue raises a BufferError per queue_enqueue_timeout_ms;
* close() with callbacks pending serves each of them once;
* idempotence through FaultProxy dropping Produce answers: every value once, in order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from encoders import StringEncoder
from hmbclient import Producer
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import (
    HmbError,
    MessageSizeTooLargeError,
    ProducerClosedError,
    QueueFullError,
    UnknownTopicOrPartitionError,
)
from hmbclient.producer import DeliveryReport
from hmbclient.testing import FaultProxy, drop_every

from .conftest import BrokerHandle, create_topic, read_all, read_partition, unique

pytestmark = pytest.mark.timeout(240)

PTYPES = ["sync", "async"]


class Reports:
    """Collects (err, report, thread) per callback call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, DeliveryReport, int]] = []

    def __call__(self, err: Any, report: DeliveryReport) -> None:
        self.calls.append((err, report, threading.get_ident()))

    def by_value(self) -> dict[bytes, list[tuple[Any, DeliveryReport]]]:
        out: dict[bytes, list[tuple[Any, DeliveryReport]]] = {}
        for err, r, _ in self.calls:
            out.setdefault(r.value, []).append((err, r))
        return out


def _producer(bootstrap: str, ptype: str, **kw: Any) -> Producer:
    return Producer(metadata_broker_list=bootstrap, producer_type=ptype, queue_buffering_max_ms=2, **kw)


@pytest.mark.parametrize("ptype", PTYPES)
def test_order_offsets_and_one_callback_per_message(broker: BrokerHandle, ptype: str) -> None:
    topic = unique(f"papi-order-{ptype}")
    create_topic(broker.bootstrap, topic, 3)
    cb = Reports()
    n = 900
    served = 0
    with _producer(broker.bootstrap, ptype, batch_num_messages=50) as p:
        for i in range(n):
            key = b"k%d" % (i % 5)
            assert p.produce(topic, b"%s:%04d" % (key, i), key=key, on_delivery=cb) is None
            if i % 100 == 0:
                served += p.poll(0)
        assert p.flush(30) == 0
        served += p.poll(0)  # nothing left: flush served everything
    assert len(cb.calls) == n and 0 <= served < n  # the rest were served by flush
    assert {t for _, _, t in cb.calls} == {threading.get_ident()}  # the caller's thread
    by_value = cb.by_value()
    assert all(len(v) == 1 for v in by_value.values()) and len(by_value) == n
    stored = read_all(broker.host, broker.port, topic, 3)
    sent_per_partition: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for err, r, _ in cb.calls:
        assert err is None
        assert r.topic == topic and r.key == r.value.split(b":")[0]
    for i in range(n):  # send order per partition
        value = b"k%d:%04d" % (i % 5, i)
        sent_per_partition[by_value[value][0][1].partition].append(value)
    for part, recs in stored.items():
        assert [rec.value for rec in recs] == sent_per_partition[part]
        for rec in recs:
            err, r = by_value[rec.value][0]
            assert (r.partition, r.offset) == (part, rec.offset)
            assert rec.key == r.key
    # one key, one partition
    parts_of_key: dict[bytes, set[int]] = {}
    for _, r, _ in cb.calls:
        parts_of_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(s) == 1 for s in parts_of_key.values())


@pytest.mark.parametrize("ptype", PTYPES)
def test_partition_headers_and_timestamp_are_honoured(broker: BrokerHandle, ptype: str) -> None:
    topic = unique(f"papi-fields-{ptype}")
    create_topic(broker.bootstrap, topic, 2)
    cb = Reports()
    with _producer(broker.bootstrap, ptype) as p:
        p.produce(topic, b"plain", partition=1, on_delivery=cb)
        p.produce(topic, b"stamped", partition=1, timestamp=1_600_000_000_000, on_delivery=cb)
        p.produce(topic, b"headed", key=b"hk", partition=1, headers=[("h1", b"x"), ("h2", None)], on_delivery=cb)
        p.produce(topic, b"dict-headed", partition=1, headers={"s": "text"}, timestamp=1_600_000_000_500, on_delivery=cb)
        p.produce(topic, b"after", partition=1, on_delivery=cb)
        p.produce(topic, b"p0", partition=0, on_delivery=cb)
        assert p.flush(30) == 0
        p.produce(topic, b"any", partition=-1, on_delivery=cb)  # confluent-kafka's "unassigned"
        assert p.flush(30) == 0
        [(_, anywhere, _)] = [c for c in cb.calls if c[1].value == b"any"]
        cb.calls = [c for c in cb.calls if c[1].value != b"any"]
    assert [r.value for _, r, _ in sorted(cb.calls, key=lambda c: (c[1].partition, c[1].offset))] == [
        b"p0", b"plain", b"stamped", b"headed", b"dict-headed", b"after"
    ]
    recs = {r.value: r for r in read_partition(broker.host, broker.port, topic, 1)}
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 1)] == [
        b"plain", b"stamped", b"headed", b"dict-headed", b"after"
    ] + [b"any"][: anywhere.partition]
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 0)] == [b"p0", b"any"][: 2 - anywhere.partition]
    assert anywhere.partition in (0, 1) and anywhere.offset is not None
    assert recs[b"stamped"].timestamp == 1_600_000_000_000
    assert recs[b"dict-headed"].timestamp == 1_600_000_000_500
    assert recs[b"plain"].timestamp > 1_700_000_000_000 and recs[b"after"].timestamp > 1_700_000_000_000
    assert recs[b"headed"].key == b"hk"
    assert list(recs[b"headed"].headers) == [("h1", b"x"), ("h2", None)]
    assert list(recs[b"dict-headed"].headers) == [("s", b"text")]
    reports = {r.value: r for _, r, _ in cb.calls}
    assert reports[b"stamped"].timestamp == 1_600_000_000_000
    assert reports[b"headed"].headers == (("h1", b"x"), ("h2", None))


def test_serializers_apply_as_in_send(broker: BrokerHandle) -> None:
    topic = unique("papi-ser")
    create_topic(broker.bootstrap, topic, 1)
    cb = Reports()
    with _producer(broker.bootstrap, "async", serializer=StringEncoder(), key_serializer=StringEncoder()) as p:
        p.produce(topic, "héllo", key="k", on_delivery=cb)
        p.flush(30)
    [rec] = read_partition(broker.host, broker.port, topic, 0)
    assert (rec.key, rec.value) == (b"k", "héllo".encode())
    assert cb.calls[0][1].value == "héllo".encode()


@pytest.mark.parametrize("ptype", PTYPES)
def test_poll_and_flush_return_values(broker: BrokerHandle, ptype: str) -> None:
    topic = unique(f"papi-poll-{ptype}")
    create_topic(broker.bootstrap, topic, 1)
    cb = Reports()
    with _producer(broker.bootstrap, ptype) as p:
        assert p.poll(0) == 0  # nothing produced
        assert p.flush(5) == 0
        for i in range(10):
            p.produce(topic, b"%d" % i, on_delivery=cb if i % 2 == 0 else None)
        served = 0
        for _ in range(200):  # bounded: each poll waits up to 0.5 s for the next report
            served += p.poll(0.5)
            if served == 5:
                break
        assert served == 5  # only the messages with a callback count
        assert p.poll(0) == 0
        assert p.flush(5) == 0
    assert sorted(r.offset for _, r, _ in cb.calls) == [0, 2, 4, 6, 8]


def test_flush_returns_what_is_still_queued(tmp_path: Any) -> None:
    """A broker that does not answer: flush(timeout) gives back the count, not an error."""
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "log")) as b:
        topic = unique("papi-stuck")
        create_topic(b.bootstrap, topic, 1)
        with FaultProxy((b.host, b.port), drop=drop_every(1)) as proxy:
            cb = Reports()
            p = _producer(proxy.bootstrap, "async", request_required_acks=1, enable_idempotence=False,
                          message_send_max_retries=1000, retry_backoff_ms=50, request_timeout_ms=2_000)
            for i in range(7):
                p.produce(topic, b"%d" % i, on_delivery=cb)
            assert p.flush(0.5) == 7
            assert cb.calls == []
            p.close(0.5)  # gives up: every callback runs once, with the error (closed, or the last)
            assert len(cb.calls) == 7
            assert all(isinstance(err, HmbError) and r.offset is None for err, r, _ in cb.calls), [e for e, _, _ in cb.calls]
            assert sorted(r.value for _, r, _ in cb.calls) == [b"%d" % i for i in range(7)]


@pytest.mark.parametrize("ptype", PTYPES)
def test_close_serves_pending_callbacks_once(broker: BrokerHandle, ptype: str) -> None:
    topic = unique(f"papi-close-{ptype}")
    create_topic(broker.bootstrap, topic, 2)
    cb = Reports()
    p = _producer(broker.bootstrap, ptype)
    for i in range(300):
        p.produce(topic, b"%03d" % i, on_delivery=cb)
    p.close()  # no poll, no flush
    assert sorted(r.value for _, r, _ in cb.calls) == [b"%03d" % i for i in range(300)]
    assert all(err is None and r.offset is not None for err, r, _ in cb.calls)
    assert p.poll(0) == 0 and p.flush(1) == 0  # nothing served twice
    with pytest.raises(ProducerClosedError):
        p.produce(topic, b"late")
    stored = read_all(broker.host, broker.port, topic, 2)
    assert sum(len(v) for v in stored.values()) == 300


@pytest.fixture
def small_broker(tmp_path: Any) -> Iterator[EmbeddedBroker]:
    """An embedded broker taking messages up to 1000 bytes, creating no topic on its own."""
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "log"), message_max_bytes=1000, auto_create_topics_enable=False) as b:
        yield b


@pytest.mark.parametrize("ptype", PTYPES)
def test_errors_reach_the_callbacks(small_broker: EmbeddedBroker, ptype: str) -> None:
    b = small_broker
    topic = unique(f"papi-err-{ptype}")
    create_topic(b.bootstrap, topic, 1)
    cb = Reports()
    with _producer(b.bootstrap, ptype, message_max_bytes=100_000, batch_num_messages=1) as p:
        p.produce(topic, b"small-1", on_delivery=cb)
        p.flush(30)
        p.produce(topic, b"x" * 5000, on_delivery=cb)  # the broker refuses it
        p.flush(30)
        p.produce(topic, b"small-2", on_delivery=cb)
        assert p.flush(30) == 0
    got = cb.by_value()
    assert len(cb.calls) == 3
    [(err, r)] = got[b"x" * 5000]
    assert isinstance(err, MessageSizeTooLargeError) and r.offset is None, err
    assert [e for e, _ in got[b"small-1"]] == [None] and [e for e, _ in got[b"small-2"]] == [None]
    assert [rec.value for rec in read_partition(b.host, b.port, topic, 0)] == [b"small-1", b"small-2"]


@pytest.mark.parametrize("ptype", PTYPES)
def test_errors_before_queueing_are_raised_and_queue_nothing(small_broker: EmbeddedBroker, ptype: str) -> None:
    b = small_broker
    topic = unique(f"papi-bad-{ptype}")
    create_topic(b.bootstrap, topic, 2)
    cb = Reports()
    with _producer(b.bootstrap, ptype, message_max_bytes=1000, request_timeout_ms=3_000) as p:
        with pytest.raises(UnknownTopicOrPartitionError):
            p.produce(unique("papi-missing"), b"v", on_delivery=cb)  # auto-create is off
        with pytest.raises(MessageSizeTooLargeError):
            p.produce(topic, b"x" * 1001, on_delivery=cb)
        with pytest.raises(TypeError, match="bytes"):
            p.produce(topic, "not bytes", on_delivery=cb)
        with pytest.raises(ValueError, match="out of range"):
            p.produce(topic, b"v", partition=2, on_delivery=cb)
        with pytest.raises(TypeError, match="header"):
            p.produce(topic, b"v", headers=[("h", 5)], on_delivery=cb)
        with pytest.raises(TypeError, match="callable"):
            p.produce(topic, b"v", on_delivery="nope")
        p.produce(topic, b"ok", partition=0, on_delivery=cb)
        assert p.flush(30) == 0
    assert [(e, r.value) for e, r, _ in cb.calls] == [(None, b"ok")]
    assert [rec.value for rec in read_partition(b.host, b.port, topic, 0)] == [b"ok"]
    assert read_partition(b.host, b.port, topic, 1) == []


class _Fixed:
    """A partitioner answering ``answer`` whatever the key (recording the keys it saw)."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.keys: list[Any] = []

    def partition(self, key: Any, num_partitions: int) -> int:
        self.keys.append(key)
        return self.answer


@pytest.mark.parametrize("key", [None, b"k"])
def test_the_inlined_produce_keeps_the_general_checks(broker: BrokerHandle, key: bytes | None) -> None:
    """The async, bytes-only produce is inlined: once the topic is known it must still ask the
    partitioner, check its answer and the size, and refuse after close."""
    topic = unique("papi-fast")
    create_topic(broker.bootstrap, topic, 3)
    part = _Fixed(2)
    cb = Reports()
    with _producer(broker.bootstrap, "async", partitioner=part, message_max_bytes=500) as p:
        for i in range(20):
            p.produce(topic, b"m%d" % i, key=key, on_delivery=cb)
        assert part.keys == [key] * 20
        with pytest.raises(MessageSizeTooLargeError, match="500"):
            p.produce(topic, b"x" * 501, key=key)
        part.answer = 3
        with pytest.raises(ValueError, match="partitioner returned 3"):
            p.produce(topic, b"x", key=key)
        assert p.flush(30) == 0
    assert [(r.partition, r.offset) for _, r, _ in cb.calls] == [(2, i) for i in range(20)]
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 2)] == [b"m%d" % i for i in range(20)]
    with pytest.raises(ProducerClosedError):
        p.produce(topic, b"late", key=key)


def test_a_raising_callback_loses_no_report(broker: BrokerHandle) -> None:
    topic = unique("papi-raise")
    create_topic(broker.bootstrap, topic, 1)
    seen: list[bytes] = []

    def cb(err: Any, r: DeliveryReport) -> None:
        seen.append(r.value)
        if r.value == b"2":
            raise RuntimeError("boom")

    with _producer(broker.bootstrap, "sync") as p:
        for i in range(5):
            p.produce(topic, b"%d" % i, on_delivery=cb)
        with pytest.raises(RuntimeError, match="boom"):
            p.flush(30)
        assert p.flush(30) == 0
    assert sorted(seen) == [b"0", b"1", b"2", b"3", b"4"]


def test_full_async_queue_raises_buffer_error(tmp_path: Any) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "log")) as b:
        topic = unique("papi-full")
        create_topic(b.bootstrap, topic, 1)
        with FaultProxy((b.host, b.port), drop=drop_every(1)) as proxy:  # nothing is acknowledged
            p = _producer(proxy.bootstrap, "async", queue_buffering_max_messages=20, batch_num_messages=10,
                          queue_enqueue_timeout_ms=0, request_required_acks=1, enable_idempotence=False,
                          message_send_max_retries=1000, retry_backoff_ms=50)
            cb = Reports()
            for i in range(20):
                p.produce(topic, b"%d" % i, on_delivery=cb)
            with pytest.raises(BufferError):  # confluent-kafka's exception...
                p.produce(topic, b"over", on_delivery=cb)
            with pytest.raises(QueueFullError):  # ...is hmbclient's
                p.produce(topic, b"over", on_delivery=cb)
            p.close(0.5)
            assert len(cb.calls) == 20 and b"over" not in {r.value for _, r, _ in cb.calls}


def test_sync_produce_sends_once_its_queue_bound_is_reached(broker: BrokerHandle) -> None:
    """A sync producer has no background sender: past queue_buffering_max_messages, produce()
    sends in the caller's thread; callbacks still wait for poll/flush."""
    topic = unique("papi-syncbound")
    create_topic(broker.bootstrap, topic, 1)
    cb = Reports()
    with _producer(broker.bootstrap, "sync", queue_buffering_max_messages=50, batch_num_messages=50) as p:
        for i in range(500):
            p.produce(topic, b"%03d" % i, on_delivery=cb)
        stored_before_flush = len(read_partition(broker.host, broker.port, topic, 0))
        assert cb.calls == []  # served only by poll/flush
        assert p.flush(30) == 0
    assert stored_before_flush >= 450, stored_before_flush
    assert [r.offset for _, r, _ in cb.calls] == list(range(500))


@pytest.mark.parametrize("ptype", PTYPES)
def test_produce_and_send_share_one_order(broker: BrokerHandle, ptype: str) -> None:
    from hmbclient import ProducerData

    topic = unique(f"papi-mixed-{ptype}")
    create_topic(broker.bootstrap, topic, 1)
    cb = Reports()
    with _producer(broker.bootstrap, ptype) as p:
        for i in range(0, 60, 3):
            p.produce(topic, b"%02d" % i, on_delivery=cb)
            p.send(ProducerData(topic, None, [b"%02d" % (i + 1), b"%02d" % (i + 2)]))
        assert p.flush(30) == 0
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 0)] == [b"%02d" % i for i in range(60)]
    assert [r.offset for _, r, _ in cb.calls] == list(range(0, 60, 3))


# -- idempotence through lost answers ---------------------------------------------------------


@pytest.mark.parametrize("ptype", PTYPES)
def test_lost_answers_every_value_once_in_order(broker: BrokerHandle, ptype: str) -> None:
    topic = unique(f"papi-idem-{ptype}")
    partitions = 3
    n = 1200
    create_topic(broker.bootstrap, topic, partitions)
    cb = Reports()
    with FaultProxy((broker.host, broker.port), drop=drop_every(3)) as proxy:
        with _producer(
            proxy.bootstrap,
            ptype,
            request_required_acks=-1,
            enable_idempotence=True,
            message_send_max_retries=50,
            retry_backoff_ms=20,
            batch_num_messages=40,
            batch_max_bytes=1_500,
            request_timeout_ms=5_000,
        ) as p:
            for i in range(n):
                key = b"key-%d" % (i % 7)
                p.produce(topic, b"%s:%05d" % (key, i), key=key, on_delivery=cb)
                if i % 50 == 0:
                    p.poll(0)
            assert p.flush(120) == 0
        assert proxy.stats()["dropped"] >= 5, proxy.stats()
        assert proxy.failure is None
    assert len(cb.calls) == n and all(err is None for err, _, _ in cb.calls)
    sent: dict[int, list[bytes]] = {q: [] for q in range(partitions)}
    part_of = {r.value: r.partition for _, r, _ in cb.calls}
    for i in range(n):
        value = b"key-%d:%05d" % (i % 7, i)
        sent[part_of[value]].append(value)
    offsets = {r.value: r.offset for _, r, _ in cb.calls}
    for q in range(partitions):
        stored = read_partition(broker.host, broker.port, topic, q)
        assert [rec.value for rec in stored] == sent[q], f"partition {q}"
        # A retry the broker answers DUPLICATE_SEQUENCE_NUMBER reports no offset (as Kafka's
        # clients: the broker no longer says where it is); every other one is exact.
        wrong = [(rec.value, rec.offset, offsets[rec.value]) for rec in stored if offsets[rec.value] not in (rec.offset, None)]
        assert not wrong, wrong[:20]
        assert any(offsets[rec.value] is not None for rec in stored)
