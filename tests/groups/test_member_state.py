"""The rebalancer's state table (pure: no ZooKeeper): which events each member state accepts.

The loop's behaviour rests on these properties; the ZooKeeper tests in
``test_rebalance_zk.py`` exercise the same moves against a real server.
"""

from __future__ import annotations

import pytest

from rebalance.rebalancer import Event, IllegalTransition, MemberState, next_state

S, E = MemberState, Event
CONNECTION_EVENTS = (E.SUSPENDED, E.CONNECTED, E.LOST)


@pytest.mark.parametrize("state", list(MemberState))
def test_connection_events_and_close_are_accepted_in_every_state(state: MemberState) -> None:
    # kazoo's connection thread and close() must never meet an IllegalTransition.
    for event in (*CONNECTION_EVENTS, E.CLOSE, E.TRIGGER):
        next_state(state, event)
    assert next_state(state, E.CLOSE) is S.CLOSED


def test_a_round_outcome_is_refused_where_no_round_runs() -> None:
    for state in (S.NEW, S.STABLE, S.AWAITING_RELEASE, S.BACKING_OFF):
        for event in (E.ROUND_DONE, E.ROUND_INCOMPLETE, E.ROUND_FAILED):
            with pytest.raises(IllegalTransition):
                next_state(state, event)
    with pytest.raises(IllegalTransition):
        next_state(S.STABLE, E.START)


def test_round_outcomes_from_rebalancing() -> None:
    assert next_state(S.NEW, E.START) is S.REBALANCING
    assert next_state(S.REBALANCING, E.ROUND_DONE) is S.STABLE
    assert next_state(S.REBALANCING, E.ROUND_INCOMPLETE) is S.AWAITING_RELEASE
    assert next_state(S.REBALANCING, E.ROUND_FAILED) is S.BACKING_OFF
    for state in (S.STABLE, S.AWAITING_RELEASE, S.BACKING_OFF):
        assert next_state(state, E.TRIGGER) is S.REBALANCING
        assert next_state(state, E.ROUND_STARTED) is S.REBALANCING


def test_a_lost_session_is_left_only_by_recovery_or_close() -> None:
    others = [e for e in Event if e not in (E.SESSION_RESTORED, E.CLOSE)]
    assert all(next_state(S.LOST, e) is S.LOST for e in others)
    assert next_state(S.LOST, E.SESSION_RESTORED) is S.REBALANCING
    for state in MemberState:
        if state is not S.CLOSED:
            assert next_state(state, E.LOST) is S.LOST


def test_suspension_is_left_through_reconnection_and_verification() -> None:
    for event in (E.TRIGGER, E.ROUND_STARTED, E.ROUND_DONE, E.ROUND_FAILED):
        assert next_state(S.SUSPENDED, event) is S.SUSPENDED
        assert next_state(S.RECONNECTED, event) is S.RECONNECTED
    assert next_state(S.SUSPENDED, E.CONNECTED) is S.RECONNECTED
    assert next_state(S.RECONNECTED, E.OWNERS_VERIFIED) is S.REBALANCING
    assert next_state(S.RECONNECTED, E.SUSPENDED) is S.SUSPENDED


def test_closed_is_terminal() -> None:
    assert all(next_state(S.CLOSED, e) is S.CLOSED for e in Event)


def test_every_state_is_reachable_from_new() -> None:
    seen, todo = {S.NEW}, [S.NEW]
    while todo:
        state = todo.pop()
        for event in Event:
            try:
                nxt = next_state(state, event)
            except IllegalTransition:
                continue
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(MemberState)
