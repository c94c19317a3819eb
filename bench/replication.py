"""What replication costs, and how long a leader failover takes, on this machine in one run.

    .venv/bin/python bench/replication.py            # ~2-3 minutes
    .venv/bin/python bench/replication.py --quick    # 1 throughput round, 2 failovers, < 1 minute

Set-up: a LocalZooKeeper, a cluster of three broker processes (``python -m hmbclient.broker``
through BrokerProcess, ``default.replication.factor=3``, ``min.insync.replicas=2``, a short
``zookeeper.session.timeout.ms``) and one standalone broker process; every broker has its own log
directory on the local disk and its own process, so none shares a GIL with a client.

**Throughput.** Each measurement is a fresh client process producing N messages of SIZE bytes
(default 1,000,000 x 200 B) to a fresh one-partition topic, timed from the first send to the end
of ``flush``. Readiness rule (bench/_common.py), the same for both clients: each producer is
connected to the partition leader before its clock starts -- one warm-up message (offset 0) is
acknowledged first, the clock times offsets 1..N -- and the run stops unless the flush left
nothing queued, the last offset acknowledged is N and the partition's high watermark reaches
N + 1. Configurations:

* ``RF3 acks=-1``: replication factor 3 on the cluster; answered once the ISR has the messages;
* ``RF1 acks=1`` on the same cluster, and on the standalone broker: no replication.

Clients: hmbclient's Producer (async, ``queue.buffering.max.ms=5``) and confluent-kafka
(librdkafka, ``linger.ms=5``). Rounds interleave every (client, configuration) pair; the table
prints median msg/s and the ratio RF3 acks=-1 / RF1 acks=1 (goal >= 0.5): the median of the
per-round ratios with the lowest and highest beside it. The machine's load (/proc/loadavg) is
printed at the start, every round and the end.

**Failover.** A three-partition RF 3 topic; every probe below has had one message acknowledged
(metadata and leader connection, the same rule) before each round SIGKILLs the leader of one
partition --
alternately a broker that is not the controller and the controller itself -- and measures, from
the kill:

* ``deregistered``: ZooKeeper deletes the dead broker's ``/brokers/ids/<id>`` (its session
  expired: about the session timeout, which is printed alongside);
* ``elected``: the partition's state znode names a new leader;
* ``first ack (direct)``: the first acks=-1 Produce answered without error when sent straight
  to each surviving broker every 5 ms (the broker side alone);
* ``first ack (hmbclient)``: the first message acknowledged to hmbclient's sync Producer, which
  was sending to the old leader and must notice, refresh its metadata and retry
  (``retry.backoff.ms`` 100, Kafka 0.8's default; hmbclient doubles the wait per retry, with
  jitter, so its retries land about 0.1, 0.4, 0.9, 1.7, 3.4 s after the kill, and a leader
  elected at ~2 s is found at the ~3.4 s retry);
* ``first ack (confluent)``: the same for confluent-kafka's producer (librdkafka's defaults),
  as the peer's reference for the client side.

and ``deregistered -> first ack`` for both (goal < 1 s once ZooKeeper noticed). The victim is
restarted on its port and data and the ISR awaited between rounds. Medians and maxima in
seconds; absolute figures drift between runs (2 cores shared with others).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last, so nothing here shadows a package

from _common import (  # noqa: E402
    confluent_flush,
    format_ratio,
    loadavg,
    payload,
    ratio_summary,
    require_end_offset,
    warm_confluent_producer,
    warm_hmbclient_producer,
)

PARTITION_STATE = "/brokers/topics/{topic}/partitions/{partition}/state"


# --------------------------------------------------------------------------- client processes


def produce_hmbclient(bootstrap: str, topic: str, n: int, size: int, acks: int) -> float:
    from hmbclient import Producer, ProducerData

    value = payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5,
                        request_required_acks=acks)
    warm_hmbclient_producer(producer, topic, value)  # leader connected before the clock starts
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    producer.flush(600)
    elapsed = time.perf_counter() - t0
    assert last is not None and last[0].result(60).offset == n, last[0].result(60)
    producer.close()
    return elapsed


def produce_confluent(bootstrap: str, topic: str, n: int, size: int, acks: int) -> float:
    from confluent_kafka import Producer as CProducer

    value = payload(size)
    failed: list[Any] = []
    last: list[int] = []

    def delivered(err: Any, message: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            last[:] = [message.offset()]

    producer = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": acks,
                          "queue.buffering.max.messages": 1_000_000, "on_delivery": delivered})
    warm_confluent_producer(producer, topic, value, partition=0)  # leader connected before the clock starts
    t0 = time.perf_counter()
    produce = producer.produce
    for i in range(n):
        try:
            produce(topic, value, partition=0)
        except BufferError:
            producer.poll(0.01)
            produce(topic, value, partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    confluent_flush(producer, 600)
    elapsed = time.perf_counter() - t0
    assert not failed and last == [n], (failed[:3], last)
    return elapsed


PRODUCERS: dict[str, Callable[[str, str, int, int, int], float]] = {
    "hmbclient": produce_hmbclient,
    "confluent": produce_confluent,
}


def worker(argv: list[str]) -> None:
    job = json.loads(argv[0])
    seconds = PRODUCERS[job["client"]](job["bootstrap"], job["topic"], job["n"], job["size"], job["acks"])
    print(json.dumps({"seconds": seconds}), flush=True)


def run_worker(job: dict[str, Any]) -> float:
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"client run {job} failed:\n{r.stderr[-3000:]}")
    return float(json.loads(r.stdout.strip().splitlines()[-1])["seconds"])


# --------------------------------------------------------------------------- brokers and topics


def await_isr(bootstrap: str, topic: str, replicas: int, timeout_s: float = 60) -> None:
    """Until every partition of ``topic`` has a leader and ``replicas`` members in its ISR."""
    from hmbclient.admin import describe_topics

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            parts = describe_topics(bootstrap, [topic])
            if parts and all(p.leader >= 0 and len(p.isr) == replicas for p in parts):
                return
        except Exception:  # noqa: BLE001 - not served yet (a broker restarting, a topic being created)
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{topic}: ISR of {replicas} not reached in {timeout_s} s")
        time.sleep(0.1)


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    from hmbclient.admin import create_topic as create

    create(bootstrap, topic, partitions, replication_factor, timeout_ms=30_000)
    await_isr(bootstrap, topic, replication_factor)


class Brokers:
    """The three-broker cluster and the standalone broker, as processes."""

    def __init__(self, zookeeper_connect: str, workdir: str, session_timeout_ms: int) -> None:
        from hmbclient.broker import BrokerProcess

        common: dict[str, Any] = {"num_partitions": 1, "offsets_topic_num_partitions": 1}
        self.cluster = [
            BrokerProcess(os.path.join(workdir, f"broker-{i}"), broker_id=i, zookeeper_connect=zookeeper_connect,
                          default_replication_factor=3, min_insync_replicas=2,
                          zookeeper_session_timeout_ms=session_timeout_ms, **common)
            for i in range(3)
        ]
        self.standalone = BrokerProcess(os.path.join(workdir, "standalone"), **common)

    def start(self) -> None:
        for b in [*self.cluster, self.standalone]:
            b.start()

    def stop(self) -> None:
        for b in [*self.cluster, self.standalone]:
            b.terminate()

    @property
    def cluster_bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.cluster)


# --------------------------------------------------------------------------- throughput


CONFIGS = [  # (label, where, replication factor, acks)
    ("RF3 acks=-1 (cluster)", "cluster", 3, -1),
    ("RF1 acks=1 (cluster)", "cluster", 1, 1),
    ("RF1 acks=1 (standalone)", "standalone", 1, 1),
]


def throughput(brokers: Brokers, rounds: int, n: int, size: int) -> dict[tuple[str, str], list[float]]:
    rates: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for client in PRODUCERS:
            for label, where, rf, acks in CONFIGS:
                bootstrap = brokers.cluster_bootstrap if where == "cluster" else brokers.standalone.bootstrap
                topic = f"tput-{client}-{rf}-{uuid.uuid4().hex[:6]}"
                create_topic(bootstrap, topic, 1, rf)
                seconds = run_worker({"client": client, "bootstrap": bootstrap, "topic": topic, "n": n,
                                      "size": size, "acks": acks})
                require_end_offset(bootstrap, topic, n + 1, what=f"after {client}'s produce")
                rates.setdefault((client, label), []).append(n / seconds)
                print(f"  round {r + 1}: {client:9s} {label:24s} {n / seconds:10,.0f} msg/s   load {loadavg()}", flush=True)
    return rates


def print_throughput(rates: dict[tuple[str, str], list[float]], n: int, size: int) -> None:
    print(f"\nProducer throughput, {n:,} x {size} B to one partition, median msg/s "
          f"(ratio: RF3 acks=-1 / that configuration, median of the per-round ratios (lowest-highest); goal >= 0.5)")
    print(f"{'client':10s} {'configuration':24s} {'msg/s':>10s} {'ratio':>22s}")
    for client in PRODUCERS:
        replicated = rates[(client, CONFIGS[0][0])]
        for label, *_ in CONFIGS:
            median = statistics.median(rates[(client, label)])
            ratio = "" if label == CONFIGS[0][0] else format_ratio(ratio_summary(replicated, rates[(client, label)]))
            print(f"{client:10s} {label:24s} {median:10,.0f} {ratio:>22s}")


# --------------------------------------------------------------------------- failover


class DirectProbe:
    """One NetClient per surviving broker, each sending an acks=-1 Produce for the partition."""

    def __init__(self, addresses: list[str], topic: str, partition: int) -> None:
        from hmbclient.net import NetClient

        self.clients = [NetClient(address, client_id="bench-probe", request_timeout_ms=2_000) for address in addresses]
        self.topic, self.partition = topic, partition

    def _produce(self, client: Any) -> bool:
        from hmbclient.protocol.api.base import ApiKey
        from hmbclient.protocol.records import NONE, encode_records

        records = encode_records(2, NONE, [(None, b"probe", None)])

        def build(versions: Any) -> Any:
            return versions.build(ApiKey.PRODUCE, transactional_id=None, acks=-1, timeout_ms=1_000,
                                 topics=[{"topic": self.topic, "partitions": [{"partition": self.partition, "records": records}]}])

        try:
            answer = client.call(client.bootstrap_ids[0], build, timeout_ms=2_000)
        except Exception:  # noqa: BLE001 - a refused connection or timeout: not acknowledged
            return False
        return all(p.error_code == 0 for t in answer.topics for p in t.partitions)

    def warm_up(self) -> None:
        for client in self.clients:  # connect and probe versions now, not after the kill
            self._produce(client)

    def first_ack(self, deadline: float) -> float | None:
        while time.monotonic() < deadline:
            for client in self.clients:
                if self._produce(client):
                    return time.monotonic()
            time.sleep(0.005)
        return None

    def close(self) -> None:
        for client in self.clients:
            client.close()


class ClientProbe:
    """hmbclient's sync Producer sending one message at a time on a thread, released by ``go``."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        from hmbclient import Producer

        self.producer = Producer(metadata_broker_list=bootstrap, producer_type="sync", request_required_acks=-1,
                                 message_send_max_retries=10_000, partitioner=_Fixed(partition))
        self.topic = topic
        self.go = threading.Event()
        self.acked_at: float | None = None
        self.error: BaseException | None = None
        self._send()  # warm: metadata and a connection to the leader
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        from hmbclient import ProducerData

        self.producer.send(ProducerData(self.topic, b"k", [b"client-probe"]))

    def _run(self) -> None:
        self.go.wait()
        try:
            self._send()
            self.acked_at = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - reported with the round
            self.error = e

    def wait(self, timeout_s: float) -> float | None:
        self.thread.join(timeout_s)
        return self.acked_at

    def close(self) -> None:
        self.producer.close()


class ConfluentProbe:
    """confluent-kafka's producer (acks=all, librdkafka's defaults otherwise): one message,
    produced when ``go`` is set, timed at its delivery report."""

    def __init__(self, bootstrap: str, topic: str, partition: int) -> None:
        from confluent_kafka import Producer as CProducer

        self.producer = CProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        self.topic, self.partition = topic, partition
        self.go = threading.Event()
        self.acked_at: float | None = None
        self.error: Any = None
        self.producer.produce(topic, b"confluent-probe", partition=partition)  # warm: metadata, connections
        self.producer.flush(30)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, err: Any, _message: Any) -> None:
        if err is None:
            self.acked_at = time.monotonic()
        else:
            self.error = err

    def _run(self) -> None:
        self.go.wait()
        self.producer.produce(self.topic, b"confluent-probe", partition=self.partition, on_delivery=self._delivered)
        self.producer.flush(120)

    def wait(self, timeout_s: float) -> float | None:
        self.thread.join(timeout_s)
        return self.acked_at

    def close(self) -> None:
        self.producer.flush(5)


class _Fixed:
    """A partitioner that always answers one partition (the one whose leader is killed)."""

    def __init__(self, partition: int) -> None:
        self.fixed = partition

    def partition(self, key: Any, num_partitions: int) -> int:
        return self.fixed


class KillWatch:
    """ZooKeeper watches timing, after the kill, the victim's deregistration and the new leader."""

    def __init__(self, victim_id: int) -> None:
        self.victim_id = victim_id
        self.marks: dict[str, float] = {}
        self.gone, self.elected = threading.Event(), threading.Event()

    def on_registration(self, data: Any, _stat: Any, _event: Any = None) -> bool:
        if data is None and "kill" in self.marks:
            self.marks.setdefault("deregistered", time.monotonic())
            self.gone.set()
            return False  # one deletion is all we time: drop the watch
        return True

    def on_state(self, data: Any, _stat: Any, _event: Any = None) -> bool:
        if data is not None and json.loads(data)["leader"] not in (self.victim_id, -1) and "kill" in self.marks:
            self.marks.setdefault("elected", time.monotonic())
            self.elected.set()
            return False
        return True


def failover(brokers: Brokers, zookeeper_connect: str, rounds: int, session_timeout_ms: int) -> list[dict[str, Any]]:
    from kazoo.client import KazooClient

    topic = f"failover-{uuid.uuid4().hex[:6]}"
    create_topic(brokers.cluster_bootstrap, topic, 3, 3)
    zk = KazooClient(hosts=zookeeper_connect)
    zk.start(timeout=15)
    results = []
    try:
        for r in range(rounds):
            kill_controller = r % 2 == 1
            controller = json.loads(zk.get("/controller")[0])["brokerid"]
            leaders = {p: json.loads(zk.get(PARTITION_STATE.format(topic=topic, partition=p))[0])["leader"] for p in range(3)}
            partition = next(p for p, leader in leaders.items() if (leader == controller) == kill_controller)
            victim = brokers.cluster[leaders[partition]]
            victim_id = leaders[partition]
            survivors = [b.bootstrap for i, b in enumerate(brokers.cluster) if i != victim_id]

            watch = KillWatch(victim_id)
            direct = DirectProbe(survivors, topic, partition)
            client = ClientProbe(brokers.cluster_bootstrap, topic, partition)
            peer = ConfluentProbe(brokers.cluster_bootstrap, topic, partition)
            try:
                direct.warm_up()
                zk.DataWatch(f"/brokers/ids/{victim_id}", watch.on_registration)
                zk.DataWatch(PARTITION_STATE.format(topic=topic, partition=partition), watch.on_state)
                assert victim.proc is not None
                kill = watch.marks["kill"] = time.monotonic()
                os.kill(victim.proc.pid, signal.SIGKILL)  # the probes start at once; reaped below
                client.go.set()
                peer.go.set()
                deadline = kill + session_timeout_ms / 1000 + 30
                direct_at = direct.first_ack(deadline)
                client_at = client.wait(max(0.0, deadline - time.monotonic()))
                peer_at = peer.wait(max(0.0, deadline - time.monotonic()))
                watch.gone.wait(max(0.0, deadline - time.monotonic()))
                watch.elected.wait(max(0.0, deadline - time.monotonic()))
            finally:
                direct.close()
                client.close()
                peer.close()
                victim.kill()  # reap the process
            marks = watch.marks
            row = {
                "victim": victim_id, "controller": kill_controller, "partition": partition,
                "deregistered": marks.get("deregistered", float("nan")) - kill,
                "elected": marks.get("elected", float("nan")) - kill,
                "direct": (direct_at - kill) if direct_at else float("nan"),
                "client": (client_at - kill) if client_at else float("nan"),
                "confluent": (peer_at - kill) if peer_at else float("nan"),
                "client_error": repr(client.error) if client.error else None,
                "confluent_error": str(peer.error) if peer.error else None,
            }
            results.append(row)
            print(f"  round {r + 1}: killed broker {victim_id} ({'controller + ' if kill_controller else ''}leader of "
                  f"{topic}-{partition}): deregistered {row['deregistered']:.3f} s, elected {row['elected']:.3f} s, "
                  f"first ack direct {row['direct']:.3f} s, hmbclient {row['client']:.3f} s, "
                  f"confluent {row['confluent']:.3f} s"
                  + "".join(f" ({row[k]})" for k in ("client_error", "confluent_error") if row[k]), flush=True)
            victim.start()
            await_isr(brokers.cluster_bootstrap, topic, 3)
    finally:
        zk.stop()
        zk.close()
    return results


def print_failover(results: list[dict[str, Any]], session_timeout_ms: int) -> None:
    print(f"\nFailover after kill -9 of a partition leader; zookeeper.session.timeout.ms = {session_timeout_ms} "
          f"(seconds; goal: deregistered -> first ack < 1 s)")
    print(f"{'victim':20s} {'measure':38s} {'median':>8s} {'max':>8s}")
    for kill_controller, label in ((False, "leader"), (True, "leader + controller")):
        rows = [row for row in results if row["controller"] == kill_controller]
        if not rows:
            continue
        measures = [
            ("kill -> deregistered", [row["deregistered"] for row in rows]),
            ("kill -> elected (state znode)", [row["elected"] for row in rows]),
            ("kill -> first ack (direct)", [row["direct"] for row in rows]),
            ("kill -> first ack (hmbclient)", [row["client"] for row in rows]),
            ("kill -> first ack (confluent)", [row["confluent"] for row in rows]),
            ("deregistered -> elected", [row["elected"] - row["deregistered"] for row in rows]),
            ("deregistered -> first ack (direct)", [row["direct"] - row["deregistered"] for row in rows]),
            ("deregistered -> first ack (hmbclient)", [row["client"] - row["deregistered"] for row in rows]),
            ("deregistered -> first ack (confluent)", [row["confluent"] - row["deregistered"] for row in rows]),
        ]
        for name, values in measures:
            print(f"{label:20s} {name:38s} {statistics.median(values):8.3f} {max(values):8.3f}")


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="one throughput round, two failover rounds, fewer messages")
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds (default 5)")
    parser.add_argument("--failovers", type=int, default=6, help="failover rounds (default 6, half of them the controller)")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per throughput run (default 1,000,000)")
    parser.add_argument("--size", type=int, default=200, help="message size in bytes (default 200)")
    parser.add_argument("--session-timeout-ms", type=int, default=2_000,
                        help="the brokers' zookeeper.session.timeout.ms (default 2000)")
    parser.add_argument("--worker", nargs=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.quick:
        args.rounds, args.failovers, args.messages = 1, 2, 50_000
    logging.basicConfig(level=logging.CRITICAL)
    load_start = loadavg()
    print(f"load at start: {load_start} ({os.cpu_count()} cores)", flush=True)

    from hmbclient.testing.zookeeper import LocalZooKeeper

    with LocalZooKeeper() as zookeeper, tempfile.TemporaryDirectory(prefix="bench-replication-") as workdir:
        chroot = f"{zookeeper.connect}/bench-{uuid.uuid4().hex[:8]}"
        brokers = Brokers(chroot, workdir, args.session_timeout_ms)
        try:
            brokers.start()
            print(f"cluster {brokers.cluster_bootstrap}, standalone {brokers.standalone.bootstrap}; "
                  f"{args.rounds} throughput round(s), {args.failovers} failover(s)", flush=True)
            rates = throughput(brokers, args.rounds, args.messages, args.size)
            results = failover(brokers, chroot, args.failovers, args.session_timeout_ms)
        finally:
            brokers.stop()
    if args.rounds > 0:
        print_throughput(rates, args.messages, args.size)
    if args.failovers > 0:
        print_failover(results, args.session_timeout_ms)
    print(f"load at start: {load_start}; at end: {loadavg()}")


if __name__ == "__main__":
    main()
