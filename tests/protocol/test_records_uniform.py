"""The uniform-run decode fast path (records.uniform) gives exactly what the general v2 record
loop gives, on every layout it may meet, and refuses what the general loop refuses.

The reference is ``v2.read_records`` (the general loop) applied to the whole batch, with the
same end-of-batch check ``batch_records`` makes; the path under test is the public
``decode_records`` (which goes through ``v2.read_runs`` and so through the fast path).
Every case also checks ``decode_segments`` (runs left as ``UniformRun``, for columnar
readers): its records built with ``expand_segments`` are the same, and ``cut_segments`` at
any offsets keeps exactly the records in between.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.errors import CorruptRecordError
from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    decode_records,
    iter_records,
    v2,
)
from hmbclient.protocol.records.base import encode_varint
from hmbclient.protocol.records.records import (
    cut_segments,
    decode_segments,
    expand_segments,
    last_offset,
)
from hmbclient.protocol.records.uniform import DELTA_COLUMNS, read_uniform

TS = 1_700_000_000_000


def _fix_crc(batch: bytearray, pos: int = 0) -> None:
    (blen,) = struct.unpack_from(">i", batch, pos + 8)
    end = pos + 12 + blen
    struct.pack_into(">I", batch, pos + v2.CRC_OFFSET, crc32c(bytes(batch[pos + v2.ATTRIBUTES_OFFSET : end])))


def _reference(buf: bytes) -> list[tuple[Any, ...]] | type[Exception]:
    """Every record of the (uncompressed, CRC-valid) v2 batches in ``buf`` through the general
    loop alone, or the exception class it raises."""
    out: list[Any] = []
    pos = 0
    try:
        while pos + 12 <= len(buf):
            header = v2.HEADER.unpack_from(buf, pos)
            bend = pos + 12 + header[1]
            base, attrs, base_ts, max_ts, count = header[0], header[5], header[7], header[8], header[12]
            if attrs & 0x20:
                pos = bend
                continue
            if attrs & 0x07:
                data = v2.codecs.decompress(attrs & 0x07, buf[pos + v2.RECORDS_OFFSET : bend])
                start, end = 0, len(data)
            else:
                data, start, end = buf, pos + v2.RECORDS_OFFSET, bend
            if count < 0 or count * v2.MIN_RECORD_SIZE > end - start:
                raise CorruptRecordError("count")
            recs: list[Any] = []
            try:
                stop = v2.read_records(data, start, count, base, base_ts, recs)
            except (IndexError, UnicodeDecodeError):
                raise CorruptRecordError("malformed") from None
            if stop != end:
                raise CorruptRecordError("fill")
            if attrs & 0x08:
                recs = [r._replace(timestamp=max_ts) for r in recs]
            out.extend(recs)
            pos = bend
    except CorruptRecordError:
        return CorruptRecordError
    return [tuple(r) for r in out]


def _fast(buf: bytes) -> list[tuple[Any, ...]] | type[Exception]:
    """decode_records of ``buf`` as bytes, and the same from a bytearray and a memoryview (read
    in place): all three must agree."""
    results = []
    for source in (buf, bytearray(buf), memoryview(bytearray(buf))):
        try:
            got = [tuple(r) for r in decode_records(source)]
            assert all(type(r[2]) in (bytes, type(None)) and type(r[3]) in (bytes, type(None)) for r in got)
            results.append(got)
        except CorruptRecordError:
            results.append(CorruptRecordError)
        if type(source) is not bytearray:  # bytes, and a view: runs copy it
            _same_segments(source, results[-1], cuts=type(source) is bytes)
    assert results[1] == results[0] and results[2] == results[0]
    return results[0]


def _same_segments(source: Any, expected: list[tuple[Any, ...]] | type[Exception], cuts: bool) -> None:
    """decode_segments agrees with decode_records (``expected``), and cuts keep the right part."""
    try:
        segments = decode_segments(source)
    except CorruptRecordError:
        assert expected is CorruptRecordError
        return
    assert not isinstance(expected, type)
    assert [tuple(r) for r in expand_segments(segments)] == expected
    offsets = [r[0] for r in expected]
    if not cuts or not offsets or offsets != sorted(set(offsets)):
        return  # a malformed (CRC-valid) batch may decode to offsets out of order: no cuts
    first, last = offsets[0], offsets[-1]
    assert last_offset(segments[-1]) == last
    for lo, hi in ((first + 1, None), (None, last), (first + 3, first + 9), (last, last + 1),
                   (first + len(offsets) // 2, last - 2), (last + 1, None)):
        want = [r for r in expected if (lo is None or r[0] >= lo) and (hi is None or r[0] < hi)]
        assert [tuple(r) for r in expand_segments(cut_segments(segments, lo, hi))] == want


def _same(buf: bytes) -> list[tuple[Any, ...]] | type[Exception]:
    expected = _reference(buf)
    got = _fast(buf)
    assert got == expected
    return got


def _value(i: int, size: int) -> bytes:
    return (b"%08d" % i * (size // 8 + 1))[:size]


# --- the precomputed offsetDelta columns -------------------------------------------------


def test_delta_columns_are_the_varints_of_every_delta() -> None:
    for width, (lo, hi, columns) in enumerate(DELTA_COLUMNS, 1):
        assert len(columns) == width
        assert all(len(column) == hi - lo for column in columns)
        for d in range(lo, hi):
            varint = encode_varint(d)
            assert len(varint) == width
            assert bytes(column[d - lo] for column in columns) == varint, d


# --- same results as the general loop ----------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 50, 63, 64, 100, 1000, 8200, 70_000])
@pytest.mark.parametrize("key", [None, b"", b"key-0001"])
def test_uniform_batches(size: int, key: bytes | None) -> None:
    n = 300 if size < 8200 else 20
    items = [(key, _value(i, size), TS + i % 50) for i in range(n)]
    buf = v2.encode(NONE, items, 1000, 0)
    recs = _same(buf)
    assert isinstance(recs, list) and len(recs) == n
    assert [r[0] for r in recs] == list(range(1000, 1000 + n))
    assert [r[3] for r in recs] == [item[1] for item in items]


def test_null_values_and_keyed_tombstones() -> None:
    items = [(b"k%03d" % i, None, TS) for i in range(200)] + [(None, None, TS)] * 100
    recs = _same(v2.encode(NONE, items, 0, 0))
    assert isinstance(recs, list) and [r[3] for r in recs] == [None] * 300
    assert [r[2] for r in recs[:3]] == [b"k000", b"k001", b"k002"]


def test_offset_delta_width_boundaries_and_large_batches() -> None:
    # deltas cross 64 (one to two bytes), 8192 (two to three), and the fast path's bound
    n = 132_000
    items = [(None, b"v", TS)] * n
    recs = _same(v2.encode(NONE, items, 5, 0))
    assert isinstance(recs, list) and [r[0] for r in recs] == list(range(5, 5 + n))


def test_timestamps_one_two_and_many_bytes_and_negative() -> None:
    deltas = [0, 1, -1, 63, -64, 64, 8191, -8192, 10**9, -(10**9)] * 40
    items = [(None, b"value", TS + d) for d in deltas]
    recs = _same(v2.encode(NONE, items, 0, 0))
    assert isinstance(recs, list) and [r[1] for r in recs] == [TS + d for d in deltas]
    same = [(None, b"value", TS)] * 500  # one timestamp for the whole run
    assert [r[1] for r in _same(v2.encode(NONE, same, 0, 0))] == [TS] * 500  # type: ignore[union-attr]
    spread = [(None, b"value", TS + i % 60) for i in range(500)]  # many different deltas
    assert [r[1] for r in _same(v2.encode(NONE, spread, 0, 0))] == [TS + i % 60 for i in range(500)]  # type: ignore[union-attr]


def test_mixed_layouts_and_headers() -> None:
    items: list[Any] = []
    for i in range(3000):
        if i % 700 < 200:
            items.append((None, b"x" * 100, TS))
        elif i % 700 < 300:
            items.append((b"k", b"y" * (i % 7), TS + i))
        elif i % 700 < 320:
            items.append((None, b"z" * 100, TS, [("h", b"1"), ("n", None)]))
        else:
            items.append((b"key", b"w" * 1000, TS - 5))
    recs = _same(v2.encode(NONE, items, 0, 0))
    assert isinstance(recs, list) and len(recs) == 3000
    assert recs[200 + 100 + 5][4] == (("h", b"1"), ("n", None))


def test_offset_gaps_leave_the_run() -> None:
    # a compacted batch: offset deltas skip some values
    offsets = [o for o in range(0, 600) if o % 37]
    items = [(None, b"v" * 20, TS)] * len(offsets)
    batch = v2.encode(NONE, items, 0, 0, offsets)
    recs = _same(batch)
    assert isinstance(recs, list) and [r[0] for r in recs] == offsets


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches(codec: int) -> None:
    items = [(None, _value(i, 100), TS + i % 3) for i in range(2000)]
    buf = v2.encode(codec, items, 0, 0) + v2.encode(codec, items[:10], 2000, 0)
    recs = _same(buf)
    assert isinstance(recs, list) and len(recs) == 2010


def test_control_and_log_append_time_batches() -> None:
    items = [(None, b"v" * 30, TS + i % 5) for i in range(300)]
    control = bytearray(v2.encode(NONE, items, 0, 0))
    struct.pack_into(">h", control, 21, 0x20 | 0x10)
    _fix_crc(control)
    log_append = bytearray(v2.encode(NONE, items, 300, 0))
    struct.pack_into(">h", log_append, 21, 0x08)
    struct.pack_into(">q", log_append, 35, 4242)
    _fix_crc(log_append)
    recs = _same(bytes(control) + bytes(log_append))
    assert isinstance(recs, list) and [r[0] for r in recs] == list(range(300, 600))
    assert {r[1] for r in recs} == {4242}


def test_iter_records_over_windows() -> None:
    items = [(None, _value(i, 100), TS) for i in range(5000)]
    buf = b"".join(v2.encode(NONE, items[i : i + 1000], i, 0) for i in range(0, 5000, 1000))
    assert [tuple(r) for r in iter_records(bytearray(buf))] == _reference(buf)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(1, 400),  # how many records of this layout
            st.sampled_from([None, b"", b"k", b"key-xx"]),
            st.sampled_from([None, 0, 1, 7, 100, 130, 1000]),
            st.sampled_from([0, 1, 70, -3]),
            st.booleans(),  # headers
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD]),
)
def test_random_layout_mixes(groups: list[tuple[Any, ...]], codec: int) -> None:
    items: list[Any] = []
    for count, key, size, ts_step, headers in groups:
        for i in range(count):
            value = None if size is None else _value(i, size)
            item: tuple[Any, ...] = (key, value, TS + ts_step * i)
            if headers:
                item += ([("h", b"%d" % i)],)
            items.append(item)
    _same(v2.encode(codec, items, 7, 0) + v2.encode(codec, items[::-1], 7 + len(items), 0))


# --- what the general loop refuses, the fast path refuses ---------------------------------


def test_corrupted_byte_fails_the_crc() -> None:
    items = [(None, b"v" * 100, TS)] * 200
    batch = bytearray(v2.encode(NONE, items, 0, 0))
    batch[v2.RECORDS_OFFSET + 50 * 110 + 20] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_records(bytes(batch))


@pytest.mark.parametrize("key", [None, b"kk"])
def test_any_byte_changed_under_a_valid_crc(key: bytes | None) -> None:
    """A producer's malformed record (CRC valid): every single-byte change in the first records
    and in the middle of a run decodes (or fails) exactly as the general loop has it."""
    items = [(key, _value(i, 100), TS + i % 4) for i in range(200)]
    good = v2.encode(NONE, items, 0, 0)
    stride = (len(good) - v2.RECORDS_OFFSET - 64 * 1) // 200  # rough: enough to pick positions
    starts = [v2.RECORDS_OFFSET, v2.RECORDS_OFFSET + 2 * stride, v2.RECORDS_OFFSET + 100 * stride]
    outcomes = set()
    for start in starts:
        for pos in range(start, min(start + 20, len(good))):
            for new in {good[pos] ^ 0x01, good[pos] ^ 0x80, 0x00, 0x01, 0x7F, 0xFF} - {good[pos]}:
                batch = bytearray(good)
                batch[pos] = new
                _fix_crc(batch)
                got = _same(bytes(batch))
                outcomes.add(got is CorruptRecordError)
    assert outcomes == {True, False}  # some changes are harmless (a value byte), some corrupt


def test_truncated_and_overlong_records() -> None:
    items = [(None, b"v" * 10, TS)] * 100
    good = v2.encode(NONE, items, 0, 0)
    for cut in (1, 5, 13, 14, 100):
        batch = bytearray(good[:-cut])
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        _fix_crc(batch)
        assert _same(bytes(batch)) is CorruptRecordError
    # one record count too many, and too few
    for count in (99, 101):
        batch = bytearray(good)
        struct.pack_into(">i", batch, 57, count)
        _fix_crc(batch)
        assert _same(bytes(batch)) is CorruptRecordError


def test_read_uniform_declines_what_it_does_not_take() -> None:
    out: list[Any] = []
    headers = v2.encode(NONE, [(None, b"v", TS, [("h", b"")])] * 50, 0, 0)
    assert read_uniform(headers, v2.RECORDS_OFFSET, len(headers), 50, 0, TS, out) == (0, v2.RECORDS_OFFSET)
    few = v2.encode(NONE, [(None, b"v", TS)] * 5, 0, 0)
    assert read_uniform(few, v2.RECORDS_OFFSET, len(few), 5, 0, TS, out) == (0, v2.RECORDS_OFFSET)
    assert read_uniform(b"\x80" * 3, 0, 3, 10, 0, TS, out) == (0, 0)
    assert out == []


def test_views_with_legacy_entries_and_a_partial_tail() -> None:
    """A memoryview record set: v2 batches are read in place, and from the first v0/v1 message
    on the rest is copied; a partial trailing entry is dropped either way."""
    from hmbclient.protocol.records import encode_records

    v2_part = v2.encode(NONE, [(None, b"v" * 40, TS)] * 100, 0, 0)
    v1_part = encode_records(1, NONE, [(None, b"old", TS)] * 3, 100)
    tail = v2.encode(NONE, [(b"k", b"w" * 40, TS)] * 50, 103, 0)
    buf = v2_part + v1_part + tail + tail[:30]
    for source in (buf, bytearray(buf), memoryview(buf)):
        recs = decode_records(source)
        assert [r.offset for r in recs] == list(range(153))
        assert [r.value for r in recs[99:104]] == [b"v" * 40, b"old", b"old", b"old", b"w" * 40]


def test_large_records_read_in_place_from_a_view() -> None:
    """Records of 2 KiB and more are read straight from a memoryview: uniform runs, a layout
    change, headers (the general loop then copies the rest of the batch) all agree."""
    items: list[Any] = [(None, _value(i, 3000), TS + i) for i in range(40)]
    items += [(b"key", _value(i, 2500), TS, [("h", b"v")]) for i in range(10)]
    items += [(None, _value(i, 3000), TS) for i in range(40)]
    recs = _same(v2.encode(NONE, items, 0, 0))
    assert isinstance(recs, list) and [r[3] for r in recs] == [item[1] for item in items]


def _batch_of_raw_records(records: list[bytes], count: int | None = None) -> bytes:
    """A v2 batch (valid CRC) around hand-written record bytes."""
    body = b"".join(records)
    n = len(records) if count is None else count
    header = bytearray(v2.HEADER.pack(0, v2.MIN_SIZE + len(body), -1, 2, 0, 0, n - 1, TS, TS, -1, -1, -1, n))
    batch = header + body
    _fix_crc(batch)
    return bytes(batch)


def _raw_record(delta: int, key_field: bytes, value_field: bytes) -> bytes:
    rest = b"\x00" + b"\x00" + encode_varint(delta) + key_field + value_field + b"\x00"
    return encode_varint(len(rest)) + rest


@pytest.mark.parametrize(
    "key_field,value_field",
    [
        (b"\x81\x00", b"\x06abc"),  # a two-byte -1 key length: refused by the general loop
        (b"\x01", b"\x81\x00"),  # the same for the value
        (b"\x03", b"\x06abc"),  # -2
        (b"\x80\x00", b"\x06abc"),  # a two-byte 0: accepted by both
        (b"\x01", b"\x86\x00abc"),  # a two-byte 3
    ],
)
def test_non_canonical_length_varints(key_field: bytes, value_field: bytes) -> None:
    batch = _batch_of_raw_records([_raw_record(d, key_field, value_field) for d in range(40)])
    _same(batch)


def test_the_decoders_gc_pause_ends_on_every_path() -> None:
    """records.base.GcPaused: the cyclic GC is on again after a decode that returned records,
    one that stopped at a corrupt batch, and one whose records could not be built (a tail class
    that is no tuple); a GC the caller had turned off stays off."""
    import gc

    from hmbclient.protocol.records import encode_records

    good = bytes(v2.encode(NONE, [(b"k", b"v" * 10, TS)] * 50, 0, 0))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # CRC mismatch
    legacy = encode_records(1, NONE, [(b"k", b"v", TS)] * 5)

    assert gc.isenabled()
    assert len(decode_records(good)) == 50 and gc.isenabled()
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(bad))
    assert gc.isenabled()
    for buf in (good, legacy):
        with pytest.raises(TypeError):
            decode_records(buf, (int, ("t", 0)))
        assert gc.isenabled()
    gc.disable()
    try:
        decode_records(good)
        assert not gc.isenabled()
    finally:
        gc.enable()
