"""Transactions on a replicated cluster (3 brokers, one process, real ZooKeeper): the
transaction coordinator moves with the leadership of its ``__transaction_state`` partition in
the middle of a transaction (the new leader loads the Ongoing transaction from the replicated
log), the producer (confluent-kafka) finds it and commits, and the new coordinator has the
markers written by partition leaders on other brokers (WriteTxnMarkers over the inter-broker
channel). A read_committed reader sees both committed transactions and not the aborted one.
The coordinator's broker killed (no controlled shutdown) in the middle of a transaction and
brought back while transactions go on: 0 committed lost, 0 aborted visible, 0 duplicates.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import EmbeddedCluster
from hmbclient.broker.metadata import TRANSACTION_STATE_TOPIC
from hmbclient.broker.transaction.log import partition_for

from .conftest import wait_until
from .test_transactions import _ck_producer

pytestmark = pytest.mark.timeout(180)


def _read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        eof: set[int] = set()
        for _ in range(200):
            m = cons.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:
                    eof.add(m.partition())
                    if len(eof) == partitions:
                        return sorted(out)
                    continue
                raise AssertionError(m.error())
            eof.discard(m.partition())
            out.append(m.value())
        raise AssertionError(f"read_committed reader never reached the end of {topic}: {sorted(out)}")
    finally:
        cons.close()


def test_the_coordinator_moves_mid_transaction(zookeeper: Any, tmp_path: Path) -> None:
    chroot = f"/txn-{uuid.uuid4().hex[:8]}"
    topic = "txn-moves"
    tid = "tid-moves"
    with EmbeddedCluster(brokers=3, zookeeper_connect=zookeeper.connect + chroot, log_dir=str(tmp_path), replication_factor=3,
                         transaction_state_log_num_partitions=2) as cluster:
        cluster.create_topic(topic, 2, replication_factor=3)
        cluster.await_isr(topic)
        p = _ck_producer(cluster.bootstrap, tid)
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"one-0", partition=0)
        p.produce(topic, b"one-1", partition=1)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"aborted", partition=0)
        p.abort_transaction(30)

        tp = (TRANSACTION_STATE_TOPIC, partition_for(tid, 2))
        cluster.await_isr(TRANSACTION_STATE_TOPIC)
        old = cluster.leader(*tp)
        assert old is not None
        new = next(b for b in (0, 1, 2) if b != old)
        p.begin_transaction()
        p.produce(topic, b"two-0", partition=0)
        p.produce(topic, b"two-1", partition=1)
        p.flush(30)
        cluster.move_leader(*tp, new)
        # the data partitions' leaders on the other brokers: the markers go over the wire
        for part in (0, 1):
            if cluster.leader(topic, part) == new:
                cluster.move_leader(topic, part, next(b for b in (0, 1, 2) if b != new))
        wait_until(lambda: (m := cluster.broker(new).transactions.metadata_of(tid)) is not None and m.state.label == "Ongoing",
                   timeout_s=20, what="the new coordinator loaded the open transaction")
        p.commit_transaction(30)
        wait_until(lambda: cluster.broker(new).transactions.metadata_of(tid).state.label == "CompleteCommit",  # type: ignore[union-attr]
                   timeout_s=20, what="the markers written, the commit complete")
        assert cluster.broker(old).transactions.metadata_of(tid) is None  # the old coordinator forgot it
        assert _read_committed(cluster.bootstrap, topic, 2) == sorted([b"one-0", b"one-1", b"two-0", b"two-1"])


def _run_transactions(p: Any, topic: str, first: int, count: int, committed: list[bytes], aborted: set[bytes]) -> None:
    """``count`` transactions of 4 values over 2 partitions, every third aborted; a transaction
    the client must abort (its coordinator or a leader died under it) counts as aborted."""
    from confluent_kafka import KafkaException

    for t in range(first, first + count):
        values = [b"t%03d-%d" % (t, i) for i in range(4)]
        commit = t % 3 != 2
        for attempt in range(20):
            try:
                p.begin_transaction()
                for i, v in enumerate(values):
                    p.produce(topic, v, partition=i % 2)
                if commit:
                    p.commit_transaction(60)
                else:
                    p.abort_transaction(60)
                break
            except KafkaException as e:
                err = e.args[0]
                assert not err.fatal(), err
                if err.txn_requires_abort():
                    p.abort_transaction(60)
                    aborted.update(values)
                    values = [v + b"-r%d" % (attempt + 1) for v in values[:4]]  # the retry writes new values
                    continue
                assert err.retriable(), err
                p.commit_transaction(60) if commit else p.abort_transaction(60)
                break
        (committed.extend if commit else aborted.update)(values)


def test_the_coordinator_is_killed_mid_transaction(zookeeper: Any, tmp_path: Path) -> None:
    """The broker coordinating the producer's id is killed (no controlled shutdown) in the middle
    of a transaction and brought back while transactions go on: 0 committed values lost, 0
    aborted visible, 0 duplicates."""
    from confluent_kafka import KafkaException

    chroot = f"/txn-kill-{uuid.uuid4().hex[:8]}"
    topic, tid = "txn-kill", "tid-kill"
    with EmbeddedCluster(brokers=3, zookeeper_connect=zookeeper.connect + chroot, log_dir=str(tmp_path), replication_factor=3,
                         transaction_state_log_num_partitions=1) as cluster:
        cluster.create_topic(topic, 2, replication_factor=3)
        cluster.await_isr(topic)
        p = _ck_producer(cluster.bootstrap, tid, **{"transaction.timeout.ms": 20_000})
        p.init_transactions(30)
        committed: list[bytes] = []
        aborted: set[bytes] = set()
        _run_transactions(p, topic, 0, 8, committed, aborted)
        victim = cluster.leader(TRANSACTION_STATE_TOPIC, 0)
        assert victim is not None
        # killed in the middle of a transaction: its successor loads it Ongoing and ends it
        p.begin_transaction()
        mid = [b"mid-%d" % i for i in range(4)]
        for i, v in enumerate(mid):
            p.produce(topic, v, partition=i % 2)
        p.flush(30)
        cluster.kill(victim)
        try:
            p.commit_transaction(60)
            committed.extend(mid)
        except KafkaException as e:
            assert e.args[0].txn_requires_abort() and not e.args[0].fatal(), e
            p.abort_transaction(60)
            aborted.update(mid)
        _run_transactions(p, topic, 8, 8, committed, aborted)
        cluster.restart(victim)
        _run_transactions(p, topic, 16, 8, committed, aborted)
        got = _read_committed(cluster.bootstrap, topic, 2)
        assert not set(got) & aborted, "aborted values are visible"
        assert len(got) == len(set(got)), "duplicates"
        assert got == sorted(committed)
