"""The controller's decisions: replica assignment and partition leader election, as pure functions.

No sockets, no ZooKeeper, no threads, no clocks. The controller's I/O shell (ZooKeeper watches on
``/brokers/ids`` and ``/brokers/topics``, the channel to the brokers) keeps a :class:`ClusterState`,
calls one of the ``on_*`` functions when something happens, writes every returned
:class:`Change` to ``/brokers/topics/<t>/partitions/<p>/state`` (conditionally, on the version it
read), sends LeaderAndIsr to the live replicas of each written partition (and UpdateMetadata to
every live broker), and records what it managed to write with :meth:`ClusterState.apply`. The
functions never mutate the state they are given; every one is deterministic (partitions are
visited in (topic, partition) order) so the same state always yields the same decisions.

Nouns follow Kafka 0.8.2's controller: a partition's *replicas* are its assigned brokers in
assignment order (the first is the *preferred* replica); its *ISR* is the in-sync subset; its
*leader* is an ISR member or :data:`NO_LEADER`; each leadership change bumps the *leader epoch*
(and 0.8 bumps it for controller-made ISR shrinks as well); every state carries the *controller
epoch* of the controller that wrote it, so a deposed controller's late writes can be fenced.
Brokers in ``ClusterState.shutting_down`` are alive but on their way out (controlled shutdown):
they are never chosen as a new leader and leave the ISR when the controller rewrites it, as in
Kafka, where the controller's live broker set excludes them.

Invariants (checked by the tests with a hypothesis state machine):

* A leader is always a member of its ISR; a partition either has a live leader or NO_LEADER once
  the changes of a failure or startup are applied.
* Leader epochs only grow: every change made here is the old epoch + 1; new partitions start at 0.
* With unclean election disabled, a replica outside the last ISR is never elected, and the
  ISR never gains a member through the controller (it only grows through the leader, which adds
  followers that caught up). A never-led new partition (no state, or NO_LEADER with an empty
  ISR) has no data yet, so any live replica may lead it.
* After :func:`on_broker_failure`, the ISR of every partition with a leader contains only live
  brokers. A partition left without a leader keeps its last ISR unchanged: those brokers hold
  every committed message, so the first of them to come back can be elected cleanly (Kafka
  likewise refuses to empty the ISR when unclean election is off).
* An ISR is never emptied by the controller; only a never-led partition has an empty ISR.

The cases, labelled in the code:

* Case A (failure): the leader is gone and a live ISR member remains: elect it (clean).
* Case B (failure): the leader is gone, no live ISR member, unclean election on, a live
  replica remains: elect it with ISR = (it,) (acknowledged messages may be lost).
* Case C (failure): the leader is gone and nobody is electable: NO_LEADER, ISR kept.
* Case D (failure): the leader lives but gone brokers are in the ISR: shrink the ISR.
* Case E (startup): a never-led partition gets its first leader, as at creation.
* Case F (startup): an offline partition with a live replica of its last ISR: elect it.
* Case G (startup): an offline partition with no live ISR member, unclean election on: elect
  the first live replica. With unclean election off the partition stays offline.
* Case H (controlled shutdown): the shutting-down broker leads and another live ISR member not
  shutting down exists: move leadership there, ISR without the shutting-down brokers.
* Case I (controlled shutdown): the shutting-down broker is the last ISR member: it keeps the
  partition (reported back, the broker may retry or shut down anyway).
* Case J (controlled shutdown): the shutting-down broker is a follower in the ISR: drop it.
* Case K (preferred replica election): the live, in-sync preferred replica takes over.
* Case L (topic deletion): a topic marked for deletion is deleted once every one of its
  replicas is live (each must delete its log); until then it stays marked (Kafka's
  "ineligible for deletion") and is tried again when brokers join.
* Case N (auto leader rebalance): for each live broker, the partitions whose preferred replica
  it is but that another broker leads; when they are more than ``percentage`` % of its
  preferred partitions, those partitions go through Case K (Kafka's
  ``checkAndTriggerAutoLeaderRebalance``).
* Case M (partition addition): CreatePartitions grows an assignment; the existing partitions
  keep theirs, the new ones are Kafka's assignment continued from the existing partition
  count (or the caller's, validated), and :func:`initial_states` starts only the new ones.

A shell fail-over recipe: rebuild a ClusterState from ZooKeeper, then apply
``on_broker_failure(state, ())`` (leaders that vanished while no controller watched) and then
``on_broker_startup(state, ())`` (partitions that can come online, never-led partitions).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hmbclient.errors import ErrorCode, for_code

__all__ = [
    "NO_LEADER",
    "Change",
    "ClusterState",
    "LeaderIsr",
    "assign_replicas",
    "elect_leader",
    "initial_states",
    "offsets_topic_replication_factor",
    "on_broker_failure",
    "on_broker_startup",
    "on_controlled_shutdown",
    "preferred_leader_changes",
    "deletable",
    "grown_assignment",
    "imbalanced_partitions",
    "validate_assignment",
]

NO_LEADER = -1

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class LeaderIsr:
    """The content of a partition state znode (its zk version stays with the shell)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


@dataclass(frozen=True)
class Change:
    """One decision: write ``state`` for the partition (conditionally) and tell its live replicas."""

    topic: str
    partition: int
    state: LeaderIsr
    replicas: tuple[int, ...]


@dataclass
class ClusterState:
    """What the controller knows; rebuilt from ZooKeeper on fail-over.

    ``assignments`` come from ``/brokers/topics/<t>`` and are maintained by the caller (a topic's
    assignment is written before the controller decides anything about it); ``states`` change
    only through :meth:`apply`. A partition of ``assignments`` without an entry in ``states`` has
    never been given a leader.
    """

    controller_epoch: int
    live_brokers: set[int]
    assignments: dict[str, list[tuple[int, ...]]]
    states: dict[tuple[str, int], LeaderIsr]
    shutting_down: set[int] = field(default_factory=set)

    def apply(self, changes: Iterable[Change]) -> None:
        """Record states that were written to ZooKeeper."""
        for change in changes:
            self.states[(change.topic, change.partition)] = change.state

    def partitions_led_by(self, broker: int) -> list[tuple[str, int]]:
        """The partitions whose recorded leader is ``broker``, sorted."""
        return sorted(tp for tp, s in self.states.items() if s.leader == broker)

    def offline_partitions(self) -> list[tuple[str, int]]:
        """Assigned partitions without a live leader (including never-led ones), sorted."""
        return [
            tp
            for tp, _ in _partitions(self)
            if (s := self.states.get(tp)) is None or s.leader == NO_LEADER or s.leader not in self.live_brokers
        ]


def _partitions(state: ClusterState) -> list[tuple[TopicPartition, tuple[int, ...]]]:
    # Sorted so that every decision list comes out in the same order for the same state.
    return [
        ((topic, p), tuple(replicas))
        for topic in sorted(state.assignments)
        for p, replicas in enumerate(state.assignments[topic])
    ]


def _change(tp: TopicPartition, replicas: tuple[int, ...], leader: int, epoch: int, isr: Iterable[int], state: ClusterState) -> Change:
    return Change(tp[0], tp[1], LeaderIsr(leader, epoch, tuple(isr), state.controller_epoch), replicas)


# -- assignment ---------------------------------------------------------------------------------


def assign_replicas(brokers: Sequence[int], num_partitions: int, replication_factor: int, *, start_index: int, next_replica_shift: int) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware replica assignment over the sorted broker ids.

    The first replica of partition ``p`` is broker ``(start_index + p) % n``, so preferred leaders
    go round-robin. The followers sit at a shift of ``1 + (shift + j) % (n - 1)`` after it, where
    ``shift`` starts at ``next_replica_shift`` and grows by one every ``n`` partitions: the
    followers of one broker's partitions spread over the others instead of always repeating the
    same sequence. With 5 brokers, 10 partitions, RF 3 and both start values 0, partitions 0..4
    are (0,1,2) (1,2,3) (2,3,4) (3,4,0) (4,0,1) and 5..9 are (0,2,3) (1,3,4) (2,4,0) (3,0,1) (4,1,2).

    Args:
        brokers: the broker ids to spread over (duplicates ignored).
        num_partitions: how many partitions, at least 1.
        replication_factor: replicas per partition, 1..len(brokers).
        start_index, next_replica_shift: callers pass random values in ``range(n)`` (any int is
            taken modulo n); tests pass fixed ones.
    Returns:
        The replicas of partitions 0..num_partitions-1.
    Raises:
        InvalidPartitionsError: num_partitions < 1.
        InvalidReplicationFactorError: replication_factor < 1 or above the number of brokers.
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if num_partitions < 1:
        raise for_code(ErrorCode.INVALID_PARTITIONS)(f"number of partitions must be at least 1, got {num_partitions}")
    if replication_factor < 1:
        raise for_code(ErrorCode.INVALID_REPLICATION_FACTOR)(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > n:
        raise for_code(ErrorCode.INVALID_REPLICATION_FACTOR)(
            f"replication factor {replication_factor} is larger than the {n} available broker(s) {ids}"
        )
    result = []
    for p in range(num_partitions):
        first = (start_index + p) % n
        shift = next_replica_shift + p // n
        # The follower offset 1 + (...) % (n - 1) is never 0 or n: no broker repeats in a partition.
        followers = [ids[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(replication_factor - 1)]
        result.append((ids[first], *followers))
    return result


def validate_assignment(assignment: Mapping[int, Sequence[int]], brokers: Collection[int]) -> list[tuple[int, ...]]:
    """Check a user-given CreateTopics replica assignment and return it as a list by partition.

    Raises:
        InvalidReplicaAssignmentError: no partitions, partition ids not exactly 0..n-1, an empty
            replica list, partitions with different replica counts, a broker twice in one
            partition, or a broker that is not registered.
    """
    invalid = for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    if not assignment:
        raise invalid("the replica assignment names no partitions")
    ids = sorted(assignment)
    if ids != list(range(len(ids))):
        raise invalid(f"partitions must be numbered 0..{len(ids) - 1} without gaps, got {ids}")
    known = set(brokers)
    result = []
    for p in ids:
        replicas = tuple(assignment[p])
        if not replicas:
            raise invalid(f"partition {p} has no replicas")
        if len(replicas) != len(assignment[0]):
            raise invalid(f"partition {p} has {len(replicas)} replicas, partition 0 has {len(assignment[0])}")
        if len(set(replicas)) != len(replicas):
            raise invalid(f"partition {p} names a broker more than once: {list(replicas)}")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise invalid(f"partition {p} names unknown broker(s) {unknown}; registered: {sorted(known)}")
        result.append(replicas)
    return result


def offsets_topic_replication_factor(configured: int, live_brokers: int) -> int:
    """The replication factor to create ``__consumer_offsets`` with: what is configured, capped
    by the live brokers (Kafka creates it with what is there rather than fail), at least 1."""
    return max(1, min(configured, live_brokers))


# -- election -----------------------------------------------------------------------------------


def elect_leader(replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean: bool, exclude: Collection[int] = ()) -> tuple[int, tuple[int, ...]] | None:
    """Kafka's OfflinePartitionLeaderSelector.

    Clean: the first replica in assignment order that is live, in the ISR and not excluded leads;
    the new ISR is the live, non-excluded ISR members (in ISR order). With no such replica and
    ``unclean``: the first live, non-excluded assigned replica leads with ISR = (it,).

    Returns:
        (leader, new ISR), or None when nobody is electable.
    """
    available = [b for b in replicas if b in live and b not in exclude]
    in_sync = [b for b in isr if b in live and b not in exclude]
    for b in available:
        if b in in_sync:
            return b, tuple(in_sync)
    if unclean and available:
        return available[0], (available[0],)
    return None


def _first_leader(replicas: Sequence[int], live: Collection[int], exclude: Collection[int]) -> tuple[int, tuple[int, ...]]:
    # A partition that never had a leader holds no data: every live replica is in sync.
    in_sync = tuple(b for b in replicas if b in live and b not in exclude)
    return (in_sync[0], in_sync) if in_sync else (NO_LEADER, ())


def _never_led(current: LeaderIsr | None) -> bool:
    return current is None or (current.leader == NO_LEADER and not current.isr)


def initial_states(state: ClusterState, topic: str, assignment: Sequence[tuple[int, ...]]) -> list[Change]:
    """The first states of new partitions.

    Leader = the first live replica (assignment order), ISR = the live replicas, epoch 0. With no
    live replica the state is NO_LEADER with an empty ISR (Kafka leaves such a partition offline
    in NewPartition); :func:`on_broker_startup` gives it a leader once a replica is live.
    Partitions of ``topic`` that already have a state are left alone, so passing a grown
    assignment initialises only the added partitions. Brokers shutting down are not used.
    """
    changes = []
    for p, replicas in enumerate(assignment):
        tp = (topic, p)
        if tp in state.states:
            continue
        leader, isr = _first_leader(replicas, state.live_brokers, state.shutting_down)
        changes.append(_change(tp, tuple(replicas), leader, 0, isr, state))
    return changes


def on_broker_failure(state: ClusterState, dead: Collection[int], *, unclean: bool = False) -> list[Change]:
    """Decisions after ``dead`` brokers vanished (their registration in /brokers/ids is gone).

    Brokers in ``dead`` and any recorded leader or ISR member not in ``state.live_brokers`` count
    as gone, so the caller may remove the dead from ``live_brokers`` before or after the call, and
    ``on_broker_failure(state, ())`` reconciles a state rebuilt after a controller fail-over.
    Updates nothing in ``state``; the caller applies what it managed to write.
    """
    live = set(state.live_brokers) - set(dead)
    changes = []
    for tp, replicas in _partitions(state):
        current = state.states.get(tp)
        if current is None or current.leader == NO_LEADER:
            # Never-led or already offline: a failure makes nobody new electable.
            continue
        epoch = current.leader_epoch + 1
        if current.leader not in live:
            elected = elect_leader(replicas, current.isr, live, unclean=unclean, exclude=state.shutting_down)
            if elected is not None:
                # Case A / Case B (elect_leader falls back to unclean only when allowed).
                changes.append(_change(tp, replicas, elected[0], epoch, elected[1], state))
            else:
                # Case C: keep the last ISR so a returning member can be elected cleanly.
                changes.append(_change(tp, replicas, NO_LEADER, epoch, current.isr, state))
        elif any(b not in live for b in current.isr):
            # Case D: the leader is live and in the ISR, so the shrunk ISR is never empty.
            isr = tuple(b for b in current.isr if b in live)
            changes.append(_change(tp, replicas, current.leader, epoch, isr, state))
    return changes


def on_broker_startup(state: ClusterState, new: Collection[int], *, unclean: bool = False) -> list[Change]:
    """Decisions after ``new`` brokers registered (or after a fail-over, with ``new`` empty).

    Every partition without a live leader is given one if possible: a never-led partition takes
    its first live replica (Case E); an offline partition takes a live member of its last ISR
    (Case F), or with ``unclean`` any live replica (Case G). A returning broker that was not in
    the last ISR is therefore not elected unless ``unclean``. Partitions with a live leader do not
    change: a returning replica becomes a follower and its leader adds it back to the ISR once it
    has caught up.
    """
    live = set(state.live_brokers) | set(new)
    changes = []
    for tp, replicas in _partitions(state):
        current = state.states.get(tp)
        if current is None or (current.leader == NO_LEADER and not current.isr):
            # Case E
            leader, isr = _first_leader(replicas, live, state.shutting_down)
            if leader != NO_LEADER:
                epoch = 0 if current is None else current.leader_epoch + 1
                changes.append(_change(tp, replicas, leader, epoch, isr, state))
            continue
        if current.leader != NO_LEADER and current.leader in live:
            continue
        # Case F / Case G
        elected = elect_leader(replicas, current.isr, live, unclean=unclean, exclude=state.shutting_down)
        if elected is not None:
            changes.append(_change(tp, replicas, elected[0], current.leader_epoch + 1, elected[1], state))
    return changes


def on_controlled_shutdown(state: ClusterState, broker: int) -> tuple[list[Change], list[tuple[str, int]]]:
    """Kafka's ControlledShutdownLeaderSelector for a ControlledShutdown request of ``broker``.

    ``broker`` counts as shutting down (whether or not the caller added it to
    ``state.shutting_down`` yet). Partitions with a single replica are skipped, as in Kafka:
    nobody could take them over, so they never hold a shutdown back.

    Returns:
        (changes, partitions with more than one replica still led by ``broker`` once the changes
        are applied: it is their last ISR member).
    Raises:
        BrokerNotAvailableError: ``broker`` is neither live nor shutting down (Kafka answers the
            ControlledShutdown request with that error).
    """
    if broker not in state.live_brokers and broker not in state.shutting_down:
        raise for_code(ErrorCode.BROKER_NOT_AVAILABLE)(f"broker {broker} is not registered")
    leaving = set(state.shutting_down) | {broker}
    changes = []
    remaining = []
    for tp, replicas in _partitions(state):
        current = state.states.get(tp)
        if current is None or len(replicas) < 2 or broker not in current.isr:
            continue
        epoch = current.leader_epoch + 1
        if current.leader == broker:
            elected = elect_leader(replicas, current.isr, state.live_brokers, unclean=False, exclude=leaving)
            if elected is not None:
                # Case H
                changes.append(_change(tp, replicas, elected[0], epoch, elected[1], state))
            else:
                # Case I
                remaining.append(tp)
        elif current.leader != NO_LEADER:
            # Case J: the leader stays in the ISR, so it cannot become empty.
            isr = tuple(b for b in current.isr if b != broker)
            changes.append(_change(tp, replicas, current.leader, epoch, isr, state))
    return changes, remaining


def preferred_leader_changes(state: ClusterState) -> list[Change]:
    """Kafka's PreferredReplicaPartitionLeaderSelector over every partition.

    Case K: a partition with a live leader whose preferred replica (the first assigned) is live,
    not shutting down, in the ISR and not the leader gets it as leader (epoch + 1, same ISR).
    Offline partitions are left to :func:`on_broker_startup`.
    """
    changes = []
    for tp, replicas in _partitions(state):
        current = state.states.get(tp)
        if current is None or current.leader == NO_LEADER or current.leader not in state.live_brokers:
            continue
        preferred = replicas[0]
        if (
            preferred != current.leader
            and preferred in state.live_brokers
            and preferred not in state.shutting_down
            and preferred in current.isr
        ):
            changes.append(_change(tp, replicas, preferred, current.leader_epoch + 1, current.isr, state))
    return changes


def deletable(state: ClusterState, topic: str) -> bool:
    """Case L: every replica of every partition of ``topic`` is a live broker (an unknown
    topic is deletable at once: there is nothing to stop)."""
    return all(r in state.live_brokers for rs in state.assignments.get(topic, ()) for r in rs)


def grown_assignment(current: Sequence[tuple[int, ...]], count: int, brokers: Collection[int],
                     requested: Sequence[Sequence[int]] | None, *, start_index: int = 0) -> list[tuple[int, ...]]:
    """Case M: the assignment of a topic grown to ``count`` partitions (CreatePartitions).

    Args:
        current: the topic's assignment now (its replica count is the replication factor).
        count: the partition count asked for.
        brokers: the registered brokers.
        requested: the replicas of the NEW partitions only (None: Kafka's assignment, the
            first replica continuing round-robin after the existing partitions).
        start_index: where Kafka's round-robin starts (the index of partition 0's first
            replica among the sorted brokers keeps the layout continuous).

    Returns:
        The whole new assignment (``current`` followed by the new partitions).

    Raises:
        InvalidPartitionsError: ``count`` is not above the current count.
        InvalidReplicaAssignmentError: ``requested`` has the wrong number of partitions, a
            replica count other than the topic's, a broker twice or an unknown broker.
        InvalidReplicationFactorError: fewer brokers than the topic's replication factor.
    """
    n = len(current)
    if count < n:
        raise for_code(ErrorCode.INVALID_PARTITIONS)(f"Topic currently has {n} partitions, which is higher than the requested {count}.")
    if count == n:
        raise for_code(ErrorCode.INVALID_PARTITIONS)(f"Topic already has {n} partitions.")
    rf = len(current[0]) if current else 1
    if requested is None:
        return [*current, *assign_replicas(sorted(brokers), count, rf, start_index=start_index, next_replica_shift=0)[n:]]
    invalid = for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    if len(requested) != count - n:
        raise invalid(f"Increasing the number of partitions by {count - n} but {len(requested)} assignments provided.")
    known = set(brokers)
    added = []
    for i, replicas in enumerate(requested):
        reps = tuple(replicas)
        if len(reps) != rf:
            raise invalid(f"Inconsistent replication factor between partitions, partition 0 has {rf} while partition {n + i} has replication factor {len(reps)}.")
        if len(set(reps)) != len(reps):
            raise invalid(f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, reps))} for partition id {n + i}.")
        unknown = sorted(set(reps) - known)
        if unknown:
            raise invalid(f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
        added.append(reps)
    return [*current, *added]


def imbalanced_partitions(state: ClusterState, percentage: int) -> list[TopicPartition]:
    """Case N: the partitions to hand back to their preferred replica, sorted."""
    preferred: dict[int, list[TopicPartition]] = {}
    for tp, replicas in _partitions(state):
        if replicas and tp in state.states:
            preferred.setdefault(replicas[0], []).append(tp)
    out: list[TopicPartition] = []
    for broker, tps in sorted(preferred.items()):
        if broker not in state.live_brokers or broker in state.shutting_down:
            continue
        elsewhere = [tp for tp in tps if state.states[tp].leader != broker]
        if elsewhere and len(elsewhere) * 100 > percentage * len(tps):
            out += elsewhere
    return sorted(out)
