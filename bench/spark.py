"""Spark throughput, reading and writing: create_rdd and the "hmb" sink on local[2] (and on a
Spark standalone cluster with ``--cluster``) vs one hmbclient client in one process.

    .venv/bin/python bench/spark.py [--partitions 4] [--messages 250000] [--size 100]
                                    [--broker embedded|tansu|kafka] [--repeat 5] [--warmup 1]
                                    [--no-read] [--no-write] [--cluster] [--(only-)vs-kafka]
                                    [--(only-)hot]

Fills a topic with ``partitions x messages`` values of ``size`` bytes, then times
``--repeat`` interleaved rounds of:

* ``loop count`` / ``loop content``: this process, one SimpleConsumer, the partitions read one
  after the other in fetches of fetch.message.max.bytes; counting messages, or summing value
  lengths (every message touched);
* ``spark count``: ``create_rdd(sc, params, ranges).count()``;
* ``spark content``: ``create_rdd(...).map(lambda kv: len(kv[1])).sum()``.

The write path (rows written per second; every row acknowledged, checked through the topic's
latest offsets; the sink is at-least-once, so more rows than written would be reported as
duplicates, fewer fail the bench):

* ``producer write``: this process, one async hmbclient Producer, ``send_record`` per row (as
  the sink does), the same keys, ``batch.num.messages`` and ``request.required.acks``, then
  a flush and every future checked;
* ``sink write``: ``spark.range(...)`` made into (key, value) rows in the JVM, written with
  ``df.write.mode("append").format("hmb")``, one task per topic partition;
* ``eos sink write``: the same with ``exactlyOnce=true`` (one transaction per task; the
  commit markers are not counted as rows). Goal: >= 0.8x ``sink write``;
* ``pipeline``: read -> transform -> write: ``spark.read.format("hmb")`` on the filled topic,
  the value upper-cased and prefixed with its offset, keyed by partition, written back with the
  sink to another topic (read and write in one Spark job).

``--vs-kafka`` (``--only-vs-kafka``: these alone): ``hmb`` against Spark's own Kafka connector
(``format("kafka")``, org.apache.spark:spark-sql-kafka-0-10 from ``make peers``) on the same
topic and frame, one task per topic partition both ways:

* ``kafka read`` / ``hmb read``: ``spark.read.format(...)`` of the whole filled topic,
  ``count(*)`` and ``sum(length(value))`` in one aggregate (every value touched, both checked);
* ``kafka sink write`` / ``hmb sink write``: the ``sink write`` frame written with each format,
  acks=-1 (``kafka.acks=all``) both, each sink's own batching defaults; rows checked through the
  topic's latest offsets as above.

``--hot`` (``--only-hot``: these alone): one hot partition holding ``partitions x messages``
values, read whole by ``spark.read.format("hmb")`` (``count(*)`` and ``sum(length(value))``,
both checked) as one task (``hot 1 task``) and with ``minPartitions=4`` (``hot minPartitions=4``:
four tasks reading a quarter of the offsets each from the same leader). Target: >= 1.8x on
2 cores. Printed with it: the broker's CPU-s per workload, and the bound that CPU puts on the
ratio (``cores x wall(1 task) / CPU-s(4 tasks)``, broker included): a 1-task read that already
keeps more than one core busy (the Python worker decodes while the JVM aggregates) leaves
less than 2x to gain on 2 cores.

``--broker kafka`` runs Apache Kafka 4.x (hmbclient.testing.ApacheKafka, one KRaft node) with
kafka-server-start.sh's JVM settings; its JIT warms up in the fill and the untimed rounds.

With ``--cluster`` the Spark workloads also run on a LocalSparkCluster (a master and one
1-core, 512 MiB worker per ``--cluster-workers``, executors in their own JVMs), after the
local[2] ones: PySpark runs one SparkContext per process, so one after the other.

Spark's per-job overhead (planning, scheduling, shipping the task, Python workers' results) is
included; JVM start-up, JIT warm-up and the first Python worker forks are not (``--warmup``
untimed rounds of every workload run first).

Readiness rule (bench/_common.py) for the baselines in this process: the loop's SimpleConsumer
is connected to the partitions' leader before its clock starts (one fetch at offset 0 of the
first range, untimed; the message is read again, counted, inside the timed part), and the
producer has had one warm-up row acknowledged (not counted: the written rows are the topic's
growth during the timed part). The Spark rows cannot follow it: each job's tasks open their
own connections inside the job, which is part of the per-job overhead they measure -- the rule
applied to the baselines only weighs against Spark. Before any timing, the filled topic must end
at ``messages`` on every partition (the high watermark of a Fetch answer), or the bench stops.
Runs are interleaved round by round (the machine is shared); prints messages/s (medians) and
the median of the per-round ratios spark / loop (read) and sink / producer (write), with the
lowest and highest; the machine's load (/proc/loadavg) before and after. Target for the read
path: ratio >= 1.5 on a 2-core machine.
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
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_HERE]  # last: bench/_common.py

from _common import (  # noqa: E402
    KAFKA_BENCH_JVM_OPTIONS,
    loadavg,
    ratio_summary,
    require_end_offset,
    warm_hmbclient_consumer,
)

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
        producer.flush(600)
        # Every message acknowledged, or the bench is meaningless.
        for f in futures:
            f.result(timeout=60)
    finally:
        producer.close()
    for p in range(partitions):
        require_end_offset(bootstrap, topic, messages, partition=p, what="filled for the read workloads")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=30_000)
    finally:
        admin.close()


WRITE_BATCH = 2000
WRITE_ACKS = -1  # the sink's default; one broker here, so the same as 1


def latest_total(bootstrap: str, topic: str) -> int:
    from spark_integration import get_latest_offsets

    return sum(get_latest_offsets({"metadata.broker.list": bootstrap}, [topic]).values())


class ProducerWrite:
    """The write baseline: one async Producer in this process. ``prepare`` (untimed) creates it
    and has one row acknowledged (the readiness rule); calling it writes ``total`` rows and
    returns them."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, total: int, size: int) -> None:
        self.args = (bootstrap, topic, partitions, total, size)
        self.producer: Any = None

    def prepare(self) -> None:
        from hmbclient import Producer

        bootstrap, topic, _, _, size = self.args
        self.producer = Producer(metadata_broker_list=bootstrap, producer_type="async",
                                 batch_num_messages=WRITE_BATCH, request_required_acks=WRITE_ACKS)
        self.producer.send_record(topic, b"x" * size, b"0").result(timeout=60)

    def __call__(self) -> int:
        _, topic, partitions, total, size = self.args
        producer, self.producer = self.producer, None
        if producer is None:
            raise RuntimeError("ProducerWrite called without prepare()")
        return producer_write(producer, topic, partitions, total, size)


def producer_write(producer: Any, topic: str, partitions: int, total: int, size: int) -> int:
    """Writes ``total`` rows with ``producer`` (closed at the end); returns rows acknowledged."""
    value = b"x" * size
    keys = [str(p).encode() for p in range(partitions)]
    futures = []
    try:
        for i in range(total):
            futures.append(producer.send_record(topic, value, keys[i % partitions]))
            if len(futures) >= 20_000:  # as the sink: settle in slices, memory stays bounded
                producer.flush()
                for f in futures:
                    f.result(timeout=60)
                futures.clear()
        producer.flush()
        for f in futures:
            f.result(timeout=60)
    finally:
        producer.close()
    return total


def sink_write(spark: Any, bootstrap: str, topic: str, partitions: int, total: int, size: int,
               exactly_once: bool = False) -> None:
    df = spark.range(0, total, 1, partitions).selectExpr(
        f"CAST(id % {partitions} AS STRING) AS key", f"repeat('x', {size}) AS value")
    (df.write.mode("append").format("hmb").option("metadata.broker.list", bootstrap)
     .option("topic", topic).option("batch.num.messages", str(WRITE_BATCH))
     .option("request.required.acks", str(WRITE_ACKS)).option("exactlyOnce", str(exactly_once).lower()).save())


def eos_sink_write(spark: Any, bootstrap: str, topic: str, partitions: int, total: int, size: int) -> Callable[[], int]:
    """``sink write`` with ``exactlyOnce=true``: rows added, the commit markers left out. Each of
    the ``partitions`` tasks ends its transaction with one marker in every topic partition it
    wrote (as many as its keys' partitions: at most ``partitions``), so a growth of the topic
    up to ``partitions**2`` offsets past ``total`` is markers; anything beyond is reported."""
    count = written(bootstrap, topic, lambda: sink_write(spark, bootstrap, topic, partitions, total, size, True))

    def rows() -> int:
        grown = count()
        return total if total <= grown <= total + partitions * partitions else grown

    return rows


def pipeline(spark: Any, bootstrap: str, source: str, topic: str) -> None:
    df = (spark.read.format("hmb").option("metadata.broker.list", bootstrap).option("topic", source)
          .load())
    out = df.selectExpr("CAST(partition AS STRING) AS key",
                        "concat(CAST(offset AS STRING), ':', upper(CAST(value AS STRING))) AS value")
    (out.write.mode("append").format("hmb").option("metadata.broker.list", bootstrap)
     .option("topic", topic).option("batch.num.messages", str(WRITE_BATCH))
     .option("request.required.acks", str(WRITE_ACKS)).save())


def written(bootstrap: str, topic: str, fn: Callable[[], Any]) -> Callable[[], int]:
    """``fn`` as a workload returning the rows it added to ``topic`` (its latest offsets, taken
    after ``fn.prepare()`` when it has one)."""
    def run() -> int:
        before = latest_total(bootstrap, topic)
        fn()
        return latest_total(bootstrap, topic) - before

    prepare = getattr(fn, "prepare", None)
    if prepare is not None:
        run.prepare = prepare  # type: ignore[attr-defined]
    return run


class LoopRead:
    """The read baseline: one SimpleConsumer reading every range in turn, in this process.
    ``prepare`` (untimed) connects it to the leader with one fetch at the first range's start."""

    def __init__(self, host: str, port: int, ranges: list[Any], content: bool) -> None:
        self.host, self.port, self.ranges, self.content = host, port, ranges, content
        self.consumer: Any = None

    def prepare(self) -> None:
        from hmbclient import SimpleConsumer

        self.consumer = SimpleConsumer(self.host, self.port, client_id="bench-loop")
        first = self.ranges[0]
        if first.from_offset != 0:
            raise RuntimeError("the warm-up fetch reads offset 0 of the first range")
        warm_hmbclient_consumer(self.consumer, first.topic, first.partition, FETCH_BYTES)

    def __call__(self) -> int:
        consumer, self.consumer = self.consumer, None
        if consumer is None:
            raise RuntimeError("LoopRead called without prepare()")
        return loop_read(consumer, self.ranges, self.content)


def loop_read(consumer: Any, ranges: list[Any], content: bool) -> int:
    """Reads every range in turn with ``consumer`` (closed at the end)."""
    from hmbclient import FetchRequest

    total = 0
    empties = 0
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


def measure(title: str, workloads: dict[str, Callable[[], int]], expect: dict[str, int],
            rows: int, args: argparse.Namespace, broker_pid: int | None,
            ratios: list[tuple[str, str, str]]) -> None:
    """Interleaved timed rounds of ``workloads`` (after ``args.warmup`` untimed ones); prints
    rows/s and CPU-s per workload and, per (label, numerator, denominator) in ``ratios``, the
    median of the per-round speed ratios. A workload returning fewer than ``expect`` rows
    stops the bench; more (a write's at-least-once duplicates) is reported."""
    # Interleaved rounds: the machine is shared, so each round compares runs made seconds
    # apart, and the ratio reported is the median of the per-round ratios.
    times: dict[str, list[float]] = {name: [] for name in workloads}
    cpus: dict[str, list[float]] = {name: [] for name in workloads}
    broker_cpus: dict[str, list[float]] = {name: [] for name in workloads}
    extra: dict[str, int] = dict.fromkeys(workloads, 0)
    me = os.getpid()
    # Untimed rounds first: JIT-compile the JVM's paths and warm both sides' caches (standard
    # benchmark practice; the timed rounds still include every per-job cost).
    for _ in range(args.warmup):
        for fn in workloads.values():
            _prepare(fn)
            fn()
    load_before = loadavg()
    for _ in range(args.repeat):
        for name, fn in workloads.items():
            _prepare(fn)  # the readiness rule: baselines connected before the clock
            cpu0 = tree_cpu(me, broker_pid)
            broker0 = tree_cpu(broker_pid, None) if broker_pid is not None else 0.0
            secs, got = timed(fn, 1)
            cpus[name].append(tree_cpu(me, broker_pid) - cpu0)
            if broker_pid is not None:
                broker_cpus[name].append(tree_cpu(broker_pid, None) - broker0)
            if got < expect[name] or (got != expect[name] and not name.endswith(("write", "pipeline"))):
                raise SystemExit(f"{title} {name}: got {got}, expected {expect[name]}")
            extra[name] += got - expect[name]
            times[name].append(secs)
    load_after = loadavg()

    # CPU-s: this process and its children (Spark's JVM and Python workers), broker
    # excluded; unlike wall time it barely depends on what else the machine runs. (On the
    # standalone cluster the daemons are our children and the executors theirs: counted.)
    # broker CPU-s: the broker's process tree alone (Tansu's is not ours to see: blank).
    print(f"-- {title}")
    print(f"{'workload':<16}{'median s':>9}{'rows/s':>14}{'CPU-s':>8}{'broker CPU-s':>14}   runs (s)")
    for name, ts in times.items():
        med = statistics.median(ts)
        runs = " ".join(f"{t:.2f}" for t in ts)
        cpu = statistics.median(cpus[name])
        bcpu = f"{statistics.median(broker_cpus[name]):>14.2f}" if broker_cpus[name] else " " * 14
        dup = f"   ({extra[name]} duplicate rows)" if extra[name] else ""
        print(f"{name:<16}{med:>9.2f}{rows / med:>14,.0f}{cpu:>8.2f}{bcpu}   {runs}{dup}")
    for label, num, den in ratios:
        if num in times and den in times:
            summary = ratio_summary([1 / t for t in times[num]], [1 / t for t in times[den]])
            assert summary is not None
            med, lo, hi = summary
            print(f"ratio {label:<28} {med:5.2f}x  lowest {lo:.2f}x highest {hi:.2f}x  "
                  f"(per round: {' '.join(f'{d / n:.2f}' for n, d in zip(times[num], times[den], strict=True))})")
    for kind in ("count", "content"):
        if f"loop {kind}" in cpus and f"spark {kind}" in cpus:
            loop_cpu = statistics.median(cpus[f"loop {kind}"])
            spark_cpu = statistics.median(cpus[f"spark {kind}"])
            print(f"CPU bound on {os.cpu_count()} idle cores, {kind:<8}: spark/loop <= "
                  f"{(os.cpu_count() or 1) * loop_cpu / max(spark_cpu, 1e-9):4.2f}x "
                  f"(loop {loop_cpu:.2f} CPU-s, spark {spark_cpu:.2f} CPU-s; read target >= 1.5x)")
    hot1, hot4 = "hot 1 task", "hot minPartitions=4"
    if hot1 in times and hot4 in times:
        # The 4 tasks cannot beat their CPU-s spread over every core, broker included (the
        # same machine): the speed-up is at most cores * wall(1 task) / CPU-s(4 tasks).
        cpu4 = statistics.median(cpus[hot4]) + (statistics.median(broker_cpus[hot4]) if broker_cpus[hot4] else 0)
        wall1 = statistics.median(times[hot1])
        cpu1 = statistics.median(cpus[hot1]) + (statistics.median(broker_cpus[hot1]) if broker_cpus[hot1] else 0)
        print(f"CPU bound on {os.cpu_count()} idle cores, hot: minPartitions=4 / 1 task <= "
              f"{(os.cpu_count() or 1) * wall1 / max(cpu4, 1e-9):4.2f}x (1 task {cpu1:.2f} CPU-s in "
              f"{wall1:.2f} s = {cpu1 / wall1:.2f} cores; 4 tasks {cpu4:.2f} CPU-s, broker included; "
              "target >= 1.8x)")
    print(f"load (/proc/loadavg) {load_before} -> {load_after} on {os.cpu_count()} cores")


def _prepare(fn: Callable[[], int]) -> None:
    prepare = getattr(fn, "prepare", None)
    if prepare is not None:
        prepare()


def spark_workloads(spark: Any, args: argparse.Namespace, bootstrap: str, host: str, port: int,
                    topic: str, tag: str) -> tuple[dict[str, Callable[[], int]], dict[str, int]]:
    """The read workloads (unless --no-read) and the write ones (unless --no-write)."""
    from spark_integration import OffsetRange, create_rdd

    total = args.partitions * args.messages
    sc = spark.sparkContext
    params = {"metadata.broker.list": bootstrap, "fetch.message.max.bytes": FETCH_BYTES}
    ranges = [OffsetRange(topic, p, 0, args.messages) for p in range(args.partitions)]
    # Warm-up: start the Python workers and import the reader once.
    create_rdd(sc, params, [OffsetRange(topic, p, 0, 10) for p in range(2)]).count()
    workloads: dict[str, Callable[[], int]] = {}
    expect: dict[str, int] = {}
    if args.vs_kafka:
        more, more_expect = kafka_connector_workloads(spark, args, bootstrap, topic, tag)
        workloads.update(more)
        expect.update(more_expect)
        if args.only_vs_kafka:
            return workloads, expect
    if not args.no_read:
        workloads.update({
            "loop count": LoopRead(host, port, ranges, False),
            "spark count": lambda: create_rdd(sc, params, ranges).count(),
            "loop content": LoopRead(host, port, ranges, True),
            "spark content": lambda: create_rdd(sc, params, ranges)
            .map(lambda kv: len(kv[1])).sum(),
        })
        expect.update({"loop count": total, "spark count": total,
                       "loop content": total * args.size, "spark content": total * args.size})
    if not args.no_write:
        outs = {name: f"bench-{tag}-{name.replace(' ', '-')}" for name in
                ("producer write", "sink write", "eos sink write", "pipeline")}
        for out in outs.values():
            create_topic(bootstrap, out, args.partitions)
        workloads.update({
            "producer write": written(bootstrap, outs["producer write"], ProducerWrite(
                bootstrap, outs["producer write"], args.partitions, total, args.size)),
            "sink write": written(bootstrap, outs["sink write"], lambda: sink_write(
                spark, bootstrap, outs["sink write"], args.partitions, total, args.size)),
            "eos sink write": eos_sink_write(spark, bootstrap, outs["eos sink write"], args.partitions, total, args.size),
            "pipeline": written(bootstrap, outs["pipeline"], lambda: pipeline(
                spark, bootstrap, topic, outs["pipeline"])),
        })
        expect.update(dict.fromkeys(outs, total))
    return workloads, expect


def frame_read(spark: Any, fmt: str, bootstrap: str, topic: str, size: int, total: int) -> int:
    """A batch read of the whole topic with ``format(fmt)``, every value touched (count and the
    sum of value lengths in one aggregate); returns the rows, after checking the bytes."""
    if fmt == "kafka":
        reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                  .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
    else:
        reader = (spark.read.format("hmb").option("metadata.broker.list", bootstrap).option("topic", topic)
                  .option("startingOffsets", "earliest").option("fetch.message.max.bytes", str(FETCH_BYTES)))
    row = reader.load().selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    if row.n == total and row.b != total * size:
        raise SystemExit(f"{fmt} read: {row.b} value bytes, expected {total * size}")
    return int(row.n)


def frame_write(spark: Any, fmt: str, bootstrap: str, topic: str, partitions: int, total: int, size: int) -> None:
    """The same frame as :func:`sink_write` (one task per topic partition) written with
    ``format(fmt)``, both at acks=WRITE_ACKS; batching is each sink's own default."""
    df = spark.range(0, total, 1, partitions).selectExpr(
        f"CAST(id % {partitions} AS STRING) AS key", f"repeat('x', {size}) AS value")
    if fmt == "kafka":
        (df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("kafka.acks", "all" if WRITE_ACKS == -1 else str(WRITE_ACKS)).save())
    else:
        (df.write.mode("append").format("hmb").option("metadata.broker.list", bootstrap).option("topic", topic)
         .option("request.required.acks", str(WRITE_ACKS)).save())


def kafka_connector_workloads(spark: Any, args: argparse.Namespace, bootstrap: str, topic: str,
                              tag: str) -> tuple[dict[str, Callable[[], int]], dict[str, int]]:
    """``--vs-kafka``: Spark's own connector (format "kafka") against ours (format "hmb") on
    the same topic and frame, the same number of tasks (one per topic partition, both ways)."""
    total = args.partitions * args.messages
    workloads: dict[str, Callable[[], int]] = {}
    expect: dict[str, int] = {}
    if not args.no_read:
        for fmt in ("kafka", "hmb"):
            workloads[f"{fmt} read"] = (lambda f: lambda: frame_read(spark, f, bootstrap, topic, args.size, total))(fmt)
            expect[f"{fmt} read"] = total
    if not args.no_write:
        for fmt in ("kafka", "hmb"):
            out = f"bench-{tag}-{fmt}-sink"
            create_topic(bootstrap, out, args.partitions)
            workloads[f"{fmt} sink write"] = written(bootstrap, out, (lambda f, o: lambda: frame_write(
                spark, f, bootstrap, o, args.partitions, total, args.size))(fmt, out))
            expect[f"{fmt} sink write"] = total
    return workloads, expect


def hot_read(spark: Any, bootstrap: str, topic: str, size: int, total: int, min_partitions: int | None) -> int:
    """The hot partition read whole with format("hmb"), in one task or ``min_partitions``."""
    reader = (spark.read.format("hmb").option("metadata.broker.list", bootstrap).option("topic", topic)
              .option("startingOffsets", "earliest").option("fetch.message.max.bytes", str(FETCH_BYTES)))
    if min_partitions is not None:
        reader = reader.option("minPartitions", str(min_partitions))
    df = reader.load()
    tasks = df.rdd.getNumPartitions()
    if tasks != (min_partitions or 1):
        raise SystemExit(f"hot read planned {tasks} tasks, expected {min_partitions or 1}")
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]
    if row.n == total and row.b != total * size:
        raise SystemExit(f"hot read: {row.b} value bytes, expected {total * size}")
    return int(row.n)


def hot_workloads(spark: Any, args: argparse.Namespace, bootstrap: str) -> tuple[dict[str, Callable[[], int]], dict[str, int]]:
    """``--hot``: one partition of ``partitions x messages`` values, 1 task vs minPartitions=4."""
    total = args.partitions * args.messages
    topic = "bench-spark-hot"
    create_topic(bootstrap, topic, 1)
    t0 = time.perf_counter()
    fill(bootstrap, topic, 1, total, args.size)
    print(f"filled the hot partition with {total:,} x {args.size} B in {time.perf_counter() - t0:.1f} s")
    return ({"hot 1 task": lambda: hot_read(spark, bootstrap, topic, args.size, total, None),
             "hot minPartitions=4": lambda: hot_read(spark, bootstrap, topic, args.size, total, 4)},
            {"hot 1 task": total, "hot minPartitions=4": total})


RATIOS = [
    ("hot minPartitions=4 / 1 task", "hot minPartitions=4", "hot 1 task"),
    ("hmb/kafka read", "hmb read", "kafka read"),
    ("hmb/kafka sink write", "hmb sink write", "kafka sink write"),
    ("spark/loop count", "spark count", "loop count"),
    ("spark/loop content", "spark content", "loop content"),
    ("sink/producer write", "sink write", "producer write"),
    ("eos sink/sink write", "eos sink write", "sink write"),
    ("pipeline/producer write", "pipeline", "producer write"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--messages", type=int, default=250_000, help="per partition")
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--broker", choices=("embedded", "tansu", "kafka"), default="embedded",
                    help="kafka: Apache Kafka 4.x (hmbclient.testing.ApacheKafka, `make peers`)")
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    ap.add_argument("--no-read", action="store_true", help="skip the read workloads")
    ap.add_argument("--no-write", action="store_true", help="skip the write workloads")
    ap.add_argument("--cluster", action="store_true",
                    help="also run the Spark workloads on a local standalone cluster")
    ap.add_argument("--cluster-workers", type=int, default=2, help="1-core workers (--cluster)")
    ap.add_argument("--vs-kafka", action="store_true",
                    help='also Spark\'s own connector, format("kafka"), vs format("hmb"), read and write')
    ap.add_argument("--only-vs-kafka", action="store_true",
                    help="--vs-kafka without the create_rdd/loop/producer workloads")
    ap.add_argument("--hot", action="store_true",
                    help="also one hot partition read by 1 task vs minPartitions=4")
    ap.add_argument("--only-hot", action="store_true", help="--hot alone")
    args = ap.parse_args()
    args.hot = args.hot or args.only_hot
    args.vs_kafka = args.vs_kafka or args.only_vs_kafka

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from contextlib import ExitStack

    total = args.partitions * args.messages
    with ExitStack() as stack:
        if args.broker == "embedded":
            # In its own process, so the broker's threads do not share a GIL with the
            # baseline loop (or with the Spark driver).
            from hmbclient.broker.process import BrokerProcess

            log_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-"))
            broker: Any = stack.enter_context(BrokerProcess(log_dir=log_dir))
        elif args.broker == "kafka":
            from hmbclient.testing import ApacheKafka

            broker = stack.enter_context(ApacheKafka(jvm_options=KAFKA_BENCH_JVM_OPTIONS))
        else:
            from hmbclient.testing.tansu import LocalTansu

            broker = stack.enter_context(LocalTansu())
        bootstrap = broker.bootstrap
        host, port_text = bootstrap.rsplit(":", 1)
        port = int(port_text)
        topic = "bench-spark"
        if not args.only_hot:
            create_topic(bootstrap, topic, args.partitions)
            t0 = time.perf_counter()
            fill(bootstrap, topic, args.partitions, args.messages, args.size)
            print(f"filled {total:,} x {args.size} B in {time.perf_counter() - t0:.1f} s "
                  f"({args.broker} broker at {bootstrap})")
        broker_pid = broker.proc.pid if args.broker == "embedded" else broker.pid(0) if args.broker == "kafka" else None

        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        if args.vs_kafka:
            from hmbclient.testing.apache_kafka import spark_kafka_connector_jars

            builder = builder.config("spark.jars", ",".join(spark_kafka_connector_jars()))
        spark = (
            builder.master("local[2]")
            .appName("bench-spark")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark_integration_register(spark)
            workloads, expect = ({}, {}) if args.only_hot else spark_workloads(
                spark, args, bootstrap, host, port, topic, "local")
            if args.hot:
                more, more_expect = hot_workloads(spark, args, bootstrap)
                workloads.update(more)
                expect.update(more_expect)
            measure("local[2]", workloads, expect, total, args, broker_pid, RATIOS)
        finally:
            spark.stop()
        if args.cluster:
            from hmbclient.testing.spark import LocalSparkCluster

            cluster = stack.enter_context(LocalSparkCluster(workers=args.cluster_workers))
            spark = cluster.session("bench-spark-cluster")
            spark.sparkContext.setLogLevel("ERROR")
            try:
                workloads, expect = spark_workloads(spark, args, bootstrap, host, port, topic, "cluster")
                measure(f"standalone cluster ({args.cluster_workers} x 1-core workers, "
                        f"{cluster.master_url})", workloads, expect, total, args, broker_pid, RATIOS)
            finally:
                spark.stop()


def spark_integration_register(spark: Any) -> None:
    from spark_integration import register

    register(spark)


if __name__ == "__main__":
    main()
