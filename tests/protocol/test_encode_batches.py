"""The producer's RecordBatch v2 encoder (``v2.encode_batches``, columns of producer batches)
writes the same bytes as ``encode_records`` of the equivalent items, on each of its paths:
keyless records of one value length (prefix table), keyless of mixed lengths (column maps),
and the general path (keys, headers, null values, values past the varint table, offset deltas
past it), with several batches of different timestamps merged into one record batch."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    decode_records,
    encode_records,
    v2,
)

Batch = tuple[list[Any], Any, Any, int]

TS = 1_700_000_000_000


def _items(batches: list[Batch]) -> list[tuple[Any, ...]]:
    """The items ``encode_records`` takes for the same messages (each with its batch's time)."""
    out: list[tuple[Any, ...]] = []
    for values, keys, headers, ts in batches:
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            hdrs = headers[i] if headers is not None else None
            out.append((key, value, ts, hdrs) if hdrs else (key, value, ts))
    return out


def _check(batches: list[Batch], codec: int = NONE) -> None:
    got = v2.encode_batches(codec, batches)
    items = _items(batches)
    assert got == encode_records(2, codec, items, 0, batches[0][3])
    records = decode_records(got)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (i, it[0], it[1], it[2]) for i, it in enumerate(items)
    ]


def _keyless(values: list[Any], ts: int = TS) -> Batch:
    return (values, None, None, ts)


def test_one_length_uses_the_prefix_table_and_matches() -> None:
    v2._LEADS.clear()
    v2._MIDDLES.clear()
    _check([_keyless([b"v" * 100] * 300)])
    assert (100, 1) in v2._LEADS and 100 in v2._MIDDLES
    # the table grows for a later, longer batch, and a shorter one reads its head
    _check([_keyless([b"w" * 100] * 5000)])
    _check([_keyless([b"w" * 100] * 3)])
    assert len(v2._LEADS[(100, 1)]) >= 5000


def test_the_tables_stay_within_their_budget() -> None:
    v2._LEADS.clear()
    v2._MIDDLES.clear()
    for length in range(40):  # 40 lengths x 3000 records: far past the budget if all were kept
        _check([_keyless([b"L" * length] * 3000)])
        held = sum(map(len, v2._LEADS.values())) + sum(map(len, v2._MIDDLES.values()))
        assert held <= v2._CACHED_ENTRIES_MAX
    assert 39 in v2._MIDDLES  # the newest length is there


def test_merged_batches_carry_their_own_timestamps() -> None:
    # later, earlier (a wall clock stepped back: negative delta) and far later batches
    _check([_keyless([b"a" * 10] * 70), _keyless([b"b" * 10] * 70, TS + 7), _keyless([b"c" * 10] * 3, TS - 2)])
    _check([_keyless([b"a" * 10] * 2), _keyless([b"b" * 20] * 2, TS + 10**9)])
    # a request merging batches of many creation times: the tables are per value length and
    # timestamp field length, not per timestamp
    v2._LEADS.clear()
    v2._MIDDLES.clear()
    _check([_keyless([b"t" * 30] * 200, TS + ms) for ms in range(40)])
    assert sorted(v2._LEADS) == [(30, 1)] and sorted(v2._MIDDLES) == [30]


def test_mixed_lengths_and_the_fallbacks() -> None:
    _check([_keyless([b"x" * (i % 300) for i in range(1000)])])
    _check([_keyless([b"x", None, b"yy"])])  # a null value (tombstone)
    _check([_keyless([b"x" * 9000, b"y"])])  # a value length past the varint table
    _check([_keyless([b"x" * 8150] * 2)])  # a record length just past it
    _check([_keyless([bytearray(b"ba"), memoryview(b"mv"), b"b"])])
    # offset deltas past the varint table: the later batches take the general path
    _check([_keyless([b"z" * 5] * 6000), _keyless([b"z" * 5] * 3000, TS + 1), _keyless([b"q"] * 2)])


def test_keys_and_headers() -> None:
    keys = [None, b"k", b"kk" * 100, None]
    headers = [None, (("h", b"1"),), None, (("n", None), ("m", b""))]
    _check([_keyless([b"a", b"b"]), ([b"c", b"d", b"e", None], keys, headers, TS + 1), _keyless([b"f"] * 3, TS + 2)])
    _check([([b"c"] * 4, keys, [None] * 4, TS)])
    # every message keyed, no headers: the keyed column path
    _check([([b"v%d" % i for i in range(300)], [b"key-%d" % (i % 13) for i in range(300)], [None] * 300, TS)])
    _check([_keyless([b"a"]), ([b"b", None], [b"k", b""], None, TS + 1), ([b"x" * 8000], [b"k" * 200], None, TS + 2)])


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed(codec: int) -> None:
    _check([_keyless([b"v" * 100] * 500), ([b"k"], [b"key"], [None], TS + 3)], codec)


def test_no_messages_and_bad_values() -> None:
    assert v2.encode_batches(NONE, [_keyless([])]) == b""
    with pytest.raises(ValueError, match="cannot encode"):
        v2.encode_batches(NONE, [_keyless([b"ok", 5])])
    for codec in (NONE, GZIP):
        with pytest.raises(ValueError, match="cannot encode"):
            v2.encode_batches(codec, [([b"ok"], ["str key"], [None], TS)])
        with pytest.raises(ValueError, match="cannot encode"):
            v2.encode_batches(codec, [_keyless([b"ok", "str value"])])


values = st.none() | st.binary(max_size=40) | st.sampled_from([b"same-length", b"same-lengtx"])
batch = st.tuples(
    st.lists(values, min_size=1, max_size=40),
    st.sampled_from(["keyless", "some keys and headers", "all keyed"]),
    st.integers(min_value=-5, max_value=5000),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch, min_size=1, max_size=4), st.sampled_from([NONE, GZIP]))
def test_any_batches_match_encode_records(shapes: list[tuple[list[Any], str, int]], codec: int) -> None:
    batches: list[Batch] = []
    for vals, keyed, dt in shapes:
        if keyed == "all keyed":
            batches.append((vals, [b"k%d" % (i % 5) for i in range(len(vals))], [None] * len(vals), TS + dt))
        elif keyed == "some keys and headers":
            keys = [None if i % 3 else b"k%d" % i for i in range(len(vals))]
            headers = [(("h", b"v"),) if i % 4 == 1 else None for i in range(len(vals))]
            batches.append((vals, keys, headers, TS + dt))
        else:
            batches.append((vals, None, None, TS + dt))
    _check(batches, codec)
