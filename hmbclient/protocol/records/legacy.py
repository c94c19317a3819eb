"""MessageSet v0/v1 (magic 0 and 1): the Kafka 0.8-0.10 message format.

    MessageSet => [offset:int64 size:int32 Message]        (size = bytes of Message)
    Message    => crc:uint32 magic:int8 attributes:int8 [timestamp:int64 if magic 1]
                  key:bytes value:bytes                      (bytes = int32 length, -1 = null)

``crc`` is zlib's CRC-32 over magic..end (the offset is not covered, so a broker rewrites it
without touching the CRC). ``attributes`` bits 0-2 are the codec, bit 3 (magic 1) the timestamp
type (1 = LogAppendTime).

A compressed message (codec != 0) is a *wrapper*: its value is a compressed inner MessageSet,
one level deep. Magic 1 inner offsets are relative (0..n-1) and the wrapper carries the absolute
offset of the last inner message; magic 0 inner offsets are absolute (and the wrapper carries
the last one too). A LogAppendTime wrapper's timestamp overrides its inner messages'.

Performance: encoding writes into one preallocated bytearray with ``pack_into`` (a null key, the
producer's common case, takes a single pack for the whole header); decoding runs one loop over
consecutive uncompressed messages with one ``unpack_from`` per message and no per-message
function calls. CRCs are ``zlib.crc32`` over memoryview slices: no copies.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any
from zlib import crc32

from hmbclient.errors import CorruptRecordError

from . import codecs
from .base import (
    CODEC_MASK,
    I32,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_SIZE,
    TIMESTAMP_TYPE_MASK,
    Record,
)

__all__ = ["encode", "decode_run", "build_wrapper", "parse_wrapper", "MIN_SIZE"]

# offset size crc magic attributes keyLength
HEADER_V0 = struct.Struct(">qiIbbi")
# offset size crc magic attributes timestamp keyLength
HEADER_V1 = struct.Struct(">qiIbbqi")
# the same, followed by valueLength: one pack for a message with a null key
HEADER_V0_NULL_KEY = struct.Struct(">qiIbbii")
HEADER_V1_NULL_KEY = struct.Struct(">qiIbbqii")
KEY_OFFSET_V0 = HEADER_V0.size  # 22
KEY_OFFSET_V1 = HEADER_V1.size  # 30
CRC_OFFSET = LOG_OVERHEAD  # 12
CRC_START = LOG_OVERHEAD + 4  # 16: the crc covers magic..end
# Smallest Message (bytes after the 12-byte log overhead): crc magic attrs [ts] keyLen valueLen
MIN_SIZE = (
    struct.calcsize(">Ibbii"),  # 14
    struct.calcsize(">Ibbqii"),  # 22
)
MESSAGE_OVERHEAD = (LOG_OVERHEAD + MIN_SIZE[0], LOG_OVERHEAD + MIN_SIZE[1])  # 26, 34


# --- encode ----------------------------------------------------------------------------------


_HEAD = struct.Struct(">qiI").pack  # offset size crc
# magic attributes [timestamp] keyLength=-1 valueLength / magic attributes [timestamp] keyLength
_TAIL_NULL_KEY = (struct.Struct(">bbii").pack, struct.Struct(">bbqii").pack)
_TAIL_KEY = (struct.Struct(">bbi").pack, struct.Struct(">bbqi").pack)
_I32_PACK = I32.pack
_NULL_LENGTH = b"\xff\xff\xff\xff"


def write_messages(
    magic: int,
    items: Sequence[Any],
    offsets: Iterable[int],
    default_ts: int,
    attributes: int = 0,
) -> tuple[bytes, int]:
    """Uncompressed messages for ``items`` ((key, value, ts[, headers]) tuples) at ``offsets``.

    Returns the bytes and the largest timestamp written (-1 for magic 0).
    """
    # Each message is appended as pieces (offset/size/crc, the fixed fields, key, value) to one
    # list joined once at the end: the CRC is chained over the pieces (the value's straight
    # from the caller's object), so the value is copied exactly once, by the join, and the
    # fixed fields of consecutive null-key messages with equal timestamp and length (the
    # producer's common case) are packed and checksummed once. This measured 2.3x faster than
    # packing into a preallocated bytearray and checksumming memoryview slices of it.
    parts: list[Any] = []
    try:
        if magic == 1:
            max_ts = _append_v1(parts, items, offsets, default_ts, attributes)
        else:
            _append_v0(parts, items, offsets, attributes)
            max_ts = NO_TIMESTAMP
    except struct.error as e:
        raise ValueError(f"cannot encode message: {e}") from None
    return b"".join(parts), max_ts


def _append_v1(
    parts: list[Any], items: Sequence[Any], offsets: Iterable[int], default_ts: int, attributes: int
) -> int:
    """Append the pieces of magic 1 messages to ``parts``; returns the largest timestamp."""
    extend = parts.extend
    head = _HEAD
    pack_null_key = _TAIL_NULL_KEY[1]
    pack_key = _TAIL_KEY[1]
    max_ts = NO_TIMESTAMP
    prev_value_len = -2  # the tail below is that of a null-key message of this value length
    prev_ts: int | None = None  # and this timestamp
    tail = b""
    tail_crc = 0
    for it, off in zip(items, offsets):  # noqa: B905 - offsets may be unbounded
        key = it[0]
        value = it[1]
        ts = it[2]
        if len(it) > 3 and it[3]:
            raise ValueError("magic 1 messages cannot carry headers")
        if ts is None:
            ts = default_ts
        if ts > max_ts:
            max_ts = ts
        if key is None:
            if value is None:
                fixed = pack_null_key(1, attributes, ts, -1, -1)
                extend((head(off, 22, crc32(fixed)), fixed))
            else:
                value_len = len(value)
                if value_len != prev_value_len or ts != prev_ts:
                    tail = pack_null_key(1, attributes, ts, -1, value_len)
                    tail_crc = crc32(tail)
                    prev_value_len = value_len
                    prev_ts = ts
                extend((head(off, 22 + value_len, crc32(value, tail_crc)), tail, value))
        else:
            key_len = len(key)
            fixed = pack_key(1, attributes, ts, key_len)
            if value is None:
                crc = crc32(_NULL_LENGTH, crc32(key, crc32(fixed)))
                extend((head(off, 22 + key_len, crc), fixed, key, _NULL_LENGTH))
            else:
                value_len = len(value)
                value_len_field = _I32_PACK(value_len)
                crc = crc32(value, crc32(value_len_field, crc32(key, crc32(fixed))))
                extend((head(off, 22 + key_len + value_len, crc), fixed, key, value_len_field, value))
    return max_ts


def _append_v0(parts: list[Any], items: Sequence[Any], offsets: Iterable[int], attributes: int) -> None:
    """Append the pieces of magic 0 messages (no timestamp) to ``parts``."""
    extend = parts.extend
    head = _HEAD
    pack_null_key = _TAIL_NULL_KEY[0]
    pack_key = _TAIL_KEY[0]
    prev_value_len = -2  # the tail below is that of a null-key message of this value length
    tail = b""
    tail_crc = 0
    for it, off in zip(items, offsets):  # noqa: B905 - offsets may be unbounded
        key = it[0]
        value = it[1]
        if len(it) > 3 and it[3]:
            raise ValueError("magic 0 messages cannot carry headers")
        if key is None:
            if value is None:
                fixed = pack_null_key(0, attributes, -1, -1)
                extend((head(off, 14, crc32(fixed)), fixed))
            else:
                value_len = len(value)
                if value_len != prev_value_len:
                    tail = pack_null_key(0, attributes, -1, value_len)
                    tail_crc = crc32(tail)
                    prev_value_len = value_len
                extend((head(off, 14 + value_len, crc32(value, tail_crc)), tail, value))
        else:
            key_len = len(key)
            fixed = pack_key(0, attributes, key_len)
            if value is None:
                crc = crc32(_NULL_LENGTH, crc32(key, crc32(fixed)))
                extend((head(off, 14 + key_len, crc), fixed, key, _NULL_LENGTH))
            else:
                value_len = len(value)
                value_len_field = _I32_PACK(value_len)
                crc = crc32(value, crc32(value_len_field, crc32(key, crc32(fixed))))
                extend((head(off, 14 + key_len + value_len, crc), fixed, key, value_len_field, value))


def build_wrapper(
    magic: int, attributes: int, offset: int, timestamp: int, key: Any, value: bytes
) -> bytes:
    """One message whose value is a compressed inner message set."""
    items = [(key, value, timestamp)]
    return write_messages(magic, items, (offset,), timestamp, attributes)[0]


def encode(
    magic: int,
    codec: int,
    items: Sequence[Any],
    base_offset: int,
    default_ts: int,
    offsets: Sequence[int] | None = None,
) -> bytes:
    """A MessageSet of ``items``: one message each, or one ``codec`` wrapper around them all.

    ``offsets`` (absolute, ascending) default to ``base_offset``, ``base_offset + 1``, ...
    """
    n = len(items)
    if not n:
        return b""
    if offsets is None:
        offsets = range(base_offset, base_offset + n)
    if codec == codecs.NONE:
        return write_messages(magic, items, offsets, default_ts)[0]
    last = offsets[-1]
    if magic == 1:
        first = offsets[0]
        inner, max_ts = write_messages(1, items, [o - first for o in offsets], default_ts)
    else:
        inner, max_ts = write_messages(0, items, offsets, default_ts)
    compressed = codecs.compress(codec, inner, magic)
    return build_wrapper(magic, codec, last, max_ts, None, compressed)


# --- decode ----------------------------------------------------------------------------------


def decode_run(
    data: bytes, pos: int, end: int, out: list[Record], shift: int = 0, inner: bool = False
) -> int:
    """Decode consecutive complete v0/v1 entries of ``data[pos:end]`` into ``out``.

    ``shift`` is added to every offset (a magic 1 wrapper's inner relative offsets); ``inner``
    forbids compressed messages (a wrapper's inner set). Returns the position of the first
    entry not decoded: ``end``, a partial entry, or an entry of another magic (the caller
    dispatches on it).

    One loop, kept whole: it is the consumer's per-message path for MessageSet (magic 0 from
    Kafka 0.8 and HMB, magic 1 from 0.10), and moving the key/value fields into a helper
    called per message measured ~20% slower on magic 0 messages of 100 bytes.

    Raises:
        CorruptRecordError: a bad CRC, size or layout, or a wrapper that does not decompress.
    """
    mv = memoryview(data)
    append = out.append
    new = tuple.__new__
    rec = Record
    unpack_v0 = HEADER_V0.unpack_from
    unpack_v1 = HEADER_V1.unpack_from
    unpack_i32 = I32.unpack_from
    unpack_v1_null_key = HEADER_V1_NULL_KEY.unpack_from
    try:
        while pos + 12 <= end:
            if pos + 34 <= end:
                # Fast path: an uncompressed magic 1 message, whose fixed header (through a
                # null key's valueLength) one unpack reads.
                off, size, crc, magic, attrs, ts, key_len, value_len = unpack_v1_null_key(data, pos)
                entry_end = pos + 12 + size
                if magic == 1 and not attrs & 7 and 22 <= size and entry_end <= end:
                    if crc32(mv[pos + 16 : entry_end]) != crc:
                        raise CorruptRecordError(f"message at offset {off}: CRC mismatch")
                    if key_len == -1:
                        key = None
                        cursor = pos + 34
                    elif key_len >= 0:
                        cursor = pos + 30 + key_len
                        key = data[pos + 30 : cursor]
                        (value_len,) = unpack_i32(data, cursor)
                        cursor += 4
                    else:
                        raise CorruptRecordError(f"message at offset {off}: key length {key_len}")
                    if value_len == entry_end - cursor:
                        value = data[cursor:entry_end]
                    elif value_len == -1 and cursor == entry_end:
                        value = None
                    else:
                        raise CorruptRecordError(f"message at offset {off}: value length {value_len}")
                    append(new(rec, (off + shift, ts, key, value, ())))
                    pos = entry_end
                    continue
            (size,) = unpack_i32(data, pos + 8)
            if size < 14:
                raise CorruptRecordError(f"entry size {size} at {pos} is below the minimum")
            entry_end = pos + 12 + size
            if entry_end > end:
                break
            magic = data[pos + 16]
            if magic == 1:
                if size < 22:
                    raise CorruptRecordError(f"magic 1 message size {size} at {pos} is too small")
                off, _, crc, _, attrs, ts, key_len = unpack_v1(data, pos)
                cursor = pos + 30
            elif magic == 0:
                if size < 14:
                    raise CorruptRecordError(f"magic 0 message size {size} at {pos} is too small")
                off, _, crc, _, attrs, key_len = unpack_v0(data, pos)
                ts = -1
                cursor = pos + 22
            else:
                break
            if crc32(mv[pos + 16 : entry_end]) != crc:
                raise CorruptRecordError(f"message at offset {off}: CRC mismatch")
            if attrs & 7:
                if inner:
                    raise CorruptRecordError(f"message at offset {off}: nested compression")
                out.extend(parse_wrapper(data, pos, entry_end, magic)[0])
                pos = entry_end
                continue
            if key_len < 0:
                if key_len != -1:
                    raise CorruptRecordError(f"message at offset {off}: key length {key_len}")
                key = None
            else:
                key = data[cursor : cursor + key_len]
                cursor += key_len
            (value_len,) = unpack_i32(data, cursor)
            cursor += 4
            if value_len < 0:
                if value_len != -1:
                    raise CorruptRecordError(f"message at offset {off}: value length {value_len}")
                value = None
            else:
                value = data[cursor : cursor + value_len]
                cursor += value_len
            if cursor != entry_end:
                raise CorruptRecordError(f"message at offset {off}: fields do not fill its size")
            append(new(rec, (off + shift, ts, key, value, ())))
            pos = entry_end
    except struct.error as e:
        raise CorruptRecordError(f"malformed message at {pos}: {e}") from None
    finally:
        mv.release()
    return pos


def read_message(
    data: Any, pos: int, entry_end: int, verify_crc: bool = True
) -> tuple[int, int, int, int, Any, Any, int]:
    """The fields of one complete v0/v1 message (the general, slow path).

    Returns (offset, magic, attributes, timestamp, key, value, key_position); key/value are
    slices of ``data``.
    """
    size = entry_end - pos - 12
    magic = data[pos + 16] if size >= 5 else -1
    if magic not in (0, 1) or size < MIN_SIZE[magic]:
        raise CorruptRecordError(f"message at {pos}: magic {magic} size {size}")
    if magic:
        off, _, crc, _, attrs, ts, key_len = HEADER_V1.unpack_from(data, pos)
        cursor = pos + KEY_OFFSET_V1
    else:
        off, _, crc, _, attrs, key_len = HEADER_V0.unpack_from(data, pos)
        ts = NO_TIMESTAMP
        cursor = pos + KEY_OFFSET_V0
    if verify_crc and crc32(memoryview(data)[pos + 16 : entry_end]) != crc:
        raise CorruptRecordError(f"message at offset {off}: CRC mismatch")
    key_pos = cursor
    key = None
    if key_len != -1:
        if key_len < 0 or cursor + key_len + 4 > entry_end:
            raise CorruptRecordError(f"message at offset {off}: key length {key_len}")
        key = data[cursor : cursor + key_len]
        cursor += key_len
    (value_len,) = I32.unpack_from(data, cursor)
    cursor += 4
    value = None
    if value_len != -1:
        if value_len < 0 or cursor + value_len > entry_end:
            raise CorruptRecordError(f"message at offset {off}: value length {value_len}")
        value = data[cursor : cursor + value_len]
        cursor += value_len
    if cursor != entry_end:
        raise CorruptRecordError(f"message at offset {off}: fields do not fill its size")
    return off, magic, attrs, ts, key, value, key_pos


class Inner:
    """A decompressed wrapper: its inner message set and where each message sits in it."""

    __slots__ = ("data", "positions", "offsets", "records")

    def __init__(
        self, data: bytes, positions: list[int], offsets: list[int], records: list[Record]
    ):
        self.data = data
        self.positions = positions  # start of each inner message in ``data``
        self.offsets = offsets  # each inner message's own offset field
        self.records = records  # with absolute offsets and effective timestamps


def parse_wrapper(data: Any, pos: int, entry_end: int, magic: int) -> tuple[list[Record], Inner]:
    """Expand the compressed wrapper message at ``data[pos:entry_end]`` (its CRC already checked).

    Returns the inner records (absolute offsets, inner CRCs checked) and the parsed inner set.

    Raises:
        CorruptRecordError: no value, a value that does not decompress, partial or corrupt inner
            messages, nested compression, or no inner message at all.
    """
    w_off, w_magic, w_attrs, w_ts, _, value, _ = read_message(data, pos, entry_end, verify_crc=False)
    if value is None:
        raise CorruptRecordError(f"compressed message at offset {w_off} has a null value")
    inner = codecs.decompress(w_attrs & CODEC_MASK, value, w_magic)
    # Walk the inner sizes first: a magic 1 wrapper's offset belongs to its last inner message.
    positions: list[int] = []
    offsets: list[int] = []
    unpack_offset_size = OFFSET_SIZE.unpack_from
    ipos = 0
    n = len(inner)
    try:
        while ipos < n:
            i_off, isize = unpack_offset_size(inner, ipos)
            if isize < MIN_SIZE[0]:
                raise CorruptRecordError(f"wrapper at offset {w_off}: inner size {isize}")
            positions.append(ipos)
            offsets.append(i_off)
            ipos += 12 + isize
    except struct.error:
        raise CorruptRecordError(f"wrapper at offset {w_off}: truncated inner message") from None
    if ipos != n:
        raise CorruptRecordError(f"wrapper at offset {w_off}: truncated inner message")
    if not offsets:
        raise CorruptRecordError(f"wrapper at offset {w_off} holds no messages")
    shift = w_off - offsets[-1] if w_magic == 1 else 0
    records: list[Record] = []
    if decode_run(inner, 0, n, records, shift, inner=True) != n:
        raise CorruptRecordError(f"wrapper at offset {w_off}: inner set has other magics")
    if w_magic == 1 and w_attrs & TIMESTAMP_TYPE_MASK:
        records = [r._replace(timestamp=w_ts) for r in records]
    return records, Inner(inner, positions, offsets, records)
