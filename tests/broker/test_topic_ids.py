"""Topic ids (KIP-516) in the broker: drawn with the topic, kept in the topic znode's
``"topic_id"`` (as Kafka 2.8+) or, standalone, in ``<log dir>/topic-ids.json``; a topic found
without one gets one and it is written back; Metadata v10+ serves them, v12 answers a request
by id. Checked through our codec, librdkafka (confluent-kafka's admin ``describe_topics`` asks
with Metadata v12) and kafka-python's admin: the same id from every broker and after restarts.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from hmbclient import zkpaths as paths
from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.cluster import EmbeddedCluster
from hmbclient.broker.controller.store import TOPIC_IDS_FILE
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import CreateTopicsRequest, MetadataRequest
from hmbclient.protocol.types import ZERO_UUID
from tests.broker.conftest import RawClient, wait_until


def test_kafka_string_form_of_a_uuid() -> None:
    """Kafka's Uuid.toString: URL-safe base64, no padding (Uuid.ONE_UUID is ...AQ)."""
    assert paths.topic_id_str(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    u = paths.new_topic_id()
    assert paths.parse_topic_id(paths.topic_id_str(u)) == u and u.int > 1
    assert not paths.topic_id_str(u).startswith("-")
    for bad in ("", "AAAA", "A" * 23, "!" * 22):
        with pytest.raises(paths.ZnodeDataError):
            paths.parse_topic_id(bad)
    data = paths.encode_topic_assignment({0: [1, 2]}, uuid.UUID(int=1))
    assert data == b'{"version":1,"partitions":{"0":[1,2]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ"}'
    assert paths.decode_topic_id(data) == uuid.UUID(int=1)
    assert paths.decode_topic_id(paths.encode_topic_assignment({0: [1]})) is None
    assert paths.decode_topic_assignment(data) == {0: [1, 2]}


def _ids(bootstrap: str, topics: list[str], version: int = 12) -> dict[str, Any]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with RawClient(host, int(port)) as c:
        resp = c.request(MetadataRequest[version].build(topics=[{"topic": t} for t in topics], allow_auto_topic_creation=False))
    return {t.topic: (t.error_code, t.topic_id) for t in resp.topics}


def _ready_id(bootstrap: str, topic: str) -> uuid.UUID:
    got: dict[str, Any] = {}

    def ready() -> bool:
        got.update(_ids(bootstrap, [topic]))
        return got[topic][0] == ErrorCode.NONE and got[topic][1] != ZERO_UUID

    wait_until(ready, timeout_s=20, what=f"{topic} served with an id")
    return got[topic][1]


def _librdkafka_id(bootstrap: str, topic: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=20)
    assert desc.name == topic
    return paths.parse_topic_id(str(desc.topic_id))  # librdkafka prints Kafka's string form


def _kafka_python_id(bootstrap: str, topic: str) -> uuid.UUID:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="topic-ids", request_timeout_ms=15_000)
    try:
        (desc,) = admin.describe_topics([topic])
    finally:
        admin.close()
    assert desc["error_code"] == 0
    return uuid.UUID(str(desc["topic_id"]))


def test_standalone_ids_survive_restarts_and_missing_ones_are_written_back(tmp_path: Any) -> None:
    log_dir = str(tmp_path / "data")
    with EmbeddedBroker(port=0, log_dir=log_dir, num_partitions=2) as b:
        host, port = b.host, b.port
        with RawClient(host, port) as c:
            resp = c.request(CreateTopicsRequest[0].build(topics=[{"topic": "ids-a", "num_partitions": 2, "replication_factor": 1}], timeout_ms=10_000))
            assert resp.topics[0].error_code == 0
        a = _ready_id(b.bootstrap, "ids-a")
        assert _librdkafka_id(b.bootstrap, "ids-a") == a
        # v9 has no ids; by id is v12; an unknown id is UNKNOWN_TOPIC_ID with a null name
        assert "topic_id" not in MetadataRequest[9].nested("topics").names
        with RawClient(host, port) as c:
            resp = c.request(MetadataRequest[12].build(topics=[{"topic": None, "topic_id": a}, {"topic": None, "topic_id": uuid.UUID(int=7)}]))
            assert [(t.error_code, t.topic, t.topic_id) for t in resp.topics] == [
                (ErrorCode.UNKNOWN_TOPIC_ID, None, uuid.UUID(int=7)),
                (0, "ids-a", a),
            ]
            resp = c.request(MetadataRequest[11].build(topics=[{"topic": None, "topic_id": a}]))
            assert resp.topics[0].error_code == ErrorCode.INVALID_REQUEST
            # every older version still answers
            for v in range(0, 9):
                old = c.request(MetadataRequest[v].build(topics=["ids-a"]))
                assert [(t.topic, len(t.partitions)) for t in old.topics] == [("ids-a", 2)]
    with open(os.path.join(log_dir, TOPIC_IDS_FILE)) as f:
        assert json.load(f) == {"ids-a": paths.topic_id_str(a)}
    with EmbeddedBroker(port=0, log_dir=log_dir) as b:
        assert _ready_id(b.bootstrap, "ids-a") == a
    # a topic without an id (the file gone, as a data directory from before topic ids) gets one
    os.remove(os.path.join(log_dir, TOPIC_IDS_FILE))
    with EmbeddedBroker(port=0, log_dir=log_dir) as b:
        fresh = _ready_id(b.bootstrap, "ids-a")
        assert fresh != a
    with open(os.path.join(log_dir, TOPIC_IDS_FILE)) as f:
        assert json.load(f) == {"ids-a": paths.topic_id_str(fresh)}
    with EmbeddedBroker(port=0, log_dir=log_dir) as b:
        assert _ready_id(b.bootstrap, "ids-a") == fresh


@pytest.fixture
def cluster(zookeeper: Any, tmp_path: Any) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(brokers=2, zookeeper_connect=zookeeper.connect + "/hmb-topic-ids", num_partitions=2, log_dir=str(tmp_path / "c")) as c:
        yield c


def test_every_broker_serves_the_znode_id_and_an_old_znode_gets_one(cluster: EmbeddedCluster, zookeeper: Any) -> None:
    zk = KazooClient(hosts=zookeeper.connect + "/hmb-topic-ids")
    zk.start()
    try:
        cluster.create_topic("ids-new", 2, replication_factor=2)
        data = zk.get(paths.topic_path("ids-new"))[0]
        written = paths.decode_topic_id(data)
        assert written is not None
        # a topic registered as Kafka 0.8 does: no topic_id in its znode
        zk.create(paths.topic_path("ids-old"), paths.encode_topic_assignment({0: [0, 1], 1: [1, 0]}), makepath=True)
        olds = set()
        for b in cluster.brokers:
            boot = f"{b.host}:{b.port}"
            assert _ready_id(boot, "ids-new") == written
            olds.add(_ready_id(boot, "ids-old"))
            assert _librdkafka_id(boot, "ids-new") == written
            assert _kafka_python_id(boot, "ids-new") == written
        (old,) = olds
        assert paths.decode_topic_id(zk.get(paths.topic_path("ids-old"))[0]) == old
        assert paths.decode_topic_assignment(zk.get(paths.topic_path("ids-old"))[0]) == {0: [0, 1], 1: [1, 0]}
        cluster.restart(1)
        b1 = cluster.brokers[1]
        assert _ready_id(f"{b1.host}:{b1.port}", "ids-old") == old
    finally:
        zk.stop()
        zk.close()
