"""A partition Log keeps its transaction state (KIP-98): open transactions and the last stable
offset, aborted transactions in ``.txnindex`` files, client-written control batches refused,
plain batches of a producer in a transaction refused, and all of it rebuilt by a restart
(clean, or as after kill -9: a Log opened on the folder of one never closed), a follower's
appends and a truncation.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.errors import BrokerError, ErrorCode
from hmbclient.protocol.records import NONE, encode_records, v2
from hmbclient.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    batch_header,
    encode_control_batch,
    encode_transactional_batch,
    read_committed,
)

TS = 1_700_000_000_000
COMMIT, ABORT = EndTxnMarker(ControlType.COMMIT, 0), EndTxnMarker(ControlType.ABORT, 0)


def txn(pid: int, seq: int, *values: bytes, epoch: int = 0) -> bytes:
    return encode_transactional_batch(NONE, [(None, v, TS) for v in values], pid, epoch, seq, timestamp_ms=TS)


def marker(pid: int, m: EndTxnMarker, epoch: int = 0) -> bytes:
    return encode_control_batch(pid, epoch, m, timestamp_ms=TS)


def committed_values(lg: Log) -> list[bytes]:
    lso = lg.last_stable_offset
    out: list[bytes] = []
    offset = lg.log_start_offset
    while True:  # a read returns one segment's entries
        sl, _ = lg.read(offset, 1 << 20, max_offset=lso)
        if sl is None:
            return out
        buf = sl.read()
        recs = read_committed(buf, lg.aborted_transactions(offset, lso))
        out.extend(r.value for r in recs)
        offset = last_offset(buf) + 1


def last_offset(buf: bytes) -> int:
    pos, last = 0, -1
    while pos + 12 <= len(buf):
        h = batch_header(buf, pos)
        last = h.last_offset
        pos += 12 + int.from_bytes(buf[pos + 8 : pos + 12], "big")
    return last


def scenario(lg: Log) -> None:
    """Producer 1 commits a, b; producer 2 aborts x around them; producer 3 leaves c open."""
    lg.append(txn(1, 0, b"a"))  # 0
    lg.append(txn(2, 0, b"x"))  # 1
    lg.append(txn(1, 1, b"b"))  # 2
    assert lg.last_stable_offset == 0
    lg.append(marker(1, COMMIT), origin="coordinator")  # 3
    assert lg.last_stable_offset == 1  # producer 2 still open
    lg.append(marker(2, ABORT), origin="coordinator")  # 4
    assert lg.last_stable_offset == 5
    lg.append(encode_records(2, NONE, [(None, b"plain", TS)]))  # 5
    lg.append(txn(3, 0, b"c"))  # 6: left open


def check(lg: Log) -> None:
    assert lg.last_stable_offset == 6
    assert lg.aborted_transactions(0, 6) == [(2, 1)]
    assert lg.aborted_transactions(5, 6) == []  # the abort marker is below 5
    assert committed_values(lg) == [b"a", b"b", b"plain"]


@pytest.mark.parametrize("segment_bytes", [1 << 20, 200])
def test_state_and_restarts(tmp_path: Path, segment_bytes: int) -> None:
    d = str(tmp_path / "t-0")
    lg = Log(d, LogConfig(segment_bytes=segment_bytes))
    scenario(lg)
    check(lg)
    assert any(n.endswith(".txnindex") for n in os.listdir(d))
    # as after kill -9: never closed, a new Log on the same folder (the bytes are in the files)
    crashed = Log(d, LogConfig(segment_bytes=segment_bytes))
    crashed.set_high_watermark(crashed.log_end_offset)
    check(crashed)
    crashed.close()
    clean = Log(d, LogConfig(segment_bytes=segment_bytes), clean_shutdown=True)
    clean.set_high_watermark(clean.log_end_offset)
    check(clean)
    clean.append(marker(3, COMMIT), origin="coordinator")
    assert clean.last_stable_offset == clean.log_end_offset
    assert committed_values(clean) == [b"a", b"b", b"plain", b"c"]


def test_index_lost_in_a_crash_is_rebuilt(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    lg = Log(d, LogConfig())
    scenario(lg)
    for n in os.listdir(d):
        if n.endswith(".txnindex"):
            os.unlink(os.path.join(d, n))  # the process died between the marker and its index entry
    again = Log(d, LogConfig())
    again.set_high_watermark(again.log_end_offset)
    check(again)


def test_refusals(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), LogConfig())
    with pytest.raises(BrokerError) as e:
        lg.append(marker(1, COMMIT))  # a client writing a control batch
    assert e.value.errno == ErrorCode.INVALID_RECORD
    lg.append(txn(1, 0, b"a"))
    idem = bytes(v2.encode(NONE, [(None, b"plain", TS)], 0, TS, producer=(1, 0, 1)))
    with pytest.raises(BrokerError) as e:
        lg.append(idem)  # a plain batch of a producer whose transaction is open
    assert e.value.errno == ErrorCode.INVALID_TXN_STATE
    lg.append(marker(1, EndTxnMarker(ControlType.COMMIT, 5)), origin="coordinator")
    lg.append(txn(1, 1, b"b"))
    with pytest.raises(BrokerError) as e:
        lg.append(marker(1, EndTxnMarker(ControlType.COMMIT, 4)), origin="coordinator")  # a deposed coordinator
    assert e.value.errno == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert lg.log_end_offset == 3


def test_follower_and_truncation(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "l-0"), LogConfig())
    scenario(leader)
    follower = Log(str(tmp_path / "f-0"), LogConfig())
    sl, _ = leader.read(0, 1 << 20)
    assert sl is not None
    follower.append_as_follower(sl.read())
    follower.set_high_watermark(follower.log_end_offset)
    check(follower)
    follower.truncate_to(4)  # the abort marker goes: producer 2's transaction is open again
    follower.set_high_watermark(follower.log_end_offset)
    assert follower.aborted_transactions(0, 4) == []
    assert follower.last_stable_offset == 1
    follower.truncate_fully_and_start_at(10)
    assert follower.last_stable_offset == 10
    assert not [n for n in os.listdir(follower.directory) if n.endswith(".txnindex")]


def test_compaction_ignores_aborted_records_and_stops_at_the_lso(tmp_path: Path) -> None:
    """The log cleaner's offset map leaves out aborted records (they supersede nothing) and
    stops at the last stable offset (an open transaction's record may still be aborted): a
    committed value is never dropped for either."""
    d = str(tmp_path / "c-0")
    cfg = LogConfig(segment_bytes=100, compact=True)  # about a batch per segment

    def kv(pid: int, seq: int, value: bytes) -> bytes:
        return encode_transactional_batch(NONE, [(b"k", value, TS)], pid, 0, seq, timestamp_ms=TS)

    lg = Log(d, cfg)
    lg.append(encode_records(2, NONE, [(b"k", b"plain", TS)]))  # 0
    lg.append(kv(2, 0, b"committed"))  # 1
    lg.append(marker(2, COMMIT), origin="coordinator")  # 2
    lg.append(kv(1, 0, b"aborted"))  # 3
    lg.append(marker(1, ABORT), origin="coordinator")  # 4
    lg.append(kv(3, 0, b"open"))  # 5: open, the LSO
    lg.append(encode_records(2, NONE, [(b"other", b"x", TS)]))  # 6
    assert lg.last_stable_offset == 5
    assert lg.compact() == 1  # only "plain": "aborted" and "open" supersede nothing
    assert committed_values(lg) == [b"committed"]
    lg.append(marker(3, COMMIT), origin="coordinator")
    assert committed_values(lg) == [b"committed", b"open", b"x"]
    again = Log(d, cfg)  # and after a restart (the index regrouped over the cleaned segments)
    again.set_high_watermark(again.log_end_offset)
    assert committed_values(again) == [b"committed", b"open", b"x"]
    assert again.compact() >= 1
    assert committed_values(again) == [b"open", b"x"]
    assert again.aborted_transactions(0, again.log_end_offset) in ([], [(1, 3)])


def test_a_version_1_producer_snapshot_is_still_read(tmp_path: Path) -> None:
    """Snapshots written before transactions (version 1: no open transaction, no coordinator
    epoch) load with neither."""
    import struct

    from crc32c import crc32c

    from hmbclient.broker.log.producer_state import ProducerStateManager

    body = struct.pack(">i", 1) + struct.pack(">qhqb", 42, 3, TS, 1) + struct.pack(">iiqqq", 0, 4, 10, 14, TS)
    blob = struct.pack(">h", 1) + struct.pack(">I", crc32c(body)) + body
    (tmp_path / f"{15:020d}.snapshot").write_bytes(blob)
    ps = ProducerStateManager(str(tmp_path))
    assert ps.load(0, 15, 0, lambda _o: iter(())) == 15
    e = ps.producers[42]
    assert (e.epoch, e.last_seq, e.last_offset, e.txn_first_offset, e.coordinator_epoch) == (3, 4, 14, -1, -1)
    ps.take_snapshot()  # rewritten as version 2, read back the same
    again = ProducerStateManager(str(tmp_path))
    again.load(0, 15, 0, lambda _o: iter(()))
    assert again.producers == ps.producers
