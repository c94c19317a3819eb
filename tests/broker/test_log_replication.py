"""What replication needs from the log, on real files: checkpoint files, the leader-epoch cache,
the high watermark (consumer reads stop there), follower appends, truncation, epoch stamping and
learning, and the LogManager's high-watermark checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hmbclient.broker.log.checkpoint import EPOCH_ENTRY_FORMAT, HW_ENTRY_FORMAT, CheckpointFile
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.epochs import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import HW_CHECKPOINT, LogManager
from hmbclient.broker.log.segment import walk_headers
from hmbclient.clock import wall_ms
from hmbclient.errors import CorruptRecordError, OffsetOutOfRangeError, StorageError
from hmbclient.protocol import records

from .conftest import encode

REPO = Path(__file__).resolve().parents[2]

# -- checkpoint files ----------------------------------------------------------------------------


def test_checkpoint_round_trip_in_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    cp = CheckpointFile(str(path), HW_ENTRY_FORMAT)
    assert cp.read() == []  # missing file: nothing checkpointed yet
    cp.write([("orders", 0, 17), ("my.topic-x", 12, 0)])
    assert path.read_text() == "0\n2\norders 0 17\nmy.topic-x 12 0\n"
    assert cp.read() == [("orders", 0, 17), ("my.topic-x", 12, 0)]
    cp.write([])
    assert path.read_text() == "0\n0\n" and cp.read() == []
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()
    with pytest.raises(ValueError):
        cp.write([("two words", 0, 1)])
    with pytest.raises(ValueError):
        cp.write([("t", 0)])


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("", 1),
        ("1\n1\n3 4\n", 1),  # unknown version
        ("x\n", 1),
        ("0\n", 2),  # no count
        ("0\ntwo\n", 2),
        ("0\n2\n3 4\n", 4),  # fewer entries than the count says
        ("0\n1\n3 4\n5 6\n", 4),  # more
        ("0\n1\n3 4 5\n", 3),  # wrong number of fields
        ("0\n1\n3 +4\n", 3),  # not a plain decimal
        ("0\n1\n3  4\n", 3),
        ("0\n-1\n", 2),
    ],
)
def test_malformed_checkpoint_fails_loudly_naming_file_and_line(tmp_path: Path, content: str, line: int) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text(content)
    with pytest.raises(StorageError, match=rf"{LEADER_EPOCH_CHECKPOINT}, line {line}:"):
        CheckpointFile(str(path), EPOCH_ENTRY_FORMAT).read()
    path.write_bytes(b"0\n1\n\xff 1\n")
    with pytest.raises(StorageError, match="not UTF-8"):
        CheckpointFile(str(path), EPOCH_ENTRY_FORMAT).read()


_CRASH_AT_RENAME = """
import os, signal, sys
from hmbclient.broker.log.checkpoint import EPOCH_ENTRY_FORMAT, CheckpointFile
cp = CheckpointFile(sys.argv[1], EPOCH_ENTRY_FORMAT)
# Die exactly between the fsynced temporary file and the rename over the real one.
os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
cp.write([(9, 900)])
"""


def test_crash_between_tmp_write_and_rename_keeps_the_old_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    CheckpointFile(str(path), EPOCH_ENTRY_FORMAT).write([(1, 0), (2, 50)])
    proc = subprocess.run([sys.executable, "-c", _CRASH_AT_RENAME, str(path)], cwd=REPO, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / (LEADER_EPOCH_CHECKPOINT + ".tmp")).read_text() == "0\n1\n9 900\n"
    assert CheckpointFile(str(path), EPOCH_ENTRY_FORMAT).read() == [(1, 0), (2, 50)]
    assert LeaderEpochCache(str(path)).entries() == [EpochEntry(1, 0), EpochEntry(2, 50)]


_WRITE_FOREVER = """
import sys
from hmbclient.broker.log.checkpoint import EPOCH_ENTRY_FORMAT, CheckpointFile
cp = CheckpointFile(sys.argv[1], EPOCH_ENTRY_FORMAT)
a = [(e, e * 10) for e in range(200)]
b = [(1, 1)]
i = 0
while True:
    cp.write(a if i % 2 else b)
    i += 1
    if i % 50 == 0:
        print(i, flush=True)
"""


def test_kill_9_during_checkpoint_writes_leaves_a_whole_file(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    proc = subprocess.Popen([sys.executable, "-c", _WRITE_FOREVER, str(path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if int(line) >= 300:
                break
    finally:
        proc.kill()
        proc.wait(30)
    got = CheckpointFile(str(path), EPOCH_ENTRY_FORMAT).read()
    assert got in ([(1, 1)], [(e, e * 10) for e in range(200)])


# -- leader-epoch cache ----------------------------------------------------------------------------


def test_epoch_cache_assign_is_monotonic_and_persisted(tmp_path: Path) -> None:
    c = LeaderEpochCache(str(tmp_path))  # a folder means the checkpoint inside it
    assert c.path == str(tmp_path / LEADER_EPOCH_CHECKPOINT)
    assert (c.latest_epoch, c.latest_start_offset, c.entries()) == (-1, -1, [])
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT).exists()  # nothing written without a change
    assert c.assign(0, 0) and c.assign(2, 10)
    assert not c.assign(2, 20)  # not a newer epoch
    assert not c.assign(1, 30)
    assert not c.assign(3, 5)  # would start before the latest epoch
    assert not c.assign(-1, 40)  # NO_PARTITION_LEADER_EPOCH is never stored
    assert c.assign(3, 10)  # epoch 2 wrote nothing: replaced
    assert c.assign(5, 12)
    assert c.entries() == [EpochEntry(0, 0), EpochEntry(3, 10), EpochEntry(5, 12)]
    assert (c.latest_epoch, c.latest_start_offset) == (5, 12)
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n3 10\n5 12\n"
    assert LeaderEpochCache(c.path).entries() == c.entries()


def test_epoch_cache_refuses_a_non_monotonic_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_text("0\n2\n3 10\n2 20\n")
    with pytest.raises(StorageError, match="not increasing"):
        LeaderEpochCache(str(path))


def test_end_offset_for_kip101_and_kip279_cases(tmp_path: Path) -> None:
    c = LeaderEpochCache(str(tmp_path))
    leo = 25
    assert c.end_offset_for(0, leo) == (-1, -1)  # empty cache
    for epoch, start in ((1, 0), (2, 10), (4, 17)):
        c.assign(epoch, start)
    assert c.end_offset_for(4, leo) == (4, leo)  # the latest epoch ends at the log end
    assert c.end_offset_for(5, leo) == (-1, -1)  # newer than anything known: UNDEFINED
    assert c.end_offset_for(2, leo) == (2, 17)  # ends where the next epoch starts
    assert c.end_offset_for(1, leo) == (1, 10)
    # An epoch this leader never saw: the largest known one below it, ending where the next
    # known one starts (KIP-279: the follower then truncates to the smaller of both answers).
    assert c.end_offset_for(3, leo) == (2, 17)
    assert c.end_offset_for(0, leo) == (-1, -1)  # below every known epoch
    assert c.end_offset_for(-1, leo) == (-1, -1)  # a follower without epochs


def test_epoch_cache_truncation_from_both_ends(tmp_path: Path) -> None:
    c = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((1, 0), (2, 10), (4, 17), (6, 30)):
        c.assign(epoch, start)
    assert not c.truncate_from_end(31)
    assert c.truncate_from_end(30)  # entries starting at or after the end go
    assert c.entries() == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 17)]
    assert not c.truncate_from_start(0)
    assert c.truncate_from_start(12)  # the epoch covering the new start now starts there
    assert c.entries() == [EpochEntry(2, 12), EpochEntry(4, 17)]
    assert not c.truncate_from_start(12)
    assert c.truncate_from_start(17)  # an entry starting exactly there is kept as it is
    assert c.entries() == [EpochEntry(4, 17)]
    assert c.truncate_from_start(20) and c.entries() == [EpochEntry(4, 20)]
    assert LeaderEpochCache(c.path).entries() == [EpochEntry(4, 20)]
    assert c.truncate_from_end(0) and c.entries() == [] and c.latest_epoch == -1
    assert not c.clear()
    c.assign(7, 3)
    assert c.clear() and LeaderEpochCache(c.path).entries() == []


# -- helpers for the log tests ---------------------------------------------------------------------


def _offsets_read(log: Log, start: int, max_offset: int | None, max_bytes: int = 1 << 20) -> list[int]:
    """Every record offset a consumer reading from ``start`` with ``max_offset`` gets, checking
    that each slice ends on an entry boundary (no partial entry when the budget is not hit)."""
    out: list[int] = []
    offset = start
    while True:
        sl, magic = log.read(offset, max_bytes, min_one_entry=True, max_offset=max_offset)
        if sl is None:
            assert magic == -1
            return out
        data = sl.read()
        _, valid = records.scan_entries(data)
        assert valid == len(data), "a read limited by max_offset must end on an entry boundary"
        recs = [r for r in records.decode_records(data) if r.offset >= offset]
        assert recs, f"a slice at {offset} without records"
        out += [r.offset for r in recs]
        offset = recs[-1].offset + 1


def _entry_ends(log: Log) -> list[int]:
    """The offset after each top-level entry (where a high watermark may sit), in order."""
    ends = []
    for seg in log.segments:
        for h in walk_headers(seg.store, 0, seg.size):
            ends.append(h.last_offset + 1)
    return ends


def _mixed_log(d: Path, **cfg: int) -> Log:
    """v2 batches of 3, v1 messages, a v1 gzip wrapper of 3 and a v0 gzip wrapper of 2, over
    several segments (small segment_bytes / index interval)."""
    log = Log(str(d), LogConfig(segment_bytes=cfg.get("segment_bytes", 600), index_interval_bytes=cfg.get("index_interval_bytes", 100)))
    for i in range(4):
        log.append(encode([(None, b"b%d-%d" % (i, j) + b"." * 40) for j in range(3)]), leader_epoch=0)
        log.append(encode([(None, b"m%d" % i + b"." * 40)], magic=1), leader_epoch=0)
        log.append(encode([(None, b"g%d-%d" % (i, j)) for j in range(3)], magic=1, codec=records.GZIP), leader_epoch=0)
        log.append(encode([(None, b"z%d-%d" % (i, j)) for j in range(2)], magic=0, codec=records.GZIP), leader_epoch=0)
    return log


# -- high watermark ----------------------------------------------------------------------------------


def test_high_watermark_moves_forward_only_and_is_clamped(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    assert log.high_watermark == 0
    for i in range(10):
        log.append(encode([(None, b"v%d" % i + b"." * 100)]), leader_epoch=1)
    # An epoch-aware append leaves the high watermark to the replica manager.
    assert (log.high_watermark, log.log_end_offset) == (0, 10)
    assert log.update_high_watermark(4) and log.high_watermark == 4
    assert not log.update_high_watermark(3) and log.high_watermark == 4
    assert not log.update_high_watermark(4)
    assert log.update_high_watermark(1_000) and log.high_watermark == 10  # clamped to the end
    assert not log.update_high_watermark(11)
    log.set_high_watermark(2)  # backwards, as after a restart
    assert log.high_watermark == 2
    log.set_high_watermark(-5)
    assert log.high_watermark == 0
    # Retention moves the log start up; the high watermark is never below it.
    log.set_high_watermark(10)
    assert log.apply_retention(wall_ms() + 10**9) > 0
    start = log.log_start_offset
    assert start > 0
    log.set_high_watermark(0)
    assert log.high_watermark == start
    # Without a leader epoch the log is its own only replica: the HW follows the end.
    log.append(encode([(None, b"solo")]))
    assert log.high_watermark == log.log_end_offset == 11
    log.close()
    # A restart alone does not know the high watermark: the log start until it is restored.
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=400))
    assert again.high_watermark == again.log_start_offset == start


def test_consumer_reads_stop_at_the_high_watermark_in_every_format(tmp_path: Path) -> None:
    log = _mixed_log(tmp_path / "t-0")
    assert len(log.segments) > 3
    leo = log.log_end_offset
    assert leo == 4 * (3 + 1 + 3 + 2)
    ends = _entry_ends(log)
    assert ends[-1] == leo
    bases = {s.base_offset for s in log.segments}
    assert bases & set(ends), "some high watermark must fall on a segment boundary"
    for hw in [0, *ends]:
        log.set_high_watermark(hw)
        assert log.high_watermark == hw
        # through the cached mark (max_offset is the current HW) and from scratch (another HW)
        assert _offsets_read(log, 0, hw) == list(range(hw))
        assert _offsets_read(log, 0, hw, max_bytes=1) == list(range(hw))
        for other in (0, *ends[::5]):
            assert _offsets_read(log, 0, other) == list(range(other))
        # at or past the high watermark (but within the log): nothing yet, not an error
        assert log.read(hw, 1 << 20, max_offset=hw) == (None, -1)
        if hw < leo:
            assert log.read(leo, 1 << 20, max_offset=hw) == (None, -1)
    # without max_offset (a follower's fetch) everything up to the log end
    log.set_high_watermark(0)
    assert _offsets_read(log, 0, None) == list(range(leo))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(leo + 1, 100, max_offset=leo)


def test_high_watermark_read_follows_appends_rolls_and_the_mark(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=500, index_interval_bytes=0))
    for i in range(30):
        log.append(encode([(None, b"%02d" % i + b"x" * 120)]), leader_epoch=2)
        # the single-replica leader's step: HW = LEO after each append
        assert log.update_high_watermark(log.log_end_offset)
        assert _offsets_read(log, max(0, i - 3), log.high_watermark) == list(range(max(0, i - 3), i + 1))
    assert len(log.segments) > 5
    hw = log.high_watermark
    # Appends past the HW are invisible to consumers until it moves.
    log.append(encode([(None, b"pending")]), leader_epoch=2)
    assert _offsets_read(log, 25, hw) == list(range(25, 30))
    # The HW exactly at a segment boundary: the earlier segment is read whole, none of the next.
    boundary = log.segments[-2].base_offset
    log.set_high_watermark(boundary)
    assert _offsets_read(log, 0, boundary) == list(range(boundary))
    assert log.read(boundary, 100, max_offset=boundary) == (None, -1)


# -- truncation ------------------------------------------------------------------------------------


def _values(log: Log, offset: int = 0) -> list[tuple[int, bytes | None]]:
    out = []
    while offset < log.log_end_offset:
        sl, _ = log.read(offset, 1 << 20, min_one_entry=True)
        assert sl is not None
        recs = [r for r in records.decode_records(sl.read()) if r.offset >= offset]
        out += [(r.offset, r.value) for r in recs]
        offset = recs[-1].offset + 1
    return out


def _log_files(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.endswith(".log"))


@pytest.mark.parametrize("where", ["middle", "inside_batch", "inside_gzip_wrapper", "segment_boundary", "zero"])
def test_truncate_to_then_append_and_restart(tmp_path: Path, where: str) -> None:
    d = tmp_path / "t-0"
    log = _mixed_log(d)
    log.set_high_watermark(log.log_end_offset)
    before = _values(log)
    entries = [(h, seg) for seg in log.segments for h in walk_headers(seg.store, 0, seg.size)]
    starts = [0] + [h.last_offset + 1 for h, _ in entries][:-1]
    # (offset to truncate to, expected log end)
    if where == "middle":
        k = len(entries) // 2 + 1
        while entries[k][1].base_offset == starts[k]:
            k += 1  # an entry that does not open its segment
        target, expect = starts[k], starts[k]
    elif where == "inside_batch":
        k = next(i for i, (h, seg) in enumerate(entries) if h.magic == 2 and i > 4)
        target, expect = starts[k] + 1, starts[k]
    elif where == "inside_gzip_wrapper":
        k = next(i for i, (h, seg) in enumerate(entries) if h.magic == 1 and h.last_offset > starts[i] and i > 4)
        target, expect = starts[k] + 2, starts[k]
    elif where == "segment_boundary":
        target = expect = log.segments[2].base_offset
    else:
        target = expect = 0
    # (the legacy entries of the mixed log left the epoch cache empty)
    assert log.leader_epochs.entries() == []
    log.leader_epochs.assign(5, 0)
    log.leader_epochs.assign(6, expect + 1)  # an epoch starting after the cut
    log.truncate_to(target)
    assert log.log_end_offset == expect
    assert log.high_watermark == expect  # clamped
    assert log.leader_epochs.entries() == ([EpochEntry(5, 0)] if expect else [])
    assert _values(log) == [v for v in before if v[0] < expect]
    # segments past the cut are gone; the last may be an empty one starting at the new end
    assert all(s.base_offset < expect for s in log.segments[:-1])
    assert log.segments[-1].base_offset < expect or log.segments[-1].size == 0
    assert len(_log_files(d)) == len(log.segments)
    assert log.segments[-1].next_offset == expect
    if where == "zero":
        assert _log_files(d) == ["00000000000000000000.log"] and log.size_bytes == 0
    # appends continue from the new log end, and every offset is readable through the index
    info = log.append(encode([(None, b"after-%d" % j) for j in range(3)]), leader_epoch=7)
    assert info.first_offset == expect
    log.append(encode([(None, b"after-more")], magic=1))
    after = _values(log)
    assert after[-4:] == [(expect, b"after-0"), (expect + 1, b"after-1"), (expect + 2, b"after-2"), (expect + 3, b"after-more")]
    for off in range(0, log.log_end_offset, 3):
        sl, _ = log.read(off, 200, min_one_entry=True)
        assert sl is not None and any(r.offset == off for r in records.decode_records(sl.read()))
    # a restart keeps the truncated state: nothing cut, same records, epochs as persisted
    epochs = log.leader_epochs.entries()
    log.close()
    again = Log(str(d), LogConfig(segment_bytes=600, index_interval_bytes=100))
    assert again.recovered_bytes_cut == 0
    assert _values(again) == after
    assert again.leader_epochs.entries() == epochs


def test_truncate_below_log_start_and_fully(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(str(d), LogConfig(segment_bytes=300))
    for i in range(12):
        log.append(encode([(None, b"%02d" % i + b"y" * 100)]), leader_epoch=3)
    log.truncate_to(50)  # past the end: nothing happens
    assert log.log_end_offset == 12
    log.truncate_fully_and_start_at(40)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (40, 40, 40)
    assert _log_files(d) == [f"{40:020d}.log"]
    assert log.leader_epochs.entries() == []
    assert log.append(encode([(None, b"x")]), leader_epoch=4).first_offset == 40
    assert log.leader_epochs.entries() == [EpochEntry(4, 40)]
    log.truncate_to(10)  # below the log start: the log starts over there
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    assert log.read(10, 100) == (None, -1)
    with pytest.raises(ValueError):
        log.truncate_to(-1)


def test_lockless_readers_survive_truncation_appends_and_rolls(tmp_path: Path) -> None:
    """Readers take no lock: while the writer appends, moves the HW, rolls and truncates, every
    read returns entries, nothing, an out-of-range error (the log moved under it) or a short
    read of a segment cut under it (documented); nothing else."""
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=700, index_interval_bytes=150))
    stop = threading.Event()
    problems: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            hw, leo = log.high_watermark, log.log_end_offset
            for offset, bound in ((max(0, hw - 5), hw), (max(0, leo - 7), None)):
                try:
                    sl, _ = log.read(offset, 400, max_offset=bound)
                    if sl is None:
                        continue
                    data = sl.read()
                except OffsetOutOfRangeError:
                    continue
                except StorageError as e:
                    if "short read" not in str(e):
                        problems.append(e)
                    continue
                except BaseException as e:  # noqa: BLE001 - anything else is a bug
                    problems.append(e)
                    continue
                # (the bytes themselves may belong to a tail cut and rewritten since: not checked)
                records.scan_entries(data)
                reads[0] += 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for round_ in range(40):
            for i in range(12):
                log.append(encode([(None, b"r%d-%d" % (round_, i) + b"." * 60)] * (1 + i % 3)), leader_epoch=round_)
                if i % 2:
                    log.update_high_watermark(log.log_end_offset - 1)
            log.truncate_to(max(0, log.log_end_offset - 9 - round_ % 7))
            if round_ % 10 == 9:
                log.truncate_fully_and_start_at(log.log_end_offset)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not problems, problems[:3]
    assert reads[0] > 50
    assert _offsets_read(log, log.log_start_offset, None) == list(range(log.log_start_offset, log.log_end_offset))


# -- follower appends ------------------------------------------------------------------------------


def _replicate(leader: Log, follower: Log, max_bytes: int) -> int:
    """Fetch-and-append until the follower has the leader's log end; returns the rounds."""
    rounds = 0
    while follower.log_end_offset < leader.log_end_offset:
        sl, _ = leader.read(follower.log_end_offset, max_bytes)
        assert sl is not None
        info = follower.append_as_follower(sl.read())
        assert info.num_records > 0 or max_bytes < 1 << 20
        rounds += 1
        assert rounds < 10_000
    return rounds


def test_follower_copies_the_leader_byte_for_byte_with_partial_fetches(tmp_path: Path) -> None:
    leader = _mixed_log(tmp_path / "l-0")
    leader.append(encode([(None, b"e3-%d" % j) for j in range(4)]), leader_epoch=3)
    follower = Log(str(tmp_path / "f-0"), LogConfig(segment_bytes=450, index_interval_bytes=100))
    # A small fetch size cuts most responses inside an entry: the partial tail is ignored.
    rounds = _replicate(leader, follower, max_bytes=250)
    assert rounds > 5
    assert follower.log_end_offset == leader.log_end_offset
    assert _values(follower) == _values(leader)
    assert b"".join(s.store.read(0, s.size) for s in follower.segments) == b"".join(s.store.read(0, s.size) for s in leader.segments)
    assert all(s.size <= 450 for s in follower.segments) and len(follower.segments) > 3
    # the follower learned the epochs from the batches (the v0/v1 entries carry none)
    assert follower.leader_epochs.entries() == leader.leader_epochs.entries() == [EpochEntry(3, 36)]
    # a follower append never moves the high watermark
    assert follower.high_watermark == 0
    # one big chunk works the same and rolls segments between entries
    other = Log(str(tmp_path / "g-0"), LogConfig(segment_bytes=450, index_interval_bytes=0))
    info = other.append_as_follower(b"".join(s.store.read(0, s.size) for s in leader.segments))
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 39, 40)
    assert _values(other) == _values(leader) and len(other.segments) > 3
    for off in range(other.log_end_offset):
        sl, _ = other.read(off, 100, min_one_entry=True)
        assert sl is not None and any(r.offset == off for r in records.decode_records(sl.read()))


def test_follower_append_refuses_gaps_and_corruption_and_writes_nothing(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "l-0"), LogConfig())
    for i in range(6):
        leader.append(encode([(None, b"v%d" % i), (None, b"w%d" % i)]), leader_epoch=1)
    follower = Log(str(tmp_path / "f-0"), LogConfig())
    sl, _ = leader.read(0, 1 << 20)
    assert sl is not None
    data = sl.read()
    entry = 12 + int.from_bytes(data[8:12], "big")
    follower.append_as_follower(data[:entry])  # offsets 0..1
    assert follower.log_end_offset == 2
    size = follower.size_bytes
    # a gap: the chunk starts at 4 while the follower ends at 2
    with pytest.raises(CorruptRecordError, match="starts at offset 4, expected 2"):
        follower.append_as_follower(data[2 * entry :])
    # a hole inside the chunk
    with pytest.raises(CorruptRecordError, match="starts at offset 6, expected 4"):
        follower.append_as_follower(data[entry : 2 * entry] + data[3 * entry :])
    # a flipped byte inside a whole entry: CRC mismatch
    bad = bytearray(data[entry:])
    bad[entry + 40] ^= 0x01
    with pytest.raises(CorruptRecordError, match="corrupt entry at byte"):
        follower.append_as_follower(bytes(bad))
    # an entry whose size cannot be right
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(data[entry : entry + 8] + (3).to_bytes(4, "big") + data[entry + 12 :])
    assert follower.size_bytes == size and follower.log_end_offset == 2
    assert follower.leader_epochs.entries() == [EpochEntry(1, 0)]
    # nothing whole (a fetch smaller than one entry) appends nothing
    info = follower.append_as_follower(data[entry : entry + 30])
    assert (info.num_records, info.size, follower.log_end_offset) == (0, 0, 2)
    info = follower.append_as_follower(data[entry:-5])
    assert (info.first_offset, info.last_offset, info.num_records) == (2, 9, 8)
    assert info.size == len(data) - entry - entry


def test_compacted_follower_accepts_the_leaders_compaction_gaps(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=600, compact=True, retention_ms=None)
    leader = Log(str(tmp_path / "__consumer_offsets-0"), cfg)
    for i in range(40):
        leader.append(encode([(b"key-%d" % (i % 4), b"v%d" % i)]))
    assert leader.compact() > 20
    follower = Log(str(tmp_path / "f-0"), cfg)
    _replicate(leader, follower, max_bytes=1 << 20)
    assert _values(follower) == _values(leader)
    plain = Log(str(tmp_path / "p-0"), LogConfig())
    sl, _ = leader.read(0, 1 << 20)
    assert sl is not None
    with pytest.raises(CorruptRecordError, match="expected"):
        plain.append_as_follower(sl.read())


# -- epochs: stamping and learning -----------------------------------------------------------------


def _batch_epochs(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, magic, partitionLeaderEpoch or None) of every stored entry."""
    out = []
    for seg in log.segments:
        for h in walk_headers(seg.store, 0, seg.size):
            head = seg.store.read(h.position, 16)
            base = int.from_bytes(head[:8], "big")
            out.append((base, h.magic, int.from_bytes(head[12:16], "big", signed=True) if h.magic == 2 else None))
    return out


def test_leader_append_stamps_the_epoch_and_the_cache_learns_it(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = Log(str(d), LogConfig())
    log.append(encode([(None, b"a"), (None, b"b")]))  # no epoch: the producer's -1 stays
    two = encode([(None, b"c")]) + encode([(None, b"d"), (None, b"e")])
    log.append(two, leader_epoch=3)  # two batches, fast path
    log.append(encode([(None, b"f")]), leader_epoch=3)
    log.append(encode([(None, b"g")]), leader_epoch=5)
    assert _batch_epochs(log) == [(0, 2, -1), (2, 2, 3), (3, 2, 3), (5, 2, 3), (6, 2, 5)]
    assert log.leader_epochs.entries() == [EpochEntry(3, 2), EpochEntry(5, 6)]
    # the stamped batches still pass their CRC (the epoch is outside it) and decode
    sl, _ = log.read(0, 1 << 20)
    assert sl is not None
    entries, valid = records.scan_entries(sl.read(), verify_crc=True)
    assert valid == len(sl) and len(entries) == 5
    assert [r.value for r in records.decode_records(sl.read())] == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    # an older epoch is stamped but does not move the cache back
    log.append(encode([(None, b"h")]), leader_epoch=4)
    assert log.leader_epochs.entries() == [EpochEntry(3, 2), EpochEntry(5, 6)]
    # persisted; on load, entries at or after the recovered log end are dropped
    log.append(encode([(None, b"i")]), leader_epoch=9)
    assert log.leader_epochs.latest_epoch == 9
    log.close()
    assert (d / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n3 2\n5 6\n9 8\n"
    seg = d / "00000000000000000000.log"
    raw = seg.read_bytes()
    seg.write_bytes(raw[:-5])  # a torn last batch: recovery cuts offset 8
    (d / (LEADER_EPOCH_CHECKPOINT + ".tmp")).write_text("0\n1\n99 99\n")  # an unfinished write
    again = Log(str(d), LogConfig())
    assert again.log_end_offset == 8
    assert again.leader_epochs.entries() == [EpochEntry(3, 2), EpochEntry(5, 6)]
    assert sorted(os.listdir(d)) == ["00000000000000000000.index", "00000000000000000000.log", LEADER_EPOCH_CHECKPOINT]


def test_legacy_entries_carry_no_epoch_and_clear_the_cache(tmp_path: Path) -> None:
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(encode([(None, b"a")]), leader_epoch=1)
    assert log.leader_epochs.entries() == [EpochEntry(1, 0)]
    # slow path: a v1 message then a v2 batch in one payload, with a new epoch
    mixed = encode([(None, b"b")], magic=1) + encode([(None, b"c"), (None, b"d")])
    log.append(mixed, leader_epoch=2)
    assert _batch_epochs(log) == [(0, 2, 1), (1, 1, None), (2, 2, 2)]
    # the v1 entry made the old epochs unusable; the v2 batch after it starts epoch 2
    assert log.leader_epochs.entries() == [EpochEntry(2, 2)]
    log.append(encode([(None, b"e")], magic=0), leader_epoch=2)
    assert log.leader_epochs.entries() == []
    # a follower applies the same rule to what it fetches
    follower = Log(str(tmp_path / "f-0"), LogConfig())
    sl, _ = log.read(0, 1 << 20)
    assert sl is not None
    follower.append_as_follower(sl.read())
    assert follower.leader_epochs.entries() == [] and _values(follower) == _values(log)
    log.append(encode([(None, b"f")]), leader_epoch=3)
    sl, _ = log.read(follower.log_end_offset, 1 << 20)
    assert sl is not None
    follower.append_as_follower(sl.read())
    assert follower.leader_epochs.entries() == log.leader_epochs.entries() == [EpochEntry(3, 5)]


def test_only_the_epoch_checkpoint_may_join_the_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    Log(str(d), LogConfig()).append(encode([(None, b"x")]), leader_epoch=0)
    assert (d / LEADER_EPOCH_CHECKPOINT).exists()
    (d / "leader-epoch-checkpoint.bak").write_text("0\n0\n")
    with pytest.raises(StorageError, match="unexpected file"):
        Log(str(d), LogConfig())
    os.unlink(d / "leader-epoch-checkpoint.bak")
    (d / LEADER_EPOCH_CHECKPOINT).write_text("0\n2\n1 0\n")
    with pytest.raises(StorageError, match="line 4"):
        Log(str(d), LogConfig())


# -- LogManager: high-watermark checkpoint and deletion ----------------------------------------------


def test_log_manager_checkpoints_and_restores_high_watermarks(tmp_path: Path) -> None:
    m = LogManager(str(tmp_path), LogConfig())
    for topic, part, n in (("a", 0, 5), ("a", 1, 3), ("b.x", 0, 7)):
        lg = m.get_or_create(topic, part)
        for i in range(n):
            lg.append(encode([(None, b"%d" % i)]), leader_epoch=0)
    m.get_or_create("a", 0).update_high_watermark(4)
    m.get_or_create("b.x", 0).update_high_watermark(7)
    m.checkpoint_high_watermarks()
    path = tmp_path / HW_CHECKPOINT
    assert path.read_text() == "0\n3\na 0 4\na 1 0\nb.x 0 7\n"
    m.get_or_create("a", 1).update_high_watermark(2)
    m.close()  # a clean shutdown checkpoints too
    assert path.read_text() == "0\n3\na 0 4\na 1 2\nb.x 0 7\n"
    m.close()  # a second close must not overwrite it with nothing
    assert path.read_text() == "0\n3\na 0 4\na 1 2\nb.x 0 7\n"

    # restart: each named log gets its high watermark back, clamped to what recovery kept
    path.write_text("0\n4\na 0 4\na 1 2\nb.x 0 900\ngone 3 10\n")
    m2 = LogManager(str(tmp_path), LogConfig())
    hws = {tp: lg.high_watermark for tp, lg in m2.all_logs()}
    assert hws == {("a", 0): 4, ("a", 1): 2, ("b.x", 0): 7}
    m2.close()
    # a missing checkpoint: every HW stays at its default (the log start)
    os.unlink(path)
    m3 = LogManager(str(tmp_path), LogConfig())
    assert {lg.high_watermark for _, lg in m3.all_logs()} == {0}
    m3.close()
    path.write_text("0\n1\na zero 4\n")
    with pytest.raises(StorageError, match=f"{HW_CHECKPOINT}, line 3"):
        LogManager(str(tmp_path), LogConfig())


def test_log_manager_delete_log(tmp_path: Path) -> None:
    m = LogManager(str(tmp_path), LogConfig())
    lg = m.get_or_create("t", 0)
    lg.append(encode([(None, b"x" * 100)]), leader_epoch=1)
    sl, _ = lg.read(0, 1 << 20)  # a fetch still holding the segment
    assert sl is not None
    m.get_or_create("t", 1)
    assert m.delete_log("t", 0)
    assert not m.delete_log("t", 0)
    assert m.get("t", 0) is None and sorted(os.listdir(tmp_path)) == ["t-1"]
    assert records.decode_records(sl.read())[0].value == b"x" * 100  # still readable
    with pytest.raises(StorageError, match="deleted"):
        lg.append(encode([(None, b"late")]))
    # a deletion interrupted by a crash (renamed, not yet removed) is finished at start-up
    m.close()
    os.rename(tmp_path / "t-1", tmp_path / ("t-1." + "ab" * 16 + "-delete"))
    m2 = LogManager(str(tmp_path), LogConfig())
    assert m2.all_logs() == [] and sorted(os.listdir(tmp_path)) == [HW_CHECKPOINT]
    m2.close()
