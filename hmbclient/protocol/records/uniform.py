"""Decode fast path for runs of RecordBatch v2 records that share one layout.

Producers write long runs of records that differ only in their offsetDelta, timestampDelta,
key and value bytes: every record of a run has the same length, attributes, key length, value
length and no headers, so record ``j`` of the run starts ``j * stride`` bytes after the first.
:func:`read_uniform` learns that layout from the first record, then checks the whole run with
strided ``bytes`` slices (one C-level pass per byte column instead of one Python-level decode
per record) and builds the records with C-level ``map``/``zip`` over the columns, so no Python
code runs per record.

Invariant: for every run it accepts, the records it appends are exactly those the general
loop (``v2.read_records``) decodes from the same bytes. A run is accepted only when, for every
record in it,

* each byte of the length varint, the attributes byte, the key and value length varints and
  the (zero) header count equals the first record's: the record is exactly ``stride`` bytes
  and its key and value are where the first record's are, with the same lengths;
* the timestampDelta is one byte (< 0x80), so it sits at the same place in every record;
* the offsetDelta is the canonical varint of ``first delta + j`` (checked against precomputed
  columns of every delta of one varint width).

Anything else (headers, varints longer than this path reads, a layout change, too short a
run) is left to the general loop: :func:`read_uniform` then reads nothing. The caller still
checks that the records end exactly where the batch does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

from .base import ZIGZAG, Record, Tail

__all__ = ["read_uniform", "find_run", "run_records", "UniformRun", "MIN_RUN"]

# A run shorter than this is not worth the layout check: the general loop decodes it.
MIN_RUN = 8
# The first check covers this many records; each later one as many as are verified so far,
# so a layout change costs at most the checks of one chunk no larger than the accepted part.
_FIRST_CHUNK = 16
# Offset deltas this path handles: up to three-byte varints, and below this bound (the size of
# the precomputed columns; larger batches continue on the general loop).
_DELTA_LIMIT = 1 << 17


def _delta_column(width: int, k: int, lo: int, hi: int) -> bytes:
    """Byte ``k`` of the zigzag varint of every offsetDelta ``d`` in ``lo <= d < hi`` (all of
    which take ``width`` bytes), in order. Built by repetition: byte 0 cycles every 64 deltas,
    byte ``k >= 1`` holds each value for ``2 ** (7k - 1)`` deltas."""
    more = 0x80 if k < width - 1 else 0
    if k == 0:
        period = bytes(((2 * d) & 0x7F) | more for d in range(64))
        start = lo % 64
        return (period * ((hi - lo) // 64 + 2))[start : start + hi - lo]
    shift = 7 * k - 1
    first, last = lo >> shift, (hi - 1) >> shift
    column = b"".join(bytes(((v & 0x7F) | more,)) * (1 << shift) for v in range(first, last + 1))
    start = lo - (first << shift)
    return column[start : start + hi - lo]


# Per varint width (1, 2, 3 bytes): (lowest delta, bound, the width's byte columns).
DELTA_COLUMNS: tuple[tuple[int, int, tuple[bytes, ...]], ...] = tuple(
    (lo, hi, tuple(_delta_column(width, k, lo, hi) for k in range(width)))
    for width, lo, hi in ((1, 0, 64), (2, 64, 8192), (3, 8192, _DELTA_LIMIT))
)

_first = itemgetter(0)
_second = itemgetter(1)
_new = tuple.__new__
_NO_HEADERS = ()


def _length(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A key/value length varint of at most three bytes at ``pos``: (length, -1 for null;
    width). Width 0: longer, or negative other than the one-byte -1 (not this path's)."""
    b = data[pos]
    if b < 0x80:
        raw = b
        width = 1
    else:
        b2 = data[pos + 1]
        if b2 < 0x80:
            raw = (b & 0x7F) | (b2 << 7)
            width = 2
        else:
            b3 = data[pos + 2]
            if b3 >= 0x80:
                return 0, 0
            raw = (b & 0x7F) | ((b2 & 0x7F) << 7) | (b3 << 14)
            width = 3
    if raw & 1:
        # only the one-byte -1 is null; the general loop refuses any other negative length
        return (-1, 1) if width == 1 and raw == 1 else (0, 0)
    return raw >> 1, width


def _layout(data: bytes | memoryview, pos: int, end: int, left: int) -> tuple[Any, ...] | None:
    """The layout of the record at ``pos`` if it can start a run, else None: (stride, the most
    records the run may hold, the first record's bytes, the columns that must equal them, the
    timestampDelta column, the offsetDelta column, the offsetDelta columns to compare with and
    where the first delta is in them, the first delta, key column and length, value column and
    length). Columns count from a record's start; a null key or value has length -1."""
    # length varint (1-2 bytes), then the attributes byte
    b = data[pos]
    if b < 0x80:
        raw = b
        at = 1
    else:
        b2 = data[pos + 1]
        if b2 >= 0x80:
            return None
        raw = (b & 0x7F) | (b2 << 7)
        at = 2
    if raw & 1:
        return None
    stride = at + (raw >> 1)
    count = min(left, (end - pos) // stride)
    if count < MIN_RUN:
        return None
    const = list(range(at + 1))  # the length varint and the attributes byte
    ts_at = at + 1
    if data[pos + ts_at] >= 0x80:
        return None
    off_at = ts_at + 1
    # offsetDelta: a canonical varint of 1-3 bytes
    raw = 0
    width = 0
    while True:
        b = data[pos + off_at + width]
        raw |= (b & 0x7F) << (7 * width)
        width += 1
        if b < 0x80:
            break
        if width == 3:
            return None
    if raw & 1:
        return None
    first_delta = raw >> 1
    lo, hi, delta_columns = DELTA_COLUMNS[width - 1]
    if not lo <= first_delta < hi:
        return None
    count = min(count, hi - first_delta)
    if count < MIN_RUN:
        return None
    at = off_at + width
    key_len, key_width = _length(data, pos + at)
    if not key_width:
        return None
    const.extend(range(at, at + key_width))
    key_at = at + key_width
    at = key_at + max(key_len, 0)
    if at + 2 > stride:
        return None
    value_len, value_width = _length(data, pos + at)
    if not value_width:
        return None
    const.extend(range(at, at + value_width))
    value_at = at + value_width
    at = value_at + max(value_len, 0)
    if at != stride - 1 or data[pos + at]:  # exactly one byte left: a zero header count
        return None
    const.append(at)
    template = data[pos : pos + stride]
    return (
        stride, count, template, const, ts_at, off_at, delta_columns, first_delta - lo,
        first_delta, key_at, key_len, value_at, value_len,
    )  # fmt: skip


class UniformRun(NamedTuple):
    """A verified run of records that share one layout, not yet made into ``Record`` values
    (what :func:`find_run` accepts; :func:`run_records` makes them).

    Record ``j`` (``0 <= j < records``) starts at ``data[pos + j * stride]``; its offset is
    ``offset + j``, its timestamp ``base_ts`` plus the zigzag of the byte at ``ts_at`` (or
    ``append_ts`` for a LogAppendTime batch), its key ``key_len`` bytes at ``key_at`` and its
    value ``value_len`` bytes at ``value_at`` (``-1``: null); it has no headers. The field order
    starts with ``offset`` like ``Record``'s, so a list mixing both sorts and bisects by
    ``offset`` (the first record's); the last offset is ``offset + records - 1``.
    """

    offset: int
    data: bytes | memoryview
    pos: int
    records: int
    stride: int
    base_ts: int
    ts_at: int
    key_at: int
    key_len: int
    value_at: int
    value_len: int
    append_ts: int | None = None

    def cut(self, lo: int | None, hi: int | None) -> UniformRun | None:
        """The part of this run with ``lo <= offset < hi`` (None: no bound), or None if empty."""
        first = self.offset if lo is None else max(self.offset, lo)
        stop = self.offset + self.records if hi is None else min(self.offset + self.records, hi)
        if stop <= first:
            return None
        skip = first - self.offset
        return self._replace(offset=first, pos=self.pos + skip * self.stride, records=stop - first)


def find_run(
    data: bytes | memoryview, pos: int, end: int, left: int, base_offset: int, base_ts: int
) -> UniformRun | None:
    """The run of records at ``data[pos:end]`` that share the first one's layout, checked, or
    None when the record at ``pos`` does not start a run this path takes.

    ``left`` bounds how many records may be read (the rest of the batch's record count).
    Never raises for malformed input: it only accepts what it has checked (see the module
    docstring).
    """
    try:
        layout = _layout(data, pos, end, left)
    except IndexError:  # a truncated first record: the general loop reports it
        return None
    if layout is None:
        return None
    (
        stride, count, template, const, ts_at, off_at, delta_columns, delta_pos,
        first_delta, key_at, key_len, value_at, value_len,
    ) = layout  # fmt: skip
    # A view's slices are views: copy each column out (a view has no count/isascii).
    view = type(data) is not bytes
    # Check chunk by chunk: a layout change stops the run at the last good chunk.
    done = 0
    chunk = min(_FIRST_CHUNK, count)
    while done < count:
        start = pos + done * stride
        stop = start + chunk * stride
        column: Any = data[start + ts_at : stop : stride]
        ok = (column.tobytes() if view else column).isascii()
        if ok:
            for k in const:
                column = data[start + k : stop : stride]
                if (column.tobytes() if view else column).count(template[k]) != chunk:
                    ok = False
                    break
        if ok:
            d = delta_pos + done
            for k, expected in enumerate(delta_columns):
                column = data[start + off_at + k : stop : stride]
                if (column.tobytes() if view else column) != expected[d : d + chunk]:
                    ok = False
                    break
        if not ok:
            break
        done += chunk
        chunk = min(done, count - done)
    if done < MIN_RUN:
        return None
    return UniformRun(
        base_offset + first_delta, data, pos, done, stride, base_ts, ts_at,
        key_at, key_len, value_at, value_len,
    )  # fmt: skip


def read_uniform(
    data: bytes | memoryview,
    pos: int,
    end: int,
    left: int,
    base_offset: int,
    base_ts: int,
    out: list[Record],
    tail: Tail | None = None,
) -> tuple[int, int]:
    """Decode the run of records at ``data[pos:end]`` that share the first one's layout.

    ``data`` is ``bytes`` or a byte-format ``memoryview`` (keys and values are copied out of
    either as ``bytes``). ``left`` bounds how many records may be read (the rest of the
    batch's record count).
    Returns ``(records appended to out, position after them)``; ``(0, pos)`` when the record
    at ``pos`` does not start a run this path takes (see :func:`find_run`). ``tail`` (see
    ``base.Tail``): the records are built as that class with those fields after the decoded
    ones.
    """
    run = find_run(data, pos, end, left, base_offset, base_ts)
    if run is None:
        return 0, pos
    out.extend(run_records(run, tail))
    return run.records, run.pos + run.records * run.stride


def run_records(run: UniformRun, tail: Tail | None = None) -> Iterator[Record]:
    """The records of ``run``, in order, built with C-level ``map``/``zip`` over its columns
    (keys and values are ``bytes`` copies; as ``tail`` says, see ``base.Tail``)."""
    data, pos, done, stride = run.data, run.pos, run.records, run.stride
    key_at, key_len, value_at, value_len = run.key_at, run.key_len, run.value_at, run.value_len
    base_ts = run.base_ts
    view = type(data) is not bytes
    run_end = pos + done * stride
    timestamps: Any
    if run.append_ts is not None:  # LogAppendTime: the batch's max timestamp for every record
        timestamps = repeat(run.append_ts, done)
    else:
        stamps: Any = data[pos + run.ts_at : run_end : stride]
        if view:
            stamps = stamps.tobytes()
        first_stamp = stamps[0]
        if stamps.count(first_stamp) == done:
            timestamps = repeat(base_ts + ZIGZAG[first_stamp], done)
        elif done >= 256:
            # one int per distinct delta instead of one per record
            table = [base_ts + z for z in ZIGZAG[:128]]
            timestamps = map(table.__getitem__, stamps)
        else:
            timestamps = map(base_ts.__add__, map(ZIGZAG.__getitem__, stamps))
    keys: Any
    values: Any
    if key_len >= 0 and value_len >= 0:
        fields = list(
            struct.iter_unpack(
                f"{key_at}x{key_len}s{value_at - key_at - key_len}x{value_len}s1x",
                memoryview(data)[pos:run_end],
            )
        )
        keys = map(_first, fields)
        values = map(_second, fields)
    elif value_len >= 0:
        keys = repeat(None, done)
        values = map(
            _first,
            struct.iter_unpack(f"{value_at}x{value_len}s1x", memoryview(data)[pos:run_end]),
        )
    elif key_len >= 0:
        keys = map(
            _first,
            struct.iter_unpack(
                f"{key_at}x{key_len}s{stride - key_at - key_len}x", memoryview(data)[pos:run_end]
            ),
        )
        values = repeat(None, done)
    else:
        keys = repeat(None, done)
        values = repeat(None, done)  # not the same iterator: zip takes one item from each
    first_offset = run.offset
    cls, extra = (Record, ()) if tail is None else tail
    return iter(
        map(
            _new,
            repeat(cls, done),
            zip(
                range(first_offset, first_offset + done), timestamps, keys, values, repeat(_NO_HEADERS, done),
                *[repeat(field, done) for field in extra],
                strict=True,
            ),
        )
    )
