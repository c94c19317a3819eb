"""``__transaction_state`` records (broker/transaction/log.py) against byte vectors written by
hand with ``struct.pack`` from Kafka's TransactionLogKey.json / TransactionLogValue.json (no peer
library implements them), round trips from every state, and the coordinator partition of an id
against Java's ``String.hashCode`` computed here independently.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmbclient.broker.transaction.log import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    metadata_of,
    partition_for,
    value_of,
)
from hmbclient.broker.transaction.state import TxnMetadata, TxnState
from hmbclient.errors import ProtocolError


def i8(x: int) -> bytes:
    return struct.pack(">b", x)


def i16(x: int) -> bytes:
    return struct.pack(">h", x)


def i32(x: int) -> bytes:
    return struct.pack(">i", x)


def i64(x: int) -> bytes:
    return struct.pack(">q", x)


def string(s: str) -> bytes:
    b = s.encode()
    return i16(len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def cstring(s: str) -> bytes:
    b = s.encode()
    return uvarint(len(b) + 1) + b


VALUE = TxnLogValue(4001, 7, 60_000, TxnState.ONGOING.id, [("orders", [0, 2]), ("ü", [5])], 1_700_000_000_123, 1_700_000_000_000)
VALUE_V0 = (
    i16(0) + i64(4001) + i16(7) + i32(60_000) + i8(1)
    + i32(2) + string("orders") + i32(2) + i32(0) + i32(2) + string("ü") + i32(1) + i32(5)
    + i64(1_700_000_000_123) + i64(1_700_000_000_000)
)  # fmt: skip
VALUE_V1_TAGGED = VALUE._replace(previous_producer_id=4000, client_transaction_version=2)
VALUE_V1 = (
    i16(1) + i64(4001) + i16(7) + i32(60_000) + i8(1)
    + uvarint(3) + cstring("orders") + uvarint(3) + i32(0) + i32(2) + b"\x00" + cstring("ü") + uvarint(2) + i32(5) + b"\x00"
    + i64(1_700_000_000_123) + i64(1_700_000_000_000)
    + uvarint(2) + uvarint(0) + uvarint(8) + i64(4000) + uvarint(2) + uvarint(2) + i16(2)
)  # fmt: skip


def test_key_vector() -> None:
    assert encode_key("orders-0") == i16(0) + string("orders-0")
    assert decode_key(i16(0) + string("tx-ü")) == (0, "tx-ü")
    assert decode_key(i16(3) + b"whatever") == (3, None)  # an unknown key version: skipped by the loader
    with pytest.raises(ProtocolError):
        decode_key(b"\x00")


def test_value_v0_vector_both_ways() -> None:
    assert encode_value(VALUE) == VALUE_V0
    assert decode_value(VALUE_V0) == VALUE


def test_value_v1_vector_both_ways() -> None:
    assert encode_value(VALUE_V1_TAGGED, version=1) == VALUE_V1
    assert decode_value(VALUE_V1) == VALUE_V1_TAGGED
    # tagged fields at their defaults are not written
    plain = encode_value(VALUE, version=1)
    assert plain.endswith(i64(1_700_000_000_000) + b"\x00")
    assert decode_value(plain) == VALUE


def test_empty_has_null_partitions_and_tombstones_are_none() -> None:
    txn = TxnMetadata("t", 9, producer_epoch=2, timeout_ms=1000, state=TxnState.EMPTY, last_update_ms=5)
    data = encode_value(value_of(txn))
    assert data == i16(0) + i64(9) + i16(2) + i32(1000) + i8(0) + i32(-1) + i64(5) + i64(-1)
    assert metadata_of("t", decode_value(data)) == txn  # type: ignore[arg-type]
    assert decode_value(None) is None
    with pytest.raises(ValueError):
        value_of(TxnMetadata("t", 9, state=TxnState.EMPTY, partitions=frozenset({("a", 0)})))


def test_bad_values_raise_protocol_error() -> None:
    for bad in (b"", b"\x00", i16(2) + VALUE_V0[2:], VALUE_V0[:-1], VALUE_V0 + b"\x00"):
        with pytest.raises(ProtocolError):
            decode_value(bad)
    with pytest.raises(ProtocolError):
        metadata_of("t", VALUE._replace(transaction_status=9))
    with pytest.raises(ValueError):
        encode_value(VALUE, version=2)


_PARTS = st.frozensets(st.tuples(st.sampled_from(["a", "b", "tópic"]), st.integers(0, 99)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    state=st.sampled_from([s for s in TxnState if s not in (TxnState.PREPARE_EPOCH_FENCE,)]),
    parts=_PARTS,
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 32767),
    timeout=st.integers(1, 2**31 - 1),
    start=st.integers(-1, 2**50),
    update=st.integers(0, 2**50),
    version=st.sampled_from([0, 1]),
)
def test_every_state_round_trips(state: TxnState, parts: frozenset[tuple[str, int]], pid: int, epoch: int, timeout: int, start: int, update: int, version: int) -> None:
    if state is TxnState.EMPTY:
        parts = frozenset()
    txn = TxnMetadata("id", pid, producer_epoch=epoch, timeout_ms=timeout, state=state, partitions=parts, start_ms=start, last_update_ms=update)
    back = metadata_of("id", decode_value(encode_value(value_of(txn), version)))  # type: ignore[arg-type]
    assert back == txn


def _java_hash(s: str) -> int:
    h = 0
    for ch in s:
        cp = ord(ch)
        units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        for u in units:
            h = (h * 31 + u) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_partition_for_is_kafkas_abs_of_the_java_hash() -> None:
    assert _java_hash("polygenelubricants") == -(2**31)  # the classic: Math.abs would stay negative
    assert partition_for("polygenelubricants", 50) == 0
    neg = [s for s in (f"txn-{i}" for i in range(200)) if _java_hash(s) < 0]
    assert neg, "some ids hash negative"
    for s in [*neg[:20], "a", "orders-0", "✓-😀"]:
        assert partition_for(s, 50) == abs(_java_hash(s)) % 50
    # Math.abs, not a mask: they differ for a negative hash
    assert any(partition_for(s, 50) != (_java_hash(s) & 0x7FFFFFFF) % 50 for s in neg)
