"""The group coordinator: the pure state machine with an injected clock (no socket), the shell
with its purgatories driven by a fake clock, the group records in ``__consumer_offsets``, and the
wire: bad input answered with Kafka's error codes and the group unharmed, persistence across a
restart, and a coordinator move in a three-broker cluster."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.broker.coordinator import state
from hmbclient.broker.coordinator.coordinator import GroupCoordinator
from hmbclient.broker.coordinator.state import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    TRANSITIONS,
    AwaitHeartbeat,
    AwaitJoin,
    AwaitSync,
    CheckJoin,
    Group,
    GroupConfig,
    GroupRecord,
    GroupState,
    IllegalStateTransition,
    JoinReply,
    JoinRequest,
    MemberRecord,
    StoreGroup,
    SyncReply,
    SyncRequest,
)
from hmbclient.broker.offset_manager import (
    OFFSETS_TOPIC,
    decode_group_key,
    decode_group_value,
    encode_group_key,
    encode_group_value,
    partition_for_group,
)
from hmbclient.errors import ErrorCode
from hmbclient.protocol import records
from hmbclient.protocol.api import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from hmbclient.protocol.api.consumer_protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from .conftest import RawClient, wait_until

pytestmark = pytest.mark.timeout(120)

CONFIG = GroupConfig(min_session_timeout_ms=1_000, max_session_timeout_ms=30_000, initial_rebalance_delay_ms=3_000)
META = ConsumerProtocolMemberMetadata[0](topics=["events"], user_data=None).encode()


def join_req(member_id: str = "", *, waiter: Any = None, new_id: str | None = None, session: int = 10_000, rebalance: int = 20_000, protocol_type: str = "consumer", protocols: tuple[tuple[str, bytes], ...] = (("range", META),), v4: bool = False) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=protocol_type,
        protocols=protocols,
        new_member_id=new_id or f"c-{uuid.uuid4()}",
        require_known_member_id=v4,
        waiter=waiter,
    )


def replies(effects: list[state.Effect]) -> dict[Any, Any]:
    """waiter -> result of every answer in ``effects``."""
    return {e.waiter: e.result for e in effects if isinstance(e, JoinReply | SyncReply)}


def of(effects: list[state.Effect], kind: type) -> list[Any]:
    return [e for e in effects if isinstance(e, kind)]


def stable_group(n: int = 2, now: int = 0) -> tuple[Group, list[str]]:
    """A Stable group of ``n`` members at generation 1 (joined, synced, stored)."""
    group: Group | None = None
    ids = [f"m{i}" for i in range(n)]
    for i, member_id in enumerate(ids):
        group, _ = state.join_group(group, "g", join_req(waiter=f"j{i}", new_id=member_id), CONFIG, now)
    assert group is not None
    effects = state.complete_join(group, group.join_epoch, now)
    assert group.state is GroupState.COMPLETING_REBALANCE
    leader = group.leader_id
    assert leader is not None
    for member_id in ids:
        effects = state.sync_group(group, SyncRequest(member_id, 1, {m: m.encode() for m in ids} if member_id == leader else {}, waiter=f"s-{member_id}"), now)
    (store,) = of(state.sync_group(group, SyncRequest(leader, 1, {m: m.encode() for m in ids}, waiter=f"s-{leader}"), now), StoreGroup)
    effects = state.group_stored(group, 1, store.assignment, ErrorCode.NONE, now)
    assert group.state is GroupState.STABLE
    assert {w: r.assignment for w, r in replies(effects).items()} == {f"s-{m}": m.encode() for m in ids}
    return group, ids


def snapshot(group: Group) -> tuple[Any, ...]:
    return (group.state, group.generation_id, group.leader_id, tuple(group.members), group.protocol_name, tuple(m.assignment for m in group.members.values()))


# -- the transition table ----------------------------------------------------------------------------------


def test_transitions_are_kafkas_and_nothing_else() -> None:
    expected = {
        ("Empty", "PreparingRebalance"), ("Empty", "Dead"),
        ("PreparingRebalance", "CompletingRebalance"), ("PreparingRebalance", "Empty"), ("PreparingRebalance", "Dead"),
        ("CompletingRebalance", "Stable"), ("CompletingRebalance", "PreparingRebalance"), ("CompletingRebalance", "Dead"),
        ("Stable", "PreparingRebalance"), ("Stable", "Dead"),
        ("Dead", "Dead"),
    }  # fmt: skip
    assert {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets} == expected
    for source, target in itertools.product(GroupState, GroupState):
        group = Group("g", state=source)
        if target in TRANSITIONS[source]:
            group.transition_to(target, 5)
            assert group.state is target and group.state_timestamp_ms == 5
        else:
            with pytest.raises(IllegalStateTransition):
                group.transition_to(target, 5)
            assert group.state is source


# -- JoinGroup ---------------------------------------------------------------------------------------------


def test_first_member_waits_the_initial_delay_then_leads_generation_1() -> None:
    group, effects = state.join_group(None, "g", join_req(waiter="w", new_id="m0"), CONFIG, now_ms=100)
    assert group is not None and group.state is GroupState.PREPARING_REBALANCE
    (await_join,) = of(effects, AwaitJoin)
    assert await_join.initial and await_join.delay_ms == 3_000 and await_join.remaining_ms == 17_000
    assert not replies(effects)  # parked
    # The initial delay never completes early, even with every member joined.
    assert state.join_is_complete(group, await_join.epoch)
    effects = state.initial_delay_done(group, await_join.epoch, 3_000, 17_000, CONFIG, now_ms=3_100)
    result = replies(effects)["w"]
    assert (result.error, result.generation_id, result.leader_id, result.member_id, result.protocol_name) == (ErrorCode.NONE, 1, "m0", "m0", "range")
    assert result.members == (("m0", None, META),)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert of(effects, AwaitSync)[0].generation_id == 1


def test_members_arriving_during_the_initial_delay_extend_it_up_to_the_rebalance_timeout() -> None:
    group, effects = state.join_group(None, "g", join_req(waiter="a", new_id="a", rebalance=5_000), CONFIG, 0)
    assert group is not None
    first = of(effects, AwaitJoin)[0]
    state.join_group(group, "g", join_req(waiter="b", new_id="b", rebalance=5_000), CONFIG, 1_000)
    effects = state.initial_delay_done(group, first.epoch, first.delay_ms, first.remaining_ms, CONFIG, 3_000)
    (second,) = of(effects, AwaitJoin)
    assert second.initial and second.delay_ms == 2_000 and second.remaining_ms == 0
    assert state.join_is_stale(group, first.epoch) and not state.join_is_stale(group, second.epoch)
    effects = state.initial_delay_done(group, second.epoch, second.delay_ms, second.remaining_ms, CONFIG, 5_000)
    assert {w: r.generation_id for w, r in replies(effects).items()} == {"a": 1, "b": 1}
    assert replies(effects)["a"].members and not replies(effects)["b"].members  # only the leader gets them


def test_member_id_required_from_v4_then_the_member_joins_with_its_id() -> None:
    group, effects = state.join_group(None, "g", join_req(waiter="w1", new_id="c-1", v4=True), CONFIG, 0)
    assert group is not None and group.state is GroupState.EMPTY and group.pending_members == {"c-1"}
    assert (replies(effects)["w1"].error, replies(effects)["w1"].member_id) == (ErrorCode.MEMBER_ID_REQUIRED, "c-1")
    (pending,) = of(effects, AwaitHeartbeat)
    assert pending.pending and pending.delay_ms == 10_000
    group, effects = state.join_group(group, "g", join_req("c-1", waiter="w2", v4=True), CONFIG, 10)
    assert group is not None and group.has("c-1") and not group.pending_members
    assert group.state is GroupState.PREPARING_REBALANCE and not replies(effects)
    assert state.heartbeat_is_moot(group, "c-1", pending.due_ms, pending=True)


def test_a_pending_member_id_that_never_joins_expires() -> None:
    group, effects = state.join_group(None, "g", join_req(waiter="w1", new_id="c-1", v4=True), CONFIG, 0)
    assert group is not None
    (pending,) = of(effects, AwaitHeartbeat)
    state.heartbeat_expired(group, "c-1", pending.due_ms, True, 10_000)
    assert not group.pending_members
    _, effects = state.join_group(group, "g", join_req("c-1", waiter="w2", v4=True), CONFIG, 10_001)
    assert replies(effects)["w2"].error == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_completes_when_every_known_member_rejoined() -> None:
    group, ids = stable_group(2)
    _, effects = state.join_group(group, "g", join_req(ids[0], waiter="r0"), CONFIG, 50)  # the leader rejoins
    assert group.state is GroupState.PREPARING_REBALANCE
    (await_join,) = of(effects, AwaitJoin)
    assert await_join.delay_ms == 20_000 and not await_join.initial
    assert not state.join_is_complete(group, await_join.epoch)
    state.join_group(group, "g", join_req(ids[1], waiter="r1"), CONFIG, 60)
    assert state.join_is_complete(group, await_join.epoch)
    effects = state.complete_join(group, await_join.epoch, 60)
    assert {w: r.generation_id for w, r in replies(effects).items()} == {"r0": 2, "r1": 2}


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() -> None:
    group, ids = stable_group(3)
    other = ConsumerProtocolMemberMetadata[0](topics=["events", "more"], user_data=None).encode()
    _, effects = state.join_group(group, "g", join_req(ids[1], waiter="r1", protocols=(("range", other),)), CONFIG, 100)
    epoch = of(effects, AwaitJoin)[0].epoch
    effects = state.complete_join(group, epoch, 20_100)  # the rebalance timeout ran out
    assert list(group.members) == [ids[1]] and group.leader_id == ids[1]
    result = replies(effects)["r1"]
    assert (result.generation_id, result.leader_id, [m[0] for m in result.members]) == (2, ids[1], [ids[1]])


def test_rebalance_timeout_of_join_v0_is_the_session_timeout_and_the_group_takes_the_largest() -> None:
    group, _ = state.join_group(None, "g", join_req(waiter="a", new_id="a", session=7_000, rebalance=7_000), CONFIG, 0)
    assert group is not None
    state.join_group(group, "g", join_req(waiter="b", new_id="b", session=7_000, rebalance=12_000), CONFIG, 0)
    assert group.rebalance_timeout_ms == 12_000


def test_follower_rejoining_a_stable_group_with_the_same_metadata_gets_the_generation_without_a_rebalance() -> None:
    group, ids = stable_group(2)
    follower = ids[1]
    _, effects = state.join_group(group, "g", join_req(follower, waiter="f"), CONFIG, 10)
    assert group.state is GroupState.STABLE
    assert (replies(effects)["f"].generation_id, replies(effects)["f"].members) == (1, ())


def test_follower_with_new_metadata_makes_the_group_rebalance() -> None:
    group, ids = stable_group(2)
    other = ConsumerProtocolMemberMetadata[0](topics=["events", "more"], user_data=None).encode()
    state.join_group(group, "g", join_req(ids[1], waiter="f", protocols=(("range", other),)), CONFIG, 10)
    assert group.state is GroupState.PREPARING_REBALANCE and group.generation_id == 1


@pytest.mark.parametrize(
    "bad,error",
    [
        ({"session": 999}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"session": 30_001}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"protocol_type": "connect"}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ({"protocols": (("roundrobin", META),)}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ],
    ids=["session-too-small", "session-too-large", "other-protocol-type", "no-common-protocol"],
)
def test_bad_joins_are_refused_and_the_group_is_unharmed(bad: dict[str, Any], error: int) -> None:
    group, _ = stable_group(2)
    before = snapshot(group)
    _, effects = state.join_group(group, "g", join_req(waiter="x", **bad), CONFIG, 10)
    assert replies(effects)["x"].error == error
    assert snapshot(group) == before and not of(effects, AwaitJoin)


@pytest.mark.parametrize("protocol_type,protocols", [("", (("range", META),)), ("consumer", ())], ids=["no-protocol-type", "no-protocols"])
def test_an_empty_group_refuses_a_join_without_protocol_type_or_protocols(protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> None:
    group, effects = state.join_group(None, "g", join_req(waiter="x", protocol_type=protocol_type, protocols=protocols), CONFIG, 0)
    assert replies(effects)["x"].error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert group is not None and not group.members and group.state is GroupState.EMPTY


def test_join_with_a_member_id_the_coordinator_never_gave_out() -> None:
    group, effects = state.join_group(None, "g", join_req("ghost", waiter="x"), CONFIG, 0)
    assert group is None and replies(effects)["x"].error == ErrorCode.UNKNOWN_MEMBER_ID
    group, _ = stable_group(2)
    before = snapshot(group)
    _, effects = state.join_group(group, "g", join_req("ghost", waiter="x"), CONFIG, 0)
    assert replies(effects)["x"].error == ErrorCode.UNKNOWN_MEMBER_ID and snapshot(group) == before


def test_a_newer_join_of_the_same_member_answers_the_older_one() -> None:
    group, ids = stable_group(2)
    state.join_group(group, "g", join_req(ids[0], waiter="old"), CONFIG, 10)
    _, effects = state.join_group(group, "g", join_req(ids[0], waiter="new"), CONFIG, 20)
    assert replies(effects)["old"].error == ErrorCode.REBALANCE_IN_PROGRESS
    assert group.members[ids[0]].join_waiter == "new"


# -- SyncGroup ---------------------------------------------------------------------------------------------


def test_followers_wait_for_the_leader_and_the_assignment_is_given_only_once_stored() -> None:
    group: Group | None = None
    for member_id in ("a", "b"):
        group, _ = state.join_group(group, "g", join_req(waiter=member_id, new_id=member_id), CONFIG, 0)
    assert group is not None
    state.complete_join(group, group.join_epoch, 0)
    effects = state.sync_group(group, SyncRequest("b", 1, {}, waiter="sb"), 1)
    assert not replies(effects) and group.members["b"].awaiting_sync
    effects = state.sync_group(group, SyncRequest("a", 1, {"a": b"A", "b": b"B", "stranger": b"?"}, waiter="sa"), 2)
    (store,) = of(effects, StoreGroup)
    assert not replies(effects) and group.state is GroupState.COMPLETING_REBALANCE
    assert dict(store.assignment) == {"a": b"A", "b": b"B"}
    assert [(m.member_id, m.assignment) for m in store.record.members] == [("a", b"A"), ("b", b"B")]
    effects = state.group_stored(group, 1, store.assignment, ErrorCode.NONE, 3)
    assert {w: (r.error, r.assignment) for w, r in replies(effects).items()} == {"sa": (0, b"A"), "sb": (0, b"B")}
    assert group.state is GroupState.STABLE


def test_a_failed_store_sends_every_member_back_to_join() -> None:
    group: Group | None = None
    for member_id in ("a", "b"):
        group, _ = state.join_group(group, "g", join_req(waiter=member_id, new_id=member_id), CONFIG, 0)
    assert group is not None
    state.complete_join(group, group.join_epoch, 0)
    state.sync_group(group, SyncRequest("b", 1, {}, waiter="sb"), 1)
    (store,) = of(state.sync_group(group, SyncRequest("a", 1, {"a": b"A"}, waiter="sa"), 1), StoreGroup)
    effects = state.group_stored(group, 1, store.assignment, ErrorCode.NOT_COORDINATOR, 2)
    assert {w: r.error for w, r in replies(effects).items()} == {"sa": ErrorCode.NOT_COORDINATOR, "sb": ErrorCode.NOT_COORDINATOR}
    assert group.state is GroupState.PREPARING_REBALANCE and all(m.assignment == b"" for m in group.members.values())


def test_sync_errors_leave_the_group_unharmed() -> None:
    group, ids = stable_group(2)
    before = snapshot(group)
    cases = [
        (SyncRequest("ghost", 1, {"ghost": b"x"}, waiter="x"), ErrorCode.UNKNOWN_MEMBER_ID),
        (SyncRequest(ids[0], 0, {}, waiter="x"), ErrorCode.ILLEGAL_GENERATION),
        (SyncRequest(ids[0], 7, {}, waiter="x"), ErrorCode.ILLEGAL_GENERATION),
    ]
    for req, error in cases:
        assert replies(state.sync_group(group, req, 10))["x"].error == error
        assert snapshot(group) == before
    assert replies(state.sync_group(None, SyncRequest("a", 1, {}, waiter="x"), 10))["x"].error == ErrorCode.UNKNOWN_MEMBER_ID
    # A Stable group answers a SyncGroup with the member's assignment.
    result = replies(state.sync_group(group, SyncRequest(ids[1], 1, {}, waiter="x"), 10))["x"]
    assert (result.error, result.assignment) == (ErrorCode.NONE, ids[1].encode())


def test_sync_during_a_rebalance_says_rebalance_in_progress() -> None:
    group, ids = stable_group(2)
    state.join_group(group, "g", join_req(ids[0], waiter="j"), CONFIG, 10)
    assert replies(state.sync_group(group, SyncRequest(ids[1], 1, {}, waiter="x"), 11))["x"].error == ErrorCode.REBALANCE_IN_PROGRESS


def test_rebalance_while_completing_answers_the_waiting_syncs() -> None:
    group: Group | None = None
    for member_id in ("a", "b"):
        group, _ = state.join_group(group, "g", join_req(waiter=member_id, new_id=member_id), CONFIG, 0)
    assert group is not None
    state.complete_join(group, group.join_epoch, 0)
    state.sync_group(group, SyncRequest("b", 1, {}, waiter="sb"), 1)
    _, effects = state.join_group(group, "g", join_req(waiter="c", new_id="c"), CONFIG, 2)
    assert replies(effects)["sb"].error == ErrorCode.REBALANCE_IN_PROGRESS
    assert group.state is GroupState.PREPARING_REBALANCE


def test_members_that_never_sync_are_removed_when_the_delayed_sync_expires() -> None:
    group: Group | None = None
    for member_id in ("a", "b"):
        group, _ = state.join_group(group, "g", join_req(waiter=member_id, new_id=member_id), CONFIG, 0)
    assert group is not None
    state.complete_join(group, group.join_epoch, 0)
    state.sync_group(group, SyncRequest("b", 1, {}, waiter="sb"), 1)
    assert not state.sync_is_complete(group, 1)
    effects = state.sync_expired(group, 1, 20_000)
    assert list(group.members) == ["b"] and group.state is GroupState.PREPARING_REBALANCE
    assert replies(effects)["sb"].error == ErrorCode.REBALANCE_IN_PROGRESS


# -- Heartbeat, session timeout, LeaveGroup -------------------------------------------------------------------


def test_heartbeat_answers_by_state() -> None:
    group, ids = stable_group(2)
    assert state.heartbeat(group, ids[0], 1, 10)[0] == ErrorCode.NONE
    assert state.heartbeat(group, ids[0], 2, 10)[0] == ErrorCode.ILLEGAL_GENERATION
    assert state.heartbeat(group, "ghost", 1, 10)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert state.heartbeat(None, ids[0], 1, 10)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    state.join_group(group, "g", join_req(ids[0], waiter="j"), CONFIG, 10)
    assert state.heartbeat(group, ids[1], 1, 11)[0] == ErrorCode.REBALANCE_IN_PROGRESS


def test_session_timeout_removes_a_silent_member_and_rebalances() -> None:
    group, ids = stable_group(2, now=0)
    alive, silent = ids
    for member_id in ids:
        assert group.members[member_id].heartbeat_deadline_ms == 10_000
    # Heartbeats keep ``alive`` going; the delayed heartbeat due at 10 s re-arms for it.
    state.heartbeat(group, alive, 1, 6_000)
    effects = state.heartbeat_expired(group, alive, group.members[alive].heartbeat_due_ms, False, 10_000)
    assert group.has(alive) and of(effects, AwaitHeartbeat)[0].due_ms == 16_000
    effects = state.heartbeat_expired(group, silent, group.members[silent].heartbeat_due_ms, False, 10_000)
    assert not group.has(silent) and group.state is GroupState.PREPARING_REBALANCE
    assert of(effects, AwaitJoin)


def test_a_stale_delayed_heartbeat_does_nothing() -> None:
    group, ids = stable_group(2, now=0)
    member = group.members[ids[0]]
    assert state.heartbeat_is_moot(group, ids[0], member.heartbeat_due_ms - 1, False)
    assert state.heartbeat_expired(group, ids[0], member.heartbeat_due_ms - 1, False, 99_999) == []
    assert group.has(ids[0])


def test_a_new_member_parked_in_join_is_dropped_after_the_new_member_timeout_only() -> None:
    group, ids = stable_group(1, now=0)
    _, effects = state.join_group(group, "g", join_req(waiter="n", new_id="new"), CONFIG, 100)
    beat = next(e for e in of(effects, AwaitHeartbeat) if e.member_id == "new")
    assert beat.delay_ms == NEW_MEMBER_JOIN_TIMEOUT_MS
    effects = state.heartbeat_expired(group, "new", beat.due_ms, False, 100 + NEW_MEMBER_JOIN_TIMEOUT_MS)
    assert not group.has("new") and replies(effects)["n"].error == ErrorCode.UNKNOWN_MEMBER_ID
    assert of(effects, CheckJoin)


def test_leave_group_rebalances_and_unknown_members_are_reported() -> None:
    group, ids = stable_group(3)
    error, member_errors, effects = state.leave_group(group, [ids[0], "ghost"], 10)
    assert (error, member_errors) == (ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])
    assert group.state is GroupState.PREPARING_REBALANCE and group.leader_id == ids[1]
    assert state.leave_group(None, ["x"], 10)[:2] == (ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID])


def test_last_member_leaving_empties_the_group_at_the_next_generation() -> None:
    group, ids = stable_group(1)
    _, _, effects = state.leave_group(group, ids, 10)
    epoch = of(effects, AwaitJoin)[0].epoch
    assert state.join_is_complete(group, epoch)
    effects = state.complete_join(group, epoch, 10)
    assert group.state is GroupState.EMPTY and group.generation_id == 2 and group.protocol_name is None
    (store,) = of(effects, StoreGroup)
    assert store.record.members == () and store.record.generation_id == 2


# -- offsets, deletion, unloading ------------------------------------------------------------------------


def test_offset_commit_rules() -> None:
    group, ids = stable_group(2)
    check = state.validate_offset_commit
    assert check(group, "g", 1, ids[0], 10)[0] == ErrorCode.NONE
    assert check(group, "g", 0, ids[0], 10)[0] == ErrorCode.ILLEGAL_GENERATION
    assert check(group, "g", 1, "ghost", 10)[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert check(group, "g", -1, "", 10)[0] == ErrorCode.UNKNOWN_MEMBER_ID  # a group with members takes member commits only
    created = check(None, "simple", -1, "", 10)
    assert created[0] == ErrorCode.NONE and created[1] is not None and created[1].state is GroupState.EMPTY
    assert check(None, "gone", 3, "m", 10)[0] == ErrorCode.ILLEGAL_GENERATION
    # A member's commit while the group is preparing a rebalance is taken (it counts as a
    # heartbeat); while the assignment is pending it is not.
    state.join_group(group, "g", join_req(ids[0], waiter="j"), CONFIG, 20)
    assert check(group, "g", 1, ids[1], 30)[0] == ErrorCode.NONE
    assert group.members[ids[1]].heartbeat_deadline_ms == 10_030
    state.join_group(group, "g", join_req(ids[1], waiter="k"), CONFIG, 40)
    state.complete_join(group, group.join_epoch, 40)
    assert check(group, "g", 2, ids[0], 50)[0] == ErrorCode.REBALANCE_IN_PROGRESS


def test_delete_group_rules() -> None:
    group, _ = stable_group(1)
    assert state.delete_group(group, 1) == ErrorCode.NON_EMPTY_GROUP and group.state is GroupState.STABLE
    assert state.delete_group(None, 1) == ErrorCode.GROUP_ID_NOT_FOUND
    empty = Group("e")
    assert state.delete_group(empty, 1) == ErrorCode.NONE and empty.state is GroupState.DEAD
    assert state.delete_group(empty, 2) == ErrorCode.GROUP_ID_NOT_FOUND


def test_unload_answers_parked_requests_not_coordinator() -> None:
    group, ids = stable_group(2)
    state.join_group(group, "g", join_req(ids[0], waiter="j0"), CONFIG, 10)
    effects = state.unload_group(group, ErrorCode.NOT_COORDINATOR, 11)
    assert replies(effects) == {"j0": state.JoinResult(ErrorCode.NOT_COORDINATOR, ids[0])}
    assert group.state is GroupState.DEAD
    assert replies(state.join_group(group, "g", join_req(ids[1], waiter="x"), CONFIG, 12)[1])["x"].error == ErrorCode.COORDINATOR_NOT_AVAILABLE


# -- group records -------------------------------------------------------------------------------------------


def _hand_encoded_v0(group: str) -> bytes:
    """GroupMetadataValue v0 built by hand from Kafka's schema (no timestamps, no rebalance timeout)."""
    import struct

    def s(x: str) -> bytes:
        return struct.pack(">h", len(x)) + x.encode()

    def b(x: bytes) -> bytes:
        return struct.pack(">i", len(x)) + x

    member = s("m-1") + s("client") + s("/10.0.0.1") + struct.pack(">i", 10_000) + b(META) + b(b"ASSIGN")
    return struct.pack(">h", 0) + s("consumer") + struct.pack(">i", 4) + s("range") + s("m-1") + struct.pack(">i", 1) + member


def test_group_record_roundtrip_and_older_versions() -> None:
    group, ids = stable_group(2, now=0)
    record = state.group_record(group, {m: group.members[m].assignment for m in ids})
    assert decode_group_value(encode_group_value(record)) == record
    assert decode_group_key(encode_group_key("g")) == "g"
    v0 = decode_group_value(_hand_encoded_v0("g"))
    assert v0 == GroupRecord("consumer", 4, "range", "m-1", -1, (MemberRecord("m-1", None, "client", "/10.0.0.1", 10_000, 10_000, META, b"ASSIGN"),))
    loaded, effects = state.load_group("g", v0, now_ms=500)
    assert loaded.state is GroupState.STABLE and loaded.generation_id == 4 and loaded.leader_id == "m-1"
    assert loaded.members["m-1"].assignment == b"ASSIGN" and loaded.members["m-1"].heartbeat_deadline_ms == 10_500
    assert of(effects, AwaitHeartbeat)
    assert state.load_group("h", None, 0)[0].state is GroupState.EMPTY


def test_a_large_assignment_survives_the_record() -> None:
    group, ids = stable_group(2, now=0)
    big = bytes(range(256)) * 2048  # 512 KiB
    record = state.group_record(group, {ids[0]: big, ids[1]: b""})
    assert decode_group_value(encode_group_value(record)).members[0].assignment == big


# -- the shell, with a fake clock and an in-memory store --------------------------------------------------------


class MemoryGroupStore:
    """A GroupStore keeping records in a list; ``fail_next`` makes the next store fail."""

    def __init__(self) -> None:
        self.records: list[tuple[str, GroupRecord | None]] = []
        self.fail_next: int = ErrorCode.NONE

    def group_status(self, group: str) -> int:
        return ErrorCode.NONE

    def partition_for(self, group: str) -> int:
        return 0

    def is_loading(self) -> bool:
        return False

    def store_group(self, group: str, record: GroupRecord, callback: Callable[[int], None]) -> None:
        error, self.fail_next = self.fail_next, ErrorCode.NONE
        if not error:
            self.records.append((group, record))
        callback(error)

    def delete_group(self, group: str, callback: Callable[[int], None]) -> None:
        self.records.append((group, None))
        callback(ErrorCode.NONE)


class Channel:
    def __init__(self) -> None:
        self.answers: list[Any] = []

    def send(self, response: Any) -> None:
        self.answers.append(response)

    def close(self, reason: str) -> None:
        raise AssertionError(reason)


class Header:
    def __init__(self, version: int, client_id: str = "test") -> None:
        self.api_version = version
        self.client_id = client_id


@pytest.fixture
def shell() -> Iterator[tuple[GroupCoordinator, MemoryGroupStore, list[int]]]:
    clock = [1_000]
    store = MemoryGroupStore()
    coordinator = GroupCoordinator(store, GroupConfig(1_000, 30_000, 500), now_ms=lambda: clock[0])
    coordinator.start(reapers=False)
    coordinator.load_partition(0, {})
    yield coordinator, store, clock
    coordinator.shutdown()


def _join(coordinator: GroupCoordinator, member_id: str = "", version: int = 5, session: int = 6_000) -> Channel:
    channel = Channel()
    fields = {"group_id": "g", "session_timeout_ms": session, "rebalance_timeout_ms": 9_000, "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer", "protocols": [("range", META)]}
    req = JoinGroupRequest[version].build(**fields)
    coordinator.handle_join_group(Header(version), JoinGroupRequest[version].decode(req.encode()), channel)
    return channel


def _sync(coordinator: GroupCoordinator, member_id: str, generation: int, assignments: Mapping[str, bytes] = {}) -> Channel:
    channel = Channel()
    req = SyncGroupRequest[3].build(group_id="g", generation_id=generation, member_id=member_id, group_instance_id=None, assignments=list(assignments.items()))
    coordinator.handle_sync_group(Header(3), SyncGroupRequest[3].decode(req.encode()), channel)
    return channel


def _heartbeat(coordinator: GroupCoordinator, member_id: str, generation: int) -> int:
    channel = Channel()
    req = HeartbeatRequest[3].build(group_id="g", generation_id=generation, member_id=member_id, group_instance_id=None)
    coordinator.handle_heartbeat(Header(3), HeartbeatRequest[3].decode(req.encode()), channel)
    return int(channel.answers[0].error_code)


def _tick(coordinator: GroupCoordinator, clock: list[int], ms: int) -> None:
    clock[0] += ms
    coordinator.advance_clock()


def test_shell_runs_a_rebalance_and_expires_a_silent_member(shell: tuple[GroupCoordinator, MemoryGroupStore, list[int]]) -> None:
    coordinator, store, clock = shell
    first = _join(coordinator)
    assert first.answers[0].error_code == ErrorCode.MEMBER_ID_REQUIRED
    a_id = first.answers[0].member_id
    a = _join(coordinator, a_id)
    b_first = _join(coordinator)
    b = _join(coordinator, b_first.answers[0].member_id)
    assert not a.answers and not b.answers  # parked: the initial rebalance delay
    _tick(coordinator, clock, 499)
    assert not a.answers
    _tick(coordinator, clock, 1)  # b arrived during the delay: it is extended once
    assert not a.answers
    _tick(coordinator, clock, 500)
    (ja,), (jb,) = a.answers, b.answers
    assert ja.generation_id == jb.generation_id == 1 and ja.leader == a_id and len(ja.members) == 2 and not jb.members
    b_id = jb.member_id
    sb = _sync(coordinator, b_id, 1)
    assert not sb.answers
    sa = _sync(coordinator, a_id, 1, {a_id: b"A", b_id: b"B"})
    assert sa.answers[0].assignment == b"A" and sb.answers[0].assignment == b"B"
    assert [r.generation_id for _, r in store.records if r is not None] == [1]
    # a heartbeats, b is silent: after b's session timeout the group rebalances without it.
    for _ in range(8):
        _tick(coordinator, clock, 1_000)
        assert _heartbeat(coordinator, a_id, 1) in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)
    group = coordinator.group("g")
    assert group is not None and list(group.members) == [a_id] and group.state is GroupState.PREPARING_REBALANCE
    assert _heartbeat(coordinator, a_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoin = _join(coordinator, a_id)
    assert rejoin.answers[0].generation_id == 2 and [m.member_id for m in rejoin.answers[0].members] == [a_id]
    assert _heartbeat(coordinator, b_id, 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_shell_delayed_join_waits_the_rebalance_timeout_for_a_member_that_does_not_rejoin(shell: tuple[GroupCoordinator, MemoryGroupStore, list[int]]) -> None:
    coordinator, _, clock = shell
    a = _join(coordinator, version=3)
    b = _join(coordinator, version=3)
    _tick(coordinator, clock, 500)
    _tick(coordinator, clock, 500)  # the initial delay, extended once for b
    a_id, b_id = a.answers[0].member_id, b.answers[0].member_id
    leader = a.answers[0].leader
    _sync(coordinator, b_id, 1)
    _sync(coordinator, a_id, 1, {a_id: b"A", b_id: b"B"})
    again = _join(coordinator, leader, version=3)  # the leader rejoins: the group rebalances
    assert not again.answers
    _tick(coordinator, clock, 5_000)  # heartbeats of the other member would say REBALANCE_IN_PROGRESS
    assert _heartbeat(coordinator, b_id if leader == a_id else a_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert not again.answers
    _tick(coordinator, clock, 4_000)  # the 9 s rebalance timeout: the other member is dropped
    assert again.answers[0].generation_id == 2 and [m.member_id for m in again.answers[0].members] == [leader]


def test_shell_answers_a_failed_store_and_the_group_recovers(shell: tuple[GroupCoordinator, MemoryGroupStore, list[int]]) -> None:
    coordinator, store, clock = shell
    a = _join(coordinator, version=1)
    _tick(coordinator, clock, 500)
    a_id = a.answers[0].member_id
    store.fail_next = ErrorCode.UNKNOWN_SERVER_ERROR
    assert _sync(coordinator, a_id, 1, {a_id: b"A"}).answers[0].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    again = _join(coordinator, a_id, version=1)
    _tick(coordinator, clock, 0)
    assert again.answers[0].generation_id == 2
    assert _sync(coordinator, a_id, 2, {a_id: b"A"}).answers[0].assignment == b"A"


def test_shell_unload_and_reload_keep_the_generation(shell: tuple[GroupCoordinator, MemoryGroupStore, list[int]]) -> None:
    coordinator, store, clock = shell
    a = _join(coordinator, version=2)
    _tick(coordinator, clock, 500)
    a_id = a.answers[0].member_id
    _sync(coordinator, a_id, 1, {a_id: b"A"})
    coordinator.unload_partition(0)
    assert _heartbeat(coordinator, a_id, 1) == ErrorCode.NOT_COORDINATOR
    last = [r for g, r in store.records if g == "g"][-1]
    coordinator.load_partition(0, {"g": last})
    assert _heartbeat(coordinator, a_id, 1) == ErrorCode.NONE
    assert _sync(coordinator, a_id, 1).answers[0].assignment == b"A"
    _tick(coordinator, clock, 6_001)  # no heartbeat after the reload: the session ends
    group = coordinator.group("g")
    assert group is not None and not group.members


def _answered(channel: Channel) -> None:
    wait_until(lambda: channel.answers, 5, "an answer")


def test_concurrent_joins_and_heartbeats_do_not_deadlock_with_the_reapers() -> None:
    store = MemoryGroupStore()
    coordinator = GroupCoordinator(store, GroupConfig(100, 30_000, 0))
    coordinator.start()
    coordinator.load_partition(0, {})
    stop = time.monotonic() + 3
    failures: list[BaseException] = []

    def member(n: int) -> None:
        try:
            while time.monotonic() < stop:
                j = _join(coordinator, version=3, session=200)
                _answered(j)
                ans = j.answers[0]
                if ans.error_code:
                    continue
                _answered(_sync(coordinator, ans.member_id, ans.generation_id, {m.member_id: b"x" for m in ans.members}))
                for _ in range(n % 3 + 1):
                    _heartbeat(coordinator, ans.member_id, ans.generation_id)
                if n % 2:
                    channel = Channel()
                    coordinator.handle_leave_group(Header(1), LeaveGroupRequest[1].build(group_id="g", member_id=ans.member_id), channel)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    coordinator.shutdown()
    assert not any(t.is_alive() for t in threads), "a member thread hangs (deadlock?)"
    assert not failures, failures


# -- on the wire -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        port=0,
        log_dir=str(tmp_path_factory.mktemp("groups")),
        num_partitions=2,
        group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=1_000,
        group_max_session_timeout_ms=60_000,
    ) as b:
        yield b


def _wire_join(client: RawClient, group: str, member_id: str = "", *, version: int = 5, session: int = 10_000, protocol_type: str = "consumer", protocols: list[tuple[str, bytes]] | None = None) -> Any:
    fields = {
        "group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 10_000, "member_id": member_id, "group_instance_id": None,
        "protocol_type": protocol_type, "protocols": protocols if protocols is not None else [("range", META)],
    }  # fmt: skip
    return client.request(JoinGroupRequest[version].build(**fields))


def _coordinator_ready(client: RawClient, group: str) -> None:
    def found() -> bool:
        return client.request(FindCoordinatorRequest[2](key=group, key_type=0)).error_code == 0 and _wire_join(client, group, version=4, session=10).error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    wait_until(found, 20, "the coordinator")


def _stable_wire_group(client: RawClient, group: str) -> tuple[str, int]:
    _coordinator_ready(client, group)
    first = _wire_join(client, group)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = _wire_join(client, group, first.member_id)
    assert joined.error_code == 0 and joined.leader == joined.member_id
    member_id, generation = joined.member_id, joined.generation_id
    assignment = ConsumerProtocolMemberAssignment[0](assigned_partitions=[("events", [0, 1])], user_data=None).encode()
    synced = client.request(SyncGroupRequest[3].build(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None, assignments=[(member_id, assignment)]))
    assert synced.error_code == 0 and synced.assignment == assignment
    return member_id, generation


def _describe(client: RawClient, group: str) -> Any:
    return client.request(DescribeGroupsRequest[4](groups=[group], include_authorized_operations=False)).groups[0]


def test_wire_bad_input_is_answered_with_kafkas_codes_and_the_group_is_unharmed(group_broker: EmbeddedBroker) -> None:
    with RawClient(group_broker.host, group_broker.port) as client:
        member_id, generation = _stable_wire_group(client, "wire-bad")
        before = _describe(client, "wire-bad")
        assert before.group_state == "Stable" and [m.member_id for m in before.members] == [member_id]
        assert _wire_join(client, "wire-bad", protocol_type="connect").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _wire_join(client, "wire-bad", protocols=[("roundrobin", META)]).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert _wire_join(client, "wire-bad", session=999).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert _wire_join(client, "wire-bad", session=60_001).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert _wire_join(client, "wire-bad", "never-given-out").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        sync = SyncGroupRequest[1]
        assert client.request(sync.build(group_id="wire-bad", generation_id=generation, member_id="stranger", assignments=[])).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert client.request(sync.build(group_id="wire-bad", generation_id=generation - 1, member_id=member_id, assignments=[])).error_code == ErrorCode.ILLEGAL_GENERATION
        assert client.request(HeartbeatRequest[0].build(group_id="wire-bad", generation_id=generation + 5, member_id=member_id)).error_code == ErrorCode.ILLEGAL_GENERATION
        assert client.request(HeartbeatRequest[0].build(group_id="", generation_id=generation, member_id=member_id)).error_code == ErrorCode.INVALID_GROUP_ID
        stale_commit = OffsetCommitRequest[2].build(group_id="wire-bad", generation_id=generation - 1, member_id=member_id, retention_time_ms=-1, topics=[("events", [(0, 5, "")])])
        assert client.request(stale_commit).topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
        stranger_commit = OffsetCommitRequest[7].build(group_id="wire-bad", generation_id=generation, member_id="stranger", group_instance_id=None, topics=[("events", [(0, 5, -1, "")])])
        assert client.request(stranger_commit).topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert client.request(DeleteGroupsRequest[1](groups_names=["wire-bad", "no-such-group"])).results == [("wire-bad", ErrorCode.NON_EMPTY_GROUP), ("no-such-group", ErrorCode.GROUP_ID_NOT_FOUND)]
        after = _describe(client, "wire-bad")
        assert (after.group_state, [m.member_id for m in after.members], after.members[0].member_assignment) == ("Stable", [member_id], before.members[0].member_assignment)
        assert client.request(HeartbeatRequest[1].build(group_id="wire-bad", generation_id=generation, member_id=member_id)).error_code == 0
        good_commit = OffsetCommitRequest[7].build(group_id="wire-bad", generation_id=generation, member_id=member_id, group_instance_id=None, topics=[("events", [(0, 5, -1, "")])])
        assert client.request(good_commit).topics[0].partitions[0].error_code == 0
        # Leave, then the group is Empty and can be deleted (offsets with it).
        assert client.request(LeaveGroupRequest[3].build(group_id="wire-bad", members=[(member_id, None)])).members[0].error_code == 0
        wait_until(lambda: _describe(client, "wire-bad").group_state == "Empty", 10, "the group empties")
        assert client.request(DeleteGroupsRequest[0](groups_names=["wire-bad"])).results == [("wire-bad", 0)]
        fetched = client.request(OffsetFetchRequest[5].build(group_id="wire-bad", topics=None))
        assert fetched.topics == [] and _describe(client, "wire-bad").group_state == "Dead"


def test_wire_large_assignment_is_stored_and_an_oversized_one_is_refused(group_broker: EmbeddedBroker) -> None:
    with RawClient(group_broker.host, group_broker.port) as client:
        _coordinator_ready(client, "wire-big")
        first = _wire_join(client, "wire-big", version=3)
        member_id, generation = first.member_id, first.generation_id
        large = b"\x5a" * (600 * 1024)  # under message.max.bytes: stored like any other
        synced = client.request(SyncGroupRequest[2].build(group_id="wire-big", generation_id=generation, member_id=member_id, assignments=[(member_id, large)]))
        assert synced.error_code == 0 and synced.assignment == large
        assert _describe(client, "wire-big").members[0].member_assignment == large
        # Over message.max.bytes (1 MB) but under the frame limit: the record cannot be stored,
        # the member gets Kafka's UNKNOWN_SERVER_ERROR and must rejoin; the group survives.
        again = _wire_join(client, "wire-big", member_id, version=3)
        assert again.error_code == 0 and again.generation_id == generation + 1
        oversized = b"\xa5" * (1_100 * 1024)
        refused = client.request(SyncGroupRequest[2].build(group_id="wire-big", generation_id=again.generation_id, member_id=member_id, assignments=[(member_id, oversized)]))
        assert refused.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        third = _wire_join(client, "wire-big", member_id, version=3)
        assert third.error_code == 0
        synced = client.request(SyncGroupRequest[2].build(group_id="wire-big", generation_id=third.generation_id, member_id=member_id, assignments=[(member_id, b"small")]))
        assert synced.error_code == 0 and synced.assignment == b"small"


def test_wire_list_and_describe(group_broker: EmbeddedBroker) -> None:
    with RawClient(group_broker.host, group_broker.port) as client:
        member_id, _ = _stable_wire_group(client, "wire-list")
        for v in (0, 1, 2):
            listed = client.request(ListGroupsRequest[v]())
            assert listed.error_code == 0 and ("wire-list", "consumer") in [tuple(g) for g in listed.groups]
        for v in range(5):
            req = DescribeGroupsRequest[v].build(groups=["wire-list", "nobody"], include_authorized_operations=False)
            described = client.request(req).groups
            assert [(g.group_id, g.group_state) for g in described] == [("wire-list", "Stable"), ("nobody", "Dead")]
            assert described[0].protocol_data == "range" and described[0].members[0].member_id == member_id
            assert described[0].members[0].client_host == "/127.0.0.1"


def test_group_comes_back_after_a_restart(tmp_path: Any) -> None:
    broker = EmbeddedBroker(port=0, log_dir=str(tmp_path), group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000)
    broker.start()
    try:
        with RawClient(broker.host, broker.port) as client:
            member_id, generation = _stable_wire_group(client, "restart")
            commit = OffsetCommitRequest[7].build(group_id="restart", generation_id=generation, member_id=member_id, group_instance_id=None, topics=[("events", [(1, 42, -1, "m")])])
            assert client.request(commit).topics[0].partitions[0].error_code == 0
        broker.stop()
        broker.start()
        with RawClient(broker.host, broker.port) as client:
            _coordinator_ready(client, "restart")
            described = _describe(client, "restart")
            assert (described.group_state, [m.member_id for m in described.members]) == ("Stable", [member_id])
            assert client.request(HeartbeatRequest[2].build(group_id="restart", generation_id=generation, member_id=member_id)).error_code == 0
            fetched = client.request(OffsetFetchRequest[5].build(group_id="restart", topics=[("events", [1])]))
            assert fetched.topics[0].partitions[0].offset == 42
            # The stored records are Kafka's: the log holds key version 2 and a decodable value.
            group_log = broker.broker.logs.get_or_create(OFFSETS_TOPIC, partition_for_group("restart", broker.config.offsets_topic_num_partitions))  # type: ignore[union-attr]
            found, _ = group_log.read(group_log.log_start_offset, 1 << 22, min_one_entry=True)
            assert found is not None
            stored = [decode_group_value(bytes(r.value)) for r in records.decode_records(found.read()) if r.key is not None and decode_group_key(bytes(r.key)) == "restart" and r.value is not None]
            assert stored and stored[-1].generation_id == generation and stored[-1].members[0].member_id == member_id
    finally:
        broker.close()


def test_coordinator_moves_with_the_offsets_partition_leader(zookeeper: Any, tmp_path: Any) -> None:
    connect = f"{zookeeper.connect}/gc-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(brokers=3, zookeeper_connect=connect, log_dir=str(tmp_path), num_partitions=2, offsets_topic_num_partitions=3, group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000) as cluster:
        cluster.await_brokers()
        boot = cluster.broker(0)
        with RawClient(boot.host, boot.port) as client:
            wait_until(lambda: client.request(FindCoordinatorRequest[1](key="moving", key_type=0)).error_code == 0, 30, "the offsets topic")
            cluster.await_isr(OFFSETS_TOPIC, timeout_s=30, size=3)
            coordinator = client.request(FindCoordinatorRequest[1](key="moving", key_type=0))
        old = next(b for b in cluster.brokers if b.broker_id == coordinator.node_id)
        with RawClient(old.host, old.port) as client:
            member_id, generation = _stable_wire_group(client, "moving")
        partition = partition_for_group("moving", 3)
        target = next(b.broker_id for b in cluster.brokers if b.broker_id != old.broker_id)
        cluster.move_leader(OFFSETS_TOPIC, partition, target)
        new = cluster.broker(target)
        with RawClient(old.host, old.port) as client:
            wait_until(lambda: client.request(HeartbeatRequest[0].build(group_id="moving", generation_id=generation, member_id=member_id)).error_code == ErrorCode.NOT_COORDINATOR, 20, "the old coordinator lets go")
        with RawClient(new.host, new.port) as client:
            def beats() -> bool:
                return client.request(HeartbeatRequest[0].build(group_id="moving", generation_id=generation, member_id=member_id)).error_code == 0

            wait_until(beats, 20, "the new coordinator knows the member")
            assert _describe(client, "moving").group_state == "Stable"
            assert client.request(FindCoordinatorRequest[0](group_id="moving")).node_id == target
