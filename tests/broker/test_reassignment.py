"""Partition reassignment (AlterPartitionReassignments / ListPartitionReassignments, KIP-455) on a
3-broker cluster on a real ZooKeeper.

* A partition with data moves from [a, b] to [b, c] while a producer (acks=-1) writes: every
  acknowledged message is in the moved partition, the ISR and replicas end as the target, the
  removed replica's log is gone from its broker, and ZooKeeper holds no reassignment.
* A reassignment held back by a replication throttle is listed (full replicas, adding,
  removing) and cancelled: the partition goes back to its original replicas and the adding
  replica's log is deleted; a second cancel answers NO_REASSIGNMENT_IN_PROGRESS.
* The controller killed mid-reassignment: the new controller reads the reassignment back from
  the topic znode and finishes it.
* The refusals with Kafka's codes, from hmbclient.admin and kafka-python's KafkaAdminClient.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from waiting import wait_until

from hmbclient import Producer, ProducerData, admin, zkpaths
from hmbclient.broker import EmbeddedCluster
from hmbclient.errors import ErrorCode

from .replication_steps import contents

E = ErrorCode
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def chroot(zookeeper: Any) -> str:
    return f"{zookeeper.connect}/reassign-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(chroot: str) -> Iterator[EmbeddedCluster]:
    # Short replication quota windows: the throttle's rate settles within a second or two.
    with EmbeddedCluster(brokers=3, zookeeper_connect=chroot, num_partitions=1, replication_factor=2,
                         offsets_topic_replication_factor=1, replication_quota_window_num=2) as c:
        yield c


@pytest.fixture(scope="module")
def zk(chroot: str) -> Iterator[KazooClient]:
    z = KazooClient(hosts=chroot)
    z.start(timeout=10)
    yield z
    z.stop()
    z.close()


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _replicas(zk: KazooClient, topic: str) -> tuple[int, ...]:
    return tuple(zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])[0])


def _state(zk: KazooClient, topic: str) -> Any:
    return zkpaths.decode_partition_state(zk.get(zkpaths.partition_state_path(topic, 0))[0])


def _holders(cluster: EmbeddedCluster, topic: str) -> set[int]:
    """Brokers with a log of the partition on disk (running brokers only)."""
    return {b.config.broker_id for b in cluster.brokers if any(t == topic for (t, _p), _lg in b.logs.all_logs())}


def _values(cluster: EmbeddedCluster, broker: int, topic: str) -> list[bytes]:
    part = cluster.broker(broker).replica_manager.partition(topic, 0)
    return [h.value or b"" for h in contents(part.log)]


class _Writer:
    """Produces v0, v1, ... with acks=-1 until stopped; remembers what was acknowledged."""

    def __init__(self, cluster: EmbeddedCluster, topic: str) -> None:
        self.producer = Producer(metadata_broker_list=cluster.bootstrap, request_required_acks=-1, message_send_max_retries=50,
                                 retry_backoff_ms=100)
        self.topic = topic
        self.acked: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            v = f"v{i}".encode()
            try:
                for f in self.producer.send(ProducerData(self.topic, None, [v])):
                    f.result(timeout=30)
                self.acked.append(v)
            except Exception:
                pass
            i += 1

    def close(self) -> list[bytes]:
        self.stop.set()
        self.thread.join(timeout=60)
        self.producer.close()
        return self.acked


def _move_plan(zk: KazooClient, topic: str) -> tuple[tuple[int, ...], tuple[int, int]]:
    a, b = _replicas(zk, topic)
    c = ({0, 1, 2} - {a, b}).pop()
    return (a, b), (b, c)


def test_move_with_a_producer_writing(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = _topic("move")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    cluster.await_isr(topic)
    (a, b), target = _move_plan(zk, topic)
    cluster.move_leader(topic, 0, a)  # the removed replica leads: leadership must move too
    writer = _Writer(cluster, topic)
    try:
        wait_until(lambda: len(writer.acked) >= 50, TIMEOUT_S, "acknowledged writes before the move")
        answer = admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): list(target)})
        assert answer == {(topic, 0): (E.NONE, None)}
        wait_until(lambda: _replicas(zk, topic) == target and not admin.list_partition_reassignments(cluster.bootstrap),
                   TIMEOUT_S, "reassignment finished")
        n = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= n + 20, TIMEOUT_S, "writes after the move")
    finally:
        acked = writer.close()
    st = _state(zk, topic)
    assert st.leader in target and set(st.isr) <= set(target)
    assert zkpaths.decode_topic_reassignments(zk.get(zkpaths.topic_path(topic))[0]) == {}
    wait_until(lambda: _holders(cluster, topic) == set(target), TIMEOUT_S, "the removed replica's log deleted")
    cluster.await_isr(topic, size=2)
    held = _values(cluster, cluster.leader(topic, 0) or 0, topic)
    assert set(acked) <= set(held), f"lost {len(set(acked) - set(held))} acknowledged messages"
    for r in target:
        wait_until(lambda r=r: set(acked) <= set(_values(cluster, r, topic)), TIMEOUT_S, f"replica {r} holds every acked message")


def test_refusals(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = _topic("refuse")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    cluster.await_isr(topic)
    answer = admin.alter_partition_reassignments(cluster.bootstrap, {
        (topic, 0): None, (topic, 5): [0, 1], ("no-such-topic", 0): [0, 1], (topic, 1): [0, 0],
    })
    codes = {tp: c for tp, (c, _m) in answer.items()}
    assert codes == {(topic, 0): E.NO_REASSIGNMENT_IN_PROGRESS, (topic, 5): E.UNKNOWN_TOPIC_OR_PARTITION,
                     ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION, (topic, 1): E.UNKNOWN_TOPIC_OR_PARTITION}
    answer = admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): [0, 7]})
    assert answer[(topic, 0)][0] == E.INVALID_REPLICA_ASSIGNMENT
    answer = admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): [1, 1]})
    assert answer[(topic, 0)][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert admin.list_partition_reassignments(cluster.bootstrap, [(topic, 0)]) == {}


RATE = 100_000  # bytes/s of the throttle test
CLI_RATE = 20_000  # bytes/s of the CLI test


def _log_bytes(cluster: EmbeddedCluster, broker: int, topic: str) -> int:
    part = cluster.broker(broker).replica_manager.partition(topic, 0)
    return 0 if part is None else sum(seg.size for seg in part.log.segments)


def _fill(cluster: EmbeddedCluster, topic: str, nbytes: int, acks: int = 1) -> None:
    p = Producer(metadata_broker_list=cluster.bootstrap, request_required_acks=acks)
    try:
        value = b"x" * 2000
        futs = [f for _ in range(nbytes // len(value)) for f in p.send(ProducerData(topic, None, [value]))]
        for f in futs:
            f.result(timeout=60)
    finally:
        p.close()


def _throttle(cluster: EmbeddedCluster, topic: str, rate: int | None) -> None:
    """Kafka's throttle: both rates on every broker, every replica of the topic throttled."""
    names = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    for b in range(3):
        if rate is None:
            admin.incremental_alter_configs(cluster.bootstrap, "broker", str(b), {}, delete=names)
        else:
            admin.incremental_alter_configs(cluster.bootstrap, "broker", str(b), {n: str(rate) for n in names})
    replicas = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
    if rate is None:
        admin.incremental_alter_configs(cluster.bootstrap, "topic", topic, {}, delete=replicas)
    else:
        admin.incremental_alter_configs(cluster.bootstrap, "topic", topic, {n: "*" for n in replicas})


def test_throttled_move_listed_measured_and_cancelled(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = _topic("throttle")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    cluster.await_isr(topic)
    _fill(cluster, topic, 1_500_000)
    (a, b), (_b, c) = _move_plan(zk, topic)
    _throttle(cluster, topic, RATE)
    try:
        assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): [b, c]}) == {(topic, 0): (E.NONE, None)}
        listed = admin.list_partition_reassignments(cluster.bootstrap)
        assert listed == {(topic, 0): admin.Reassignment((b, c, a), (c,), (a,))}
        assert admin.list_partition_reassignments(cluster.bootstrap, [(topic, 0), (topic, 3), ("nope", 0)]) == listed
        # The moving replica copies at about the throttle's rate (unthrottled, 1.5 MB takes well
        # under a second here): measured over 4 s after the first second's burst.
        wait_until(lambda: _log_bytes(cluster, c, topic) > 0, TIMEOUT_S, "the new replica fetching")
        time.sleep(1.0)  # the window's start (the quota lets one second's worth through at once)
        t0, n0 = time.monotonic(), _log_bytes(cluster, c, topic)
        time.sleep(4.0)
        t1, n1 = time.monotonic(), _log_bytes(cluster, c, topic)
        measured = (n1 - n0) / (t1 - t0)
        assert 0.5 * RATE <= measured <= 1.5 * RATE, f"moved {measured:.0f} bytes/s with a {RATE} bytes/s throttle"
        assert _replicas(zk, topic) == (b, c, a)
        # Cancel: back to the original replicas; the adding replica's log goes.
        assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): None}) == {(topic, 0): (E.NONE, None)}
        # The original replicas in the full set's order (Kafka's revert: replicas minus adding).
        assert _replicas(zk, topic) == (b, a)
        assert admin.list_partition_reassignments(cluster.bootstrap) == {}
        wait_until(lambda: _holders(cluster, topic) == {a, b}, TIMEOUT_S, "the cancelled replica's log deleted")
        assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): None})[(topic, 0)][0] == E.NO_REASSIGNMENT_IN_PROGRESS
        assert zkpaths.decode_topic_reassignments(zk.get(zkpaths.topic_path(topic))[0]) == {}
    finally:
        _throttle(cluster, topic, None)
    st = _state(zk, topic)
    assert st.leader in (a, b) and set(st.isr) <= {a, b}


def test_controller_killed_mid_reassignment(chroot: str) -> None:
    """kill -9 of the controller while a (throttled) reassignment is in progress: the new
    controller reads it back from the topic znode and finishes it."""
    import os

    z = KazooClient(hosts=chroot + "-failover")
    with EmbeddedCluster(brokers=3, zookeeper_connect=chroot + "-failover", processes=True, num_partitions=1, replication_factor=2,
                         offsets_topic_replication_factor=1, replication_quota_window_num=2,
                         zookeeper_session_timeout_ms=3000) as cluster:
        z.start(timeout=10)
        try:
            topic = _topic("failover")
            admin.create_topic(cluster.bootstrap, topic, 1, 2)
            cluster.await_isr(topic)
            _fill(cluster, topic, 2_000_000)
            (a, b), (_b, c) = _move_plan(z, topic)
            _throttle(cluster, topic, RATE)
            assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): [b, c]}) == {(topic, 0): (E.NONE, None)}
            old = cluster.controller_id()
            cluster.kill(old)  # SIGKILL: its ZooKeeper session lingers until it expires
            live = [x for x in range(3) if x != old]
            bootstrap = ",".join(f"127.0.0.1:{cluster.broker(x).port}" for x in live)
            wait_until(lambda: admin.describe_cluster(bootstrap)["controller_id"] in live, TIMEOUT_S, "a new controller")
            # The new controller knows the move from ZooKeeper (still throttled: 2 MB at 100 kB/s).
            assert admin.list_partition_reassignments(bootstrap) == {(topic, 0): admin.Reassignment((b, c, a), (c,), (a,))}
            cluster.restart(old)
            _throttle(cluster, topic, None)
            wait_until(lambda: _replicas(z, topic) == (b, c) and not admin.list_partition_reassignments(cluster.bootstrap),
                       60.0, "the new controller finishing the reassignment")
            assert cluster.controller_id() != old
            st = _state(z, topic)
            assert st.leader in (b, c) and set(st.isr) <= {b, c}
            if a != old:  # a removed replica that was down when the move ended keeps its files (README)
                gone = os.path.join(cluster.broker_log_dir(a), f"{topic}-0")
                wait_until(lambda: not os.path.exists(gone), TIMEOUT_S, "the removed replica's log deleted")
            cluster.await_isr(topic, size=2)
        finally:
            z.stop()
            z.close()


def _json_file(tmp_path: Any, moves: dict[tuple[str, int], list[int]]) -> str:
    import json

    path = tmp_path / f"reassign-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                                                            for (t, p), r in moves.items()]}))
    return str(path)


def _broker_throttle(cluster: EmbeddedCluster, broker: int) -> str | None:
    found = admin.describe_configs(cluster.bootstrap, "broker", str(broker)).get("leader.replication.throttled.rate")
    return None if found is None else found.value


def test_hmb_reassign_cli_execute_verify_cancel(cluster: EmbeddedCluster, zk: KazooClient, tmp_path: Any, capsys: Any) -> None:
    from hmbclient.cli import main as hmb
    from hmbclient.testing import kafka_java

    # 1 MB at CLI_RATE moves in ~50 s: still in progress when Kafka's tool (a JVM start, slow
    # on a loaded machine) verifies it after ours; the move is cancelled right after.
    topic = _topic("cli")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    cluster.await_isr(topic)
    _fill(cluster, topic, 1_000_000)
    (a, b), (_b, c) = _move_plan(zk, topic)
    moves = _json_file(tmp_path, {(topic, 0): [b, c]})
    assert hmb(["reassign", "-b", cluster.bootstrap, "--execute", "--reassignment-json-file", moves, "--throttle", str(CLI_RATE)]) == 0
    out = capsys.readouterr().out
    assert f'"replicas":[{a},{b}]' in out and "Successfully started partition reassignment" in out
    # Kafka's throttle layout: the current replicas send, the new one fetches.
    described = admin.describe_configs(cluster.bootstrap, "broker", str(c))
    assert described["follower.replication.throttled.rate"].value == str(CLI_RATE)
    assert json_config(zk, topic) == {"leader.replication.throttled.replicas": f"0:{a},0:{b}",
                                      "follower.replication.throttled.replicas": f"0:{c}"}
    # In progress: exit 0 and the same report as Kafka's own tool; the throttles stay.
    assert hmb(["reassign", "-b", cluster.bootstrap, "--verify", "--reassignment-json-file", moves]) == 0
    ours = capsys.readouterr().out
    theirs = kafka_java("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap,
                        "--verify", "--reassignment-json-file", moves, timeout_s=120, check=False)
    lines = [line for line in theirs.stdout.splitlines() if line]  # (its log-dir moves section: empty)
    assert theirs.returncode == 0 and ours.splitlines() == lines, (ours, theirs.stdout, theirs.stderr[-2000:])
    assert ours == f"Status of partition reassignment:\nReassignment of partition {topic}-0 is still in progress.\n"
    assert described["follower.replication.throttled.rate"].value == str(CLI_RATE) and json_config(zk, topic) != {}
    assert hmb(["reassign", "-b", cluster.bootstrap, "--cancel", "--reassignment-json-file", moves]) == 0
    assert f"Successfully cancelled partition reassignment(s) for: {topic}-0" in capsys.readouterr().out
    assert set(_replicas(zk, topic)) == {a, b} and json_config(zk, topic) == {}
    assert all(_broker_throttle(cluster, x) in (None, "null") for x in range(3))
    # Again, unthrottled, to completion; --verify then reports it done.
    assert hmb(["reassign", "-b", cluster.bootstrap, "--execute", "--reassignment-json-file", moves]) == 0
    wait_until(lambda: _replicas(zk, topic) == (b, c), TIMEOUT_S, "the move done")
    capsys.readouterr()
    assert hmb(["reassign", "-b", cluster.bootstrap, "--verify", "--reassignment-json-file", moves]) == 0
    assert f"Reassignment of partition {topic}-0 is completed." in capsys.readouterr().out


def json_config(zk: KazooClient, topic: str) -> dict[str, str]:
    import json

    try:
        return dict(json.loads(zk.get(zkpaths.config_path("topics", topic))[0]).get("config", {}))
    except Exception:
        return {}


def test_kafka_java_tool_and_kafka_python(cluster: EmbeddedCluster, zk: KazooClient, tmp_path: Any) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    from hmbclient.testing import kafka_java

    topic = _topic("tools")
    admin.create_topic(cluster.bootstrap, topic, 2, 2)
    cluster.await_isr(topic)
    _fill(cluster, topic, 100_000)
    (a, b), (_b, c) = _move_plan(zk, topic)
    moves = _json_file(tmp_path, {(topic, 0): [b, c]})
    tool = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    done = kafka_java(tool, "--bootstrap-server", cluster.bootstrap, "--execute", "--reassignment-json-file", moves,
                      "--throttle", "50000000", timeout_s=120)
    assert "Successfully started partition reassignment" in done.stdout, done.stdout + done.stderr
    wait_until(lambda: _replicas(zk, topic) == (b, c), TIMEOUT_S, "the Java tool's move done")
    done = kafka_java(tool, "--bootstrap-server", cluster.bootstrap, "--verify", "--reassignment-json-file", moves, timeout_s=120)
    assert f"Reassignment of partition {topic}-0 is completed" in done.stdout, done.stdout + done.stderr
    assert "Clearing broker-level throttles" in done.stdout and json_config(zk, topic) == {}

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="reassign-tests", request_timeout_ms=30_000)
    try:
        tp1 = TopicPartition(topic, 1)
        replicas1 = tuple(zkpaths.decode_topic_assignment(zk.get(zkpaths.topic_path(topic))[0])[1])
        other = ({0, 1, 2} - set(replicas1)).pop()
        answer = client.alter_partition_reassignments({
            tp1: [replicas1[1], other], TopicPartition(topic, 0): None, TopicPartition(topic, 9): [0, 1],
            TopicPartition(topic + "-nope", 0): [0, 1],
        })
        assert answer == {tp1: None, TopicPartition(topic, 0): NoReassignmentInProgressError,
                          TopicPartition(topic, 9): UnknownTopicOrPartitionError, TopicPartition(topic + "-nope", 0): UnknownTopicOrPartitionError}
        wait_until(lambda: not client.list_partition_reassignments(), TIMEOUT_S, "kafka-python's move done")
        answer = client.alter_partition_reassignments({tp1: [0, 42]})
        assert answer == {tp1: InvalidReplicationAssignmentError}
        assert client.list_partition_reassignments([tp1]) == {}
    finally:
        client.close()


def test_create_partitions_keeps_topic_id_and_ongoing_moves(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    """CreatePartitions rewrites the topic znode: the topic id and a move in progress stay."""
    topic = _topic("grow")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    cluster.await_isr(topic)
    tid = zkpaths.decode_topic_id(zk.get(zkpaths.topic_path(topic))[0])
    _fill(cluster, topic, 500_000)
    (a, b), (_b, c) = _move_plan(zk, topic)
    _throttle(cluster, topic, RATE)
    try:
        assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): [b, c]}) == {(topic, 0): (E.NONE, None)}
        admin.create_partitions(cluster.bootstrap, {topic: 2})
        data = zk.get(zkpaths.topic_path(topic))[0]
        assert zkpaths.decode_topic_id(data) == tid
        assert zkpaths.decode_topic_reassignments(data) == {0: ((c,), (a,))}
    finally:
        _throttle(cluster, topic, None)
    wait_until(lambda: _replicas(zk, topic) == (b, c), TIMEOUT_S, "the move done")


def test_a_removed_replica_down_at_the_end_is_deleted_when_its_broker_returns(
        cluster: EmbeddedCluster, chroot: str, zk: KazooClient, tmp_path: Any) -> None:
    """Case R6: a fourth broker, a real process, holds a replica; it is killed (SIGKILL), the
    partition moves away from it and completes without it; restarted, it deletes that log
    itself before registering, and serves on."""
    from kafka.admin import KafkaAdminClient, NewTopic

    from hmbclient.broker.process import BrokerProcess

    topic = _topic("stray")
    with BrokerProcess(str(tmp_path / "b3"), broker_id=3, zookeeper_connect=chroot, num_partitions=1,
                       offsets_topic_replication_factor=1) as b3:
        wait_until(lambda: 3 in admin.describe_cluster(cluster.bootstrap)["brokers"], TIMEOUT_S, "broker 3 registered")
        client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="reassign-tests", request_timeout_ms=30_000)
        try:
            client.create_topics([NewTopic(topic, -1, -1, replica_assignments={0: [3, 0]})])
        finally:
            client.close()
        wait_until(lambda: set(_state(zk, topic).isr) == {3, 0}, TIMEOUT_S, "both replicas in sync")
        _fill(cluster, topic, 20_000, acks=-1)  # on broker 0 too before broker 3 dies (acks=1 could lose them)
        folder = tmp_path / "b3" / f"{topic}-0"
        assert folder.is_dir()
        b3.kill()
        wait_until(lambda: 3 not in _state(zk, topic).isr, TIMEOUT_S, "broker 3 out of the ISR")
        assert admin.alter_partition_reassignments(cluster.bootstrap, {(topic, 0): [0, 1]})[(topic, 0)][0] == E.NONE
        wait_until(lambda: _replicas(zk, topic) == (0, 1), TIMEOUT_S, "the move done without broker 3")
        assert folder.is_dir()  # nobody could tell the dead broker
        b3.start()
        wait_until(lambda: not folder.exists(), TIMEOUT_S, "the stray log deleted")
        wait_until(lambda: 3 in admin.describe_cluster(cluster.bootstrap)["brokers"], TIMEOUT_S, "broker 3 back")
        assert len(_values(cluster, 0, topic)) == 10 and _values(cluster, 1, topic) == _values(cluster, 0, topic)
        b3.terminate()
    wait_until(lambda: 3 not in admin.describe_cluster(cluster.bootstrap)["brokers"], TIMEOUT_S, "broker 3 gone")
