"""Format-agnostic entry points over record sets: any mix of MessageSet v0/v1 and RecordBatch v2.

A *record set* is what the Produce and Fetch APIs carry: top-level entries back to back, each
``offset:int64 size:int32`` then ``size`` bytes whose byte 4 is the magic. Readers (the
consumer) see fetch responses that may end in the middle of an entry; that partial trailing
entry is dropped silently. Writers (the broker's append path) must never see one.

Sans-IO and copy-conscious: ``iter_records`` walks a ``bytes`` input in place and copies a
``bytearray``/``memoryview`` input one window (or one entry) at a time, never whole; the bulk
``decode_records`` copies a ``bytearray``/``memoryview`` input one v2 batch at a time (batches
of records of 2 KiB and more are read in place) and v0/v1 entries once, from the first of them
on: slicing ``bytes`` is what makes the per-record loops fast. Only ProtocolError subclasses (CorruptRecordError) and, on the append
path, MessageSizeTooLargeError leave this module for malformed input; scanning stops instead.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import Any

from crc32c import crc32c

from hmbclient.clock import wall_ms
from hmbclient.errors import CorruptRecordError, MessageSizeTooLargeError, ProtocolError

from . import codecs, legacy, v2
from .base import CODEC_MASK, I32, I64, NO_TIMESTAMP, Entry, GcPaused, Record, Tail, with_tail
from .uniform import UniformRun, run_records

_offset = attrgetter("offset")

__all__ = [
    "encode_records",
    "iter_records",
    "decode_records",
    "decode_segments",
    "expand_segments",
    "cut_segments",
    "last_offset",
    "scan_entries",
    "assign_offsets",
    "convert_records",
    "max_magic_for_fetch",
    "max_magic_for_produce",
]

Buffer = bytes | bytearray | memoryview

# How much of a non-bytes input iter_records copies (and decodes) at a time.
_WINDOW = 256 * 1024
_MIN_ENTRY = 14  # smallest size field of any entry (a magic 0 message)


def encode_records(
    magic: int,
    codec: int,
    items: Iterable[Any],
    base_offset: int = 0,
    timestamp_ms: int | None = None,
) -> bytes:
    """Encode ``items`` as one record set.

    Args:
        magic: 0 or 1 (MessageSet: one message per item, or with a codec one compressed wrapper
            message around them all) or 2 (one RecordBatch).
        codec: NONE, GZIP, SNAPPY, LZ4 or ZSTD (ZSTD needs magic 2).
        items: ``(key, value, timestamp_ms)`` tuples, or ``(key, value, timestamp_ms, headers)``
            with headers a sequence of ``(str, bytes | None)`` (magic 2 only). key and value are
            bytes-like or None; a None timestamp means ``timestamp_ms``.
        base_offset: the first record's offset; the others follow consecutively. Producers
            leave it 0 (the broker assigns offsets); the broker uses it to build log entries.
        timestamp_ms: the default timestamp; None means the current time.

    Returns:
        The encoded bytes; ``b""`` for no items.

    Raises:
        ValueError: an unknown magic or codec, zstd below magic 2, headers below magic 2, or an
            item that cannot be encoded (a value outside its field's range).
    """
    if magic not in (0, 1, 2):
        raise ValueError(f"unknown magic {magic}")
    if codec not in codecs.CODEC_NAMES:
        raise ValueError(f"unknown compression codec id {codec}")
    if codec == codecs.ZSTD and magic < 2:
        raise ValueError("zstd compression needs RecordBatch v2 (magic 2)")
    if not isinstance(items, list | tuple):
        items = list(items)
    default_ts = wall_ms() if timestamp_ms is None else timestamp_ms
    if magic == 2:
        return v2.encode(codec, items, base_offset, default_ts)
    return legacy.encode(magic, codec, items, base_offset, default_ts)


# --- reading ---------------------------------------------------------------------------------


def _decode_into(
    data: bytes, pos: int, end: int, out: list[Any], tail: Tail | None = None,
    keep_runs: bool = False,
) -> tuple[int, CorruptRecordError | None]:
    """Decode the complete entries of ``data[pos:end]`` into ``out``.

    Returns where decoding stopped (``end`` or the start of a partial entry) and the error that
    stopped it, if any: the records of every entry before the bad one are in ``out``.
    """
    with GcPaused():  # records are built in bulk (see GcPaused)
        return _decode_entries(data, pos, end, out, tail, keep_runs)


def _decode_entries(
    data: bytes, pos: int, end: int, out: list[Any], tail: Tail | None = None,
    keep_runs: bool = False,
) -> tuple[int, CorruptRecordError | None]:
    unpack_i32 = I32.unpack_from
    try:
        while pos + 12 <= end:
            (size,) = unpack_i32(data, pos + 8)
            if size < _MIN_ENTRY:
                raise CorruptRecordError(f"entry size {size} at {pos} is below the minimum")
            if pos + 12 + size > end:
                break
            magic = data[pos + 16]
            if magic == 2:
                new_pos = v2.decode_run(data, pos, end, out, tail, keep_runs)
            elif magic < 2:
                if type(data) is not bytes:
                    break  # v0/v1 decoding slices bytes: decode_records copies the rest
                if tail is None:
                    new_pos = legacy.decode_run(data, pos, end, out)
                else:
                    decoded: list[Record] = []
                    try:
                        new_pos = legacy.decode_run(data, pos, end, decoded)
                    finally:  # the records before a corrupt entry too
                        out.extend(with_tail(decoded, tail))
            else:
                raise CorruptRecordError(f"entry at {pos} has unknown magic {magic}")
            if new_pos == pos:  # cannot happen: the entry is complete and of that magic
                break
            pos = new_pos
    except CorruptRecordError as e:
        return pos, e
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        return pos, CorruptRecordError(f"malformed entry at {pos}: {e}")
    return pos, None


def decode_records(buf: Buffer, tail: Tail | None = None) -> list[Record]:
    """Every record in a record set, as a list (the bulk path of :func:`iter_records`).

    Args:
        buf: a record set (bytes, bytearray or memoryview). A non-``bytes`` input is copied
            one v2 batch at a time (batches of large records are read in place; keys and values
            are always ``bytes`` copies) and, from its first v0/v1 message on, once.
        tail: ``(cls, fields)``: each record built as ``cls`` from the Record's fields followed
            by ``fields`` (a consumer's own record tuple, with no Record made first); None:
            Records.

    Returns:
        The records in order, compressed wrappers and batches expanded with absolute offsets,
        control batches skipped. A partial trailing entry is dropped silently.

    Raises:
        CorruptRecordError: a CRC mismatch, an impossible size, an unknown magic, malformed
            records or data that does not decompress.
    """
    return _decode_all(buf, tail, False)


def decode_segments(buf: Buffer) -> list[Record | UniformRun]:
    """:func:`decode_records`, with each run of v2 records that share one layout left as one
    :class:`~hmbclient.protocol.records.uniform.UniformRun` (checked exactly as
    :func:`decode_records` checks it, its records not built): for columnar readers, which can
    take a run's keys, values and timestamps as strided slices of its bytes. Other records come
    as ``Record`` values; the list is in offset order and sorts by ``.offset`` (a run's first).
    :func:`expand_segments` gives :func:`decode_records`' list.

    Args:
        buf: a record set, as for :func:`decode_records`.

    Raises:
        CorruptRecordError: as :func:`decode_records`.
    """
    return _decode_all(buf, None, True)


def expand_segments(segments: Iterable[Record | UniformRun]) -> list[Record]:
    """The records of :func:`decode_segments`' list, as :func:`decode_records` gives them."""
    out: list[Record] = []
    for seg in segments:
        if type(seg) is UniformRun:
            out.extend(run_records(seg))
        else:
            out.append(seg)  # type: ignore[arg-type]
    return out


def last_offset(segment: Record | UniformRun) -> int:
    """The last offset of a :func:`decode_segments` element (a record's own offset)."""
    return segment.offset + segment.records - 1 if type(segment) is UniformRun else segment.offset


def cut_segments(
    segments: list[Record | UniformRun], lo: int | None, hi: int | None
) -> list[Record | UniformRun]:
    """The part of a :func:`decode_segments` list with ``lo <= offset < hi`` (None: no bound):
    whole elements found by binary search, a run that straddles a bound cut inside."""
    first = 0 if lo is None else bisect_left(segments, lo, key=_offset)
    stop = len(segments) if hi is None else bisect_left(segments, hi, key=_offset)
    out = segments[first:stop]
    if lo is not None and first > 0 and type(segments[first - 1]) is UniformRun:
        head = segments[first - 1].cut(lo, hi)  # type: ignore[union-attr]
        if head is not None:
            out.insert(0, head)
    if hi is not None and out and type(out[-1]) is UniformRun and last_offset(out[-1]) >= hi:
        tail = out[-1].cut(lo, hi)
        out[-1:] = [] if tail is None else [tail]
    return out


def _decode_all(buf: Buffer, tail: Tail | None, keep_runs: bool) -> list[Any]:
    out: list[Any] = []
    if type(buf) is bytes:
        _, err = _decode_into(buf, 0, len(buf), out, tail, keep_runs)
    else:
        view = memoryview(buf)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        n = len(view)
        stop, err = _decode_into(view, 0, n, out, tail, keep_runs)  # type: ignore[arg-type]
        # Stopped before the end: a v0/v1 entry, which needs bytes (copy the rest once), or a
        # partial trailing entry (a fetch answer cut at its size; dropped, not copied).
        if err is None and stop + 12 <= n and stop + 12 + I32.unpack_from(view, stop + 8)[0] <= n:
            rest = bytes(view[stop:])
            _, err = _decode_into(rest, 0, len(rest), out, tail, keep_runs)
    if err is not None:
        raise err
    return out


def iter_records(buf: Buffer) -> Iterator[Record]:
    """Iterate the records of a record set, decoding a window of entries at a time.

    Same results as :func:`decode_records`. Records of the entries before a corrupt one are
    yielded before CorruptRecordError is raised. ``bytes`` input is never copied; other input is
    copied one window (256 KiB, or one larger entry) at a time.
    """
    n = len(buf)
    is_bytes = type(buf) is bytes
    mv = None if is_bytes else memoryview(buf).cast("B")
    pos = 0
    window = _WINDOW
    try:
        while pos + 12 <= n:
            wend = min(n, pos + window)
            if mv is None:
                chunk = buf
                cpos = pos
                cend = wend
            else:
                chunk = bytes(mv[pos:wend])
                cpos = 0
                cend = len(chunk)
            out: list[Record] = []
            stop, err = _decode_into(chunk, cpos, cend, out)  # type: ignore[arg-type]
            yield from out
            if err is not None:
                raise err
            advanced = stop - cpos
            if advanced == 0:
                if wend == n:
                    return  # a partial trailing entry
                (size,) = I32.unpack_from(buf, pos + 8)
                window = 12 + size  # exactly the entry that did not fit in the window
                continue
            pos += advanced
            window = _WINDOW
    finally:
        if mv is not None:
            mv.release()


def _legacy_entry(mv: memoryview, pos: int, end: int, magic: int, verify_crc: bool) -> Entry:
    off, _, attrs, ts, _, _, _ = legacy.read_message(mv, pos, end, verify_crc)
    if attrs & CODEC_MASK:
        recs, _ = legacy.parse_wrapper(mv, pos, end, magic)
        max_ts = max(r.timestamp for r in recs)
        return Entry(pos, end - pos, magic, recs[0].offset, recs[-1].offset, max_ts, len(recs))
    return Entry(pos, end - pos, magic, off, off, ts, 1)


def scan_entries(buf: Buffer, verify_crc: bool = True) -> tuple[list[Entry], int]:
    """The top-level entries of a record set, for log recovery and the sparse offset index.

    Args:
        buf: a record set (a log segment's bytes, or a part of one).
        verify_crc: check the CRC of every top-level message and batch (a compressed wrapper's
            inner messages are always checked: they are decoded to learn their offsets).

    Returns:
        ``(entries, valid_bytes)``: one :class:`Entry` per message, compressed wrapper or batch,
        up to the first partial or corrupt entry; ``valid_bytes`` is the length of that good
        prefix (truncate the log there). Wrappers are decompressed to learn their inner offsets.
        Never raises for malformed input.
    """
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    n = len(mv)
    entries: list[Entry] = []
    append = entries.append
    unpack_v2 = v2.HEADER.unpack_from
    pos = 0
    try:
        while pos + 12 <= n:
            (size,) = I32.unpack_from(mv, pos + 8)
            end = pos + 12 + size
            if size < _MIN_ENTRY or end > n:
                break
            magic = mv[pos + 16]
            try:
                if magic == 2:
                    if size < v2.MIN_SIZE:
                        break
                    header = unpack_v2(mv, pos)
                    if verify_crc and crc32c(mv[pos + v2.ATTRIBUTES_OFFSET : end]) != header[4]:
                        break
                    append(Entry(pos, end - pos, 2, header[0], header[0] + header[6], header[8], header[12]))
                elif magic < 2:
                    append(_legacy_entry(mv, pos, end, magic, verify_crc))
                else:
                    break
            except (ProtocolError, struct.error, IndexError, ValueError):
                break
            pos = end
    finally:
        mv.release()
    return entries, pos


# --- the broker's append path ----------------------------------------------------------------


def assign_offsets(
    buf: Buffer, next_offset: int, *, max_message_bytes: int | None = None
) -> tuple[bytes, int, int, int, int]:
    """Validate a producer's record set and give its records offsets from ``next_offset`` on.

    v2 batches get a new baseOffset (outside the CRC); v0/v1 messages a new offset field; a
    magic 1 wrapper the offset of its last inner message (inner relative offsets that are not
    0..n-1 are rewritten and recompressed); a magic 0 wrapper also gets its inner absolute
    offsets rewritten, so it is recompressed with the same codec and gets a new CRC. Entries of
    different magics may be mixed.

    Args:
        buf: the record set of one partition of a Produce request.
        next_offset: the log end offset: the first record's new offset.
        max_message_bytes: the largest allowed entry (a message, wrapper or batch, counting its
            12-byte offset/size header), or None for no limit.

    Returns:
        ``(new_bytes, count, last_offset, max_timestamp, magic)``: the bytes to append, how many
        records (offsets) they hold, the last offset assigned (``next_offset - 1`` for an empty
        set), the largest timestamp (-1 if none), and the highest magic seen (-1 if empty).

    Raises:
        CorruptRecordError: a partial or truncated entry, a CRC mismatch, an unknown magic,
            malformed or undecompressable records, an empty batch or wrapper, or a v2 batch whose
            record count disagrees with its lastOffsetDelta.
        MessageSizeTooLargeError: an entry over ``max_message_bytes``.
    """
    out = bytearray(buf)
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    n = len(mv)
    shift = 0  # how much earlier rebuilt wrappers moved the rest of ``out``
    pos = 0
    count = 0
    max_ts = NO_TIMESTAMP
    max_magic = -1
    try:
        while pos < n:
            end = _checked_entry_end(mv, pos, n, max_message_bytes)
            magic = mv[pos + 16]
            if magic == 2:
                k, ts = _assign_batch(mv, pos, end, out, pos + shift, next_offset)
            elif magic < 2:
                k, ts, moved = _assign_message(mv, pos, end, magic, out, shift, next_offset)
                shift += moved
            else:
                raise CorruptRecordError(f"entry at {pos} has unknown magic {magic}")
            if ts > max_ts:
                max_ts = ts
            if magic > max_magic:
                max_magic = magic
            next_offset += k
            count += k
            pos = end
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        if isinstance(e, ProtocolError):
            raise
        raise CorruptRecordError(f"malformed entry at {pos}: {e}") from None
    finally:
        mv.release()
    return bytes(out), count, next_offset - 1, max_ts, max_magic


def _checked_entry_end(mv: memoryview, pos: int, n: int, max_message_bytes: int | None) -> int:
    """Where the entry at ``pos`` ends, once its size field is checked (append path)."""
    if pos + 12 > n:
        raise CorruptRecordError(f"truncated entry header at {pos}")
    (size,) = I32.unpack_from(mv, pos + 8)
    if size < _MIN_ENTRY:
        raise CorruptRecordError(f"entry size {size} at {pos} is below the minimum")
    end = pos + 12 + size
    if end > n:
        raise CorruptRecordError(f"partial entry at {pos}: {end - n} bytes missing")
    if max_message_bytes is not None and end - pos > max_message_bytes:
        raise MessageSizeTooLargeError(
            f"entry of {end - pos} bytes is over max.message.bytes={max_message_bytes}"
        )
    return end


def _assign_batch(
    mv: memoryview, pos: int, end: int, out: bytearray, out_pos: int, next_offset: int
) -> tuple[int, int]:
    """Validate the v2 batch at ``mv[pos:end]`` and give it baseOffset ``next_offset`` at
    ``out[out_pos]`` (outside the CRC); returns (record count, max timestamp)."""
    size = end - pos - 12
    if size < v2.MIN_SIZE:
        raise CorruptRecordError(f"record batch at {pos}: length {size} is too small")
    header = v2.HEADER.unpack_from(mv, pos)
    if crc32c(mv[pos + v2.ATTRIBUTES_OFFSET : end]) != header[4]:
        raise CorruptRecordError(f"record batch at {pos}: CRC mismatch")
    count = header[12]
    if count <= 0 or header[6] != count - 1:
        raise CorruptRecordError(f"record batch at {pos}: {count} records but lastOffsetDelta {header[6]}")
    v2.validate_records(mv, pos, end, header)
    I64.pack_into(out, out_pos, next_offset)
    return count, header[8]


def _assign_message(
    mv: memoryview, pos: int, end: int, magic: int, out: bytearray, shift: int, next_offset: int
) -> tuple[int, int, int]:
    """Validate the v0/v1 message at ``mv[pos:end]`` (``out[pos + shift:]``) and give it
    offsets from ``next_offset`` on; returns (offsets used, max timestamp, how many bytes a
    rebuilt wrapper moved the rest of ``out``).

    A plain message gets a new offset field; a magic 1 wrapper the offset of its last inner
    message; a wrapper whose inner offsets are not what they must be (magic 1: 0..n-1 relative,
    magic 0: absolute) is rebuilt, recompressed with the same codec.
    """
    _, _, attrs, ts, key, _, _ = legacy.read_message(mv, pos, end)
    if not attrs & CODEC_MASK:
        I64.pack_into(out, pos + shift, next_offset)
        return 1, ts, 0
    records, inner = legacy.parse_wrapper(mv, pos, end, magic)
    count = len(records)
    start = 0 if magic == 1 else next_offset
    wanted = list(range(start, start + count))
    max_ts = max(r.timestamp for r in records)
    if inner.offsets == wanted:
        I64.pack_into(out, pos + shift, next_offset + count - 1)
        return count, max_ts, 0
    inner_set = bytearray(inner.data)
    for position, offset in zip(inner.positions, wanted, strict=True):
        I64.pack_into(inner_set, position, offset)
    value = codecs.compress(attrs & CODEC_MASK, inner_set, magic)
    wrapper_key = None if key is None else bytes(key)
    wrapper = legacy.build_wrapper(magic, attrs, next_offset + count - 1, ts, wrapper_key, value)
    out[pos + shift : end + shift] = wrapper
    return count, max_ts, len(wrapper) - (end - pos)


# --- down-conversion for old fetch versions --------------------------------------------------


def convert_records(buf: Buffer, to_magic: int) -> Buffer:
    """Down-convert the entries of a record set above ``to_magic`` (v2 -> v1/v0, v1 -> v0).

    Absolute offsets are kept; headers are dropped (v0/v1 cannot carry them); timestamps are
    dropped for v0; a compressed batch becomes one wrapper compressed with the same codec
    (zstd, which v0/v1 cannot carry, becomes uncompressed). Control batches disappear. A
    partial trailing entry is dropped when anything is converted.

    Returns:
        ``buf`` itself when no complete entry is above ``to_magic``, else new ``bytes``.

    Raises:
        ValueError: ``to_magic`` is not 0, 1 or 2.
        CorruptRecordError: an entry that has to be converted is corrupt.
    """
    if to_magic not in (0, 1, 2):
        raise ValueError(f"unknown magic {to_magic}")
    mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    try:
        n = len(mv)
        spans: list[tuple[int, int, int]] = []
        pos = 0
        needed = False
        while pos + 12 <= n:
            (size,) = I32.unpack_from(mv, pos + 8)
            end = pos + 12 + size
            if size < _MIN_ENTRY or end > n:
                break
            magic = mv[pos + 16]
            spans.append((pos, end, magic))
            needed = needed or magic > to_magic
            pos = end
        if not needed:
            return buf
        parts: list[bytes] = []
        for pos, end, magic in spans:
            entry = bytes(mv[pos:end])
            if magic <= to_magic:
                parts.append(entry)
                continue
            recs: list[Record] = []
            _, err = _decode_into(entry, 0, len(entry), recs)
            if err is not None:
                raise err
            if not recs:
                continue
            if magic == 2:
                codec = v2.HEADER.unpack_from(entry)[5] & CODEC_MASK
            else:
                codec = entry[17] & CODEC_MASK
            if codec == codecs.ZSTD:
                codec = codecs.NONE
            items = [(r.key, r.value, r.timestamp) for r in recs]
            offsets = [r.offset for r in recs]
            try:
                parts.append(legacy.encode(to_magic, codec, items, 0, NO_TIMESTAMP, offsets))
            except ValueError as e:  # e.g. offsets past int64 from a damaged base offset
                raise CorruptRecordError(f"entry at offset {offsets[0]}: cannot down-convert: {e}") from None
        return b"".join(parts)
    finally:
        mv.release()


def max_magic_for_fetch(api_version: int) -> int:
    """The newest record format a Fetch response of ``api_version`` may carry (v0-1: magic 0,
    v2-3: magic 1, v4+: magic 2)."""
    if api_version >= 4:
        return 2
    if api_version >= 2:
        return 1
    return 0


def max_magic_for_produce(api_version: int) -> int:
    """The newest record format a Produce request of ``api_version`` may carry (v0-1: magic 0,
    v2: magic 1, v3+: magic 2)."""
    if api_version >= 3:
        return 2
    if api_version >= 2:
        return 1
    return 0
