"""``hmb demo`` (what ``make demo`` runs) end to end, shortened, with its report checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_report() -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    r = subprocess.run([sys.executable, "-m", "hmbclient.cli", "demo", "--messages", "30000"],
                       capture_output=True, text=True, timeout=400, env=env)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    assert re.search(r"produced\s+30,000 messages", out), out
    assert re.search(r"consumed\s+30,000 unique", out), out
    members = dict(re.findall(r"^\s+(alpha|beta|gamma)\s.*?(\d+) partitions", out, re.M))
    assert set(members) == {"alpha", "beta", "gamma"}, out
    assert int(members["beta"]) + int(members["gamma"]) == 12, out
    assert "offsets committed to ZooKeeper: 30,000" in out, out
    assert "spark: 12 RDD partitions" in out and "(expected 1,485,000)" in out, out
    assert "result: OK" in out, out
    # nothing left behind: no java (ZooKeeper/Spark) child of ours still running
    ps = subprocess.run(["ps", "-eo", "ppid,pid,args"], capture_output=True, text=True).stdout
    assert not [line for line in ps.splitlines() if "hmb-demo-" in line], ps
