"""KafkaStream's hand-out (hmbclient.consumer.stream): messages handed out from the current
chunk's list iterator without a lock per message, and the position (``pti.consumed``, what a
commit writes) exactly the offset after the last message handed out whatever cuts the chunk
in the middle: a commit read, a revoke (from another thread too), a pause, a reset, close, a
timeout, a chunk's error, a second thread. The streams are fed as the fetcher feeds them:
chunks of records decoded from real record sets in the stream's own record shape.
"""

from __future__ import annotations

import threading
import time
from itertools import islice
from typing import Any

import pytest
from waiting import wait_until

from encoders import StringDecoder
from hmbclient.consumer.stream import (
    FetchedChunk,
    KafkaStream,
    MessageAndMetadata,
    PartitionTopicInfo,
)
from hmbclient.errors import ConsumerTimeoutError, CorruptRecordError, IllegalStateError
from hmbclient.protocol.records import NONE, decode_records, encode_records

STOP = threading.Event()  # never set: put() waits for room like a fetcher


def _stream(timeout_ms: int = 50, **kw: Any) -> KafkaStream:
    return KafkaStream("t-0", queued_max_chunks=kw.pop("chunks", 100), consumer_timeout_ms=timeout_ms, **kw)


def _pti(stream: KafkaStream, partition: int = 0, offset: int | None = 0) -> PartitionTopicInfo:
    return PartitionTopicInfo("t", partition, stream, "c-0", offset)


def _put(stream: KafkaStream, pti: PartitionTopicInfo, first: int, n: int, key: bytes | None = None) -> None:
    raw = encode_records(2, NONE, [(key, b"v%d" % (first + i), None) for i in range(n)], base_offset=first)
    assert stream.put(FetchedChunk(pti, decode_records(raw, stream.record_tail(pti))), STOP)


def _offsets(stream: KafkaStream, n: int) -> list[int]:
    return [next(stream).offset for _ in range(n)]


def test_messages_in_order_and_the_position_inside_and_after_a_chunk() -> None:
    stream = _stream()
    pti = _pti(stream)
    _put(stream, pti, 0, 10)
    _put(stream, pti, 10, 5)
    assert pti.consumed == 0
    first = next(stream)
    assert type(first) is MessageAndMetadata
    assert first == ("t", 0, 0, None, b"v0")
    assert pti.consumed == 1
    assert _offsets(stream, 2) == [1, 2]
    assert pti.consumed == stream.position(pti) == 3  # a commit now writes 3
    assert _offsets(stream, 7) == list(range(3, 10))
    assert pti.consumed == 10  # the chunk handed out to its end, the next not begun
    taken = []
    for message in stream:  # the iterator protocol
        taken.append(message.offset)
        if message.offset == 13:
            break
    assert taken == list(range(10, 14))
    assert pti.consumed == 14
    assert list(islice(stream, 1)) == [("t", 0, 14, None, b"v14")]
    assert pti.consumed == 15
    with pytest.raises(ConsumerTimeoutError):
        next(stream)
    assert pti.consumed == 15


def test_revoke_in_the_middle_of_a_chunk_returns_exactly_what_was_handed_out() -> None:
    stream = _stream()
    a, b = _pti(stream, 0), _pti(stream, 1, 100)
    _put(stream, a, 0, 10)
    _put(stream, a, 10, 10)
    _put(stream, b, 100, 3)
    assert _offsets(stream, 4) == [0, 1, 2, 3]
    assert stream.revoke(a) == 4
    assert a.consumed == 4
    # not one more message of a: its chunk's rest and its queued chunk are gone
    assert [(m.partition, m.offset) for m in (next(stream) for _ in range(3))] == [(1, 100), (1, 101), (1, 102)]
    with pytest.raises(ConsumerTimeoutError):
        next(stream)
    _put_refused = FetchedChunk(a, decode_records(encode_records(2, NONE, [(None, b"x", None)], base_offset=20)))
    assert not stream.put(_put_refused, STOP)


def test_revoke_from_another_thread_while_handing_out_loses_and_repeats_nothing() -> None:
    # The consuming thread takes messages as fast as it can; the rebalance thread revokes the
    # partition meanwhile: what was handed out is exactly [0, position).
    total = 60_000
    for round_ in range(3):
        stream = _stream(timeout_ms=200, chunks=1000)
        pti = _pti(stream)
        for first in range(0, total, 500):
            _put(stream, pti, first, 500)
        got: list[int] = []
        errors: list[BaseException] = []
        started = threading.Event()

        def consume(stream: KafkaStream = stream, got: list[int] = got, errors: list[BaseException] = errors,
                    started: threading.Event = started, after: int = 1000 * (round_ + 1)) -> None:
            try:
                for message in stream:
                    got.append(message.offset)
                    if len(got) >= after:
                        started.set()
                        time.sleep(0)  # not a wait: lets the revoking thread have the GIL
            except ConsumerTimeoutError:
                pass
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        thread = threading.Thread(target=consume)
        thread.start()
        assert started.wait(10)
        position = stream.revoke(pti)
        thread.join(10)
        assert not thread.is_alive() and not errors
        assert position is not None and 1000 <= position < total
        assert got == list(range(position)), (len(got), position)


def test_pause_in_the_middle_of_a_chunk_resumes_at_the_next_message() -> None:
    stream = _stream()
    pti = _pti(stream)
    _put(stream, pti, 0, 10)
    assert _offsets(stream, 3) == [0, 1, 2]
    stream.set_paused(True)
    assert pti.consumed == 3
    with pytest.raises(ConsumerTimeoutError):
        next(stream)  # nothing is handed out while paused
    assert pti.consumed == 3
    stream.set_paused(False)
    assert _offsets(stream, 7) == list(range(3, 10))
    assert pti.consumed == 10


def test_reset_and_floor_never_hand_out_below_the_position() -> None:
    stream = _stream()
    pti = _pti(stream)
    _put(stream, pti, 0, 10)
    assert _offsets(stream, 2) == [0, 1]
    stream.reset_position(pti, 50)  # auto_offset_reset in the middle of a chunk
    assert pti.consumed == 50
    _put(stream, pti, 45, 10)  # (floor) records below the position, as a compressed wrapper gives
    assert _offsets(stream, 5) == [50, 51, 52, 53, 54]
    assert pti.consumed == 55
    with pytest.raises(ConsumerTimeoutError):
        next(stream)


def test_timeout_and_chunk_errors_leave_the_stream_usable() -> None:
    stream = _stream(timeout_ms=20)
    pti = _pti(stream)
    for _ in range(2):
        with pytest.raises(ConsumerTimeoutError):
            next(stream)
    _put(stream, pti, 0, 3)
    assert next(stream).offset == 0
    stream.put_error(pti, CorruptRecordError("bad set"), STOP)
    _put(stream, pti, 3, 2)
    assert _offsets(stream, 2) == [1, 2]
    with pytest.raises(CorruptRecordError):
        next(stream)
    assert pti.consumed == 3
    assert [m.offset for m in islice(stream, 2)] == [3, 4]
    assert pti.consumed == 5


def test_close_in_the_middle_of_a_chunk_ends_iteration_for_good() -> None:
    stream = _stream()
    pti = _pti(stream)
    _put(stream, pti, 0, 10)
    assert _offsets(stream, 4) == [0, 1, 2, 3]
    stream.close()
    assert pti.consumed == 4
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(stream)
    assert list(stream) == []


def test_decoders_and_keys() -> None:
    stream = _stream(key_decoder=StringDecoder(), value_decoder=StringDecoder())
    pti = _pti(stream)
    _put(stream, pti, 0, 3, key=b"k")
    assert [tuple(next(stream)) for _ in range(2)] == [("t", 0, 0, "k", "v0"), ("t", 0, 1, "k", "v1")]
    assert pti.consumed == 2
    assert stream.revoke(pti) == 2


def test_a_second_thread_needing_a_chunk_gets_a_clear_error() -> None:
    stream = _stream(timeout_ms=-1)
    pti = _pti(stream)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(next(stream)))
    waiter.start()
    wait_until(lambda: stream._in_source, what="the first thread waiting for a chunk")
    with pytest.raises(IllegalStateError, match="one stream per consuming thread"):
        next(stream)
    _put(stream, pti, 0, 2)
    waiter.join(10)
    assert [m.offset for m in got] == [0]  # the waiting thread was not disturbed
    assert next(stream).offset == 1
    assert pti.consumed == 2


def test_the_position_is_after_the_last_message_even_before_a_gap() -> None:
    # A chunk with a gap (aborted records dropped by read_committed, or compacted away): the
    # position is after the last message handed out, never at the next message beyond the gap.
    stream = _stream()
    pti = _pti(stream)
    raw = encode_records(2, NONE, [(None, b"a", None)] * 3, base_offset=0) + encode_records(
        2, NONE, [(None, b"b", None)] * 2, base_offset=7
    )
    assert stream.put(FetchedChunk(pti, decode_records(raw, stream.record_tail(pti))), STOP)
    assert _offsets(stream, 3) == [0, 1, 2]
    assert pti.consumed == 3
    stream.set_paused(True)
    assert pti.consumed == 3
    stream.set_paused(False)
    assert _offsets(stream, 1) == [7]
    assert pti.consumed == 8
    assert stream.revoke(pti) == 8
