"""The broker-side entry points: assign_offsets, scan_entries, convert_records."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import kafka.record as kafka_record
import pytest

from hmbclient.errors import CorruptRecordError
from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Entry,
    assign_offsets,
    codecs,
    convert_records,
    decode_records,
    encode_records,
    legacy,
    max_magic_for_fetch,
    max_magic_for_produce,
    scan_entries,
    v2,
)

ITEMS = [(None, b"a", 100), (b"k", b"bb", 300), (b"", None, 200)]
ITEMS_H = [(None, b"a", 100, [("trace", b"1")]), (b"k", b"bb", 300, []), (b"", None, 200, [])]
CODECS = {
    0: [NONE, GZIP, SNAPPY, LZ4],
    1: [NONE, GZIP, SNAPPY, LZ4],
    2: [NONE, GZIP, SNAPPY, LZ4, ZSTD],
}
MAGIC_CODEC = [(m, c) for m, cs in CODECS.items() for c in cs]


def _view(recs: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.key, r.value) for r in recs]


# --- assign_offsets --------------------------------------------------------------------------


@pytest.mark.parametrize("magic,codec", MAGIC_CODEC)
def test_assign_offsets_every_format(magic: int, codec: int) -> None:
    produced = encode_records(magic, codec, ITEMS)  # a producer's set: offsets from 0
    new, count, last, max_ts, m = assign_offsets(produced, 1000)
    assert (count, last, m) == (3, 1002, magic)
    assert max_ts == (300 if magic else -1)
    recs = decode_records(new)
    assert _view(recs) == [(1000 + i, k, v) for i, (k, v, _) in enumerate(ITEMS)]
    entries, valid = scan_entries(new)
    assert valid == len(new)
    assert (entries[0].base_offset, entries[-1].last_offset) == (1000, 1002)
    if magic == 0 and codec != NONE:
        # the inner absolute offsets were rewritten: the wrapper was recompressed, new CRC
        assert new != produced
        (wrapper_crc,) = struct.unpack_from(">I", new, 12)
        assert wrapper_crc == zlib.crc32(new[16:]) & 0xFFFFFFFF
    elif magic == 2:
        assert new[8:] == produced[8:]  # only baseOffset changed; the CRC still holds
        assert struct.unpack_from(">q", new)[0] == 1000
    # an already-assigned set can be reassigned (the broker re-appending a replica's data)
    again = assign_offsets(new, 5)
    assert _view(decode_records(again[0])) == [(5 + i, k, v) for i, (k, v, _) in enumerate(ITEMS)]


def test_assign_offsets_mixed_magics_and_many_entries() -> None:
    buf = b"".join(
        [
            encode_records(2, NONE, ITEMS_H),
            encode_records(1, NONE, ITEMS),
            encode_records(0, GZIP, ITEMS),
            encode_records(2, SNAPPY, ITEMS_H),
        ]
    )
    new, count, last, max_ts, magic = assign_offsets(memoryview(buf), 40)
    assert (count, last, max_ts, magic) == (12, 51, 300, 2)
    recs = decode_records(new)
    assert [r.offset for r in recs] == list(range(40, 52))
    assert recs[0].headers == (("trace", b"1"),)
    assert [e.count for e in scan_entries(new)[0]] == [3, 1, 1, 1, 3, 3]


def test_assign_offsets_rewrites_odd_inner_relative_offsets() -> None:
    # A magic 1 wrapper whose inner offsets are not 0..n-1 (here 5, 9, 11): reassigned and
    # recompressed so the records get next_offset.. consecutively.
    inner, _ = legacy.write_messages(1, ITEMS, [5, 9, 11], 0)
    wrapper = legacy.build_wrapper(1, GZIP, 0, 300, None, codecs.compress(GZIP, inner, 1))
    new, count, last, _, _ = assign_offsets(wrapper, 70)
    assert (count, last) == (3, 72)
    assert [r.offset for r in decode_records(new)] == [70, 71, 72]


def test_assign_offsets_empty_and_errors() -> None:
    assert assign_offsets(b"", 9) == (b"", 0, 8, -1, -1)
    good = encode_records(2, NONE, ITEMS)
    with pytest.raises(CorruptRecordError):
        assign_offsets(good[:-1], 0)  # a partial entry is not allowed on append
    with pytest.raises(CorruptRecordError):
        assign_offsets(good + good[:11], 0)  # nor a truncated header
    # a batch whose lastOffsetDelta disagrees with its record count
    bad = bytearray(good)
    struct.pack_into(">i", bad, 23, 5)
    _fix_v2_crc(bad)
    with pytest.raises(CorruptRecordError):
        assign_offsets(bytes(bad), 0)
    # a batch whose records do not parse, although its CRC is right
    bad = bytearray(good)
    bad[61] = 0x7F  # first record's length varint: far too long
    _fix_v2_crc(bad)
    with pytest.raises(CorruptRecordError):
        assign_offsets(bytes(bad), 0)


def _fix_v2_crc(buf: bytearray) -> None:
    from crc32c import crc32c

    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))


# --- control batches -------------------------------------------------------------------------


def _control_batch(base_offset: int) -> bytes:
    """A COMMIT marker batch, as a transaction coordinator writes it."""
    b = bytearray(
        encode_records(
            2, NONE, [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 5)], base_offset
        )
    )
    (attrs,) = struct.unpack_from(">h", b, 21)
    struct.pack_into(">h", b, 21, attrs | 0x20 | 0x10)
    _fix_v2_crc(b)
    return bytes(b)


def test_control_batches_are_skipped_but_scanned() -> None:
    buf = encode_records(2, NONE, ITEMS, 0) + _control_batch(3) + encode_records(2, NONE, ITEMS, 4)
    assert [r.offset for r in decode_records(buf)] == [0, 1, 2, 4, 5, 6]
    entries, valid = scan_entries(buf)
    assert valid == len(buf)
    assert [(e.base_offset, e.last_offset, e.count) for e in entries] == [
        (0, 2, 3),
        (3, 3, 1),
        (4, 6, 3),
    ]
    # kafka-python agrees that the marker is a control batch
    batches = kafka_record.MemoryRecords(buf)
    batches.next_batch()
    assert batches.next_batch().is_control_batch
    # a transactional (non-control) batch is read normally
    assert convert_records(buf, 1) and [
        r.offset for r in decode_records(convert_records(buf, 1))
    ] == [0, 1, 2, 4, 5, 6]


# --- scan_entries ----------------------------------------------------------------------------


def test_scan_entries_fields() -> None:
    parts = [
        encode_records(0, NONE, ITEMS[:1], 0),
        encode_records(0, SNAPPY, ITEMS, 1),
        encode_records(1, NONE, ITEMS[1:2], 4),
        encode_records(1, LZ4, ITEMS, 5),
        encode_records(2, GZIP, ITEMS, 8),
    ]
    buf = b"".join(parts)
    entries, valid = scan_entries(buf)
    assert valid == len(buf)
    pos = [0]
    for p in parts:
        pos.append(pos[-1] + len(p))
    assert entries == [
        Entry(pos[0], len(parts[0]), 0, 0, 0, -1, 1),
        Entry(pos[1], len(parts[1]), 0, 1, 3, -1, 3),
        Entry(pos[2], len(parts[2]), 1, 4, 4, 300, 1),
        Entry(pos[3], len(parts[3]), 1, 5, 7, 300, 3),
        Entry(pos[4], len(parts[4]), 2, 8, 10, 300, 3),
    ]
    # recovery: a torn write at the end is cut off
    entries, valid = scan_entries(buf + parts[4][:30])
    assert valid == len(buf) and len(entries) == 5


def test_scan_entries_log_append_time_wrapper() -> None:
    inner, _ = legacy.write_messages(1, ITEMS, range(3), 0)
    wrapper = legacy.build_wrapper(1, GZIP | 0x08, 2, 999, None, codecs.compress(GZIP, inner, 1))
    (entry,), _ = scan_entries(wrapper)
    assert (entry.base_offset, entry.last_offset, entry.max_timestamp) == (0, 2, 999)
    assert [r.timestamp for r in decode_records(wrapper)] == [999, 999, 999]


def test_log_append_time_batch() -> None:
    b = bytearray(encode_records(2, NONE, ITEMS))
    (attrs,) = struct.unpack_from(">h", b, 21)
    struct.pack_into(">h", b, 21, attrs | 0x08)
    struct.pack_into(">q", b, 35, 12345)  # maxTimestamp = the broker's append time
    _fix_v2_crc(b)
    assert [r.timestamp for r in decode_records(bytes(b))] == [12345] * 3


# --- convert_records -------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("to_magic", [0, 1])
def test_convert_v2_down(codec: int, to_magic: int) -> None:
    # offsets with gaps, as a compacted log has them
    offsets = [100, 103, 104]
    buf = v2.encode(codec, ITEMS_H, 0, 0, offsets=offsets)
    out = convert_records(buf, to_magic)
    recs = decode_records(out)
    assert [(r.offset, r.key, r.value, r.headers) for r in recs] == [
        (o, k, v, ()) for o, (k, v, _, _) in zip(offsets, ITEMS_H, strict=True)
    ]
    assert [r.timestamp for r in recs] == ([100, 300, 200] if to_magic else [-1] * 3)
    entries, _ = scan_entries(out)
    assert {e.magic for e in entries} == {to_magic}
    want_codec = NONE if codec == ZSTD else codec
    attrs = out[17] if to_magic <= 1 else None
    assert attrs is not None and attrs & 7 == want_codec
    if want_codec in (NONE, GZIP) and not (to_magic == 0 and want_codec == LZ4):
        got = []
        mr = kafka_record.MemoryRecords(out)
        while mr.has_next():
            batch = mr.next_batch()
            assert batch.validate_crc()
            got += [(r.offset, r.key, r.value) for r in batch]
        assert got == [(r.offset, r.key, r.value) for r in recs]


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4])
def test_convert_v1_to_v0(codec: int) -> None:
    buf = encode_records(1, codec, ITEMS, 50)
    out = convert_records(buf, 0)
    assert _view(decode_records(out)) == _view(decode_records(buf))
    assert all(e.magic == 0 for e in scan_entries(out)[0])


def test_convert_returns_input_unchanged_when_nothing_to_do() -> None:
    buf = encode_records(1, NONE, ITEMS) + encode_records(0, GZIP, ITEMS, 3)
    assert convert_records(buf, 1) is buf
    assert convert_records(buf, 2) is buf
    mv = memoryview(buf)
    assert convert_records(mv, 1) is mv
    v2buf = encode_records(2, NONE, ITEMS)
    assert convert_records(v2buf, 2) is v2buf
    # a partial v2 batch at the end does not count as something to convert
    partial = buf + v2buf[:40]
    assert convert_records(partial, 1) is partial


def test_convert_mixed_keeps_lower_entries_and_drops_partial() -> None:
    a = encode_records(0, NONE, ITEMS, 0)
    b = encode_records(2, GZIP, ITEMS_H, 3)
    out = bytes(convert_records(a + b + b[:20], 1))
    assert out.startswith(a)
    assert [r.offset for r in decode_records(out)] == list(range(6))
    with pytest.raises(ValueError):
        convert_records(a, 3)


def test_magic_for_api_versions() -> None:
    assert [max_magic_for_fetch(v) for v in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [max_magic_for_produce(v) for v in range(5)] == [0, 0, 1, 2, 2]
