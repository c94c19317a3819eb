"""The broker's transactions (KIP-98) over the wire, request by request: the coordinator's
answers (InitProducerId, AddPartitionsToTxn, EndTxn; timeouts; fencing by a new producer and by
the transaction timeout; error codes per request version), the partition's last stable offset
through Fetch isolation_level=1 (with the aborted transactions) and ListOffsets, and a broker
killed with SIGKILL in the middle of a transaction: after the restart the dangling transaction
holds read_committed readers only until the next InitProducerId of its id, or its timeout,
aborts it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.process import BrokerProcess
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.protocol.records import NONE
from hmbclient.protocol.records.control import encode_transactional_batch, read_committed

from .conftest import RawClient, create_topic, wait_until

pytestmark = pytest.mark.timeout(120)
E = ErrorCode
RETRIABLE = (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR, E.CONCURRENT_TRANSACTIONS)


def _req(api: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(api, version)].build(**fields)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        port=0,
        log_dir=str(tmp_path_factory.mktemp("txn")),
        num_partitions=1,
        transaction_max_timeout_ms=60_000,
        transaction_abort_timed_out_transaction_cleanup_interval_ms=100,
    ) as b:
        yield b


@pytest.fixture
def c(broker: EmbeddedBroker) -> Iterator[RawClient]:
    with RawClient(broker.host, broker.port) as client:
        yield client


def retry(send: Callable[[], Any], code_of: Callable[[Any], int], timeout_s: float = 20.0) -> Any:
    """The answer once it is not a retriable coordinator error."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = send()
        if code_of(resp) not in RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.05)


def init(c: RawClient, tid: str, timeout_ms: int = 30_000, version: int = 1) -> Any:
    return retry(lambda: c.request(_req(ApiKey.INIT_PRODUCER_ID, version, transactional_id=tid, transaction_timeout_ms=timeout_ms)), lambda r: r.error_code)


def add(c: RawClient, tid: str, pid: int, epoch: int, topic: str, version: int = 1) -> int:
    r = retry(lambda: c.request(_req(ApiKey.ADD_PARTITIONS_TO_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch, topics=[(topic, [0])])),
              lambda r: r.results[0].results[0].error_code)
    return int(r.results[0].results[0].error_code)


def end(c: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 1) -> int:
    r = retry(lambda: c.request(_req(ApiKey.END_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)), lambda r: r.error_code)
    return int(r.error_code)


def send(c: RawClient, tid: str, topic: str, pid: int, epoch: int, seq: int, *values: bytes) -> Any:
    batch = encode_transactional_batch(NONE, [(None, v, int(time.time() * 1000)) for v in values], pid, epoch, seq, timestamp_ms=int(time.time() * 1000))
    r = c.request(_req(ApiKey.PRODUCE, 3, transactional_id=tid, acks=-1, timeout_ms=5000, topics=[(topic, [(0, batch)])]))
    return r.topics[0].partitions[0]


def fetch(c: RawClient, topic: str, isolation: int) -> Any:
    r = c.request(_req(ApiKey.FETCH, 4, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=isolation,
                       topics=[(topic, [(0, 0, 1 << 20)])]))
    return r.topics[0].partitions[0]


def committed_values(c: RawClient, topic: str) -> tuple[int, list[bytes]]:
    p = fetch(c, topic, 1)
    assert p.error_code == E.NONE
    return p.last_stable_offset, [r.value for r in read_committed(p.records, p.aborted_transactions)]


def latest(c: RawClient, topic: str, isolation: int) -> int:
    r = c.request(_req(ApiKey.LIST_OFFSETS, 2, replica_id=-1, isolation_level=isolation, topics=[(topic, [(0, -1)])]))
    return int(r.topics[0].partitions[0].offset)


def topic_with_data(c: RawClient) -> str:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(c, topic)
    wait_until(lambda: c.request(_req(ApiKey.METADATA, 1, topics=[topic])).topics[0].partitions, 10, f"{topic} created")
    return topic


def test_abort_commit_lso_and_aborted_list(c: RawClient) -> None:
    topic = topic_with_data(c)
    tid = f"tid-{topic}"
    r = init(c, tid)
    assert r.error_code == E.NONE and r.producer_epoch == 0
    pid, epoch = r.producer_id, r.producer_epoch
    assert add(c, tid, pid, epoch, topic) == E.NONE
    assert send(c, tid, topic, pid, epoch, 0, b"a1", b"a2").error_code == E.NONE
    # open: read_committed sees nothing, read_uncommitted sees the records
    assert latest(c, topic, 1) == 0 and latest(c, topic, 0) == 2
    assert committed_values(c, topic) == (0, [])
    assert end(c, tid, pid, epoch, False) == E.NONE
    wait_until(lambda: latest(c, topic, 1) == 3, 10, "the abort marker moves the LSO")
    p = fetch(c, topic, 1)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]
    assert p.last_stable_offset == 3 and p.high_watermark == 3
    assert fetch(c, topic, 0).aborted_transactions is None  # read_uncommitted gets no list
    # the next transaction commits
    assert add(c, tid, pid, epoch, topic) == E.NONE
    assert send(c, tid, topic, pid, epoch, 2, b"c1").error_code == E.NONE
    assert end(c, tid, pid, epoch, True) == E.NONE
    wait_until(lambda: committed_values(c, topic) == (5, [b"c1"]), 10, "the commit is read")
    assert end(c, tid, pid, epoch, True) == E.NONE  # a retried EndTxn of a completed commit
    assert end(c, tid, pid, epoch, False) == E.INVALID_TXN_STATE


def test_refusals(c: RawClient) -> None:
    topic = topic_with_data(c)
    tid = f"tid-{topic}"
    assert init(c, tid, timeout_ms=60_001).error_code == E.INVALID_TRANSACTION_TIMEOUT  # over transaction.max.timeout.ms
    assert init(c, tid, timeout_ms=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
    r = init(c, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add(c, tid, pid + 1, epoch, topic) == E.INVALID_PRODUCER_ID_MAPPING
    assert add(c, "tid-never-seen", pid, epoch, topic) == E.INVALID_PRODUCER_ID_MAPPING
    assert end(c, tid, pid, epoch, True) == E.INVALID_TXN_STATE  # nothing open
    r = c.request(_req(ApiKey.ADD_PARTITIONS_TO_TXN, 1, transactional_id=tid, producer_id=pid, producer_epoch=epoch, topics=[(topic, [0, 7])]))
    assert sorted((p.partition, p.error_code) for p in r.results[0].results) == [(0, E.OPERATION_NOT_ATTEMPTED), (7, E.UNKNOWN_TOPIC_OR_PARTITION)]
    # a plain batch of a producer in a transaction, and a control batch from a client
    assert add(c, tid, pid, epoch, topic) == E.NONE
    assert send(c, tid, topic, pid, epoch, 0, b"x").error_code == E.NONE
    from hmbclient.protocol.records import v2
    plain = bytes(v2.encode(NONE, [(None, b"p", 0)], 0, 0, producer=(pid, epoch, 1)))
    r = c.request(_req(ApiKey.PRODUCE, 3, transactional_id=None, acks=1, timeout_ms=5000, topics=[(topic, [(0, plain)])]))
    assert r.topics[0].partitions[0].error_code == E.INVALID_TXN_STATE
    from hmbclient.protocol.records.control import ControlType, EndTxnMarker, encode_control_batch
    marker = encode_control_batch(pid, epoch, EndTxnMarker(ControlType.COMMIT, 0), timestamp_ms=0)
    r = c.request(_req(ApiKey.PRODUCE, 3, transactional_id=tid, acks=1, timeout_ms=5000, topics=[(topic, [(0, marker)])]))
    assert r.topics[0].partitions[0].error_code == E.INVALID_RECORD
    assert latest(c, topic, 1) == 0  # still open


def test_a_new_producer_fences_and_aborts_the_open_transaction(c: RawClient, broker: EmbeddedBroker) -> None:
    topic = topic_with_data(c)
    tid = f"tid-{topic}"
    r = init(c, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add(c, tid, pid, epoch, topic) == E.NONE
    assert send(c, tid, topic, pid, epoch, 0, b"zombie").error_code == E.NONE
    first = c.request(_req(ApiKey.INIT_PRODUCER_ID, 1, transactional_id=tid, transaction_timeout_ms=30_000))
    assert first.error_code in (E.CONCURRENT_TRANSACTIONS, E.NONE)  # the abort runs first
    r = init(c, tid)
    assert r.error_code == E.NONE and r.producer_id == pid and r.producer_epoch == epoch + 2  # fence + the new producer's bump
    assert committed_values(c, topic) == (2, [])
    # the zombie: fenced on every path, with the error of its request version
    assert end(c, tid, pid, epoch, True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert end(c, tid, pid, epoch, True, version=2) == E.PRODUCER_FENCED
    assert add(c, tid, pid, epoch, topic, version=2) == E.PRODUCER_FENCED
    assert send(c, tid, topic, pid, epoch, 1, b"late").error_code == E.INVALID_PRODUCER_EPOCH
    txn = broker.broker.transactions.metadata_of(tid)
    assert txn is not None and txn.state.label == "Empty"


def test_the_timeout_aborts_and_fences(c: RawClient, broker: EmbeddedBroker) -> None:
    topic = topic_with_data(c)
    tid = f"tid-{topic}"
    r = init(c, tid, timeout_ms=300)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add(c, tid, pid, epoch, topic) == E.NONE
    assert send(c, tid, topic, pid, epoch, 0, b"slow").error_code == E.NONE
    wait_until(lambda: latest(c, topic, 1) == 2, 10, "the timed-out transaction is aborted")
    txn = broker.broker.transactions.metadata_of(tid)
    assert txn is not None and txn.state.label == "CompleteAbort" and txn.producer_epoch == epoch + 1
    assert end(c, tid, pid, epoch, True, version=2) == E.PRODUCER_FENCED
    assert committed_values(c, topic) == (2, [])


def _ck_producer(bootstrap: str, tid: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})


def _read_committed(bootstrap: str, topic: str, deadline_s: float = 20.0) -> list[bytes]:
    """What a confluent-kafka read_committed consumer gets up to the partition's end; fails if
    it never gets there (a reader stuck behind a dangling transaction)."""
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        cons.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        stop = time.monotonic() + deadline_s
        while time.monotonic() < stop:
            m = cons.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise AssertionError(m.error())
            out.append(m.value())
        raise AssertionError(f"read_committed reader of {topic} never reached the end (got {out})")
    finally:
        cons.close()


@pytest.mark.parametrize("ended_by", ["init_transactions", "timeout"])
def test_kill_9_mid_transaction(tmp_path: Path, ended_by: str) -> None:
    topic = f"kill-{ended_by}"
    tid = f"tid-{topic}"
    with BrokerProcess(str(tmp_path), num_partitions=1, transaction_abort_timed_out_transaction_cleanup_interval_ms=200) as bp:
        p = _ck_producer(bp.bootstrap, tid, **({"transaction.timeout.ms": 3000} if ended_by == "timeout" else {}))
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"committed", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"dangling", partition=0)
        p.flush(30)  # the records are in the log, the transaction open
        with RawClient(bp.host, bp.port) as c:
            assert latest(c, topic, 0) > latest(c, topic, 1)
        bp.kill()
        bp.start()
        with RawClient(bp.host, bp.port, timeout_s=30) as c:
            wait_until(lambda: latest(c, topic, 0) >= 3, 20, "the partition is served again")
            if ended_by == "timeout":
                # nobody comes back: the coordinator's timeout aborts it
                wait_until(lambda: latest(c, topic, 1) == latest(c, topic, 0), 20, "the dangling transaction is aborted by its timeout")
            else:
                assert latest(c, topic, 1) < latest(c, topic, 0), "the dangling transaction is still open after the restart"
                fresh = _ck_producer(bp.bootstrap, tid)
                fresh.init_transactions(30)  # aborts it
                fresh.begin_transaction()
                fresh.produce(topic, b"after", partition=0)
                fresh.commit_transaction(30)
        expected = [b"committed"] if ended_by == "timeout" else [b"committed", b"after"]
        assert _read_committed(bp.bootstrap, topic) == expected


def test_a_coordinator_loading_a_decided_commit_writes_its_markers(tmp_path: Path) -> None:
    """The coordinator wrote PrepareCommit and stopped before any marker (written here into its
    stopped broker's ``__transaction_state``, as a crash at that point leaves it): the broker
    that loads the partition sends the markers and completes the commit; the group offset sent
    in the transaction, pending until then, is committed too."""
    from dataclasses import replace

    from hmbclient.broker.log.config import LogConfig
    from hmbclient.broker.log.log import Log
    from hmbclient.broker.metadata import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
    from hmbclient.broker.transaction.log import encode_key, encode_value, partition_for, value_of
    from hmbclient.broker.transaction.state import TxnState
    from hmbclient.protocol.records import encode_records

    topic, tid, group = "reload", "tid-reload", "g-reload"
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), num_partitions=1) as b, RawClient(b.host, b.port) as c:
        create_topic(c, topic)
        r = init(c, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert add(c, tid, pid, epoch, topic) == E.NONE
        r = retry(lambda: c.request(_req(ApiKey.ADD_OFFSETS_TO_TXN, 1, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)),
                  lambda r: r.error_code)
        assert r.error_code == E.NONE
        assert send(c, tid, topic, pid, epoch, 0, b"decided").error_code == E.NONE
        r = retry(lambda: c.request(_req(ApiKey.TXN_OFFSET_COMMIT, 1, transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
                                         topics=[(topic, [(0, 1, "m")])])), lambda r: r.topics[0].partitions[0].error_code)
        assert r.topics[0].partitions[0].error_code == E.NONE
        assert b.broker.offset_manager.committed(group) == {}  # pending: not visible
        txn = b.broker.transactions.metadata_of(tid)
        assert txn is not None and txn.state is TxnState.ONGOING
        n = b.broker.transactions.num_partitions
    # the PrepareCommit record, as the coordinator writes it before any marker
    prepare = replace(txn, state=TxnState.PREPARE_COMMIT)
    d = os.path.join(str(tmp_path), f"{TRANSACTION_STATE_TOPIC}-{partition_for(tid, n)}")
    lg = Log(d, LogConfig(compact=True), clean_shutdown=True)
    lg.append(encode_records(2, NONE, [(encode_key(tid), encode_value(value_of(prepare)), int(time.time() * 1000))]))
    lg.close()
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), num_partitions=1) as b, RawClient(b.host, b.port) as c:
        wait_until(lambda: (t := b.broker.transactions.metadata_of(tid)) is not None and t.state is TxnState.COMPLETE_COMMIT, 20,
                   "the loaded PrepareCommit completed")
        wait_until(lambda: committed_values(c, topic)[1] == [b"decided"], 10, "the data committed")
        wait_until(lambda: b.broker.offset_manager.committed(group) == {(topic, 0): 1}, 10, "the group offset committed")
        assert OFFSETS_TOPIC in b.broker.metadata.topics()
