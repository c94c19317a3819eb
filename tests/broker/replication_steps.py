"""Replication stepped by hand, for deterministic scenario tests of KIP-101 truncation.

A :class:`Replica` is one broker's replica of the partition ``TOPIC``-0: its own log folder, a
real ``LogManager`` (so a restart reopens the files and takes the high watermark from
``replication-offset-checkpoint``) and a real ``ReplicaManager`` that is never started (no
threads, no sockets; its clock is the test's :class:`Clock`). What the controller and the
replica fetcher threads would do is done here one step at a time, through the same code paths:

* ``lead`` / ``follow``: a LeaderAndIsr for this replica (``become_leader_or_follower``).
* :func:`truncate`: the fetcher's TRUNCATING state. A follower with no leader epoch goes to its
  high watermark; otherwise it asks the leader ``last_offset_for_leader_epoch(its latest epoch)``
  (the OffsetForLeaderEpoch answer) and truncates where ``replica_fetcher.truncation_offset``
  says (looked up at call time, so a test can hand in another rule to compute a baseline).
* :func:`fetch`: one Fetch with ``replica_id``: the leader's ``ReplicaManager.read`` reads from
  the follower's log end to the leader's and records the follower's progress (which may move
  the leader's HW and the ISR); the follower appends the bytes as they are and takes the HW of
  the response. ``response_lost=True`` stops after the leader's side (the follower crashed
  before the answer arrived). OFFSET_OUT_OF_RANGE and an append the follower refuses are
  handled as the fetcher does.
* ``crash`` / ``restart``: a hard stop (nothing checkpointed at exit; ``lose_unflushed_from``
  cuts the segment file as a power loss takes unflushed bytes) and a reopen from disk.

Invariant checked on every fetch: a follower's HW never exceeds its own LEO. (It may exceed a
new leader's HW for a while: it learned it from the previous leader, and the HW never moves
back.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from hmbclient.broker import replica_fetcher
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.log.segment import walk_headers
from hmbclient.broker.metadata import MetadataCache
from hmbclient.broker.partition import Partition, Role
from hmbclient.broker.replica_manager import PartitionState, ReplicaManager
from hmbclient.broker.results import FetchInfo
from hmbclient.errors import CorruptRecordError, ErrorCode
from hmbclient.protocol import records

__all__ = [
    "TOPIC",
    "Clock",
    "Replica",
    "TruncationRule",
    "hw_truncation",
    "truncate",
    "fetch",
    "TRUNCATE_AGAIN",
    "replicate",
    "batch",
    "contents",
    "keys",
    "batch_epochs",
    "raw_bytes",
]

TOPIC = "kip101"
_TS = 1_700_000_000_000  # fixed timestamps: identical inputs give identical bytes
_MAX = 1 << 20

TruncationRule = Callable[[replica_fetcher.EpochLookup, int, int, int, int], int]
"""``(follower epochs, follower LEO, follower HW, leader's epoch, leader's end offset)`` ->
where the follower truncates (a baseline rule; ``replica_fetcher.truncation_offset`` also says
whether its answer is final)."""


def hw_truncation(epochs: replica_fetcher.EpochLookup, log_end_offset: int, high_watermark: int, leader_epoch: int, leader_end_offset: int) -> int:
    """The rule before KIP-101: whatever the leader says, keep only what the follower knows to
    be committed (its own high watermark)."""
    return min(high_watermark, log_end_offset)


def batch(*names: str, magic: int = 2) -> bytes:
    """One produce payload of records keyed by ``names`` (value: the name and ``-value``)."""
    return records.encode_records(magic, records.NONE, [(n.encode(), n.encode() + b"-value", _TS) for n in names], timestamp_ms=_TS)


class Clock:
    """The monotonic clock of every replica manager in a test (milliseconds, moved by hand)."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Replica:
    """One broker's replica of ``TOPIC``-0 (see the module docstring)."""

    def __init__(self, broker_id: int, root: Path, clock: Clock, *, min_insync_replicas: int = 1, replica_lag_time_max_ms: int = 10_000) -> None:
        self.broker_id = broker_id
        self.dir = root / f"broker-{broker_id}"
        self.clock = clock
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.alive = False
        self.restart()

    def restart(self) -> None:
        """Open the log folder as a broker starting up does (recovery, epoch checkpoint, HW
        checkpoint), with a fresh replica manager that hosts no partition yet."""
        assert not self.alive, "crash() first"
        self.logs = LogManager(str(self.dir), LogConfig())
        self.rm = ReplicaManager(
            self.broker_id,
            MetadataCache(),
            self.logs,
            min_insync_replicas=self.min_insync_replicas,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            now_ms=self.clock,
        )
        self.alive = True

    def checkpoint(self) -> None:
        """The replica manager's periodic high-watermark checkpoint."""
        self.rm.checkpoint_high_watermarks()

    def crash(self, *, lose_unflushed_from: int | None = None) -> None:
        """Stop hard: nothing is checkpointed on the way out. With ``lose_unflushed_from``,
        the bytes of the entries from that offset on never reached the disk (a power loss)."""
        cut = None
        if lose_unflushed_from is not None:
            sl, _ = self.log.read(lose_unflushed_from, 1)
            assert sl is not None and len(self.log.segments) == 1
            cut = (self.log.segments[0].log_path, sl.position)
        for _, lg in self.logs.all_logs():
            lg.close()  # only to release the descriptors; the HW checkpoint is not written
        if cut is not None:
            os.truncate(*cut)
        self.alive = False

    # -- LeaderAndIsr --------------------------------------------------------------------------
    def _apply(self, leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...]) -> int:
        assert self.alive
        st = PartitionState(TOPIC, 0, leader, epoch, isr, replicas, zk_version=epoch, controller_epoch=1)
        return self.rm.become_leader_or_follower([st], {})[(TOPIC, 0)]

    def lead(self, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...]) -> int:
        return self._apply(self.broker_id, epoch, isr, replicas)

    def follow(self, leader: int, epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...]) -> int:
        return self._apply(leader, epoch, isr, replicas)

    # -- state ----------------------------------------------------------------------------------
    @property
    def partition(self) -> Partition:
        p = self.rm.partition(TOPIC, 0)
        assert p is not None, f"broker {self.broker_id} hosts no replica yet"
        return p

    @property
    def log(self) -> Log:
        lg = self.logs.get(TOPIC, 0)
        assert lg is not None
        return lg

    @property
    def hw(self) -> int:
        return self.log.high_watermark

    @property
    def leo(self) -> int:
        return self.log.log_end_offset

    def epochs(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: ``(epoch, start offset)`` pairs."""
        return [(e.epoch, e.start_offset) for e in self.log.leader_epochs.entries()]

    def produce(self, *names: str, acks: int = -1, magic: int = 2) -> tuple[int, int]:
        """Append one batch as the leader: ``(error code, offset after it)``; that offset is
        what an acks=-1 producer waits for the HW to reach (``acks_status``)."""
        code, info = self.partition.append_as_leader(batch(*names, magic=magic), acks, self.min_insync_replicas)
        return code, (info.last_offset + 1 if info is not None else -1)

    def acked(self, required_offset: int) -> int | None:
        """A waiting acks=-1 produce's status (None while the HW is below it)."""
        return self.partition.acks_status(required_offset, self.min_insync_replicas)

    def __repr__(self) -> str:
        return f"Replica({self.broker_id}, {self.partition if self.alive and self.rm.partition(TOPIC, 0) else 'down'})"


# -- the replica fetcher's two states, one step each ------------------------------------------------
def truncate(follower: Replica, leader: Replica, rule: TruncationRule | None = None) -> int:
    """The TRUNCATING state: returns the offset the follower truncated to (its LEO after).

    OffsetForLeaderEpoch rounds as ``replica_fetcher`` does them: ask for the latest epoch,
    truncate where ``truncation_offset`` says, and ask again while it says the step was not
    final (KIP-279). A baseline ``rule`` returns a plain offset and takes one round."""
    p = follower.partition
    assert p.role is Role.FOLLOWER and p.leader_id == leader.broker_id
    lg = p.log
    for _ in range(100):
        latest = lg.leader_epochs.latest_epoch
        final = True
        if latest < 0:
            # No epoch known (an empty log, or legacy entries only): the high watermark.
            target = lg.high_watermark
        else:
            code, epoch, end = leader.rm.last_offset_for_leader_epoch(TOPIC, 0, latest)
            assert code == ErrorCode.NONE, ErrorCode(code).name
            if rule is not None:
                target = rule(lg.leader_epochs, lg.log_end_offset, lg.high_watermark, epoch, end)
            else:
                target, final = replica_fetcher.truncation_offset(lg.leader_epochs, lg.log_end_offset, lg.high_watermark, epoch, end)
        if target < lg.log_end_offset:
            lg.truncate_to(target)
        if final:
            return lg.log_end_offset
    raise AssertionError("truncation did not settle in 100 rounds")


TRUNCATE_AGAIN = -1
"""What :func:`fetch` returns when the follower cannot append what the leader sent (the
fetcher then goes back to TRUNCATING)."""


def fetch(follower: Replica, leader: Replica, *, response_lost: bool = False) -> int:
    """One follower Fetch from the follower's LEO; returns how many records it appended, or
    ``TRUNCATE_AGAIN`` when the bytes do not continue its log (e.g. the leader's batch holding
    the fetch offset starts before it): the fetcher logs that and truncates again."""
    p = follower.partition
    assert p.role is Role.FOLLOWER and p.leader_id == leader.broker_id
    info = FetchInfo(TOPIC, 0, p.log.log_end_offset, _MAX)
    [res] = leader.rm.read([info], _MAX, 2, True, replica_id=follower.broker_id)
    if response_lost:
        return 0
    if res.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        # The fetcher's answer: past the leader's end -> truncate to it; before its start ->
        # start over there.
        ll = leader.log
        if p.log.log_end_offset > ll.log_end_offset:
            p.log.truncate_to(ll.log_end_offset)
        elif p.log.log_end_offset < ll.log_start_offset:
            p.log.truncate_fully_and_start_at(ll.log_start_offset)
        return 0
    assert res.error_code == ErrorCode.NONE, ErrorCode(res.error_code).name
    data = res.records if isinstance(res.records, bytes) else res.records.read()
    try:
        n = p.log.append_as_follower(data).num_records if data else 0
    except CorruptRecordError:
        return TRUNCATE_AGAIN
    p.follower_high_watermark(res.high_watermark)
    assert p.log.high_watermark <= p.log.log_end_offset
    return n


def replicate(leader: Replica, *followers: Replica, rule: TruncationRule | None = None) -> None:
    """Fetch until every follower has the leader's log and has told the leader so (one more
    fetch from the end, which moves the HW), then once more so each learns the final HW. A
    follower whose append fails truncates again first, as the fetcher does."""
    for f in followers:
        for _ in range(1000):
            n = fetch(f, leader)
            if n == TRUNCATE_AGAIN:
                truncate(f, leader, rule)
            elif n == 0:
                break
        else:
            raise AssertionError(f"{f} does not catch up with {leader}")
    for f in followers:
        fetch(f, leader)


# -- what a log holds ---------------------------------------------------------------------------------
class Held(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None


def contents(lg: Log) -> list[Held]:
    """Every record of the log: offset, key, value."""
    out: list[Held] = []
    for seg in lg.segments:
        if seg.size:
            out += [Held(r.offset, r.key, r.value) for r in records.decode_records(seg.store.read(0, seg.size))]
    return out


def keys(lg: Log) -> list[str]:
    return [r.key.decode() if r.key is not None else "" for r in contents(lg)]


def batch_epochs(lg: Log) -> list[tuple[int, int, int | None]]:
    """``(base offset, magic, partitionLeaderEpoch or None for v0/v1)`` of every stored entry."""
    out: list[tuple[int, int, int | None]] = []
    for seg in lg.segments:
        for h in walk_headers(seg.store, 0, seg.size):
            head = seg.store.read(h.position, 16)
            epoch = int.from_bytes(head[12:16], "big", signed=True) if h.magic >= 2 else None
            out.append((int.from_bytes(head[:8], "big"), h.magic, epoch))
    return out


def raw_bytes(lg: Log) -> bytes:
    return b"".join(seg.store.read(0, seg.size) for seg in lg.segments)
