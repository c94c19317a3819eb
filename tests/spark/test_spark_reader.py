"""The range reader and the partition planner without Spark: retries against a real broker.

A leader address that refuses connections stands in for a leader that moved or died: the
reader must look the leader up again and finish the range; with no reachable broker at all it
must give up after ``max_retries`` pauses with an error naming the range.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from spark_helpers import create_topic, produce

from spark_integration import OffsetRange, OffsetRangeError, ReadSettings
from spark_integration.offsets import EARLIEST, LATEST
from spark_integration.planner import PartitionPlanner
from spark_integration.reader import read_chunks, read_range

pytestmark = pytest.mark.timeout(120)


def _refused_address() -> tuple[str, int]:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1", s.getsockname()[1]


@pytest.fixture(scope="module")
def topic(broker: Any) -> str:
    create_topic(broker.bootstrap, "reader-retry", 2)
    produce(broker.bootstrap, "reader-retry", [(p, None, f"m{p}-{i}".encode())
                                               for i in range(40) for p in range(2)])
    return "reader-retry"


def _settings(broker: Any, **overrides: Any) -> ReadSettings:
    return ReadSettings(brokers=((broker.host, broker.port),), **overrides)


def test_a_lost_leader_is_looked_up_again(broker: Any, topic: str) -> None:
    settings = _settings(broker, fetch_message_max_bytes=256, retry_backoff_ms=10)
    records = list(read_range(settings, OffsetRange(topic, 1, 5, 40), _refused_address()))
    assert [r[0] for r in records] == list(range(5, 40))
    assert [r[3] for r in records[:2]] == [b"m1-5", b"m1-6"]
    # Without a planned leader the reader looks it up itself; chunks come in offset order.
    chunks = list(read_chunks(settings, OffsetRange(topic, 0, 0, 40), None))
    assert [r[0] for chunk in chunks for r in chunk] == list(range(40))


def test_an_unreachable_cluster_fails_the_range_after_the_retries(topic: str) -> None:
    settings = ReadSettings(brokers=(_refused_address(),), max_retries=2, retry_backoff_ms=100,
                            socket_timeout_ms=2_000)
    started = time.monotonic()
    failed = rf"offset range {topic}-0 \[0, 10\): reading offset 0"
    with pytest.raises(OffsetRangeError, match=failed):
        list(read_range(settings, OffsetRange(topic, 0, 0, 10), _refused_address()))
    # Two pauses of retry_backoff_ms: the retries happened, and nothing waited longer.
    assert 0.2 <= time.monotonic() - started < 30


def test_planner_lists_partitions_and_offsets(broker: Any, topic: str) -> None:
    with PartitionPlanner(_settings(broker)) as planner:
        leaders = planner.partitions([topic])
        assert sorted(leaders) == [(topic, 0), (topic, 1)]
        assert set(leaders.values()) == {(broker.host, broker.port)}
        assert planner.offsets(sorted(leaders), EARLIEST) == {(topic, 0): 0, (topic, 1): 0}
        assert planner.offsets(sorted(leaders), LATEST) == {(topic, 0): 40, (topic, 1): 40}
        assert planner.partitions(None, pattern="reader-r.*") == leaders
