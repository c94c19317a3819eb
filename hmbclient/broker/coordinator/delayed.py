"""The group coordinator's delayed operations (Kafka's DelayedJoin, InitialDelayedJoin,
DelayedHeartbeat, DelayedSync), kept in :class:`~hmbclient.broker.purgatory.Purgatory`\\ s whose
clock the coordinator injects.

Each op only asks the pure core (:mod:`.state`) whether it is done and, when it completes or
expires, calls back the coordinator (:class:`GroupOps`), which decides with the core and carries
out the effects. Every op runs ``try_complete`` under the coordinator's lock (the lock its
callers already hold when they re-check it), so the op's lock and the coordinator's are one and
cannot be taken in opposite orders.

DelayedJoin ``(group, epoch)`` completes when
  Case A: it is no longer the group's live delayed join (the group moved on or is Dead), or
  Case B: every known member has rejoined and no handed-out member id is still expected;
  and in any case after the rebalance timeout. On completion the join is completed
  (``state.complete_join``; a stale op does nothing).
InitialDelayedJoin never completes early (except when stale): an Empty group waits
  ``group.initial.rebalance.delay.ms`` for more members, again while members keep arriving
  (bounded by the rebalance timeout), then completes the join.
DelayedHeartbeat ``(group, member, due)`` completes without effect when the group is Dead, the
  member is gone, a newer delayed heartbeat watches the member, or (a pending member id) the id
  was used or dropped; on expiry the member's session is checked (``state.heartbeat_expired``).
DelayedSync ``(group, generation)`` completes without effect once every member of the
  generation sent SyncGroup or the group left that generation; on expiry the members still
  missing are removed and the group rebalances.
"""

from __future__ import annotations

import threading
from typing import Protocol

from hmbclient.broker.coordinator import state
from hmbclient.broker.coordinator.state import Group
from hmbclient.broker.purgatory import DelayedOperation

__all__ = ["GroupOps", "DelayedJoin", "InitialDelayedJoin", "DelayedHeartbeat", "DelayedSync"]


class GroupOps(Protocol):
    """What the delayed operations call back on the coordinator."""

    def on_join_done(self, group: Group, epoch: int) -> None: ...

    def on_initial_delay_done(self, group: Group, epoch: int, delay_ms: int, remaining_ms: int) -> None: ...

    def on_heartbeat_expired(self, group: Group, member_id: str, due_ms: int, pending: bool) -> None: ...

    def on_sync_expired(self, group: Group, generation_id: int) -> None: ...


class DelayedJoin(DelayedOperation):
    def __init__(self, ops: GroupOps, group: Group, epoch: int, delay_ms: int, lock: threading.RLock) -> None:
        super().__init__(delay_ms, lock=lock)
        self.ops = ops
        self.group = group
        self.epoch = epoch

    def try_complete(self) -> bool:
        if state.join_is_complete(self.group, self.epoch):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.ops.on_join_done(self.group, self.epoch)

    def __repr__(self) -> str:
        return f"DelayedJoin({self.group.group_id}, epoch {self.epoch})"


class InitialDelayedJoin(DelayedJoin):
    def __init__(self, ops: GroupOps, group: Group, epoch: int, delay_ms: int, remaining_ms: int, lock: threading.RLock) -> None:
        super().__init__(ops, group, epoch, delay_ms, lock)
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        if state.join_is_stale(self.group, self.epoch):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.ops.on_initial_delay_done(self.group, self.epoch, self.delay_ms, self.remaining_ms)

    def __repr__(self) -> str:
        return f"InitialDelayedJoin({self.group.group_id}, epoch {self.epoch}, {self.delay_ms} ms, {self.remaining_ms} ms left)"


class DelayedHeartbeat(DelayedOperation):
    def __init__(self, ops: GroupOps, group: Group, member_id: str, due_ms: int, delay_ms: int, pending: bool, lock: threading.RLock) -> None:
        super().__init__(delay_ms, lock=lock)
        self.ops = ops
        self.group = group
        self.member_id = member_id
        self.due_ms = due_ms
        self.pending = pending

    def try_complete(self) -> bool:
        if state.heartbeat_is_moot(self.group, self.member_id, self.due_ms, self.pending):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expire(self) -> None:
        self.ops.on_heartbeat_expired(self.group, self.member_id, self.due_ms, self.pending)

    def __repr__(self) -> str:
        return f"DelayedHeartbeat({self.group.group_id}, {self.member_id}, due {self.due_ms}{', pending' if self.pending else ''})"


class DelayedSync(DelayedOperation):
    def __init__(self, ops: GroupOps, group: Group, generation_id: int, delay_ms: int, lock: threading.RLock) -> None:
        super().__init__(delay_ms, lock=lock)
        self.ops = ops
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        if state.sync_is_complete(self.group, self.generation_id):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expire(self) -> None:
        self.ops.on_sync_expired(self.group, self.generation_id)

    def __repr__(self) -> str:
        return f"DelayedSync({self.group.group_id}, generation {self.generation_id})"
