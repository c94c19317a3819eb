"""Primitive wire types and varints: round-trips (hypothesis), golden bytes from kafka-python's
independent codecs, and the error contract (ProtocolError, never anything else)."""

from __future__ import annotations

import io
import struct
from array import array

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka.protocol.schemas.fields.codecs.types import UnsignedVarInt32 as KpUVarInt32
from kafka.protocol.schemas.fields.codecs.types import VarInt32 as KpVarInt32
from kafka.protocol.schemas.fields.codecs.types import VarInt64 as KpVarInt64
from kafka.record.util import decode_varint as kp_decode_varint
from kafka.record.util import encode_varint as kp_encode_varint

from hmbclient.errors import ProtocolError
from hmbclient.protocol.types import (
    Array,
    Boolean,
    Bytes,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableBytes,
    NullableString,
    Records,
    String,
    Struct,
    UInt32,
    UnsignedVarInt,
    VarInt,
    VarLong,
    decode_unsigned_varint,
    decode_varint,
    encode_unsigned_varint,
    encode_varint,
    zigzag_decode,
    zigzag_encode,
)

I64 = st.integers(-(2**63), 2**63 - 1)
FIXED = [(Int8, 8, True), (Int16, 16, True), (Int32, 32, True), (Int64, 64, True), (UInt32, 32, False)]


def _range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)


# --- fixed-width integers ----------------------------------------------------------------------


@pytest.mark.parametrize("t,bits,signed", FIXED, ids=lambda x: repr(x) if not isinstance(x, int | bool) else str(x))
def test_fixed_ints_roundtrip_and_bounds(t, bits: int, signed: bool) -> None:
    lo, hi = _range(bits, signed)
    fmt = ">" + {8: "b", 16: "h", 32: "i" if signed else "I", 64: "q"}[bits]

    @settings(max_examples=60, deadline=None)
    @given(st.integers(lo, hi))
    @example(lo)
    @example(hi)
    @example(0)
    @example(-1 if signed else 1)
    def check(n: int) -> None:
        data = t.encode(n)
        assert data == struct.pack(fmt, n)
        assert t.read(data, 0) == (n, bits // 8)
        assert t.read(b"\x00" + data, 1) == (n, 1 + bits // 8)

    check()
    for bad in (lo - 1, hi + 1, None, 1.5, "1"):
        with pytest.raises(ProtocolError):
            t.encode(bad)
    for cut in range(bits // 8):
        with pytest.raises(ProtocolError):
            t.read(b"\x01" * cut, 0)


def test_boolean() -> None:
    assert Boolean.encode(True) == b"\x01" and Boolean.encode(False) == b"\x00"
    assert Boolean.encode(5) == b"\x01"
    assert Boolean.read(b"\x00", 0) == (False, 1)
    for b in (1, 2, 0x80, 0xFF):  # any non-zero byte is true, as in Kafka
        assert Boolean.read(bytes([b]), 0) == (True, 1)
    with pytest.raises(ProtocolError):
        Boolean.read(b"", 0)


# --- strings and bytes -------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
@example("")
@example("tópic-ünïcode-✓ \x00 \U0001f600")
@example("é" * 16383)  # 32766 bytes, just under the int16 limit
def test_string_roundtrip(s: str) -> None:
    data = String.encode(s)
    raw = s.encode("utf-8")
    assert data == struct.pack(">h", len(raw)) + raw
    assert String.read(data, 0) == (s, len(data))
    assert NullableString.read(memoryview(data), 0) == (s, len(data))


def test_string_edges() -> None:
    assert NullableString.encode(None) == b"\xff\xff"
    assert NullableString.read(b"\xff\xff", 0) == (None, 2)
    assert String.encode(b"raw-utf8") == b"\x00\x08raw-utf8"
    assert String.encode("x" * 32767)[:2] == b"\x7f\xff"
    bad = [
        (String.read, b"\xff\xff"),  # null in a non-nullable string
        (NullableString.read, b"\xff\xfe"),  # -2
        (String.read, b"\x80\x00"),  # -32768
        (String.read, b"\x00\x05abc"),  # runs past the end
        (String.read, b"\x00"),  # truncated length
        (String.read, b"\x00\x02\xc3\x28"),  # not UTF-8
        (String.read, b"\x00\x01\xff"),
    ]
    for read, data in bad:
        with pytest.raises(ProtocolError):
            read(data, 0)
    for value in ("x" * 32768, None, 5, 1.0, ["a"]):
        with pytest.raises(ProtocolError):
            String.encode(value)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
@example(b"")
@example(b"\x00" * 70000)
def test_bytes_roundtrip(b: bytes) -> None:
    for t in (Bytes, NullableBytes, Records):
        data = t.encode(b)
        assert data == struct.pack(">i", len(b)) + b
        value, end = t.read(data, 0)
        assert end == len(data) and bytes(value) == b
    assert isinstance(Bytes.read(Bytes.encode(b), 0)[0], bytes)


def test_bytes_edges() -> None:
    assert NullableBytes.encode(None) == b"\xff\xff\xff\xff"
    assert Records.encode(None) == b"\xff\xff\xff\xff"
    assert NullableBytes.read(b"\xff\xff\xff\xff", 0) == (None, 4)
    assert Records.read(b"\xff\xff\xff\xff", 0) == (None, 4)
    # Records decode zero-copy: a view of the caller's buffer
    buf = b"\x00\x00\x00\x03abc"
    view, _ = Records.read(buf, 0)
    assert isinstance(view, memoryview) and view.obj is buf and view == b"abc"
    # a memoryview of wider items is counted in bytes
    ints = array("i", [1, 2, 3])
    data = Bytes.encode(memoryview(ints))
    assert data[:4] == struct.pack(">i", 3 * ints.itemsize) and data[4:] == ints.tobytes()
    assert Bytes.encode(bytearray(b"xy")) == b"\x00\x00\x00\x02xy"
    for read, data in [
        (Bytes.read, b"\xff\xff\xff\xff"),  # null in non-nullable bytes
        (NullableBytes.read, b"\xff\xff\xff\xfe"),
        (Records.read, b"\x80\x00\x00\x00"),
        (Bytes.read, b"\x7f\xff\xff\xff" + b"x" * 10),  # 2 GiB claimed, 10 bytes present
        (Bytes.read, b"\x00\x00"),
    ]:
        with pytest.raises(ProtocolError):
            read(data, 0)
    for value in (None, "text", 5):
        with pytest.raises(ProtocolError):
            Bytes.encode(value)


# --- varints -----------------------------------------------------------------------------------


def _kp_varint(n: int) -> bytes:
    out = bytearray()
    kp_encode_varint(n, out.append)
    return bytes(out)


GOLDEN_VARINTS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (63, b"\x7e"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (150, b"\xac\x02"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
    (-(2**63), b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize("n,data", GOLDEN_VARINTS)
def test_varint_golden(n: int, data: bytes) -> None:
    assert encode_varint(n) == data == _kp_varint(n)
    assert decode_varint(data, 0) == (n, len(data))
    assert VarLong.encode(n) == data
    assert VarLong.read(data, 0) == (n, len(data))


@settings(max_examples=300, deadline=None)
@given(I64)
@example(0)
@example(2**63 - 1)
@example(-(2**63))
@example(2**31)
@example(-(2**31) - 1)
def test_varint_roundtrip_matches_kafka_python(n: int) -> None:
    data = encode_varint(n)
    assert data == _kp_varint(n) == KpVarInt64.encode(n)
    assert 1 <= len(data) <= 10
    assert decode_varint(b"\xaa" + data + b"\x00", 1) == (n, 1 + len(data))
    assert kp_decode_varint(data, 0) == (n, len(data))
    assert VarLong.read(data, 0) == (n, len(data))
    assert zigzag_decode(zigzag_encode(n)) == n
    assert 0 <= zigzag_encode(n) < 2**64


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1))
@example(2**31 - 1)
@example(-(2**31))
def test_varint32_matches_kafka_python(n: int) -> None:
    data = VarInt.encode(n)
    assert data == KpVarInt32.encode(n)
    assert len(data) <= 5
    assert VarInt.read(data, 0) == (n, len(data))
    assert KpVarInt32.decode(io.BytesIO(data)) == n


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
@example(0)
@example(127)
@example(128)
@example(2**32 - 1)
def test_unsigned_varint_matches_kafka_python(n: int) -> None:
    data = UnsignedVarInt.encode(n)
    assert data == encode_unsigned_varint(n)
    if n < 2**31:  # kafka-python's UnsignedVarInt32.encode goes through a signed 32-bit zigzag
        assert data == KpUVarInt32.encode(n)
    assert UnsignedVarInt.read(data, 0) == (n, len(data))
    assert decode_unsigned_varint(data, 0) == (n, len(data))


def test_varint_errors() -> None:
    bad = [
        b"",  # nothing
        b"\x80",  # truncated
        b"\xff" * 9,  # truncated 10-byte
        b"\xff" * 10 + b"\x01",  # 11 bytes
        b"\xff" * 9 + b"\x02",  # 10 bytes but 65 bits
        b"\x80" * 9 + b"\x7f",  # 10 bytes, 70 bits
    ]
    for data in bad:
        with pytest.raises(ProtocolError):
            decode_varint(data, 0)
        with pytest.raises(ProtocolError):
            VarLong.read(data, 0)
    for data in (b"\xff\xff\xff\xff\x1f", b"\xff\xff\xff\xff\xff\x01", b"\x80\x80"):
        with pytest.raises(ProtocolError):
            VarInt.read(data, 0)  # over 32 bits, over 5 bytes, truncated
        with pytest.raises(ProtocolError):
            UnsignedVarInt.read(data, 0)
    for t, value in [(VarInt, 2**31), (VarInt, -(2**31) - 1), (VarLong, 2**63), (UnsignedVarInt, -1), (UnsignedVarInt, 2**32), (VarInt, None), (VarLong, "1")]:
        with pytest.raises(ProtocolError):
            t.encode(value)
    for n in (2**63, -(2**63) - 1):
        with pytest.raises(ProtocolError):
            encode_varint(n)
    with pytest.raises(ProtocolError):
        encode_unsigned_varint(-1)


# --- arrays and structs ------------------------------------------------------------------------


def test_array_basics() -> None:
    a, na = Array(Int32), Array(Int32, nullable=True)
    assert a.encode([1, -1]) == b"\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff"
    assert a.encode([]) == a.encode(None) == b"\x00\x00\x00\x00"  # null -> empty if not nullable
    assert na.encode(None) == b"\xff\xff\xff\xff"
    assert na.read(b"\xff\xff\xff\xff", 0) == (None, 4)
    assert a.read(b"\xff\xff\xff\xff", 0) == ([], 4)  # lenient: null in a non-nullable position
    assert a.read(a.encode(range(300)), 0) == (list(range(300)), 4 + 1200)
    s = Array(Array(String), nullable=True)
    v = [["a", ""], [], ["✓"]]
    assert s.read(s.encode(v), 0)[0] == v
    for data in (b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00", b"\x00\x00", b"\x00\x00\x00\x02\x00\x00\x00\x01"):
        with pytest.raises(ProtocolError):
            a.read(data, 0)
    for value in (5, [1, "x"], [2**31]):
        with pytest.raises(ProtocolError):
            a.encode(value)


def test_array_hostile_count_is_rejected_before_looping() -> None:
    for t in (Array(Int32), Array(String), Array(("a", Int8), ("b", Array(Int8)))):
        with pytest.raises(ProtocolError, match="cannot fit"):
            t.read(b"\x7f\xff\xff\xff" + b"\x00" * 64, 0)
    empty = Struct("Empty", [])
    with pytest.raises(ProtocolError):  # zero-width elements cannot make us loop 2^31 times
        Array(empty).read(b"\x7f\xff\xff\xff", 0)


def test_struct_forms_and_errors() -> None:
    s = Struct("S", [("a", Int16), ("b", NullableString), ("c", Array(("x", Int8), ("y", Boolean))), ("d", Int64)])
    v = s.values(a=1, b=None, c=[(1, True), {"x": -1, "y": False}], d=-5)
    data = s.encode(v)
    assert s.encode((1, None, [(1, True), (-1, False)], -5)) == data
    assert s.encode({"a": 1, "c": [(1, True), (-1, False)], "d": -5}) == data  # b defaults to None
    got = s.decode(data)
    assert got == (1, None, [(1, True), (-1, False)], -5) and got.c[1].y is False
    # compiled and reference paths agree
    out: list = []
    s._write_fields(out, v)
    assert b"".join(out) == data
    assert s._read_fields(data, 0) == s.read(data, 0)
    assert s.decode(data + b"xx", exact=False) == got
    with pytest.raises(ProtocolError, match="trailing"):
        s.decode(data + b"x")
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            s.decode(data[:cut])
    for value in ((1, None, []), (1, None, [], 2, 3), {"a": 1, "zz": 2}, 7, (1, None, [], None), (2**15, None, [], 0)):
        with pytest.raises(ProtocolError):
            s.encode(value)
    assert Struct("E", []).decode(b"") == ()
