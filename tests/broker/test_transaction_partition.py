"""A partition's transaction state (broker/transaction/partition.py): the labelled cases, the
``.txnindex`` layout by hand, and the two halves of read_committed together — the broker side
(LSO and aborted transactions from replaying the log's batch headers) feeding the client side
(``records.control.read_committed``) and kafka-python's consumer, on random interleavings of
producers, from every fetch offset. The records a reader must see are computed from the steps.
"""

from __future__ import annotations

import struct
from collections import namedtuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer import IsolationLevel
from kafka.record import MemoryRecords
from kafka.structs import TopicPartition

from hmbclient.broker.transaction.partition import (
    AbortedTxn,
    CompletedTxn,
    PartitionTxns,
    aborted_transactions,
    check_batch,
    decode_index,
    drop_before,
    encode_index,
    first_unstable_offset,
    last_stable_offset,
    on_batch,
    replay,
)
from hmbclient.errors import ErrorCode, StorageError
from hmbclient.protocol.records import NONE, encode_records, scan_entries
from hmbclient.protocol.records.control import (
    ControlType,
    EndTxnMarker,
    batch_header,
    control_record,
    decode_end_txn_marker,
    encode_control_batch,
    encode_transactional_batch,
    read_committed,
)

TS = 1_700_000_000_000
COMMIT, ABORT = EndTxnMarker(ControlType.COMMIT, 2), EndTxnMarker(ControlType.ABORT, 2)


def data(pid: int, offset: int, n: int = 2, epoch: int = 0) -> bytes:
    return encode_transactional_batch(NONE, [(None, b"v", TS)] * n, pid, epoch, 0, timestamp_ms=TS, base_offset=offset)


def marker(pid: int, offset: int, m: EndTxnMarker, epoch: int = 0) -> bytes:
    return encode_control_batch(pid, epoch, m, timestamp_ms=TS, base_offset=offset)


def test_check_batch_cases() -> None:
    s = PartitionTxns(ongoing={7: 10})
    plain = batch_header(encode_records(2, NONE, [(None, b"v", TS)]))
    assert check_batch(s, plain, -1, -1, None) == ErrorCode.NONE  # A: no producer id
    idem = batch_header(data(8, 0)[:21] + b"\x00\x00" + data(8, 0)[23:])  # transactional bit cleared
    assert not idem.is_transactional and check_batch(s, idem, 0, -1, None) == ErrorCode.NONE  # A
    plain_of_7 = idem._replace(producer_id=7)
    assert check_batch(s, plain_of_7, 0, -1, None) == ErrorCode.INVALID_TXN_STATE  # B
    m = batch_header(marker(7, 12, COMMIT, epoch=3))
    assert check_batch(s, m, 4, 0, COMMIT) == ErrorCode.INVALID_PRODUCER_EPOCH  # C
    assert check_batch(s, m, 3, 5, COMMIT) == ErrorCode.TRANSACTION_COORDINATOR_FENCED  # D
    assert check_batch(s, m, 3, 2, COMMIT) == ErrorCode.NONE
    assert check_batch(s, m, 2, 2, COMMIT) == ErrorCode.NONE  # a fencing marker carries a newer epoch
    assert check_batch(s, m, 3, 2, None) == ErrorCode.CORRUPT_MESSAGE


def test_on_batch_cases_and_the_lso() -> None:
    s = PartitionTxns()
    s, done = on_batch(s, batch_header(data(1, 0)), None)  # E
    assert s.ongoing == {1: 0} and done is None
    s, _ = on_batch(s, batch_header(data(2, 2)), None)  # E
    s2, _ = on_batch(s, batch_header(data(1, 4)), None)  # E: same transaction, nothing new
    assert s2 == s
    assert first_unstable_offset(s) == 0 and last_stable_offset(s, 6) == 0
    s, done = on_batch(s, batch_header(marker(1, 6, COMMIT)), COMMIT)  # F
    assert done == CompletedTxn(1, 0, 6, False) and s.aborted == ()
    assert last_stable_offset(s, 7) == 2 and last_stable_offset(s, 1) == 1  # never past the HW
    s, done = on_batch(s, batch_header(marker(2, 7, ABORT)), ABORT)  # F
    assert done == CompletedTxn(2, 2, 7, True) and s.aborted == (AbortedTxn(2, 2, 7, 8),)
    assert first_unstable_offset(s) is None and last_stable_offset(s, 8) == 8
    same, done = on_batch(s, batch_header(marker(2, 8, ABORT)), ABORT)  # F: nothing open
    assert same is s and done is None
    plain = batch_header(encode_records(2, NONE, [(None, b"v", TS)], base_offset=9))
    assert on_batch(s, plain, None) == (s, None)  # G
    assert aborted_transactions(s, 0, 9) == [(2, 2)]
    assert aborted_transactions(s, 8, 9) == [] and aborted_transactions(s, 0, 2) == []
    assert drop_before(s, 7) is s and drop_before(s, 8).aborted == ()


def test_an_aborted_entry_records_the_lso_after_it() -> None:
    s = replay([(batch_header(data(1, 0)), None), (batch_header(data(2, 2)), None), (batch_header(marker(2, 4, ABORT)), ABORT)])
    assert s.aborted == (AbortedTxn(2, 2, 4, 0),)  # producer 1 still holds the LSO at 0


def test_txnindex_layout_by_hand() -> None:
    entries = [AbortedTxn(2, 2, 7, 8), AbortedTxn(2**40, 100, 2**50, 2**50 + 1)]
    raw = b"".join(struct.pack(">hqqqq", 0, *e) for e in entries)
    assert encode_index(entries) == raw and len(raw) == 68
    assert decode_index(raw) == entries
    with pytest.raises(StorageError):
        decode_index(raw[:-1])
    with pytest.raises(StorageError):
        decode_index(b"\x00\x01" + raw[2:])


# --- the broker's answer read by our reader and by kafka-python's ----------------------------

_Aborted = namedtuple("_Aborted", "producer_id first_offset")


def _build(steps: list[tuple[str, int, bool]]) -> tuple[list[bytes], dict[int, str]]:
    """Batches from (kind, producer, flag) steps and each record offset's fate: 'c' committed,
    'a' aborted, 'o' open, 'p' plain."""
    batches: list[bytes] = []
    fate: dict[int, str] = {}
    open_: dict[int, list[int]] = {}
    off = 0
    for kind, pid, flag in steps:
        if kind == "data":
            batches.append(data(pid, off))
            open_.setdefault(pid, []).extend([off, off + 1])
            for o in (off, off + 1):
                fate[o] = "o"
            off += 2
        elif kind == "end" and pid in open_:
            batches.append(marker(pid, off, COMMIT if flag else ABORT))
            for o in open_.pop(pid):
                fate[o] = "c" if flag else "a"
            off += 1
        elif kind == "plain":
            batches.append(encode_records(2, NONE, [(None, b"p", TS)], base_offset=off))
            fate[off] = "p"
            off += 1
    return batches, fate


def _headers(batches: list[bytes]) -> list[tuple[object, EndTxnMarker | None]]:
    out: list[tuple[object, EndTxnMarker | None]] = []
    for b in batches:
        h = batch_header(b)
        out.append((h, decode_end_txn_marker(*control_record(b)) if h.is_control else None))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    steps=st.lists(st.tuples(st.sampled_from(["data", "end", "plain"]), st.integers(1, 3), st.booleans()), max_size=25),
    start_pick=st.integers(0, 10**6),
)
def test_lso_and_aborted_list_give_readers_exactly_the_committed_records(steps: list[tuple[str, int, bool]], start_pick: int) -> None:
    batches, fate = _build(steps)
    log = b"".join(batches)
    hw = sum(batch_header(b).record_count for b in batches)
    state = replay(_headers(batches))  # type: ignore[arg-type]
    lso = last_stable_offset(state, hw)
    assert all(fate[o] != "o" for o in range(lso) if o in fate), "the LSO passed an open transaction"
    entries, _ = scan_entries(log)
    starts = [e for e in entries if e.base_offset < lso] or entries[:0]
    first = starts[start_pick % len(starts)] if starts else None
    fetch_offset = first.base_offset if first else 0
    # what a broker sends: whole batches from the fetch offset up to the LSO
    sent = b"".join(log[e.position : e.position + e.size] for e in entries if fetch_offset <= e.base_offset < lso)
    aborted = aborted_transactions(state, fetch_offset, lso)
    want = [o for o in sorted(fate) if fetch_offset <= o < lso and fate[o] in ("c", "p")]
    assert [r.offset for r in read_committed(sent, aborted)] == want
    pr = Fetcher.PartitionRecords(
        fetch_offset, TopicPartition("t", 0), MemoryRecords(sent),
        isolation_level=IsolationLevel.READ_COMMITTED, aborted_transactions=[_Aborted(*a) for a in aborted],
    )  # fmt: skip
    assert [r.offset for r in pr.take()] == want
