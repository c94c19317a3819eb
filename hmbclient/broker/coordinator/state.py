"""The classic group protocol as a pure state machine (Kafka's GroupMetadata, MemberMetadata and
the decisions of its GroupCoordinator), with no I/O, no threads and no clock of its own.

Every decision is a function of ``(group, request, now_ms)``: it changes the :class:`Group` in
place and returns a list of *effects* (answers to send, delayed operations to start or re-check,
group records to persist) that the I/O shell (``coordinator.py``) carries out in order. Tests
call the same functions with their own clock and look at the effects; nothing here needs a socket.

States (Kafka's) and what moves a group between them; :data:`TRANSITIONS` is the one table that
:meth:`Group.transition_to` checks::

    Empty ──join of a new member──────────────────────► PreparingRebalance
    PreparingRebalance ──every member rejoined, or the rebalance timeout──► CompletingRebalance
    PreparingRebalance ──nobody left──────────────────► Empty
    CompletingRebalance ──the leader's SyncGroup is persisted──► Stable
    CompletingRebalance, Stable ──join with new metadata, the leader's join, a leave, a member's
                                  session or sync timeout──► PreparingRebalance
    any state ──the offsets partition moves away, DeleteGroups──► Dead

What each state answers: Empty takes joins (SyncGroup, Heartbeat: UNKNOWN_MEMBER_ID);
PreparingRebalance parks joins until the delayed join completes and answers heartbeats and
SyncGroup with REBALANCE_IN_PROGRESS; CompletingRebalance parks SyncGroup until the leader's
assignment is persisted and refuses offset commits with REBALANCE_IN_PROGRESS; Stable answers
SyncGroup with the member's assignment; Dead answers COORDINATOR_NOT_AVAILABLE (the group moved
or was deleted: find the coordinator again).

Invariants:

* every parked JoinGroup/SyncGroup (a member's ``join_waiter``/``sync_waiter``) is answered
  exactly once: by the rebalance, by an error when the member is removed or the group
  rebalances or unloads, or with REBALANCE_IN_PROGRESS when a newer request of the same member
  replaces it;
* a member's session is checked by one chain of delayed heartbeats (``heartbeat_due_ms`` names the
  live one; an older one finds itself stale and does nothing);
* the generation only grows; a generation's assignment reaches members only after the group record
  that holds it is persisted (:class:`StoreGroup`), so a coordinator that takes over after a
  failure knows the assignment its members were given.

Static membership (KIP-345, Kafka's rules): a member that names a ``group_instance_id``
(JoinGroup v5+) is *static*; the group maps each instance id to its current member id
(``Group.static_members``, rebuilt from the record when the group is loaded).

* Static join, no member id, instance unknown: added as a new member (no MEMBER_ID_REQUIRED
  round trip) and the group rebalances, as for a dynamic member.
* Static join, no member id, instance known (a restarted member): the old member is *replaced*:
  its parked JoinGroup/SyncGroup are answered FENCED_INSTANCE_ID, the member keeps its
  assignment under a new member id (and the leadership if it had it). In Stable, when the
  protocol the group would choose is unchanged, the group is persisted with the new member id
  (:class:`StoreGroup` with ``static``) and the member is answered with the *current*
  generation and the old leader id (so it never thinks it leads): **no rebalance**; if the
  store fails the replacement is undone and the member gets the store's error. In
  CompletingRebalance the group rebalances (the leader may be assigning to the old id); in
  PreparingRebalance the member simply takes part in the rebalance.
* A request naming an instance id mapped to another member id (a zombie of a replaced member)
  is answered FENCED_INSTANCE_ID: JoinGroup with a member id, SyncGroup, Heartbeat,
  OffsetCommit and LeaveGroup (Kafka's validateCurrentMember); an instance id not mapped at
  all gets UNKNOWN_MEMBER_ID.
* LeaveGroup may name a member by instance id alone (member id ""): the admin's removal.
* A static member that has not rejoined when a rebalance completes is kept (its session
  timeout, or the delayed sync, removes it); dynamic ones are removed. A static member's
  session expiry removes it and rebalances, like a dynamic member's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from hmbclient.errors import ErrorCode

__all__ = [
    "GroupState",
    "TRANSITIONS",
    "IllegalStateTransition",
    "GroupConfig",
    "Member",
    "Group",
    "JoinRequest",
    "JoinResult",
    "SyncRequest",
    "SyncResult",
    "MemberRecord",
    "GroupRecord",
    "Effect",
    "JoinReply",
    "SyncReply",
    "AwaitJoin",
    "CheckJoin",
    "AwaitHeartbeat",
    "CheckHeartbeat",
    "AwaitSync",
    "CheckSync",
    "StoreGroup",
    "StaticRejoin",
    "static_member_stored",
    "UNKNOWN_MEMBER_ID",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "join_group",
    "complete_join",
    "initial_delay_done",
    "join_is_complete",
    "join_is_stale",
    "sync_group",
    "group_stored",
    "sync_is_complete",
    "sync_expired",
    "heartbeat",
    "heartbeat_is_moot",
    "heartbeat_expired",
    "leave_group",
    "validate_offset_commit",
    "delete_group",
    "unload_group",
    "load_group",
    "rebalance",
    "group_record",
    "MemberSummary",
    "GroupSummary",
    "describe_group",
]

#: The member id of a member that has none yet (its first JoinGroup).
UNKNOWN_MEMBER_ID = ""

#: How long a new member's first JoinGroup may stay parked before the member is dropped (Kafka's
#: NewMemberJoinTimeoutMs): a client that gave up on a long rebalance and joined again must not
#: leave a defunct member behind that the rebalance waits for.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class GroupState(Enum):
    """Kafka's group states; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_E, _P, _C, _S, _D = GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD

#: state -> the states it may move to (Kafka's ``validPreviousStates``, read the other way).
TRANSITIONS: Mapping[GroupState, frozenset[GroupState]] = {
    _E: frozenset({_P, _D}),
    _P: frozenset({_C, _E, _D}),
    _C: frozenset({_S, _P, _D}),
    _S: frozenset({_P, _D}),
    _D: frozenset({_D}),
}


class IllegalStateTransition(RuntimeError):
    """A decision tried a move :data:`TRANSITIONS` does not allow (a bug, never the client's)."""


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the decisions need (``group.*`` in BrokerConfig)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 300_000
    initial_rebalance_delay_ms: int = 3_000
    #: consumer-protocol (KIP-848) groups, see :mod:`.consumer_group`
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    #: group.consumer.migration.policy: classic <-> consumer group conversions allowed
    consumer_migration_policy: str = "bidirectional"


@dataclass(eq=False)
class Member:
    """One member of a group (Kafka's MemberMetadata).

    ``protocols`` is the member's (name, metadata) list in its order of preference.
    ``join_waiter``/``sync_waiter`` are the shell's tokens for a parked JoinGroup/SyncGroup.
    ``heartbeat_deadline_ms`` is when the member's session ends unless it is heard from again;
    ``heartbeat_due_ms`` is the expiry of the one delayed heartbeat watching it (0: none).
    """

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    group_instance_id: str | None = None
    assignment: bytes = b""
    join_waiter: Any = None
    sync_waiter: Any = None
    is_new: bool = False
    heartbeat_deadline_ms: int = 0
    heartbeat_due_ms: int = 0

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise ValueError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: Iterable[tuple[str, bytes]]) -> bool:
        return tuple((n, bytes(m)) for n, m in protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(eq=False)
class Group:
    """One group's state (Kafka's GroupMetadata). Members keep their join order (the first
    member becomes the leader; when the leader leaves, the next oldest takes over)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: member ids handed out with MEMBER_ID_REQUIRED, not yet joined with them
    pending_members: set[str] = field(default_factory=set)
    #: members of this generation whose SyncGroup has not arrived yet
    pending_sync_members: set[str] = field(default_factory=set)
    #: a member joined during the initial rebalance delay (so the delay is extended)
    new_member_added: bool = False
    state_timestamp_ms: int = -1
    #: names the one live delayed join (a stale one completes without effect)
    join_epoch: int = 0
    #: group_instance_id -> member id of the static members
    static_members: dict[str, str] = field(default_factory=dict)

    # -- state ------------------------------------------------------------------------------------
    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value} is not allowed")
        self.state = target
        self.state_timestamp_ms = now_ms

    @property
    def can_rebalance(self) -> bool:
        return _P in TRANSITIONS[self.state]

    # -- members ----------------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.discard(member.member_id)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        if member is not None and member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member(self, group_instance_id: str | None) -> str | None:
        """The member id ``group_instance_id`` is mapped to (None: not a static member here)."""
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def is_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """``group_instance_id`` belongs to another member id (Kafka's isStaticMemberFenced)."""
        current = self.static_member(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str, effects: list[Effect]) -> Member:
        """The member of ``old_member_id`` continues as ``new_member_id`` (same assignment,
        same place in the join order, the leadership if it had it); whatever the old id had
        parked is answered FENCED_INSTANCE_ID."""
        member = self.members[old_member_id]
        if member.join_waiter is not None:
            effects.append(_join_error(member.join_waiter, ErrorCode.FENCED_INSTANCE_ID, old_member_id))
            member.join_waiter = None
        if member.sync_waiter is not None:
            effects.append(SyncReply(member.sync_waiter, SyncResult(ErrorCode.FENCED_INSTANCE_ID)))
            member.sync_waiter = None
        self.members = {(new_member_id if k == old_member_id else k): v for k, v in self.members.items()}
        member.member_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        # The old id's delayed heartbeat ends without effect (no member of that id); a chain
        # for the new id starts.
        member.heartbeat_due_ms = 0
        effects.append(CheckHeartbeat(old_member_id))
        return member

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def _candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            common &= {name for name, _ in m.protocols}
        return common

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        """Kafka's rule: an empty group takes any non-empty protocol type and protocol list; a
        group with members takes its own protocol type and a list sharing a protocol with
        every member."""
        names = set(names)
        if self.state is _E and not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self._candidate_protocols())

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (ties: the first in the
        leader's order among the most voted)."""
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name in votes if votes[name] == best)

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """``(member_id, group_instance_id, metadata of the chosen protocol)`` of every member,
        for the leader's JoinGroup answer."""
        assert self.protocol_name is not None
        return tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values())


# -- requests, results, records ----------------------------------------------------------------------


@dataclass(frozen=True)
class JoinRequest:
    """A JoinGroup as the decisions see it (any version).

    ``new_member_id`` is the id this member gets if it is new (the shell generates it, Kafka's
    ``client_id-uuid``, so the decisions stay deterministic); ``require_known_member_id`` is
    JoinGroup v4+ (a new member first gets MEMBER_ID_REQUIRED and its id, then joins with it).
    ``waiter`` is the shell's token for the answer.
    """

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    new_member_id: str
    require_known_member_id: bool = False
    group_instance_id: str | None = None
    waiter: Any = None


@dataclass(frozen=True)
class JoinResult:
    """The JoinGroup answer: ``members`` is filled for the leader only."""

    error: int
    member_id: str
    generation_id: int = -1
    protocol_name: str = ""
    leader_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncRequest:
    member_id: str
    generation_id: int
    assignments: Mapping[str, bytes]
    group_instance_id: str | None = None
    waiter: Any = None


@dataclass(frozen=True)
class SyncResult:
    error: int
    assignment: bytes = b""


class MemberRecord(NamedTuple):
    """One member in a group record (Kafka's GroupMetadataValue.MemberMetadata)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


class GroupRecord(NamedTuple):
    """A group as persisted in ``__consumer_offsets`` (Kafka's GroupMetadataValue)."""

    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


# -- effects ---------------------------------------------------------------------------------------


class Effect:
    """Something the shell must do after a decision (in the order the decision listed them)."""

    __slots__ = ()


@dataclass(frozen=True)
class JoinReply(Effect):
    waiter: Any
    result: JoinResult


@dataclass(frozen=True)
class SyncReply(Effect):
    waiter: Any
    result: SyncResult


@dataclass(frozen=True)
class AwaitJoin(Effect):
    """Start the group's delayed join ``epoch`` (its only live one): after ``delay_ms``, or when
    every member has rejoined, call :func:`complete_join`. ``initial`` is the initial-rebalance
    delay of an empty group (it never completes early; then :func:`initial_delay_done`, with
    ``remaining_ms`` of the rebalance timeout left to extend it)."""

    epoch: int
    delay_ms: int
    initial: bool = False
    remaining_ms: int = 0


@dataclass(frozen=True)
class CheckJoin(Effect):
    """Re-check the group's delayed join (a member joined or left)."""


@dataclass(frozen=True)
class AwaitHeartbeat(Effect):
    """Start the delayed heartbeat of ``member_id`` expiring at ``due_ms`` (``delay_ms`` from
    now); then :func:`heartbeat_expired`. ``pending``: a member id handed out with
    MEMBER_ID_REQUIRED that must join within its session timeout."""

    member_id: str
    due_ms: int
    delay_ms: int
    pending: bool = False


@dataclass(frozen=True)
class CheckHeartbeat(Effect):
    """Re-check the delayed heartbeats of ``member_id`` (it left or its chain was replaced)."""

    member_id: str


@dataclass(frozen=True)
class AwaitSync(Effect):
    """Start the delayed sync of ``generation_id``: members that have not sent SyncGroup within
    ``delay_ms`` are removed (:func:`sync_expired`)."""

    generation_id: int
    delay_ms: int


@dataclass(frozen=True)
class CheckSync(Effect):
    """Re-check the group's delayed sync (a SyncGroup arrived, or the generation moved on)."""


@dataclass(frozen=True)
class StaticRejoin:
    """A known static member rejoined with a new member id in Stable, without a rebalance:
    what :func:`static_member_stored` needs to answer it, or to undo the replacement."""

    group_instance_id: str
    old_member_id: str
    new_member_id: str
    old_protocols: tuple[tuple[str, bytes], ...]
    leader_id: str
    waiter: Any


@dataclass(frozen=True)
class StoreGroup(Effect):
    """Persist ``record``; when ``for_sync``, call :func:`group_stored` with the outcome (the
    assignment of ``generation_id`` reaches the members only once it is stored); with
    ``static``, call :func:`static_member_stored`."""

    record: GroupRecord
    generation_id: int
    assignment: Mapping[str, bytes]
    for_sync: bool = False
    static: StaticRejoin | None = None


# -- helpers shared by the decisions ---------------------------------------------------------------


def _join_error(waiter: Any, error: int, member_id: str = UNKNOWN_MEMBER_ID) -> JoinReply:
    return JoinReply(waiter, JoinResult(error, member_id))


def _touch(group: Group, member: Member, now_ms: int, effects: list[Effect]) -> None:
    """The member was heard from: its session runs for another ``session_timeout_ms``. A new
    delayed heartbeat is started only when the live one would fire later than the new deadline
    (after the long first-join timeout of a new member); otherwise the live one re-arms itself
    for the remaining time when it fires."""
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
    if member.heartbeat_due_ms == 0 or member.heartbeat_due_ms > member.heartbeat_deadline_ms:
        _arm_heartbeat(member, member.heartbeat_deadline_ms, now_ms, effects)


def _arm_heartbeat(member: Member, due_ms: int, now_ms: int, effects: list[Effect]) -> None:
    replaced = member.heartbeat_due_ms != 0
    member.heartbeat_due_ms = due_ms
    if replaced:
        effects.append(CheckHeartbeat(member.member_id))
    effects.append(AwaitHeartbeat(member.member_id, due_ms, max(due_ms - now_ms, 0)))


def _generation_result(group: Group, member: Member) -> JoinResult:
    return JoinResult(
        ErrorCode.NONE,
        member.member_id,
        group.generation_id,
        group.protocol_name or "",
        group.leader_id or "",
        group.current_member_metadata() if group.is_leader(member.member_id) else (),
    )


def _set_join_waiter(member: Member, waiter: Any, effects: list[Effect]) -> None:
    if member.join_waiter is not None and member.join_waiter is not waiter:
        # A newer JoinGroup of the same member (a client retrying after its own timeout):
        # the older one is answered now, so no request is left without an answer.
        effects.append(_join_error(member.join_waiter, ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
    member.join_waiter = waiter


def _new_member(req: JoinRequest, member_id: str) -> Member:
    return Member(
        member_id=member_id,
        client_id=req.client_id,
        client_host=req.client_host,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=tuple((n, bytes(m)) for n, m in req.protocols),
        group_instance_id=req.group_instance_id,
    )


def _add_member_and_rebalance(group: Group, req: JoinRequest, member_id: str, config: GroupConfig, now_ms: int, effects: list[Effect]) -> None:
    member = _new_member(req, member_id)
    member.is_new = True
    if group.state is _P and group.generation_id == 0:
        group.new_member_added = True  # extends the initial rebalance delay
    group.add(member)
    member.join_waiter = req.waiter
    # A parked new member cannot heartbeat (it has no generation yet): it is dropped if its
    # JoinGroup is still parked after the new-member timeout.
    member.heartbeat_deadline_ms = now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
    _arm_heartbeat(member, member.heartbeat_deadline_ms, now_ms, effects)
    _maybe_prepare_rebalance(group, now_ms, effects, config.initial_rebalance_delay_ms)


def _update_member_and_rebalance(group: Group, member: Member, req: JoinRequest, now_ms: int, effects: list[Effect]) -> None:
    member.protocols = tuple((n, bytes(m)) for n, m in req.protocols)
    member.rebalance_timeout_ms = req.rebalance_timeout_ms
    member.session_timeout_ms = req.session_timeout_ms
    _set_join_waiter(member, req.waiter, effects)
    _maybe_prepare_rebalance(group, now_ms, effects)


def _maybe_prepare_rebalance(group: Group, now_ms: int, effects: list[Effect], initial_delay_ms: int = 0) -> None:
    """Move to PreparingRebalance (if the state allows) and start the delayed join (Kafka's
    prepareRebalance). Only a join makes an Empty group rebalance, and it passes the
    ``group.initial.rebalance.delay.ms`` to wait for more members."""
    if not group.can_rebalance:
        return
    if group.state is _C:
        # The members waiting for this generation's assignment must rejoin instead.
        _reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS, effects)
    if group.pending_sync_members:
        group.pending_sync_members.clear()
    effects.append(CheckSync())
    group.join_epoch += 1
    if group.state is _E:
        delay = initial_delay_ms
        effects.append(AwaitJoin(group.join_epoch, delay, initial=True, remaining_ms=max(group.rebalance_timeout_ms - delay, 0)))
    else:
        effects.append(AwaitJoin(group.join_epoch, group.rebalance_timeout_ms))
    group.transition_to(_P, now_ms)


def rebalance(group: Group, now_ms: int) -> list[Effect]:
    """Make ``group`` rebalance now (a consumer group downgraded to this classic group)."""
    effects: list[Effect] = []
    _maybe_prepare_rebalance(group, now_ms, effects)
    return effects


def _reset_and_propagate_assignment_error(group: Group, error: int, effects: list[Effect]) -> None:
    for m in group.members.values():
        m.assignment = b""
    _propagate_assignment(group, error, 0, effects)


def _propagate_assignment(group: Group, error: int, now_ms: int, effects: list[Effect]) -> None:
    for m in group.members.values():
        if m.sync_waiter is not None:
            effects.append(SyncReply(m.sync_waiter, SyncResult(error, m.assignment if error == ErrorCode.NONE else b"")))
            m.sync_waiter = None
            if error == ErrorCode.NONE:
                # The member waited for the leader (and the store) without heartbeating: its
                # session starts again from the answer.
                _touch(group, m, now_ms, effects)


def _remove_member_and_update_group(group: Group, member: Member, now_ms: int, effects: list[Effect]) -> None:
    # A parked request of the removed member gets UNKNOWN_MEMBER_ID: the client joins again as
    # a new member if it is still alive.
    if member.join_waiter is not None:
        effects.append(_join_error(member.join_waiter, ErrorCode.UNKNOWN_MEMBER_ID))
        member.join_waiter = None
    if member.sync_waiter is not None:
        effects.append(SyncReply(member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
        member.sync_waiter = None
    group.remove(member.member_id)
    effects.append(CheckHeartbeat(member.member_id))
    if group.state in (_S, _C):
        _maybe_prepare_rebalance(group, now_ms, effects)
    elif group.state is _P:
        effects.append(CheckJoin())


# -- JoinGroup ---------------------------------------------------------------------------------------


def join_group(group: Group | None, group_id: str, req: JoinRequest, config: GroupConfig, now_ms: int) -> tuple[Group | None, list[Effect]]:
    """Decide a JoinGroup (the coordinator of the group is this broker and has it loaded).

    Returns:
        The group (a new Empty one when ``group`` was None and the member is new: the shell
        keeps it if it has members or pending members afterwards) and the effects.
    """
    effects: list[Effect] = []
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        return group, [_join_error(req.waiter, ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)]
    is_unknown = req.member_id == UNKNOWN_MEMBER_ID
    if group is None:
        if not is_unknown:
            # A member id the coordinator never gave out (or of a group it no longer has).
            return None, [_join_error(req.waiter, ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)]
        group = Group(group_id, state_timestamp_ms=now_ms)
    names = [name for name, _ in req.protocols]
    if group.state is _D:
        # Unloaded or deleted just now: the client should find the coordinator again.
        effects.append(_join_error(req.waiter, ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id))
    elif not group.supports_protocols(req.protocol_type, names):
        effects.append(_join_error(req.waiter, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
    elif is_unknown and req.group_instance_id is not None:
        old_member_id = group.static_member(req.group_instance_id)
        if old_member_id is None:
            _add_member_and_rebalance(group, req, req.new_member_id, config, now_ms, effects)
        else:
            _update_static_member_and_rebalance(group, old_member_id, req, now_ms, effects)
    elif is_unknown:
        if req.require_known_member_id:
            # JoinGroup v4+: hand out the id first; the member joins with it in its next
            # request, so a client whose answer got lost cannot leave a member behind.
            group.pending_members.add(req.new_member_id)
            effects.append(AwaitHeartbeat(req.new_member_id, now_ms + req.session_timeout_ms, req.session_timeout_ms, pending=True))
            effects.append(_join_error(req.waiter, ErrorCode.MEMBER_ID_REQUIRED, req.new_member_id))
        else:
            _add_member_and_rebalance(group, req, req.new_member_id, config, now_ms, effects)
    elif req.member_id in group.pending_members:
        _add_member_and_rebalance(group, req, req.member_id, config, now_ms, effects)
        effects.append(CheckHeartbeat(req.member_id))  # ends the pending id's delayed heartbeat
    elif group.is_fenced(req.member_id, req.group_instance_id):
        # A zombie of a replaced static member: it must stop, not rejoin.
        effects.append(_join_error(req.waiter, ErrorCode.FENCED_INSTANCE_ID, req.member_id))
    elif not group.has(req.member_id) or (req.group_instance_id is not None and group.static_member(req.group_instance_id) is None):
        effects.append(_join_error(req.waiter, ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
    else:
        member = group.members[req.member_id]
        if group.state is _P:
            _update_member_and_rebalance(group, member, req, now_ms, effects)
        elif group.state is _C:
            if member.matches(req.protocols):
                # The member lost our JoinGroup answer: give it again.
                effects.append(JoinReply(req.waiter, _generation_result(group, member)))
            else:
                _update_member_and_rebalance(group, member, req, now_ms, effects)
        elif group.state is _S:
            if group.is_leader(member.member_id) or not member.matches(req.protocols):
                # The leader rejoins to get a new assignment computed (e.g. topics changed);
                # a follower with new metadata needs one too.
                _update_member_and_rebalance(group, member, req, now_ms, effects)
            else:
                effects.append(JoinReply(req.waiter, _generation_result(group, member)))
        else:
            effects.append(_join_error(req.waiter, ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
    if group.state is _P:
        effects.append(CheckJoin())
    return group, effects


def _update_static_member_and_rebalance(group: Group, old_member_id: str, req: JoinRequest, now_ms: int, effects: list[Effect]) -> None:
    """A known static member joined with no member id (it restarted): Kafka's
    updateStaticMemberAndRebalance (see the module docstring)."""
    assert req.group_instance_id is not None
    current_leader = group.leader_id or ""
    member = group.replace_static_member(req.group_instance_id, old_member_id, req.new_member_id, effects)
    _touch(group, member, now_ms, effects)
    old_protocols = member.protocols
    member.protocols = tuple((n, bytes(m)) for n, m in req.protocols)
    member.join_waiter = req.waiter
    if group.state is _S:
        if group.protocol_name == group.select_protocol():
            # Persist the new member id, then answer with the current generation: no rebalance.
            assignment = {m.member_id: m.assignment for m in group.members.values()}
            rejoin = StaticRejoin(req.group_instance_id, old_member_id, req.new_member_id, old_protocols, current_leader, req.waiter)
            effects.append(StoreGroup(group_record(group, assignment), group.generation_id, assignment, static=rejoin))
        else:
            _maybe_prepare_rebalance(group, now_ms, effects)
    elif group.state is _C:
        # The leader may be assigning to the old member id: rebalance.
        _maybe_prepare_rebalance(group, now_ms, effects)
    # PreparingRebalance: the member takes part in the rebalance under way.


def static_member_stored(group: Group, rejoin: StaticRejoin, error: int, now_ms: int) -> list[Effect]:
    """The group record naming a restarted static member's new id was persisted (``error``
    NONE: answer it with the current generation and the old leader id) or not (undo the
    replacement and answer the error). Nothing happens if the member's JoinGroup was answered
    otherwise meanwhile (a rebalance started, it was fenced or removed)."""
    effects: list[Effect] = []
    member = group.members.get(rejoin.new_member_id)
    if group.state is _D or member is None or member.join_waiter is not rejoin.waiter:
        return effects
    member.join_waiter = None
    if error:
        member.protocols = rejoin.old_protocols
        old = group.replace_static_member(rejoin.group_instance_id, rejoin.new_member_id, rejoin.old_member_id, effects)
        _touch(group, old, now_ms, effects)
        effects.append(JoinReply(rejoin.waiter, JoinResult(error, UNKNOWN_MEMBER_ID, group.generation_id, group.protocol_name or "", rejoin.leader_id)))
        return effects
    effects.append(JoinReply(rejoin.waiter, JoinResult(ErrorCode.NONE, rejoin.new_member_id, group.generation_id, group.protocol_name or "", rejoin.leader_id)))
    return effects


def join_is_stale(group: Group, epoch: int) -> bool:
    """A delayed join that is no longer the group's live one (or of a group gone Dead)."""
    return group.state is not _P or epoch != group.join_epoch


def join_is_complete(group: Group, epoch: int) -> bool:
    """Completion condition of the delayed join ``epoch``: Case A, it is stale (the group moved
    on, or is Dead); Case B, every known member has rejoined and no handed-out member id is
    still expected."""
    return join_is_stale(group, epoch) or group.all_members_joined


def complete_join(group: Group, epoch: int, now_ms: int) -> list[Effect]:
    """The delayed join completed (all rejoined, or the rebalance timeout): members that did not
    rejoin are removed, then the next generation starts (or the group is Empty)."""
    effects: list[Effect] = []
    if join_is_stale(group, epoch):
        return effects
    # Static members that have not rejoined stay (their session timeout decides about them).
    for member in [m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None]:
        if member.sync_waiter is not None:
            effects.append(SyncReply(member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
            member.sync_waiter = None
        group.remove(member.member_id)
        effects.append(CheckHeartbeat(member.member_id))
    if group.members and not _maybe_elect_new_joined_leader(group):
        # Nobody rejoined (only possible with members the coordinator keeps without a join):
        # wait another rebalance timeout.
        group.join_epoch += 1
        effects.append(AwaitJoin(group.join_epoch, group.rebalance_timeout_ms))
        return effects
    _init_next_generation(group, now_ms)
    if group.state is _E:
        effects.append(StoreGroup(group_record(group, {}), group.generation_id, {}))
        return effects
    for member in group.members.values():
        if member.join_waiter is not None:
            effects.append(JoinReply(member.join_waiter, _generation_result(group, member)))
        member.join_waiter = None
        _touch(group, member, now_ms, effects)
        member.is_new = False
        group.pending_sync_members.add(member.member_id)
    effects.append(AwaitSync(group.generation_id, group.rebalance_timeout_ms))
    return effects


def initial_delay_done(group: Group, epoch: int, delay_ms: int, remaining_ms: int, config: GroupConfig, now_ms: int) -> list[Effect]:
    """The initial rebalance delay of a new group ran out: if members kept arriving and the
    rebalance timeout allows, wait once more (so a group of consumers started together settles
    in one rebalance); else complete the join."""
    if join_is_stale(group, epoch):
        return []
    if group.new_member_added and remaining_ms != 0:
        group.new_member_added = False
        group.join_epoch += 1
        delay = min(config.initial_rebalance_delay_ms, remaining_ms)
        return [AwaitJoin(group.join_epoch, delay, initial=True, remaining_ms=max(remaining_ms - delay_ms, 0))]
    return complete_join(group, epoch, now_ms)


def _maybe_elect_new_joined_leader(group: Group) -> bool:
    if group.leader_id is None:
        return False
    leader = group.members.get(group.leader_id)
    if leader is not None and leader.awaiting_join:
        return True
    for m in group.members.values():
        if m.awaiting_join:
            group.leader_id = m.member_id
            return True
    return False


def _init_next_generation(group: Group, now_ms: int) -> None:
    group.generation_id += 1
    group.new_member_added = False
    group.pending_sync_members.clear()
    if group.members:
        group.protocol_name = group.select_protocol()
        group.transition_to(_C, now_ms)
    else:
        group.protocol_name = None
        group.transition_to(_E, now_ms)


# -- SyncGroup ---------------------------------------------------------------------------------------


def _current_member_error(group: Group, member_id: str, group_instance_id: str | None) -> int:
    """Kafka's validateCurrentMember: a named instance id must map to ``member_id``
    (FENCED_INSTANCE_ID when it maps to another, UNKNOWN_MEMBER_ID when to none); the member
    must exist."""
    if group_instance_id is not None:
        current = group.static_member(group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if not group.has(member_id):
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE


def _validate_member(group: Group | None, member_id: str, generation_id: int, group_instance_id: str | None = None) -> int:
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.state is _D:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    error = _current_member_error(group, member_id, group_instance_id)
    if error:
        return error
    if generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


def sync_group(group: Group | None, req: SyncRequest, now_ms: int) -> list[Effect]:
    """Decide a SyncGroup: followers wait for the leader; the leader's assignment is persisted
    (:class:`StoreGroup`) and then given to every waiting member (:func:`group_stored`)."""
    error = _validate_member(group, req.member_id, req.generation_id, req.group_instance_id)
    if error:
        return [SyncReply(req.waiter, SyncResult(error))]
    assert group is not None
    member = group.members[req.member_id]
    effects: list[Effect] = []
    if group.state is _E:
        effects.append(SyncReply(req.waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)))
    elif group.state is _P:
        effects.append(SyncReply(req.waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
    elif group.state is _C:
        if member.sync_waiter is not None and member.sync_waiter is not req.waiter:
            effects.append(SyncReply(member.sync_waiter, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.sync_waiter = req.waiter
        group.pending_sync_members.discard(member.member_id)
        effects.append(CheckSync())
        if group.is_leader(member.member_id):
            # Members the leader left out get an empty assignment (Kafka does the same).
            assignment = {m: bytes(req.assignments.get(m, b"")) for m in group.members}
            effects.append(StoreGroup(group_record(group, assignment), group.generation_id, assignment, for_sync=True))
    else:  # Stable: the assignment of this generation is known
        group.pending_sync_members.discard(member.member_id)
        effects.append(CheckSync())
        effects.append(SyncReply(req.waiter, SyncResult(ErrorCode.NONE, member.assignment)))
        _touch(group, member, now_ms, effects)
    return effects


def group_stored(group: Group, generation_id: int, assignment: Mapping[str, bytes], error: int, now_ms: int) -> list[Effect]:
    """The group record of the leader's SyncGroup was persisted (``error`` NONE) or not. Only
    if the group still waits for that generation's assignment does anything happen."""
    effects: list[Effect] = []
    if group.state is not _C or generation_id != group.generation_id:
        return effects
    if error:
        _reset_and_propagate_assignment_error(group, error, effects)
        _maybe_prepare_rebalance(group, now_ms, effects)
        return effects
    for m in group.members.values():
        m.assignment = bytes(assignment.get(m.member_id, b""))
    group.transition_to(_S, now_ms)
    _propagate_assignment(group, ErrorCode.NONE, now_ms, effects)
    return effects


def sync_is_complete(group: Group, generation_id: int) -> bool:
    """Completion condition of the delayed sync: Case A, the group left that generation (or
    CompletingRebalance/Stable); Case B, every member has sent its SyncGroup."""
    if generation_id != group.generation_id or group.state not in (_C, _S):
        return True
    return not group.pending_sync_members


def sync_expired(group: Group, generation_id: int, now_ms: int) -> list[Effect]:
    """Members that got their JoinGroup answer but never sent SyncGroup are removed, and the
    group rebalances without them."""
    effects: list[Effect] = []
    if sync_is_complete(group, generation_id):
        return effects
    for member_id in sorted(group.pending_sync_members):
        member = group.members.get(member_id)
        if member is not None:
            group.remove(member_id)
            effects.append(CheckHeartbeat(member_id))
    group.pending_sync_members.clear()
    _maybe_prepare_rebalance(group, now_ms, effects)
    return effects


# -- Heartbeat -----------------------------------------------------------------------------------------


def heartbeat(group: Group | None, member_id: str, generation_id: int, now_ms: int, group_instance_id: str | None = None) -> tuple[int, list[Effect]]:
    """Decide a Heartbeat: the error code to answer and the effects."""
    error = _validate_member(group, member_id, generation_id, group_instance_id)
    if error:
        return error, []
    assert group is not None
    if group.state is _E:
        return ErrorCode.UNKNOWN_MEMBER_ID, []
    effects: list[Effect] = []
    _touch(group, group.members[member_id], now_ms, effects)
    if group.state is _P:
        return ErrorCode.REBALANCE_IN_PROGRESS, effects
    return ErrorCode.NONE, effects


def heartbeat_is_moot(group: Group, member_id: str, due_ms: int, pending: bool) -> bool:
    """Completion condition of a delayed heartbeat (it ends without expiring): Case A, the group
    is Dead; Case B, a pending member id was used to join, or dropped; Case C, the member is
    gone, or a newer delayed heartbeat watches it."""
    if group.state is _D:
        return True
    if pending:
        return member_id not in group.pending_members
    member = group.members.get(member_id)
    return member is None or member.heartbeat_due_ms != due_ms


def heartbeat_expired(group: Group, member_id: str, due_ms: int, pending: bool, now_ms: int) -> list[Effect]:
    """A delayed heartbeat ran out: remove the member if its session ended (a new member: if
    its first JoinGroup is still parked), else watch it until its current deadline."""
    effects: list[Effect] = []
    if heartbeat_is_moot(group, member_id, due_ms, pending):
        return effects
    if pending:
        group.pending_members.discard(member_id)
        if group.state is _P:
            effects.append(CheckJoin())
        return effects
    member = group.members[member_id]
    member.heartbeat_due_ms = 0
    if not member.is_new and (member.awaiting_join or member.awaiting_sync):
        # Parked in a rebalance the member cannot heartbeat; the rebalance's own timeouts
        # (delayed join, delayed sync) decide about it.
        _arm_heartbeat(member, now_ms + member.session_timeout_ms, now_ms, effects)
    elif now_ms >= member.heartbeat_deadline_ms:
        _remove_member_and_update_group(group, member, now_ms, effects)
    else:
        _arm_heartbeat(member, member.heartbeat_deadline_ms, now_ms, effects)
    return effects


# -- LeaveGroup ------------------------------------------------------------------------------------------


def leave_group(group: Group | None, members: Iterable[str | tuple[str, str | None]], now_ms: int) -> tuple[int, list[int], list[Effect]]:
    """Decide a LeaveGroup of one (v0-2) or several (v3) members, each a member id or a
    ``(member_id, group_instance_id)`` pair; member id "" with an instance id names the static
    member of that instance (an admin's removal).

    Returns:
        ``(group error, per-member errors, effects)``.
    """
    leaving = [(m, None) if isinstance(m, str) else m for m in members]
    if group is None:
        return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving), []
    if group.state is _D:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
    effects: list[Effect] = []
    errors: list[int] = []
    for member_id, instance_id in leaving:
        if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
            current = group.static_member(instance_id)
            if current is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                _remove_member_and_update_group(group, group.members[current], now_ms, effects)
                errors.append(ErrorCode.NONE)
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
            effects.append(CheckHeartbeat(member_id))
            if group.state is _P:
                effects.append(CheckJoin())
            errors.append(ErrorCode.NONE)
        elif member_id == UNKNOWN_MEMBER_ID:
            errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
        else:
            error = _current_member_error(group, member_id, instance_id)
            if not error:
                _remove_member_and_update_group(group, group.members[member_id], now_ms, effects)
            errors.append(error)
    return ErrorCode.NONE, errors, effects


# -- offsets, deletion, loading ------------------------------------------------------------------------


def validate_offset_commit(group: Group | None, group_id: str, generation_id: int, member_id: str, now_ms: int, group_instance_id: str | None = None) -> tuple[int, Group | None, list[Effect]]:
    """May this OffsetCommit be stored? (Kafka's validateOffsetCommit.)

    A commit without a generation (``generation_id`` < 0, v0, or a consumer that assigns its
    partitions itself) is taken only by a group without members; it creates that group (Empty)
    if it is new. A commit with a generation must come from a member of the current generation,
    and not while the group waits for that generation's assignment. A member's commit counts
    as a heartbeat.

    Returns:
        ``(error, group, effects)``: the group is a new one to keep when it was None.
    """
    if group is None:
        if generation_id < 0:
            return ErrorCode.NONE, Group(group_id, state_timestamp_ms=now_ms), []
        return ErrorCode.ILLEGAL_GENERATION, None, []
    if group.state is _D:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, group, []
    if generation_id < 0 and group.state is _E:
        return ErrorCode.NONE, group, []
    if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID:
        error = _current_member_error(group, member_id, group_instance_id)
        if error:
            return error, group, []
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION, group, []
    elif group.state is not _E:
        return ErrorCode.UNKNOWN_MEMBER_ID, group, []
    if group.state is _C:
        return ErrorCode.REBALANCE_IN_PROGRESS, group, []
    effects: list[Effect] = []
    if group.state in (_S, _P):
        _touch(group, group.members[member_id], now_ms, effects)
    return ErrorCode.NONE, group, effects


def delete_group(group: Group | None, now_ms: int) -> int:
    """DeleteGroups of one group: an Empty group becomes Dead (the shell then forgets it and
    writes tombstones for its record and offsets); a group with members is refused."""
    if group is None or group.state is _D:
        return ErrorCode.GROUP_ID_NOT_FOUND
    if group.state is not _E:
        return ErrorCode.NON_EMPTY_GROUP
    group.transition_to(_D, now_ms)
    return ErrorCode.NONE


def unload_group(group: Group, error: int, now_ms: int) -> list[Effect]:
    """The group's offsets partition moved away (or the broker stops): the group is Dead here
    and every parked request is answered with ``error`` (NOT_COORDINATOR: find the new one)."""
    effects: list[Effect] = []
    for m in group.members.values():
        if m.join_waiter is not None:
            effects.append(_join_error(m.join_waiter, error, m.member_id))
            m.join_waiter = None
        if m.sync_waiter is not None:
            effects.append(SyncReply(m.sync_waiter, SyncResult(error)))
            m.sync_waiter = None
    group.transition_to(_D, now_ms)
    effects.append(CheckJoin())
    effects.append(CheckSync())
    for member_id in list(group.members) + sorted(group.pending_members):
        effects.append(CheckHeartbeat(member_id))
    return effects


def load_group(group_id: str, record: GroupRecord | None, now_ms: int) -> tuple[Group, list[Effect]]:
    """A group read back from its partition of ``__consumer_offsets`` (None: only offsets were
    found). With members it is Stable in the stored generation and each member's session
    starts now; without, Empty."""
    if record is None:
        return Group(group_id, state_timestamp_ms=now_ms), []
    group = Group(
        group_id,
        state=_S if record.members else _E,
        generation_id=record.generation_id,
        protocol_type=record.protocol_type or None,
        protocol_name=record.protocol_name,
        leader_id=record.leader_id,
        state_timestamp_ms=now_ms,
    )
    effects: list[Effect] = []
    for r in record.members:
        member = Member(
            member_id=r.member_id,
            client_id=r.client_id,
            client_host=r.client_host,
            session_timeout_ms=r.session_timeout_ms,
            rebalance_timeout_ms=r.rebalance_timeout_ms,
            protocol_type=record.protocol_type,
            protocols=((record.protocol_name or "", r.subscription),),
            group_instance_id=r.group_instance_id,
            assignment=r.assignment,
        )
        group.members[r.member_id] = member
        if r.group_instance_id is not None:
            group.static_members[r.group_instance_id] = r.member_id
        _touch(group, member, now_ms, effects)
    if group.leader_id not in group.members:
        group.leader_id = next(iter(group.members), None)
    return group, effects


def group_record(group: Group, assignment: Mapping[str, bytes]) -> GroupRecord:
    """The record that persists ``group`` with ``assignment`` (member id -> bytes)."""
    protocol = group.protocol_name
    members = tuple(
        MemberRecord(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata(protocol) if protocol is not None else b"",
            bytes(assignment.get(m.member_id, b"")),
        )
        for m in group.members.values()
    )
    return GroupRecord(group.protocol_type or "", group.generation_id, protocol, group.leader_id, group.state_timestamp_ms, members)


class MemberSummary(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupSummary(NamedTuple):
    """What DescribeGroups tells about a group (Kafka's GroupSummary)."""

    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[MemberSummary, ...]


def describe_group(group: Group | None) -> GroupSummary:
    """A group unknown here is reported Dead. Metadata and assignments are shown only when the
    group is Stable (before, the assignment is not decided)."""
    if group is None:
        return GroupSummary(_D.value, "", "", ())
    if group.state is _S and group.protocol_name is not None:
        protocol = group.protocol_name
        members = tuple(MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.metadata(protocol), m.assignment) for m in group.members.values())
        return GroupSummary(group.state.value, group.protocol_type or "", protocol, members)
    members = tuple(MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"") for m in group.members.values())
    return GroupSummary(group.state.value, group.protocol_type or "", "", members)
