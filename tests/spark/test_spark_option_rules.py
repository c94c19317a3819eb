"""The pure decisions behind Spark's Kafka source options (spark_integration.offsets, options,
reader.timestamp_types): no broker, no Spark."""

from __future__ import annotations

import pytest

from hmbclient.errors import ConfigError
from spark_integration.offsets import (
    DataLoss,
    OffsetRange,
    data_loss,
    offsets_behind_latest,
    parse_assign,
    resolve_timestamp_offsets,
    split_ranges,
    trigger_due,
)
from spark_integration.options import parse_duration_ms, parse_options
from spark_integration.reader import timestamp_types


def _covered(pieces: list[OffsetRange]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for r in pieces:
        out.setdefault(r.topic_partition, []).extend(range(r.from_offset, r.until_offset))
    return out


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "max_records", "expected"),
    [
        ([100], 4, None, [25, 25, 25, 25]),                # one hot partition, 4 tasks
        ([100, 0, 10], None, None, [100, 10]),              # empty ranges dropped
        ([20, 20, 20, 20], 10, None, [6, 7, 7] * 4),        # round half up: 2.5 -> 3 each
        ([90, 10], 4, None, [22, 23, 22, 23, 10]),          # round(3.6) = 4 pieces, round(0.4) -> 1
        ([20, 20], 2, None, [20, 20]),                      # already enough
        ([20], None, 6, [5, 5, 5, 5]),                      # ceil(20 / 6) = 4 pieces
        ([3], 8, None, [1, 1, 1]),                          # never an empty piece
    ],
)
def test_split_ranges(sizes: list[int], min_partitions: int | None, max_records: int | None,
                      expected: list[int]) -> None:
    ranges = [OffsetRange("t", p, 10, 10 + n) for p, n in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions=min_partitions, max_records=max_records)
    assert [r.count for r in pieces] == expected
    # Exactly the offsets of the input, each once, in order.
    assert _covered(pieces) == {r.topic_partition: list(range(10, 10 + r.count))
                                for r in ranges if r.count}


def test_data_loss_cases() -> None:
    tp = ("t", 0)
    assert data_loss(tp, 5, 0, 10) is None
    assert data_loss(tp, 10, 0, 10) is None
    retention = data_loss(tp, 5, 145, 300)
    assert retention == DataLoss("t", 0, 5, 145, 145, retention.reason if retention else "")
    assert str(retention).startswith("t-0: offsets [5, 145) were deleted")
    went_back = data_loss(tp, 50, 0, 7)
    assert went_back is not None and (went_back.lost_from, went_back.lost_to,
                                      went_back.resume_at) == (7, 50, 0)


@pytest.mark.parametrize(
    ("backlog", "minimum", "waited", "due"),
    [(0, None, 0, False), (1, None, 0, True), (5, 10, 0, False), (10, 10, 0, True),
     (5, 10, 999, False), (5, 10, 1000, True), (0, 10, 5000, False)],
)
def test_trigger_due(backlog: int, minimum: int | None, waited: int, due: bool) -> None:
    assert trigger_due(backlog, minimum, 1000, waited) is due


def test_offsets_behind_latest() -> None:
    consumed = {("t", 0): 10, ("t", 1): 20, ("u", 0): 5}
    latest = {("t", 0): 10, ("t", 1): 26, ("u", 0): 17}
    assert offsets_behind_latest(consumed, latest) == {
        "minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "12",
        "avgOffsetsBehindLatest": "6.0",
    }
    assert offsets_behind_latest({}, latest) == {}


def test_resolve_timestamp_offsets() -> None:
    found = {("t", 0): 4, ("t", 1): None}
    latest = {("t", 0): 9, ("t", 1): 30}
    assert resolve_timestamp_offsets(found, latest, option="x", strategy="latest") == {
        ("t", 0): 4, ("t", 1): 30}
    with pytest.raises(ConfigError, match="startingTimestamp: no offset .* in t-1"):
        resolve_timestamp_offsets(found, latest, option="startingTimestamp", strategy="error")


def test_parse_assign_and_duration() -> None:
    assert parse_assign('{"b": [1, 0], "a": [2]}') == (("a", 2), ("b", 0), ("b", 1))
    for bad in ("[]", "{}", '{"a": [true]}', '{"a": 1}', "nope"):
        with pytest.raises(ConfigError, match="assign"):
            parse_assign(bad)
    assert [parse_duration_ms(t) for t in ("250", "250ms", "30s", "15m", "2h", "1d")] == [
        250, 250, 30_000, 900_000, 7_200_000, 86_400_000]
    with pytest.raises(ValueError):
        parse_duration_ms("soon")


def test_spark_spellings_map_to_our_options() -> None:
    opts = parse_options({"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b",
                          "kafka.group.id": "g", "kafka.client.id": "c",
                          "maxTriggerDelay": "2s", "minOffsetsPerTrigger": "5"}, streaming=True)
    assert (opts.topics, opts.group_id, opts.client_id, opts.trigger_delay_ms) == (
        ("a", "b"), "g", "c", 2000)
    assert parse_options({"bootstrap.servers": "h:1", "subscribePattern": "a.*"},
                         streaming=True).topic_pattern == "a.*"
    assert parse_options({"bootstrap.servers": "h:1", "topic": "t"},
                         streaming=True).trigger_delay_ms == 15 * 60_000
    with pytest.raises(ConfigError, match="exactly one of"):
        parse_options({"bootstrap.servers": "h:1", "topic": "t", "assign": '{"t": [0]}'},
                      streaming=False)


def _v2_batch(base: int, last_delta: int, log_append: bool) -> bytes:
    import struct

    body = struct.pack(">ibIhi", 0, 2, 0, 0x08 if log_append else 0, last_delta) + b"\0" * 40
    return struct.pack(">qi", base, len(body)) + body


def test_timestamp_types_from_entry_headers() -> None:
    import struct

    v1 = struct.pack(">Ibb", 0, 1, 0x08) + b"\0" * 20
    v0 = struct.pack(">Ibb", 0, 0, 0) + b"\0" * 10
    buf = (_v2_batch(0, 4, False) + _v2_batch(5, 2, True) + struct.pack(">qi", 8, len(v1)) + v1
           + struct.pack(">qi", 9, len(v0)) + v0)
    assert timestamp_types(buf) == [(4, 0), (7, 1), (8, 1), (9, -1)]
    assert timestamp_types(buf[:-3]) == [(4, 0), (7, 1), (8, 1)]  # a partial entry is left out
