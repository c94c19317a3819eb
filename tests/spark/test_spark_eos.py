"""The ``hmb`` sink's exactly-once mode (``exactlyOnce=true``, spark_integration/eos.py) against
the embedded broker, with Spark drivers of their own (tests/spark/eos_driver.py, run as
subprocesses: a ``local[2,3]`` master for real task retries, and a driver the test kills with
SIGKILL). Each scenario runs in both modes so the test tells them apart: the output read
``read_committed`` holds every input row exactly once with ``exactlyOnce``, and duplicates
without it.

* batch write (8000 rows, 4 tasks): the task of partition 2 fails once (a UDF raises) after its
  first rows reached the broker; Spark retries it. The failed attempt's writer saw its input end
  early and committed a prefix of the partition; the retry sends only the rest (eos E2/E3).
* streaming ``hmb`` -> UDF -> ``hmb`` (trigger availableNow, 4 input partitions, ``local[8,4]``): the driver is
  killed with SIGKILL twice while partition 3's task of a micro-batch is held in the UDF (the
  other three tasks of the batch have committed; the held one has sent its first rows: its
  transaction is open), and restarted from its checkpoint each time; the replayed batch's
  finished partitions write nothing (eos E2), the held one's open transaction is aborted by the
  next attempt's init_transactions (eos E1).
* the same batch write on the standalone cluster, the failure a SIGKILL of the executor running
  partition 2's task (its transaction open).
* the streaming scenario on the shared standalone cluster, bounded (one micro-batch, 2 input
  partitions): the executor holding the exactly-once query's held task is killed with SIGKILL,
  its transaction open, then the driver; the restart fences the lost attempt.
* the streaming scenario on a standalone cluster of its own, two micro-batches, the held tasks'
  executors killed (and the tasks held again on new executors) before the first driver kill
  (``chaos`` marker: ``make chaos``, about three minutes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topic, produce
from waiting import wait_until

from spark_integration import OffsetRange
from spark_integration.eos import (
    ALL_ROWS,
    identity,
    marker_metadata,
    plan_for,
    rows_done,
    transactional_id,
)
from spark_integration.offsets import LATEST
from spark_integration.options import parse_options
from spark_integration.planner import PartitionPlanner
from spark_integration.reader import read_range
from spark_integration.sink import parse_sink_options

pytestmark = pytest.mark.timeout(300)
DRIVER = Path(__file__).with_name("eos_driver.py")
ROOT = Path(__file__).resolve().parents[2]


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _values(broker: Any, topic: str, isolation: str = "read_committed") -> Counter[str]:
    """Every value of ``topic`` (up to a ':') as a reader with ``isolation`` sees it (the
    source's reader)."""
    settings = parse_options(
        {"metadata.broker.list": broker.bootstrap, "topic": topic, "isolation.level": isolation}, streaming=False
    ).read_settings()
    tps = [(topic, p) for p in range(4)]
    with PartitionPlanner(settings) as planner:
        ends = planner.offsets(tps, LATEST)
    return Counter(r[3].decode().split(":")[0] for tp in tps for r in read_range(settings, OffsetRange(*tp, 0, ends[tp]), None))


def _driver(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, str(DRIVER), *args], env=env, cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver; its JVM (a child, reading the driver's pipe) exits on EOF: wait for it."""
    jvms = _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    try:
        wait_until(lambda: not any(_alive(p) for p in jvms), 60, "the killed driver's JVM exits")
    finally:
        for p in jvms:  # started by our driver: never leave one running
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _finish(proc: subprocess.Popen[bytes], timeout: float = 240) -> None:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill9(proc)
        raise
    if proc.returncode != 0:
        text = out.decode(errors="replace")
        # The Python error (a worker's or the driver's) first, then the tail (mostly Java's stack).
        cause = text[text.find("Traceback (most recent call last)"):][:4000] if "Traceback (most recent call last)" in text else ""
        raise AssertionError(f"driver exited {proc.returncode}\n{cause}\n...\n{text[-3000:]}")


# --- pure parts of the design ---------------------------------------------------------------


def test_identity_and_marker_rules() -> None:
    plan = plan_for(None, "out", 60_000)
    assert identity(plan, None) == (f"hmb-sink-{plan.write_id}", plan.write_id)  # batch
    assert identity(plan, "q1") == ("hmb-sink-q1", "q1")  # streaming: the checkpointed query id
    assert identity(plan_for("mine", "out", 60_000), "q1") == ("mine", "q1")
    assert transactional_id("mine", 3) == "mine-3"
    assert rows_done(None, "q1", 0) == 0
    assert rows_done((5, marker_metadata("q1", 70)), "q1", 4) == 70, "batch 4: 70 rows committed"
    assert rows_done((6, marker_metadata("q1", 70)), "q1", 4) == ALL_ROWS, "a later batch"
    assert rows_done((4, marker_metadata("q1", 70)), "q1", 4) == 0, "batch 4 not committed yet"
    assert rows_done((5, marker_metadata("other", 70)), "q1", 4) == 0, "another query's marker"
    assert rows_done((5, "garbage"), "q1", 4) == 0


def test_exactly_once_options() -> None:
    base = {"metadata.broker.list": "127.0.0.1:9092", "topic": "t"}
    opts, cfg = parse_sink_options({**base, "exactlyonce": "true", "transactionTimeoutMs": "5000"})
    assert opts.exactly_once and cfg.transaction_timeout_ms == 5000 and cfg.transactional_id is None
    from hmbclient.errors import ConfigError

    with pytest.raises(ConfigError, match="needs the 'topic' option"):
        parse_sink_options({"metadata.broker.list": "127.0.0.1:9092", "exactlyOnce": "true"})
    with pytest.raises(ConfigError, match="exactlyOnce=true"):
        parse_sink_options({**base, "transactional.id": "x"})
    with pytest.raises(ConfigError, match="are for exactlyOnce=true"):
        parse_sink_options({**base, "transactionalIdPrefix": "p"})


# --- Spark ----------------------------------------------------------------------------------


def test_batch_write_with_a_retried_task(broker: Any, tmp_path: Path) -> None:
    want = {f"r{i}" for i in range(8000)}
    specs = {}
    for mode in ("eos", "alo"):
        topic = _topic(f"eos-batch-{mode}")
        create_topic(broker.bootstrap, topic)
        marker = tmp_path / f"fail-{mode}"
        marker.touch()
        specs[mode] = (topic, marker)
    proc = _driver("batch", broker.bootstrap, *("|".join((m, t, str(f))) for m, (t, f) in specs.items()))
    _finish(proc)
    got = {}
    for mode, (topic, marker) in specs.items():
        assert not marker.exists(), "the failure was injected"
        got[mode] = _values(broker, topic)
        assert set(got[mode]) == want, "every row arrived"
    assert all(n == 1 for n in got["eos"].values()), "exactly once: no duplicate visible to read_committed"
    dups = sum(got["alo"].values()) - len(want)
    assert got["alo"]["r4000"] >= 2 and dups >= 1, "at-least-once: the retried task's rows are there twice"


def test_batch_write_on_the_standalone_cluster_with_an_executor_killed(broker: Any, spark_cluster: Any, tmp_path: Path) -> None:
    """The batch scenario on a real standalone cluster, the failure being a kill -9 of the
    executor running partition 2 after its first rows reached the broker (its transaction left
    open): Spark runs the task again on a new executor, whose init_transactions fences the
    lost attempt."""
    want = {f"r{i}" for i in range(8000)}
    specs = {}
    for mode in ("eos", "alo"):
        topic = _topic(f"eos-exec-{mode}")
        create_topic(broker.bootstrap, topic)
        marker = tmp_path / f"kill-{mode}"
        marker.touch()
        specs[mode] = (topic, marker)
    before = _executor_pids(spark_cluster)
    proc = _driver("batch-cluster", spark_cluster.master_url, broker.bootstrap,
                   *("|".join((m, t, str(f))) for m, (t, f) in specs.items()))
    _finish(proc, timeout=280)
    got = {}
    for mode, (topic, marker) in specs.items():
        killed = int((tmp_path / f"kill-{mode}.killed").read_text())  # the executor the task killed
        assert not marker.exists() and not _alive(killed), "the executor was killed"
        got[mode] = _values(broker, topic)
        assert set(got[mode]) == want, "every row arrived"
    wait_until(lambda: not _executor_pids(spark_cluster) - before, 60, "the application's executors gone with its driver")
    assert all(n == 1 for n in got["eos"].values()), "exactly once: no duplicate visible to read_committed"
    assert got["alo"]["r4000"] >= 2, "at-least-once: the lost executor's rows are there twice"


def _executor_pids(cluster: Any) -> set[int]:
    """The executor JVMs the workers of ``cluster`` run (their children; not another test
    process's cluster's)."""
    out = set()
    for pid in (c for w in cluster.worker_pids if w is not None for c in _children(w)):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    out.add(pid)
        except OSError:
            pass
    return out


def test_streaming_killed_twice_and_restarted(broker: Any, tmp_path: Path) -> None:
    _streaming_scenario(broker, tmp_path, ("stream",))


def test_streaming_on_the_standalone_cluster_executor_then_driver_killed(broker: Any, spark_cluster: Any, tmp_path: Path) -> None:
    """The streaming scenario, bounded, on the shared standalone cluster (2 workers of 1 core):
    one micro-batch of 2 input partitions per query; once both queries hold partition 1 (the
    other written), the executor holding the exactly-once query's task is killed with SIGKILL,
    its transaction open with rows in it, then the driver; the restarted query's attempt of
    the partition fences the lost one (eos E1)."""
    before = _executor_pids(spark_cluster)
    _streaming_scenario(broker, tmp_path, ("stream-cluster", spark_cluster.master_url), kill_executors=("eos",),
                        batches=1, partitions=2, rehold=False)
    wait_until(lambda: not _executor_pids(spark_cluster) - before, 60, "the application's executors gone with its driver")


@pytest.mark.chaos
def test_streaming_on_the_standalone_cluster_executor_and_driver_killed(broker: Any, tmp_path: Path) -> None:
    """The streaming scenario on a standalone cluster of its own (2 workers of 4 cores): in the
    first micro-batch the executor running each query's held task is killed with SIGKILL
    (Spark runs the task again on a new executor, which holds it again), then the driver; in
    the second, the driver."""
    from hmbclient.testing.spark import LocalSparkCluster

    with LocalSparkCluster(workers=2, cores_per_worker=4, worker_memory="1g", executor_memory="512m") as cluster:
        os.environ["EOS_WORKER_CORES"] = "4"
        try:
            _streaming_scenario(broker, tmp_path, ("stream-cluster", cluster.master_url), kill_executors=("eos", "alo"))
        finally:
            os.environ.pop("EOS_WORKER_CORES", None)


def _kill_held_executors(reached: list[Path], rehold: bool) -> None:
    """SIGKILL the executors named in the ``reached`` files (each a held task's executor); with
    ``rehold``, wait until each task runs again elsewhere and is held again (the file rewritten)."""
    victims = {int(r.read_text()) for r in reached}
    assert victims, "the held tasks name their executors"
    for r in reached:
        r.unlink()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(_alive(p) for p in victims), 30, "the executors are gone")
    for r in reached if rehold else ():
        wait_until(lambda r=r: r.exists() and r.read_text() and int(r.read_text()) not in victims, 180,
                   f"{r.name}: the task held again on a new executor")


def _streaming_scenario(broker: Any, tmp_path: Path, driver: tuple[str, ...], kill_executors: tuple[str, ...] = (),
                        batches: int = 2, partitions: int = 4, rehold: bool = True) -> None:
    """Two queries, ``exactlyOnce`` and at-least-once, each ``hmb`` (``partitions`` input
    partitions) -> UDF -> ``hmb``; ``batches`` micro-batches of 50 rows per input partition,
    each interrupted by a kill -9 of the driver while the task of the last input partition is
    held in the UDF (its rows before the gate sent: eos has its transaction open) and the
    batch's other partitions are written. The held task is the last one so that it never
    keeps the others from a core. In the first batch the executors of the held tasks of the
    ``kill_executors`` modes are killed before the driver (with ``rehold``: once each task is
    held again on a new executor). The driver is restarted from the checkpoint after each kill
    and finally runs to the end. The output read ``read_committed`` holds every input row
    exactly once with ``exactlyOnce``; the at-least-once sink holds the rewritten partitions
    twice."""
    modes = ("eos", "alo")
    topics = {m: (_topic(f"eos-in-{m}"), _topic(f"eos-out-{m}")) for m in modes}
    for src, dst in topics.values():
        create_topic(broker.bootstrap, src, partitions)
        create_topic(broker.bootstrap, dst)
    held, parts = partitions - 1, range(partitions)

    def feed(phase: str) -> None:
        for src, _ in topics.values():
            produce(broker.bootstrap, src, [(p, f"k{p}-{i}".encode(), f"{phase}-{p}-{i}".encode()) for p in parts for i in range(50)])

    def run(gate: str | None) -> subprocess.Popen[bytes]:
        specs = []
        for m in modes:
            src, dst = topics[m]
            marker, reached = tmp_path / f"gate-{m}-{gate}", tmp_path / f"reached-{m}-{gate}"
            if gate is not None:
                marker.touch()
            specs.append("|".join((m, src, dst, str(tmp_path / f"ckpt-{m}"), gate or "-", str(marker), str(reached))))
        started.append(_driver(*driver, broker.bootstrap, *specs))
        return started[-1]

    def rows(phases: str, parts: Any) -> set[str]:
        return {f"{ph}-{p}-{i}".upper() for ph in phases for p in parts for i in range(50)}

    def transaction_open(phase: str) -> bool:
        """Rows the held eos task sent before its gate are in the output, none committed."""
        sent = {f"{phase}-{held}-{i}".upper() for i in range(25)}
        return bool(sent & set(_values(broker, topics["eos"][1], "read_uncommitted"))) and \
            not sent & set(_values(broker, topics["eos"][1]))

    def kill_at(proc: subprocess.Popen[bytes], phase: str, written: set[str], executors: bool) -> None:
        """Wait until ``written`` (the batch's other partitions) is visible to read_committed
        while partition ``held`` waits on its first row, let it go on to the gate, wait until
        both queries hold it there (eos's transaction open with rows), then kill -9 the driver
        (first the held tasks' executors, when ``executors``)."""
        gate = f"{phase}-{held}-25"
        for m in modes:
            wait_until(lambda m=m: written <= set(_values(broker, topics[m][1])) or proc.poll() is not None, 120,
                       f"{m}: the batch's other partitions written before the kill")
            assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")[-3000:]
            (tmp_path / f"gate-{m}-{gate}.go").touch()  # the held partition goes on to the gate
        for m in modes:
            wait_until(lambda m=m: (tmp_path / f"reached-{m}-{gate}").exists() or proc.poll() is not None,
                       60, f"{m} query reaches {gate}")
            assert proc.poll() is None, proc.communicate()[0].decode(errors="replace")[-3000:]
        wait_until(lambda: transaction_open(phase), 30, "the held eos task's transaction open, with rows")
        if executors and kill_executors:
            _kill_held_executors([tmp_path / f"reached-{m}-{gate}" for m in kill_executors], rehold)
        _kill9(proc)
        for m in modes:
            (tmp_path / f"gate-{m}-{gate}").unlink()

    started: list[subprocess.Popen[bytes]] = []
    phases = "ab"[:batches]
    try:
        done: set[str] = set()
        for n, phase in enumerate(phases):
            feed(phase)
            # the batch (and the previous one, replayed): the other partitions written, `held` held
            kill_at(run(f"{phase}-{held}-25"), phase, done | rows(phase, parts[:held]), executors=n == 0)
            done |= rows(phase, parts)
        _finish(run(None))  # the last batch replayed; done
    finally:
        for proc in started:  # a failed step leaves no driver behind
            if proc.poll() is None:
                _kill9(proc)

    want = rows(phases, parts)
    eos, alo = _values(broker, topics["eos"][1]), _values(broker, topics["alo"][1])
    assert set(eos) == want and set(alo) == want, "every input row is in the output"
    assert all(n == 1 for n in eos.values()), f"exactly once: {sum(eos.values()) - len(want)} duplicates"
    # at-least-once: each replayed batch rewrote the partitions written before its kill
    assert sum(alo.values()) - len(want) >= 50 * held * batches, "at-least-once duplicates the replayed batches' rows"
