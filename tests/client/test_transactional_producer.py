"""The transactional producer's failure paths on the embedded broker (whose coordinator can be
made to time transactions out in milliseconds; Kafka's checks every 10 s):

* An abortable error: a batch the broker refuses for good (over its message.max.bytes) makes
  the transaction abortable: commit raises TransactionAbortableError with the broker's error
  as its cause, abort works, and the next transaction commits (a new epoch resets the
  sequences); the refused batch and the rest of that transaction are never visible.
* A transaction open past transaction.timeout.ms is aborted by the coordinator: commit raises
  TransactionTimedOutError (fatal: the epoch was bumped), every later call says so, and a new
  producer with the same id takes over.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from waiting import wait_until

from hmbclient import Consumer, FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.consumer.simple import LATEST_TIME
from hmbclient.errors import (
    MessageSizeTooLargeError,
    TransactionAbortableError,
    TransactionStateError,
    TransactionTimedOutError,
)

from .conftest import unique


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        port=0, num_partitions=1, message_max_bytes=10_000, transaction_abort_timed_out_transaction_cleanup_interval_ms=50
    ) as b:
        yield b


def _committed(broker: EmbeddedBroker, topic: str) -> list[bytes]:
    """What read_committed readers see, once the markers are written (EndTxn is answered
    before the coordinator writes them: the last stable offset then reaches the end)."""
    with SimpleConsumer(broker.host, broker.port, isolation_level="read_committed") as c, \
            SimpleConsumer(broker.host, broker.port) as ru:
        def latest(consumer: SimpleConsumer) -> int:
            return consumer.get_offsets_before(topic, 0, LATEST_TIME, 1)[0]

        end = wait_until(lambda: (e := latest(c)) == latest(ru) and e, 10, "the markers")
        out: list[bytes] = []
        offset = 0
        while offset < end:
            ms = c.fetch(FetchRequest(topic, 0, offset))
            out += [bytes(m.message.value) for m in ms]
            offset = ms.next_offset
        return out


def _polled(broker: EmbeddedBroker, topic: str, level: str, last: bytes) -> list[bytes]:
    """The values the subscribe/poll Consumer (assign()ed, the given isolation.level) hands out
    until ``last``."""
    with Consumer({"bootstrap.servers": broker.bootstrap, "isolation.level": level, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, 0)])
        got: list[bytes] = []
        wait_until(lambda: got.extend(r.value for r in c.poll(0.2)) or last in got, 10, f"{last!r} polled")
        return got


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_abortable_error_then_abort_and_go_on(broker, ptype):
    topic = unique("abortable")
    p = Producer(metadata_broker_list=broker.bootstrap, transactional_id=unique("tid"), request_required_acks=-1,
                 producer_type=ptype, message_max_bytes=50_000, message_send_max_retries=1)
    try:
        p.init_transactions(10)
        epoch = p.producer_identity
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"fine"]))
        if ptype == "sync":
            with pytest.raises(MessageSizeTooLargeError):
                p.send(ProducerData(topic, None, [b"x" * 20_000]))  # the broker takes at most 10000
        else:
            p.produce(topic, b"x" * 20_000)
        with pytest.raises(TransactionAbortableError) as info:
            p.commit_transaction(10)
        assert isinstance(info.value.__cause__, MessageSizeTooLargeError)
        assert p.transaction_state == "AbortableError"
        p.abort_transaction(10)
        assert p.transaction_state == "Ready"
        assert p.producer_identity != epoch  # a new epoch: sequences start again
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"next"]))
        p.commit_transaction(10)
    finally:
        p.close()
    assert _committed(broker, topic) == [b"next"]
    # The poll Consumer: read_committed drops the aborted record, read_uncommitted hands it out
    # (the sync producer wrote it alone; the async one may have batched it with the refused one).
    assert _polled(broker, topic, "read_committed", b"next") == [b"next"]
    if ptype == "sync":
        assert _polled(broker, topic, "read_uncommitted", b"next") == [b"fine", b"next"]


def test_transaction_timed_out_by_the_coordinator(broker):
    topic, tid = unique("timeout"), unique("tid")
    p = Producer(metadata_broker_list=broker.bootstrap, transactional_id=tid, request_required_acks=-1, transaction_timeout_ms=200)
    try:
        p.init_transactions(10)
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"late"]))
        # the coordinator aborts it: its abort marker moves the last stable offset to the end
        with SimpleConsumer(broker.host, broker.port, isolation_level="read_committed") as rc:
            wait_until(lambda: rc.get_offsets_before(topic, 0, LATEST_TIME, 1)[0] == 2, 10, "the coordinator's abort")
        with pytest.raises(TransactionTimedOutError, match="transaction.timeout.ms=200"):
            p.commit_transaction(10)
        assert p.transaction_state == "FatalError"
        with pytest.raises(TransactionTimedOutError, match="cannot begin"):
            p.begin_transaction()
    finally:
        p.close()
    successor = Producer(metadata_broker_list=broker.bootstrap, transactional_id=tid, request_required_acks=-1)
    try:
        successor.init_transactions(10)
        successor.begin_transaction()
        successor.send(ProducerData(topic, None, [b"on time"]))
        successor.commit_transaction(10)
    finally:
        successor.close()
    assert _committed(broker, topic) == [b"on time"]


def test_produce_only_inside_a_transaction_on_the_inlined_path(broker):
    """(T2) with a topic the producer knows, a bytes value and no key, produce() takes the
    inlined path, which is on only while a transaction is open: after commit and after abort
    it refuses (nothing queued), inside a transaction it queues."""
    topic = unique("inlined")
    p = Producer(metadata_broker_list=broker.bootstrap, transactional_id=unique("tx"), request_required_acks=-1,
                 producer_type="async", queue_buffering_max_ms=5)
    try:
        p.init_transactions(30)
        for end, kept in ((p.commit_transaction, True), (p.abort_transaction, False)):
            p.begin_transaction()
            for i in range(100):
                p.produce(topic, b"%d-%d" % (kept, i))
            end(30)
            with pytest.raises(TransactionStateError, match="begin_transaction"):
                p.produce(topic, b"after")
            assert p.flush(5) == 0
        assert _committed(broker, topic) == [b"1-%d" % i for i in range(100)]
    finally:
        p.close()
