"""The records of ``__transaction_state`` (Kafka's TransactionLogKey / TransactionLogValue).

One record per transition of a transactional id, keyed by the id (the topic is compacted, so
the last record of an id is its state; a null value is its tombstone). Both key and value start
with an int16 version:

    key   v0 => version:int16 transactional_id:string
    value v0 => version:int16 producer_id:int64 producer_epoch:int16 transaction_timeout_ms:int32
                transaction_status:int8 transaction_partitions:[topic:string partition_ids:[int32]]
                (null when Empty) transaction_last_update_timestamp_ms:int64
                transaction_start_timestamp_ms:int64
    value v1 => the same fields in their flexible form (compact strings and arrays, a tagged
                section per struct) with tagged fields 0 previous_producer_id:int64 (-1),
                1 next_producer_id:int64 (-1), 2 client_transaction_version:int16 (0)

We write v0 (what Kafka writes until transaction.version 2 is enabled) and read both. An
unknown key version is reported as such (Kafka skips those records); an unknown value version,
a malformed key or value raises ProtocolError, so loading fails loudly instead of guessing.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from hmbclient.errors import ProtocolError
from hmbclient.protocol.types import (
    Array,
    FieldSpec,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    Struct,
    flexible,
)

from ..metadata import TRANSACTION_STATE_TOPIC
from .state import TxnMetadata, TxnState

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "KEY_VERSION",
    "TxnLogValue",
    "encode_key",
    "decode_key",
    "encode_value",
    "decode_value",
    "value_of",
    "metadata_of",
    "partition_for",
]

KEY_VERSION = 0
_VERSION = struct.Struct(">h")

_KEY_V0 = Struct("TransactionLogKey", [("transactional_id", String)])
_PARTITIONS = Array(("topic", String), ("partition_ids", Array(Int32)), nullable=True, name="transaction_partitions")
_FIELDS: list[FieldSpec] = [
    ("producer_id", Int64),
    ("producer_epoch", Int16),
    ("transaction_timeout_ms", Int32),
    ("transaction_status", Int8),
    ("transaction_partitions", _PARTITIONS),
    ("transaction_last_update_timestamp_ms", Int64),
    ("transaction_start_timestamp_ms", Int64),
]
_VALUE = {
    0: Struct("TransactionLogValue", _FIELDS),
    1: Struct(
        "TransactionLogValue",
        flexible(_FIELDS),
        tagged=[(0, "previous_producer_id", Int64, -1), (1, "next_producer_id", Int64, -1), (2, "client_transaction_version", Int16, 0)],
        flexible=True,
    ),
}


class TxnLogValue(NamedTuple):
    """A decoded value, whatever its version (v1's tagged fields at their defaults for v0)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: list[tuple[str, list[int]]] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def _version(data: Any, what: str) -> int:
    if data is None or len(data) < 2:
        raise ProtocolError(f"{TRANSACTION_STATE_TOPIC} {what}: no version")
    return int(_VERSION.unpack_from(data)[0])


def encode_key(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + _KEY_V0.encode(_KEY_V0.values(transactional_id))


def decode_key(data: Any) -> tuple[int, str | None]:
    """(version, transactional id); the id is None for a key version we do not know."""
    version = _version(data, "key")
    if version != KEY_VERSION:
        return version, None
    return version, _KEY_V0.decode(memoryview(data)[2:]).transactional_id


def encode_value(value: TxnLogValue, version: int = 0) -> bytes:
    schema = _VALUE.get(version)
    if schema is None:
        raise ValueError(f"{TRANSACTION_STATE_TOPIC} value version {version} is not one we write")
    return _VERSION.pack(version) + schema.encode(schema.build(**value._asdict()))


def decode_value(data: Any) -> TxnLogValue | None:
    """The value, or None for a tombstone. ProtocolError for an unknown version or bad bytes."""
    if data is None:
        return None
    version = _version(data, "value")
    schema = _VALUE.get(version)
    if schema is None:
        raise ProtocolError(f"{TRANSACTION_STATE_TOPIC} value version {version} is unknown")
    v = schema.decode(memoryview(data)[2:])
    parts = None if v.transaction_partitions is None else [(p.topic, list(p.partition_ids)) for p in v.transaction_partitions]
    fields = v._asdict()
    fields["transaction_partitions"] = parts
    return TxnLogValue(**{k: fields[k] for k in TxnLogValue._fields if k in fields})


def value_of(txn: TxnMetadata) -> TxnLogValue:
    """The record Kafka writes for ``txn`` (partitions null when Empty, grouped by topic)."""
    if txn.state is TxnState.EMPTY and txn.partitions:
        raise ValueError(f"{txn.transactional_id}: an Empty transaction has no partitions")
    parts: list[tuple[str, list[int]]] | None = None
    if txn.state is not TxnState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(p)
        parts = list(by_topic.items())
    return TxnLogValue(
        txn.producer_id,
        txn.producer_epoch,
        txn.timeout_ms,
        txn.state.id,
        parts,
        txn.last_update_ms,
        txn.start_ms,
        previous_producer_id=txn.previous_producer_id,
    )


def metadata_of(transactional_id: str, value: TxnLogValue) -> TxnMetadata:
    """The metadata a coordinator loads from a record (no pending transition, last epoch -1).

    Raises:
        ProtocolError: the status is not a transaction state.
    """
    try:
        state = TxnState.from_id(value.transaction_status)
    except ValueError as e:
        raise ProtocolError(f"{TRANSACTION_STATE_TOPIC} record of {transactional_id!r}: {e}") from None
    parts = frozenset() if state is TxnState.EMPTY else frozenset((t, p) for t, ps in value.transaction_partitions or () for p in ps)
    return TxnMetadata(
        transactional_id,
        value.producer_id,
        producer_epoch=value.producer_epoch,
        previous_producer_id=value.previous_producer_id,
        timeout_ms=value.transaction_timeout_ms,
        state=state,
        partitions=parts,
        start_ms=value.transaction_start_timestamp_ms,
        last_update_ms=value.transaction_last_update_timestamp_ms,
    )


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % n`` (``Math.abs``, with MIN_VALUE as 0):
    the ``__transaction_state`` partition whose leader coordinates ``transactional_id``."""
    h = 0
    data = transactional_id.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(2**31) else abs(h)) % num_partitions
