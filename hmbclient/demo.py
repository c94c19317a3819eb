"""``hmb demo``: the whole SDK working end to end on embedded defaults.

1. Servers: a LocalZooKeeper and a 3-broker EmbeddedCluster in a temp dir (or the servers
   given with ``--brokers`` / ``--zookeeper``).
2. Produce N keyed messages with the async batching Producer (progress bar).
3. Consume them with a 3-member ZooKeeper consumer group: two members start, a third joins
   late (after a third of the messages), the first leaves (after two thirds).
4. Spark: one RDD partition per offset range, aggregated on local[2] executors, checked
   against what was produced; the ranges are committed to a second group's ZooKeeper offsets.
5. A short report, then everything is shut down (no process is left behind).

The report's ``ok`` is True only when every produced message was consumed at least once,
every member that was alive at the end owned a share, and Spark's aggregate matches.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["DemoReport", "run_demo"]

DEFAULT_PARTITIONS = 12
KEYS = 1000


@dataclass
class DemoReport:
    topic: str = ""
    partitions: int = 0
    produced: int = 0
    produce_seconds: float = 0.0
    consumed_unique: int = 0
    consumed_total: int = 0
    consume_seconds: float = 0.0
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    committed: int = 0
    spark_total: int | None = None
    spark_expected: int = 0
    spark_partitions: int = 0
    spark_seconds: float = 0.0
    spark_committed: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        lines = [
            "",
            f"hmb demo report (topic {self.topic}, {self.partitions} partitions)",
            f"  produced  {self.produced:>9,} messages in {self.produce_seconds:6.2f} s"
            f"  = {self.produced / max(self.produce_seconds, 1e-9):>10,.0f} msg/s",
            f"  consumed  {self.consumed_unique:>9,} unique ({self.consumed_total:,} deliveries)"
            f" in {self.consume_seconds:6.2f} s  = {self.consumed_total / max(self.consume_seconds, 1e-9):>10,.0f} msg/s",
            "  group members (partitions owned at the end / messages consumed):",
        ]
        for name, m in self.members.items():
            lines.append(f"    {name:<8} {m['role']:<22} {m['partitions']:>3} partitions  {m['messages']:>8,} messages")
        lines.append(f"  offsets committed to ZooKeeper: {self.committed:,} (sum of next offsets)")
        if self.spark_total is not None:
            lines.append(
                f"  spark: {self.spark_partitions} RDD partitions (one per offset range), sum of amounts"
                f" {self.spark_total:,} (expected {self.spark_expected:,}) in {self.spark_seconds:.2f} s;"
                f" ranges committed for group demo-spark: {self.spark_committed:,}"
            )
        else:
            lines.append("  spark: skipped")
        lines.append("  result: " + ("OK" if self.ok else "PROBLEMS: " + "; ".join(self.problems)))
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _servers(brokers: str | None, zookeeper: str | None, out: IO[str]) -> Iterator[tuple[str, str]]:
    if brokers and zookeeper:
        yield brokers, zookeeper
        return
    if brokers or zookeeper:
        raise ValueError("give both --brokers and --zookeeper, or neither (embedded servers)")
    from hmbclient.broker import EmbeddedCluster
    from hmbclient.testing import LocalZooKeeper

    with tempfile.TemporaryDirectory(prefix="hmb-demo-") as tmp:
        t0 = time.monotonic()
        with LocalZooKeeper(data_dir=os.path.join(tmp, "zookeeper")) as zk, EmbeddedCluster(
            brokers=3, zookeeper_connect=zk.connect, num_partitions=DEFAULT_PARTITIONS,
            log_dir=os.path.join(tmp, "logs"),
        ) as cluster:
            out.write(f"started ZooKeeper {zk.connect} and 3 brokers {cluster.bootstrap}"
                      f" in {time.monotonic() - t0:.1f} s\n")
            out.flush()
            yield cluster.bootstrap, zk.connect


def _produce(bootstrap: str, topic: str, n: int, report: DemoReport, out: IO[str]) -> None:
    from tqdm import tqdm

    from hmbclient import Producer, ProducerData

    producer = Producer(metadata_broker_list=bootstrap, producer_type="async",
                        batch_num_messages=1000, queue_buffering_max_ms=10,
                        queue_buffering_max_messages=50_000, compression_codec="lz4")
    t0 = time.monotonic()
    futures = []
    chunk = 1000
    with tqdm(total=n, unit="msg", desc="produce", file=out, disable=None) as bar:
        for start in range(0, n, chunk):
            # One ProducerData per key: the messages of a key share a partition.
            by_key: dict[bytes, list[bytes]] = {}
            for i in range(start, min(n, start + chunk)):
                by_key.setdefault(b"user-%d" % (i % KEYS), []).append(b"%d:%d" % (i, i % 100))
            for key, values in by_key.items():
                futures.append(producer.send(ProducerData(topic, key, values)))
            bar.update(min(n, start + chunk) - start)
        producer.flush()
    failed = 0
    for fs in futures:
        for f in fs:
            if f.exception(timeout=60) is not None:
                failed += 1
    producer.close()
    report.produced = n - failed
    report.produce_seconds = time.monotonic() - t0
    if failed:
        report.problems.append(f"{failed} messages failed to produce")


def _consume(bootstrap: str, zk: str, topic: str, n: int, report: DemoReport, out: IO[str]) -> None:
    from hmbclient import Consumer
    from hmbclient.errors import ConsumerTimeoutError

    group = f"demo-{uuid.uuid4().hex[:6]}"
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()
    counts: dict[str, int] = {}
    total = [0]
    connectors: dict[str, Any] = {}
    threads: list[threading.Thread] = []
    stop = threading.Event()

    def start_member(name: str) -> None:
        connector = Consumer.create({
            "zookeeper.connect": zk, "group.id": group, "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 500, "auto.commit.interval.ms": 1000,
            "metadata.broker.list": bootstrap, "fetch.message.max.bytes": 1 << 20,
        })
        connectors[name] = connector
        counts[name] = 0
        (stream,) = connector.create_message_streams({topic: 1})[topic]

        def drain() -> None:
            local: list[tuple[int, int]] = []
            while not stop.is_set():
                ended = True  # the iteration ends for good when the connector shuts down
                try:
                    for mam in stream:
                        local.append((mam.partition, mam.offset))
                        if len(local) >= 500:
                            ended = False
                            break
                except ConsumerTimeoutError:
                    ended = False
                if local:
                    with lock:
                        seen.update(local)
                        counts[name] += len(local)
                        total[0] += len(local)
                    local = []
                if ended:
                    break

        t = threading.Thread(target=drain, name=f"demo-{name}", daemon=True)
        t.start()
        threads.append(t)

    t0 = time.monotonic()
    start_member("alpha")
    start_member("beta")
    roles = {"alpha": "left after 2/3", "beta": "member from the start", "gamma": "joined late at 1/3"}
    joined = left = False
    deadline = time.monotonic() + 120
    final_owned: dict[str, int] = {}
    while time.monotonic() < deadline:
        with lock:
            done = len(seen)
        if not joined and done >= n // 3:
            start_member("gamma")
            joined = True
        if joined and not left and done >= 2 * n // 3:
            c = connectors["alpha"]
            final_owned["alpha"] = len(c.owned_partitions())
            c.shutdown()
            left = True
        if done >= n and left:
            break
        time.sleep(0.05)
    # settle: the survivors own everything
    for name in ("beta", "gamma"):
        c = connectors.get(name)
        if c is not None:
            c.await_rebalance(timeout=10)
            final_owned[name] = len(c.owned_partitions())
    report.consume_seconds = time.monotonic() - t0
    for name in ("beta", "gamma"):
        if name in connectors:
            connectors[name].commit_offsets()
    stop.set()
    for name in ("beta", "gamma"):
        if name in connectors:
            connectors[name].shutdown()
    for t in threads:
        t.join(timeout=10)
    report.consumed_unique = len(seen)
    report.consumed_total = total[0]
    for name in ("alpha", "beta", "gamma"):
        report.members[name] = {"role": roles[name], "partitions": final_owned.get(name, 0),
                                "messages": counts.get(name, 0)}
    if report.consumed_unique != report.produced:
        report.problems.append(f"consumed {report.consumed_unique} unique messages of {report.produced}")
    if final_owned.get("beta", 0) + final_owned.get("gamma", 0) != report.partitions:
        report.problems.append(f"survivors own {final_owned.get('beta', 0)}+{final_owned.get('gamma', 0)}"
                               f" partitions, not {report.partitions}")
    if not final_owned.get("beta") or not final_owned.get("gamma"):
        report.problems.append("a surviving member owned no partition")
    # what the group committed (ZooKeeper offsets), read back as a 0.8 tool would
    from hmbclient.admin import describe_group

    info = describe_group(zk, group, brokers=bootstrap)
    report.committed = sum(r["committed"] or 0 for r in info["partitions"] if r["topic"] == topic)
    if report.committed != report.produced:
        report.problems.append(f"committed offsets sum to {report.committed}, not {report.produced}")


def _spark(bootstrap: str, zk: str, topic: str, n: int, report: DemoReport, out: IO[str]) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: stay on loopback
    from pyspark.sql import SparkSession

    from spark_integration import OffsetRange, commit_offset_ranges, create_rdd, get_latest_offsets

    t0 = time.monotonic()
    spark = (SparkSession.builder.master("local[2]").appName("hmb-demo")
             .config("spark.driver.host", "127.0.0.1").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        params = {"metadata.broker.list": bootstrap, "zookeeper.connect": zk, "group.id": "demo-spark"}
        ends = get_latest_offsets(params, [topic])
        ranges = [OffsetRange(t, p, 0, end) for (t, p), end in sorted(ends.items())]
        rdd = create_rdd(spark.sparkContext, params, ranges)
        report.spark_partitions = rdd.getNumPartitions()
        report.spark_total = int(rdd.map(lambda kv: int(kv[1].split(b":")[1])).sum())
        report.spark_expected = sum(i % 100 for i in range(n))
        committed = commit_offset_ranges(params, rdd)
        report.spark_committed = sum(committed.values())
    finally:
        spark.stop()
    report.spark_seconds = time.monotonic() - t0
    if report.spark_total != report.spark_expected:
        report.problems.append(f"spark sum {report.spark_total} != expected {report.spark_expected}")
    if report.spark_partitions != report.partitions:
        report.problems.append(f"spark used {report.spark_partitions} partitions, not {report.partitions}")


def run_demo(brokers: str | None = None, zookeeper: str | None = None, messages: int = 100_000,
             spark: bool = True, out: IO[str] = sys.stdout) -> DemoReport:
    """Run the demo and print its report to ``out``; returns the report (``.ok``)."""
    report = DemoReport(topic=f"demo-events-{uuid.uuid4().hex[:6]}")
    with _servers(brokers, zookeeper, out) as (bootstrap, zk):
        from hmbclient.admin import topic_partitions

        _produce(bootstrap, report.topic, messages, report, out)
        report.partitions = len(topic_partitions(bootstrap, report.topic))
        _consume(bootstrap, zk, report.topic, messages, report, out)
        if spark:
            _spark(bootstrap, zk, report.topic, messages, report, out)
    out.write(report.render())
    out.flush()
    return report
