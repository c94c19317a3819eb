"""hypothesis round-trips for every request and response schema: ``decode(encode(x)) == x``.

Strategies are generated from our own Struct/Array/type tree, so a new schema is covered the
moment it is registered (the consumer embedded protocol's classes, which have no API key, are
listed here by hand). Each schema also runs explicit edge cases (@example): everything null
or empty, every integer at its minimum, every integer at its maximum with long strings, and
zero-length versus null record sets. The compiled fast paths are checked against the plain
field-by-field reference on the same values.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import (
    REQUESTS,
    RESPONSES,
    ApiKey,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hmbclient.protocol.api.consumer_group import NullableStruct
from hmbclient.protocol.types import (
    Array,
    Boolean,
    Bytes,
    CompactBytes,
    CompactNullableBytes,
    CompactNullableString,
    CompactRecords,
    CompactString,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableBytes,
    NullableString,
    Records,
    String,
    Struct,
    Type,
    UInt32,
    Uuid,
)

_BITS = {id(Int8): (8, True), id(Int16): (16, True), id(Int32): (32, True), id(Int64): (64, True), id(UInt32): (32, False)}


def _bounds(t: Type) -> tuple[int, int]:
    bits, signed = _BITS[id(t)]
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)


# Flexible versions' compact strings, bytes and record sets take the same values as their
# plain forms (compact arrays are Arrays already).
_PLAIN: dict[int, Type] = {
    id(CompactString): String,
    id(CompactNullableString): NullableString,
    id(CompactBytes): Bytes,
    id(CompactNullableBytes): NullableBytes,
    id(CompactRecords): Records,
}


def strategy(t: Type) -> st.SearchStrategy[Any]:
    """Values for any type in our schema tree."""
    t = _PLAIN.get(id(t), t)
    if isinstance(t, Struct):
        return st.tuples(*[strategy(ft) for _n, ft in t.fields]).map(lambda vals, t=t: t.values(*vals))
    if isinstance(t, Array):
        s = st.lists(strategy(t.item), max_size=4)
        return st.one_of(st.none(), s) if t.nullable else s
    if id(t) in _BITS:
        lo, hi = _bounds(t)
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo else 1]))
    if t is Boolean:
        return st.booleans()
    if t is String:
        return st.text(max_size=30)
    if t is NullableString:
        return st.one_of(st.none(), st.text(max_size=30))
    if t is Bytes:
        return st.binary(max_size=64)
    if t in (NullableBytes, Records):
        return st.one_of(st.none(), st.binary(max_size=64))
    if t is Uuid:
        return st.uuids(version=None) | st.just(uuid.UUID(int=0))
    if t is Float64:
        return st.floats(allow_nan=False)  # NaN != NaN: a round trip could not be compared
    if isinstance(t, NullableStruct):
        return st.one_of(st.none(), strategy(t.inner))
    raise AssertionError(f"no strategy for {t!r}")


def edge(t: Type, mode: str, depth: int = 0) -> Any:
    """Deterministic edge values. ``null``: nulls and empties; ``min``: integer minimums, one
    element per array, empty strings and bytes; ``max``: integer maximums, two elements per
    array, long strings, big byte strings."""
    t = _PLAIN.get(id(t), t)
    if isinstance(t, Struct):
        return t.values(*[edge(ft, mode, depth) for _n, ft in t.fields])
    if isinstance(t, Array):
        if mode == "null":
            return None if t.nullable else []
        return [edge(t.item, mode, depth + 1) for _ in range(1 if mode == "min" else 2)]
    if id(t) in _BITS:
        lo, hi = _bounds(t)
        return {"null": 0, "min": lo, "max": hi}[mode]
    if t is Boolean:
        return mode == "max"
    if t in (String, NullableString):
        if mode == "null":
            return None if t is NullableString else ""
        # 32767 bytes at the top level (the int16 limit), shorter deeper down
        return "" if mode == "min" else ("é" * 16383 + "x" if depth == 0 else "✓" * 50)
    if t in (Bytes, NullableBytes, Records):
        if mode == "null":
            return None if t is not Bytes else b""
        return b"" if mode == "min" else bytes(range(256)) * (64 if depth < 2 else 1)
    if t is Uuid:
        return uuid.UUID(int={"null": 0, "min": 1, "max": 2**128 - 1}[mode])
    if t is Float64:
        return {"null": 0.0, "min": -1.7976931348623157e308, "max": 1.7976931348623157e308}[mode]
    if isinstance(t, NullableStruct):
        return None if mode == "null" else edge(t.inner, mode, depth)
    raise AssertionError(f"no edge value for {t!r}")


def plain(t: Type, x: Any) -> Any:
    if isinstance(t, NullableStruct):
        return None if x is None else plain(t.inner, x)
    if isinstance(t, Struct):
        return tuple(plain(ft, fx) for (_n, ft), fx in zip(t.fields, x, strict=True))
    if isinstance(t, Array):
        return None if x is None else [plain(t.item, e) for e in x]
    if isinstance(x, memoryview | bytearray):
        return bytes(x)
    return x


CLASSES = (
    [REQUESTS[p] for p in sorted(REQUESTS)]
    + [RESPONSES[p] for p in sorted(RESPONSES)]
    + [c[v] for c in (ConsumerProtocolMemberMetadata, ConsumerProtocolMemberAssignment) for v in sorted(c)]
)


def _check(cls: Any, value: Any) -> None:
    schema = cls.SCHEMA
    data = cls(*value).encode()
    got = cls.decode(data)
    assert type(got) is cls
    assert plain(schema, got) == plain(schema, value)
    # the same bytes again, and from the dict form
    assert got.encode() == data
    assert schema.encode(value._asdict()) == data
    # compiled paths == the field-by-field reference
    out: list[Any] = []
    schema._write_fields(out, value)
    assert b"".join(out) == data
    ref, end = schema._read_fields(data, 0)
    assert end == len(data) and plain(schema, ref) == plain(schema, got)
    # every strict prefix is a ProtocolError, never a partial value (checked on a few cuts)
    for cut in {0, len(data) // 2, len(data) - 1} - {len(data)}:
        if cut >= 0:
            with pytest.raises(ProtocolError):
                cls.decode(data[:cut])


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_roundtrip(cls: Any) -> None:
    schema = cls.SCHEMA

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy(schema))
    @example(edge(schema, "null"))
    @example(edge(schema, "min"))
    @example(edge(schema, "max"))
    def check(value: Any) -> None:
        _check(cls, value)

    check()


def test_build_drops_fields_the_version_lacks() -> None:
    fields = dict(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1, session_id=0, session_epoch=-1, topics=[], forgotten_topics_data=[])
    for v in range(11):
        cls = REQUESTS[(ApiKey.FETCH, v)]
        req = cls.build(**fields)
        assert set(req._fields) <= set(fields)
        assert cls.decode(req.encode()) == req
    assert REQUESTS[(ApiKey.FETCH, 0)].build(**fields)._fields == ("replica_id", "max_wait_ms", "min_bytes", "topics")


def test_nested_dicts_encode_like_tuples() -> None:
    cls = REQUESTS[(ApiKey.PRODUCE, 3)]
    as_dicts = cls(transactional_id=None, acks=-1, timeout_ms=30000, topics=[{"topic": "t", "partitions": [{"partition": 0, "records": b"abc"}]}])
    as_tuples = cls(None, -1, 30000, [("t", [(0, b"abc")])])
    assert as_dicts.encode() == as_tuples.encode()
    got = cls.decode(as_dicts.encode())
    assert got.topics[0].partitions[0].partition == 0 and bytes(got.topics[0].partitions[0].records) == b"abc"


def test_records_decode_zero_copy() -> None:
    cls = RESPONSES[(ApiKey.FETCH, 4)]
    data = cls(throttle_time_ms=0, topics=[("t", [(0, 0, 10, 10, None, b"RECORDS")])]).encode()
    got = cls.decode(data)
    records = got.topics[0].partitions[0].records
    assert isinstance(records, memoryview) and records.obj is data and records == b"RECORDS"
