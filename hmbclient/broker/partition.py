"""Partition: one topic-partition's replica on this broker, as leader or follower.

Kafka 0.8.2 replication (with KIP-101 leader epochs), for the partitions this broker hosts:

* The controller makes a replica LEADER or FOLLOWER with LeaderAndIsr (leader, leader epoch,
  ISR, assigned replicas, the state znode's version). A request with an older leader epoch than
  the one held is ignored (stale); the state changes only in :meth:`Partition._set_state`.
* LEADER: appends stamp the leader epoch into every RecordBatch v2 and record where the epoch
  started; every follower fetch reports the follower's log end offset (the fetch offset). The
  high watermark is the minimum LEO of the ISR (leader included) and never goes backwards.
  A follower not caught up for ``replica.lag.time.max.ms`` leaves the ISR; a follower whose LEO
  reaches the HW (and the start of the current epoch) joins it. The leader writes each ISR
  change to the state znode itself, conditional on the version it holds (a conflict means the
  controller moved on: the leader keeps its ISR and waits for the controller's LeaderAndIsr).
* FOLLOWER: the replica fetcher appends what the leader has, truncating first by leader epoch;
  its HW is the leader's HW capped at its own LEO.
* DeleteRecords (LEADER): ``delete_records_on_leader`` moves the log start (its cases); the
  partition's low watermark (``low_watermark``, Kafka's ``lowWatermarkIfLeader``) is the
  smallest log start of the leader and of the followers on live brokers, as each follower's
  Fetch v5+ reports it. A FOLLOWER takes the leader's log start from the Fetch answers
  (``follower_log_start``), capped at its own high watermark.
* OFFLINE: stopped (StopReplica, or the broker is shutting down).

The rules that decide (HW, ISR shrink and expand, caught-up bookkeeping) are pure functions at
the top of this module so that tests call them without a broker.

Transitions (anything else is a bug and raises)::

    OFFLINE  -> LEADER | FOLLOWER          (LeaderAndIsr)
    LEADER   -> LEADER | FOLLOWER | OFFLINE (new epoch, leadership moved, StopReplica)
    FOLLOWER -> LEADER | FOLLOWER | OFFLINE
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hmbclient.clock import monotonic_ms
from hmbclient.errors import ErrorCode

if TYPE_CHECKING:
    from hmbclient.broker.log.log import AppendInfo, Log

__all__ = [
    "Role",
    "Partition",
    "FollowerProgress",
    "IsrWriter",
    "high_watermark",
    "out_of_sync_replicas",
    "can_join_isr",
    "low_watermark",
]

log = logging.getLogger("hmbclient.broker.partition")


class Role(enum.Enum):
    OFFLINE = "offline"
    LEADER = "leader"
    FOLLOWER = "follower"


_TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.OFFLINE: frozenset({Role.LEADER, Role.FOLLOWER, Role.OFFLINE}),
    Role.LEADER: frozenset({Role.LEADER, Role.FOLLOWER, Role.OFFLINE}),
    Role.FOLLOWER: frozenset({Role.LEADER, Role.FOLLOWER, Role.OFFLINE}),
}


@dataclass
class FollowerProgress:
    """What the leader knows of one follower (updated on every fetch it serves)."""

    leo: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0
    #: the follower's log start as its last fetch said (Fetch v5+); -1: not known yet
    log_start: int = -1

    def on_fetch(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """A fetch from ``fetch_offset`` read while the leader's LEO was ``leader_leo``.

        Case A: the follower asked from the leader's end: caught up now.
        Case B: it asked from at least the leader's end at its previous fetch: it was caught up
        as of that previous fetch (Kafka's rule, so a busy partition does not evict a follower
        that keeps up one fetch behind).
        """
        if fetch_offset >= leader_leo:  # Case A
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:  # Case B
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.leo = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms


# -- pure rules ---------------------------------------------------------------------------------
def high_watermark(leader_id: int, leader_leo: int, isr: Collection[int], followers: Mapping[int, FollowerProgress]) -> int:
    """The minimum log end offset over the ISR (a follower never heard from counts as 0)."""
    hw = leader_leo
    for r in isr:
        if r == leader_id:
            continue
        p = followers.get(r)
        leo = p.leo if p is not None and p.leo >= 0 else 0
        if leo < hw:
            hw = leo
    return hw


def out_of_sync_replicas(leader_id: int, isr: Collection[int], followers: Mapping[int, FollowerProgress], now_ms: int, lag_time_max_ms: int) -> set[int]:
    """ISR followers not caught up within ``lag_time_max_ms`` (the leader never is)."""
    out = set()
    for r in isr:
        if r == leader_id:
            continue
        p = followers.get(r)
        if p is None or now_ms - p.last_caught_up_ms > lag_time_max_ms:
            out.add(r)
    return out


def low_watermark(leader_log_start: int, followers: Mapping[int, FollowerProgress], alive: Collection[int]) -> int:
    """Kafka's ``lowWatermarkIfLeader``: the smallest log start of the leader and of every
    follower on a live broker (a follower not heard from yet counts as -1: unknown)."""
    lw = leader_log_start
    for r, p in followers.items():
        if r in alive and p.log_start < lw:
            lw = p.log_start
    return lw


def can_join_isr(progress: FollowerProgress, high_watermark_: int, epoch_start_offset: int) -> bool:
    """A follower rejoins the ISR once its LEO reaches the HW and the current epoch's start."""
    return progress.leo >= high_watermark_ and progress.leo >= epoch_start_offset


IsrWriter = Callable[[str, int, int, int, tuple[int, ...], int, int], "int | None"]
"""``(topic, partition, leader, leader_epoch, isr, controller_epoch, expected_zk_version)`` ->
the state znode's new version, or None when the version did not match (someone else wrote)."""


class Partition:
    """This broker's replica of one partition.

    Args:
        topic, partition: which one.
        broker_id: this broker.
        log: the local log.
        isr_writer: writes a leader's ISR change to the state znode (None: nowhere to write,
            e.g. tests of the pure paths).
        now_ms: the monotonic clock (injected by tests).
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log_: Log,
        isr_writer: IsrWriter | None = None,
        now_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log_
        self._isr_writer = isr_writer
        self._now_ms = now_ms
        self.lock = threading.RLock()
        self.role = Role.OFFLINE
        self.leader_id = -1
        self.leader_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.zk_version = 0
        self.controller_epoch = 0
        self.epoch_start_offset = 0
        self.followers: dict[int, FollowerProgress] = {}

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def _set_state(self, role: Role) -> None:
        if role not in _TRANSITIONS[self.role]:
            raise RuntimeError(f"{self.topic}-{self.partition}: illegal transition {self.role.value} -> {role.value}")
        self.role = role

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    # -- transitions (LeaderAndIsr / StopReplica) ------------------------------------------------
    def is_stale(self, leader_epoch: int) -> bool:
        """A LeaderAndIsr with an older epoch than ours (a delayed or replayed request)."""
        return leader_epoch < self.leader_epoch

    def make_leader(self, leader_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...], zk_version: int, controller_epoch: int) -> bool:
        """Become (or stay) the leader. Returns True if this broker was not leading before."""
        with self.lock:
            was_leader = self.role is Role.LEADER
            now = self._now_ms()
            self._set_state(Role.LEADER)
            new_epoch = leader_epoch != self.leader_epoch or not was_leader
            self.leader_id = self.broker_id
            self.leader_epoch = leader_epoch
            self.isr = tuple(isr)
            self.replicas = tuple(replicas)
            self.zk_version = zk_version
            self.controller_epoch = controller_epoch
            if new_epoch:
                self.epoch_start_offset = self.log.log_end_offset
                self.log.leader_epochs.assign(leader_epoch, self.epoch_start_offset)
                # ISR members get a full lag window to show up; others must catch up first.
                self.followers = {
                    r: FollowerProgress(last_caught_up_ms=now if r in self.isr else 0) for r in self.replicas if r != self.broker_id
                }
            else:
                for r in self.replicas:
                    if r != self.broker_id and r not in self.followers:
                        self.followers[r] = FollowerProgress()
            self._maybe_increment_hw()
            return not was_leader

    def make_follower(self, leader_id: int, leader_epoch: int, isr: tuple[int, ...], replicas: tuple[int, ...], zk_version: int, controller_epoch: int) -> bool:
        """Follow ``leader_id``. Returns True if the leader or epoch changed (the fetcher must
        truncate and restart this partition)."""
        with self.lock:
            changed = self.role is not Role.FOLLOWER or leader_id != self.leader_id or leader_epoch != self.leader_epoch
            self._set_state(Role.FOLLOWER)
            self.leader_id = leader_id
            self.leader_epoch = leader_epoch
            self.isr = tuple(isr)
            self.replicas = tuple(replicas)
            self.zk_version = zk_version
            self.controller_epoch = controller_epoch
            self.followers = {}
            return changed

    def make_offline(self) -> None:
        with self.lock:
            self._set_state(Role.OFFLINE)
            self.followers = {}

    # -- leader: appends --------------------------------------------------------------------------
    def append_as_leader(
        self, buf: bytes | bytearray | memoryview, required_acks: int, min_insync_replicas: int, origin: str = "client"
    ) -> tuple[int, AppendInfo | None]:
        """Append a producer's payload (``origin`` as ``Log.append``). Returns ``(error code,
        AppendInfo or None)``."""
        with self.lock:
            if self.role is not Role.LEADER:
                return ErrorCode.NOT_LEADER_FOR_PARTITION, None
            if required_acks == -1 and len(self.isr) < min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS, None
            info = self.log.append(buf, leader_epoch=self.leader_epoch, origin=origin)
            if len(self.isr) <= 1:
                self._maybe_increment_hw()
            return ErrorCode.NONE, info

    def _maybe_increment_hw(self) -> bool:
        if self.role is not Role.LEADER:
            return False
        hw = high_watermark(self.broker_id, self.log.log_end_offset, self.isr, self.followers)
        return self.log.update_high_watermark(hw)

    def acks_status(self, required_offset: int, min_insync_replicas: int) -> int | None:
        """For a waiting acks=-1 produce: None while the HW is below ``required_offset``, else
        its final code (NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, or NOT_LEADER if leadership
        moved)."""
        with self.lock:
            if self.role is not Role.LEADER:
                return ErrorCode.NOT_LEADER_FOR_PARTITION
            if self.log.high_watermark < required_offset:
                return None
            if len(self.isr) < min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE

    # -- leader: follower fetches ------------------------------------------------------------------
    def on_follower_fetch(self, replica_id: int, fetch_offset: int, leader_leo: int, log_start: int = -1) -> bool:
        """Record a follower's fetch (and its log start, Fetch v5+: ``log_start`` >= 0);
        expand the ISR and move the HW if it allows. Returns True if the HW moved (waiting
        produces and fetches should be checked)."""
        with self.lock:
            if self.role is not Role.LEADER:
                return False
            progress = self.followers.get(replica_id)
            if progress is None:
                return False
            progress.on_fetch(fetch_offset, leader_leo, self._now_ms())
            if log_start >= 0:
                progress.log_start = log_start
            if replica_id not in self.isr and can_join_isr(progress, self.log.high_watermark, self.epoch_start_offset):
                self._write_isr((*self.isr, replica_id), f"replica {replica_id} caught up")
            return self._maybe_increment_hw()

    def maybe_shrink_isr(self, lag_time_max_ms: int) -> bool:
        """Drop lagging followers from the ISR. Returns True if the HW moved."""
        with self.lock:
            if self.role is not Role.LEADER:
                return False
            lagging = out_of_sync_replicas(self.broker_id, self.isr, self.followers, self._now_ms(), lag_time_max_ms)
            if not lagging:
                return False
            self._write_isr(tuple(r for r in self.isr if r not in lagging), f"replicas {sorted(lagging)} not caught up in {lag_time_max_ms} ms")
            return self._maybe_increment_hw()

    def _write_isr(self, new_isr: tuple[int, ...], why: str) -> None:
        if self._isr_writer is None:
            self.isr = new_isr
            return
        version = self._isr_writer(self.topic, self.partition, self.broker_id, self.leader_epoch, new_isr, self.controller_epoch, self.zk_version)
        if version is None:
            log.info("%s-%d: ISR change to %s not written (the state znode moved on; waiting for the controller)", self.topic, self.partition, list(new_isr))
            return
        log.info("%s-%d: ISR %s -> %s (%s)", self.topic, self.partition, list(self.isr), list(new_isr), why)
        self.isr = new_isr
        self.zk_version = version

    # -- leader: DeleteRecords --------------------------------------------------------------------
    def delete_records_on_leader(self, offset: int) -> tuple[int, int]:
        """Move the log start to ``offset`` (-1: the high watermark), Kafka's
        ``deleteRecordsOnLeader``. Returns ``(error code, the offset asked for)``:
        (a) not the leader: NOT_LEADER_OR_FOLLOWER; (b) a ``compact``-only log:
        POLICY_VIOLATION; (c) below -1 or past the high watermark: OFFSET_OUT_OF_RANGE, nothing
        moves; (d) NONE, the start moved (or already was at or past it).

        Raises:
            StorageError: a segment file could not be removed.
        """
        with self.lock:
            if self.role is not Role.LEADER:  # (a)
                return ErrorCode.NOT_LEADER_FOR_PARTITION, -1
            if not self.log.config.delete:  # (b)
                return ErrorCode.POLICY_VIOLATION, -1
            target = self.log.high_watermark if offset == -1 else offset
            if target < 0 or target > self.log.high_watermark:  # (c)
                return ErrorCode.OFFSET_OUT_OF_RANGE, -1
            self.log.increment_log_start_offset(target)  # (d)
            return ErrorCode.NONE, target

    def low_watermark(self, alive: Collection[int]) -> int | None:
        """The partition's low watermark (``low_watermark``), None when not the leader."""
        with self.lock:
            if self.role is not Role.LEADER:
                return None
            return low_watermark(self.log.log_start_offset, self.followers, alive)

    # -- follower ---------------------------------------------------------------------------------
    def follower_high_watermark(self, leader_hw: int) -> None:
        with self.lock:
            if self.role is Role.FOLLOWER:
                self.log.update_high_watermark(min(leader_hw, self.log.log_end_offset))

    def follower_log_start(self, leader_log_start: int) -> bool:
        """Take the leader's log start (a Fetch v5+ answer), capped at this replica's high
        watermark (which the leader's start never passes once this replica has fetched from
        it). Returns True if the log start moved (the caller checkpoints it).

        Raises:
            StorageError: a segment file could not be removed.
        """
        with self.lock:
            if self.role is not Role.FOLLOWER or leader_log_start < 0:
                return False
            return self.log.increment_log_start_offset(min(leader_log_start, self.log.high_watermark))

    def __repr__(self) -> str:
        return (
            f"Partition({self.topic}-{self.partition} {self.role.value} leader={self.leader_id} "
            f"epoch={self.leader_epoch} isr={list(self.isr)} hw={self.log.high_watermark} leo={self.log.log_end_offset})"
        )
