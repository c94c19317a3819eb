"""Transactional and control batches (protocol/records/control.py) against independent code.

Peers: kafka-python's RecordBatch v2 builder (transactional batches, byte for byte) and its
reader (control batches: ``is_control_batch``, ``ControlRecord.commit``/``abort``), aiokafka's
reader. The marker key/value bytes are written by hand from Kafka's ControlRecordType /
EndTransactionMarker layout. Then round trips, what our own readers do with a control batch,
and the decode invariant: malformed input raises CorruptRecordError and nothing else.
"""

from __future__ import annotations

import struct

import aiokafka.record.default_records as aiokafka_default
import kafka.record.default_records as kp_default
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient import ConsumerRecord
from hmbclient.errors import CorruptRecordError
from hmbclient.protocol.records import GZIP, NONE, decode_records, scan_entries
from hmbclient.protocol.records.control import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    ControlType,
    EndTxnMarker,
    batch_header,
    control_record,
    decode_control_type,
    decode_end_txn_marker,
    encode_control_batch,
    encode_control_key,
    encode_end_txn_marker_value,
    encode_transactional_batch,
)

TS = 1_700_000_000_000
COMMIT = EndTxnMarker(ControlType.COMMIT, 3)
ABORT = EndTxnMarker(ControlType.ABORT, 0)


def _kp_batch(items: list[tuple[bytes | None, bytes | None, int]], pid: int, epoch: int, seq: int, *, codec: int = 0, base_offset: int = 0) -> bytes:
    b = kp_default.DefaultRecordBatchBuilder(2, codec, True, pid, epoch, seq, 1 << 20)
    for i, (k, v, ts) in enumerate(items):
        b.append(i, ts, k, v, [])
    data = bytearray(b.build())
    # the broker's fields, outside the CRC: base offset, and the partition leader epoch that
    # clients leave unset (-1 in the Java client and ours, 0 in kafka-python)
    struct.pack_into(">qii", data, 0, base_offset, struct.unpack_from(">i", data, 8)[0], -1)
    return bytes(data)


def _with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c(memoryview(data)[21:]))
    return bytes(data)


def test_marker_key_and_value_layout_by_hand() -> None:
    assert encode_control_key(ControlType.ABORT) == b"\x00\x00\x00\x00"
    assert encode_control_key(ControlType.COMMIT) == b"\x00\x00\x00\x01"
    assert encode_end_txn_marker_value(3) == b"\x00\x00" + b"\x00\x00\x00\x03"
    assert decode_end_txn_marker(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x03") == COMMIT
    # a newer value version with more fields is read by its prefix
    assert decode_end_txn_marker(b"\x00\x00\x00\x00", b"\x00\x01\x00\x00\x00\x07extra") == EndTxnMarker(ControlType.ABORT, 7)


@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_transactional_batch_is_byte_identical_to_kafka_python(codec: int) -> None:
    items = [(b"k", b"v1", TS), (None, b"v" * 200, TS + 5), (b"k2", None, TS + 1)]
    ours = encode_transactional_batch(codec, items, 4001, 7, 42, timestamp_ms=TS, base_offset=100)
    hdr = batch_header(ours)
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.is_transactional, hdr.is_control) == (4001, 7, 42, True, False)
    assert (hdr.base_offset, hdr.last_offset, hdr.record_count, hdr.codec) == (100, 102, 3, codec)
    theirs = _kp_batch(items, 4001, 7, 42, codec=codec, base_offset=100)
    if codec == NONE:
        assert ours == theirs
    # either way each side reads the other's
    assert [(r.key, r.value) for r in decode_records(theirs)] == [(k, v) for k, v, _ts in items]
    kb = kp_default.DefaultRecordBatch(ours)
    assert kb.is_transactional and not kb.is_control_batch and kb.producer_id == 4001 and kb.base_sequence == 42
    assert [(r.key, r.value) for r in kb] == [(k, v) for k, v, _ts in items]


@pytest.mark.parametrize("marker", [COMMIT, ABORT])
def test_control_batch_matches_kafka_python(marker: EndTxnMarker) -> None:
    ours = encode_control_batch(4001, 7, marker, timestamp_ms=TS, base_offset=55)
    # kafka-python builds the same transactional batch of the marker record; a broker sets the
    # control bit (kafka-python's builder never does), which changes the CRC
    key, value = encode_control_key(marker.control_type), encode_end_txn_marker_value(marker.coordinator_epoch)
    theirs = bytearray(_kp_batch([(key, value, TS)], 4001, 7, -1, base_offset=55))
    struct.pack_into(">h", theirs, 21, struct.unpack_from(">h", theirs, 21)[0] | CONTROL_MASK)
    assert ours == _with_crc(theirs)

    kb = kp_default.DefaultRecordBatch(ours)
    assert kb.is_control_batch and kb.is_transactional and kb.validate_crc()
    (rec,) = list(kb)
    assert isinstance(rec, kp_default.ControlRecord)
    assert (rec.commit, rec.abort, rec.offset, rec.value) == (marker.committed, not marker.committed, 55, value)

    ab = aiokafka_default.DefaultRecordBatch(ours)
    assert ab.is_control_batch and ab.is_transactional and ab.producer_id == 4001 and ab.producer_epoch == 7


def test_our_readers_skip_control_batches_and_scan_counts_them() -> None:
    data = encode_transactional_batch(NONE, [(b"a", b"1", TS), (b"b", b"2", TS)], 9, 0, 0, timestamp_ms=TS, base_offset=0)
    marker = encode_control_batch(9, 0, COMMIT, timestamp_ms=TS, base_offset=2)
    log = data + marker
    assert [(r.offset, r.value) for r in decode_records(log)] == [(0, b"1"), (1, b"2")]
    entries, valid = scan_entries(log)
    assert valid == len(log)
    assert [(e.base_offset, e.last_offset, e.count) for e in entries] == [(0, 1, 2), (2, 2, 1)]
    hdr = batch_header(log, entries[1].position)
    assert hdr.is_control and decode_end_txn_marker(*control_record(log, entries[1].position)) == COMMIT


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**15 - 1),
    coord=st.integers(-(2**31), 2**31 - 1),
    commit=st.booleans(),
    ts=st.integers(0, 2**50),
    base=st.integers(0, 2**62),
)
def test_control_batch_round_trip(pid: int, epoch: int, coord: int, commit: bool, ts: int, base: int) -> None:
    marker = EndTxnMarker(ControlType.COMMIT if commit else ControlType.ABORT, coord)
    data = encode_control_batch(pid, epoch, marker, timestamp_ms=ts, base_offset=base)
    hdr = batch_header(data)
    assert hdr.attributes == TRANSACTIONAL_MASK | CONTROL_MASK
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.base_offset, hdr.last_offset, hdr.max_timestamp) == (pid, epoch, -1, base, base, ts)
    assert decode_end_txn_marker(*control_record(data)) == marker
    assert kp_default.DefaultRecordBatch(data).validate_crc()


def test_bad_markers_and_batches_raise_corrupt_record_error() -> None:
    good = encode_control_batch(1, 0, COMMIT, timestamp_ms=TS)
    data_batch = encode_transactional_batch(NONE, [(b"a", b"1", TS)], 1, 0, 0, timestamp_ms=TS)
    cases = [
        lambda: decode_control_type(b"\x00"),
        lambda: decode_control_type(None),
        lambda: decode_end_txn_marker(b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),  # LEADER_CHANGE
        lambda: decode_end_txn_marker(b"\x00\x00\x00\x01", b"\x00\x00\x00"),
        lambda: decode_end_txn_marker(b"\x00\x00\x00\x01", None),
        lambda: decode_end_txn_marker(b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),
        lambda: control_record(data_batch),  # not a control batch
        lambda: control_record(good[:-1]),  # truncated
        lambda: control_record(good[:30]),
        lambda: control_record(good[:-1] + bytes([good[-1] ^ 1])),  # CRC
        lambda: batch_header(b"\x00" * 16 + b"\x01" + b"\x00" * 60),  # magic 1
    ]
    for i, case in enumerate(cases):
        with pytest.raises(CorruptRecordError):
            case()
            pytest.fail(f"case {i} did not raise")
    with pytest.raises(ValueError):
        encode_control_batch(-1, 0, COMMIT, timestamp_ms=TS)
    with pytest.raises(ValueError):
        encode_transactional_batch(NONE, [(b"a", b"1", TS)], 1, 0, -1, timestamp_ms=TS)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_decoding_mutated_control_batches_raises_only_corrupt_record_error(data: st.DataObject) -> None:
    good = bytearray(encode_control_batch(77, 3, ABORT, timestamp_ms=TS, base_offset=9))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(good) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            good[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del good[i:]
            if not good:
                good = bytearray(b"\x00")
        else:
            good[i:i] = data.draw(st.binary(min_size=1, max_size=6))
    # CRC-fixed, so mutations reach the record decoder too
    fixed = _with_crc(bytearray(good)) if len(good) >= 21 else bytes(good)
    for buf in (bytes(good), fixed):
        try:
            decode_end_txn_marker(*control_record(buf))
        except CorruptRecordError:
            pass


# --- read_committed, against kafka-python's consumer ---------------------------------------------

from collections import namedtuple  # noqa: E402

from kafka.consumer.fetcher import Fetcher  # noqa: E402
from kafka.protocol.consumer import IsolationLevel  # noqa: E402
from kafka.record import MemoryRecords  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

from hmbclient.protocol.records import encode_records  # noqa: E402
from hmbclient.protocol.records.control import read_committed  # noqa: E402

_Aborted = namedtuple("_Aborted", "producer_id first_offset")


def _kafka_python_read_committed(buf: bytes, aborted: list[tuple[int, int]]) -> list[tuple[int, bytes | None]]:
    pr = Fetcher.PartitionRecords(
        0,
        TopicPartition("t", 0),
        MemoryRecords(buf),
        isolation_level=IsolationLevel.READ_COMMITTED,
        aborted_transactions=[_Aborted(p, f) for p, f in aborted],
    )
    return [(r.offset, r.value) for r in pr.take()]


def _log(steps: list[tuple[str, int, bool]]) -> tuple[bytes, list[tuple[int, int]], list[tuple[int, bytes]]]:
    """A partition log from steps (kind, producer, flag): ("data", pid, _) a transactional batch
    of two records, ("end", pid, committed) its marker, ("plain", _, _) a non-transactional
    record. Returns the bytes, the aborted (pid, first offset) list a broker would answer and the
    (offset, value) pairs a read_committed reader must see, computed from the steps alone."""
    out: list[bytes] = []
    offset = 0
    first: dict[int, int] = {}
    members: dict[int, list[tuple[int, bytes]]] = {}
    aborted: list[tuple[int, int]] = []
    visible: list[tuple[int, bytes]] = []
    seq: dict[int, int] = {}
    for kind, pid, flag in steps:
        if kind == "data":
            vals = [(offset, f"p{pid}-{offset}".encode()), (offset + 1, f"p{pid}-{offset + 1}".encode())]
            out.append(encode_transactional_batch(NONE, [(None, v, TS) for _o, v in vals], pid, 0, seq.get(pid, 0), timestamp_ms=TS, base_offset=offset))
            seq[pid] = seq.get(pid, 0) + 2
            first.setdefault(pid, offset)
            members.setdefault(pid, []).extend(vals)
            offset += 2
        elif kind == "end":
            if pid not in first:
                continue
            out.append(encode_control_batch(pid, 0, EndTxnMarker(ControlType.COMMIT if flag else ControlType.ABORT, 1), timestamp_ms=TS, base_offset=offset))
            if flag:
                visible.extend(members[pid])
            else:
                aborted.append((pid, first[pid]))
            del first[pid], members[pid]
            offset += 1
        else:
            v = f"plain-{offset}".encode()
            out.append(encode_records(2, NONE, [(None, v, TS)], base_offset=offset))
            visible.append((offset, v))
            offset += 1
    # a fetch ends at the last stable offset: cut before the first open transaction
    lso = min(first.values(), default=offset)
    buf = b""
    for b in out:
        if batch_header(b).base_offset >= lso:
            break
        buf += b
    return buf, aborted, sorted(v for v in visible if v[0] < lso)


def test_read_committed_drops_aborted_and_control_like_kafka_python() -> None:
    steps = [
        ("data", 1, False), ("data", 2, False), ("plain", 0, False), ("end", 1, True), ("data", 2, False),
        ("end", 2, False), ("data", 1, False), ("data", 2, False), ("end", 2, True), ("end", 1, False), ("plain", 0, False),
    ]  # fmt: skip
    buf, aborted, want = _log(steps)
    assert aborted == [(2, 2), (1, 9)]
    got = [(r.offset, r.value) for r in read_committed(buf, aborted)]
    assert got == want == _kafka_python_read_committed(buf, aborted)
    assert [v for _o, v in got] == [b"p1-0", b"p1-1", b"plain-4", b"p2-11", b"p2-12", b"plain-15"]
    # tail: the same records as the poll consumer's ConsumerRecords (built by the decoder)
    tailed = read_committed(buf, aborted, (ConsumerRecord, ("t", 0)))
    assert all(type(r) is ConsumerRecord for r in tailed)
    assert [tuple(r) for r in tailed] == [(*r, "t", 0) for r in read_committed(buf, aborted)]
    # read_uncommitted sees everything but the markers
    assert len(decode_records(buf)) == 12


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.lists(st.tuples(st.sampled_from(["data", "end", "plain"]), st.integers(1, 3), st.booleans()), max_size=25))
def test_read_committed_random_interleavings(steps: list[tuple[str, int, bool]]) -> None:
    buf, aborted, want = _log(steps)
    got = [(r.offset, r.value) for r in read_committed(buf, aborted)]
    assert got == want
    assert got == _kafka_python_read_committed(buf, aborted)


def test_read_committed_raises_on_corruption_and_drops_a_partial_tail() -> None:
    buf, aborted, want = _log([("data", 1, False), ("end", 1, True), ("plain", 0, False)])
    assert [(r.offset, r.value) for r in read_committed(buf + buf[:20], aborted)] == want
    bad = bytearray(buf)
    bad[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        read_committed(bytes(bad), aborted)
