"""OffsetCommit/OffsetFetch v0 on a cluster with ZooKeeper: Kafka 0.8.2's ZooKeeper group offsets.

A "kafka-node-style" member sends raw v0 requests to a broker that is NOT the group's coordinator;
an hmbclient ZooKeeper-group consumer (``offsets.storage=zookeeper``) in the same group commits to
``/consumers/<group>/offsets/<topic>/<partition>`` directly. Each must see the other's progress,
through every broker; v1+ still belong to the coordinator.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from hmbclient import Consumer, ConsumerTimeoutError
from hmbclient.broker import EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel
from hmbclient.broker.controller.store import ZkStore
from hmbclient.errors import CoordinationError, ErrorCode
from hmbclient.protocol.api import FindCoordinatorRequest, OffsetCommitRequest, OffsetFetchRequest
from rebalance import paths

from .conftest import RawClient, encode, produce, wait_until

pytestmark = pytest.mark.timeout(120)

TOPIC = "v0zk"
MESSAGES = 20


@pytest.fixture(scope="module")
def chroot(zookeeper: Any) -> str:
    return f"{zookeeper.connect}/v0zk-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(chroot: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(brokers=3, zookeeper_connect=chroot, num_partitions=1, log_dir=str(tmp_path_factory.mktemp("v0zk"))) as c:
        c.create_topic(TOPIC, 1, 3)
        c.await_isr(TOPIC, size=3)
        leader = c.leader(TOPIC, 0)
        assert leader is not None
        b = c.broker(leader)
        with RawClient(b.host, b.port) as client:
            assert produce(client, TOPIC, 0, encode([(None, b"m%d" % i) for i in range(MESSAGES)]), acks=-1).error_code == 0
        yield c


@pytest.fixture(scope="module")
def zk(chroot: str, cluster: EmbeddedCluster) -> Iterator[KazooClient]:
    k = KazooClient(hosts=chroot)
    k.start(timeout=10)
    yield k
    k.stop()
    k.close()


def _channel(cluster: EmbeddedCluster, broker_id: int) -> BrokerChannel:
    b = cluster.broker(broker_id)
    return BrokerChannel(b.host, b.port, "kafka-node-style")


def _coordinator(cluster: EmbeddedCluster, group: str) -> int:
    ch = _channel(cluster, 0)
    try:
        answer: list[Any] = []

        def found() -> bool:
            answer.append(ch.request(FindCoordinatorRequest[0](group_id=group), 10))
            return bool(answer[-1].error_code == ErrorCode.NONE)

        wait_until(found, 15, "a group coordinator")
        return int(answer[-1].node_id)
    finally:
        ch.close()


def _commit_v0(cluster: EmbeddedCluster, broker_id: int, group: str, offsets: dict[tuple[str, int], int], version: int = 0) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[tuple[Any, ...]]] = {}
    for (t, p), off in offsets.items():
        # v1 partitions carry a commit timestamp (-1: the broker's clock)
        by_topic.setdefault(t, []).append((p, off, "kafka-node") if version != 1 else (p, off, -1, "kafka-node"))
    req = OffsetCommitRequest[version].build(group_id=group, generation_id=-1, member_id="", retention_time_ms=-1, topics=list(by_topic.items()))
    ch = _channel(cluster, broker_id)
    try:
        resp = ch.request(req, 10)
    finally:
        ch.close()
    return {(t.topic, p.partition): p.error_code for t in resp.topics for p in t.partitions}


def _fetch(cluster: EmbeddedCluster, broker_id: int, group: str, tps: list[tuple[str, int]], version: int = 0) -> dict[tuple[str, int], tuple[int, int]]:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    ch = _channel(cluster, broker_id)
    try:
        resp = ch.request(OffsetFetchRequest[version].build(group_id=group, topics=list(by_topic.items())), 10)
    finally:
        ch.close()
    return {(t.topic, p.partition): (p.offset, p.error_code) for t in resp.topics for p in t.partitions}


def _drain(chroot: str, group: str) -> list[tuple[int, bytes]]:
    """An hmbclient ZooKeeper-group consumer: read what is left from the group's offset, commit."""
    connector = Consumer.create({
        "zookeeper.connect": chroot, "group.id": group, "offsets.storage": "zookeeper",
        "auto.offset.reset": "smallest", "auto.commit.enable": "false", "consumer.timeout.ms": 2000,
    })
    got: list[tuple[int, bytes]] = []
    try:
        (stream,) = connector.create_message_streams({TOPIC: 1})[TOPIC]
        try:
            for mam in stream:
                got.append((mam.offset, mam.message))
        except ConsumerTimeoutError:
            pass
        connector.commit_offsets()
    finally:
        connector.shutdown()
    return got


def test_v0_commit_on_a_non_coordinator_is_seen_by_a_zookeeper_group_and_back(cluster: EmbeddedCluster, zk: KazooClient, chroot: str) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(cluster, group)
    other = (coordinator + 1) % 3
    tp = (TOPIC, 0)

    assert _fetch(cluster, other, group, [tp]) == {tp: (-1, ErrorCode.NONE)}  # nothing committed yet
    assert _commit_v0(cluster, other, group, {tp: 7}) == {tp: ErrorCode.NONE}
    data, _ = zk.get(paths.offset_path(group, TOPIC, 0))
    assert paths.decode_offset(data) == 7
    for b in range(3):
        assert _fetch(cluster, b, group, [tp]) == {tp: (7, ErrorCode.NONE)}

    # The ZooKeeper-group member resumes at the v0 commit and commits to ZooKeeper itself.
    got = _drain(chroot, group)
    assert got == [(i, b"m%d" % i) for i in range(7, MESSAGES)]
    assert paths.decode_offset(zk.get(paths.offset_path(group, TOPIC, 0))[0]) == MESSAGES
    for b in range(3):
        assert _fetch(cluster, b, group, [tp]) == {tp: (MESSAGES, ErrorCode.NONE)}

    # A v0 commit from yet another broker moves it back; the consumer resumes there.
    third = (coordinator + 2) % 3
    assert _commit_v0(cluster, third, group, {tp: 15}) == {tp: ErrorCode.NONE}
    assert [o for o, _ in _drain(chroot, group)] == list(range(15, MESSAGES))


def test_v0_bad_names_answer_kafka_error_codes(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    other = (_coordinator(cluster, group) + 1) % 3
    assert _commit_v0(cluster, other, "bad/group", {(TOPIC, 0): 1}) == {(TOPIC, 0): ErrorCode.INVALID_GROUP_ID}
    assert _commit_v0(cluster, other, group, {("bad/topic", 0): 1, (TOPIC, 0): 3}) == {
        ("bad/topic", 0): ErrorCode.INVALID_TOPIC_EXCEPTION,
        (TOPIC, 0): ErrorCode.NONE,
    }
    assert _fetch(cluster, other, "bad/group", [(TOPIC, 0)]) == {(TOPIC, 0): (-1, ErrorCode.INVALID_GROUP_ID)}
    assert _fetch(cluster, other, group, [("..", 0), (TOPIC, 0)]) == {("..", 0): (-1, ErrorCode.INVALID_TOPIC_EXCEPTION), (TOPIC, 0): (3, ErrorCode.NONE)}
    assert zk.exists("/consumers/bad") is None


def test_v1_still_belongs_to_the_coordinator(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(cluster, group)
    other = (coordinator + 1) % 3
    tp = (TOPIC, 0)
    assert _commit_v0(cluster, other, group, {tp: 4}) == {tp: ErrorCode.NONE}
    assert _commit_v0(cluster, other, group, {tp: 9}, version=1) == {tp: ErrorCode.NOT_COORDINATOR}
    assert _fetch(cluster, other, group, [tp], version=1) == {tp: (-1, ErrorCode.NOT_COORDINATOR)}
    codes: list[int] = []

    def committed() -> bool:
        codes.append(_commit_v0(cluster, coordinator, group, {tp: 9}, version=1)[tp])
        return codes[-1] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    wait_until(committed, 15, "the coordinator to load its offsets partition")
    assert codes[-1] == ErrorCode.NONE
    assert _fetch(cluster, coordinator, group, [tp], version=1) == {tp: (9, ErrorCode.NONE)}
    # The two stores stay apart, as in Kafka 0.8.2: v0 still reads ZooKeeper.
    assert paths.decode_offset(zk.get(paths.offset_path(group, TOPIC, 0))[0]) == 4
    assert _fetch(cluster, coordinator, group, [tp]) == {tp: (4, ErrorCode.NONE)}


def test_offset_io_never_waits_on_a_lost_zookeeper(chroot: str) -> None:
    store = ZkStore(chroot)
    store.write_offset("lost", TOPIC, 0, 5)
    assert store.read_offset("lost", TOPIC, 0) == 5
    assert store.read_offset("lost", TOPIC, 1) is None
    store.close()
    began = time.monotonic()
    with pytest.raises(CoordinationError):
        store.read_offset("lost", TOPIC, 0)
    with pytest.raises(CoordinationError):
        store.write_offset("lost", TOPIC, 0, 6)
    assert time.monotonic() - began < 1.0
