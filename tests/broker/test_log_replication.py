"""What replication needs from the log, on real files: checkpoint files, the leader-epoch cache,
the high watermark (consumer reads stop there), follower appends, truncation, epoch stamping and
learning, and the LogManager's high-watermark checkpoint."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hmbclient.broker.log.checkpoint import EPOCH_ENTRY_FORMAT, HW_ENTRY_FORMAT, CheckpointFile
from hmbclient.broker.log.epochs import LEADER_EPOCH_CHECKPOINT, EpochEntry, LeaderEpochCache
from hmbclient.errors import StorageError

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
