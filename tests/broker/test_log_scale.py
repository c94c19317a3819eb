"""The log layer at scale: lazily opened segments, a bounded read-handle cache, lazy indexes, and
start-up after a clean or an unclean shutdown. Open descriptors are counted in /proc/self/fd."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from hmbclient.broker.log.store import HandleCache, SegmentGoneError
from hmbclient.errors import OffsetOutOfRangeError
from hmbclient.protocol import records
from hmbclient.protocol.api import FetchRequest

from .conftest import RawClient, create_topic, encode, produce

# Small segments: each append of one ~170-byte message set rolls every few appends.
_CFG = LogConfig(segment_bytes=600, index_interval_bytes=200, retention_ms=None)


def _open_files_under(folder: Path) -> list[str]:
    """Targets of this process's descriptors that are files under ``folder``."""
    root = str(folder.resolve())
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root):
            out.append(target)
    return out


def _fill(log: Log, n: int, tag: bytes = b"") -> None:
    for i in range(n):
        log.append(encode([(None, tag + b"%04d" % i + b"." * 150)]))


def _values(log: Log, offset: int = 0) -> list[bytes | None]:
    out: list[bytes | None] = []
    while offset < log.log_end_offset:
        sl, _ = log.read(offset, 1 << 20, min_one_entry=True)
        assert sl is not None
        recs = records.decode_records(sl.read())
        out += [r.value for r in recs if r.offset >= offset]
        offset = recs[-1].offset + 1
    return out


def test_many_segments_hold_at_most_the_cache_of_read_handles(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lm = LogManager(str(data), _CFG, max_open_read_handles=4)
    for p in range(6):
        _fill(lm.get_or_create("t", p), 40, b"p%d-" % p)
    segments = sum(len(lg.segments) for _, lg in lm.all_logs())
    assert segments >= 6 * 10
    # While written: one writer per partition (the active segment), and no index descriptor.
    assert len(_open_files_under(data)) <= 6
    expected = {p: _values(lm.get_or_create("t", p)) for p in range(6)}
    assert len(_open_files_under(data)) <= 6 + 4
    lm.close()
    assert _open_files_under(data) == []

    lm2 = LogManager(str(data), _CFG, max_open_read_handles=4)
    # Start-up opened nothing it keeps but what the cache allows, and read only active indexes.
    assert len(_open_files_under(data)) <= 4
    for _, lg in lm2.all_logs():
        assert [s.index.loaded for s in lg.segments[:-1]] == [False] * (len(lg.segments) - 1)
    # Every segment read twice over, in an order that evicts each handle before it is needed
    # again: the bytes are right and the descriptors stay within the cap.
    for _ in range(2):
        for p in range(6):
            got = lm2.get("t", p)
            assert got is not None
            assert _values(got) == expected[p]
            assert len(_open_files_under(data)) <= 4
    assert lm2.handles.evicted > 0 and len(lm2.handles) <= 4
    # Indexes leave memory with their handles: at most the cached segments' are loaded.
    sealed = [s for _, lg in lm2.all_logs() for s in lg.segments[:-1]]
    assert 0 < sum(s.index.loaded for s in sealed) <= 4
    lm2.close()


def test_a_slice_keeps_its_descriptor_through_eviction_and_deletion(tmp_path: Path) -> None:
    cache = HandleCache(1)
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=600, retention_bytes=1, retention_ms=None), cache=cache)
    _fill(log, 30)
    first = log.segments[0]
    sl, _ = log.read(0, 1 << 20)
    assert sl is not None and sl.store.path == first.log_path
    want = sl.read()
    held_fd = sl.fileno()
    # Evict the slice's handle (the cache holds one): read from the other sealed segments.
    for seg in log.segments[1:-1]:
        log.read(seg.base_offset, 100)
    assert cache.evicted >= 1
    # Delete the segment behind it too: retention may remove it while the fetch is queued.
    assert log.apply_retention(0) > 0 and log.log_start_offset > 0
    assert not os.path.exists(first.log_path)
    assert os.readlink(f"/proc/self/fd/{held_fd}").endswith(" (deleted)")
    # What the network layer does with it: sendfile from the slice's descriptor.
    a, b = socket.socketpair()
    with a, b:
        sent = 0
        while sent < len(sl):
            sent += os.sendfile(a.fileno(), sl.fileno(), sl.position + sent, len(sl) - sent)
        got = b""
        while len(got) < len(want):
            got += b.recv(1 << 16)
    assert got == want == sl.read()
    # The descriptor goes with the last reference to the slice.
    del sl
    assert not os.path.exists(f"/proc/self/fd/{held_fd}") or "(deleted)" not in os.readlink(f"/proc/self/fd/{held_fd}")
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.close()


def test_a_retired_segment_is_never_reopened_by_name(tmp_path: Path) -> None:
    """A reader holding a segment whose handle was evicted must not read a new file that got
    the same name (a log emptied and restarted at the same base offset)."""
    cache = HandleCache(1)
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=600, retention_ms=None), cache=cache)
    _fill(log, 10, b"old")
    log.roll()
    stale = log.segments[0]
    log.truncate_fully_and_start_at(0)
    _fill(log, 3, b"new")
    log.roll()  # the new segment 0 is sealed: reads of it go through the cache by name too
    with pytest.raises(SegmentGoneError):
        stale.store.read(0, 100)
    assert [v[:3] for v in _values(log) if v] == [b"new"] * 3
    log.close()


def test_clean_restart_reads_no_old_index_and_continues(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lm = LogManager(str(data), _CFG)
    lg = lm.get_or_create("t", 0)
    _fill(lg, 50)
    before, end, n_segs = _values(lg), lg.log_end_offset, len(lg.segments)
    lm.close()
    assert (data / CLEAN_SHUTDOWN_FILE).exists()

    lm2 = LogManager(str(data), _CFG)
    assert lm2.clean_shutdown_found and not (data / CLEAN_SHUTDOWN_FILE).exists()
    lg2 = lm2.get("t", 0)
    assert lg2 is not None and lg2.recovered_bytes_cut == 0
    assert lg2.log_end_offset == end and len(lg2.segments) == n_segs
    # Only the active segment was looked at (one read handle, its index only).
    assert lm2.handles.opened == 1
    assert [s.index.loaded for s in lg2.segments] == [False] * (n_segs - 1) + [True]
    assert _values(lg2) == before
    assert lg2.append(encode([(None, b"after")])).first_offset == end
    lm2.close()
    lm3 = LogManager(str(data), _CFG)
    lg3 = lm3.get("t", 0)
    assert lg3 is not None and _values(lg3) == [*before, b"after"]
    lm3.close()


@pytest.mark.parametrize("marker", [False, True], ids=["unclean", "marker_but_torn"])
def test_restart_after_a_crash_recovers_the_active_segment(tmp_path: Path, marker: bool) -> None:
    data = tmp_path / "data"
    lm = LogManager(str(data), _CFG)
    lg = lm.get_or_create("t", 0)
    _fill(lg, 50)
    before, end = _values(lg), lg.log_end_offset
    active = lg.segments[-1].log_path
    # A crash: no close (no marker, the active index never flushed), then a torn last write.
    # With ``marker`` a marker is there anyway: start-up must not trust it blindly.
    with open(active, "ab") as f:
        f.write(encode([(None, b"torn" * 20)])[:-5])
    if marker:
        (data / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    lm2 = LogManager(str(data), _CFG)
    lg2 = lm2.get("t", 0)
    assert lg2 is not None
    assert lg2.recovered_bytes_cut > 0 and lg2.log_end_offset == end
    assert _values(lg2) == before
    assert lg2.append(encode([(None, b"next")])).first_offset == end
    # The rebuilt index of the active segment answers lookups of every offset in it.
    act = lg2.segments[-1]
    for off in range(act.base_offset, end):
        sl, _ = lg2.read(off, 1 << 20, min_one_entry=True)
        assert sl is not None and records.decode_records(sl.read())[-1].offset >= off
    lm2.close()
    lm.close()  # the crashed manager's objects: closing them now changes nothing on disk
    assert _values(Log(str(data / "t-0"), _CFG)) == [*before, b"next"]


def test_index_written_on_roll_and_lazily_read_back(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(str(d), LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=None))
    _fill(log, 60)
    sealed = log.segments[0]
    entries = len(sealed.index)
    assert entries >= 3
    assert os.path.getsize(sealed.index_path) == 8 * entries
    log.close()
    log2 = Log(str(d), LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=None))
    first = log2.segments[0]
    assert not first.index.loaded
    assert first.index.lookup(first.next_offset - 1)[1] > 0 and len(first.index) == entries
    log2.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_only_an_unclean_start_crc_scans_the_active_segment(tmp_path: Path, clean: bool) -> None:
    """A clean shutdown is trusted (Kafka's rule): the active segment's next offset comes from
    a header walk, so a payload byte flipped on disk is not noticed; an unclean start CRC-scans
    and cuts the entry."""
    data = tmp_path / "data"
    lm = LogManager(str(data), _CFG)
    lg = lm.get_or_create("t", 0)
    _fill(lg, 20)
    end = lg.log_end_offset
    active = Path(lg.segments[-1].log_path)
    lm.close()
    raw = active.read_bytes()
    active.write_bytes(raw[:-1] + bytes([raw[-1] ^ 0xFF]))
    if not clean:
        (data / CLEAN_SHUTDOWN_FILE).unlink()
    lm2 = LogManager(str(data), _CFG)
    lg2 = lm2.get("t", 0)
    assert lg2 is not None
    assert lg2.log_end_offset == (end if clean else end - 1)
    assert (lg2.recovered_bytes_cut > 0) is not clean
    lm2.close()


def test_epoch_changes_are_fsynced_before_the_bytes_that_need_them(tmp_path: Path) -> None:
    """A new leader epoch is written at once (a process crash keeps it) but fsynced only when
    the log writes bytes of it, so electing a leader for many partitions costs no fsync each."""
    d = tmp_path / "t-0"
    log = Log(str(d), _CFG)
    cache = log.leader_epochs
    assert cache.assign(3, 0) and cache.dirty
    # Visible to another reader of the folder already (what a restart after kill -9 reads).
    assert (d / "leader-epoch-checkpoint").read_text().split("\n")[2] == "3 0"
    log.append(encode([(None, b"x")]), leader_epoch=3)
    assert not cache.dirty
    follower = Log(str(tmp_path / "f-0"), _CFG)
    sl, _ = log.read(0, 1 << 20)
    assert sl is not None
    follower.append_as_follower(sl.read())
    assert follower.leader_epochs.entries() == [(3, 0)] and not follower.leader_epochs.dirty
    assert follower.leader_epochs.assign(4, 1) and follower.leader_epochs.dirty
    assert follower.close() and not follower.leader_epochs.dirty
    log.close()


def test_start_up_drops_an_empty_epoch_without_rewriting_the_checkpoint(tmp_path: Path) -> None:
    """A leader elected after the last append (its epoch starts at the log end and wrote
    nothing) loses that entry at every start-up; the file is only rewritten before the next
    append, which is the first time the difference could matter."""
    d = tmp_path / "t-0"
    checkpoint = d / "leader-epoch-checkpoint"
    log = Log(str(d), _CFG)
    log.append(encode([(None, b"a")]), leader_epoch=1)
    log.leader_epochs.assign(2, log.log_end_offset)  # a new election, no data yet
    assert log.close()
    on_disk = checkpoint.read_bytes()
    for _ in range(2):
        again = Log(str(d), _CFG)
        assert again.leader_epochs.entries() == [(1, 0)]
        assert checkpoint.read_bytes() == on_disk  # nothing written by the start-up
        assert again.close() and checkpoint.read_bytes() == on_disk
    last = Log(str(d), _CFG)
    last.append(encode([(None, b"b")]), leader_epoch=1)
    assert checkpoint.read_text().split("\n")[1:3] == ["1", "1 0"]
    assert last.close()
    assert Log(str(d), _CFG).leader_epochs.entries() == [(1, 0)]


def test_compaction_retires_the_segments_it_rewrites(tmp_path: Path) -> None:
    """A reader still holding a pre-compaction segment whose handle was evicted gets
    SegmentGoneError instead of the rewritten file's bytes at the old positions; Log.read
    itself answers from the new segments."""
    cache = HandleCache(1)
    log = Log(str(tmp_path / "__consumer_offsets-0"), LogConfig(segment_bytes=600, compact=True, retention_ms=None), cache=cache)
    for i in range(40):
        log.append(encode([(b"key-%d" % (i % 4), b"v%d" % i)]))
    log.set_high_watermark(log.log_end_offset)
    old = log.segments[0]
    sl, _ = log.read(0, 1 << 20)
    assert sl is not None
    before = sl.read()
    log.read(log.segments[1].base_offset, 100)  # evicts segment 0's handle
    assert log.compact() > 0 and log.segments[0] is not old
    with pytest.raises(SegmentGoneError):
        old.store.read(0, 100)
    assert sl.read() == before  # the slice cut before the rewrite still reads the old file
    got = log.read(0, 1 << 20, min_one_entry=True)[0]
    assert got is not None and records.decode_records(got.read())[0].value == b"v%d" % records.decode_records(got.read())[0].offset
    log.close()


def test_fetch_responses_sent_with_sendfile_survive_eviction(tmp_path: Path) -> None:
    """Through a real broker: one Fetch response holds slices of old segments of two partitions
    while the cache holds one handle, so the first slice's handle is evicted before the
    response is sent with sendfile. Every byte arrives, for every offset."""
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), num_partitions=2, log_segment_bytes=400, log_index_interval_bytes=200,
                        log_max_open_read_handles=1) as b:
        with RawClient(b.host, b.port) as c:
            create_topic(c, "evict")
            for i in range(30):
                for p in (0, 1):
                    assert produce(c, "evict", p, encode([(None, b"p%d-%02d" % (p, i) + b"." * 100)])).error_code == 0
            lm = b.broker.logs
            assert lm is not None
            lg = lm.get("evict", 0)
            assert lg is not None and len(lg.segments) > 5
            assert lm.handles.capacity == 1  # log.max.open.read.handles
            opened = lm.handles.opened
            got: dict[int, list[bytes | None]] = {0: [], 1: []}
            offsets = {0: 0, 1: 0}
            while min(offsets.values()) < 30:
                parts = [{"partition": p, "fetch_offset": offsets[p], "partition_max_bytes": 1 << 20, "log_start_offset": -1, "current_leader_epoch": -1} for p in (0, 1)]
                req = FetchRequest[10].build(
                    replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                    session_id=0, session_epoch=-1, topics=[("evict", parts)], forgotten_topics_data=[],
                )
                resp = c.request(req)
                for pr in resp.topics[0].partitions:
                    assert pr.error_code == 0
                    recs = [r for r in records.decode_records(pr.records) if r.offset >= offsets[pr.partition]]
                    got[pr.partition] += [r.value for r in recs]
                    if recs:
                        offsets[pr.partition] = recs[-1].offset + 1
            assert lm.handles.opened > opened and lm.handles.evicted > 0
            for p in (0, 1):
                assert got[p] == [b"p%d-%02d" % (p, i) + b"." * 100 for i in range(30)]


@pytest.mark.parametrize("damage", ["not_increasing", "past_the_log"])
def test_a_corrupt_index_is_rebuilt_when_first_read(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=4000, index_interval_bytes=300, retention_ms=None)
    log = Log(str(d), cfg)
    _fill(log, 60)
    before = _values(log)
    sealed = log.segments[0]
    path, size = Path(sealed.index_path), sealed.size
    log.close()
    raw = path.read_bytes()
    assert len(raw) >= 16
    if damage == "not_increasing":
        path.write_bytes(raw[8:16] + raw[:8] + raw[16:])
    else:
        path.write_bytes(raw + (9).to_bytes(4, "big") + (size + 100).to_bytes(4, "big"))
    again = Log(str(d), cfg)
    assert _values(again) == before
    # Every offset of the damaged segment is found from the rebuilt index.
    first = again.segments[0]
    for off in range(first.base_offset, first.next_offset):
        sl, _ = again.read(off, 1, min_one_entry=True)
        assert sl is not None and records.decode_records(sl.read())[0].offset == off
    assert again.close()
    # Written back at close, as the appends had built it (one-record batches: an entry's last
    # offset is its first, so the header walk indexes them exactly as the appends did).
    assert path.read_bytes() == raw


def test_fetch_of_a_deleted_log_answers_storage_error_and_serves_the_rest(tmp_path: Path) -> None:
    """A StopReplica deleting a log while fetches still name it: that partition's answer is
    KAFKA_STORAGE_ERROR (retriable), the other partition of the same request is served, and the
    connection stays open (an exception here used to close it)."""
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), num_partitions=2, log_max_open_read_handles=1, log_segment_bytes=400,
                        log_index_interval_bytes=200) as b, RawClient(b.host, b.port) as c:
        create_topic(c, "gone")
        for i in range(6):  # several segments each: offset 0 lies in a closed one
            for p in (0, 1):
                assert produce(c, "gone", p, encode([(None, b"m%d-%d" % (p, i) + b"." * 100)])).error_code == 0
        rm = b.broker.replica_manager
        assert rm is not None
        part = rm.partition("gone", 0)
        assert part is not None

        def request(partitions: tuple[int, ...]) -> Any:
            parts = [{"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "log_start_offset": -1, "current_leader_epoch": -1}
                     for p in partitions]
            return FetchRequest[10].build(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                          session_id=0, session_epoch=-1, topics=[("gone", parts)], forgotten_topics_data=[])

        c.request(request((0,)))
        c.request(request((1,)))  # the one cached read handle is partition 1's now
        part.log.delete()
        req = request((0, 1))
        answer = {r.partition: r for r in c.request(req).topics[0].partitions}
        assert answer[0].error_code == 56  # KAFKA_STORAGE_ERROR
        assert answer[1].error_code == 0
        assert [r.value for r in records.decode_records(answer[1].records)][0] == b"m1-0" + b"." * 100
        assert c.request(req).topics[0].partitions  # the connection still serves
