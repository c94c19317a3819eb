"""KafkaStream's hand-off, in memory: the queue of fetched chunks between fetcher threads and
the reader (``next()`` for the ConsumerConnector's iterators, ``take`` for ``poll``).

Invariants checked for both forms: records come out in order, never below a partition's
position; a revoked partition's queued chunk is dropped; a chunk carrying an error raises at
its place in the queue (``take`` first hands out what came before it, then raises on the next
call); a chunk taken out makes room for a blocked fetcher.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import pytest

from hmbclient.consumer.stream import FetchedChunk, KafkaStream, PartitionTopicInfo
from hmbclient.errors import ConsumerTimeoutError, CorruptRecordError


class _Record(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes


def _stream(cap: int = 8) -> KafkaStream:
    return KafkaStream("s", queued_max_chunks=cap, consumer_timeout_ms=0)


def _pti(stream: KafkaStream, partition: int, offset: int | None = 0) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, stream, "thread-0", offset)


def _chunk(pti: PartitionTopicInfo, offsets: range, error: BaseException | None = None) -> FetchedChunk:
    return FetchedChunk(pti, [_Record(o, None, b"v%d" % o) for o in offsets], error)


def _put(stream: KafkaStream, *chunks: FetchedChunk) -> None:
    stop = threading.Event()
    for c in chunks:
        assert stream.put(c, stop)


def _drain_next(stream: KafkaStream) -> list[tuple[int, int]]:
    out = []
    while True:
        try:
            m = next(stream)
        except ConsumerTimeoutError:
            return out
        out.append((m.partition, m.offset))


def test_next_skips_revoked_chunks_and_raises_a_chunk_error_at_its_place() -> None:
    s = _stream()
    p0, p1 = _pti(s, 0), _pti(s, 1)
    _put(s, _chunk(p0, range(0, 3)), _chunk(p1, range(0, 2)), _chunk(p0, range(3, 4), CorruptRecordError("bad crc")),
         _chunk(p0, range(3, 5)))
    p1.revoked = True  # revoked while its chunk was queued
    assert [next(s).offset for _ in range(3)] == [0, 1, 2]
    with pytest.raises(CorruptRecordError, match="bad crc"):
        next(s)
    assert _drain_next(s) == [(0, 3), (0, 4)]
    assert s.queued == 0


def test_take_hands_out_what_precedes_an_error_then_raises_it() -> None:
    s = _stream()
    p0, p1 = _pti(s, 0), _pti(s, 1)
    _put(s, _chunk(p0, range(0, 3)), _chunk(p1, range(0, 2)), _chunk(p0, range(3, 4), CorruptRecordError("bad crc")),
         _chunk(p1, range(2, 4)))
    got = s.take(100, 0)
    assert [(pti.partition, [r.offset for r in rs]) for pti, rs in got] == [(0, [0, 1, 2]), (1, [0, 1])]
    with pytest.raises(CorruptRecordError, match="bad crc"):
        s.take(100, 0)
    got = s.take(100, 0)
    assert [(pti.partition, [r.offset for r in rs]) for pti, rs in got] == [(1, [2, 3])]
    assert s.take(100, 0) == []
    assert (p0.consumed, p1.consumed) == (3, 4)


def test_take_drops_a_revoked_chunk_and_stops_at_max_records() -> None:
    s = _stream()
    p0, p1 = _pti(s, 0), _pti(s, 1)
    _put(s, _chunk(p1, range(0, 5)), _chunk(p0, range(0, 5)))
    p1.revoked = True
    got = s.take(3, 0)
    assert [(pti.partition, [r.offset for r in rs]) for pti, rs in got] == [(0, [0, 1, 2])]
    got = s.take(3, 0)
    assert [(pti.partition, [r.offset for r in rs]) for pti, rs in got] == [(0, [3, 4])]


@pytest.mark.parametrize("form", ["next", "take"])
def test_records_below_the_position_are_never_handed_out(form: str) -> None:
    """A compressed wrapper's records before the fetch offset, or a chunk fetched before a
    reset: each form skips to the partition's position."""
    s = _stream()
    p0 = _pti(s, 0, offset=5)
    _put(s, _chunk(p0, range(2, 8)))
    if form == "next":
        assert [o for _, o in _drain_next(s)] == [5, 6, 7]
    else:
        assert [[r.offset for r in rs] for _, rs in s.take(100, 0)] == [[5, 6, 7]]
    assert p0.consumed == 8


def test_a_chunk_taken_out_makes_room_for_a_blocked_fetcher() -> None:
    s = _stream(cap=1)
    p0 = _pti(s, 0)
    _put(s, _chunk(p0, range(0, 2)))
    result: list[Any] = []
    fetcher = threading.Thread(target=lambda: result.append(s.put(_chunk(p0, range(2, 4)), threading.Event())))
    fetcher.start()
    first = s.take(100, 10)
    assert [r.offset for _, rs in first for r in rs] == [0, 1]
    fetcher.join(10)
    assert result == [True]
    assert [r.offset for _, rs in s.take(100, 10) for r in rs] == [2, 3]
