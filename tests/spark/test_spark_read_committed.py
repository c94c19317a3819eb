"""The ``hmb`` source's reads of transactional topics, without Spark (the planner and the range
reader against the embedded broker, whose transactions landed with issue 23):

* read_uncommitted (the default): a range ending in a transaction marker is read to its end
  (the marker holds no record; the reader must move past it, not wait for data there).
* ``isolation.level`` / ``kafka.isolation.level`` = read_committed: the planner's latest offset
  is the last stable offset, and a range yields the committed records only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from option_cases import fill_transactions

from hmbclient import Producer, ProducerData
from hmbclient.broker import EmbeddedBroker
from spark_integration import OffsetRange
from spark_integration.offsets import LATEST
from spark_integration.options import parse_options
from spark_integration.planner import PartitionPlanner
from spark_integration.reader import read_range

pytestmark = pytest.mark.timeout(60)
TOPIC = "txn-source"


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, num_partitions=1) as b:
        fill_transactions(b.bootstrap, TOPIC)
        yield b  # offsets: c1 0-2, marker 3, a 4-6, marker 7, c2 8-10, marker 11; end 12


def _opts(broker: EmbeddedBroker, **extra: str) -> Any:
    return parse_options({"metadata.broker.list": broker.bootstrap, "topic": TOPIC, **extra}, streaming=False)


def _values(broker: EmbeddedBroker, opts: Any) -> tuple[int, list[bytes]]:
    settings = opts.read_settings()
    with PartitionPlanner(settings) as planner:
        end = planner.offsets([(TOPIC, 0)], LATEST)[(TOPIC, 0)]
    return end, [r[3] for r in read_range(settings, OffsetRange(TOPIC, 0, 0, end), None)]


def test_read_uncommitted_reads_past_a_trailing_marker(broker):
    end, values = _values(broker, _opts(broker))
    assert end == 12
    assert values == [f"{n}-{i}".encode() for n in ("c1", "a", "c2") for i in range(3)]


@pytest.mark.parametrize("key", ["isolation.level", "kafka.isolation.level"])
def test_read_committed_drops_the_aborted_transaction(broker, key):
    opts = _opts(broker, **{key: "read_committed"})
    assert opts.read_settings().isolation_level == "read_committed"
    end, values = _values(broker, opts)
    assert end == 12
    assert values == [f"{n}-{i}".encode() for n in ("c1", "c2") for i in range(3)]


def test_read_committed_plans_up_to_the_last_stable_offset(broker):
    p = Producer(metadata_broker_list=broker.bootstrap, transactional_id="spark-open", request_required_acks=-1)
    try:
        p.init_transactions(10)
        p.begin_transaction()
        p.send(ProducerData(TOPIC, None, [b"open"]))  # offset 12, not committed
        committed = _opts(broker, **{"isolation.level": "read_committed"})
        assert _values(broker, committed) == (12, [f"{n}-{i}".encode() for n in ("c1", "c2") for i in range(3)])
        assert _values(broker, _opts(broker))[0] == 13
    finally:
        p.abort_transaction(10)
        p.close()


def test_a_bad_isolation_level_is_refused(broker):
    from hmbclient.errors import ConfigError

    with pytest.raises(ConfigError, match="isolation"):
        _opts(broker, **{"kafka.isolation.level": "serializable"})
