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


def test_exactly_once() -> None:
    out = run_example("exactly_once.py")
    assert "incarnation 1: crashed after 4 commits, a transaction open" in out, out
    assert "read_committed output: 600 records, 600 distinct" in out, out
    assert "every input record exactly once: True" in out, out
    # the crashed transaction's records are really in the log: read_committed is what hides them
    raw = re.search(r"read_uncommitted output: (\d+) records", out)
    assert raw and int(raw.group(1)) == 650, out


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


def _read_topic(broker: object, topic: str) -> list[bytes]:
    """Every value of ``topic``, partition by partition, read with hmbclient's SimpleConsumer."""
    from hmbclient import FetchRequest, SimpleConsumer
    from spark_integration import get_latest_offsets

    ends = get_latest_offsets({"metadata.broker.list": broker.bootstrap}, [topic])  # type: ignore[attr-defined]
    values: list[bytes] = []
    consumer = SimpleConsumer(broker.host, broker.port)  # type: ignore[attr-defined]
    try:
        for (_, partition), end in sorted(ends.items()):
            offset = 0
            while offset < end:
                batch = list(consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20)))
                assert batch, f"{topic}-{partition}: nothing at {offset} below {end}"
                values += [mo.message.value for mo in batch if mo.offset < end]
                offset = batch[-1].offset + 1
    finally:
        consumer.close()
    return values


@pytest.mark.slow
def test_spark_pipeline(tmp_path: Path) -> None:
    """Windowed counts per user, stopped and restarted from the checkpoint: the output topic,
    read here independently, accounts for every input event. The sink is at-least-once, so the
    output may hold a window's count more than once; the largest count written per
    (user, window) is its final one whatever the duplicates, and those summed per user must
    equal the events per user read back from the input topic."""
    import json
    from collections import Counter

    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, log_dir=str(tmp_path / "broker"), num_partitions=3) as broker:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
                   PYTHONUNBUFFERED="1", HMB_BROKERS=broker.bootstrap)
        r = subprocess.run([sys.executable, str(EXAMPLES / "spark_pipeline.py")], cwd=EXAMPLES,
                           capture_output=True, text=True, timeout=400, env=env)
        assert r.returncode == 0, f"spark_pipeline.py failed:\n{r.stdout}\n{r.stderr[-4000:]}"
        assert "query stopped after 1500 events" in r.stdout and "every event counted: True" in r.stdout, r.stdout
        inputs = Counter(json.loads(v)["user"] for v in _read_topic(broker, "user-events"))
        latest: dict[tuple[str, str], int] = {}
        for v in _read_topic(broker, "user-counts"):
            out = json.loads(v)
            key = (out["user"], out["window_start"])
            latest[key] = max(latest.get(key, 0), out["count"])
    counted: Counter[str] = Counter()
    for (user, _), n in latest.items():
        counted[user] += n
    assert sum(inputs.values()) == 2000 and len(inputs) == 7
    assert counted == inputs
