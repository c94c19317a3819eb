"""Fuzz invariant (h11 style): whatever bytes arrive, the codec either decodes them or raises
ProtocolError - never struct.error, IndexError, UnicodeDecodeError, TypeError, ValueError,
MemoryError, a hang, or an allocation past the frame.

Inputs: random bytes, and valid encodings of every request/response class (and of the
consumer embedded protocol's metadata and assignment) mutated (bit flips,
hostile 32/16-bit values such as 0x7fffffff counts and lengths, truncation, insertion, deletion,
duplication), fed to every ``decode`` and, framed and split at random points, to
``ClientConnection`` and ``ServerConnection``. Bounded example counts keep the file fast.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import (
    REQUESTS,
    RESPONSES,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
    decode_member_assignment,
    decode_member_metadata,
)
from hmbclient.protocol.api.consumer_group import NullableStruct
from hmbclient.protocol.frame import NEED_DATA, ClientConnection, ServerConnection, encode_request
from hmbclient.protocol.types import (
    Array,
    Boolean,
    Bytes,
    CompactBytes,
    CompactNullableBytes,
    CompactNullableString,
    CompactRecords,
    CompactString,
    NullableBytes,
    NullableString,
    Records,
    String,
    Struct,
    Type,
    Uuid,
)

pytestmark = pytest.mark.timeout(120)

CLASSES = (
    [REQUESTS[p] for p in sorted(REQUESTS)]
    + [RESPONSES[p] for p in sorted(RESPONSES)]
    + [c[v] for c in (ConsumerProtocolMemberMetadata, ConsumerProtocolMemberAssignment) for v in sorted(c)]
)
HOSTILE32 = [0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0xFFFFFFFE, 0x00FFFFFF, 0x00010000]
HOSTILE16 = [0x7FFF, 0xFFFF, 0x8000, 0xFFFE]
# the ones that matter most for counts and lengths, for the exhaustive (every offset) pass
SWEEP32 = [0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0x00FFFFFF]
SWEEP16 = [0x7FFF, 0x8000]


# Flexible versions' compact strings, bytes and record sets take the same values as their
# plain forms (compact arrays are Arrays already).
_PLAIN: dict[int, Type] = {
    id(CompactString): String,
    id(CompactNullableString): NullableString,
    id(CompactBytes): Bytes,
    id(CompactNullableBytes): NullableBytes,
    id(CompactRecords): Records,
}


def seed_value(t: Type, n: int) -> Any:
    """A valid value with ``n`` elements in every array (so every nested field is present)."""
    t = _PLAIN.get(id(t), t)
    if isinstance(t, Struct):
        return t.values(*[seed_value(ft, n) for _n, ft in t.fields])
    if isinstance(t, Array):
        return [seed_value(t.item, n) for _ in range(n)]
    if isinstance(t, NullableStruct):
        return seed_value(t.inner, n)
    if t is Uuid:
        return uuid.UUID(int=0x0123456789ABCDEF + n)
    if t is Boolean:
        return True
    if t in (String, NullableString):
        return "tö"
    if t in (Bytes, NullableBytes, Records):
        return b"rec"
    return 1


SEEDS = {cls: [cls.SCHEMA.encode(seed_value(cls.SCHEMA, n)) for n in (1, 2)] for cls in CLASSES}


def must_decode_or_protocol_error(cls: Any, data: bytes) -> None:
    try:
        cls.decode(data)
    except ProtocolError:
        pass


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "int32", "int16", "truncate", "insert", "delete", "dup"]))
        i = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "int32" and len(data) >= 4:
            i = min(i, len(data) - 4)
            data[i : i + 4] = struct.pack(">I", draw(st.sampled_from(HOSTILE32)))
        elif op == "int16" and len(data) >= 2:
            i = min(i, len(data) - 2)
            data[i : i + 2] = struct.pack(">H", draw(st.sampled_from(HOSTILE16)))
        elif op == "truncate":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "dup":
            data[i:i] = data[i : i + draw(st.integers(1, 16))]
    return bytes(data)


def _inputs(cls: Any) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=64), st.sampled_from(SEEDS[cls]).flatmap(mutated))


# --- every decode ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_decode_random_and_mutated(cls: Any) -> None:
    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(_inputs(cls))
    def check(data: bytes) -> None:
        must_decode_or_protocol_error(cls, data)

    check()


@pytest.mark.parametrize("decode", [decode_member_metadata, decode_member_assignment], ids=lambda f: f.__name__)
def test_consumer_protocol_version_dispatch(decode: Any) -> None:
    """The embedded protocol's decoders pick a class from the first two bytes (any version,
    newer ones read leniently): seeds of every class, mutated, still decode or fail cleanly."""
    seeds = [seed for cls in CLASSES if not hasattr(cls, "API_KEY") for seed in SEEDS[cls]]

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.one_of(st.binary(max_size=64), st.sampled_from(seeds).flatmap(mutated)))
    def check(data: bytes) -> None:
        try:
            decode(data)
        except ProtocolError:
            pass

    check()


def test_decode_hostile_values_at_every_offset_fast_and_bounded() -> None:
    """Every 4-byte and 2-byte window of every seed overwritten with hostile counts/lengths:
    each decode ends (ProtocolError or a value) quickly and allocates about nothing."""
    slowest = 0.0
    tracemalloc.start()
    try:
        for cls in CLASSES:
            seed = SEEDS[cls][0]
            for i in range(len(seed)):
                variants = [seed[:i]]
                if i + 4 <= len(seed):
                    variants += [seed[:i] + struct.pack(">I", h) + seed[i + 4 :] for h in SWEEP32]
                if i + 2 <= len(seed):
                    variants += [seed[:i] + struct.pack(">H", h) + seed[i + 2 :] for h in SWEEP16]
                for data in variants:
                    tracemalloc.reset_peak()
                    base = tracemalloc.get_traced_memory()[0]
                    t0 = time.perf_counter()
                    must_decode_or_protocol_error(cls, data)
                    slowest = max(slowest, time.perf_counter() - t0)
                    peak = tracemalloc.get_traced_memory()[1] - base
                    assert peak < 64 * 1024, f"{cls.__name__} allocated {peak} bytes decoding {len(data)}"
    finally:
        tracemalloc.stop()
    assert slowest < 1.0, f"a {slowest:.3f}s decode: a hostile count made us loop"


def test_huge_array_count_in_small_buffer_is_rejected_quickly() -> None:
    for cls in CLASSES:
        schema = cls.SCHEMA
        for idx, (_name, t) in enumerate(schema.fields):
            if not isinstance(t, Array):
                continue
            # everything before this field from a valid value, then a 2^31-1 count, then 64 bytes
            value = seed_value(schema, 1)
            prefix: list[Any] = []
            for ft, fv in zip(schema.types[:idx], value[:idx], strict=True):
                ft.write(prefix, fv)
            data = b"".join(prefix) + b"\x7f\xff\xff\xff" + b"\x00" * 64
            t0 = time.perf_counter()
            with pytest.raises(ProtocolError):
                cls.decode(data)
            assert time.perf_counter() - t0 < 0.1


# --- the connections ---------------------------------------------------------------------------


def _split(draw: st.DrawFn, stream: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    parts, prev = [], 0
    for c in [*cuts, len(stream)]:
        parts.append(stream[prev:c])
        prev = c
    return parts


@st.composite
def server_stream(draw: st.DrawFn) -> list[bytes]:
    frames = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["valid", "mutated_body", "mutated_frame", "junk"]))
        cls = draw(st.sampled_from([REQUESTS[p] for p in sorted(REQUESTS)]))
        req = cls.decode(SEEDS[cls][0])
        frame = b"".join(encode_request(req, draw(st.integers(-(2**31), 2**31 - 1)), draw(st.one_of(st.none(), st.text(max_size=8)))))
        if kind == "mutated_body":
            body = draw(mutated(frame[4:]))
            frame = struct.pack(">i", len(body)) + body
        elif kind == "mutated_frame":
            frame = draw(mutated(frame))
        elif kind == "junk":
            frame = draw(st.binary(max_size=40))
        frames.append(frame)
    return _split(draw, b"".join(frames))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(server_stream())
def test_server_connection_fuzz(chunks: list[bytes]) -> None:
    server = ServerConnection(max_frame_bytes=1 << 16)
    dead: ProtocolError | None = None
    for chunk in chunks:
        try:
            server.receive_data(chunk)
            while server.next_request() is not NEED_DATA:
                pass
        except ProtocolError as e:
            dead = e
            break
    if dead is not None:  # stays failed
        with pytest.raises(ProtocolError):
            server.next_request()
        with pytest.raises(ProtocolError):
            server.receive_data(b"\x00")


@st.composite
def client_case(draw: st.DrawFn) -> tuple[list[Any], list[bytes]]:
    reqs = [REQUESTS[p] for p in draw(st.lists(st.sampled_from(sorted(REQUESTS)), min_size=1, max_size=3))]
    frames = []
    for cid, cls in enumerate(reqs):
        body = SEEDS[cls.RESPONSE_TYPE][0]
        kind = draw(st.sampled_from(["valid", "mutated_body", "wrong_cid", "mutated_frame", "junk"]))
        if kind == "mutated_body":
            body = draw(mutated(body))
        if kind == "wrong_cid":
            cid = draw(st.integers(-(2**31), 2**31 - 1))
        frame = struct.pack(">ii", len(body) + 4, cid) + body
        if kind == "mutated_frame":
            frame = draw(mutated(frame))
        elif kind == "junk":
            frame = draw(st.binary(max_size=40))
        frames.append(frame)
    return reqs, _split(draw, b"".join(frames))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(client_case())
def test_client_connection_fuzz(case: tuple[list[Any], list[bytes]]) -> None:
    reqs, chunks = case
    client = ClientConnection(max_frame_bytes=1 << 16)
    for cls in reqs:
        client.send_request(cls.decode(SEEDS[cls][0]))
    dead = False
    for chunk in chunks:
        try:
            client.receive_data(chunk)
            while (ev := client.next_response()) is not NEED_DATA:
                cid, resp = ev
                assert isinstance(resp, tuple)
        except ProtocolError:
            dead = True
            break
    if dead:
        for call in (client.next_response, lambda: client.receive_data(b"x"), lambda: client.send_request(reqs[0].decode(SEEDS[reqs[0]][0]))):
            with pytest.raises(ProtocolError):
                call()


def test_huge_frame_size_fails_at_once_without_allocating() -> None:
    tracemalloc.start()
    try:
        for size in (2**31 - 1, 2**30, (100 << 20) + 1, -1, -(2**31)):
            for conn in (ServerConnection(), _client_waiting()):
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                t0 = time.perf_counter()
                conn.receive_data(struct.pack(">i", size) + b"\x00" * 16)
                with pytest.raises(ProtocolError, match="max_frame_bytes"):
                    conn.next_request() if isinstance(conn, ServerConnection) else conn.next_response()
                assert time.perf_counter() - t0 < 0.1
                assert tracemalloc.get_traced_memory()[1] - base < 64 * 1024
    finally:
        tracemalloc.stop()


def _client_waiting() -> ClientConnection:
    client = ClientConnection()
    cls = REQUESTS[(3, 0)]
    client.send_request(cls(topics=[]))
    return client
