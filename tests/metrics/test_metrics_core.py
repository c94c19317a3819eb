"""The metrics core (hmbclient.metrics) against Kafka's semantics, on an injected clock: sampled
windows, rate floors, NaN when empty, cumulative totals, thread safety, Prometheus text."""

from __future__ import annotations

import math
import threading

import pytest

from hmbclient.metrics import (
    Avg,
    Count,
    Max,
    Metrics,
    Min,
    Rate,
    Total,
    WindowedCount,
    prometheus_text,
)


class _Clock:
    def __init__(self) -> None:
        self.t = 1_000_000

    def __call__(self) -> int:
        return self.t


def test_rate_uses_kafkas_window_floor_and_forgets_old_samples() -> None:
    clock = _Clock()
    m = Metrics(clock, num_samples=2, sample_window_ms=1_000)
    s = m.rate("sent", "g", "record-send")
    s.record(10)
    # one young sample: the elapsed time is floored at (2-1) windows = 1 s, not ~0
    assert m.snapshot()["g"]["record-send-rate"] == pytest.approx(10.0)
    clock.t += 1_500
    s.record(20)
    # live samples started at t0 and t0+1.5 s: 30 records over 1.5 s
    assert m.snapshot()["g"]["record-send-rate"] == pytest.approx(20.0)
    clock.t += 1_000  # the first sample (t0) is now 2.5 s old, past 2 windows: gone
    assert m.snapshot()["g"]["record-send-rate"] == pytest.approx(20 / 1.0)
    clock.t += 10_000
    snap = m.snapshot()["g"]
    assert snap["record-send-rate"] == 0.0 and snap["record-send-total"] == 30.0


def test_avg_max_min_are_nan_with_nothing_live_and_windowed_otherwise() -> None:
    clock = _Clock()
    m = Metrics(clock, num_samples=2, sample_window_ms=100)
    m.avg_max("lat", "g", "request-latency")
    m.sensor("lat").add("g", "request-latency-min", Min(2, 100)).add("g", "n", WindowedCount(2, 100))
    snap = m.snapshot()["g"]
    assert math.isnan(snap["request-latency-avg"]) and math.isnan(snap["request-latency-max"])
    assert math.isnan(snap["request-latency-min"]) and snap["n"] == 0.0
    for v in (5, 1, 9):
        m.sensor("lat").record(v)
    clock.t += 150  # a second sample
    m.sensor("lat").record(3)
    snap = m.snapshot()["g"]
    assert snap["request-latency-avg"] == pytest.approx(18 / 4)
    assert snap["request-latency-max"] == 9 and snap["request-latency-min"] == 1 and snap["n"] == 4
    clock.t += 100  # the first sample expires (older than 2 windows)
    snap = m.snapshot()["g"]
    assert snap["request-latency-max"] == 3 and snap["request-latency-avg"] == 3


def test_count_rate_counts_events_not_values() -> None:
    clock = _Clock()
    m = Metrics(clock, num_samples=2, sample_window_ms=1_000)
    m.sensor("r").add("g", "request-rate", Rate(2, 1_000, count=True)).add("g", "request-total", Count()).add("g", "bytes", Total())
    for v in (100, 200, 300):
        m.sensor("r").record(v)
    snap = m.snapshot()["g"]
    assert snap["request-rate"] == pytest.approx(3.0) and snap["request-total"] == 3 and snap["bytes"] == 600


def test_gauges_duplicates_and_a_failing_gauge() -> None:
    m = Metrics(_Clock())
    box = {"v": 4}
    m.gauge("g", "queue", lambda: box["v"])
    m.gauge("g", "broken", lambda: 1 / 0)
    box["v"] = 7
    snap = m.snapshot()["g"]
    assert snap["queue"] == 7 and math.isnan(snap["broken"])
    with pytest.raises(ValueError, match="already registered"):
        m.gauge("g", "queue", lambda: 0)
    with pytest.raises(ValueError, match="already registered"):
        m.sensor("x").add("g", "queue", Avg())
    with pytest.raises(ValueError):
        Max(0, 10)


def test_records_from_many_threads_are_all_counted() -> None:
    m = Metrics()
    s = m.rate("sent", "g", "record-send")

    def work() -> None:
        for _ in range(5_000):
            s.record(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.snapshot()["g"]["record-send-total"] == 20_000


def test_prometheus_text_groups_families_and_escapes_labels() -> None:
    a = Metrics(_Clock(), tags={"client-id": 'p"1'})
    b = Metrics(_Clock(), tags={"client-id": "p2"})
    for reg in (a, b):
        reg.gauge("producer-metrics", "record-queue-size", lambda: 3, "messages waiting")
        reg.gauge("other", "x", lambda: math.nan)
    text = prometheus_text([a, b])
    lines = text.splitlines()
    fam = "hmb_producer_metrics_record_queue_size"
    i = lines.index(f"# HELP {fam} messages waiting")
    assert lines[i + 1] == f"# TYPE {fam} gauge"
    assert lines[i + 2] == f'{fam}{{client_id="p\\"1"}} 3.0'
    assert lines[i + 3] == f'{fam}{{client_id="p2"}} 3.0'
    assert 'hmb_other_x{client_id="p2"} NaN' in lines
    assert text.count(f"# TYPE {fam}") == 1 and text.endswith("\n")


def test_tagged_metrics_in_snapshots_and_as_prometheus_labels() -> None:
    m = Metrics(_Clock(), tags={"broker": "1"})
    m.rate("in-a", "topics", "BytesInPerSec", "bytes in", {"topic": "a"}).record(10)
    m.rate("in-b", "topics", "BytesInPerSec", "bytes in", {"topic": "b"}).record(5)
    m.rate("in", "topics", "BytesInPerSec", "bytes in").record(15)
    snap = m.snapshot()["topics"]
    assert snap["BytesInPerSec-total{topic=a}"] == 10 and snap["BytesInPerSec-total{topic=b}"] == 5
    assert snap["BytesInPerSec-total"] == 15
    with pytest.raises(ValueError, match=r"BytesInPerSec-total\{topic=a\}"):
        m.sensor("again").add("topics", "BytesInPerSec-total", Total(), tags={"topic": "a"})
    lines = prometheus_text([m]).splitlines()
    fam = "hmb_topics_BytesInPerSec_total"
    assert lines.count(f"# TYPE {fam} counter") == 1  # a Total: cumulative
    assert lines.count("# TYPE hmb_topics_BytesInPerSec_rate gauge") == 1
    assert f'{fam}{{broker="1",topic="a"}} 10.0' in lines and f'{fam}{{broker="1"}} 15.0' in lines
    # one name's samples (every tag set), with their kind; names() folds the tag sets
    one = m.samples("topics", "BytesInPerSec-total")
    assert sorted((s.tags.get("topic", ""), s.value, s.kind) for s in one) == [
        ("", 15.0, "counter"), ("a", 10.0, "counter"), ("b", 5.0, "counter")]
    assert all(s.tags["broker"] == "1" for s in one)
    assert sorted(m.names()) == [("topics", "BytesInPerSec-rate", "bytes in", "gauge"),
                                 ("topics", "BytesInPerSec-total", "bytes in", "counter")]
