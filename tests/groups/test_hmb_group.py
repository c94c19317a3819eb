"""A ZooKeeper group in the HMB dialect -- Metadata v0 + Fetch v0 only, which is all the HMB
broker answers -- with offsets in ZooKeeper, starting at the committed offset or 0. Run
against our embedded broker, which is stricter than HMB and not registered in ZooKeeper
(partitions come from Metadata)."""

from __future__ import annotations

import uuid

from kazoo.client import KazooClient

from hmbclient import Consumer, ConsumerTimeoutError, Producer, ProducerData
from hmbclient.broker import EmbeddedBroker
from rebalance import paths


def _drain(zk: str, bootstrap: str, group: str, topic: str) -> list[bytes]:
    connector = Consumer.create({"zookeeper.connect": zk, "group.id": group, "metadata.broker.list": bootstrap,
                                 "api.version": "hmb", "auto.offset.reset": "smallest",
                                 "consumer.timeout.ms": 1500})
    got: list[bytes] = []
    try:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        try:
            for mam in stream:
                got.append(mam.message)
        except ConsumerTimeoutError:
            pass
        connector.commit_offsets()
    finally:
        connector.shutdown()
    return got


def test_hmb_dialect_group_resumes_from_zookeeper_offsets(zookeeper, tmp_path) -> None:
    topic, group = f"hmb-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    with EmbeddedBroker(port=0, log_dir=str(tmp_path)) as broker:
        producer = Producer(metadata_broker_list=broker.bootstrap, api_version="hmb")
        try:
            futures = producer.send(ProducerData(topic, None, [b"a%d" % i for i in range(40)]))
            assert [f.result(10).offset for f in futures] == [None] * 40  # HMB's offsets are not real
            assert _drain(zookeeper.connect, broker.bootstrap, group, topic) == [b"a%d" % i for i in range(40)]
            producer.send(ProducerData(topic, None, [b"b%d" % i for i in range(10)]))
            producer.flush()
        finally:
            producer.close()
        assert _drain(zookeeper.connect, broker.bootstrap, group, topic) == [b"b%d" % i for i in range(10)]
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(paths.offset_path(group, topic, 0))
        assert paths.decode_offset(data) == 50
    finally:
        zk.stop()
        zk.close()
