"""Transaction markers and aborted transactions in a fetched record set (ByteBufferMessageSet):
control records are never yielded, whatever the isolation level; read_committed drops the
records of the aborted transactions the Fetch answer names; ``next_offset`` moves past a set
that holds only markers or aborted records (else a consumer would fetch it forever)."""

from __future__ import annotations

from hmbclient.consumer.message_set import ByteBufferMessageSet
from hmbclient.protocol.records import v2
from hmbclient.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    encode_control_batch,
    encode_transactional_batch,
)

TS = 1_700_000_000_000


def _txn(pid: int, base: int, values: list[bytes], seq: int = 0) -> bytes:
    return encode_transactional_batch(0, [(None, v, TS) for v in values], pid, 0, seq, timestamp_ms=TS, base_offset=base)


def _marker(pid: int, offset: int, commit: bool) -> bytes:
    ctype = ControlType.COMMIT if commit else ControlType.ABORT
    return encode_control_batch(pid, 0, EndTxnMarker(ctype, 0), timestamp_ms=TS, base_offset=offset)


def _plain(base: int, values: list[bytes]) -> bytes:
    return v2.encode(0, [(None, v, TS) for v in values], base, TS)


# offsets: 0-1 pid 7 (aborted), 2-3 pid 8 (committed), 4 abort(7), 5 plain, 6 commit(8)
LOG = _txn(7, 0, [b"a0", b"a1"]) + _txn(8, 2, [b"c2", b"c3"]) + _marker(7, 4, False) + _plain(5, [b"p5"]) + _marker(8, 6, True)


def _values(ms: ByteBufferMessageSet) -> list[bytes]:
    return [bytes(m.message.value) for m in ms]


def test_read_uncommitted_skips_markers_only():
    ms = ByteBufferMessageSet("t", 0, 0, LOG)
    assert _values(ms) == [b"a0", b"a1", b"c2", b"c3", b"p5"]
    assert [m.offset for m in ms] == [0, 1, 2, 3, 5]
    assert ms.next_offset == 7  # past the trailing commit marker


def test_read_committed_drops_the_aborted_transaction():
    ms = ByteBufferMessageSet("t", 0, 0, LOG, aborted=[(7, 0)])
    assert _values(ms) == [b"c2", b"c3", b"p5"]
    assert ms.next_offset == 7
    # nothing aborted named: everything but the markers
    assert _values(ByteBufferMessageSet("t", 0, 0, LOG, aborted=[])) == [b"a0", b"a1", b"c2", b"c3", b"p5"]


def test_read_committed_from_the_middle():
    ms = ByteBufferMessageSet("t", 0, 3, LOG, aborted=[(7, 0)])
    assert _values(ms) == [b"c3", b"p5"]


def test_a_set_of_markers_or_aborted_records_still_moves_on():
    only_marker = ByteBufferMessageSet("t", 0, 6, _marker(8, 6, True))
    assert len(only_marker) == 0 and only_marker.next_offset == 7
    aborted = _txn(7, 0, [b"a0", b"a1"]) + _marker(7, 2, False)
    ms = ByteBufferMessageSet("t", 0, 0, aborted, aborted=[(7, 0)])
    assert len(ms) == 0 and ms.next_offset == 3
    empty = ByteBufferMessageSet("t", 0, 9, b"")
    assert empty.next_offset == 9
    partial = ByteBufferMessageSet("t", 0, 6, _marker(8, 6, True)[:-3])  # a cut-off entry
    assert len(partial) == 0 and partial.next_offset == 6
