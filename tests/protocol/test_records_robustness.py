"""Malformed input: partial trailing entries, CRC mismatches, and the fuzz invariant.

The invariant (as h11's fuzz harness puts it): any bytes either parse, or raise ProtocolError
(CorruptRecordError) -- or MessageSizeTooLargeError on the append path -- and never anything
else (struct.error, IndexError, zlib.error, UnicodeDecodeError, ...), and never hang.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.errors import CorruptRecordError, MessageSizeTooLargeError, ProtocolError
from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    assign_offsets,
    convert_records,
    decode_records,
    encode_records,
    iter_records,
    scan_entries,
)

ITEMS2 = [
    (
        b"k%d" % i if i % 2 else None,
        b"value %d" % i * (i + 1),
        1000 + i,
        [("h", b"x")] if i == 2 else [],
    )
    for i in range(5)
]
ITEMS1 = [it[:3] for it in ITEMS2]

# One fetch response's worth of entries: every magic, compressed and not.
PARTS = [
    encode_records(0, NONE, ITEMS1[:2], base_offset=0),
    encode_records(0, GZIP, ITEMS1, base_offset=2),
    encode_records(1, NONE, ITEMS1[:2], base_offset=7),
    encode_records(1, SNAPPY, ITEMS1, base_offset=9),
    encode_records(2, NONE, ITEMS2, base_offset=14),
    encode_records(2, LZ4, ITEMS2, base_offset=19),
    encode_records(2, ZSTD, ITEMS2, base_offset=24),
    encode_records(1, LZ4, ITEMS1, base_offset=29),
]
BUF = b"".join(PARTS)


def _top_level_boundaries(buf: bytes) -> list[int]:
    out = [0]
    pos = 0
    while pos + 12 <= len(buf):
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        pos += 12 + size
        out.append(pos)
    return out


BOUNDARIES = _top_level_boundaries(BUF)
ALL = decode_records(BUF)


def test_the_sample_is_what_we_think() -> None:
    assert [r.offset for r in ALL] == list(range(34))
    assert BOUNDARIES[-1] == len(BUF)


def test_partial_trailing_entry_is_dropped_at_every_cut() -> None:
    for cut in range(len(BUF) + 1):
        complete = max(b for b in BOUNDARIES if b <= cut)
        want = decode_records(BUF[:complete])
        assert decode_records(BUF[:cut]) == want
        assert list(iter_records(memoryview(BUF)[:cut])) == want
        entries, valid = scan_entries(BUF[:cut])
        assert valid == complete
        assert entries and entries[-1].position + entries[-1].size == complete or not entries


def test_iter_records_windows_do_not_change_results() -> None:
    big = b"".join(
        encode_records(2, NONE, [(None, b"x" * 3000, 1)] * 40, base_offset=i * 40)
        for i in range(30)
    )
    big += encode_records(1, NONE, [(None, b"y" * 400_000, 2)], base_offset=1200)  # > a window
    want = decode_records(big)
    assert len(want) == 1201
    assert list(iter_records(bytearray(big))) == want
    assert list(iter_records(memoryview(big)[: len(big) - 1])) == want[:-1]


def _crc_positions() -> list[tuple[int, int]]:
    """(start, end) of the CRC-covered bytes of every top-level entry."""
    spans = []
    for start, end in zip(BOUNDARIES, BOUNDARIES[1:], strict=False):
        magic = BUF[start + 16]
        spans.append((start + (21 if magic == 2 else 16), end))
    return spans


@pytest.mark.parametrize("index", range(len(PARTS)))
def test_flipped_bit_in_crc_covered_bytes_is_corrupt(index: int) -> None:
    start, end = _crc_positions()[index]
    for pos in (start, (start + end) // 2, end - 1):
        bad = bytearray(BUF)
        bad[pos] ^= 0x10
        with pytest.raises(CorruptRecordError):
            decode_records(bad)
        # the good entries before it still come out of iter_records, then the error
        it = iter_records(bytes(bad))
        got = []
        with pytest.raises(CorruptRecordError):
            for r in it:
                got.append(r)
        assert got == decode_records(BUF[: BOUNDARIES[index]])
        entries, valid = scan_entries(bad)
        assert valid == BOUNDARIES[index]
        assert len(entries) == index
        with pytest.raises(CorruptRecordError):
            assign_offsets(bad, 0)


def test_impossible_sizes_and_unknown_magic_are_corrupt() -> None:
    msg = PARTS[2]
    negative = msg[:8] + struct.pack(">i", -5) + msg[12:]
    tiny = msg[:8] + struct.pack(">i", 3) + msg[12:]
    magic9 = bytearray(PARTS[4])
    magic9[16] = 9
    for bad in (negative, tiny, bytes(magic9)):
        with pytest.raises(CorruptRecordError):
            decode_records(bad)
        assert scan_entries(bad) == ([], 0)
        with pytest.raises(CorruptRecordError):
            assign_offsets(bad, 0)


def test_scan_without_crc_check_accepts_bad_crc() -> None:
    bad = bytearray(PARTS[4])
    bad[-1] ^= 1
    assert scan_entries(bytes(bad))[1] == 0
    entries, valid = scan_entries(bytes(bad), verify_crc=False)
    assert valid == len(bad) and entries[0].count == 5


# --- fuzzing ---------------------------------------------------------------------------------


def fix_crcs(buf: bytearray) -> bytearray:
    """Recompute the CRC of every top-level entry (and of magic 0/1 entries regardless of
    their attributes), so mutations reach the parsers behind the CRC check."""
    pos = 0
    n = len(buf)
    while pos + 17 <= n:
        (size,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + 12 + size
        if size < 14 or end > n:
            break
        if buf[pos + 16] == 2 and size >= 49:
            struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : end])))
        elif buf[pos + 16] < 2:
            struct.pack_into(">I", buf, pos + 12, zlib.crc32(bytes(buf[pos + 16 : end])))
        pos = end
    return buf


def _all_entry_points(buf: Any) -> None:
    for fn in (
        decode_records,
        lambda b: list(iter_records(b)),
        lambda b: assign_offsets(b, 7, max_message_bytes=1 << 20),
        lambda b: convert_records(b, 0),
        lambda b: convert_records(b, 1),
    ):
        try:
            fn(buf)
        except (ProtocolError, MessageSizeTooLargeError):
            pass
    entries, valid = scan_entries(buf)  # never raises
    assert 0 <= valid <= len(buf)
    scan_entries(buf, verify_crc=False)


FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data: bytes) -> None:
    _all_entry_points(data)
    _all_entry_points(bytes(fix_crcs(bytearray(data))))


@st.composite
def mutated(draw: Any) -> bytes:
    base = bytearray(draw(st.sampled_from(PARTS + [BUF])))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 3))
        pos = draw(st.integers(0, len(base) - 1)) if base else 0
        if kind == 0 and base:
            base[pos] = draw(st.integers(0, 255))
        elif kind == 1 and base:
            del base[pos : pos + draw(st.integers(1, 8))]
        elif kind == 2:
            base[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif base:
            # varint-ish trouble: high bits set, or a length field set to an extreme
            base[pos] |= 0x80
    if draw(st.booleans()):
        fix_crcs(base)
    return bytes(base)


@FUZZ
@given(mutated())
def test_fuzz_mutated_record_sets(data: bytes) -> None:
    _all_entry_points(data)
    _all_entry_points(memoryview(data))
    _all_entry_points(bytearray(data))


def test_huge_record_count_with_valid_crc_is_corrupt_not_slow() -> None:
    bad = bytearray(PARTS[4])
    struct.pack_into(">i", bad, 57, 0x7FFFFFFF)
    fix_crcs(bad)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(bad))


def test_max_message_bytes() -> None:
    buf = encode_records(2, NONE, [(None, b"x" * 1000, 1)])
    assign_offsets(buf, 0, max_message_bytes=len(buf))
    with pytest.raises(MessageSizeTooLargeError):
        assign_offsets(buf, 0, max_message_bytes=len(buf) - 1)
    small = encode_records(1, NONE, [(None, b"x", 1), (None, b"y" * 500, 1)])
    with pytest.raises(MessageSizeTooLargeError):
        assign_offsets(small, 0, max_message_bytes=100)


def test_decoding_leaves_the_garbage_collector_as_it_found_it() -> None:
    import gc

    bad = bytearray(PARTS[4])
    bad[-1] ^= 1
    was = gc.isenabled()
    try:
        for state in (True, False):
            gc.enable() if state else gc.disable()
            decode_records(BUF)
            list(iter_records(memoryview(BUF)))
            with pytest.raises(CorruptRecordError):
                decode_records(bytes(bad))
            assert gc.isenabled() is state
    finally:
        gc.enable() if was else gc.disable()


@pytest.mark.parametrize(
    "index,byte",
    [(61, 0x03), (65, 0x03), (66, 0x03), (66, 0x83), (61, 0x81)],
    ids=["length -2", "key -2", "value -2", "value 2-byte negative", "length 2-byte negative"],
)
def test_negative_lengths_with_a_valid_crc_are_corrupt(index: int, byte: int) -> None:
    # one record: length attrs tsDelta offsetDelta key(null) valueLength(2) b"ab" headerCount
    good = encode_records(2, NONE, [(None, b"ab", 0)], timestamp_ms=0)
    assert good[61:] == bytes([0x10, 0, 0, 0, 0x01, 0x04]) + b"ab" + b"\x00"
    bad = bytearray(good)
    bad[index] = byte
    fix_crcs(bad)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(bad))
    with pytest.raises(CorruptRecordError):
        assign_offsets(bytes(bad), 0)
