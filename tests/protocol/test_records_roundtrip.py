"""Property round-trips: encode_records -> decode_records/iter_records, every format and codec."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Record,
    decode_records,
    encode_records,
    iter_records,
    scan_entries,
)

MAX_TS = (1 << 63) - 1
keys = st.none() | st.binary(max_size=64)
values = st.none() | st.binary(max_size=600)
timestamps = st.none() | st.integers(min_value=0, max_value=1 << 45)
headers = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)), max_size=3)

legacy_items = st.lists(st.tuples(keys, values, timestamps), min_size=1, max_size=30)
v2_items = st.lists(st.tuples(keys, values, timestamps, headers), min_size=1, max_size=30)
legacy_codecs = st.sampled_from([NONE, GZIP, SNAPPY, LZ4])
v2_codecs = st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD])
offsets = st.integers(min_value=0, max_value=1 << 50)

DEFAULT_TS = 1_600_000_000_000
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class _Tailed(NamedTuple):
    """A consumer's own record tuple: a Record's fields, then where it came from."""

    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Any
    topic: str
    partition: int


def _check(magic: int, codec: int, items: list[tuple[Any, ...]], base_offset: int) -> None:
    buf = encode_records(magic, codec, items, base_offset=base_offset, timestamp_ms=DEFAULT_TS)
    recs = decode_records(buf)
    assert len(recs) == len(items)
    for i, (r, it) in enumerate(zip(recs, items, strict=True)):
        assert isinstance(r, Record)
        assert r.offset == base_offset + i
        assert r.next_offset == r.offset + 1
        assert r.key == it[0]
        assert r.value == it[1] == r.payload
        assert r.message is r
        ts = DEFAULT_TS if it[2] is None else it[2]
        assert r.timestamp == (ts if magic else -1)
        want_headers = tuple(it[3]) if magic == 2 and len(it) > 3 else ()
        assert r.headers == want_headers
        assert r.key is None or type(r.key) is bytes
        assert r.value is None or type(r.value) is bytes
    assert list(iter_records(buf)) == recs
    assert list(iter_records(memoryview(buf))) == recs
    assert decode_records(bytearray(buf)) == recs
    # tail: the same records built as the consumer's class, with its trailing fields
    for data in (buf, bytearray(buf)):
        tailed = decode_records(data, (_Tailed, ("t", 3)))
        assert all(type(r) is _Tailed for r in tailed)
        assert [tuple(r) for r in tailed] == [(*r, "t", 3) for r in recs]
    entries, valid = scan_entries(buf)
    assert valid == len(buf)
    assert entries[0].base_offset == base_offset
    assert entries[-1].last_offset == base_offset + len(items) - 1
    assert sum(e.count for e in entries) == len(items)
    if codec != NONE:
        assert len(entries) == 1


@SETTINGS
@given(legacy_items, legacy_codecs, offsets, st.sampled_from([0, 1]))
@example([(None, b"", None)], NONE, 0, 0)
@example([(None, None, None)], NONE, 0, 1)
@example([(b"", None, 0)], GZIP, 0, 1)
@example([(b"k", b"v" * 100_000, 1)], SNAPPY, (1 << 62), 1)
@example([(None, b"x", i) for i in range(3000)], LZ4, 5, 1)
def test_messageset_round_trip(items: list[Any], codec: int, base: int, magic: int) -> None:
    _check(magic, codec, items, base)


@SETTINGS
@given(v2_items, v2_codecs, offsets)
@example([(None, b"", None, [])], NONE, 0)
@example([(None, None, None, [])], NONE, 0)
@example([(b"", None, 0, [("", None)])], GZIP, 0)
# long varints: value/key/header lengths and record length beyond two bytes
@example([(b"k" * 9000, b"v" * 70_000, 1, [("h" * 300, b"x" * 20_000)])], NONE, 7)
# timestamp deltas: negative, and needing all 10 varint bytes
@example([(None, b"a", MAX_TS, []), (None, b"b", 0, []), (None, b"c", MAX_TS, [])], NONE, 0)
@example([(None, b"a", 0, []), (None, b"b", MAX_TS, [])], ZSTD, 0)
# offset deltas past the one- and two-byte varint fast paths (and the encode table)
@example([(None, b"", 1, [])] * 20_000, NONE, 1 << 40)
@example([(b"\x00", b"\x01" * 63, 3, [])] * 1000, SNAPPY, 0)
def test_record_batch_round_trip(items: list[Any], codec: int, base: int) -> None:
    _check(2, codec, items, base)


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_items_may_be_any_iterable_and_mix_tuple_sizes(magic: int) -> None:
    items = ((None, b"v%d" % i, 10 + i) if i % 2 else (b"k", b"w", None, ()) for i in range(5))
    recs = decode_records(encode_records(magic, NONE, items, timestamp_ms=99))
    assert [r.value for r in recs] == [b"w", b"v1", b"w", b"v3", b"w"]
    if magic:
        assert [r.timestamp for r in recs] == [99, 11, 99, 13, 99]


def test_encode_rejects_what_it_cannot_carry() -> None:
    with pytest.raises(ValueError):
        encode_records(3, NONE, [(None, b"v", 1)])
    with pytest.raises(ValueError):
        encode_records(2, 9, [(None, b"v", 1)])
    with pytest.raises(ValueError):
        encode_records(1, NONE, [(None, b"v", 1, [("h", b"x")])])
    with pytest.raises(ValueError):
        encode_records(1, NONE, [(None, b"v", 1 << 64)])
    assert encode_records(2, GZIP, []) == b""
    assert encode_records(0, NONE, []) == b""


def test_encode_default_timestamp_is_now() -> None:
    import time

    before = int(time.time() * 1000)
    (rec,) = decode_records(encode_records(2, NONE, [(None, b"v", None)]))
    assert before <= rec.timestamp <= int(time.time() * 1000)


def test_record_is_a_namedtuple() -> None:
    r = Record(5, 10, b"k", b"v")
    assert r.headers == ()
    assert r._replace(offset=6).next_offset == 7
    assert r._asdict()["value"] == b"v"
    assert tuple(r) == (5, 10, b"k", b"v", ())
