"""Every example runs (as a user would run it) against embedded servers, so none rots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, timeout: float = 240) -> str:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", PYTHONUNBUFFERED="1")
    env.pop("HMB_BROKERS", None)
    env.pop("HMB_ZOOKEEPER", None)
    r = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=EXAMPLES, capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"{name} failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    return r.stdout


def test_every_example_has_a_header_with_the_command() -> None:
    for path in sorted(EXAMPLES.glob("*.py")):
        if path.name.startswith("_"):
            continue
        head = path.read_text().split('"""')[1]
        assert "Run:" in head and path.name in head, f"{path.name}: header must say what it shows and how to run it"


def test_quickstart() -> None:
    out = run_example("quickstart.py")
    assert "produced at offsets [0, 1, 2]" in out
    assert re.search(r"^0 user-1 a$", out, re.M) or re.search(r"^0 b'user-1' b'a'$", out, re.M), out


def test_async_producer() -> None:
    out = run_example("async_producer.py")
    delivered = re.search(r"delivered per partition: (\{.*\}) errors: (\d+)", out)
    assert delivered, out
    counts = eval(delivered.group(1))  # a dict literal printed by the example
    assert sum(counts.values()) == 10_000 and int(delivered.group(2)) == 0


def test_simple_consumer() -> None:
    out = run_example("simple_consumer.py")
    assert "read 100 messages" in out, out


def test_consumer_group() -> None:
    out = run_example("consumer_group.py")
    assert "total: 1000" in out, out
    assert "whitelist consumed: {'orders': 1000, 'orders.eu': 1000}" in out, out


@pytest.mark.slow
def test_spark_batch() -> None:
    out = run_example("spark_batch.py")
    assert "partitions: 4" in out and "rows via the data source: 4000" in out, out
    sums = re.search(r"sum per store: (\{.*\})", out)
    assert sums and sum(eval(sums.group(1)).values()) == sum(i % 100 for i in range(4000)), out


@pytest.mark.slow
def test_spark_streaming() -> None:
    out = run_example("spark_streaming.py")
    assert "rows written: 1500 distinct values: 1500" in out, out
