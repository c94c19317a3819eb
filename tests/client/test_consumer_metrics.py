"""Consumer metrics (``consumer-fetch-manager-metrics``, ``consumer-coordinator-metrics``) and
the pipelined fetcher, against the embedded broker: the records and bytes counted are exactly
what the log holds, the lag is what the test left unread, a rebalance and a commit are counted
(poll ``Consumer`` and the 0.8 ``ConsumerConnector``); a seek while Fetches run ahead hands
out each record once from the new position, and the fetcher never queues more chunks than
the stream holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import Consumer, ConsumerRecord, Producer
from hmbclient.consumer.connector import Consumer as ConnectorFactory
from hmbclient.consumer.simple import FetchRequest, SimpleConsumer

from .conftest import create_topic, unique

pytestmark = pytest.mark.timeout(120)

FETCH = "consumer-fetch-manager-metrics"
COORD = "consumer-coordinator-metrics"
GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "fetch.max.wait.ms": 50,
         "auto.offset.reset": "earliest"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("hmb")), group_initial_rebalance_delay_ms=0,
                        group_min_session_timeout_ms=1000) as b:
        yield b


def _produce(bootstrap: str, topic: str, counts: dict[int, int], size: int = 100, batch: int = 0) -> None:
    """``counts[p]`` values of ``size`` bytes to each partition p (``batch``: flush after every
    that many, so the log holds batches of at most that many records)."""
    with Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=2) as p:
        for partition, n in counts.items():
            for i in range(n):
                p.produce(topic, b"%0*d" % (size, i), partition=partition)
                if batch and (i + 1) % batch == 0:
                    assert p.flush(30) == 0
        assert p.flush(30) == 0


def _log_bytes(broker: Any, topic: str, partitions: int) -> int:
    """The record bytes of each partition's whole log, read by the stateless SimpleConsumer."""
    with SimpleConsumer(broker.host, broker.port, so_timeout_ms=10_000, prefetch=False) as sc:
        return sum(len(sc.fetch(FetchRequest(topic, p, 0, 4 << 20)).buffer) for p in range(partitions))


def _poll(consumer: Consumer, n: int, max_records: int | None = None) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5, max_records=None if max_records is None else max_records - len(got)))
    return got


def test_poll_consumer_metrics_count_records_bytes_lag_rebalance_and_commit(broker: Any) -> None:
    topic, group = unique("cm"), unique("cmg")
    create_topic(broker.bootstrap, topic, 2)
    _produce(broker.bootstrap, topic, {0: 120, 1: 80})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False, **GROUP})
    try:
        c.subscribe([topic])
        assert len(_poll(c, 200)) == 200
        m = c.metrics()
        fetch = m[FETCH]
        assert fetch["records-consumed-total"] == 200
        assert fetch["bytes-consumed-total"] == _log_bytes(broker, topic, 2)
        assert fetch["fetch-total"] >= 1 and fetch["fetch-rate"] > 0
        assert 0 <= fetch["fetch-latency-avg"] <= fetch["fetch-latency-max"] < 30_000
        assert fetch["records-per-request-avg"] > 0
        assert fetch["records-lag-max"] == 0
        assert m[COORD]["rebalance-total"] == 1
        assert not math.isnan(m[COORD]["rebalance-latency-max"])
        assert m[COORD]["commit-total"] == 0

        # 50 more on partition 0: once fetched, hand out 20 of them; 30 are left unread.
        _produce(broker.bootstrap, topic, {0: 50})
        wait_until(lambda: c.metrics()[FETCH]["records-consumed-total"] == 250, timeout_s=20)
        got = c.poll(5.0, max_records=20)
        assert [r.offset for r in got] == list(range(120, 140))
        assert c.metrics()[FETCH]["records-lag-max"] == 30
        c.commit()
        coord = c.metrics()[COORD]
        assert coord["commit-total"] == 1 and coord["commit-latency-max"] >= 0
        assert c.metrics()[FETCH]["records-consumed-total"] == 250  # nothing counted twice

        # A second member joins: the first one goes through a second rebalance.
        other = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False, **GROUP})
        try:
            other.subscribe([topic])

            def both_own() -> bool:
                c.poll(0.1)
                other.poll(0.1)
                return bool(c.assignment()) and bool(other.assignment())

            wait_until(both_own, timeout_s=40)
            assert c.metrics()[COORD]["rebalance-total"] >= 2
        finally:
            other.close()
    finally:
        c.close()


def test_seek_while_fetches_run_ahead_hands_out_each_record_once(broker: Any) -> None:
    topic = unique("cseek")
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, {0: 3000}, size=20, batch=100)  # ~3 KB batches
    # A one-chunk queue: the fetcher may only run ahead while the queue is empty.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "queued.max.message.chunks": 1,
                  "max.partition.fetch.bytes": 4096, **GROUP})
    try:
        c.assign([(topic, 0)])
        first = _poll(c, 100, max_records=100)
        assert [r.offset for r in first] == list(range(100))
        stream = c._stream
        wait_until(lambda: stream.queued == stream.capacity, timeout_s=10)
        fetched = c.metrics()[FETCH]["fetch-total"]
        # The behaviour under test is a window in which nothing may happen: with the queue full
        # and nobody polling, the fetcher waits for hand-out instead of fetching further.
        time.sleep(0.5)
        assert stream.queued == stream.capacity
        assert c.metrics()[FETCH]["fetch-total"] <= fetched + 1
        assert c._ptis[(topic, 0)].fetch_offset < 3000  # type: ignore[index]
        c.seek((topic, 0), 2000)
        rest = _poll(c, 1000)
        assert [r.offset for r in rest] == list(range(2000, 3000))
        c.seek((topic, 0), 10)
        again = _poll(c, 50, max_records=50)
        assert [r.offset for r in again] == list(range(10, 60))
        assert c.metrics()[FETCH]["records-lag-max"] == 3000 - 60
    finally:
        c.close()


def test_connector_metrics(broker: Any) -> None:
    topic, group = unique("cc"), unique("ccg")
    create_topic(broker.bootstrap, topic, 2)
    _produce(broker.bootstrap, topic, {0: 70, 1: 30})
    conn = ConnectorFactory.create({
        "group.protocol": "broker", "bootstrap.servers": broker.bootstrap, "group.id": group,
        "auto.offset.reset": "smallest", "consumer.timeout.ms": 1500, "session.timeout.ms": 4000,
        "heartbeat.interval.ms": 300, "auto.commit.enable": False, "fetch.wait.max.ms": 50,
    })
    try:
        stream = conn.create_message_streams({topic: 1})[topic][0]
        got = [next(stream) for _ in range(100)]
        assert len({(m.partition, m.offset) for m in got}) == 100
        conn.commit_offsets()
        m = conn.metrics()
        assert m[FETCH]["records-consumed-total"] == 100
        assert m[FETCH]["bytes-consumed-total"] == _log_bytes(broker, topic, 2)
        assert m[FETCH]["records-lag-max"] == 0
        assert m[COORD]["rebalance-total"] >= 1
        assert m[COORD]["commit-total"] == 1
    finally:
        conn.shutdown()
