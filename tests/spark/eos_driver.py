"""A Spark driver run as its own process by test_spark_eos.py (not a test module), so the test
can give it a master of its own (``local[N,F]``: real task retries) and kill it with SIGKILL.

    python eos_driver.py batch  BOOTSTRAP MODE|TOPIC|FAIL_MARKER [...]
    python eos_driver.py batch-cluster MASTER BOOTSTRAP MODE|TOPIC|FAIL_MARKER [...]
    python eos_driver.py stream BOOTSTRAP MODE|SRC|DST|CKPT|GATE_VALUE|GATE_MARKER|REACHED [...]
    python eos_driver.py stream-cluster MASTER BOOTSTRAP MODE|SRC|DST|CKPT|GATE_VALUE|GATE_MARKER|REACHED [...]

MODE is ``eos`` (exactlyOnce=true) or ``alo`` (the default sink).

* batch: writes ids 0..7999 (4 partitions of 2000) as values ``r<id>:<padding>``; the UDF fails
  the task of partition 2 once (when FAIL_MARKER exists: removes it, waits until ``r4000:``,
  the partition's first row, is in the topic -- the attempt has sent rows -- then raises on the
  partition's last row). Spark retries the task. The padding makes the rows before the last
  one fill the buffers between the UDF, the JVM and the sink, so they reach the sink first.
* batch-cluster: the same writes on a standalone cluster (MASTER ``spark://...``), but instead
  of raising, the UDF kills its own executor with SIGKILL (the JVM that forked the Python
  worker): the executor is lost with the task's transaction open, and Spark runs the task again
  on an executor the workers start anew.
* stream: one query per argument, ``hmb`` -> upper(value) through a UDF -> ``hmb``, trigger
  availableNow, from the checkpoint. While GATE_MARKER exists the UDF holds the partition of
  GATE_VALUE (``<phase>-<partition>-<row>``) twice: on its first row until GATE_MARKER.go
  exists (the test's "the batch's other partitions are committed": the exactly-once writer
  opens its transaction with its first row sent, and an open transaction hides the commits
  after it in the same partitions from read_committed readers), then on GATE_VALUE, after
  creating REACHED (which names the executor JVM running the task on a cluster), so the test
  can kill this process -- or that executor -- with the batch in flight and the rows before
  GATE_VALUE sent. Output values are padded (after a ':') so those rows fill the buffers
  between the UDF and the sink and reach the broker.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


def _session(master: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from hmbclient.testing.spark import DAEMON_JAVA_OPTIONS
    from spark_integration import register

    builder = SparkSession.builder
    if master.startswith("spark://"):  # the test's LocalSparkCluster: 2 workers of EOS_WORKER_CORES, 512 MiB
        cores = int(os.environ.get("EOS_WORKER_CORES", "1"))
        builder = (builder.config("spark.executor.memory", "512m").config("spark.executor.cores", str(cores))
                   .config("spark.cores.max", str(2 * cores)).config("spark.task.maxFailures", "4"))
    session = (
        builder.master(master)
        .appName("hmb-eos-driver")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.ui.showConsoleProgress", "false")
        # small batches and buffers: rows reach the sink before the UDF has seen the partition's
        # last one (a Python worker's output sits in a buffer of spark.buffer.size until full)
        .config("spark.sql.execution.python.udf.maxRecordsPerBatch", "10")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10")
        .config("spark.buffer.size", "4096")
        # short-lived JVMs: the test daemons' options (less JIT and GC work on a loaded machine)
        .config("spark.driver.extraJavaOptions", DAEMON_JAVA_OPTIONS)
        .config("spark.executor.extraJavaOptions", DAEMON_JAVA_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def _in_topic(bootstrap: str, topic: str, value: bytes) -> bool:
    """Whether a value starting with ``value`` is in ``topic`` (read_uncommitted, partitions 0-3)."""
    from hmbclient import FetchRequest, SimpleConsumer

    host, port = bootstrap.rsplit(":", 1)
    c = SimpleConsumer(host, int(port))
    try:
        return any(mo.message.value.startswith(value) for p in range(4) for mo in c.fetch(FetchRequest(topic, p, 0, 1 << 20)))
    finally:
        c.close()


def _sink_options(mode: str, bootstrap: str, topic: str) -> dict[str, str]:
    opts = {"metadata.broker.list": bootstrap, "topic": topic, "queue.buffering.max.ms": "5"}
    if mode == "eos":
        opts["exactlyOnce"] = "true"
    return opts


def _my_executor() -> int | None:
    """The pid of the executor JVM this Python worker runs under (None in local mode)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return None


def _kill_my_executor(record: str) -> None:
    """SIGKILL the executor JVM this Python worker runs under (its nearest Java ancestor),
    writing its pid to ``record`` first."""
    import signal

    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"CoarseGrainedExecutorBackend" in f.read():
                with open(record, "w") as out:
                    out.write(str(pid))
                os.kill(pid, signal.SIGKILL)
                time.sleep(60)  # dies with its executor
                return
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("no executor JVM above this Python worker")


def batch(bootstrap: str, specs: list[str], master: str = "local[2,3]") -> None:
    from pyspark.sql.functions import col, udf

    spark = _session(master)  # local: 3 attempts per task
    for spec in specs:  # one write after the other, in this one driver
        mode, topic, fail_marker = spec.split("|")

        def fail_once(i: int, topic: str = topic, fail_marker: str = fail_marker) -> str:
            if i == 5999 and os.path.exists(fail_marker):
                os.remove(fail_marker)
                start = time.monotonic()
                while not (seen := _in_topic(bootstrap, topic, b"r4000:")) and time.monotonic() < start + 60:
                    time.sleep(0.05)
                waited = time.monotonic() - start
                if master.startswith("spark://"):
                    _kill_my_executor(fail_marker + ".killed")
                raise RuntimeError(f"injected failure after sending (first attempt only; sent rows seen: {seen} after {waited:.1f} s)")
            return f"r{i}:" + "x" * 200

        df = spark.range(0, 8000, 1, 4).select(udf(fail_once, "string")(col("id")).alias("value"))
        df.write.mode("append").format("hmb").options(**_sink_options(mode, bootstrap, topic)).save()
    spark.stop()


def _hold_while(cond: Any, limit_s: float = 150) -> None:
    """Block the task while ``cond()``: a file the test creates or removes (at most ``limit_s``;
    the held Python worker dies with its executor or driver JVM anyway)."""
    deadline = time.monotonic() + limit_s
    while cond() and time.monotonic() < deadline:
        time.sleep(0.05)


def stream(bootstrap: str, specs: list[str], master: str = "local[8,4]") -> None:
    from pyspark.sql.functions import col, udf

    # 8 slots: a blocked task per query must not starve the others. 4 attempts per task, a
    # cluster's default (spark.task.maxFailures; local mode's is 1): a task attempt lost to a
    # Spark-side failure is run again, as on a cluster, instead of failing the query -- seen
    # once in ~20 runs: a task that failed to deserialize (OptionalDataException in
    # HashMap.readObject, see spark_integration.datasource._settle_environment).
    spark = _session(master)
    queries = []
    for spec in specs:
        mode, src, dst, ckpt, gate_value, gate_marker, reached = spec.split("|")

        first = gate_value.rsplit("-", 1)[0] + "-0"

        def gate(value: bytes, gate_value: str = gate_value, gate_marker: str = gate_marker, reached: str = reached,
                 first: str = first) -> str:
            text = value.decode()
            if text == first and os.path.exists(gate_marker):
                _hold_while(lambda: not os.path.exists(gate_marker + ".go"))
            if text == gate_value and os.path.exists(gate_marker):
                executor = _my_executor()
                with open(reached + ".tmp", "w") as out:
                    out.write("" if executor is None else str(executor))
                os.replace(reached + ".tmp", reached)
                _hold_while(lambda: os.path.exists(gate_marker))  # the test kills the driver meanwhile
                raise RuntimeError("gate: the driver should have been killed")
            return text.upper() + ":" + "x" * 1000  # padding: the rows before the gate fill the buffers

        df = (
            spark.readStream.format("hmb").option("metadata.broker.list", bootstrap).option("topic", src)
            .option("startingOffsets", "earliest").load()
            .select(col("key"), udf(gate, "string")(col("value")).alias("value"))
        )
        q = (df.writeStream.format("hmb").options(**_sink_options(mode, bootstrap, dst))
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        queries.append(q)
    for q in queries:
        q.awaitTermination()
        if q.exception() is not None:
            raise SystemExit(f"query failed: {q.exception()}")
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1] == "batch-cluster":
        batch(sys.argv[3], sys.argv[4:], master=sys.argv[2])
    elif sys.argv[1] == "stream-cluster":
        stream(sys.argv[3], sys.argv[4:], master=sys.argv[2])
    else:
        (batch if sys.argv[1] == "batch" else stream)(sys.argv[2], sys.argv[3:])
