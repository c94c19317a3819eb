"""Transactional offset commits on the group side (broker/transaction/offsets.py): the labelled
cases, log order deciding between a transaction's offset and a plain commit, and replay of a
random offsets-partition history giving the same result as the live sequence that wrote it.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.broker.transaction.offsets import (
    Committed,
    GroupTxnOffsets,
    appended,
    complete,
    failed,
    has_pending,
    pending_producers,
    prepare,
    replay,
)

TP, TP2 = ("t", 0), ("t", 1)


def test_commit_makes_pending_offsets_committed_abort_drops_them() -> None:
    s = prepare(GroupTxnOffsets(), 7, {TP: 10, TP2: 20})  # A
    assert has_pending(s, TP) and pending_producers(s) == {7}
    s = appended(s, 7, [TP, TP2], 100)  # B
    s2, won = complete(s, 7, True, {})  # D
    assert won == {TP: Committed(10, 100), TP2: Committed(20, 100)}
    assert not has_pending(s2, TP) and s2.pending == {}
    s3, won = complete(s, 7, False, {})  # E
    assert won == {} and s3.pending == {}
    assert complete(s3, 7, True, {}) == (s3, {})  # nothing pending: nothing


def test_a_failed_append_drops_only_what_it_wrote() -> None:
    s = appended(prepare(GroupTxnOffsets(), 7, {TP: 10}), 7, [TP], 100)
    s = prepare(s, 8, {TP2: 5})
    s = prepare(s, 7, {TP2: 11})
    s = failed(s, 7, [TP2])  # C
    assert s.pending[7] == {TP: Committed(10, 100)}
    s = failed(s, 8, [TP2])
    assert 8 not in s.pending
    # an offset never appended is not committed by the marker
    s = prepare(s, 7, {TP2: 12})
    _, won = complete(s, 7, True, {})
    assert won == {TP: Committed(10, 100)}


def test_log_order_decides_against_a_plain_commit() -> None:
    s = appended(prepare(GroupTxnOffsets(), 7, {TP: 10, TP2: 20}), 7, [TP, TP2], 100)
    current = {TP: Committed(99, 150), TP2: Committed(1, 50)}  # TP committed plainly after the txn's record
    _, won = complete(s, 7, True, current)
    assert won == {TP2: Committed(20, 100)}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.sampled_from([TP, TP2]), st.integers(0, 99)),
        st.tuples(st.just("txn"), st.integers(1, 3), st.sampled_from([TP, TP2]), st.integers(0, 99)),
        st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(ops)
def test_replay_matches_the_live_sequence(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    live = GroupTxnOffsets()
    committed: dict[tuple[str, int], Committed] = {}
    log: list[tuple[int, bool, tuple]] = []  # type: ignore[type-arg]
    for off, step in enumerate(steps):
        if step[0] == "plain":
            _, tp, v = step
            committed[tp] = Committed(v, off)
            log.append((off, False, ("offset", -1, tp, v)))
        elif step[0] == "txn":
            _, pid, tp, v = step
            live = appended(prepare(live, pid, {tp: v}), pid, [tp], off)
            log.append((off, True, ("offset", pid, tp, v)))
        else:
            _, pid, ok = step
            live, won = complete(live, pid, ok, committed)
            committed.update(won)
            log.append((off, True, ("marker", pid, ok)))
    done, state = replay(log)
    assert done == committed
    assert state == live
    # and the expected result from first principles: per partition the last write in log order
    # among plain commits and committed transactions' records
    fate: dict[int, list[tuple[int, tuple[str, int], int]]] = {}
    expect: dict[tuple[str, int], Committed] = {}
    for off, step in enumerate(steps):
        if step[0] == "plain":
            expect[step[1]] = Committed(step[2], off)
        elif step[0] == "txn":
            fate.setdefault(step[1], []).append((off, step[2], step[3]))
        else:
            for o, tp, v in fate.pop(step[1], []):
                if step[2] and (tp not in expect or expect[tp].log_offset < o):  # type: ignore[operator]
                    expect[tp] = Committed(v, o)
    assert committed == expect
