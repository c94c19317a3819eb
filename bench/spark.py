"""Spark read throughput: create_rdd on local[2] vs one SimpleConsumer loop, same data, same run.

    .venv/bin/python bench/spark.py [--partitions 4] [--messages 250000] [--size 100]
                                    [--broker embedded|tansu] [--repeat 3]

Fills a topic with ``partitions x messages`` values of ``size`` bytes, then times
``--repeat`` interleaved rounds of:

* ``loop count`` / ``loop content``: this process, one SimpleConsumer, the partitions read one
  after the other in fetches of fetch.message.max.bytes; counting messages, or summing value
  lengths (every message touched);
* ``spark count``: ``create_rdd(sc, params, ranges).count()``;
* ``spark content``: ``create_rdd(...).map(lambda kv: len(kv[1])).sum()``.

Spark's per-job overhead (planning, scheduling, shipping the task, Python workers' results) is
included; JVM start-up and the first Python worker fork are not (one warm-up job runs first).
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

# bench/ holds scripts named like packages (bench/rebalance.py): never import from here.
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
    ap.add_argument("--repeat", type=int, default=3)
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
        load_before = os.getloadavg()[0]
        for _ in range(args.repeat):
            for name, fn in workloads.items():
                secs, got = timed(fn, 1)
                if got != expect[name]:
                    raise SystemExit(f"{name}: got {got}, expected {expect[name]}")
                times[name].append(secs)
        load_after = os.getloadavg()[0]

        print(f"{'workload':<16}{'median s':>9}{'msgs/s':>14}   runs (s)")
        for name, ts in times.items():
            med = statistics.median(ts)
            runs = " ".join(f"{t:.2f}" for t in ts)
            print(f"{name:<16}{med:>9.2f}{total / med:>14,.0f}   {runs}")
        for kind in ("count", "content"):
            ratios = [lo / sp for lo, sp in zip(times[f"loop {kind}"], times[f"spark {kind}"],
                                                strict=True)]
            print(f"ratio spark/loop {kind:<8} {statistics.median(ratios):5.2f}x  "
                  f"(per round: {' '.join(f'{r:.2f}' for r in ratios)}; target >= 1.5x)")
        print(f"load average (1 min) {load_before:.1f} -> {load_after:.1f} on "
              f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
