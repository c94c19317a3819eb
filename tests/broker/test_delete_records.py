"""DeleteRecords below the broker's API (issue 27): the log start offset of a Log moving inside
a segment, its checkpoint across a crash, and how it meets transactions and the cleaner; then
the request-level refusals Kafka's clients do not produce (an internal topic, a partition named
twice) and v0 beside v2.

The peers' view (Kafka's tool, kafka-python, confluent-kafka, Apache Kafka 4.4 as the
reference) is in tests/reference/test_delete_records_kafka4.py; replication and kill -9 in
test_delete_records_cluster.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import LogManager
from hmbclient.errors import ErrorCode, OffsetOutOfRangeError
from hmbclient.protocol import records
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.protocol.records import NONE
from hmbclient.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    encode_control_batch,
    encode_transactional_batch,
)

from .conftest import RawClient, encode, produce, wait_until

TS = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=600, index_interval_bytes=50)


def _fill(lg: Log, n: int, key_mod: int = 0) -> None:
    for i in range(n):
        lg.append(encode([(b"k%d" % (i % key_mod) if key_mod else None, b"v%d" % i)]))


def _offsets_from(lg: Log, offset: int) -> list[int]:
    out: list[int] = []
    while offset < lg.log_end_offset:
        sl, _ = lg.read(offset, 1 << 20, min_one_entry=True)
        assert sl is not None
        recs = [r for r in records.decode_records(sl.read()) if r.offset >= offset]
        out += [r.offset for r in recs]
        offset = recs[-1].offset + 1 if recs else sl.store.size
    return out


def test_log_start_moves_inside_a_segment_and_the_segments_below_go(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), SMALL)
    _fill(lg, 60)
    bases = [s.base_offset for s in lg.segments]
    assert len(bases) > 4 and lg.high_watermark == 60
    target = bases[2] + 1  # inside the third segment
    assert lg.increment_log_start_offset(target)
    assert lg.log_start_offset == target and [s.base_offset for s in lg.segments] == bases[2:]
    assert not any(f.startswith(f"{b:020d}.") for b in bases[:2] for f in os.listdir(tmp_path / "t-0"))
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(target - 1, 1 << 20)
    assert _offsets_from(lg, target) == list(range(target, 60))
    assert lg.offsets_before(-2, 1, 0) == [target] and lg.offset_for_timestamp(0) == (target, lg.offset_for_timestamp(0)[1])  # type: ignore[index]
    # below the start: nothing to do; past the high watermark: refused, nothing changes
    assert not lg.increment_log_start_offset(target - 1)
    lg.set_high_watermark(50)
    with pytest.raises(OffsetOutOfRangeError):
        lg.increment_log_start_offset(51)
    assert lg.log_start_offset == target and lg.high_watermark == 50
    # a follower's truncation below the start moves it back (Kafka's rule), emptying below it
    lg.truncate_to(target - 1)
    assert lg.log_start_offset <= lg.log_end_offset <= target - 1


def test_the_checkpoint_survives_a_crash_and_a_topic_created_again_starts_at_zero(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    m = LogManager(data, SMALL)
    lg = m.get_or_create("t", 0)
    _fill(lg, 40)
    base_after = lg.segments[1].base_offset
    lg.increment_log_start_offset(base_after + 2)
    m.checkpoint_log_start_offsets()
    # no close: as after kill -9 (no clean-shutdown marker, no high watermark checkpoint)
    again = LogManager(data, SMALL)
    lg2 = again.get("t", 0)
    assert lg2 is not None and lg2.log_start_offset == base_after + 2 and lg2.segments[0].base_offset == base_after
    assert lg2.high_watermark >= lg2.log_start_offset
    with pytest.raises(OffsetOutOfRangeError):
        lg2.read(base_after + 1, 1 << 20)
    assert again.delete_log("t", 0)
    fresh = again.get_or_create("t", 0)
    assert fresh.log_start_offset == 0
    again.close()  # (m stays unclosed: its process "crashed"; closing it would write into the new folder)
    assert LogManager(data, SMALL).get("t", 0).log_start_offset == 0  # type: ignore[union-attr]


def test_an_open_transaction_below_the_new_start_keeps_the_lso_there(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), LogConfig())
    lg.append(encode_transactional_batch(NONE, [(None, b"t%d" % i, TS) for i in range(3)], 7, 0, 0, timestamp_ms=TS))  # offsets 0-2, open
    _fill(lg, 5)  # 3-7
    assert lg.last_stable_offset == 0
    lg.increment_log_start_offset(2)
    # Kafka: max(first unstable offset, log start); the transaction stays open until its marker
    assert lg.last_stable_offset == 2 and lg.high_watermark == 8
    lg.append(encode_control_batch(7, 0, EndTxnMarker(ControlType.COMMIT, 0), timestamp_ms=TS), origin="coordinator")
    assert lg.last_stable_offset == lg.high_watermark == 9
    assert lg.aborted_transactions(2, 9) == []


def test_the_cleaner_runs_on_a_compact_delete_log_after_delete_records(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=50, compact=True, delete=True)
    lg = Log(str(tmp_path / "t-0"), cfg)
    _fill(lg, 60, key_mod=4)
    start = lg.segments[1].base_offset + 1
    lg.increment_log_start_offset(start)
    assert lg.compact() > 0
    assert lg.log_start_offset == start
    kept = _offsets_from(lg, start)
    assert kept[0] >= start and kept[-4:] == list(range(56, 60))
    # the cleaner never rewrote below the start into the start's place
    assert lg.segments[0].base_offset <= start


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(group_initial_rebalance_delay_ms=0) as b:
        yield b


def _dr(c: RawClient, version: int, topics: list[Any], timeout_ms: int = 5000) -> list[tuple[str, int, int, int]]:
    resp = c.request(REQUESTS[(ApiKey.DELETE_RECORDS, version)].build(topics=topics, timeout_ms=timeout_ms))
    return [(t.name, p.partition_index, p.error_code, p.low_watermark) for t in resp.topics for p in t.partitions]


def test_request_refusals_and_both_versions(broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", broker.port) as c:
        create = REQUESTS[(ApiKey.CREATE_TOPICS, 2)].build(topics=[("dr-raw", 1, 1, [], [])], timeout_ms=10_000, validate_only=False)
        assert c.request(create).topics[0].error_code == ErrorCode.NONE
        wait_until(lambda: broker.broker.metadata.is_ready("dr-raw"), 20, "topic ready")
        assert produce(c, "dr-raw", 0, encode([(None, b"v%d" % i) for i in range(5)]), acks=-1).error_code == ErrorCode.NONE
        assert _dr(c, 0, [("dr-raw", [(0, 2)])]) == [("dr-raw", 0, ErrorCode.NONE, 2)]
        assert _dr(c, 2, [("dr-raw", [(0, 3), (0, 4), (1, 0)]), ("__consumer_offsets", [(0, 0)]), ("nope", [(0, 0)])]) == [
            ("dr-raw", 0, ErrorCode.INVALID_REQUEST, -1),  # named twice: neither is done
            ("dr-raw", 0, ErrorCode.INVALID_REQUEST, -1),
            ("dr-raw", 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("__consumer_offsets", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if not broker.broker.metadata.has_topic("__consumer_offsets")
             else ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
            ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ]
        assert broker.broker.logs.get("dr-raw", 0).log_start_offset == 2  # type: ignore[union-attr]
        assert _dr(c, 1, [("dr-raw", [(0, -1)])]) == [("dr-raw", 0, ErrorCode.NONE, 5)]


def test_v2_bytes_are_kafka_pythons() -> None:
    """DeleteRecords v2 (flexible: compact strings and arrays, tagged fields) byte for byte as
    kafka-python's schema encodes it, both ways (test_api_golden.py covers v0-1)."""
    from kafka.protocol import admin as kp

    req = dict(topics=[("t\u00e9", [(0, 5), (1, -1)]), ("u", [])], timeout_ms=3000)
    ours = REQUESTS[(ApiKey.DELETE_RECORDS, 2)].build(**req).encode()
    assert bytes(ours) == bytes(kp.DeleteRecordsRequest[2](**req).encode())
    resp = dict(throttle_time_ms=7, topics=[("t", [(0, 5, 0), (1, -1, 1)])])
    theirs = bytes(kp.DeleteRecordsResponse[2](**resp).encode())
    assert bytes(REQUESTS[(ApiKey.DELETE_RECORDS, 2)].RESPONSE_TYPE.build(**resp).encode()) == theirs
    got = REQUESTS[(ApiKey.DELETE_RECORDS, 2)].RESPONSE_TYPE.decode(memoryview(theirs))
    assert [(t.name, [(p.partition_index, p.low_watermark, p.error_code) for p in t.partitions]) for t in got.topics] == [
        ("t", [(0, 5, 0), (1, -1, 1)])]


def test_low_watermark_counts_the_followers_on_live_brokers() -> None:
    from hmbclient.broker.partition import FollowerProgress, low_watermark

    followers = {1: FollowerProgress(log_start=40), 2: FollowerProgress(log_start=25), 3: FollowerProgress()}
    assert low_watermark(50, followers, alive={0, 1}) == 40
    assert low_watermark(50, followers, alive={0, 1, 2}) == 25
    assert low_watermark(50, followers, alive={0, 1, 2, 3}) == -1  # not heard from yet: the answer waits
    assert low_watermark(50, {}, alive={0}) == 50
