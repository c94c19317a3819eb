"""The controller's pure decisions: Kafka's assignment examples, every election case, and a
hypothesis state machine of failures, startups, controlled shutdowns and lost ZooKeeper writes
over 3-5 brokers checking the invariants of the module docstring."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hmbclient import errors
from hmbclient.broker.controller import (
    NO_LEADER,
    Change,
    ClusterState,
    LeaderIsr,
    assign_replicas,
    elect_leader,
    initial_states,
    offsets_topic_replication_factor,
    on_broker_failure,
    on_broker_startup,
    on_controlled_shutdown,
    preferred_leader_changes,
    validate_assignment,
)
from hmbclient.errors import ErrorCode


def cluster(live: set[int], assignments: dict[str, list[tuple[int, ...]]], states: dict[tuple[str, int], LeaderIsr] | None = None, epoch: int = 1) -> ClusterState:
    return ClusterState(epoch, set(live), {t: list(a) for t, a in assignments.items()}, dict(states or {}))


def lis(leader: int, epoch: int, isr: tuple[int, ...], controller_epoch: int = 1) -> LeaderIsr:
    return LeaderIsr(leader, epoch, isr, controller_epoch)


def by_tp(changes: list[Change]) -> dict[tuple[str, int], LeaderIsr]:
    return {(c.topic, c.partition): c.state for c in changes}


# -- assignment ---------------------------------------------------------------------------------

# The table of AdminUtils.assignReplicasToBrokers' comment: for 5 brokers, 10 partitions, RF 3,
# start index 0 and shift 0, the partitions whose 1st/2nd/3rd replica each broker holds.
KAFKA_TABLE = {
    0: ([0, 5], [4, 8], [3, 7]),
    1: ([1, 6], [0, 9], [4, 8]),
    2: ([2, 7], [1, 5], [0, 9]),
    3: ([3, 8], [2, 6], [1, 5]),
    4: ([4, 9], [3, 7], [2, 6]),
}


def test_assignment_matches_kafka_table() -> None:
    assignment = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, next_replica_shift=0)
    assert len(assignment) == 10
    for broker, rows in KAFKA_TABLE.items():
        for position, partitions in enumerate(rows):
            for p in partitions:
                assert assignment[p][position] == broker, (p, position, assignment[p])
    assert assignment[:5] == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]
    assert assignment[5:] == [(0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]


def test_assignment_uses_sorted_broker_ids_and_start_values() -> None:
    # Broker ids need not be 0..n-1 nor sorted; indexes are into the sorted list.
    assert assign_replicas([30, 10, 20], 3, 2, start_index=1, next_replica_shift=1) == [(20, 10), (30, 20), (10, 30)]
    assert assign_replicas([7], 3, 1, start_index=5, next_replica_shift=9) == [(7,), (7,), (7,)]


@pytest.mark.parametrize(
    ("brokers", "partitions", "rf", "code"),
    [
        ([0, 1, 2], 3, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([0, 1, 2], 3, 4, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([], 3, 1, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([0, 1, 2], 0, 1, ErrorCode.INVALID_PARTITIONS),
    ],
)
def test_assignment_rejects(brokers: list[int], partitions: int, rf: int, code: ErrorCode) -> None:
    with pytest.raises(errors.for_code(code)) as info:
        assign_replicas(brokers, partitions, rf, start_index=0, next_replica_shift=0)
    assert info.value.errno == code
    assert str(rf) in str(info.value) or str(partitions) in str(info.value)


@given(
    brokers=st.sets(st.integers(0, 1000), min_size=1, max_size=12),
    partitions=st.integers(1, 60),
    data=st.data(),
)
def test_assignment_spread(brokers: set[int], partitions: int, data: st.DataObject) -> None:
    n = len(brokers)
    rf = data.draw(st.integers(1, n))
    start = data.draw(st.integers(0, n - 1))
    shift = data.draw(st.integers(0, n - 1))
    assignment = assign_replicas(sorted(brokers, reverse=True), partitions, rf, start_index=start, next_replica_shift=shift)
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= brokers
    leaders = Counter(r[0] for r in assignment)
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    if partitions % n == 0:
        # Every block of n partitions places each replica position once on every broker.
        replicas_per_broker = Counter(b for r in assignment for b in r)
        assert set(replicas_per_broker.values()) == {partitions * rf // n}


def test_validate_assignment_accepts() -> None:
    assert validate_assignment({1: [2, 0], 0: (0, 1)}, {0, 1, 2}) == [(0, 1), (2, 0)]


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        ({}, "no partitions"),
        ({0: [0], 2: [1]}, "without gaps"),
        ({1: [0]}, "without gaps"),
        ({0: []}, "no replicas"),
        ({0: [0, 1], 1: [1]}, "1 replicas"),
        ({0: [1, 1]}, "more than once"),
        ({0: [0, 9]}, "unknown broker(s) [9]"),
    ],
)
def test_validate_assignment_rejects(assignment: dict[int, list[int]], needle: str) -> None:
    with pytest.raises(errors.for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT)) as info:
        validate_assignment(assignment, [0, 1, 2])
    assert needle in str(info.value)


def test_offsets_topic_replication_factor() -> None:
    assert offsets_topic_replication_factor(3, 5) == 3
    assert offsets_topic_replication_factor(3, 2) == 2
    assert offsets_topic_replication_factor(3, 0) == 1
    assert offsets_topic_replication_factor(0, 3) == 1


# -- elect_leader -------------------------------------------------------------------------------


def test_elect_first_live_isr_member_in_assignment_order() -> None:
    # ISR order differs from assignment order: assignment order picks the leader, ISR order stays.
    assert elect_leader([1, 2, 3], [3, 2], {2, 3}, unclean=False) == (2, (3, 2))
    assert elect_leader([1, 2, 3], [3, 2, 1], {1, 3}, unclean=False) == (1, (3, 1))


def test_elect_excludes_and_drops_dead_from_isr() -> None:
    assert elect_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, unclean=False, exclude={1}) == (2, (2, 3))
    assert elect_leader([1, 2, 3], [1, 2], {2, 3}, unclean=False) == (2, (2,))


def test_elect_clean_refuses_non_isr_replica() -> None:
    assert elect_leader([1, 2, 3], [1], {2, 3}, unclean=False) is None


def test_elect_unclean_takes_first_live_replica() -> None:
    assert elect_leader([1, 2, 3], [1], {3, 2}, unclean=True) == (2, (2,))
    assert elect_leader([1, 2, 3], [1], {2, 3}, unclean=True, exclude={2}) == (3, (3,))


def test_elect_unclean_prefers_clean() -> None:
    assert elect_leader([1, 2, 3], [3], {2, 3}, unclean=True) == (3, (3,))


def test_elect_nobody_live() -> None:
    assert elect_leader([1, 2], [1, 2], {3}, unclean=True) is None
    assert elect_leader([1, 2], [1, 2], {1, 2}, unclean=True, exclude={1, 2}) is None


# -- initial states -----------------------------------------------------------------------------


def test_initial_states() -> None:
    state = cluster({1, 2, 3}, {})
    assignment = [(1, 2, 3), (4, 2, 1), (4, 5, 6)]
    changes = initial_states(state, "t", assignment)
    assert changes == [
        Change("t", 0, lis(1, 0, (1, 2, 3)), (1, 2, 3)),
        Change("t", 1, lis(2, 0, (2, 1)), (4, 2, 1)),
        Change("t", 2, lis(NO_LEADER, 0, ()), (4, 5, 6)),
    ]
    assert state.states == {}  # nothing recorded until apply


def test_initial_states_skips_existing_and_shutting_down() -> None:
    state = cluster({1, 2}, {"t": [(1, 2)]}, {("t", 0): lis(1, 3, (1, 2))})
    state.shutting_down.add(1)
    changes = initial_states(state, "t", [(1, 2), (1, 2)])
    assert changes == [Change("t", 1, lis(2, 0, (2,)), (1, 2))]


def test_never_led_partition_gets_a_leader_on_startup() -> None:
    # Kafka: a NewPartition without a live replica stays new; any replica may lead it later
    # (it has no data), even with unclean election off.
    state = cluster(set(), {"t": [(4, 5)]})
    state.apply(initial_states(state, "t", state.assignments["t"]))
    assert state.offline_partitions() == [("t", 0)]
    state.live_brokers.add(5)
    assert by_tp(on_broker_startup(state, {5})) == {("t", 0): lis(5, 1, (5,))}


def test_partition_without_state_is_initialised_on_startup() -> None:
    state = cluster({1, 2}, {"t": [(2, 1)]})
    assert state.offline_partitions() == [("t", 0)]
    assert on_broker_startup(state, ()) == [Change("t", 0, lis(2, 0, (2, 1)), (2, 1))]


# -- broker failure -----------------------------------------------------------------------------


def three_broker_cluster() -> ClusterState:
    state = cluster({1, 2, 3}, {"t": [(1, 2, 3), (2, 3, 1), (3, 1, 2)]})
    state.apply(initial_states(state, "t", state.assignments["t"]))
    return state


def test_failure_case_a_clean_election() -> None:
    state = three_broker_cluster()
    state.live_brokers.discard(1)
    changes = on_broker_failure(state, {1})
    assert by_tp(changes) == {
        ("t", 0): lis(2, 1, (2, 3)),  # case A: leader died
        ("t", 1): lis(2, 1, (2, 3)),  # case D: follower died
        ("t", 2): lis(3, 1, (3, 2)),  # case D
    }
    assert all(c.replicas == tuple(state.assignments["t"][c.partition]) for c in changes)
    assert state.states[("t", 0)].leader == 1  # the caller applies
    state.apply(changes)
    assert on_broker_failure(state, {1}) == []  # idempotent once applied


def test_failure_of_dead_broker_not_yet_removed_from_live() -> None:
    # The caller may remove the dead from live_brokers before or after: same decisions.
    before = three_broker_cluster()
    after = three_broker_cluster()
    after.live_brokers.discard(2)
    assert on_broker_failure(before, {2}) == on_broker_failure(after, {2})


def test_failure_of_several_brokers_at_once() -> None:
    state = three_broker_cluster()
    state.live_brokers -= {1, 2}
    changes = by_tp(on_broker_failure(state, {1, 2}))
    assert changes == {
        ("t", 0): lis(3, 1, (3,)),
        ("t", 1): lis(3, 1, (3,)),
        ("t", 2): lis(3, 1, (3,)),
    }


def test_failure_case_c_keeps_last_isr_and_returning_member_is_elected() -> None:
    state = cluster({1, 2}, {"t": [(1, 2)]}, {("t", 0): lis(1, 4, (1,))})
    state.live_brokers.discard(1)
    changes = on_broker_failure(state, {1})
    assert by_tp(changes) == {("t", 0): lis(NO_LEADER, 5, (1,))}
    state.apply(changes)
    assert state.offline_partitions() == [("t", 0)]
    assert on_broker_failure(state, ()) == []
    # Broker 2 is live but was not in the ISR: no clean election.
    assert on_broker_startup(state, ()) == []
    state.live_brokers.add(1)
    assert by_tp(on_broker_startup(state, {1})) == {("t", 0): lis(1, 6, (1,))}


def test_failure_of_whole_isr_at_once_keeps_it() -> None:
    state = three_broker_cluster()
    state.live_brokers.clear()
    changes = by_tp(on_broker_failure(state, {1, 2, 3}))
    assert changes[("t", 0)] == lis(NO_LEADER, 1, (1, 2, 3))
    state.apply(on_broker_failure(state, {1, 2, 3}))
    # Any member of the kept ISR may come back first and lead cleanly.
    state.live_brokers.add(3)
    assert by_tp(on_broker_startup(state, {3})) == {
        ("t", 0): lis(3, 2, (3,)),
        ("t", 1): lis(3, 2, (3,)),
        ("t", 2): lis(3, 2, (3,)),
    }


def test_failure_case_b_unclean() -> None:
    state = cluster({1, 2, 3}, {"t": [(1, 2, 3)]}, {("t", 0): lis(1, 0, (1,))})
    state.live_brokers.discard(1)
    assert by_tp(on_broker_failure(state, {1}, unclean=False)) == {("t", 0): lis(NO_LEADER, 1, (1,))}
    assert by_tp(on_broker_failure(state, {1}, unclean=True)) == {("t", 0): lis(2, 1, (2,))}


def test_failure_does_not_elect_shutting_down_broker() -> None:
    state = three_broker_cluster()
    state.shutting_down.add(2)
    state.live_brokers.discard(1)
    changes = by_tp(on_broker_failure(state, {1}))
    assert changes[("t", 0)] == lis(3, 1, (3,))


def test_failure_after_fail_over_reconciles_stale_leaders() -> None:
    # A rebuilt state whose leader vanished while no controller watched.
    state = cluster({2, 3}, {"t": [(1, 2, 3)]}, {("t", 0): lis(1, 7, (1, 2, 3))}, epoch=4)
    assert by_tp(on_broker_failure(state, ())) == {("t", 0): LeaderIsr(2, 8, (2, 3), 4)}


# -- broker startup -----------------------------------------------------------------------------


def test_startup_leaves_led_partitions_alone() -> None:
    state = three_broker_cluster()
    state.live_brokers.discard(1)
    state.apply(on_broker_failure(state, {1}))
    state.live_brokers.add(1)
    assert on_broker_startup(state, {1}) == []


def test_startup_of_non_isr_broker_stays_offline_when_clean() -> None:
    state = cluster({3}, {"t": [(1, 2, 3)]}, {("t", 0): lis(NO_LEADER, 5, (1, 2))})
    assert on_broker_startup(state, {3}) == []
    assert on_broker_startup(state, {3}, unclean=True) == [Change("t", 0, lis(3, 6, (3,)), (1, 2, 3))]


def test_startup_case_f_prefers_isr_member_over_earlier_replica() -> None:
    state = cluster({1, 2}, {"t": [(1, 2, 3)]}, {("t", 0): lis(NO_LEADER, 5, (3, 2))})
    # 1 is earlier in the assignment but not in the ISR; 2 is.
    assert by_tp(on_broker_startup(state, {1, 2}, unclean=True)) == {("t", 0): lis(2, 6, (2,))}


def test_startup_elects_where_leader_is_not_live() -> None:
    state = cluster({2, 3}, {"t": [(1, 2, 3)]}, {("t", 0): lis(1, 2, (1, 3))})
    assert by_tp(on_broker_startup(state, ())) == {("t", 0): lis(3, 3, (3,))}


# -- controlled shutdown ------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_leaves_isr() -> None:
    state = three_broker_cluster()
    state.shutting_down.add(1)
    changes, remaining = on_controlled_shutdown(state, 1)
    assert remaining == []
    assert by_tp(changes) == {
        ("t", 0): lis(2, 1, (2, 3)),  # case H
        ("t", 1): lis(2, 1, (2, 3)),  # case J
        ("t", 2): lis(3, 1, (3, 2)),  # case J
    }
    state.apply(changes)
    assert state.partitions_led_by(1) == []


def test_controlled_shutdown_of_last_isr_member() -> None:
    state = cluster({1, 2}, {"t": [(1, 2), (2, 1)], "single": [(1,)]}, {
        ("t", 0): lis(1, 3, (1,)),
        ("t", 1): lis(2, 3, (2, 1)),
        ("single", 0): lis(1, 0, (1,)),
    })
    changes, remaining = on_controlled_shutdown(state, 1)
    # Case I: (t, 0) cannot move; single-replica partitions never hold a shutdown back.
    assert remaining == [("t", 0)]
    assert by_tp(changes) == {("t", 1): lis(2, 4, (2,))}
    state.apply(changes)
    assert state.partitions_led_by(1) == [("single", 0), ("t", 0)]


def test_controlled_shutdown_skips_other_shutting_down_brokers() -> None:
    state = three_broker_cluster()
    state.shutting_down.add(2)
    changes, remaining = on_controlled_shutdown(state, 1)  # 1 not yet added by the caller
    assert remaining == []
    assert by_tp(changes)[("t", 0)] == lis(3, 1, (3,))


def test_controlled_shutdown_of_unknown_broker() -> None:
    state = three_broker_cluster()
    with pytest.raises(errors.for_code(ErrorCode.BROKER_NOT_AVAILABLE)):
        on_controlled_shutdown(state, 9)


# -- preferred replica election -----------------------------------------------------------------


def test_preferred_leader_changes() -> None:
    state = cluster({1, 2, 3}, {"t": [(1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2)]}, {
        ("t", 0): lis(2, 4, (2, 3, 1)),  # preferred 1 in ISR: moves back
        ("t", 1): lis(2, 0, (2, 3, 1)),  # already preferred
        ("t", 2): lis(1, 1, (1, 2)),  # preferred 3 not in ISR
        ("t", 3): lis(NO_LEADER, 2, (1,)),  # offline: left to startup
    })
    assert preferred_leader_changes(state) == [Change("t", 0, lis(1, 5, (2, 3, 1)), (1, 2, 3))]
    state.shutting_down.add(1)
    assert preferred_leader_changes(state) == []


def test_cluster_state_queries() -> None:
    state = cluster({1, 2}, {"a": [(1, 2), (2, 1), (3,)], "b": [(1,)]}, {
        ("a", 0): lis(1, 0, (1, 2)),
        ("a", 1): lis(2, 0, (2, 1)),
        ("a", 2): lis(3, 0, (3,)),
        ("b", 0): lis(1, 0, (1,)),
    })
    assert state.partitions_led_by(1) == [("a", 0), ("b", 0)]
    assert state.offline_partitions() == [("a", 2)]


# -- invariants under random events -------------------------------------------------------------


class ControllerMachine(RuleBasedStateMachine):
    """Random failures, startups, controlled shutdowns, catch-ups, preferred elections and
    controller fail-overs; some ZooKeeper writes are lost and the controller reconciles.

    ``holders`` models data: the brokers known to hold every committed message of a partition.
    While a partition has a live leader, a write may commit at any moment to the ISR, so the
    holders shrink to the ISR; a follower that catches up joins both. With unclean election off,
    every leader and every ISR member must be a holder.
    """

    def __init__(self) -> None:
        super().__init__()
        self.state = ClusterState(0, set(), {}, {})
        self.brokers: list[int] = []
        self.unclean = False
        self.holders: dict[tuple[str, int], set[int]] = {}
        self.last_epoch: dict[tuple[str, int], int] = {}

    @initialize(
        brokers=st.sets(st.integers(0, 9), min_size=3, max_size=5),
        unclean=st.booleans(),
        topics=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=3),
    )
    def setup(self, brokers: set[int], unclean: bool, topics: list[tuple[int, int, int, int]]) -> None:
        self.brokers = sorted(brokers)
        self.unclean = unclean
        self.state = ClusterState(1, set(brokers), {}, {})
        for i, (partitions, rf, start, shift) in enumerate(topics):
            self._create(f"t{i}", partitions, min(rf, len(brokers)), start, shift)

    def _create(self, topic: str, partitions: int, rf: int, start: int, shift: int) -> None:
        assignment = assign_replicas(self.brokers, partitions, rf, start_index=start, next_replica_shift=shift)
        self.state.assignments[topic] = assignment
        self._apply(initial_states(self.state, topic, assignment))

    def _apply(self, changes: list[Change], lost: int = 0) -> None:
        """Apply the changes, except those picked by the ``lost`` bit mask (failed writes); then
        reconcile as the controller would on its next event, without losses."""
        written = [c for i, c in enumerate(changes) if not (lost >> (i % 30)) & 1]
        self._record(written)
        if len(written) != len(changes):
            self._record(on_broker_failure(self.state, (), unclean=self.unclean))
            self._record(on_broker_startup(self.state, (), unclean=self.unclean))

    def _record(self, changes: list[Change]) -> None:
        for c in changes:
            tp = (c.topic, c.partition)
            old = self.state.states.get(tp)
            new = c.state
            assert new.controller_epoch == self.state.controller_epoch
            assert c.replicas == self.state.assignments[c.topic][c.partition]
            if old is None:
                assert new.leader_epoch == 0
                self.holders[tp] = set(new.isr)
                continue
            assert new.leader_epoch == old.leader_epoch + 1
            if new.leader not in (NO_LEADER, old.leader):
                assert new.leader not in self.state.shutting_down, (old, new)
            if not old.isr:
                # A never-led partition has no data: any live replica may start it.
                self.holders[tp] = set(new.isr)
            elif not self.unclean:
                assert set(new.isr) <= set(old.isr), (old, new)
                assert new.leader == NO_LEADER or new.leader in old.isr, (old, new)
            elif new.leader != NO_LEADER and new.leader not in old.isr:
                self.holders[tp] = {new.leader}  # unclean election: the committed data is its log
        self.state.apply(changes)

    @rule(data=st.data(), lost=st.integers(0, 2**30))
    @precondition(lambda self: len(self.state.live_brokers) > 0)
    def fail(self, data: st.DataObject, lost: int) -> None:
        dead = data.draw(st.sets(st.sampled_from(sorted(self.state.live_brokers)), min_size=1))
        changes = on_broker_failure(self.state, dead, unclean=self.unclean)
        self.state.live_brokers -= dead
        self.state.shutting_down -= dead
        self._apply(changes, lost)

    @rule(data=st.data(), lost=st.integers(0, 2**30))
    @precondition(lambda self: len(self.state.live_brokers) < len(self.brokers))
    def start(self, data: st.DataObject, lost: int) -> None:
        down = sorted(set(self.brokers) - self.state.live_brokers)
        new = data.draw(st.sets(st.sampled_from(down), min_size=1))
        self.state.live_brokers |= new
        self._apply(on_broker_startup(self.state, new, unclean=self.unclean), lost)

    @rule(data=st.data(), lost=st.integers(0, 2**30))
    @precondition(lambda self: len(self.state.live_brokers - self.state.shutting_down) > 0)
    def controlled_shutdown(self, data: st.DataObject, lost: int) -> None:
        broker = data.draw(st.sampled_from(sorted(self.state.live_brokers - self.state.shutting_down)))
        self.state.shutting_down.add(broker)
        changes, remaining = on_controlled_shutdown(self.state, broker)
        self._apply(changes, lost)
        if not lost:
            led = [
                tp
                for tp in self.state.partitions_led_by(broker)
                if len(self.state.assignments[tp[0]][tp[1]]) > 1
            ]
            assert remaining == led
            for tp in remaining:
                others = set(self.state.states[tp].isr) - self.state.shutting_down
                assert not others & self.state.live_brokers

    @rule(data=st.data())
    def catch_up(self, data: st.DataObject) -> None:
        """A live follower catches up and its leader adds it to the ISR (the leader's own write:
        the leader epoch stays)."""
        candidates = [
            (tp, b)
            for tp, s in sorted(self.state.states.items())
            if s.leader != NO_LEADER and s.leader in self.state.live_brokers
            for b in self.state.assignments[tp[0]][tp[1]]
            if b in self.state.live_brokers and b not in s.isr
        ]
        if not candidates:
            return
        tp, b = data.draw(st.sampled_from(candidates))
        s = self.state.states[tp]
        self.state.states[tp] = LeaderIsr(s.leader, s.leader_epoch, (*s.isr, b), s.controller_epoch)
        self.holders[tp].add(b)

    @rule(lost=st.integers(0, 2**30))
    def preferred(self, lost: int) -> None:
        changes = preferred_leader_changes(self.state)
        for c in changes:
            assert c.state.leader == c.replicas[0]
            assert c.state.isr == self.state.states[(c.topic, c.partition)].isr
        self._apply(changes, lost)

    @rule()
    def fail_over(self) -> None:
        self.state.controller_epoch += 1
        self._apply(on_broker_failure(self.state, (), unclean=self.unclean))
        self._apply(on_broker_startup(self.state, (), unclean=self.unclean))

    @rule(partitions=st.integers(1, 3), rf=st.integers(1, 5), start=st.integers(0, 4), shift=st.integers(0, 4))
    def create_topic(self, partitions: int, rf: int, start: int, shift: int) -> None:
        if len(self.state.assignments) < 5:
            self._create(f"t{len(self.state.assignments)}", partitions, min(rf, len(self.brokers)), start, shift)

    @invariant()
    def leaders_live_and_in_isr(self) -> None:
        live = self.state.live_brokers
        for tp, s in self.state.states.items():
            replicas = self.state.assignments[tp[0]][tp[1]]
            assert len(set(s.isr)) == len(s.isr)
            assert set(s.isr) <= set(replicas)
            if s.leader == NO_LEADER:
                # Offline only when nobody could lead it.
                if not s.isr:
                    assert not (set(replicas) & (live - self.state.shutting_down))
                elif not self.unclean:
                    assert not (set(s.isr) & (live - self.state.shutting_down)), (tp, s, live)
                else:
                    assert not (set(replicas) & (live - self.state.shutting_down)), (tp, s, live)
                continue
            assert s.leader in live, (tp, s, live)
            assert s.leader in s.isr
            assert set(s.isr) <= live, (tp, s, live)

    @invariant()
    def epochs_never_decrease(self) -> None:
        for tp, s in self.state.states.items():
            assert s.leader_epoch >= self.last_epoch.get(tp, 0)
            assert s.controller_epoch <= self.state.controller_epoch
            self.last_epoch[tp] = s.leader_epoch

    @invariant()
    def no_unclean_election_when_disabled(self) -> None:
        for tp, s in sorted(self.state.states.items()):
            if s.leader != NO_LEADER and s.leader in self.state.live_brokers:
                # A write may commit now: only the ISR is sure to hold it.
                self.holders[tp] &= set(s.isr)
            if not self.unclean:
                assert set(s.isr) <= self.holders[tp], (tp, s, self.holders[tp])
                assert s.leader == NO_LEADER or s.leader in self.holders[tp]


TestControllerMachine = ControllerMachine.TestCase
TestControllerMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
