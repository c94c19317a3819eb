"""``hmb demo --spark-master URL``: the demo's Spark step runs as an application of a real Spark
standalone cluster (hmbclient's ``spark_cluster`` fixture: a master and two 1-core workers on
127.0.0.1), not in local mode; its count and sum are still checked by the demo itself."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest


@pytest.mark.slow
def test_demo_spark_step_on_a_standalone_master(spark_cluster: Any) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    r = subprocess.run(
        [sys.executable, "-m", "hmbclient.cli", "demo", "--messages", "6000", "--seconds", "3",
         "--spark-master", spark_cluster.master_url,
         "--spark-conf", f"spark.executor.memory={spark_cluster.executor_memory}"],
        capture_output=True, text=True, timeout=240, env=env,
    )
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    assert "result: OK" in out, out
    assert f"RDD partitions (one per offset range) on {spark_cluster.master_url}" in out, out
    assert "6,000 messages, sum of amounts 297,000 (expected 297,000)" in out, out
    # The master ran it as an application, on executors of its workers.
    master_log = spark_cluster.log_paths()[0].read_text()
    assert "Registered app hmb-demo" in master_log and "Launching executor" in master_log, master_log[-3000:]
