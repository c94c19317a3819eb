"""Three ``hmb broker`` processes form one replicated cluster, checked by independent peers.

Set-up (module scope): the session's real ZooKeeper, a chroot of our own, and three ``hmb
broker --zookeeper Z/<chroot> --broker-id N --port 0`` subprocesses on 127.0.0.1 with
``default.replication.factor=3`` and ``min.insync.replicas=2``. Each broker is started from the
test's main thread with ``die_with_parent`` (Linux kills it if the test run dies) and is
stopped by its own pid; its stderr goes to a file that a failure message quotes.

What the peers must see:

* the same brokers, controller, leaders, replicas and ISR through *every* broker, from kcat
  (librdkafka's Metadata, ``kcat -L -J -b <that broker>``, which names the broker that answered),
  kafka-python (its own Metadata codec on a socket to exactly that broker, and its
  KafkaAdminClient bootstrapped there) and ``hmb topics --describe -b <that broker>``; and all of
  it equal to ZooKeeper's registrations (``/brokers/ids/<id>``, ``/controller``) and partition
  state znodes (``/brokers/topics/<t>/partitions/<p>/state``) read with kazoo. Replica lists are
  compared in order (the first is the preferred leader); an ISR is a set.
* kafka-python's ``create_topics(NewTopic(name, 6, 3))`` gives three distinct replicas per
  partition over all three brokers; kcat produces with acks=all and consumes the same bytes.
* a kafka-python consumer delivers every message a kafka-python producer (acks=all) had
  acknowledged while one broker process (the controller, also leading two partitions) is
  SIGKILLed and restarted on its port and log dir.

Metadata spreads asynchronously (the controller's UpdateMetadata), so agreement is awaited,
with the differences of the last look in the failure message.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from hmbclient.testing._process import preexec_for_current_thread

pytestmark = pytest.mark.timeout(300)

HMB = [sys.executable, "-m", "hmbclient.cli"]
KCAT = shutil.which("kcat")
BROKERS = 3
# Short, so a killed broker's registration goes within seconds (ZooKeeper's minimum here is 1 s).
SESSION_TIMEOUT_MS = 3000
READY = re.compile(r"hmb broker (?P<id>\d+) listening on (?P<host>[^:\s]+):(?P<port>\d+) log\.dir=(?P<log_dir>\S+)")


# --- the cluster: three `hmb broker` processes ---------------------------------------------------


@dataclass
class BrokerProc:
    """One ``hmb broker`` subprocess; restarts keep its id, port and log directory."""

    broker_id: int
    zookeeper_connect: str
    log_dir: Path
    err_path: Path
    port: int = 0
    proc: subprocess.Popen[str] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        settings = [f"default.replication.factor={BROKERS}", "min.insync.replicas=2",
                    f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}", "num.partitions=3",
                    "replica.lag.time.max.ms=5000", "offsets.topic.num.partitions=1"]
        cmd = [*HMB, "broker", "--zookeeper", self.zookeeper_connect, "--broker-id", str(self.broker_id),
               "--host", "127.0.0.1", "--port", str(self.port), "--log-dir", str(self.log_dir)]
        for setting in settings:
            cmd += ["--set", setting]
        # stderr to a file: nobody drains a pipe while the broker serves.
        with self.err_path.open("a") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                         preexec_fn=preexec_for_current_thread())
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        match = READY.match(line)
        if match is None:
            self.kill()
            raise AssertionError(f"broker {self.broker_id} did not serve ({line!r}):\n{self.stderr()}")
        assert int(match["id"]) == self.broker_id and match["log_dir"] == str(self.log_dir), line
        self.port = int(match["port"])

    def kill(self) -> None:
        """SIGKILL by pid and reap: a crash, no controlled shutdown, the session left to expire."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def stderr(self) -> str:
        return self.err_path.read_text()[-4000:]


@dataclass
class Cluster:
    zookeeper_connect: str
    brokers: list[BrokerProc]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def logs(self) -> str:
        return "\n".join(f"--- broker {b.broker_id} stderr (tail):\n{b.stderr()}" for b in self.brokers)


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # kafka-python's reconnect chatter
    chroot = f"{zookeeper.connect}/peers-{uuid.uuid4().hex[:8]}"
    base = tmp_path_factory.mktemp("cluster-peers")
    brokers = [BrokerProc(i, chroot, base / f"broker-{i}", base / f"broker-{i}.err") for i in range(BROKERS)]
    try:
        for b in brokers:
            b.start()
        yield Cluster(chroot, brokers)
    finally:
        for b in brokers:
            b.stop()


@pytest.fixture(scope="module")
def zk(cluster: Cluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=cluster.zookeeper_connect)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def wait_for(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout_s} s")
        time.sleep(0.1)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- one view of the cluster per source ------------------------------------------------------------


@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: frozenset[int]


@dataclass(frozen=True)
class View:
    """What one source says. ``brokers`` / ``controller`` are None where the source omits them."""

    source: str
    partitions: dict[int, PartitionView]
    brokers: dict[int, str] | None = None
    controller: int | None = None


def zookeeper_view(zk: KazooClient, topic: str) -> View:
    brokers = {}
    for child in zk.get_children("/brokers/ids"):
        registration = json.loads(zk.get(f"/brokers/ids/{child}")[0])
        brokers[int(child)] = f"{registration['host']}:{registration['port']}"
    controller = json.loads(zk.get("/controller")[0])["brokerid"]
    assignment = json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
    partitions = {}
    for p, replicas in assignment.items():
        state = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0])
        partitions[int(p)] = PartitionView(state["leader"], tuple(replicas), frozenset(state["isr"]))
    return View("zookeeper", partitions, brokers, controller)


def kcat_view(address: str, topic: str) -> View:
    assert KCAT, "kcat is not installed (Debian package kcat; `make setup` installs it)"
    r = subprocess.run([KCAT, "-L", "-J", "-b", address, "-t", topic], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    md = json.loads(r.stdout)
    # librdkafka may ask any broker it knows; the answer must come from the one named.
    assert md["originating_broker"]["name"].startswith(address + "/"), md["originating_broker"]
    (entry,) = md["topics"]
    assert entry["topic"] == topic and "error" not in entry, entry
    partitions = {
        p["partition"]: PartitionView(p["leader"], tuple(r["id"] for r in p["replicas"]), frozenset(r["id"] for r in p["isrs"]))
        for p in entry["partitions"]
    }
    brokers = {b["id"]: b["name"] for b in md["brokers"]}
    return View(f"kcat -b {address}", partitions, brokers, md["controllerid"])


def kafka_python_view(address: str, topic: str) -> View:
    """kafka-python's Metadata v1 codec over a socket to exactly ``address``: a client's
    bootstrap logic could ask another broker, this cannot."""
    from kafka.protocol.metadata import MetadataRequest
    from kafka.protocol.parser import KafkaProtocol

    protocol = KafkaProtocol(client_id="cluster-peers")
    protocol.send_request(MetadataRequest[1](topics=[topic]))
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as sock:
        sock.sendall(protocol.send_bytes())
        responses: list[Any] = []
        while not responses:
            data = sock.recv(1 << 16)
            assert data, f"{address} closed the connection"
            responses = protocol.receive_bytes(data)
    md = responses[0][1].to_dict()
    (entry,) = md["topics"]
    assert entry["name"] == topic and entry["error_code"] == 0, entry
    partitions = {}
    for p in entry["partitions"]:
        assert p["error_code"] == 0, p
        partitions[p["partition_index"]] = PartitionView(p["leader_id"], tuple(p["replica_nodes"]), frozenset(p["isr_nodes"]))
    brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in md["brokers"]}
    return View(f"kafka-python Metadata -> {address}", partitions, brokers, md["controller_id"])


def kafka_python_admin_view(address: str, topic: str) -> View:
    """KafkaAdminClient bootstrapped at ``address`` (its later requests go where it chooses)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=address, client_id="cluster-peers", request_timeout_ms=15_000)
    try:
        (entry,) = admin.describe_topics([topic])
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert entry["error_code"] == 0, entry
    partitions = {
        p["partition_index"]: PartitionView(p["leader_id"], tuple(p["replica_nodes"]), frozenset(p["isr_nodes"]))
        for p in entry["partitions"]
    }
    brokers = {b["broker_id"]: f"{b['host']}:{b['port']}" for b in cluster["brokers"]}
    return View(f"KafkaAdminClient({address})", partitions, brokers, cluster["controller_id"])


def hmb_describe_view(address: str, topic: str) -> View:
    r = subprocess.run([*HMB, "topics", "-b", address, "--describe", topic], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows[0][:5] == ["topic", "partition", "leader", "replicas", "isr"], r.stdout

    def ids(cell: str) -> tuple[int, ...]:
        return () if cell == "-" else tuple(int(i) for i in cell.split(","))

    partitions = {
        int(row[1]): PartitionView(-1 if row[2] == "none" else int(row[2]), ids(row[3]), frozenset(ids(row[4])))
        for row in rows[1:]
        if row[0] == topic
    }
    return View(f"hmb topics --describe -b {address}", partitions)


def differences(expected: View, seen: View) -> list[str]:
    out = []
    if seen.partitions != expected.partitions:
        out.append(f"{seen.source}: partitions {seen.partitions} != {expected.source} {expected.partitions}")
    if seen.brokers is not None and seen.brokers != expected.brokers:
        out.append(f"{seen.source}: brokers {seen.brokers} != {expected.source} {expected.brokers}")
    if seen.controller is not None and seen.controller != expected.controller:
        out.append(f"{seen.source}: controller {seen.controller} != {expected.source} {expected.controller}")
    return out


def await_agreement(cluster: Cluster, zk: KazooClient, topic: str, timeout_s: float = 60) -> View:
    """Wait until every source through every broker equals ZooKeeper (the cheap socket view
    first, every peer once that agrees); returns ZooKeeper's view."""
    deadline = time.monotonic() + timeout_s
    last: list[str] = []
    while True:
        try:
            expected = zookeeper_view(zk, topic)
            last = []
            for b in cluster.brokers:
                last += differences(expected, kafka_python_view(b.address, topic))
            if not last:
                for b in cluster.brokers:
                    for view in (kcat_view, kafka_python_admin_view, hmb_describe_view):
                        last += differences(expected, view(b.address, topic))
            if not last:
                return expected
        except Exception as e:  # a source not ready yet (a broker restarting, a topic being created)
            last = [f"{type(e).__name__}: {e}"]
        if time.monotonic() > deadline:
            raise AssertionError("the peers and ZooKeeper disagree:\n" + "\n".join(last))
        time.sleep(0.3)


def _has_full_isr(zk: KazooClient, topic: str) -> bool:
    return all(len(v.isr) == BROKERS for v in zookeeper_view(zk, topic).partitions.values())


# --- tests -----------------------------------------------------------------------------------------


def test_auto_created_topic_looks_the_same_through_every_broker(cluster: Cluster, zk: KazooClient) -> None:
    """A topic auto-created by kcat's produce gets default.replication.factor=3 replicas, and
    every peer through every broker reports ZooKeeper's state."""
    topic = unique("auto")
    r = subprocess.run([KCAT or "kcat", "-P", "-b", cluster.brokers[1].address, "-t", topic, "-X", "acks=all"],
                       input=b"one\ntwo\nthree\n", capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    expected = await_agreement(cluster, zk, topic)
    assert expected.brokers == {b.broker_id: b.address for b in cluster.brokers}
    assert sorted(expected.partitions) == [0, 1, 2]  # num.partitions=3
    for view in expected.partitions.values():
        assert sorted(view.replicas) == [0, 1, 2], expected


def test_kafka_python_creates_a_6x3_topic_and_kcat_round_trips_with_acks_all(cluster: Cluster, zk: KazooClient) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = unique("created")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="cluster-peers", request_timeout_ms=30_000)
    try:
        answer = admin.create_topics([NewTopic(topic, 6, 3)])
    finally:
        admin.close()
    assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [(topic, 0)], answer
    expected = await_agreement(cluster, zk, topic)
    assert sorted(expected.partitions) == list(range(6))
    for view in expected.partitions.values():
        assert sorted(view.replicas) == [0, 1, 2] and view.leader in view.isr, expected
    # Spread: every broker is the preferred (first) replica and the leader of two partitions.
    for broker_id in range(BROKERS):
        assert sum(v.replicas[0] == broker_id for v in expected.partitions.values()) == 2, expected
        assert sum(v.leader == broker_id for v in expected.partitions.values()) == 2, expected

    # Bytes 0x00-0xff but kcat's delimiters (\t between key and value, \n between messages).
    payload_bytes = bytes(b for b in range(256) if b not in b"\t\n")
    sent = [(b"key-%d" % (i % 50), b"%d|" % i + payload_bytes[i % 200:] + payload_bytes[: i % 200]) for i in range(600)]
    r = subprocess.run([KCAT or "kcat", "-P", "-b", cluster.brokers[2].address, "-t", topic, "-K", "\t",
                        "-X", "acks=all", "-X", "linger.ms=5"],
                       input=b"".join(k + b"\t" + v + b"\n" for k, v in sent), capture_output=True, timeout=60)
    assert r.returncode == 0 and b"failed" not in r.stderr.lower(), r.stderr.decode()

    r = subprocess.run([KCAT or "kcat", "-C", "-b", cluster.brokers[0].address, "-t", topic, "-o", "beginning", "-e",
                        "-f", "%p\t%o\t%k\t%s\n"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    got = [line.split(b"\t", 3) for line in r.stdout.split(b"\n") if line]
    assert sorted((k, v) for _, _, k, v in got) == sorted(sent)
    by_partition: dict[int, list[int]] = {}
    for p, o, _, _ in got:
        by_partition.setdefault(int(p), []).append(int(o))
    assert sorted(by_partition) == list(range(6))  # 50 keys hash over all six partitions
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
    # One key, one partition (librdkafka's default partitioner is consistent on the key).
    partition_of: dict[bytes, set[int]] = {}
    for p, _, k, _ in got:
        partition_of.setdefault(k, set()).add(int(p))
    assert all(len(ps) == 1 for ps in partition_of.values()), partition_of


class AckedProducer:
    """kafka-python's producer (acks=all) on a thread, one message per partition in turn,
    keeping what each acknowledgement said: (partition, offset) -> value."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2, client_id="cluster-peers",
                                      retries=2_147_483_647, retry_backoff_ms=100, request_timeout_ms=10_000,
                                      max_in_flight_requests_per_connection=1)
        self.topic, self.partitions = topic, partitions
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed: list[BaseException] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="acked-producer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            value = b"crash-%06d" % i
            future = self.producer.send(self.topic, value=value, partition=i % self.partitions)
            future.add_callback(self._acked, value)
            future.add_errback(self.failed.append)
            i += 1
            time.sleep(0.004)

    def _acked(self, value: bytes, metadata: Any) -> None:
        with self.lock:
            self.acked[(metadata.partition, metadata.offset)] = value

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.producer.flush(60)
        self.producer.close(10)


class Reader:
    """kafka-python's consumer on a thread: every partition assigned, from the beginning."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                      client_id="cluster-peers")
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        self.consumer.assign(assigned)
        self.consumer.seek_to_beginning(*assigned)
        self.got: dict[tuple[int, int], bytes] = {}
        self.duplicates = 0
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                for records in self.consumer.poll(timeout_ms=200).values():
                    with self.lock:
                        for m in records:
                            key = (m.partition, m.offset)
                            self.duplicates += key in self.got
                            self.got[key] = m.value
        except BaseException as e:  # reported by the test, not lost on the thread
            self.errors.append(e)

    def snapshot(self) -> dict[tuple[int, int], bytes]:
        with self.lock:
            return dict(self.got)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.consumer.close()


def test_kafka_python_delivers_every_acked_message_across_a_broker_crash(cluster: Cluster, zk: KazooClient) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = unique("crash")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="cluster-peers", request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, 6, 3)])
    finally:
        admin.close()
    before = await_agreement(cluster, zk, topic)
    # The controller: its death moves both the controller role and its leaderships.
    assert before.controller is not None
    victim = cluster.brokers[before.controller]
    led = sorted(p for p, v in before.partitions.items() if v.leader == victim.broker_id)

    producer = AckedProducer(cluster.bootstrap, topic, 6)
    reader = Reader(cluster.bootstrap, topic, 6)
    try:
        wait_for(lambda: producer.count() >= 300 and len(reader.snapshot()) >= 200, 60, "produce and consume before the crash")

        victim.kill()
        wait_for(lambda: str(victim.broker_id) not in zk.get_children("/brokers/ids"), 30,
                 f"broker {victim.broker_id}'s registration gone after its session ({SESSION_TIMEOUT_MS} ms)")
        wait_for(lambda: all(victim.broker_id not in v.isr and v.leader != victim.broker_id
                             for v in zookeeper_view(zk, topic).partitions.values()), 30,
                 f"a new controller, new leaders for partitions {led}, the ISR without broker {victim.broker_id}")
        assert zookeeper_view(zk, topic).controller != victim.broker_id
        # Acks go on with two of three replicas in sync (min.insync.replicas=2), on the new leaders too.
        acked_at_failover = producer.count()
        wait_for(lambda: producer.count() >= acked_at_failover + 300, 60, "acks after the failover")
        with producer.lock:
            assert {p for p, _ in producer.acked if p in led}, producer.acked.keys()

        victim.start()
        wait_for(lambda: _has_full_isr(zk, topic), 60, f"broker {victim.broker_id} back in every ISR")
        acked_at_restart = producer.count()
        wait_for(lambda: producer.count() >= acked_at_restart + 300, 60, "acks after the restart")
    finally:
        producer.close()
    try:
        assert producer.failed == [], producer.failed[:3]
        acked = dict(producer.acked)

        def delivered_all() -> bool:
            return reader.errors != [] or acked.keys() <= reader.snapshot().keys()

        wait_for(delivered_all, 60, f"the consumer delivering all {len(acked)} acknowledged messages")
    finally:
        reader.close()
    assert reader.errors == [], reader.errors
    got = reader.snapshot()
    missing = sorted(acked.keys() - got.keys())
    assert not missing, f"{len(missing)} acknowledged messages never consumed, e.g. {missing[:5]}\n{cluster.logs()}"
    changed = [k for k in acked if got[k] != acked[k]]
    assert not changed, f"offsets whose consumed value is not the acknowledged one: {changed[:5]}"
    for p in range(6):  # no gap below what was consumed: offsets 0..n-1 per partition
        offsets = sorted(o for q, o in got if q == p)
        assert offsets == list(range(len(offsets))), (p, offsets[:10])
    assert reader.duplicates == 0

    # The restarted broker agrees with the others and with ZooKeeper on the new leaders.
    after = await_agreement(cluster, zk, topic)
    assert all(after.partitions[p].leader != victim.broker_id for p in led), after
    assert after.controller != victim.broker_id, after
    assert after.brokers == {b.broker_id: b.address for b in cluster.brokers}
