"""DeleteTopics, CreatePartitions and ElectLeaders (preferred) on a 3-broker cluster on a real
ZooKeeper, driven from hmbclient.admin, from kafka-python's KafkaAdminClient and from Kafka's
own Java tools (TopicCommand, LeaderElectionCommand), with the ZooKeeper layout checked as
Kafka's ZooKeeper-mode tools would read it.

* Deletion: the topic leaves every broker's metadata, every replica's log directory, and
  ZooKeeper (``/brokers/topics/<t>``, the marker ``/admin/delete_topics/<t>``); a topic of
  the same name created afterwards starts empty. A topic with a replica on a stopped broker
  stays marked (REQUEST_TIMED_OUT) and is deleted when that broker comes back.
* Partition additions: the assignment in ZooKeeper grows (old partitions unchanged), every
  broker serves the new partitions with leaders, and the refusals carry Kafka's error codes
  and messages (same count, fewer, wrong assignment, unknown topic); validate_only writes
  nothing.
* Preferred election: a leadership moved away returns to the preferred replica; a second
  election answers ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

import json
import os

import pytest
from kazoo.client import KazooClient
from waiting import wait_until

from hmbclient import admin, zkpaths
from hmbclient.broker import EmbeddedCluster
from hmbclient.errors import ErrorCode, InvalidPartitionsError
from hmbclient.testing import kafka_java

from .conftest import RawClient, encode, produce, unique_topic

E = ErrorCode
TIMEOUT_S = 30.0


def _log_dirs(cluster: EmbeddedCluster, topic: str) -> list[str]:
    out = []
    for b in cluster.brokers:
        d = cluster.broker_log_dir(b.config.broker_id)
        out += [os.path.join(d, n) for n in os.listdir(d) if n.rsplit("-", 1)[0] == topic] if os.path.isdir(d) else []
    return out


def _everywhere(cluster: EmbeddedCluster, topic: str, partitions: int) -> bool:
    return all(b.metadata.num_partitions(topic) == partitions and b.metadata.is_ready(topic) for b in cluster.brokers if b.running)


def _gone(cluster: EmbeddedCluster, zk: KazooClient, topic: str) -> bool:
    return (not any(b.metadata.has_topic(topic) for b in cluster.brokers if b.running)
            and zk.exists(zkpaths.topic_path(topic)) is None and zk.exists(zkpaths.delete_topic_path(topic)) is None
            and not _log_dirs(cluster, topic))


def _produce(cluster: EmbeddedCluster, topic: str, partition: int, n: int) -> None:
    wait_until(lambda: cluster.leader(topic, partition) is not None, TIMEOUT_S, f"{topic}-{partition} has a leader")
    leader = cluster.broker(cluster.leader(topic, partition))
    with RawClient("127.0.0.1", leader.port) as c:
        resp = produce(c, topic, partition, encode([(None, b"v%d" % i) for i in range(n)]), acks=-1)
        assert resp.error_code == E.NONE, resp


def test_delete_topics_from_hmbclient(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = unique_topic("del")
    admin.create_topic(cluster.bootstrap, topic, 3, 2)
    _produce(cluster, topic, 1, 5)
    assert len(_log_dirs(cluster, topic)) == 6  # 3 partitions x 2 replicas
    assert admin.delete_topics(cluster.bootstrap, [topic, "no-such-topic", "bad/name"], raise_errors=False) == {
        topic: E.NONE, "no-such-topic": E.UNKNOWN_TOPIC_OR_PARTITION, "bad/name": E.UNKNOWN_TOPIC_OR_PARTITION}
    # The answer came once this broker's metadata lost the topic; the rest follows at once.
    wait_until(lambda: _gone(cluster, zk, topic), TIMEOUT_S, f"{topic} deleted everywhere")
    assert topic not in admin.list_topics(cluster.bootstrap)
    # The same name again is a new, empty topic.
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    assert admin.latest_offsets(cluster.bootstrap, topic) == {0: 0}
    # Internal topics are refused; nothing is marked.
    assert admin.delete_topics(cluster.bootstrap, ["__consumer_offsets"], raise_errors=False) == {"__consumer_offsets": E.INVALID_TOPIC_EXCEPTION}
    assert zk.get_children(zkpaths.DELETE_TOPICS_PATH) == []


def test_delete_waits_for_a_stopped_replica(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = unique_topic("del-wait")
    admin.create_topic(cluster.bootstrap, topic, 3, 3)  # a replica on every broker
    victim = next(b.config.broker_id for b in cluster.brokers if not b.controller.active)
    cluster.stop_broker(victim)
    try:
        codes = admin.delete_topics(cluster.bootstrap, [topic], timeout_ms=1000, raise_errors=False)
        assert codes == {topic: E.REQUEST_TIMED_OUT}
        assert zk.exists(zkpaths.delete_topic_path(topic)) is not None
        assert zk.exists(zkpaths.topic_path(topic)) is not None
    finally:
        cluster.restart(victim)
    wait_until(lambda: _gone(cluster, zk, topic), TIMEOUT_S, f"{topic} deleted once broker {victim} is back")


def test_create_partitions_from_hmbclient(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = unique_topic("grow")
    admin.create_topic(cluster.bootstrap, topic, 2, 2)
    before = zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])
    assert admin.create_partitions(cluster.bootstrap, {topic: 5}) == {topic: (E.NONE, None)}
    after = zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])
    assert len(after) == 5 and {p: after[p] for p in before} == before
    assert all(len(after[p]) == 2 and len(set(after[p])) == 2 for p in after)
    # Kafka's round-robin goes on: the preferred leaders of the 5 partitions cover all 3 brokers.
    assert {after[p][0] for p in after} == {0, 1, 2}
    wait_until(lambda: _everywhere(cluster, topic, 5), TIMEOUT_S, "5 partitions served by every broker")
    _produce(cluster, topic, 4, 3)
    assert admin.latest_offsets(cluster.bootstrap, topic)[4] == 3
    # Refusals, with Kafka's codes and messages; none writes anything.
    refused = admin.create_partitions(cluster.bootstrap, {topic: 5}, raise_errors=False)
    assert refused == {topic: (E.INVALID_PARTITIONS, "Topic already has 5 partitions.")}
    refused = admin.create_partitions(cluster.bootstrap, {topic: 4}, raise_errors=False)
    assert refused == {topic: (E.INVALID_PARTITIONS, "Topic currently has 5 partitions, which is higher than the requested 4.")}
    refused = admin.create_partitions(cluster.bootstrap, {topic: 7}, assignments={topic: [[0, 1]]}, raise_errors=False)
    assert refused[topic][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert refused[topic][1] == "Increasing the number of partitions by 2 but 1 assignments provided."
    refused = admin.create_partitions(cluster.bootstrap, {topic: 6}, assignments={topic: [[0, 7]]}, raise_errors=False)
    assert refused[topic][0] == E.INVALID_REPLICA_ASSIGNMENT and "7" in (refused[topic][1] or "")
    refused = admin.create_partitions(cluster.bootstrap, {topic: 6}, assignments={topic: [[1, 1]]}, raise_errors=False)
    assert refused[topic][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert admin.create_partitions(cluster.bootstrap, {"nope-x": 3}, raise_errors=False)["nope-x"][0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert admin.create_partitions(cluster.bootstrap, {"__consumer_offsets": 50}, raise_errors=False)["__consumer_offsets"][0] == E.INVALID_REQUEST
    assert admin.create_partitions(cluster.bootstrap, {topic: 9}, validate_only=True) == {topic: (E.NONE, None)}
    assert len(zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])) == 5
    with pytest.raises(InvalidPartitionsError, match="already has 5"):
        admin.create_partitions(cluster.bootstrap, {topic: 5})
    # An explicit assignment of the new partition is taken as given.
    admin.create_partitions(cluster.bootstrap, {topic: 6}, assignments={topic: [[2, 0]]})
    assert zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])[5] == [2, 0]
    wait_until(lambda: _everywhere(cluster, topic, 6), TIMEOUT_S, "6 partitions served")


def test_preferred_leader_election(cluster: EmbeddedCluster) -> None:
    topic = unique_topic("elect")
    admin.create_topic(cluster.bootstrap, topic, 1, 3)
    cluster.await_isr(topic, size=3)
    controller = next(b for b in cluster.brokers if b.controller.active).controller
    replicas = controller.state.assignments[topic][0]
    assert controller.move_leader(topic, 0, replicas[1]).result(timeout=TIMEOUT_S)
    wait_until(lambda: admin.describe_topics(cluster.bootstrap, [topic])[0].leader == replicas[1], TIMEOUT_S, "leader moved away")
    assert admin.elect_preferred_leaders(cluster.bootstrap, [(topic, 0)]) == {(topic, 0): E.NONE}
    wait_until(lambda: admin.describe_topics(cluster.bootstrap, [topic])[0].leader == replicas[0], TIMEOUT_S, "preferred leader back")
    assert admin.elect_preferred_leaders(cluster.bootstrap, [(topic, 0), (topic, 9)]) == {
        (topic, 0): E.ELECTION_NOT_NEEDED, (topic, 9): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_kafka_python_admin_client(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    from kafka.admin import KafkaAdminClient

    topic = unique_topic("kp")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="admin-tests", request_timeout_ms=30_000)
    try:
        resp = client.create_partitions({topic: 4})
        assert [(r.name, r.error_code) for r in resp.results] == [(topic, 0)]
        wait_until(lambda: _everywhere(cluster, topic, 4), TIMEOUT_S, "4 partitions")
        resp = client.create_partitions({topic: 2}, raise_errors=False)
        assert [(r.name, r.error_code, r.error_message) for r in resp.results] == [
            (topic, E.INVALID_PARTITIONS, "Topic currently has 4 partitions, which is higher than the requested 2.")]
        resp = client.elect_leaders(0, {topic: [0, 1]})
        assert sorted((r.topic, p.partition_id, p.error_code) for r in resp.replica_election_results for p in r.partition_result) == [
            (topic, 0, E.ELECTION_NOT_NEEDED), (topic, 1, E.ELECTION_NOT_NEEDED)]
        result = client.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        wait_until(lambda: _gone(cluster, zk, topic), TIMEOUT_S, f"{topic} deleted")
    finally:
        client.close()


def test_kafka_java_tools(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    """Kafka 4.4's TopicCommand (--alter --partitions, --delete) through its AdminClient."""
    topic = unique_topic("java")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap, "--alter", "--topic", topic,
               "--partitions", "3", timeout_s=120)
    wait_until(lambda: _everywhere(cluster, topic, 3), TIMEOUT_S, "3 partitions")
    kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap, "--delete", "--topic", topic, timeout_s=120)
    wait_until(lambda: _gone(cluster, zk, topic), TIMEOUT_S, f"{topic} deleted")


def test_describe_cluster_and_log_dirs(cluster: EmbeddedCluster) -> None:
    """DescribeCluster (flexible: request header v2) and DescribeLogDirs from hmbclient.admin,
    kafka-python, and Kafka 4.4's LogDirsCommand (kafka-log-dirs.sh: DescribeCluster for the
    brokers, then DescribeLogDirs of each)."""
    from kafka.admin import KafkaAdminClient

    topic = unique_topic("dirs")
    admin.create_topic(cluster.bootstrap, topic, 2, 2)
    _produce(cluster, topic, 0, 4)
    ids = {b.config.broker_id: ("127.0.0.1", b.port) for b in cluster.brokers}
    controller = next(b.config.broker_id for b in cluster.brokers if b.controller.active)
    described = admin.describe_cluster(cluster.bootstrap)
    assert described == {"cluster_id": cluster.brokers[0].metadata.cluster_id, "controller_id": controller, "brokers": ids}
    leader = cluster.leader(topic, 0)
    assert leader is not None
    dirs = admin.describe_log_dirs(cluster.bootstrap, leader)
    assert list(dirs) == [cluster.broker_log_dir(leader)]
    sizes = dirs[cluster.broker_log_dir(leader)]
    assert sizes[(topic, 0)] == sum(s.size for s in cluster.broker(leader).logs.get(topic, 0).segments) > 0
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="admin-tests", request_timeout_ms=30_000)
    try:
        kp = client.describe_cluster()
        assert (kp["cluster_id"], kp["controller_id"], {b["broker_id"] for b in kp["brokers"]}) == (described["cluster_id"], controller, set(ids))
        kp_dirs = {d["broker"]: d for d in client.describe_log_dirs()}
        assert set(kp_dirs) == set(ids)
        parts = {(t["name"], p["partition_index"]): p["partition_size"] for d in kp_dirs[leader]["log_dirs"] for t in d["topics"] for p in t["partitions"]}
        assert parts[(topic, 0)] == sizes[(topic, 0)]
    finally:
        client.close()
    done = kafka_java("org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", cluster.bootstrap, "--describe",
                      "--topic-list", topic, timeout_s=120)
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    seen = {(b["broker"], p["partition"]): p["size"] for b in report["brokers"] for d in b["logDirs"] for p in d["partitions"]}
    assert seen[(leader, f"{topic}-0")] == sizes[(topic, 0)]
    assert {b for b, _ in seen} == {r for p in (0, 1) for r in cluster.brokers[0].metadata.partition(topic, p).replicas}


@pytest.mark.parametrize("v", [0, 1])
def test_describe_cluster_codec_matches_kafka_python(v: int) -> None:
    """The flexible-only DescribeCluster bodies, both ways, against kafka-python's generated
    code (test_api_golden covers the non-flexible pairs)."""
    import kafka.protocol.admin as kp_admin

    from hmbclient.protocol.api.admin import DescribeClusterRequest, DescribeClusterResponse
    from tests.protocol.test_api_golden import from_kp, plain, to_kp

    names = {"cluster_authorized_operations": "authorized_operations"}
    cases = [
        (DescribeClusterRequest[v], kp_admin.DescribeClusterRequest[v], {"include_cluster_authorized_operations": True, "endpoint_type": 1}),
        (DescribeClusterResponse[v], kp_admin.DescribeClusterResponse[v], {
            "throttle_time_ms": 7, "error_code": 0, "error_message": None, "endpoint_type": 1, "cluster_id": "cluster-✓",
            "controller_id": 2, "brokers": [(0, "h0", 9092, None), (2, "h" * 300, 1, "rack-a")], "cluster_authorized_operations": -(2**31)}),
    ]
    for ours, kp, fields in cases:
        value = ours.build(**fields)
        kp_fields = kp._struct.untagged_fields(v)
        data = ours(*value).encode()
        assert data == bytes(kp(**to_kp(ours.SCHEMA, kp_fields, value, v, names)).encode())
        assert plain(ours.SCHEMA, from_kp(ours.SCHEMA, kp_fields, kp.decode(data), v, names)) == plain(ours.SCHEMA, value)


def test_imbalanced_partitions_decision() -> None:
    from hmbclient.broker.controller.decisions import ClusterState, LeaderIsr, imbalanced_partitions

    state = ClusterState(1, {0, 1, 2}, {"t": [(0, 1), (0, 2), (1, 0), (2, 0)]}, {})
    leaders = [1, 0, 1, 2]  # broker 0 prefers t-0 and t-1 and leads only t-1
    state.states = {("t", p): LeaderIsr(leader, 1, (0, 1, 2), 1) for p, leader in enumerate(leaders)}
    assert imbalanced_partitions(state, 10) == [("t", 0)]  # 1 of 2 = 50 % > 10 %
    assert imbalanced_partitions(state, 50) == []  # not above 50 %
    state.live_brokers = {1, 2}
    assert imbalanced_partitions(state, 10) == []  # the preferred broker is down


def test_auto_leader_rebalance(chroot: str) -> None:
    """auto.leader.rebalance.enable: a leadership moved away goes back to the preferred
    replica by itself (check every second here; Kafka's default is 300 s)."""
    with EmbeddedCluster(brokers=2, zookeeper_connect=f"{chroot}-rebalance", replication_factor=2, offsets_topic_replication_factor=1,
                         leader_imbalance_check_interval_seconds=1, leader_imbalance_per_broker_percentage=0) as c:
        topic = unique_topic("rebalance")
        admin.create_topic(c.bootstrap, topic, 1, 2)
        c.await_isr(topic, size=2)
        controller = next(b for b in c.brokers if b.controller.active).controller
        preferred, other = controller.state.assignments[topic][0]
        assert controller.move_leader(topic, 0, other).result(timeout=TIMEOUT_S)
        wait_until(lambda: c.leader(topic, 0) == other, TIMEOUT_S, "moved away")
        wait_until(lambda: c.leader(topic, 0) == preferred, TIMEOUT_S, "back on the preferred replica by itself")
