"""The data source's columnar path (reader.arrow_batches over ``decode_segments`` lists: runs
of one layout turned into Arrow columns by strided slices) gives exactly the rows of the
per-record path (the same function fed ``decode_records``' records), on every layout a fetch
may hold: keys null/empty/set, null and empty values, CreateTime deltas both signs,
LogAppendTime, headers, compressed batches, v0/v1 messages, a compacted batch, runs cut at a
fetch's first offset. No broker, no Spark."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from crc32c import crc32c

from hmbclient.protocol.records import GZIP, NONE, decode_records, encode_records, v2
from hmbclient.protocol.records.records import cut_segments, decode_segments
from hmbclient.protocol.records.uniform import UniformRun
from spark_integration.reader import arrow_batches, timestamp_types

TS = 1_700_000_000_000


def _log_append_time(batch: bytes) -> bytes:
    out = bytearray(batch)
    attrs = struct.unpack_from(">h", out, v2.ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", out, v2.ATTRIBUTES_OFFSET, attrs | 0x08)
    struct.pack_into(">I", out, v2.CRC_OFFSET, crc32c(bytes(out[v2.ATTRIBUTES_OFFSET:])))
    return bytes(out)


def _rows(chunks: Any, include_headers: bool, rows: int = 8192) -> list[dict[str, Any]]:
    out = []
    for batch in arrow_batches(chunks, "t", 3, include_headers=include_headers, rows=rows):
        assert 0 < batch.num_rows <= rows
        out.extend(batch.to_pylist())
    return out


def _same(buf: bytes, include_headers: bool = False, cut: int | None = None) -> list[dict[str, Any]]:
    """Rows of the columnar path == rows of the per-record path; returns them."""
    records = decode_records(buf)
    segments = decode_segments(buf)
    if cut is not None:
        records = [r for r in records if r.offset >= cut]
        segments = cut_segments(segments, cut, None)
    types = timestamp_types(buf)
    expected = _rows([(records, types)], include_headers)
    got = _rows([(segments, types)], include_headers)
    assert got == expected
    assert len(got) == len(records)
    return got


def _batch(items: list[Any], base: int = 0, codec: int = NONE) -> bytes:
    return v2.encode(codec, items, base, 0)


@pytest.mark.parametrize("key", [None, b"", b"key-1"])
@pytest.mark.parametrize("value_size", [None, 0, 1, 100, 3000])
def test_uniform_runs_give_the_records_rows(key: bytes | None, value_size: int | None) -> None:
    items = [(key, None if value_size is None else bytes([65 + i % 26]) * value_size,
              TS + (i + 3) % 7 - 3) for i in range(300)]
    buf = _batch(items)
    assert any(type(s) is UniformRun for s in decode_segments(buf))  # the path under test ran
    rows = _same(buf)
    assert [r["offset"] for r in rows] == list(range(300))
    assert rows[5]["key"] == key and rows[5]["topic"] == "t" and rows[5]["partition"] == 3
    assert rows[5]["timestampType"] == 0
    assert _same(buf, include_headers=True)[7]["headers"] is None


def test_log_append_time_headers_mixed_layouts_and_compression() -> None:
    plain = [(b"k", b"v" * 50, TS + i % 3) for i in range(200)]
    headed = [(None, b"h" * 20, TS, [("a", b"1"), ("b", None)]) for _ in range(30)]
    buf = (
        _log_append_time(_batch(plain))
        + _batch(plain[:100] + headed + plain[:100], 200)
        + _batch(plain, 430, GZIP)
        + _batch([(None, b"x" * 10, -1)] * 50, 630)  # NO_TIMESTAMP: a null timestamp
    )
    rows = _same(buf, include_headers=True)
    assert [r["timestampType"] for r in rows[:200]] == [1] * 200
    assert rows[300]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    assert rows[-1]["timestamp"] is None
    _same(buf)


def test_legacy_messages_compacted_batches_and_cuts() -> None:
    legacy = encode_records(1, NONE, [(None, b"m" * 40, TS)] * 20, base_offset=0)
    v0 = encode_records(0, NONE, [(b"k", b"z" * 40, None)] * 20, base_offset=20)
    offsets = [o for o in range(40, 700) if o % 37]
    compacted = v2.encode(NONE, [(None, b"c" * 30, TS)] * len(offsets), 40, 0, offsets)
    tail = _batch([(None, b"e" * 30, TS + 1)] * 400, 700)
    buf = legacy + v0 + compacted + tail
    rows = _same(buf)
    assert {r["timestampType"] for r in rows[:20]} == {0} and rows[25]["timestampType"] == -1
    for cut in (3, 20, 41, 333, 650, 701, 950, 1099):
        _same(buf, cut=cut)
    # Batches of at most ``rows`` rows, in order, across runs and record stretches.
    small = _rows([(decode_segments(buf), timestamp_types(buf))], False, rows=97)
    assert small == rows
