"""Shared nouns of the record formats: the Record and Entry tuples, layout constants, varints.

Everything here is used from the tight encode/decode loops of ``legacy`` and ``v2``, so the
helpers are module-level functions and precompiled ``struct.Struct`` objects, and the varint
tables trade a little memory (a few hundred KB) for one list index instead of a loop.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterable, Iterator
from itertools import repeat
from operator import add
from typing import Any, NamedTuple

from hmbclient.errors import CorruptRecordError

__all__ = ["Record", "Entry", "Headers", "NO_TIMESTAMP", "GcPaused", "Tail", "with_tail"]

Headers = tuple[tuple[str, bytes | None], ...]

# Kafka's RecordBatch.NO_TIMESTAMP: what a magic 0 message reports as its timestamp.
NO_TIMESTAMP = -1

# Every top-level entry of a record set, whatever its magic, starts with these two fields:
#   offset:int64 size:int32         (size counts the bytes after this 12-byte "log overhead")
# and carries its magic byte at LOG_OVERHEAD + 4 (after a v0/v1 crc or a v2 leader epoch).
OFFSET_SIZE = struct.Struct(">qi")
LOG_OVERHEAD = OFFSET_SIZE.size
MAGIC_OFFSET = LOG_OVERHEAD + 4

I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U32 = struct.Struct(">I")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_MASK = 0x10  # v2 only
CONTROL_MASK = 0x20  # v2 only


#: ``(cls, fields)``: decode each record as ``cls`` built from ``(offset, timestamp, key, value,
#: headers) + fields`` -- a consumer's own record tuple (the poll consumer's ConsumerRecord:
#: ``fields`` = ``(topic, partition)``) made by the decoder itself, with no Record in between.
Tail = tuple[type, tuple[Any, ...]]

_new_tuple = tuple.__new__


def with_tail(records: Iterable[Record], tail: Tail) -> Iterator[Any]:
    """Records rebuilt as ``tail`` says (the decoders' paths that build Records first), each by
    one C-level concatenation."""
    cls, fields = tail
    return map(_new_tuple, repeat(cls), map(add, records, repeat(fields)))


class GcPaused:
    """``with GcPaused():`` -- the cyclic garbage collector paused for a bulk build of records.

    Records (and the consumers' record tuples built from them) are tuple subclasses, which the
    cyclic GC tracks for life. Creating thousands of them in a row triggers a collection every
    700 allocations, each walking (and ageing) every record just made and still held -- ~25%
    of a decode, more when chunks of records wait in a queue and so reach the older
    generations, whose collections walk them all again -- and it can never free anything:
    records hold only bytes, ints, str, None and tuples. So the collector pauses while one
    window decodes (or one batch of records is built); the collection that follows walks the
    new records once. Only the thread that paused it resumes it (the pause is process-wide),
    so concurrent builders leave it as they found it.
    """

    __slots__ = ("_paused",)

    def __enter__(self) -> None:
        self._paused = paused = gc.isenabled()
        if paused:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._paused:
            gc.enable()


class Record(NamedTuple):
    """One decoded message/record, whatever format carried it.

    ``timestamp`` is milliseconds since the epoch; ``NO_TIMESTAMP`` (-1) for magic 0. For
    LogAppendTime batches it is the broker's append time. ``headers`` is ``()`` when there are
    none (always for magic 0/1).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def message(self) -> Record:
        """The Kafka 0.8 client's ``MessageAndOffset.message``: the record itself."""
        return self

    @property
    def payload(self) -> bytes | None:
        """The Kafka 0.8 client's ``Message.payload``: the value."""
        return self.value


class Entry(NamedTuple):
    """One top-level entry of a record set (a v0/v1 message, a compressed wrapper, a v2 batch).

    ``size`` counts every byte of the entry (``position + size`` is the next entry).
    ``base_offset``/``last_offset`` span the records inside (a wrapper's inner offsets);
    ``max_timestamp`` is -1 when the format has none.
    """

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, as the API names it


def corrupt(msg: str) -> CorruptRecordError:
    return CorruptRecordError(msg)


# --- varints ---------------------------------------------------------------------------------
# Kafka's record varints are zigzag-encoded LEB128.


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 value at ``pos`` (the raw zigzag value). At most 10 bytes."""
    b = data[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    result = b & 0x7F
    shift = 7
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = read_uvarint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _encode_zigzag(n: int) -> bytes:
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError(f"varint: {n} is outside int64")
    v = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# VARINT[n] is the zigzag varint of the non-negative n < VARINT_TABLE (lengths, offset deltas).
VARINT_TABLE = 1 << 13
VARINT: list[bytes] = [_encode_zigzag(n) for n in range(VARINT_TABLE)]
# ZIGZAG[raw] decodes a one- or two-byte raw value (raw < 2**14) to its signed value.
ZIGZAG: list[int] = [(raw >> 1) ^ -(raw & 1) for raw in range(1 << 14)]
NULL_VARINT = b"\x01"  # -1: a null key/value/header value


def encode_varint(n: int) -> bytes:
    """Zigzag varint bytes of a signed 64-bit ``n``."""
    if 0 <= n < VARINT_TABLE:
        return VARINT[n]
    return _encode_zigzag(n)
