"""The pure rules of partition reassignment (``controller/reassignment.py``, cases R1-R5) and of
replication throttling (``broker/replication_quota.py``), without a broker."""

from __future__ import annotations

import pytest

from hmbclient import zkpaths
from hmbclient.broker.controller.decisions import NO_LEADER, LeaderIsr
from hmbclient.broker.controller.reassignment import (
    Ongoing,
    Plan,
    cancel,
    check,
    completion,
    original_of,
    restrict,
    start,
    target_of,
)
from hmbclient.broker.replication_quota import (
    ALL,
    ReplicationQuota,
    is_throttled,
    parse_throttled_replicas,
)
from hmbclient.errors import ErrorCode as E

LIVE = {0, 1, 2, 3}


def test_check_cases_r1() -> None:
    assert check(None, None, [0, 1], LIVE)[0] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert check((0, 1), None, None, LIVE)[0] == E.NO_REASSIGNMENT_IN_PROGRESS
    assert check((1, 2, 0), Ongoing((2,), (0,)), None, LIVE) == (E.NONE, None)
    assert check((0, 1), None, [], LIVE)[0] == E.INVALID_REPLICA_ASSIGNMENT
    assert check((0, 1), None, [1, 1], LIVE)[0] == E.INVALID_REPLICA_ASSIGNMENT
    assert check((0, 1), None, [1, -1], LIVE)[0] == E.INVALID_REPLICA_ASSIGNMENT
    assert check((0, 1), None, [1, 9], LIVE) == (E.INVALID_REPLICA_ASSIGNMENT,
                                                "The manual partition assignment includes broker 9, but no such broker is registered.")
    assert check((0, 1), None, [1, 2, 3], LIVE, allow_replication_factor_change=False)[0] == E.INVALID_REPLICATION_FACTOR
    assert check((0, 1), None, [2, 3], LIVE, allow_replication_factor_change=False) == (E.NONE, None)


def test_start_and_cancel_r2_r3() -> None:
    plan = start((0, 1), None, [1, 2])
    assert plan == Plan((1, 2, 0), Ongoing((2,), (0,)), ())
    assert target_of(plan.replicas, plan.ongoing) == (1, 2) and original_of(plan.replicas, plan.ongoing) == (1, 0)
    # a new target while one is in progress: the original stays, the earlier addition goes
    again = start(plan.replicas, plan.ongoing, [3, 1])
    assert again == Plan((3, 1, 0), Ongoing((3,), (0,)), (2,))
    # back to the original set: no reassignment any more
    assert start(plan.replicas, plan.ongoing, [0, 1]) == Plan((0, 1), None, (2,))
    assert cancel(plan.replicas, plan.ongoing) == Plan((1, 0), None, (2,))


def test_restrict_r4() -> None:
    cur = LeaderIsr(0, 5, (0, 1), 3)
    assert restrict(cur, (1, 2, 0), LIVE, 4) == LeaderIsr(0, 6, (0, 1), 4)  # leader kept, epoch + 1
    assert restrict(cur, (1, 2), LIVE, 4) == LeaderIsr(1, 6, (1,), 4)  # leader removed: first kept in sync
    assert restrict(cur, (1, 2), LIVE - {1}, 4) is None  # nobody kept, in sync and alive
    assert restrict(None, (2, 3), LIVE, 1) == LeaderIsr(2, 0, (2, 3), 1)  # never led: no data yet
    assert restrict(LeaderIsr(NO_LEADER, 2, (), 1), (2, 3), {3}, 1) == LeaderIsr(3, 3, (3,), 1)


def test_completion_r5() -> None:
    full, ongoing = (1, 2, 0), Ongoing((2,), (0,))
    assert completion(full, ongoing, LeaderIsr(0, 6, (0, 1), 4), LIVE, 4) is None  # 2 not in sync yet
    done = completion(full, ongoing, LeaderIsr(0, 7, (0, 1, 2), 4), LIVE, 4)
    assert done == (Plan((1, 2), None, (0,)), LeaderIsr(1, 8, (1, 2), 4))
    assert completion(full, ongoing, LeaderIsr(NO_LEADER, 7, (1, 2), 4), LIVE, 4) is None


def test_topic_znode_keeps_reassignments_and_id() -> None:
    tid = zkpaths.new_topic_id()
    data = zkpaths.encode_topic_assignment({0: [0, 1], 1: [1, 2]}, tid)
    moved = zkpaths.with_reassignment(data, 0, [1, 2, 0], [2], [0])
    assert zkpaths.decode_topic_assignment(moved) == {0: [1, 2, 0], 1: [1, 2]}
    assert zkpaths.decode_topic_reassignments(moved) == {0: ((2,), (0,))}
    assert zkpaths.decode_topic_id(moved) == tid
    done = zkpaths.with_reassignment(moved, 0, [1, 2], [], [])
    assert zkpaths.decode_topic_reassignments(done) == {} and zkpaths.decode_topic_assignment(done)[0] == [1, 2]


def test_throttled_replicas_and_quota() -> None:
    assert parse_throttled_replicas("*") == ALL
    assert parse_throttled_replicas(" 0:1, 1:2 ,") == frozenset({(0, 1), (1, 2)})
    assert parse_throttled_replicas("") == frozenset()
    for bad in ("0", "a:1", "0:-1", "0:1:2"):
        with pytest.raises(ValueError):
            parse_throttled_replicas(bad)
    assert is_throttled("0:1", 0, 1) and not is_throttled("0:1", 0, 2) and is_throttled("*", 5, 7)
    assert not is_throttled(None, 0, 1) and not is_throttled("junk", 0, 1)
    q = ReplicationQuota(num_samples=2, window_ms=1000)
    assert q.allowance(None, 0) is None
    assert q.allowance(1000, 0) == 1000  # ALLOWANCE: one second's worth
    q.record(1500, 0)
    assert q.allowance(1000, 100) == 0  # EXCEEDED: 1500 B over at least 1 s
    assert q.allowance(1000, 2500) == 1000  # the window moved on


def test_r6_stray_replicas_are_the_partitions_assigned_elsewhere() -> None:
    from hmbclient.broker.controller.reassignment import stray_replicas

    local = [("moved", 0), ("moved", 1), ("kept", 0), ("gone", 0), ("shrunk", 3)]
    assignments = {"moved": [(1, 2), (0, 1)], "kept": [(2, 0)], "gone": None, "shrunk": [(1, 2)]}
    # moved-0 no longer names broker 0; an unknown topic or partition is topic deletion's business
    assert stray_replicas(0, local, assignments) == [("moved", 0)]
    assert stray_replicas(2, local, assignments) == [("moved", 1)]
