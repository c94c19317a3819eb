"""Transactional and control batches (KIP-98): the RecordBatch v2 attribute bits a transaction
sets and the commit/abort markers a coordinator has the partition leaders write.

    attributes bit 4 (0x10) transactional: the batch belongs to a transaction of its producer id
    attributes bit 5 (0x20) control: the batch holds one control record, never user data

    control record key   => version:int16 (0) type:int16    (0 ABORT, 1 COMMIT; Kafka 3.x+ also
                                                             has LEADER_CHANGE 2 and KRaft types)
    EndTransactionMarker => version:int16 (0) coordinator_epoch:int32   (the record's value)

A marker batch is transactional *and* control, carries the producer id and epoch of the
transaction it ends, base sequence -1 and exactly one record (offset delta 0). Readers skip
control batches (``v2.batch_records`` gives ``[]``); a ``read_committed`` reader uses the
markers to drop aborted data. Sans-IO: bytes in, values out; malformed markers raise
``CorruptRecordError`` (a decode never raises anything else).

A ``read_committed`` reader (:func:`read_committed`) is given, with the records up to the last
stable offset, the (producer id, first offset) of every aborted transaction overlapping them:
walking the batches in order, a producer's transactional batches are dropped from the first
offset of one of its aborted transactions until its abort marker; control batches are never
returned (Kafka's consumer Fetcher, KIP-98).

Invariants: ``decode_end_txn_marker(*control_record(encode_control_batch(p, e, m, ...)))``
gives ``m`` back; ``batch_header`` reads the same fields the writer put, whatever the codec.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Any, NamedTuple

from crc32c import crc32c

from hmbclient.errors import CorruptRecordError

from . import v2
from .base import CODEC_MASK, CONTROL_MASK, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, Record, Tail
from .records import decode_records, scan_entries

__all__ = [
    "ControlType",
    "EndTxnMarker",
    "BatchHeader",
    "TRANSACTIONAL_MASK",
    "CONTROL_MASK",
    "encode_control_key",
    "encode_end_txn_marker_value",
    "decode_control_type",
    "decode_end_txn_marker",
    "encode_control_batch",
    "encode_transactional_batch",
    "batch_header",
    "control_record",
    "read_committed",
]

_KEY = struct.Struct(
    ">h"  # version
    "h"  # type
)
_MARKER = struct.Struct(
    ">h"  # version
    "i"  # coordinator epoch
)
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class EndTxnMarker(NamedTuple):
    """A commit or abort marker: what ended, under which coordinator epoch."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type is ControlType.COMMIT


class BatchHeader(NamedTuple):
    """The transaction-relevant fields of one RecordBatch v2 header."""

    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    attributes: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK


def encode_control_key(control_type: int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def encode_end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return _MARKER.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_control_type(key: Any) -> int:
    """The type of a control record's key. Newer key versions are read by their first two
    fields, as Kafka does (a version only ever appends)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes (need {_KEY.size})")
    version, ctype = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    return int(ctype)


def decode_end_txn_marker(key: Any, value: Any) -> EndTxnMarker:
    """A commit/abort marker from its control record's key and value.

    Raises:
        CorruptRecordError: the key is not ABORT/COMMIT, or the value is short or of a negative
            version (a newer version with more fields is read by its known prefix).
    """
    ctype = decode_control_type(key)
    if ctype not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptRecordError(f"control record type {ctype} is not a transaction marker")
    if value is None or len(value) < _MARKER.size:
        raise CorruptRecordError(f"end transaction marker of {0 if value is None else len(value)} bytes (need {_MARKER.size})")
    version, coordinator_epoch = _MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"end transaction marker version {version}")
    return EndTxnMarker(ControlType(ctype), coordinator_epoch)


def encode_control_batch(
    producer_id: int,
    producer_epoch: int,
    marker: EndTxnMarker,
    *,
    timestamp_ms: int,
    base_offset: int = 0,
) -> bytes:
    """One marker batch (uncompressed, as Kafka writes them): transactional + control, the
    transaction's producer id and epoch, base sequence -1, one record at ``base_offset``."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a marker needs a producer id and epoch, got {producer_id}/{producer_epoch}")
    item = (encode_control_key(marker.control_type), encode_end_txn_marker_value(marker.coordinator_epoch), timestamp_ms)
    return v2.encode(
        0,
        [item],
        base_offset,
        timestamp_ms,
        producer=(producer_id, producer_epoch, v2.NO_SEQUENCE),
        flags=TRANSACTIONAL_MASK | CONTROL_MASK,
    )


def encode_transactional_batch(
    codec: int,
    items: Any,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    timestamp_ms: int,
    base_offset: int = 0,
) -> bytes:
    """A data batch of a transaction: ``items`` as ``v2.encode`` takes them, the transactional
    bit set, the producer's id, epoch and first sequence."""
    if producer_id < 0 or producer_epoch < 0 or base_sequence < 0:
        raise ValueError(f"a transactional batch needs a producer id, epoch and sequence, got {producer_id}/{producer_epoch}/{base_sequence}")
    return v2.encode(codec, items, base_offset, timestamp_ms, producer=(producer_id, producer_epoch, base_sequence), flags=TRANSACTIONAL_MASK)


def batch_header(data: Any, pos: int = 0) -> BatchHeader:
    """The header of the RecordBatch v2 at ``data[pos:]`` (not CRC-checked: see ``scan_entries``).

    Raises:
        CorruptRecordError: fewer bytes than a header, or not magic 2.
    """
    if len(data) - pos < v2.HEADER.size:
        raise CorruptRecordError(f"record batch header: {len(data) - pos} bytes at {pos}, need {v2.HEADER.size}")
    base, _length, epoch, magic, _crc, attrs, last_delta, _base_ts, max_ts, pid, pepoch, seq, count = v2.HEADER.unpack_from(data, pos)
    if magic != 2:
        raise CorruptRecordError(f"record batch at {pos}: magic {magic}, transactions need magic 2")
    return BatchHeader(base, base + last_delta, epoch, attrs, max_ts, pid, pepoch, seq, count)


def control_record(data: Any, pos: int = 0) -> tuple[Any, Any]:
    """(key, value) of the one record of the control batch at ``data[pos:]``, CRC-checked.

    Raises:
        CorruptRecordError: not a control batch, a bad CRC, or not exactly one record.
    """
    hdr = batch_header(data, pos)
    if not hdr.is_control:
        raise CorruptRecordError(f"record batch at offset {hdr.base_offset} is not a control batch")
    raw = v2.HEADER.unpack_from(data, pos)
    bend = pos + v2.LENGTH_OFFSET + 4 + raw[1]
    if bend > len(data):
        raise CorruptRecordError(f"control batch at offset {hdr.base_offset} runs past the buffer")
    if crc32c(memoryview(data)[pos + v2.ATTRIBUTES_OFFSET : bend]) != raw[4]:
        raise CorruptRecordError(f"control batch at offset {hdr.base_offset}: CRC mismatch")
    # read it as a data batch: batch_records skips control batches
    plain_attrs = raw[5] & ~(CONTROL_MASK | TIMESTAMP_TYPE_MASK)
    records = v2.batch_records(data, pos, bend, raw[:5] + (plain_attrs,) + raw[6:])
    if len(records) != 1:
        raise CorruptRecordError(f"control batch at offset {hdr.base_offset} holds {len(records)} records, not 1")
    return records[0].key, records[0].value


def read_committed(buf: Any, aborted: Any, tail: Tail | None = None) -> list[Record]:
    """The records a ``read_committed`` consumer returns from a fetched record set.

    Args:
        buf: the partition's record set from a Fetch answer (isolation_level 1), which ends at
            the last stable offset.
        aborted: the answer's aborted transactions, as (producer_id, first_offset) pairs (or
            objects with those attributes); None when there are none.
        tail: as :func:`decode_records`'s (the records' class and trailing fields).

    Returns:
        The records in order, without control records and without the records of aborted
        transactions. A partial trailing entry is dropped, as :func:`decode_records` does.

    Raises:
        CorruptRecordError: as :func:`decode_records` (a CRC mismatch, malformed records).
    """
    pending = sorted(
        ((a.producer_id, a.first_offset) if hasattr(a, "producer_id") else (int(a[0]), int(a[1])) for a in aborted or ()),
        key=lambda a: a[1],
    )
    nxt = 0
    aborting: set[int] = set()
    entries, valid = scan_entries(buf)
    mv = memoryview(buf)
    out: list[Record] = []
    for e in entries:
        if e.magic < 2:
            out.extend(decode_records(bytes(mv[e.position : e.position + e.size]), tail))
            continue
        hdr = batch_header(mv, e.position)
        if hdr.producer_id >= 0:
            # every aborted transaction begun by the end of this batch marks its producer
            while nxt < len(pending) and pending[nxt][1] <= hdr.last_offset:
                aborting.add(pending[nxt][0])
                nxt += 1
            if hdr.is_control:
                key, value = control_record(mv, e.position)
                if decode_control_type(key) == ControlType.ABORT:
                    aborting.discard(hdr.producer_id)
                continue
            if hdr.is_transactional and hdr.producer_id in aborting:
                continue
        if hdr.is_control:
            continue
        out.extend(decode_records(bytes(mv[e.position : e.position + e.size]), tail))
    if valid < len(buf):
        # a corrupt entry raises here; a partial trailing one decodes to nothing
        decode_records(bytes(mv[valid:]))
    return out
