"""Kafka's own Java clients (4.x) with transactions -> our broker (KIP-98, issue 23).

* Kafka's ``TransactionalMessageCopier`` (the tool of Kafka's system tests): a read_committed
  Java consumer reads an input partition holding committed and aborted transactions (written by
  confluent-kafka), a transactional Java producer copies each batch to an output topic and sends
  the consumer group's offsets in the same transaction (``sendOffsetsToTransaction`` with the
  group metadata), aborting some transactions at random and redoing them. The output, read
  with read_committed, is exactly the input's committed values, once each, in order; the
  group's committed offset is the input's end.
* Kafka's ``TransactionsCommand`` (``kafka-transactions.sh``) lists and describes the
  transactional ids through ListTransactions / DescribeTransactions (flexible requests).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.testing import kafka_java

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("java-txn")), num_partitions=1, group_initial_rebalance_delay_ms=0) as b:
        yield b


def _read_committed(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        for _ in range(300):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise AssertionError(m.error())
            out.append(m.value())
        raise AssertionError(f"never reached the end of {topic}")
    finally:
        c.close()


def test_java_transactional_copier_and_transactions_command(broker: EmbeddedBroker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    src, dst, group, tid = "java-in", "java-out", "java-copier", "java-copier-tid"
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "java-src"})
    p.init_transactions(30)
    committed: list[bytes] = []
    for t in range(12):
        p.begin_transaction()
        values = [b"t%02d-%d" % (t, i) for i in range(5)]
        for v in values:
            p.produce(src, v, partition=0)
        if t % 4 == 3:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += values
    copier = kafka_java(
        "org.apache.kafka.tools.TransactionalMessageCopier", "--broker-list", broker.bootstrap, "--transactional-id", tid,
        "--input-topic", src, "--input-partition", "0", "--output-topic", dst, "--consumer-group", group, "--use-group-metadata",
        "--max-messages", str(len(committed)), "--transaction-size", "7", "--enable-random-aborts", timeout_s=180,
    )
    assert '"stage":"ShutdownComplete"' in copier.stdout, copier.stdout[-2000:]
    assert _read_committed(broker.bootstrap, dst) == committed
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        end = c.get_watermark_offsets(TopicPartition(src, 0), timeout=10)[1]
        assert c.committed([TopicPartition(src, 0)], timeout=10)[0].offset == end
    finally:
        c.close()

    listed = kafka_java("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap, "list", timeout_s=60).stdout
    states = {line.split()[0]: line.split()[3] for line in listed.splitlines()[1:] if line.strip()}
    # (java-src's last abort may never have reached the coordinator: librdkafka purges an abort
    # whose partitions it had not registered yet, so its state is whichever came last)
    assert states[tid] == "CompleteCommit" and states["java-src"] in ("CompleteCommit", "CompleteAbort"), listed
    described = kafka_java("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap,
                           "describe", "--transactional-id", tid, timeout_s=60).stdout
    assert tid in described and "CompleteCommit" in described, described
