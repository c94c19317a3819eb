"""ByteBufferMessageSet hands out nothing below the offset that was fetched: a broker answers
with whole batches, which may start before it."""

from __future__ import annotations

import pytest

from hmbclient.consumer.message_set import ByteBufferMessageSet
from hmbclient.protocol.records import GZIP, NONE, v2


@pytest.mark.parametrize("codec", [NONE, GZIP])
@pytest.mark.parametrize("fetch_offset", [0, 99, 100, 101, 1234, 2999, 3000, 5000])
def test_records_below_the_fetch_offset_are_skipped(codec: int, fetch_offset: int) -> None:
    items = [(None, b"v%04d" % i, 1) for i in range(3000)]
    buf = v2.encode(codec, items[:100], 100, 0) + v2.encode(codec, items[100:], 200, 0)
    ms = ByteBufferMessageSet("t", 0, fetch_offset, bytearray(buf))
    expected = [o for o in range(100, 3100) if o >= fetch_offset]
    assert [r.offset for r in ms] == expected
    assert len(ms) == len(expected)
    assert ms.next_offset == (expected[-1] + 1 if expected else fetch_offset)


@pytest.mark.parametrize("codec", [NONE, GZIP])
@pytest.mark.parametrize("fetch_offset", [0, 99, 150, 2999, 3100])
def test_segments_skip_the_same_records(codec: int, fetch_offset: int) -> None:
    """segments() (runs left unbuilt, for columnar readers) holds what iterating gives, from
    the fetch offset on, with the same next_offset; messages() afterwards builds the same."""
    from hmbclient.consumer import UniformRun, expand_segments

    items = [(None, b"v%04d" % i, 1) for i in range(3000)]
    buf = v2.encode(codec, items[:100], 100, 0) + v2.encode(codec, items[100:], 200, 0)
    expected = list(ByteBufferMessageSet("t", 0, fetch_offset, bytearray(buf)))
    ms = ByteBufferMessageSet("t", 0, fetch_offset, bytearray(buf))
    segments = ms.segments()
    assert expand_segments(segments) == expected
    assert any(type(s) is UniformRun for s in segments) == (len(expected) > 100)
    assert ms.next_offset == (expected[-1].offset + 1 if expected else fetch_offset)
    assert ms.messages() == expected and ms.segments() is segments
