"""EmbeddedCluster on a real ZooKeeper: registration JSON as Java writes it, the assignment and
state znodes, NotLeader from the wrong broker, leader moves between in-sync replicas, an
unreplicated partition offline while its broker is down, the group coordinator, and a broker's
ZooKeeper session expiring (see test_replication.py for replication and failover)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from hmbclient import errors
from hmbclient.broker import EmbeddedCluster
from hmbclient.protocol import records
from hmbclient.protocol.api import FindCoordinatorRequest, MetadataRequest, OffsetCommitRequest
from rebalance import paths

from .conftest import RawClient, encode, fetch, produce, wait_until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(brokers=3, zookeeper_connect=zookeeper.connect + "/hmb-cluster-test", num_partitions=6, log_dir=str(tmp_path_factory.mktemp("cluster"))) as c:
        yield c


@pytest.fixture(scope="module")
def zk(zookeeper: Any) -> Iterator[KazooClient]:
    k = KazooClient(hosts=zookeeper.connect + "/hmb-cluster-test")
    k.start(timeout=10)
    yield k
    k.stop()
    k.close()


def _state(zk: KazooClient, topic: str, partition: int) -> paths.PartitionState:
    return paths.decode_partition_state(zk.get(paths.partition_state_path(topic, partition))[0])


def _client(cluster: EmbeddedCluster, broker_id: int) -> RawClient:
    b = cluster.broker(broker_id)
    return RawClient(b.host, b.port)


def test_brokers_registered_as_java_writes_them(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    # the helpers name the znodes Java 0.8 reads
    assert (paths.broker_path(0), paths.CONTROLLER_PATH) == ("/brokers/ids/0", "/controller")
    assert sorted(zk.get_children(paths.BROKER_IDS_PATH)) == ["0", "1", "2"]
    for b in cluster.brokers:
        data = zk.get(paths.broker_path(b.broker_id))[0]
        obj = json.loads(data)
        assert list(obj) == ["jmx_port", "timestamp", "host", "version", "port"]
        assert (obj["host"], obj["port"], obj["version"]) == ("127.0.0.1", b.port, 1)
        assert zk.exists(paths.broker_path(b.broker_id)).ephemeralOwner != 0
    assert json.loads(zk.get(paths.CONTROLLER_PATH)[0])["brokerid"] == cluster.controller_id()


def test_leaders_spread_and_metadata_agree_with_zookeeper(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    cluster.create_topic("spread", 6)
    cluster.await_isr("spread")
    with _client(cluster, 1) as c:
        md = c.request(MetadataRequest[1](topics=["spread"]))
    assert sorted(b.node_id for b in md.brokers) == [0, 1, 2]
    parts = {p.partition: p for p in md.topics[0].partitions}
    assert sorted({p.leader for p in parts.values()}) == [0, 1, 2]
    assignment = json.loads(zk.get(paths.topic_path("spread"))[0])
    # Kafka 0.8's fields, then the topic id as Kafka 2.8+ writes it (tests/broker/test_topic_ids.py)
    assert assignment == {"version": 1, "partitions": {str(p): list(parts[p].replicas) for p in range(6)}, "topic_id": assignment["topic_id"]}
    assert list(assignment) == ["version", "partitions", "topic_id"] and paths.parse_topic_id(assignment["topic_id"])
    for p in range(6):
        state = json.loads(zk.get(paths.partition_state_path("spread", p))[0])
        assert list(state) == ["controller_epoch", "leader", "version", "leader_epoch", "isr"]
        assert (state["leader"], sorted(state["isr"])) == (parts[p].leader, sorted(parts[p].isr))


def test_not_leader_from_the_wrong_broker(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("nl", 3)
    cluster.await_isr("nl")
    for p in range(3):
        leader = cluster.leader("nl", p)
        assert leader is not None
        other = (leader + 1) % 3
        with _client(cluster, other) as c:
            assert produce(c, "nl", p, encode([(None, b"x")])).error_code == 6
            assert fetch(c, "nl", p, 0).error_code == 6
        with _client(cluster, leader) as c:
            assert produce(c, "nl", p, encode([(None, b"x")])).error_code == 0


def test_move_leader_keeps_the_data(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    cluster.create_topic("mv", 1)
    cluster.await_isr("mv")
    old = cluster.leader("mv", 0)
    assert old is not None
    with _client(cluster, old) as c:
        for i in range(5):
            produce(c, "mv", 0, encode([(None, b"m%d" % i)]), acks=-1)
    new = (old + 2) % 3
    cluster.move_leader("mv", 0, new)
    with _client(cluster, old) as c:
        assert produce(c, "mv", 0, encode([(None, b"late")])).error_code == 6
    with _client(cluster, new) as c:
        # move_leader returns once one broker's metadata names the new leader; the others' caches
        # follow with the controller's UpdateMetadata (as in Kafka), so this one is waited for.
        wait_until(lambda: c.request(MetadataRequest[1](topics=["mv"])).topics[0].partitions[0].leader == new,
                   10, "the new leader's metadata naming itself")
        # acks=-1: consumers see a message once every in-sync replica has it (the new leader's
        # high watermark moves as the followers fetch from it).
        assert produce(c, "mv", 0, encode([(None, b"m5")]), acks=-1).base_offset == 5
        p = fetch(c, "mv", 0, 0)
        assert [r.value for r in records.decode_records(p.records)] == [b"m%d" % i for i in range(6)]
    wait_until(lambda: _state(zk, "mv", 0).leader == new, 10, "the new leader in the state znode")


def test_unreplicated_partitions_are_offline_while_their_broker_is_down(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    cluster.create_topic("sr", 3, replication_factor=1)
    victim = 2
    led = [p for p in range(3) if cluster.leader("sr", p) == victim]
    assert led, "one partition of three lands on each broker"
    port = cluster.broker(victim).port
    cluster.stop_broker(victim)
    try:
        wait_until(lambda: sorted(zk.get_children(paths.BROKER_IDS_PATH)) == ["0", "1"], 10, "the victim's registration gone")
        for p in led:
            wait_until(lambda p=p: _state(zk, "sr", p).leader == -1, 10, f"sr-{p} offline")
        with _client(cluster, 0) as c:
            # The znodes change first; broker 0's cache follows with the controller's
            # UpdateMetadata (as in Kafka), so its answer is waited for.
            wait_until(lambda: sorted(b.node_id for b in c.request(MetadataRequest[1](topics=["sr"])).brokers) == [0, 1],
                       10, "broker 0's metadata without the victim")
            md = c.request(MetadataRequest[1](topics=["sr"]))
            assert sorted(b.node_id for b in md.brokers) == [0, 1]
            for p in md.topics[0].partitions:
                if p.partition in led:
                    assert (p.error_code, p.leader) == (5, -1)
    finally:
        cluster.restart(victim)
    assert cluster.broker(victim).port == port
    wait_until(lambda: all(cluster.leader("sr", p) == victim for p in led), 10, "the restarted broker leading its partitions again")
    with _client(cluster, victim) as c:
        for p in led:
            assert produce(c, "sr", p, encode([(None, b"back")])).error_code == 0


def test_group_coordinator_is_one_broker(cluster: EmbeddedCluster) -> None:
    answers = set()
    for b in range(3):
        with _client(cluster, b) as c:
            r = c.request(FindCoordinatorRequest[0](group_id="cgroup"))
            assert r.error_code == 0
            answers.add((r.node_id, r.port))
    (node, port), = answers
    assert cluster.broker(node).port == port
    wrong = (node + 1) % 3
    req = OffsetCommitRequest[2].build(group_id="cgroup", generation_id=-1, member_id="", retention_time_ms=-1, topics=[("t", [(0, 1, "")])])
    with _client(cluster, wrong) as c:
        assert c.request(req).topics[0].partitions[0].error_code == 16
    with _client(cluster, node) as c:
        codes: list[int] = []

        def answered() -> bool:
            codes.append(c.request(req).topics[0].partitions[0].error_code)
            return codes[-1] != errors.CoordinatorLoadInProgressError.errno

        # COORDINATOR_LOAD_IN_PROGRESS until the coordinator has loaded its offsets partition
        wait_until(answered, 10, "the coordinator to load its offsets partition")
        assert codes[-1] == 0


def test_registration_comes_back_after_session_expiry(cluster: EmbeddedCluster, zk: KazooClient, zookeeper: Any) -> None:
    store = cluster.broker(1).store
    assert store is not None
    old_owner = zk.exists(paths.broker_path(1)).ephemeralOwner
    session_id, password = store.zk.client_id
    # Closing a second connection that uses the same session expires it on the server.
    twin = KazooClient(hosts=cluster.zookeeper_connect, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()
    wait_until(lambda: (st := zk.exists(paths.broker_path(1))) is not None and st.ephemeralOwner != old_owner, 20, "broker 1 registered in a new session")
    assert paths.decode_broker_registration(zk.get(paths.broker_path(1))[0]).port == cluster.broker(1).port
    # The cluster is whole again: a controller, and every broker serving every partition.
    wait_until(lambda: zk.exists(paths.CONTROLLER_PATH) is not None, 20, "a controller")
    cluster.create_topic("after-expiry", 3)
    cluster.await_isr("after-expiry")
