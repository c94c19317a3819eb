"""Spark on a real standalone cluster (hmbclient's ``spark_cluster`` fixture): a master and two
workers on 127.0.0.1, so every task runs in an executor JVM other than the driver's, with its own
Python workers. Covers create_rdd (one partition per offset range, each preferring its leader's
host), the "hmb" source (batch count and content), the source options that act in the tasks
(``option_cases.EXECUTOR``, the same cases the local option test runs) and the sink (write,
read back: every row, duplicates counted), and proves where the tasks ran.

PySpark runs one SparkContext per process, and the other Spark modules share a local[2] one for
the whole session (tests/spark/conftest.py): this module's session is module-scoped and the
module sorts first in tests/spark, so its context is gone before theirs starts.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter
from typing import Any

import pytest
from option_cases import EXECUTOR, fill_option_topic
from spark_helpers import create_topic, produce

from spark_integration import OffsetRange, create_rdd, get_latest_offsets, offset_ranges

pytestmark = pytest.mark.timeout(600)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _executor_of_this_task() -> tuple[str, int]:
    """(executor id, JVM pid) of the executor running the calling Python worker, from /proc:
    the first ancestor that is a ``CoarseGrainedExecutorBackend`` JVM; ("driver", pid) when
    the first JVM up the tree is anything else (local mode runs tasks under the driver's JVM)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
        if args and os.path.basename(args[0]) == "java":
            if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
                return args[args.index("--executor-id") + 1], pid
            return "driver", pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return "none", 0


def _where(iterator: Any) -> Any:
    rows = sum(1 for _ in iterator)
    yield (*_executor_of_this_task(), rows)


@pytest.fixture(scope="module")
def spark(spark_cluster_session: Any) -> Any:
    """This module's SparkSession: on the standalone cluster, not the conftest's local[2]."""
    # Executors cannot import test modules: ship this module's functions by value.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return spark_cluster_session


def test_tasks_run_on_both_executors_in_other_jvms(spark: Any, spark_cluster: Any) -> None:
    sc = spark.sparkContext
    assert sc.master == spark_cluster.master_url.rstrip("/")
    executors = sc._jsc.sc().getExecutorMemoryStatus()
    hosts = {k.rsplit(":", 1)[0] for k in executors.keys().mkString(",").split(",")}
    assert executors.size() == 3 and hosts == {"127.0.0.1"}  # the driver and two executors
    # Eight tasks on two 1-core executors: the first offer gives one task to each.
    where = sc.parallelize(range(800), 8).mapPartitions(_where).collect()
    ids = {executor for executor, _, _ in where}
    jvms = {pid for _, pid, _ in where}
    assert ids == {"0", "1"}, where
    driver_jvm = sc._gateway.jvm.ProcessHandle.current().pid()
    assert len(jvms) == 2 and driver_jvm not in jvms, (where, driver_jvm)
    assert sum(rows for _, _, rows in where) == 800


def test_create_rdd_prefers_the_leader_host_and_reads_on_executors(spark: Any, broker: Any) -> None:
    topic = _topic("cluster-rdd")
    create_topic(broker.bootstrap, topic, 4)
    produced = produce(broker.bootstrap, topic, [(i % 4, b"k%d" % (i % 13), b"v%d" % i) for i in range(2000)])
    params = {"metadata.broker.list": broker.bootstrap}
    ends = get_latest_offsets(params, [topic])
    assert ends == {(topic, p): 500 for p in range(4)}
    ranges = [OffsetRange(topic, p, 0, ends[(topic, p)]) for p in range(4)]
    rdd = create_rdd(spark.sparkContext, params, ranges)
    assert offset_ranges(rdd) == tuple(ranges)
    # One partition per range, each preferring its leader's host: the host the executors run on.
    base = rdd._prev_jrdd.rdd()
    assert [str(base.preferredLocations(p)) for p in base.partitions()] == [f"List({broker.host})"] * 4
    by_partition = rdd.glom().collect()
    for r, got in zip(ranges, by_partition, strict=True):
        assert got == [(k, v) for p, _, k, v in sorted(produced) if p == r.partition], r
    where = rdd.mapPartitions(_where).collect()
    assert {e for e, _, _ in where} <= {"0", "1"} and {e for e, _, _ in where}, where
    assert [rows for _, _, rows in where] == [500] * 4


def test_source_batch_read_count_and_content(spark: Any, broker: Any) -> None:
    topic = _topic("cluster-source")
    create_topic(broker.bootstrap, topic, 4)
    produced = produce(broker.bootstrap, topic, [(i % 4, None, b"m%d" % i) for i in range(3000)])
    df = (spark.read.format("hmb").option("metadata.broker.list", broker.bootstrap)
          .option("topic", topic).load())
    assert df.count() == 3000
    got = sorted((r.partition, r.offset, r.value) for r in df.select("partition", "offset", "value").collect())
    assert got == sorted((p, o, v) for p, o, _, v in produced)


@pytest.mark.parametrize(("case", "on"), [(c, b) for _, c, b in EXECUTOR],
                         ids=[n for n, _, _ in EXECUTOR])
def test_executor_side_option(spark: Any, request: pytest.FixtureRequest, case: Any, on: str) -> None:
    broker = request.getfixturevalue(on)
    if on == "broker":  # the shared broker holds the BATCH cases' topic
        fill_option_topic(broker.bootstrap)
    case(spark, broker)


def test_sink_writes_every_row_from_executors(spark: Any, broker: Any) -> None:
    topic = _topic("cluster-sink")
    create_topic(broker.bootstrap, topic, 4)
    rows = [(f"k{i % 11}", f"v{i}") for i in range(5000)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(4)
    (df.write.mode("append").format("hmb").option("metadata.broker.list", broker.bootstrap)
        .option("topic", topic).option("batch.num.messages", "500").save())
    back = (spark.read.format("hmb").option("metadata.broker.list", broker.bootstrap)
            .option("topic", topic).load().selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v")
            .collect())
    counts = Counter((r.k, r.v) for r in back)
    missing = set(rows) - set(counts)
    duplicates = sum(counts.values()) - len(counts)
    assert not missing, f"{len(missing)} rows lost, e.g. {sorted(missing)[:3]}"
    assert set(counts) == set(rows)
    # At-least-once: duplicates only come from retried tasks; none failed here.
    assert duplicates == 0, f"{duplicates} duplicates"

