"""Spark read throughput: create_rdd on local[2] vs one SimpleConsumer loop, same data, same run.

    .venv/bin/python bench/spark.py [--partitions 4] [--messages 250000] [--size 100]
                                    [--broker embedded|tansu] [--repeat 5] [--warmup 1]

Fills a topic with ``partitions x messages`` values of ``size`` bytes, then times
``--repeat`` interleaved rounds of:

* ``loop count`` / ``loop content``: this process, one SimpleConsumer, the partitions read one
  after the other in fetches of fetch.message.max.bytes; counting messages, or summing value
  lengths (every message touched);
* ``spark count``: ``create_rdd(sc, params, ranges).count()``;
* ``spark content``: ``create_rdd(...).map(lambda kv: len(kv[1])).sum()``.

Spark's per-job overhead (planning, scheduling, shipping the task, Python workers' results) is
included; JVM start-up, JIT warm-up and the first Python worker forks are not (``--warmup``
untimed rounds of every workload run first).
Runs are interleaved round by round (the machine is shared); prints messages/s (medians) and
the median of the per-round ratios spark / loop. Target: ratio >= 1.5 on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

# A bench script named like a package would shadow it (bench/ once held rebalance.py): never
# import from here.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

FETCH_BYTES = 1024 * 1024


class _PartitionByKey:
    """Keys are partition numbers: the data layout is exact and known in advance."""

    def partition(self, key: Any, num_partitions: int) -> int:
        return int(key) % num_partitions


def fill(bootstrap: str, topic: str, partitions: int, messages: int, size: int) -> None:
    from hmbclient import Producer, ProducerData

    producer = Producer(
        metadata_broker_list=bootstrap,
        producer_type="async",
        partitioner=_PartitionByKey(),
        batch_num_messages=2000,
        request_required_acks=1,
    )
    value = b"x" * size
    chunk = [value] * 1000
    futures: list[Any] = []
    try:
        for p in range(partitions):
            left = messages
            while left > 0:
                n = min(left, len(chunk))
                futures.extend(producer.send(ProducerData(topic, str(p).encode(), chunk[:n])))
                left -= n
        producer.flush()
        # Every message acknowledged, or the bench is meaningless.
        for f in futures:
            f.result(timeout=60)
    finally:
        producer.close()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=30_000)
    finally:
        admin.close()


def loop_read(host: str, port: int, ranges: list[Any], content: bool) -> int:
    """The baseline: one SimpleConsumer reading every range in turn, in this process."""
    from hmbclient import FetchRequest, SimpleConsumer

    total = 0
    empties = 0
    consumer = SimpleConsumer(host, port, client_id="bench-loop")
    try:
        for r in ranges:
            offset = r.from_offset
            while offset < r.until_offset:
                ms = consumer.fetch(FetchRequest(r.topic, r.partition, offset, FETCH_BYTES))
                msgs = ms.messages()
                if not msgs:
                    # Tansu under load sometimes answers empty below its high watermark.
                    empties += 1
                    if ms.high_watermark > offset and empties < 10:
                        continue
                    raise RuntimeError(f"no messages at {r.topic}-{r.partition}@{offset}")
                if msgs[-1].offset >= r.until_offset:
                    msgs = [m for m in msgs if m.offset < r.until_offset]
                if content:
                    for m in msgs:
                        total += len(m.value or b"")
                else:
                    for _m in msgs:
                        total += 1
                offset = msgs[-1].offset + 1
    finally:
        consumer.close()
    return total


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int, exclude: int | None) -> float:
    """CPU seconds used so far by ``root`` and its descendants (JVM, Python workers), minus
    the ``exclude`` subtree (the broker, which serves loop and Spark alike)."""
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st is not None:
                stats[int(name)] = st
    total = 0.0
    for pid, (_, cpu) in stats.items():
        p = pid
        while p in stats and p != root and p != exclude:
            p = stats[p][0]
        if p == root:
            total += cpu
    return total


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times = []
    result = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--messages", type=int, default=250_000, help="per partition")
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--broker", choices=("embedded", "tansu"), default="embedded")
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from contextlib import ExitStack

    from spark_integration import OffsetRange, create_rdd

    total = args.partitions * args.messages
    with ExitStack() as stack:
        if args.broker == "embedded":
            # In its own process, so the broker's threads do not share a GIL with the
            # baseline loop (or with the Spark driver).
            from hmbclient.broker.process import BrokerProcess

            log_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-"))
            broker: Any = stack.enter_context(BrokerProcess(log_dir=log_dir))
        else:
            from hmbclient.testing.tansu import LocalTansu

            broker = stack.enter_context(LocalTansu())
        bootstrap = broker.bootstrap
        host, port_text = bootstrap.rsplit(":", 1)
        port = int(port_text)
        topic = "bench-spark"
        create_topic(bootstrap, topic, args.partitions)
        t0 = time.perf_counter()
        fill(bootstrap, topic, args.partitions, args.messages, args.size)
        print(f"filled {total:,} x {args.size} B in {time.perf_counter() - t0:.1f} s "
              f"({args.broker} broker at {bootstrap})")
        ranges = [OffsetRange(topic, p, 0, args.messages) for p in range(args.partitions)]

        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench-spark")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        stack.callback(spark.stop)
        sc = spark.sparkContext
        params = {"metadata.broker.list": bootstrap, "fetch.message.max.bytes": FETCH_BYTES}
        # Warm-up: start the Python workers and import the reader once.
        create_rdd(sc, params, [OffsetRange(topic, p, 0, 10) for p in range(2)]).count()

        workloads: dict[str, Callable[[], int]] = {
            "loop count": lambda: loop_read(host, port, ranges, False),
            "spark count": lambda: create_rdd(sc, params, ranges).count(),
            "loop content": lambda: loop_read(host, port, ranges, True),
            "spark content": lambda: create_rdd(sc, params, ranges)
            .map(lambda kv: len(kv[1])).sum(),
        }
        expect = {"loop count": total, "spark count": total,
                  "loop content": total * args.size, "spark content": total * args.size}
        # Interleaved rounds: the machine is shared, so each round compares runs made seconds
        # apart, and the ratio reported is the median of the per-round ratios.
        times: dict[str, list[float]] = {name: [] for name in workloads}
        cpus: dict[str, list[float]] = {name: [] for name in workloads}
        broker_pid = broker.proc.pid if args.broker == "embedded" else None
        me = os.getpid()
        # One untimed round first: JIT-compiles the JVM's paths and warms both sides' caches
        # (standard benchmark practice; the timed rounds still include every per-job cost).
        for _ in range(args.warmup):
            for fn in workloads.values():
                fn()
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for name, fn in workloads.items():
                cpu0 = tree_cpu(me, broker_pid)
                secs, got = timed(fn, 1)
                cpus[name].append(tree_cpu(me, broker_pid) - cpu0)
                if got != expect[name]:
                    raise SystemExit(f"{name}: got {got}, expected {expect[name]}")
                times[name].append(secs)
        load_after = os.getloadavg()[0]

        # CPU-s: this process and its children (Spark's JVM and Python workers), broker
        # excluded; unlike wall time it barely depends on what else the machine runs.
        print(f"{'workload':<16}{'median s':>9}{'msgs/s':>14}{'CPU-s':>8}   runs (s)")
        for name, ts in times.items():
            med = statistics.median(ts)
            runs = " ".join(f"{t:.2f}" for t in ts)
            cpu = statistics.median(cpus[name])
            print(f"{name:<16}{med:>9.2f}{total / med:>14,.0f}{cpu:>8.2f}   {runs}")
        for kind in ("count", "content"):
            ratios = [lo / sp for lo, sp in zip(times[f"loop {kind}"], times[f"spark {kind}"],
                                                strict=True)]
            print(f"ratio spark/loop {kind:<8} {statistics.median(ratios):5.2f}x  "
                  f"(per round: {' '.join(f'{r:.2f}' for r in ratios)}; target >= 1.5x)")
        for kind in ("count", "content"):
            loop_cpu = statistics.median(cpus[f"loop {kind}"])
            spark_cpu = statistics.median(cpus[f"spark {kind}"])
            print(f"CPU bound on {os.cpu_count()} idle cores, {kind:<8}: spark/loop <= "
                  f"{(os.cpu_count() or 1) * loop_cpu / spark_cpu:4.2f}x "
                  f"(loop {loop_cpu:.2f} CPU-s, spark {spark_cpu:.2f} CPU-s)")
        print(f"load average (1 min) {load_before:.1f} -> {load_after:.1f} on "
              f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
