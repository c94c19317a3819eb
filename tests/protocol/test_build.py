"""The one builder (``Struct.build`` / ``nested`` / ``row``) and the flexible-version layer
(compact types, tagged-field sections, ``flexible``), with hand-written golden bytes."""

from __future__ import annotations

import uuid

import pytest

from hmbclient.errors import ProtocolError
from hmbclient.net.versions import DIALECTS
from hmbclient.protocol.api.base import REQUESTS, RESPONSES, ApiKey, define
from hmbclient.protocol.api.consumer_group import NullableStruct
from hmbclient.protocol.types import (
    Array,
    CompactArray,
    CompactBytes,
    CompactNullableBytes,
    CompactNullableString,
    CompactRecords,
    CompactString,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
    Struct,
    Uuid,
    flexible,
    flexible_struct,
)

# -- building at a version from a superset of fields ----------------------------------------

_FETCH_FIELDS = dict(
    replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1000, isolation_level=1, session_id=0, session_epoch=-1,
    forgotten_topics_data=[], unknown_field=42,
    topics=[{"topic": "t", "partitions": [
        {"partition": 3, "fetch_offset": 7, "partition_max_bytes": 99, "current_leader_epoch": 5, "log_start_offset": 2, "x": 1},
    ]}],
)


@pytest.mark.parametrize("version", range(0, 11))
def test_build_fits_nested_dicts_to_every_fetch_version(version: int) -> None:
    cls = REQUESTS[(ApiKey.FETCH, version)]
    req = cls.build(**_FETCH_FIELDS)
    part = req.topics[0].partitions[0]
    assert req.topics[0].topic == "t"
    assert (part.partition, part.fetch_offset, part.partition_max_bytes) == (3, 7, 99)
    assert hasattr(part, "current_leader_epoch") == (version >= 9)
    assert hasattr(part, "log_start_offset") == (version >= 5)
    assert not hasattr(req, "unknown_field")
    assert getattr(req, "max_bytes", 1000) == 1000
    # what was built encodes and decodes to the same value
    assert cls.decode(cls(*req).encode()) == req


def test_build_takes_tuples_as_they_are_and_fills_defaults() -> None:
    cls = REQUESTS[(ApiKey.PRODUCE, 7)]
    req = cls.build(acks=1, timeout_ms=5, topics=[("t", [(0, b"r")])])
    assert req.transactional_id is None
    assert req.topics == [("t", [(0, b"r")])]
    # a dict entry beside a tuple entry is fitted, the tuple kept
    mixed = cls.build(acks=1, timeout_ms=5, topics=[("a", []), {"topic": "b", "partitions": [], "extra": 1}])
    assert mixed.topics[0] == ("a", [])
    assert tuple(mixed.topics[1]) == ("b", [])


def test_versions_build_and_message_build_are_the_same_builder() -> None:
    versions = DIALECTS["2.1"].initial_versions()
    assert versions is not None
    via_versions = versions.build(ApiKey.FETCH, **_FETCH_FIELDS)
    assert via_versions == REQUESTS[(ApiKey.FETCH, 10)].build(**_FETCH_FIELDS)


def test_nested_names_the_entry_struct_and_refuses_other_fields() -> None:
    resp = RESPONSES[(ApiKey.PRODUCE, 7)]
    part = resp.nested("topics", "partitions")
    assert part.names == ["partition", "error_code", "base_offset", "log_append_time", "log_start_offset"]
    assert resp.nested("topics", "partitions") is part
    with pytest.raises(KeyError):
        resp.nested("throttle_time_ms")
    with pytest.raises(KeyError):
        resp.nested("no_such_field")


@pytest.mark.parametrize("version", range(0, 11))
def test_row_equals_build_on_every_fetch_response_version(version: int) -> None:
    part = RESPONSES[(ApiKey.FETCH, version)].nested("topics", "partitions")
    names = ("partition", "error_code", "high_watermark", "last_stable_offset", "log_start_offset", "aborted_transactions", "records")
    values = (4, 0, 100, 90, 1, None, b"recs")
    assert part.row(*names)(*values) == part.build(**dict(zip(names, values, strict=True)))
    assert part.row(*names) is part.row(*names)
    # a row that names only some fields pads with the defaults
    assert part.row("partition")(4) == part.build(partition=4)


def test_row_of_a_one_field_struct() -> None:
    st = Struct("One", [("a", Int32, 9)])
    assert st.row("a", "b")(1, 2) == st.values(1)
    assert st.row("b")(2) == st.values(9)


# -- compact types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "value", "wire"),
    [
        (CompactString, "", b"\x01"),
        (CompactString, "hmb", b"\x04hmb"),
        (CompactNullableString, None, b"\x00"),
        (CompactNullableString, "é", b"\x03\xc3\xa9"),
        (CompactBytes, b"", b"\x01"),
        (CompactBytes, b"\x00\xff", b"\x03\x00\xff"),
        (CompactNullableBytes, None, b"\x00"),
        (CompactString, "x" * 200, b"\xc9\x01" + b"x" * 200),  # 201 as a two-byte varint
        (CompactArray(Int32), [1, 2], b"\x03\x00\x00\x00\x01\x00\x00\x00\x02"),
        (CompactArray(Int32), [], b"\x01"),
        (CompactArray(Int32, nullable=True), None, b"\x00"),
        (CompactArray(("a", Int16), ("s", CompactString)), [(1, "x")], b"\x02\x00\x01\x02x"),
    ],
)
def test_compact_types_golden_round_trip(t: object, value: object, wire: bytes) -> None:
    assert t.encode(value) == wire  # type: ignore[attr-defined]
    decoded, end = t.read(wire, 0)  # type: ignore[attr-defined]
    assert end == len(wire)
    assert (list(map(tuple, decoded)) if value and isinstance(value, list) and isinstance(value[0], tuple) else decoded) == value


def test_compact_records_read_as_a_view() -> None:
    value, end = CompactRecords.read(b"\x04abc", 0)
    assert isinstance(value, memoryview) and bytes(value) == b"abc" and end == 4


@pytest.mark.parametrize(
    ("t", "wire"),
    [
        (CompactString, b"\x00"),  # null where not nullable
        (CompactString, b"\x05ab"),  # runs past the buffer
        (CompactString, b"\x03\xff\xfe"),  # not UTF-8
        (CompactBytes, b"\x00"),
        (CompactBytes, b""),  # no length at all
        (CompactArray(Int32), b"\x05\x00\x00\x00\x01"),  # count 4 cannot fit
        (CompactArray(Int32), b"\xff\xff\xff\xff\x0f"),  # count over int32
        (CompactString, b"\x80\x80\x80\x80\x80\x01"),  # varint longer than 5 bytes
    ],
)
def test_compact_types_refuse_bad_input(t: object, wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        t.read(wire, 0)  # type: ignore[attr-defined]


def test_compact_types_refuse_wrong_values() -> None:
    with pytest.raises(ProtocolError):
        CompactString.encode(None)
    with pytest.raises(ProtocolError):
        CompactString.encode(5)
    with pytest.raises(ProtocolError):
        CompactBytes.encode("text")


# -- tagged fields ----------------------------------------------------------------------------


def _tagged() -> Struct:
    st = Struct("T", [("a", Int32)], tagged=[(3, "late", Int64, -1), (0, "note", CompactNullableString)])
    return st


def test_a_flexible_struct_without_tagged_values_writes_an_empty_section() -> None:
    st = _tagged()
    assert st.names == ["a", "note", "late"]
    assert st.values(a=1) == (1, None, -1)
    wire = b"\x00\x00\x00\x01\x00"
    assert b"".join(_write(st, st.values(a=1))) == wire
    assert st.decode(wire) == (1, None, -1)


def test_tagged_fields_golden_round_trip_in_tag_order() -> None:
    st = _tagged()
    value = st.build(a=1, late=7, note="abc", ignored=0)
    wire = b"\x00\x00\x00\x01" + b"\x02" + b"\x00\x04\x04abc" + b"\x03\x08" + b"\x00" * 7 + b"\x07"
    assert b"".join(_write(st, value)) == wire
    assert st.decode(wire) == value
    # the plain (reference) loops agree with the compiled ones
    out: list[bytes] = []
    st._write_fields(out, value)
    assert b"".join(out) == wire
    assert st._read_fields(wire, 0) == (value, len(wire))


def test_unknown_tags_are_skipped() -> None:
    st = Struct("T", [("a", Int32)], flexible=True)
    wire = b"\x00\x00\x00\x02" + b"\x02" + b"\x01\x02zz" + b"\x09\x00"
    assert st.decode(wire) == (2,)


@pytest.mark.parametrize(
    "section",
    [
        b"\x02\x03\x01\x00\x00\x01\x00",  # tag 3 then tag 0: not ascending
        b"\x02\x00\x01\x01\x00\x01\x01",  # tag 0 twice
        b"\x01\x00\x05\x04abc",  # size says 5, the value takes 4 (and runs out)
        b"\x01\x00\x02\x04abc",  # size says 2, the value needs 4
        b"\x05\x00",  # five fields cannot fit
        b"\x01\x00",  # truncated: no size
    ],
)
def test_bad_tagged_sections_are_refused(section: bytes) -> None:
    with pytest.raises(ProtocolError):
        _tagged().decode(b"\x00\x00\x00\x01" + section)


def test_flexible_turns_every_variable_type_compact() -> None:
    fields = flexible([
        ("name", String),
        ("maybe", NullableString),
        ("n", Int32),
        ("topics", Array(("topic", String), ("partitions", Array(Int32)), name="topics")),
    ])
    st = Struct("F", fields, flexible=True)
    assert [repr(t) for t in st.types] == ["CompactString", "CompactNullableString", "Int32", repr(st.types[3])]
    topics = st.types[3]
    assert isinstance(topics, CompactArray)
    item = topics.item
    assert isinstance(item, Struct) and item.flexible
    assert isinstance(item.types[1], CompactArray)
    value = st.build(name="n", maybe=None, n=5, topics=[{"topic": "t", "partitions": [1]}])
    wire = b"\x02n" + b"\x00" + b"\x00\x00\x00\x05" + b"\x02" + b"\x02t" + b"\x02\x00\x00\x00\x01" + b"\x00" + b"\x00"
    assert b"".join(_write(st, value)) == wire
    assert st.decode(wire) == value


def test_define_a_flexible_version_and_build_it_as_any_other() -> None:
    """ApiVersions v3 (KIP-511), the first flexible request a client sends: golden bytes as
    Kafka's generated code writes them. Registered only for the test."""
    key, version = int(ApiKey.API_VERSIONS), 3
    assert (key, version) not in REQUESTS
    try:
        req_cls, resp_cls = define(
            key, version,
            [("client_software_name", String), ("client_software_version", String)],
            [("error_code", Int16), ("api_keys", Array(("api_key", Int16), ("min_version", Int16), ("max_version", Int16))), ("throttle_time_ms", Int32)],
            flexible=True,
            response_tagged=[(0, "supported_features", Array(("name", String), ("min_version", Int16), ("max_version", Int16)), None)],
        )
        assert req_cls.FLEXIBLE and resp_cls.FLEXIBLE and not REQUESTS[(key, 2)].FLEXIBLE
        req = req_cls.build(client_software_name="hmb", client_software_version="1.0", throttle_time_ms=0)
        assert req.encode() == b"\x04hmb\x041.0\x00"
        resp = resp_cls.build(error_code=0, api_keys=[(18, 0, 3)], throttle_time_ms=0, unknown=1)
        wire = b"\x00\x00" + b"\x02" + b"\x00\x12\x00\x00\x00\x03\x00" + b"\x00\x00\x00\x00" + b"\x00"
        assert resp.encode() == wire
        assert resp_cls.decode(wire) == resp
        with_features = resp._replace(supported_features=[("x", 1, 2)])
        assert resp_cls.decode(with_features.encode()).supported_features == [("x", 1, 2)]
    finally:
        REQUESTS.pop((key, version), None)
        RESPONSES.pop((key, version), None)


def test_tagged_fields_need_a_flexible_version() -> None:
    with pytest.raises(TypeError):
        define(ApiKey.API_VERSIONS, 99, [], [], request_tagged=[(0, "x", Int32)])
    assert (int(ApiKey.API_VERSIONS), 99) not in REQUESTS


def _write(st: Struct, value: object) -> list[bytes]:
    out: list[bytes] = []
    st.write(out, value)
    return out


def test_build_fits_a_struct_field_given_as_a_dict() -> None:
    st = Struct("Outer", [("inner", [("a", Int32), ("b", Int32, 7)]), ("n", Int16)])
    value = st.build(inner={"a": 1, "not_here": 2}, n=3, other=4)
    assert value == ((1, 7), 3)
    assert st.decode(b"".join(_write(st, value))) == value


# -- flexible forms of every schema, fuzzed: a value or a ProtocolError, nothing else ---------------


def _seed(t: object, n: int) -> object:
    if isinstance(t, NullableStruct):
        return _seed(t.inner, n)
    if t is Uuid:
        return uuid.UUID(int=n)
    if isinstance(t, Struct):
        return t.values(*[_seed(ft, n) for _name, ft in t.fields])
    if isinstance(t, CompactArray):
        return [_seed(t.item, n) for _ in range(n)]
    if t in (CompactString, CompactNullableString):
        return "tö"
    if t in (CompactBytes, CompactNullableBytes, CompactRecords):
        return b"rec"
    return True if repr(t) == "Boolean" else 1


_FLEXIBLE = [
    flexible_struct(cls.SCHEMA, tagged=[(0, "tag_note", CompactNullableString), (7, "tag_ids", CompactArray(Int32))])
    for cls in sorted({*REQUESTS.values(), *RESPONSES.values()}, key=lambda c: c.__name__)
]


@pytest.mark.parametrize("schema", _FLEXIBLE, ids=lambda s: s.name)
def test_flexible_forms_round_trip_and_refuse_damage_cleanly(schema: Struct) -> None:
    value = _seed(schema, 2)
    value = value._replace(tag_note="n", tag_ids=[1, 2])  # type: ignore[attr-defined]
    wire = b"".join(_write(schema, value))
    assert schema.decode(wire) == value
    hostile = [b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80", b"\xfe\xff\xff\xff\x07", b"\x00", b"\x7f"]
    for i in range(len(wire)):
        for data in [wire[:i], *(wire[:i] + h + wire[i + len(h):] for h in hostile), wire[:i] + bytes([wire[i] ^ 0x40]) + wire[i + 1:]]:
            try:
                schema.decode(data)
            except ProtocolError:
                pass
