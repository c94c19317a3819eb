"""ByteBufferMessageSet: the lazily decoded record set of one fetched partition.

Iterating yields :data:`MessageAndOffset` values (the records module's ``Record``:
``.offset``, ``.next_offset``, ``.message.key``, ``.message.value``, ``.message.timestamp``).
The bytes are decoded on the first iteration, in one ``decode_records`` call (CRC checked,
compressed wrappers and v2 batches expanded with absolute offsets, a partial trailing entry
dropped), and the list is kept, so iterating twice decodes once.

A broker answers a fetch from offset N with whole batches/wrappers, which may start before N;
records below the requested offset are skipped (a slice at the first offset >= N, found by
binary search, not a per-record test). A partition whose fetch failed keeps its error: iterating raises it.

The cheap header walk :func:`last_offset_of` (no decoding, no CRC) tells the consumer where the
next fetch will start, so it can be sent while this set is still being decoded.

Transactions (KIP-98): control batches (commit/abort markers) are never yielded, whatever the
isolation level. A set fetched with ``read_committed`` (isolation_level 1) is given the
answer's aborted transactions and drops their records (``control.read_committed``: Kafka's
consumer algorithm, by producer id and first offset, until the producer's ABORT marker); the
broker already cut the set at the last stable offset. ``next_offset`` is after the last
complete entry, so a set that holds only markers or aborted records still moves the consumer
on (its length is 0, its ``next_offset`` is not the fetch offset).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterator
from operator import attrgetter
from typing import Any

from hmbclient.errors import BrokerError
from hmbclient.protocol.records import Record, decode_records
from hmbclient.protocol.records.control import read_committed
from hmbclient.protocol.records.records import (
    cut_segments,
    decode_segments,
    expand_segments,
    last_offset,
)
from hmbclient.protocol.records.uniform import UniformRun

__all__ = [
    "MessageAndOffset",
    "ByteBufferMessageSet",
    "last_offset_of",
    "first_entry_incomplete",
    # segments() helpers, for columnar readers (spark_integration) that may not import protocol
    "UniformRun",
    "cut_segments",
    "expand_segments",
    "last_offset",
]

#: One message and its offset (Kafka 0.8's ``MessageAndOffset``): an alias of ``Record``.
MessageAndOffset = Record

_entry_head = struct.Struct(">qi")
_i32 = struct.Struct(">i")
_V2_LAST_DELTA = 23  # baseOffset(8) batchLength(4) leaderEpoch(4) magic(1) crc(4) attributes(2)
_offset = attrgetter("offset")


def last_offset_of(buf: Any) -> int | None:
    """The last offset held by the complete entries of a record set, or None if there is none.

    Reads only entry headers: v2 batches give ``baseOffset + lastOffsetDelta``; v0/v1 messages
    and compressed wrappers carry their (last) offset in the entry header.
    """
    n = len(buf)
    pos = 0
    last: int | None = None
    while pos + 12 <= n:
        off, size = _entry_head.unpack_from(buf, pos)
        end = pos + 12 + size
        if size <= 0 or end > n:
            break
        if size > 13 and buf[pos + 16] == 2 and pos + _V2_LAST_DELTA + 4 <= n:
            last = off + _i32.unpack_from(buf, pos + _V2_LAST_DELTA)[0]
        else:
            last = off
        pos = end
    return last


def first_entry_incomplete(buf: Any) -> int | None:
    """If ``buf`` holds no complete entry but starts one, that entry's full size; else None."""
    n = len(buf)
    if n < 12:
        return None if n == 0 else 12
    _, size = _entry_head.unpack_from(buf, 0)
    if 12 + size > n:
        return 12 + size
    return None


class ByteBufferMessageSet:
    """The messages of one partition from one fetch. See the module docstring.

    Attributes:
        topic, partition: where they come from.
        fetch_offset: the offset that was asked for.
        high_watermark: the partition's high watermark (-1 if the broker did not say).
        error: the BrokerError of this partition, or None.
        buffer: the raw record-set bytes.
    """

    __slots__ = (
        "topic", "partition", "fetch_offset", "high_watermark", "error", "buffer", "_records",
        "aborted", "last_stable_offset", "_segments",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        buffer: Any,
        high_watermark: int = -1,
        error: BrokerError | None = None,
        *,
        aborted: Any = None,
        last_stable_offset: int = -1,
    ) -> None:
        self.topic = topic
        # read_committed: the answer's aborted transactions ((producer_id, first_offset)
        # pairs or objects; [] when none); None: read_uncommitted
        self.aborted = aborted
        self.last_stable_offset = last_stable_offset
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.high_watermark = high_watermark
        self.error = error
        self.buffer = buffer if buffer is not None else b""
        self._records: list[Record] | None = None
        self._segments: list[Record | UniformRun] | None = None

    def _decode(self) -> list[Record]:
        recs = self._records
        if recs is None and self._segments is not None:
            recs = self._records = expand_segments(self._segments)
        if recs is None:
            if self.error is not None:
                raise self.error
            if not len(self.buffer):
                recs = []
            elif not self.aborted:
                # read_uncommitted, or nothing aborted in this set: markers are all there is
                # to leave out, and decode_records skips control batches
                recs = decode_records(self.buffer)
            else:
                recs = read_committed(self.buffer, self.aborted)
            fo = self.fetch_offset
            if recs and recs[0].offset < fo:
                # offsets ascend: a binary search, not a walk through (say) the first half of
                # a 10,000-record batch
                recs = recs[bisect_left(recs, fo, key=_offset) :]
            self._records = recs
        return recs

    def __iter__(self) -> Iterator[Record]:
        """Iterate MessageAndOffset values.

        Raises:
            the partition's BrokerError (e.g. OffsetOutOfRangeError) if its fetch failed;
            CorruptRecordError on a CRC mismatch.
        """
        return iter(self._decode())

    def messages(self) -> list[Record]:
        """All decoded messages as a list (decodes on first use)."""
        return self._decode()

    def segments(self) -> list[Record | UniformRun]:
        """The messages as ``decode_segments`` gives them (runs of one layout left unbuilt, for
        columnar readers), from ``fetch_offset`` on; decodes once (``messages()`` afterwards
        builds the runs' records from them). A read_committed set with aborted transactions
        gives records only.

        Raises:
            BrokerError: The partition's error (e.g. OffsetOutOfRangeError), as iterating does.
            CorruptRecordError: A CRC mismatch or malformed records.
        """
        segs = self._segments
        if segs is None:
            if self._records is not None or self.aborted:
                segs = list(self._decode())
            elif self.error is not None:
                raise self.error
            else:
                segs = decode_segments(self.buffer) if len(self.buffer) else []
                if segs and segs[0].offset < self.fetch_offset:
                    segs = cut_segments(segs, self.fetch_offset, None)
            self._segments = segs
        return segs

    def __len__(self) -> int:
        """Number of messages (decodes on first use)."""
        return len(self._decode())

    @property
    def size_in_bytes(self) -> int:
        return len(self.buffer)

    @property
    def valid_bytes(self) -> int:
        """Bytes of complete entries (the rest is a partial trailing entry)."""
        n = len(self.buffer)
        pos = 0
        buf = self.buffer
        while pos + 12 <= n:
            _, size = _entry_head.unpack_from(buf, pos)
            if size <= 0 or pos + 12 + size > n:
                break
            pos += 12 + size
        return pos

    @property
    def next_offset(self) -> int:
        """Where the next fetch should start: after the last complete entry, messages or not
        (control batches, aborted transactions), never before ``fetch_offset`` (decodes on
        first use, so a corrupt set raises here too)."""
        if self._records is None and self._segments is not None:
            segs = self._segments
            nxt = last_offset(segs[-1]) + 1 if segs else self.fetch_offset
        else:
            recs = self._decode()
            nxt = recs[-1].offset + 1 if recs else self.fetch_offset
        last = last_offset_of(self.buffer)
        if last is not None and last + 1 > nxt:
            nxt = last + 1
        return nxt

    def __repr__(self) -> str:
        state = f"error={self.error!r}" if self.error else f"{len(self.buffer)} bytes"
        return f"ByteBufferMessageSet({self.topic}-{self.partition} @{self.fetch_offset}, {state})"
