"""The segmented log on a real filesystem: naming, rolling, index, reads, recovery, retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import LogManager
from hmbclient.errors import (
    CorruptRecordError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
)
from hmbclient.protocol import records

from .conftest import encode


def _values(log: Log, offset: int = 0) -> list[tuple[int, bytes | None]]:
    out = []
    while offset < log.log_end_offset:
        sl, _ = log.read(offset, 1 << 20, min_one_entry=True)
        assert sl is not None
        recs = records.decode_records(sl.read())
        out += [(r.offset, r.value) for r in recs if r.offset >= offset]
        offset = recs[-1].offset + 1
    return out


def _files(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def test_append_assigns_broker_offsets_and_names_segments(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig())
    a = log.append(encode([(b"k", b"a"), (None, b"b")]))
    b = log.append(encode([(None, b"c")], magic=1))
    c = log.append(encode([(None, b"d")], magic=0, codec=records.GZIP))
    assert (a.first_offset, a.last_offset, b.first_offset, c.first_offset) == (0, 1, 2, 3)
    assert log.log_end_offset == 4
    assert _values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert _files(tmp_path / "t-0") == ["00000000000000000000.index", "00000000000000000000.log"]


def test_stored_bytes_are_the_wire_bytes_with_new_offsets(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(encode([(None, b"x")]))
    wire = encode([(b"k", b"v" * 100)])
    log.append(wire)
    sl, _ = log.read(1, 1 << 20)
    assert sl is not None
    stored = sl.read()
    # Only the base offset (outside the v2 CRC) differs.
    assert stored[8:] == wire[8:] and int.from_bytes(stored[:8], "big") == 1


def test_roll_at_segment_bytes_and_sparse_index(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=4000, index_interval_bytes=500)
    log = Log(str(tmp_path / "t-0"), cfg)
    for i in range(60):
        log.append(encode([(None, b"%03d" % i + b"x" * 200)]))
    names = _files(tmp_path / "t-0")
    bases = sorted(int(n[:20]) for n in names if n.endswith(".log"))
    assert len(bases) > 3 and bases[0] == 0
    assert all(len(n) == len("00000000000000000000.log") or n.endswith(".index") for n in names)
    for seg in log.segments[:-1]:
        assert seg.size <= 4000 and len(seg.index) >= 3
    # every offset is readable through the index, wherever it lies
    for off in (0, 17, 18, 31, 59):
        sl, _ = log.read(off, 300)
        assert sl is not None
        assert records.decode_records(sl.read())[0].offset == off
    assert [v[:3] for _, v in _values(log) if v] == [b"%03d" % i for i in range(60)]


def test_restart_keeps_everything(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log(d, LogConfig(segment_bytes=2000))
    for i in range(30):
        log.append(encode([(None, b"m%d" % i + b"." * 100)]))
    before = _values(log)
    log.close()
    log2 = Log(d, LogConfig(segment_bytes=2000))
    assert log2.recovered_bytes_cut == 0
    assert _values(log2) == before and log2.log_end_offset == 30
    assert log2.append(encode([(None, b"next")])).first_offset == 30


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad_crc"])
def test_recovery_truncates_newest_segment_at_first_bad_entry(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "t-0"
    log = Log(str(d), LogConfig())
    for i in range(10):
        log.append(encode([(None, b"v%d" % i)], magic=2 if i % 2 else 1))
    good_size = log.segments[-1].size
    log.close()
    path = d / "00000000000000000000.log"
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(data + os.urandom(1000))
    elif damage == "truncated":
        path.write_bytes(data[:-7])
    else:
        # flip one byte of the last entry's value: its CRC no longer matches
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    log2 = Log(str(d), LogConfig())
    assert log2.recovered_bytes_cut > 0
    expected = 10 if damage == "garbage" else 9
    assert log2.log_end_offset == expected
    assert [v for _, v in _values(log2)] == [b"v%d" % i for i in range(expected)]
    assert os.path.getsize(path) <= good_size
    # keeps serving: appends continue right after the last valid entry
    assert log2.append(encode([(None, b"after")])).first_offset == expected


def test_malformed_segment_name_fails_loudly(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    Log(str(d), LogConfig()).close()
    (d / "0000000000000000000x.log").write_bytes(b"")
    with pytest.raises(StorageError, match="unexpected file"):
        Log(str(d), LogConfig())


def test_index_without_log_fails_loudly(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(str(d), LogConfig(segment_bytes=200))
    for _ in range(5):
        log.append(encode([(None, b"x" * 100)]))
    log.close()
    seg = sorted(p for p in os.listdir(d) if p.endswith(".log"))[1]
    os.unlink(d / seg)
    with pytest.raises(StorageError, match="index without its log"):
        Log(str(d), LogConfig(segment_bytes=200))


def test_log_manager_rejects_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "not a partition").mkdir()
    with pytest.raises(StorageError, match="not <topic>-<partition>"):
        LogManager(str(tmp_path), LogConfig())


def test_bad_input_appends_nothing(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig(max_message_bytes=500))
    log.append(encode([(None, b"ok")]))
    size = log.size_bytes
    good = bytearray(encode([(None, b"payload")]))
    good[-1] ^= 0x55
    with pytest.raises(CorruptRecordError):
        log.append(bytes(good))
    with pytest.raises(MessageSizeTooLargeError):
        log.append(encode([(None, b"x" * 1000)]))
    with pytest.raises(CorruptRecordError):
        log.append(encode([(None, b"partial")])[:-3])
    assert log.size_bytes == size and log.log_end_offset == 1


def test_out_of_range_and_end_reads(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(encode([(None, b"a"), (None, b"b")]))
    assert log.read(2, 100) == (None, -1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    # an offset inside a batch returns the whole batch (the client skips the earlier records)
    sl, magic = log.read(1, 100, min_one_entry=True)
    assert sl is not None and magic == 2 and records.decode_records(sl.read())[0].offset == 0


def test_partial_reads_and_min_one_entry(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(encode([(None, b"x" * 1000)]))
    sl, _ = log.read(0, 100)
    assert sl is not None and len(sl) == 100  # a partial entry, as Kafka's reads return
    sl, _ = log.read(0, 100, min_one_entry=True)
    assert sl is not None and len(sl) > 1000


def test_retention_by_size_and_age_deletes_whole_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(str(d), LogConfig(segment_bytes=1000, retention_bytes=2500, retention_ms=None))
    for i in range(40):
        log.append(encode([(None, b"%02d" % i + b"y" * 150)]))
    n_before = len(log.segments)
    # An append without a leader epoch (no replication) moves the high watermark to the end.
    assert log.high_watermark == log.log_end_offset == 40
    # Nothing at or past the high watermark is deleted: with the HW at 0, nothing goes.
    log.set_high_watermark(0)
    assert log.apply_retention(int(time.time() * 1000)) == 0
    # With the HW inside the third segment, only the two segments wholly below it may go.
    log.set_high_watermark(log.segments[2].base_offset + 1)
    assert log.apply_retention(int(time.time() * 1000)) == 2
    assert log.log_start_offset == log.segments[0].base_offset <= log.high_watermark
    log.set_high_watermark(log.log_end_offset)
    deleted = 2 + log.apply_retention(int(time.time() * 1000))
    assert deleted > 0 and len(log.segments) == n_before - deleted
    assert log.size_bytes - log.segments[0].size < 2500
    start = log.log_start_offset
    assert start == log.segments[0].base_offset > 0
    assert len([n for n in _files(d) if n.endswith(".log")]) == len(log.segments)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert _values(log, start)[0][0] == start and log.log_end_offset == 40

    aged = Log(str(tmp_path / "u-0"), LogConfig(segment_bytes=1000, retention_ms=60_000))
    for _ in range(20):
        aged.append(encode([(None, b"z" * 150)]))
    old = time.time() - 3600
    for seg in aged.segments[:-2]:
        os.utime(seg.log_path, (old, old))
    n_aged = len(aged.segments)
    assert aged.apply_retention(int(time.time() * 1000)) == n_aged - 2
    assert len(aged.segments) == 2
    # the active segment is never deleted, however old
    os.utime(aged.segments[-1].log_path, (old, old))
    os.utime(aged.segments[0].log_path, (old, old))
    aged.apply_retention(int(time.time() * 1000))
    assert len(aged.segments) == 1 and aged.log_end_offset == 20


def test_offsets_before_and_timestamp_lookup(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=300))
    for i in range(6):
        log.append(encode([(None, b"v" * 100)], ts=1_000 * (i + 1)))
    now = int(time.time() * 1000)
    bases = [s.base_offset for s in log.segments]
    assert log.offsets_before(-1, 1, now) == [6]
    assert log.offsets_before(-2, 5, now) == [0]
    assert log.offsets_before(-1, 100, now) == [6, *reversed(bases)]
    assert log.offset_for_timestamp(3_000) == (2, 3_000)
    assert log.offset_for_timestamp(2_500) == (2, 3_000)
    assert log.offset_for_timestamp(7_000) is None


def test_compaction_keeps_newest_per_key_and_offsets(tmp_path: Path) -> None:
    d = str(tmp_path / "__consumer_offsets-0")
    cfg = LogConfig(segment_bytes=600, compact=True, retention_ms=None)
    log = Log(d, cfg)
    for i in range(40):
        log.append(encode([(b"key-%d" % (i % 4), b"v%d" % i)]))
    assert len(log.segments) > 3
    end = log.log_end_offset
    # Below the high watermark only: with the HW at 0 there is nothing to compact.
    log.set_high_watermark(0)
    assert log.compact() == 0
    log.set_high_watermark(end)
    size_before = log.size_bytes
    dropped = log.compact()
    assert dropped > 20 and log.size_bytes < size_before
    assert log.log_end_offset == end and log.log_start_offset == 0
    values = _values(log)
    assert values[-4:] == [(i, b"v%d" % i) for i in range(36, 40)]
    # outside the active segment (the cleanable range) only the newest record of each key is
    # left: the newest below the active segment's base
    active_base = log.segments[-1].base_offset
    newest = {i % 4: i for i in range(active_base)}
    assert sorted(off for off, _ in values if off < active_base) == sorted(newest.values())
    # an unfinished rewrite left behind is cleaned up at start-up; data and offsets survive
    log.close()
    (tmp_path / "__consumer_offsets-0" / "00000000000000000000.log.cleaned").write_bytes(b"junk")
    again = Log(d, cfg)
    assert _values(again)[-4:] == [(i, b"v%d" % i) for i in range(36, 40)]
    assert again.append(encode([(b"key-0", b"new")])).first_offset == end
