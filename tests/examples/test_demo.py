"""``hmb demo`` (what ``make demo`` runs), shortened, with its story checked in its report.

The story: gamma joins the group late and consumes a share; alpha leaves and beta or gamma
consume from every partition it owned; every message is delivered; Spark counts them all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from hmbclient.demo import DemoReport, MemberReport, _check_group, _Deliveries


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_demo_tells_its_story() -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    r = subprocess.run([sys.executable, "-m", "hmbclient.cli", "demo", "--messages", "30000", "--seconds", "6"],
                       capture_output=True, text=True, timeout=90, env=env)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    assert "result: OK" in out, out
    assert re.search(r"produced\s+30,000 messages acknowledged", out), out
    assert re.search(r"consumed\s+30,000 distinct messages", out), out  # every message delivered

    rows = {m["name"]: m for m in re.finditer(
        r"^\s+(?P<name>alpha|beta|gamma)\s.*?\s(?P<messages>[\d,]+)\s+(?P<start>\S+)\s+(?P<joined>\S+)\s+(?P<left>\S+)$",
        out, re.M)}
    assert set(rows) == {"alpha", "beta", "gamma"}, out
    assert _number(rows["gamma"]["messages"]) > 0, out  # the late joiner consumed a share
    assert sum(_number(m["messages"]) for m in rows.values()) >= 30_000, out
    assert int(rows["alpha"]["start"]) + int(rows["beta"]["start"]) == 12, out
    assert sum(int(rows[n]["joined"]) for n in ("alpha", "beta", "gamma")) == 12, out
    assert int(rows["gamma"]["joined"]) > 0, out
    assert rows["alpha"]["left"] == "-" and int(rows["beta"]["left"]) + int(rows["gamma"]["left"]) == 12, out

    moved = re.search(r"alpha left owning (\d+) partitions; (\d+) of them were consumed from afterwards", out)
    assert moved and int(moved[1]) > 0 and moved[1] == moved[2], out  # alpha's partitions moved

    assert "offsets committed to ZooKeeper: 30,000" in out, out
    assert "spark: 12 RDD partitions" in out and "30,000 messages, sum of amounts 1,485,000 (expected 1,485,000)" in out, out
    # nothing left behind: no java (ZooKeeper/Spark) child of ours still running
    ps = subprocess.run(["ps", "-eo", "ppid,pid,args"], capture_output=True, text=True).stdout
    assert not [line for line in ps.splitlines() if "hmb-demo-" in line], ps


def test_a_story_that_did_not_happen_is_a_named_problem() -> None:
    """The group checks fail, naming the step, when gamma consumed nothing and alpha's partitions stayed."""
    report = DemoReport(topic="t", partitions=4, alpha_left_owning=[0, 1])
    report.members = {"alpha": MemberReport("left"), "beta": MemberReport("stayed"), "gamma": MemberReport("joined")}
    deliveries = _Deliveries()
    deliveries.record("alpha", 0, b"0:0")
    deliveries.alpha_left()
    deliveries.record("beta", 1, b"1:1")  # beta took partition 1; nobody consumed from partition 0
    _check_group(report, deliveries)
    assert not report.ok
    assert "group: gamma joined but consumed no message" in report.problems
    assert "group: alpha's partitions [0] were not consumed by beta or gamma after it left" in report.problems
    assert report.alpha_partitions_taken_by == {"beta": [1]}
    assert "result: FAILED" in report.render()
