"""The replicated cluster end to end: three in-process brokers (each with its own log directory,
ZooKeeper session and metadata cache) on a real ZooKeeper.

Checks: every broker's Metadata agrees with ZooKeeper's state znodes; acks=-1 waits for the ISR
and consumers read below the high watermark; a follower answers NOT_LEADER; leader and
controller failover keep every acknowledged message; a restarted broker rejoins the ISR;
min.insync.replicas; controlled shutdown moves leaderships first; the offsets topic is
replicated and its coordinator moves; inter-broker requests from a stale or fake controller and
a duplicate broker id are refused and change nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import Broker, EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel
from hmbclient.config import BrokerConfig
from hmbclient.errors import CoordinationError, ErrorCode
from hmbclient.protocol.api import (
    FindCoordinatorRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
)
from hmbclient.protocol.api.cluster import LeaderAndIsrRequest, UpdateMetadataRequest
from hmbclient.protocol.records import NONE, encode_records
from rebalance import paths

from .conftest import wait_until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture()
def cluster(zookeeper: Any, tmp_path: Any) -> Iterator[EmbeddedCluster]:
    chroot = f"{zookeeper.connect}/repl-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(
        brokers=3,
        zookeeper_connect=chroot,
        num_partitions=3,
        replication_factor=3,
        log_dir=str(tmp_path),
        replica_lag_time_max_ms=3000,
        offsets_topic_num_partitions=1,
    ) as c:
        yield c


@pytest.fixture()
def zk(cluster: EmbeddedCluster) -> Iterator[KazooClient]:
    k = KazooClient(hosts=cluster.zookeeper_connect)
    k.start(timeout=10)
    yield k
    k.stop()
    k.close()


def _metadata(broker: Any, topics: list[str] | None) -> Any:
    ch = BrokerChannel(broker.host, broker.port, "test")
    try:
        return ch.request(MetadataRequest[1](topics=topics), 10.0)
    finally:
        ch.close()


def _produce(cluster: EmbeddedCluster, topic: str, values: list[str], acks: int = -1) -> list[Any]:
    p = Producer(metadata_broker_list=cluster.bootstrap, request_required_acks=acks, message_send_max_retries=20, retry_backoff_ms=100)
    try:
        futs = [f for v in values for f in p.send(ProducerData(topic, None, [v.encode()]))]
        return [f.result(timeout=60) for f in futs]
    finally:
        p.close()


def _read_all(cluster: EmbeddedCluster, topic: str, partitions: int) -> list[bytes]:
    out: list[bytes] = []
    for p in range(partitions):
        leader = cluster.leader(topic, p)
        assert leader is not None and leader >= 0
        b = cluster.broker(leader)
        c = SimpleConsumer(b.host, b.port)
        try:
            offset = 0
            while True:
                got = list(c.fetch(FetchRequest(topic, p, offset, 1 << 20)))
                if not got:
                    break
                for mo in got:
                    out.append(mo.message.value)
                offset = got[-1].next_offset
        finally:
            c.close()
    return out


def test_every_broker_and_zookeeper_agree(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    cluster.create_topic("agree", 6, replication_factor=3)
    cluster.await_isr("agree")
    views = []
    for b in cluster.brokers:
        m = _metadata(b, ["agree"])
        assert sorted(x.node_id for x in m.brokers) == [0, 1, 2]
        parts = {p.partition: (p.leader, tuple(p.replicas), tuple(sorted(p.isr))) for p in m.topics[0].partitions}
        views.append((m.controller_id, parts))
    assert all(v == views[0] for v in views), views
    controller_id, parts = views[0]
    assert json.loads(zk.get(paths.CONTROLLER_PATH)[0])["brokerid"] == controller_id
    leaders = [leader for leader, _, _ in parts.values()]
    assert sorted(leaders) == [0, 0, 1, 1, 2, 2], "leaders spread over the brokers"
    assignment = paths.decode_topic_assignment(zk.get(paths.topic_path("agree"))[0])
    for p, (leader, replicas, isr) in parts.items():
        st = paths.decode_partition_state(zk.get(paths.partition_state_path("agree", p))[0])
        assert (st.leader, tuple(sorted(st.isr))) == (leader, isr)
        assert tuple(assignment[p]) == replicas and len(set(replicas)) == 3
        assert replicas[0] == leader, "the preferred replica leads a new topic"


def test_acks_all_reaches_every_replica_and_a_follower_refuses_produce(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("acked", 1, replication_factor=3)
    cluster.await_isr("acked")
    metas = _produce(cluster, "acked", [f"v{i}" for i in range(200)])
    assert [m.offset for m in metas] == list(range(200))
    leader = cluster.leader("acked", 0)
    # Every replica has every acknowledged message (acks=-1 waited for the ISR).
    for b in cluster.brokers:
        part = b.replica_manager.partition("acked", 0)
        assert part is not None and part.log.log_end_offset == 200
    assert cluster.broker(leader).replica_manager.partition("acked", 0).log.high_watermark == 200
    follower = next(b for b in cluster.brokers if b.broker_id != leader)
    ch = BrokerChannel(follower.host, follower.port, "test")
    try:
        buf = encode_records(2, NONE, [(None, b"x", 0)])
        resp = ch.request(ProduceRequest[3](transactional_id=None, acks=1, timeout_ms=5000, topics=[("acked", [(0, buf)])]), 10.0)
    finally:
        ch.close()
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert sorted(_read_all(cluster, "acked", 1)) == sorted(f"v{i}".encode() for i in range(200))


def test_leader_kill_fails_over_without_losing_acked_messages(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    cluster.create_topic("failover", 1, replication_factor=3)
    cluster.await_isr("failover")
    before = _produce(cluster, "failover", [f"a{i}" for i in range(100)])
    old = cluster.leader("failover", 0)
    old_epoch = paths.decode_partition_state(zk.get(paths.partition_state_path("failover", 0))[0]).leader_epoch
    cluster.kill(old)
    wait_until(lambda: cluster.leader("failover", 0) not in (None, -1, old), 20)
    st = paths.decode_partition_state(zk.get(paths.partition_state_path("failover", 0))[0])
    assert st.leader != old and st.leader_epoch > old_epoch and old not in st.isr
    after = _produce(cluster, "failover", [f"b{i}" for i in range(100)])
    assert len(before) == len(after) == 100
    got = _read_all(cluster, "failover", 1)
    assert set(got) >= {f"a{i}".encode() for i in range(100)} | {f"b{i}".encode() for i in range(100)}
    # The old leader comes back as a follower, catches up and rejoins the ISR.
    cluster.restart(old)
    cluster.await_isr("failover")
    part = cluster.broker(old).replica_manager.partition("failover", 0)
    wait_until(lambda: part.log.log_end_offset == 200, 20)


def test_controller_failover(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    first = cluster.controller_id()
    epoch = int(zk.get(paths.CONTROLLER_EPOCH_PATH)[0])
    cluster.kill(first)
    wait_until(lambda: zk.exists(paths.CONTROLLER_PATH) is not None and json.loads(zk.get(paths.CONTROLLER_PATH)[0])["brokerid"] != first, 20)
    assert int(zk.get(paths.CONTROLLER_EPOCH_PATH)[0]) > epoch
    # The new controller serves: a topic created now gets leaders on the live brokers.
    cluster.create_topic("after-failover", 2, replication_factor=2)
    cluster.await_isr("after-failover")
    for p in range(2):
        assert cluster.leader("after-failover", p) != first
    cluster.restart(first)
    cluster.await_brokers()


def test_min_insync_replicas(zookeeper: Any, tmp_path: Any) -> None:
    chroot = f"{zookeeper.connect}/minisr-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(brokers=3, zookeeper_connect=chroot, log_dir=str(tmp_path), replication_factor=3, min_insync_replicas=2) as c:
        c.create_topic("guarded", 1, replication_factor=3)
        c.await_isr("guarded")
        leader = c.leader("guarded", 0)
        for b in [i for i in range(3) if i != leader]:
            c.kill(b)
        wait_until(lambda: len(c.partition("guarded", 0).isr) == 1, 20)
        b = c.broker(leader)
        ch = BrokerChannel(b.host, b.port, "test")
        try:
            buf = encode_records(2, NONE, [(None, b"x", 0)])
            r = ch.request(ProduceRequest[3](transactional_id=None, acks=-1, timeout_ms=5000, topics=[("guarded", [(0, buf)])]), 10.0)
            assert r.topics[0].partitions[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
            r = ch.request(ProduceRequest[3](transactional_id=None, acks=1, timeout_ms=5000, topics=[("guarded", [(0, buf)])]), 10.0)
            assert r.topics[0].partitions[0].error_code == ErrorCode.NONE
        finally:
            ch.close()


def test_controlled_shutdown_moves_leaderships_first(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("moving", 3, replication_factor=3)
    cluster.await_isr("moving")
    victim = cluster.leader("moving", 0)
    cluster.stop_broker(victim)
    for p in range(3):
        leader = cluster.leader("moving", p)
        assert leader not in (victim, -1, None)
    cluster.restart(victim)
    cluster.await_isr("moving")


def test_offsets_topic_is_replicated_and_the_coordinator_moves(cluster: EmbeddedCluster) -> None:
    cluster.create_topic("tracked", 1, replication_factor=3)

    def coordinator() -> Any:
        b = cluster.brokers[0] if cluster.brokers[0].running else cluster.brokers[1]
        ch = BrokerChannel(b.host, b.port, "test")
        try:
            r = ch.request(FindCoordinatorRequest[1](key="g1", key_type=0), 10.0)
        finally:
            ch.close()
        return r

    wait_until(lambda: coordinator().error_code == 0, 20)
    cluster.await_isr("__consumer_offsets")
    coord = coordinator().node_id

    def commit_and_fetch(broker_id: int, offset: int | None) -> int:
        b = cluster.broker(broker_id)
        ch = BrokerChannel(b.host, b.port, "test")
        try:
            if offset is not None:
                r = ch.request(OffsetCommitRequest[2](group_id="g1", generation_id=-1, member_id="", retention_time_ms=-1, topics=[("tracked", [(0, offset, "")])]), 10.0)
                assert r.topics[0].partitions[0].error_code == 0
            f = ch.request(OffsetFetchRequest[1](group_id="g1", topics=[("tracked", [0])]), 10.0)
            p = f.topics[0].partitions[0]
            return -100 if p.error_code else p.offset
        finally:
            ch.close()

    assert commit_and_fetch(coord, 42) == 42
    cluster.kill(coord)
    wait_until(lambda: coordinator().error_code == 0 and coordinator().node_id != coord, 20)
    new = coordinator().node_id
    wait_until(lambda: commit_and_fetch(new, None) == 42, 20)


def test_stale_or_fake_controller_requests_are_refused(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    cluster.create_topic("fenced", 1, replication_factor=3)
    cluster.await_isr("fenced")
    epoch = int(zk.get(paths.CONTROLLER_EPOCH_PATH)[0])
    controller = cluster.controller_id()
    leader = cluster.leader("fenced", 0)
    target = next(b for b in cluster.brokers if b.broker_id != leader)
    bogus = [("fenced", 0, epoch, target.broker_id, 99, [target.broker_id], 0, [0, 1, 2])]
    ch = BrokerChannel(target.host, target.port, "intruder")
    try:
        for cid, ep in ((controller, epoch - 1), ((controller + 1) % 3, epoch), (77, epoch + 5)):
            r = ch.request(LeaderAndIsrRequest[0](controller_id=cid, controller_epoch=ep, ungrouped_partition_states=bogus, live_leaders=[]), 10.0)
            assert r.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
            u = ch.request(UpdateMetadataRequest[0](controller_id=cid, controller_epoch=ep, ungrouped_partition_states=bogus, live_brokers=[]), 10.0)
            assert u.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    finally:
        ch.close()
    assert cluster.leader("fenced", 0) == leader
    assert not target.replica_manager.is_leader("fenced", 0)
    assert sorted(x.node_id for x in _metadata(target, []).brokers) == [0, 1, 2]


def test_duplicate_broker_id_fails_and_changes_nothing(cluster: EmbeddedCluster, tmp_path: Any, zk: KazooClient) -> None:
    before = zk.get(paths.broker_path(1))
    dup = Broker(BrokerConfig(broker_id=1, port=0, log_dirs=(str(tmp_path / "dup"),), zookeeper_connect=cluster.zookeeper_connect))
    with pytest.raises(CoordinationError, match="already registered"):
        dup.start()
    assert not dup.running
    assert zk.get(paths.broker_path(1)) == before
    assert sorted(x.node_id for x in _metadata(cluster.broker(1), []).brokers) == [0, 1, 2]
