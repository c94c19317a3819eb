"""Static membership (KIP-345) in the coordinator's pure state machine, with an injected clock:
a restarted static member gets its assignment back under the same generation (no rebalance),
a zombie of a replaced member is fenced (FENCED_INSTANCE_ID) on every API, LeaveGroup by
instance id, a static member's session expiry rebalances, a rebalance keeps a static member that
has not rejoined yet, and the instance ids survive the group record."""

from __future__ import annotations

import uuid
from typing import Any

from hmbclient.broker.coordinator import state
from hmbclient.broker.coordinator.state import (
    Group,
    GroupConfig,
    GroupState,
    JoinReply,
    JoinRequest,
    StoreGroup,
    SyncReply,
    SyncRequest,
)
from hmbclient.errors import ErrorCode

CONFIG = GroupConfig(min_session_timeout_ms=1_000, max_session_timeout_ms=30_000, initial_rebalance_delay_ms=0)


def join_req(member_id: str = "", instance: str | None = None, *, waiter: Any = None, new_id: str | None = None, protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),)) -> JoinRequest:
    return JoinRequest(
        member_id=member_id, client_id="c", client_host="/127.0.0.1", session_timeout_ms=10_000,
        rebalance_timeout_ms=20_000, protocol_type="consumer", protocols=protocols,
        new_member_id=new_id or f"c-{uuid.uuid4()}", require_known_member_id=instance is None,
        group_instance_id=instance, waiter=waiter,
    )  # fmt: skip


def replies(effects: list[state.Effect]) -> dict[Any, Any]:
    return {e.waiter: e.result for e in effects if isinstance(e, JoinReply | SyncReply)}


def stable_static_group(now: int = 0) -> Group:
    """Stable at generation 1: static members s0 (id m0, the leader) and s1 (id m1), dynamic m2."""
    group: Group | None = None
    for i, instance in enumerate(("s0", "s1", None)):
        group, effects = state.join_group(group, "g", join_req("", instance, waiter=f"j{i}", new_id=f"m{i}"), CONFIG, now)
        if instance is None:  # a dynamic member first gets MEMBER_ID_REQUIRED
            assert replies(effects)[f"j{i}"].error == ErrorCode.MEMBER_ID_REQUIRED
            group, effects = state.join_group(group, "g", join_req(f"m{i}", waiter=f"j{i}"), CONFIG, now)
        else:  # a static one joins at once
            assert not any(r.error == ErrorCode.MEMBER_ID_REQUIRED for r in replies(effects).values())
    assert group is not None and group.static_members == {"s0": "m0", "s1": "m1"}
    state.complete_join(group, group.join_epoch, now)
    ids = ["m0", "m1", "m2"]
    assignment = {m: f"a-{m}".encode() for m in ids}
    for m in ids:
        effects = state.sync_group(group, SyncRequest(m, 1, assignment if m == "m0" else {}, waiter=f"s-{m}"), now)
    (store,) = [e for e in state.sync_group(group, SyncRequest("m0", 1, assignment, waiter="s-m0"), now) if isinstance(e, StoreGroup)]
    state.group_stored(group, 1, store.assignment, ErrorCode.NONE, now)
    assert group.state is GroupState.STABLE and group.leader_id == "m0"
    return group


def restart(group: Group, instance: str, new_id: str, now: int = 100, protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),)) -> list[state.Effect]:
    _, effects = state.join_group(group, "g", join_req("", instance, waiter="rejoin", new_id=new_id, protocols=protocols), CONFIG, now)
    return effects


def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance() -> None:
    group = stable_static_group()
    effects = restart(group, "s1", "m1-new")
    assert group.state is GroupState.STABLE and group.generation_id == 1
    (store,) = [e for e in effects if isinstance(e, StoreGroup)]
    assert store.static is not None and "m1-new" in {m.member_id for m in store.record.members}
    assert not replies(effects)  # answered once the new member id is persisted
    answered = replies(state.static_member_stored(group, store.static, ErrorCode.NONE, 110))
    result = answered["rejoin"]
    assert (result.error, result.member_id, result.generation_id, result.leader_id, result.members) == (ErrorCode.NONE, "m1-new", 1, "m0", ())
    assert list(group.members) == ["m0", "m1-new", "m2"] and group.static_members["s1"] == "m1-new"
    # SyncGroup of the new id in the same generation: the old member's assignment.
    sync = replies(state.sync_group(group, SyncRequest("m1-new", 1, {}, "s1", waiter="s"), 120))["s"]
    assert (sync.error, sync.assignment) == (ErrorCode.NONE, b"a-m1")
    # The others' heartbeats see no rebalance.
    assert state.heartbeat(group, "m0", 1, 130, "s0")[0] == ErrorCode.NONE
    assert state.heartbeat(group, "m2", 1, 130)[0] == ErrorCode.NONE


def test_the_restarted_leader_is_not_told_it_leads() -> None:
    group = stable_static_group()
    (store,) = [e for e in restart(group, "s0", "m0-new") if isinstance(e, StoreGroup)]
    assert store.static is not None
    result = replies(state.static_member_stored(group, store.static, ErrorCode.NONE, 110))["rejoin"]
    assert result.leader_id == "m0" != result.member_id and group.leader_id == "m0-new"


def test_a_failed_store_undoes_the_replacement() -> None:
    group = stable_static_group()
    (store,) = [e for e in restart(group, "s1", "m1-new") if isinstance(e, StoreGroup)]
    assert store.static is not None
    result = replies(state.static_member_stored(group, store.static, ErrorCode.NOT_COORDINATOR, 110))["rejoin"]
    assert result.error == ErrorCode.NOT_COORDINATOR
    assert list(group.members) == ["m0", "m1", "m2"] and group.static_members["s1"] == "m1"
    assert state.heartbeat(group, "m1", 1, 120, "s1")[0] == ErrorCode.NONE


def test_a_new_protocol_choice_rebalances() -> None:
    group = stable_static_group()
    # Only "roundrobin" from the restarted member: the group's choice would change.
    restart(group, "s1", "m1-new", protocols=(("range", b"meta"), ("roundrobin", b"meta")))
    assert group.state is GroupState.STABLE  # still range: every member has range
    group = stable_static_group()
    effects = restart(group, "s1", "m1-new", protocols=(("roundrobin", b"x"), ("range", b"meta")))
    assert group.state is GroupState.STABLE  # one vote for roundrobin, two for range
    assert any(isinstance(e, StoreGroup) for e in effects)


def test_the_zombie_of_a_replaced_member_is_fenced_everywhere() -> None:
    group = stable_static_group()
    (store,) = [e for e in restart(group, "s1", "m1-new") if isinstance(e, StoreGroup)]
    assert store.static is not None
    state.static_member_stored(group, store.static, ErrorCode.NONE, 110)
    assert state.heartbeat(group, "m1", 1, 120, "s1")[0] == ErrorCode.FENCED_INSTANCE_ID
    assert replies(state.sync_group(group, SyncRequest("m1", 1, {}, "s1", waiter="z"), 120))["z"].error == ErrorCode.FENCED_INSTANCE_ID
    _, effects = state.join_group(group, "g", join_req("m1", "s1", waiter="zj"), CONFIG, 120)
    assert replies(effects)["zj"].error == ErrorCode.FENCED_INSTANCE_ID
    assert state.validate_offset_commit(group, "g", 1, "m1", 120, "s1")[0] == ErrorCode.FENCED_INSTANCE_ID
    assert state.leave_group(group, [("m1", "s1")], 120)[1] == [ErrorCode.FENCED_INSTANCE_ID]
    # An instance id the group does not know.
    assert state.heartbeat(group, "m2", 1, 120, "nobody")[0] == ErrorCode.UNKNOWN_MEMBER_ID
    assert group.state is GroupState.STABLE and group.generation_id == 1


def test_a_parked_request_of_the_replaced_member_is_answered_fenced() -> None:
    group = stable_static_group()
    _, effects = state.join_group(group, "g", join_req("m0", "s0", waiter="lead"), CONFIG, 100)  # the leader rejoins
    assert group.state is GroupState.PREPARING_REBALANCE
    _, effects = state.join_group(group, "g", join_req("m1", "s1", waiter="old"), CONFIG, 100)
    effects = restart(group, "s1", "m1-new", now=110)
    assert replies(effects)["old"].error == ErrorCode.FENCED_INSTANCE_ID
    assert group.members["m1-new"].join_waiter == "rejoin"


def test_leave_by_instance_id_and_session_expiry_rebalance() -> None:
    group = stable_static_group()
    error, errors, _ = state.leave_group(group, [("", "s1"), ("", "nobody")], 100)
    assert (error, errors) == (ErrorCode.NONE, [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID])
    assert group.state is GroupState.PREPARING_REBALANCE and "s1" not in group.static_members

    group = stable_static_group()
    member = group.members["m1"]
    effects = state.heartbeat_expired(group, "m1", member.heartbeat_due_ms, False, member.heartbeat_deadline_ms)
    assert "m1" not in group.members and "s1" not in group.static_members
    assert group.state is GroupState.PREPARING_REBALANCE and effects


def test_a_rebalance_keeps_a_static_member_that_has_not_rejoined() -> None:
    group = stable_static_group()
    state.join_group(group, "g", join_req("m0", "s0", waiter="j0"), CONFIG, 100)
    state.join_group(group, "g", join_req("m2", waiter="j2"), CONFIG, 100)
    effects = state.complete_join(group, group.join_epoch, 200)  # the rebalance timeout: m1 silent
    assert list(group.members) == ["m0", "m1", "m2"] and group.generation_id == 2
    assert set(replies(effects)) == {"j0", "j2"}
    # Its session runs on; the delayed sync removes it if it does not sync this generation.
    assert group.members["m1"].heartbeat_deadline_ms == 200 + 10_000 and "m1" in group.pending_sync_members
    state.sync_expired(group, 2, 20_300)
    assert "m1" not in group.members and group.state is GroupState.PREPARING_REBALANCE


def test_instance_ids_survive_the_group_record() -> None:
    group = stable_static_group()
    record = state.group_record(group, {m.member_id: m.assignment for m in group.members.values()})
    loaded, _ = state.load_group("g", record, 0)
    assert loaded.static_members == {"s0": "m0", "s1": "m1"}
    effects = restart(loaded, "s1", "m1-new")
    assert any(isinstance(e, StoreGroup) and e.static is not None for e in effects)
