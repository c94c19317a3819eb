"""RecordBatch v2 (magic 2): the Kafka 0.11+ record format.

    RecordBatch => baseOffset:int64 batchLength:int32 partitionLeaderEpoch:int32 magic:int8
                   crc:uint32 attributes:int16 lastOffsetDelta:int32 baseTimestamp:int64
                   maxTimestamp:int64 producerId:int64 producerEpoch:int16 baseSequence:int32
                   recordCount:int32 records
    Record      => length:varint attributes:int8 timestampDelta:varlong offsetDelta:varint
                   keyLength:varint key valueLength:varint value
                   headerCount:varint [keyLength:varint key(utf-8) valueLength:varint value]

``crc`` is CRC-32C over attributes..end, so a broker rewrites baseOffset and the leader epoch
without touching it. With a codec (attributes bits 0-2) the bytes after recordCount are the
compressed concatenation of the records; recordCount itself stays uncompressed. Attribute
bit 3 = LogAppendTime (every record then has the batch's maxTimestamp), bit 4 = transactional
(ignored by readers), bit 5 = control batch (skipped by readers: commit/abort markers).

Performance: the record loop (``read_records``) is the consumer's hot path. It reads every
varint that fits one byte (and lengths/offset deltas that fit two) inline through a zigzag
lookup table, slices key and value straight out of ``bytes``, and builds one tuple per record
with ``tuple.__new__``; only long varints and headers call a helper. Runs of records that
share one layout (what producers write) skip that loop: ``read_runs`` hands them to
``uniform.read_uniform``, which checks a whole run column by column and builds its records
without Python code per record (~2.5x faster on 100-byte values). Encoding appends each
record's pieces (table-looked-up varints and the caller's key/value objects) to one list that is
joined once, so there is no per-record concatenation.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from operator import add as _add
from typing import Any

from crc32c import crc32c

from hmbclient.errors import CorruptRecordError

from . import codecs
from .base import (
    CODEC_MASK,
    CONTROL_MASK,
    I32,
    NULL_VARINT,
    TIMESTAMP_TYPE_MASK,
    U32,
    VARINT,
    VARINT_TABLE,
    ZIGZAG,
    Headers,
    Record,
    Tail,
    encode_varint,
    read_uvarint,
    read_varint,
    with_tail,
)
from .uniform import MIN_RUN, UniformRun, find_run, read_uniform

__all__ = ["encode", "encode_batches", "decode_run", "read_records", "HEADER", "MIN_SIZE"]

HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
LENGTH_OFFSET = struct.calcsize(">q")  # 8
EPOCH_OFFSET = struct.calcsize(">qi")  # 12
CRC_OFFSET = struct.calcsize(">qiib")  # 17
ATTRIBUTES_OFFSET = struct.calcsize(">qiibI")  # 21: the CRC covers from here
RECORDS_OFFSET = HEADER.size  # 61
MIN_SIZE = HEADER.size - EPOCH_OFFSET  # 49: smallest batchLength
MIN_RECORD_SIZE = 7  # length attrs tsDelta offsetDelta keyLen valueLen headerCount
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


# --- encode ----------------------------------------------------------------------------------


def _encode_headers(headers: Any) -> bytes:
    out = [encode_varint(len(headers))]
    for name, value in headers:
        name_bytes = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        out.append(encode_varint(len(name_bytes)))
        out.append(name_bytes)
        if value is None:
            out.append(NULL_VARINT)
        else:
            out.append(encode_varint(len(value)))
            out.append(bytes(value))
    return b"".join(out)


# Records are joined in chunks of this many: small joins, then one large one for the batch.
_CHUNK = 64


def write_records(
    items: Sequence[Any], base_ts: int, default_ts: int, deltas: Sequence[int] | None
) -> tuple[list[bytes], int]:
    """The records for ``items`` as consecutive chunks; returns (chunks, max timestamp).

    Chunks, not one ``bytes``: the caller checksums them in turn and joins them once with the
    batch header, so a large batch is allocated (and copied into) once. Two live buffers of a
    batch's size each cost ~10x a copy here: glibc trims the freed pair back to the OS and the
    next batch page-faults it all in again.
    """
    # Kept whole, with VARINT table lookups inline: the producer's per-record encode path.
    chunks: list[bytes] = []
    varint = VARINT  # varint[n] for 0 <= n < table_size; encode_varint beyond
    table_size = VARINT_TABLE
    null = NULL_VARINT
    empty = b""
    no_headers = b"\x00"
    attributes = b"\x00"
    max_ts = base_ts
    for start in range(0, len(items), _CHUNK):
        parts: list[Any] = []
        extend = parts.extend
        for i, item in enumerate(items[start : start + _CHUNK], start):
            key = item[0]
            value = item[1]
            ts = item[2]
            if ts is None:
                ts = default_ts
            if ts > max_ts:
                max_ts = ts
            ts_delta = ts - base_ts
            ts_delta_field = varint[ts_delta] if 0 <= ts_delta < table_size else encode_varint(ts_delta)
            offset_delta = i if deltas is None else deltas[i]
            offset_delta_field = varint[offset_delta] if offset_delta < table_size else encode_varint(offset_delta)
            if key is None:
                key_len_field = null
                key = empty
                size = 1
            else:
                key_len = len(key)
                key_len_field = varint[key_len] if key_len < table_size else encode_varint(key_len)
                size = len(key_len_field) + key_len
            if value is None:
                value_len_field = null
                value = empty
                size += 1
            else:
                value_len = len(value)
                value_len_field = varint[value_len] if value_len < table_size else encode_varint(value_len)
                size += len(value_len_field) + value_len
            if len(item) > 3 and item[3]:
                headers_field = _encode_headers(item[3])
            else:
                headers_field = no_headers
            size += 1 + len(ts_delta_field) + len(offset_delta_field) + len(headers_field)
            extend(
                (
                    varint[size] if size < table_size else encode_varint(size),
                    attributes,
                    ts_delta_field,
                    offset_delta_field,
                    key_len_field,
                    key,
                    value_len_field,
                    value,
                    headers_field,
                )
            )
        chunks.append(b"".join(parts))
    return chunks, max_ts


def encode(
    codec: int,
    items: Sequence[Any],
    base_offset: int,
    default_ts: int,
    offsets: Sequence[int] | None = None,
    *,
    producer: tuple[int, int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
    flags: int = 0,
) -> bytes:
    """One RecordBatch holding ``items`` ((key, value, ts[, headers]) tuples).

    ``offsets`` (absolute, ascending) default to ``base_offset``, ``base_offset + 1``, ...
    ``producer`` is (producer id, producer epoch, base sequence), -1s by default; ``flags`` are
    attribute bits besides the codec (``TRANSACTIONAL_MASK``, ``CONTROL_MASK``, see
    ``records.control``). The partition leader epoch is written as -1.
    """
    n = len(items)
    if not n:
        return b""
    deltas = None
    if offsets is not None:
        base_offset = offsets[0]
        deltas = [o - base_offset for o in offsets]
    base_ts = items[0][2]
    if base_ts is None:
        base_ts = default_ts
    try:
        chunks, max_ts = write_records(items, base_ts, default_ts, deltas)
    except (TypeError, IndexError) as e:
        raise ValueError(f"cannot encode record: {e}") from None
    last_delta = n - 1 if deltas is None else deltas[-1]
    return _finish(codec, chunks, base_offset, n, last_delta, base_ts, max_ts, producer, flags)


def _finish(
    codec: int,
    chunks: list[Any],
    base_offset: int,
    n: int,
    last_delta: int,
    base_ts: int,
    max_ts: int,
    producer: tuple[int, int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
    flags: int = 0,
) -> bytes:
    """The batch: the header (with its CRC) and the records ``chunks`` (compressed with
    ``codec`` first), joined once."""
    if codec:
        chunks = [codecs.compress(codec, b"".join(chunks), 2)]
    size = sum(map(len, chunks))
    try:
        header = HEADER.pack(
            base_offset,
            MIN_SIZE + size,
            NO_PARTITION_LEADER_EPOCH,
            2,
            0,
            (codec & CODEC_MASK) | (flags & ~CODEC_MASK),
            last_delta,
            base_ts,
            max_ts,
            *producer,
            n,
        )
    except struct.error as e:
        raise ValueError(f"cannot encode record batch header: {e}") from None
    crc = crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])
    for chunk in chunks:
        crc = crc32c(chunk, crc)
    return b"".join((header[:CRC_OFFSET], U32.pack(crc), header[ATTRIBUTES_OFFSET:], *chunks))


# _KEYLESS[d]: the offsetDelta d followed by a null key's length (-1), as one piece.
_KEYLESS = [VARINT[d] + NULL_VARINT for d in range(VARINT_TABLE)]
_ATTRIBUTES = b"\x00"
_NO_HEADERS = b"\x00"
# The largest value a keyless record may have for the table path: its length varint and the
# record's length varint (value plus at most ~24 bytes of other fields) both come from VARINT.
_TABLE_VALUE_MAX = VARINT_TABLE - 64


def _keyless_records(values: list[Any], first_delta: int, ts_field: bytes) -> list[Any] | None:
    """The records of ``values`` (null keys, no headers, one timestamp whose delta field is
    ``ts_field``; offset deltas from ``first_delta``) as a list of pieces to join, or None when
    a value is null or too long, or the offset deltas leave the VARINT table: then the caller
    takes the general path.

    Every per-record step is a C-level map or slice over a column (lengths, table look-ups,
    sums, then the pieces interleaved by slice assignment): no Python code runs per record.
    """
    n = len(values)
    end = first_delta + n
    if end > VARINT_TABLE:
        return None
    try:
        lengths = list(map(len, values))
    except TypeError:  # a null value (or not bytes-like): the general path says which
        return None
    if max(lengths) > _TABLE_VALUE_MAX:
        return None
    if lengths.count(lengths[0]) == n:
        return _same_length_records(values, lengths[0], first_delta, ts_field)
    varint_of = VARINT.__getitem__
    heads = _KEYLESS[first_delta:end]
    length_fields = list(map(varint_of, lengths))
    # attributes + timestampDelta + headers count, then offsetDelta + key, value length, value
    fixed = [2 + len(ts_field)] * n
    sizes = map(_add, map(_add, map(len, heads), map(len, length_fields)), map(_add, lengths, fixed))
    pieces: list[Any] = [None] * (6 * n)
    pieces[0::6] = list(map(varint_of, sizes))
    pieces[1::6] = [_ATTRIBUTES + ts_field] * n
    pieces[2::6] = heads
    pieces[3::6] = length_fields
    pieces[4::6] = values
    pieces[5::6] = [_NO_HEADERS] * n
    return pieces


def _keyed_records(values: list[Any], keys: list[Any], first_delta: int, ts_field: bytes) -> list[Any] | None:
    """``_keyless_records`` for records that all have a key (and no headers): the pieces to
    join, or None (a null key or value, a long field, offset deltas past the VARINT table)
    for the general path. The same C-level column maps, two more pieces per record."""
    n = len(values)
    end = first_delta + n
    if end > VARINT_TABLE:
        return None
    try:
        value_lengths = list(map(len, values))
        key_lengths = list(map(len, keys))
    except TypeError:
        return None
    field_lengths = list(map(_add, value_lengths, key_lengths))
    if max(field_lengths) > _TABLE_VALUE_MAX:
        return None
    varint_of = VARINT.__getitem__
    offsets = VARINT[first_delta:end]
    key_fields = list(map(varint_of, key_lengths))
    value_fields = list(map(varint_of, value_lengths))
    fixed = [2 + len(ts_field)] * n  # attributes, headers count, timestamp
    sizes = map(
        _add,
        map(_add, map(len, offsets), map(len, key_fields)),
        map(_add, map(len, value_fields), map(_add, field_lengths, fixed)),
    )
    pieces: list[Any] = [None] * (8 * n)
    pieces[0::8] = list(map(varint_of, sizes))
    pieces[1::8] = [_ATTRIBUTES + ts_field] * n
    pieces[2::8] = offsets
    pieces[3::8] = key_fields
    pieces[4::8] = keys
    pieces[5::8] = value_fields
    pieces[6::8] = values
    pieces[7::8] = [_NO_HEADERS] * n
    return pieces


# The pieces of keyless records whose values share one length, by offset delta, cached (the
# lists are only ever replaced by longer ones, never changed, so concurrent encoders may share
# them). A record is [lead][timestamp delta][middle][value]: the lead is the headers count of
# the record before (0) + the record's length + attributes, and depends on the value length
# and the timestamp field's length; the middle is the offset delta + a null key's length + the
# value's length, and depends on the value length. The timestamp field itself, which changes
# from batch to batch of a request, is a separate piece.
_LEADS: dict[tuple[int, int], list[bytes]] = {}
_MIDDLES: dict[int, list[bytes]] = {}
# Entries (small bytes objects, ~40-50 bytes each with the list slot) the two tables may hold
# together: ~3 MB. One value length at full table size takes 3 x 8192; when a new run would
# pass the budget (many lengths), both tables start afresh.
_CACHED_ENTRIES_MAX = 1 << 16


def _cache_room(more: int) -> None:
    """Empty both tables if adding ``more`` entries would pass the budget."""
    if sum(map(len, _MIDDLES.values())) + sum(map(len, _LEADS.values())) + more > _CACHED_ENTRIES_MAX:
        _MIDDLES.clear()
        _LEADS.clear()


def _same_length_records(values: list[Any], length: int, first_delta: int, ts_field: bytes) -> list[Any]:
    """``_keyless_records`` when every value has the same ``length``: then a record's bytes
    around its timestamp field depend only on its offset delta, and come from cached tables."""
    n = len(values)
    end = first_delta + n
    middles = _MIDDLES.get(length)
    if middles is None or len(middles) < end:
        _cache_room(2 * end)
        have = _MIDDLES.get(length) or []
        length_field = VARINT[length]
        middles = _MIDDLES[length] = have + [head + length_field for head in _KEYLESS[len(have) : end]]
    key = (length, len(ts_field))
    leads = _LEADS.get(key)
    if leads is None or len(leads) < end:
        _cache_room(end)
        have = _LEADS.get(key) or []
        fixed = 2 + len(ts_field) + length  # attributes, headers count, timestamp, value
        leads = _LEADS[key] = have + [
            _NO_HEADERS + VARINT[fixed + len(middle)] + _ATTRIBUTES for middle in middles[len(have) : end]
        ]
    pieces: list[Any] = [ts_field] * (4 * n + 1)
    pieces[0:-1:4] = leads[first_delta:end]
    pieces[2::4] = middles[first_delta:end]
    pieces[3::4] = values
    pieces[0] = pieces[0][1:]  # the first record follows no other
    pieces[-1] = _NO_HEADERS
    return pieces


def encode_batches(
    codec: int,
    batches: Sequence[tuple[list[Any], Any, Any, int]],
    base_offset: int = 0,
    producer: tuple[int, int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
    flags: int = 0,
) -> bytes | bytearray:
    """One RecordBatch holding the messages of ``batches``, in order: the producer's encoder.

    Each batch is ``(values, keys, headers, timestamp_ms)``: the columns of a producer batch
    (``keys`` / ``headers`` None when every key is null and no message has headers; otherwise
    lists aligned with ``values``) and the timestamp of all its records. Offsets follow
    consecutively from ``base_offset``. Same bytes as :func:`encode` of the equivalent items.
    ``producer``: the header's (producer id, producer epoch, base sequence) of an idempotent
    producer; none by default.

    Uncompressed, the batch is joined once, into a ``bytearray`` with room for the header,
    which is then written in place (the CRC last): one copy of the records, not two.

    Raises:
        ValueError: a message that cannot be encoded (a key or value that is not bytes-like,
            a field outside its range).
    """
    base_ts = batches[0][3]
    max_ts = base_ts
    parts: list[Any] = [_NO_HEADER_YET]
    delta = 0
    for values, keys, headers, ts in batches:
        n = len(values)
        if not n:
            continue
        if ts > max_ts:
            max_ts = ts
        ts_delta = ts - base_ts
        ts_field = VARINT[ts_delta] if 0 <= ts_delta < VARINT_TABLE else encode_varint(ts_delta)
        if keys is None:
            pieces = _keyless_records(values, delta, ts_field)
        elif (headers is None or headers.count(None) == n) and None not in keys:
            pieces = _keyed_records(values, keys, delta, ts_field)
        else:
            pieces = None
        if pieces is not None:
            parts += pieces
        else:
            items = list(zip(keys if keys is not None else [None] * n, values, [ts] * n, headers if headers is not None else [None] * n, strict=True))
            try:
                run, _ = write_records(items, base_ts, ts, range(delta, delta + n))
            except (TypeError, IndexError) as e:
                raise ValueError(f"cannot encode record: {e}") from None
            parts += run
        delta += n
    if not delta:
        return b""
    try:
        if codec:
            del parts[0]
            return _finish(codec, parts, base_offset, delta, delta - 1, base_ts, max_ts, producer, flags)
        buf = bytearray().join(parts)
    except TypeError as e:  # a str (it has a len()) among the keys or values
        raise ValueError(f"cannot encode record: {e}") from None
    try:
        HEADER.pack_into(
            buf,
            0,
            base_offset,
            len(buf) - EPOCH_OFFSET,
            NO_PARTITION_LEADER_EPOCH,
            2,
            0,
            flags & ~CODEC_MASK,
            delta - 1,
            base_ts,
            max_ts,
            *producer,
            delta,
        )
    except struct.error as e:
        raise ValueError(f"cannot encode record batch header: {e}") from None
    with memoryview(buf) as view:
        U32.pack_into(buf, CRC_OFFSET, crc32c(view[ATTRIBUTES_OFFSET:]))
    return buf


# Where encode_batches writes the header once the records are joined behind it.
_NO_HEADER_YET = bytes(HEADER.size)


# --- decode ----------------------------------------------------------------------------------


def _read_headers(data: bytes, pos: int) -> tuple[Headers, int]:
    count, pos = read_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"record header count {count}")
    headers = []
    for _ in range(count):
        name_len, pos = read_varint(data, pos)
        if name_len < 0:
            raise CorruptRecordError(f"record header key length {name_len}")
        end = pos + name_len
        if end > len(data):
            raise CorruptRecordError("record header key runs past the data")
        name = str(data[pos:end], "utf-8")
        pos = end
        value_len, pos = read_varint(data, pos)
        if value_len < 0:
            if value_len != -1:
                raise CorruptRecordError(f"record header value length {value_len}")
            value = None
        else:
            end = pos + value_len
            value = data[pos:end]
            pos = end
        headers.append((name, value))
    return tuple(headers), pos


def read_records(
    data: bytes, pos: int, count: int, base_offset: int, base_ts: int, out: list[Record]
) -> int:
    """Decode ``count`` records at ``data[pos:]`` into ``out``; returns the end position.

    ``data`` must be ``bytes`` (slicing it yields the key/value objects). Malformed input raises
    CorruptRecordError or IndexError (past the data); the caller turns the latter into the
    former and checks that the records end exactly where the batch does.

    One loop with the short varints decoded inline, kept whole: it is the consumer's
    per-record path, and reading just the two delta varints through ``read_varint`` measured
    ~35% slower per record.
    """
    append = out.append
    new = tuple.__new__
    rec = Record
    zigzag = ZIGZAG
    read_raw = read_uvarint
    # b, b2: the first two bytes of the varint being read
    for _ in range(count):
        # length (then skip the attributes byte)
        # (a zigzag value's sign is bit 0 of its first byte: ``not b & 0x81`` = one byte, >= 0)
        b = data[pos]
        if not b & 0x81:
            record_end = pos + 1 + (b >> 1)
            pos += 2
        elif b & 1:
            raise CorruptRecordError("negative record length")
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                record_end = pos + 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
                pos += 3
            else:
                raw, pos = read_raw(data, pos)
                record_end = pos + (raw >> 1)
                pos += 1
        # timestampDelta
        b = data[pos]
        if b < 0x80:
            ts = base_ts + zigzag[b]
            pos += 1
        else:
            raw, pos = read_raw(data, pos)
            ts = base_ts + ((raw >> 1) ^ -(raw & 1))
        # offsetDelta
        b = data[pos]
        if b < 0x80:
            off = base_offset + zigzag[b]
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                off = base_offset + zigzag[(b & 0x7F) | (b2 << 7)]
                pos += 2
            else:
                raw, pos = read_raw(data, pos)
                off = base_offset + ((raw >> 1) ^ -(raw & 1))
        # key
        b = data[pos]
        if b == 1:
            key = None
            pos += 1
        elif not b & 0x81:
            pos += 1
            field_end = pos + (b >> 1)
            key = data[pos:field_end]
            pos = field_end
        elif b & 1:
            raise CorruptRecordError(f"record at offset {off}: negative key length")
        else:
            raw, pos = read_raw(data, pos)
            field_end = pos + (raw >> 1)
            key = data[pos:field_end]
            pos = field_end
        # value
        b = data[pos]
        if not b & 0x81:
            pos += 1
            field_end = pos + (b >> 1)
            value = data[pos:field_end]
            pos = field_end
        elif b == 1:
            value = None
            pos += 1
        elif b & 1:
            raise CorruptRecordError(f"record at offset {off}: negative value length")
        else:
            b2 = data[pos + 1]
            if b2 < 0x80:
                pos += 2
                field_end = pos + (((b & 0x7F) | (b2 << 7)) >> 1)
            else:
                raw, pos = read_raw(data, pos)
                field_end = pos + (raw >> 1)
            value = data[pos:field_end]
            pos = field_end
        # headers: none (a zero count that ends the record) is the common case
        if pos + 1 == record_end and data[pos] == 0:
            pos = record_end
            append(new(rec, (off, ts, key, value, ())))
            continue
        headers, pos = _read_headers(data, pos)
        if pos != record_end:
            raise CorruptRecordError(f"record at offset {off}: fields do not fill its length")
        append(new(rec, (off, ts, key, value, headers)))
    return pos


# After the first record of a stretch fails to start a uniform run, the general loop decodes
# this many records before the next attempt, doubling (up to _GENERAL_MAX) while attempts keep
# failing: records that never share a layout then cost the attempts next to nothing.
_GENERAL_FIRST = 16
_GENERAL_MAX = 1024


def read_runs(
    data: bytes | memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    out: list[Any],
    tail: Tail | None = None,
    keep_runs: bool = False,
) -> int:
    """Decode ``count`` records at ``data[pos:end]`` into ``out``; returns the end position.

    Same contract and results as :func:`read_records`, faster for runs of records that share
    one layout: those go through ``uniform.read_uniform`` (checked column by column, built
    without Python code per record), the rest through :func:`read_records`. ``data`` may be a
    byte-format ``memoryview``: runs are read from it in place, and the first record the
    general loop needs has the rest of the records copied into ``bytes`` once.

    With ``keep_runs`` (``data`` must then be ``bytes``, which the runs keep) each run is
    appended as one ``uniform.UniformRun`` instead of its records.
    """
    done = 0
    shift = 0  # where ``data`` starts in the caller's buffer, once the rest was copied
    general = _GENERAL_FIRST
    while done < count:
        left = count - done
        if left >= MIN_RUN and keep_runs:
            run = find_run(data, pos, end, left, base_offset, base_ts)
            if run is not None:
                out.append(run)
                done += run.records
                pos += run.records * run.stride
                general = _GENERAL_FIRST
                continue
        elif left >= MIN_RUN:
            n, new_pos = read_uniform(data, pos, end, left, base_offset, base_ts, out, tail)
            if n:
                done += n
                pos = new_pos
                general = _GENERAL_FIRST
                continue
        n = min(general, left)
        if type(data) is not bytes:
            data = bytes(data[pos:end])
            shift += pos
            end -= pos
            pos = 0
        if tail is None:
            pos = read_records(data, pos, n, base_offset, base_ts, out)
        else:
            decoded: list[Record] = []
            pos = read_records(data, pos, n, base_offset, base_ts, decoded)
            out.extend(with_tail(decoded, tail))
        done += n
        if general < _GENERAL_MAX:
            general *= 2
    return pos + shift


# Records of a memoryview input are read in place when they average at least this many bytes.
_IN_PLACE_MIN_RECORD = 2048


def batch_records(
    data: Any, pos: int, bend: int, header: tuple[Any, ...], tail: Tail | None = None,
    keep_runs: bool = False,
) -> list[Any]:
    """The records of the (CRC-checked) batch at ``data[pos:bend]`` whose header is given
    (built as ``tail`` says, see ``base.Tail``).

    Control batches give ``[]``. Raises CorruptRecordError on any malformation. With
    ``keep_runs``, runs of one layout come as ``uniform.UniformRun`` values over a ``bytes``
    copy of the records (never a reused decompression buffer), the others as records.
    """
    base, _, _, _, _, attrs, _, base_ts, max_ts, _, _, _, count = header
    if attrs & CONTROL_MASK:
        return []
    codec = attrs & CODEC_MASK
    rdata: bytes | memoryview
    if codec:
        # may be a view of a buffer reused by the next batch: read_runs copies every key and
        # value out (and what the general loop reads into bytes first)
        rdata = codecs.decompress_reused(codec, memoryview(data)[pos + RECORDS_OFFSET : bend])
        rpos = 0
        rend = len(rdata)
    elif type(data) is bytes or (bend - pos - RECORDS_OFFSET) >= count * _IN_PLACE_MIN_RECORD:
        # bytes, or a view of large records: read in place (read_runs copies what the general
        # loop needs)
        rdata = data if type(data) is bytes or type(data) is memoryview else memoryview(data)
        rpos = pos + RECORDS_OFFSET
        rend = bend
    else:
        # A view of small records: its strided column copies (one element at a time) would
        # cost more than one copy of the batch.
        rdata = bytes(data[pos + RECORDS_OFFSET : bend])
        rpos = 0
        rend = len(rdata)
    if count < 0 or count * MIN_RECORD_SIZE > rend - rpos:
        raise CorruptRecordError(f"batch at offset {base}: record count {count}")
    if keep_runs and type(rdata) is not bytes:
        rdata = bytes(rdata[rpos:rend])
        rpos = 0
        rend = len(rdata)
    out: list[Any] = []
    try:
        rpos = read_runs(rdata, rpos, rend, count, base, base_ts, out, tail, keep_runs)
    except (IndexError, UnicodeDecodeError) as e:
        raise CorruptRecordError(f"batch at offset {base}: malformed record: {e}") from None
    if rpos != rend:
        raise CorruptRecordError(f"batch at offset {base}: records do not fill the batch")
    if attrs & TIMESTAMP_TYPE_MASK:
        out = [
            r._replace(append_ts=max_ts) if type(r) is UniformRun else r._replace(timestamp=max_ts)
            for r in out
        ]
    return out


def decode_run(
    data: bytes, pos: int, end: int, out: list[Any], tail: Tail | None = None,
    keep_runs: bool = False,
) -> int:
    """Decode consecutive complete v2 batches of ``data[pos:end]`` into ``out`` (built as
    ``tail`` says, see ``base.Tail``; with ``keep_runs`` see :func:`batch_records`).

    Returns the position of the first batch not decoded: ``end``, a partial entry, or an entry
    of another magic (the caller dispatches on it).

    Raises:
        CorruptRecordError: a bad CRC, size or layout, or records that do not decompress.
    """
    mv = memoryview(data)
    unpack = HEADER.unpack_from
    unpack_i32 = I32.unpack_from
    extend = out.extend
    try:
        while pos + 12 <= end:
            (blen,) = unpack_i32(data, pos + 8)
            if blen < 14:
                raise CorruptRecordError(f"entry size {blen} at {pos} is below the minimum")
            bend = pos + 12 + blen
            if bend > end:
                break
            if data[pos + 16] != 2:
                break
            if blen < MIN_SIZE:
                raise CorruptRecordError(f"record batch at {pos}: length {blen} is too small")
            header = unpack(data, pos)
            if crc32c(mv[pos + ATTRIBUTES_OFFSET : bend]) != header[4]:
                raise CorruptRecordError(f"record batch at offset {header[0]}: CRC mismatch")
            extend(batch_records(data, pos, bend, header, tail, keep_runs))
            pos = bend
    except struct.error as e:
        raise CorruptRecordError(f"malformed record batch at {pos}: {e}") from None
    finally:
        mv.release()
    return pos


def validate_records(data: Any, pos: int, bend: int, header: tuple[Any, ...]) -> int:
    """Check that a batch's records (control batches too) parse and fill it exactly; returns
    how many there are. The broker's append path: stricter and slower than trusting lengths."""
    attrs = header[5] & ~CONTROL_MASK
    return len(batch_records(data, pos, bend, header[:5] + (attrs,) + header[6:]))
