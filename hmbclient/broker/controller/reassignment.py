"""Partition reassignment (KIP-455) as pure decisions: what the controller writes and sends when
a partition's replicas move, as Kafka's ZooKeeper-mode controller does it.

No sockets, no ZooKeeper, no threads. The controller's shell keeps, per partition being
reassigned, an :class:`Ongoing` (its *adding* and *removing* replicas, stored in the topic znode
as Kafka 2.4+ does: ``"adding_replicas"`` / ``"removing_replicas"``), and the partition's *full*
replica set in its assignment. For an ongoing reassignment:

* the *target* is the full set without the removing replicas, the *original* the full set
  without the adding ones; the full set is the target followed by the original replicas not in
  the target (Kafka's ``(targetReplicas ++ originReplicas).distinct``), so the preferred replica
  during the move is the target's first;
* adding = target - original, removing = original - target; both empty means no reassignment.

Invariants:

* Every state written here bumps the leader epoch (a replica set change reaches each replica
  by a LeaderAndIsr it cannot mistake for an old one) and keeps the leader in its ISR; an ISR
  is never emptied (a change that would empty it is refused, see Case R4).
* A reassignment completes only once every target replica is in the ISR: acknowledged
  messages (in every ISR member) are then in every target replica, so removing the others
  loses nothing.
* The answers are a function of (request, assignment, ongoing, partition state, registered
  brokers), so a controller that takes over after a fail-over and reads the same ZooKeeper
  state decides the same.

The cases, labelled in the code:

* Case R1 (check): the request is refused: unknown topic or partition
  (UNKNOWN_TOPIC_OR_PARTITION); a cancel with nothing in progress (NO_REASSIGNMENT_IN_PROGRESS);
  an empty target, a broker named twice, a negative or unregistered broker
  (INVALID_REPLICA_ASSIGNMENT, Kafka's messages); a replication factor change when the request
  forbids it (INVALID_REPLICATION_FACTOR).
* Case R2 (start): a new target: full = target ++ original, adding/removing as above (the
  original of a partition already being reassigned stays the one it had before its first
  reassignment, as in Kafka); replicas of the old full set outside the new one (an earlier
  target's additions) are stopped and deleted. A target equal to the original is no
  reassignment (the partition goes back to it, like a cancel).
* Case R3 (cancel): the full set goes back to the original; the adding replicas are stopped
  and deleted.
* Case R4 (restrict): the partition state for a new replica set ``keep``: ISR = ISR ∩ keep;
  the leader stays if it is kept, live and in sync, else the first kept replica in that ISR
  that is live leads. Nobody electable (no kept replica in sync and live): None, the caller
  refuses (start/cancel) or waits (completion).
* Case R5 (complete): every target replica is in the ISR: replicas = target, the state
  restricted to the target (Case R4, leader moves off a removed replica), and the removing
  replicas are stopped and deleted.
* Case R6 (stray replica): a removed (or cancelled adding) replica whose broker was down when
  the move ended got no StopReplica, and the controller does not remember it (nor would a new
  one). As Kafka 4's brokers do with stray replicas, the broker decides at start-up, before it
  registers (so no controller can be making it a replica meanwhile: a reassignment may only
  add a registered broker): a local log of a partition whose assignment exists and does not
  name this broker is deleted (:func:`stray_replicas`). A topic or partition missing from the
  assignments is left alone (topic deletion has its own path, Case F of the controller).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hmbclient.broker.controller.decisions import NO_LEADER, LeaderIsr
from hmbclient.errors import ErrorCode

__all__ = ["Ongoing", "Plan", "check", "start", "cancel", "restrict", "completion", "target_of", "original_of", "stray_replicas"]


@dataclass(frozen=True)
class Ongoing:
    """A partition being reassigned: the replicas being added and removed (never both empty)."""

    adding: tuple[int, ...]
    removing: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """What to write: the partition's new full replica set, its reassignment (None: none in
    progress any more), and the replicas to stop and delete."""

    replicas: tuple[int, ...]
    ongoing: Ongoing | None
    stop: tuple[int, ...]


def target_of(full: Sequence[int], ongoing: Ongoing | None) -> tuple[int, ...]:
    """The target replicas (the full set when nothing is in progress)."""
    return tuple(r for r in full if ongoing is None or r not in ongoing.removing)


def original_of(full: Sequence[int], ongoing: Ongoing | None) -> tuple[int, ...]:
    """The replicas before the reassignment (the full set when nothing is in progress)."""
    return tuple(r for r in full if ongoing is None or r not in ongoing.adding)


def check(full: Sequence[int] | None, ongoing: Ongoing | None, target: Sequence[int] | None, registered: Collection[int],
          *, allow_replication_factor_change: bool = True) -> tuple[int, str | None]:
    """Case R1: the error (NONE when the request may go ahead) for one partition.

    Args:
        full: the partition's replicas now (None: no such topic or partition).
        ongoing: its reassignment in progress, if any.
        target: the requested replicas (None: cancel).
        registered: the registered (live) brokers.
        allow_replication_factor_change: False refuses a target of another size than the original.
    """
    if full is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find the partition."
    if target is None:
        if ongoing is None:
            return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "There is no ongoing reassignment for this partition."
        return ErrorCode.NONE, None
    if not target:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    seen: set[int] = set()
    for b in target:
        if b in seen:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes the broker {b} more than once."
        seen.add(b)
        if b < 0:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes an invalid broker id {b}."
        if b not in registered:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes broker {b}, but no such broker is registered."
    if not allow_replication_factor_change and len(target) != len(original_of(full, ongoing)):
        return ErrorCode.INVALID_REPLICATION_FACTOR, "The replication factor is changed from " \
            f"{len(original_of(full, ongoing))} to {len(target)} but the request does not allow it."
    return ErrorCode.NONE, None


def _distinct(*seqs: Sequence[int]) -> tuple[int, ...]:
    out: list[int] = []
    for seq in seqs:
        out += [r for r in seq if r not in out]
    return tuple(out)


def start(full: Sequence[int], ongoing: Ongoing | None, target: Sequence[int]) -> Plan:
    """Case R2: a (new) target for a partition (checked by :func:`check`)."""
    original = original_of(full, ongoing)
    tgt = tuple(target)
    if set(tgt) == set(original):
        # No move: the partition takes the target's order, any earlier additions go.
        return Plan(tgt, None, tuple(r for r in full if r not in tgt))
    new_full = _distinct(tgt, original)
    adding = tuple(r for r in tgt if r not in original)
    removing = tuple(r for r in original if r not in tgt)
    return Plan(new_full, Ongoing(adding, removing), tuple(r for r in full if r not in new_full))


def cancel(full: Sequence[int], ongoing: Ongoing) -> Plan:
    """Case R3: back to the original replicas."""
    original = original_of(full, ongoing)
    return Plan(original, None, tuple(r for r in full if r not in original))


def restrict(current: LeaderIsr | None, keep: Sequence[int], live: Collection[int], controller_epoch: int) -> LeaderIsr | None:
    """Case R4: the state for replica set ``keep`` (epoch + 1), or None when nobody is electable.

    A never-led partition (no state, or NO_LEADER with an empty ISR) holds no data: its kept
    live replicas form the ISR and the first one leads.
    """
    if current is None or (current.leader == NO_LEADER and not current.isr):
        isr = tuple(r for r in keep if r in live)
        if not isr:
            return None
        return LeaderIsr(isr[0], 0 if current is None else current.leader_epoch + 1, isr, controller_epoch)
    isr = tuple(r for r in current.isr if r in keep)
    if current.leader in isr and current.leader in live:
        leader = current.leader
    else:
        electable = [r for r in keep if r in isr and r in live]
        if not electable:
            return None
        leader = electable[0]
    return LeaderIsr(leader, current.leader_epoch + 1, isr, controller_epoch)


def completion(full: Sequence[int], ongoing: Ongoing, current: LeaderIsr | None, live: Collection[int],
               controller_epoch: int) -> tuple[Plan, LeaderIsr] | None:
    """Case R5: the plan and state that finish the reassignment, or None while a target replica
    is not in the ISR yet (or no target replica can lead)."""
    target = target_of(full, ongoing)
    if current is None or current.leader == NO_LEADER or any(r not in current.isr for r in target):
        return None
    state = restrict(current, target, live, controller_epoch)
    if state is None:
        return None
    return Plan(target, None, tuple(r for r in full if r not in target)), state


def stray_replicas(broker_id: int, local: Iterable[tuple[str, int]],
                   assignments: Mapping[str, Sequence[Sequence[int]] | None]) -> list[tuple[str, int]]:
    """Case R6: the local partitions ``broker_id`` is no longer a replica of (their logs go),
    given each topic's full replica sets (None: the topic is unknown, kept)."""
    out = []
    for topic, partition in sorted(local):
        replicas = assignments.get(topic)
        if replicas is None or not 0 <= partition < len(replicas):
            continue
        if broker_id not in replicas[partition]:
            out.append((topic, partition))
    return out
