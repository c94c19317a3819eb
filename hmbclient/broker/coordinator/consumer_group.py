"""Kafka 4's consumer group protocol (KIP-848): the pure decisions of ConsumerGroupHeartbeat.

A group of type "consumer" lives apart from the classic groups (:mod:`.state`): a classic
group id answers a ConsumerGroupHeartbeat with INCONSISTENT_GROUP_PROTOCOL while it has
members. Every decision is :func:`heartbeat` / :func:`expire`, a pure function of the group,
the request, the served topics (name -> (topic id, partition count)) and the time; the shell
(:mod:`.coordinator`) holds the lock and sends the answer.

State: the *group epoch* (bumped when membership, a subscription, the assignor or a subscribed
topic's partition count changes), the *target assignment* (computed by the server-side
assignor for the group epoch; ``assignment_epoch``), and per member its *member epoch*, its
*current assignment* (what it was last told it may own) and its session deadline.

Cases of one heartbeat (labelled in the code):

* H1 join: ``member_epoch`` 0 -> the member (its own id if it sent one, KIP-1082, else a new
  one) with epoch 0 and nothing assigned; the group epoch is bumped.
* H2 leave: -1 -> removed, group epoch bumped, answered with epoch -1. H2s static leave: -2
  from a member with an instance id (leaving for a restart) -> kept with epoch -2 and its
  assignment reserved (no group epoch bump) until its session runs out; a join (epoch 0) with
  that instance id takes its place, assignment and epoch (no rebalance). A join with the
  instance id of a member still active -> UNRELEASED_INSTANCE_ID, as Kafka.
* H3 unknown member id with epoch != 0 -> UNKNOWN_MEMBER_ID.
* H4 fenced: an epoch other than the member's (or its previous one when it reports owning
  nothing more than its current assignment: a lost answer) -> FENCED_MEMBER_EPOCH; the client
  drops its partitions and rejoins with epoch 0.
* H5 reconcile: with ``topic_partitions`` reported, the member's current assignment shrinks to
  what it still owns. Then: partitions of the current assignment no longer in its target must
  be revoked first (the answer is current minus those, epoch unchanged; they stay in the
  current assignment until a heartbeat no longer lists them); once none is left,
  the member gets every target partition that no *other* member's current assignment holds
  and its epoch becomes the assignment epoch. So a partition is handed to its new owner only
  after its previous owner's heartbeat stopped listing it: never owned twice at a time.
* Session: every heartbeat moves the deadline to now + session timeout; :func:`expire`
  (run before each decision of the group) removes members past it (group epoch bumped).

Assignors (``server_assignor``, default the first of ``group.consumer.assignors``):
``uniform`` (every subscribed partition spread evenly, sticky: members keep what they had up
to their share) and ``range`` (per topic, contiguous ranges over the members subscribed to it,
in member id order).

Offsets of a consumer group's members (:func:`validate_commit`, :func:`validate_fetch`):

* C1 a negative epoch (an admin's commit, or a consumer outside group management) while the
  group has no members: accepted. With members it is checked as any other (an empty member id
  is UNKNOWN_MEMBER_ID: Kafka's rule, so an admin cannot move a live group's offsets).
* C2 an unknown member id: UNKNOWN_MEMBER_ID.
* C3 OffsetCommit below v9 from a member: UNSUPPORTED_VERSION (as Kafka: v9+ carries epochs).
* C4 an epoch other than the member's (or its previous one, committed while the answer that
  bumped it was on its way): STALE_MEMBER_EPOCH.
* C5 OffsetFetch v9 naming a member: unknown -> UNKNOWN_MEMBER_ID; an epoch other than the
  member's -> STALE_MEMBER_EPOCH (a classic member: ILLEGAL_GENERATION, as K5).

Classic members (KIP-848's online migration, ``group.consumer.migration.policy``): a member
speaking JoinGroup/SyncGroup/Heartbeat with protocol type "consumer" may live in a consumer
group. Its subscription is decoded from the ConsumerProtocol metadata of its first protocol,
the server-side assignor assigns for everyone, and its *generation* is its member epoch:

* K1 join (:func:`classic_join`): v4+ without a member id -> MEMBER_ID_REQUIRED and a new id
  (the member is not added); a member sharing no protocol name with every other classic
  member -> INCONSISTENT_GROUP_PROTOCOL (as Kafka: the group must be able to go back to
  classic); otherwise the member is created or updated (subscription, session
  and rebalance timeouts, protocols; a changed subscription bumps the group epoch), then
  reconciled as H5 with what its metadata says it owns (``owned_partitions``, v1+; an eager
  member, v0 or none listed, owns nothing when it joins): it keeps ``current & target`` and
  revokes the rest (its epoch unchanged), or, with nothing to revoke, gets every target
  partition no other member holds and the assignment epoch. The answer: generation = member
  epoch, the member's first protocol name, no leader (every classic member is a follower).
* K2 sync (:func:`classic_sync`): unknown member -> UNKNOWN_MEMBER_ID, a generation other than
  its epoch -> ILLEGAL_GENERATION, else what K1 gave it (ConsumerProtocol Assignment bytes).
* K3 heartbeat (:func:`classic_heartbeat`): the same checks, the session moves on; the member
  must rejoin (REBALANCE_IN_PROGRESS; its deadline then allows its rebalance timeout) when its
  epoch is below the group epoch, it still holds partitions to revoke, or target partitions it
  lacks are free now (Kafka's three conditions).
* K4 leave (:func:`classic_leave`): removed, group epoch bumped.
* K5 commit: a classic member commits with any OffsetCommit version; generation other than its
  epoch -> ILLEGAL_GENERATION (an OffsetFetch v9 naming it too).
* U upgrade (:func:`upgrade`): a ConsumerGroupHeartbeat joining a classic group whose members
  all use protocol type "consumer" (policy ``upgrade`` or ``bidirectional``) turns it into a
  consumer group: each member keeps its id, its last assignment as its current one and the
  generation as its epoch (group and assignment epochs = the generation). The shell answers the
  classic group's parked requests REBALANCE_IN_PROGRESS.
* D downgrade (:func:`should_downgrade`, :func:`downgrade_record`): when the last
  consumer-protocol member leaves (policy ``downgrade`` or ``bidirectional``) and classic
  members remain, the group becomes a classic group (generation = group epoch, each member's
  protocols and current assignment) that rebalances at once.

Not here: persistence of consumer groups in ``__consumer_offsets`` (a coordinator move loses
the members, who get UNKNOWN_MEMBER_ID and rejoin), regex subscriptions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from hmbclient.errors import ErrorCode, ProtocolError
from hmbclient.protocol.api.consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolMemberAssignment,
    decode_member_assignment,
    decode_member_metadata,
)

__all__ = [
    "ASSIGNORS",
    "MIGRATION_POLICIES",
    "ClassicInfo",
    "ClassicJoinAnswer",
    "classic_heartbeat",
    "classic_join",
    "classic_leave",
    "classic_sync",
    "downgrade_record",
    "should_downgrade",
    "upgrade",
    "ConsumerGroup",
    "ConsumerMember",
    "HeartbeatAnswer",
    "assign",
    "expire",
    "heartbeat",
    "state_of",
    "validate_commit",
    "validate_fetch",
]

ASSIGNORS = ("uniform", "range")
#: ``group.consumer.migration.policy`` values (Kafka's)
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")

#: topic name -> (topic id, partition count), the topics the broker serves
Topics = dict[str, tuple[uuid.UUID, int]]
#: topic name -> partitions
Assignment = dict[str, frozenset[int]]


@dataclass(eq=False)
class ClassicInfo:
    """What a classic member (JoinGroup/SyncGroup/Heartbeat) of a consumer group adds."""

    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: (name, metadata) in the member's order of preference
    protocols: tuple[tuple[str, bytes], ...]
    #: what the last join gave it (its SyncGroup answer)
    given: Assignment = field(default_factory=dict)


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    member_epoch: int = 0
    previous_epoch: int = -1
    instance_id: str | None = None
    subscribed: tuple[str, ...] = ()
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    current: Assignment = field(default_factory=dict)
    deadline_ms: int = 0
    #: who the member is (ConsumerGroupDescribe); set by the shell from the request
    client_id: str = ""
    client_host: str = ""
    #: set for a member speaking the classic protocol (K1-K5)
    classic: ClassicInfo | None = None


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    #: the partition counts of the subscribed topics the target was computed from
    layout: tuple[tuple[str, int], ...] = ()
    #: the assignor of the current target
    assignor: str = ""


@dataclass(frozen=True)
class HeartbeatAnswer:
    error_code: int
    member_id: str | None = None
    member_epoch: int = -1
    #: topic name -> partitions (always sent: the whole assignment is idempotent); None on errors
    assignment: Assignment | None = None
    error_message: str | None = None


def _owned(a: Assignment) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def _as_assignment(pairs: set[tuple[str, int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for t, p in pairs:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in sorted(out.items())}


def assign(assignor: str, members: dict[str, tuple[str, ...]], counts: dict[str, int], previous: dict[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment: member id -> partitions, from each member's subscription."""
    ids = sorted(members)
    if assignor == "range":
        out: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
        for topic in sorted(counts):
            subs = [m for m in ids if topic in members[m]]
            if not subs:
                continue
            n, k = counts[topic], len(subs)
            start = 0
            for i, m in enumerate(subs):
                size = n // k + (1 if i < n % k else 0)
                out[m].update((topic, p) for p in range(start, start + size))
                start += size
        return {m: _as_assignment(ps) for m, ps in out.items()}
    # uniform: sticky shares over every partition a member subscribes to
    parts = sorted((t, p) for t in counts for p in range(counts[t]) if any(t in members[m] for m in ids))
    quota_base, extra = divmod(len(parts), len(ids)) if ids else (0, 0)
    got: dict[str, set[tuple[str, int]]] = {m: set() for m in ids}
    taken: set[tuple[str, int]] = set()
    quota = {m: quota_base + (1 if i < extra else 0) for i, m in enumerate(ids)}
    for m in ids:  # keep what one had, up to its share
        for tp in sorted(_owned(previous.get(m, {}))):
            if tp in taken or tp[0] not in members[m] or tp[0] not in counts or tp[1] >= counts[tp[0]] or len(got[m]) >= quota[m]:
                continue
            got[m].add(tp)
            taken.add(tp)
    for tp in parts:
        if tp in taken:
            continue
        able = [m for m in ids if tp[0] in members[m]]
        if not able:
            continue
        under = [m for m in able if len(got[m]) < quota[m]] or able
        m = min(under, key=lambda x: (len(got[x]), x))
        got[m].add(tp)
        taken.add(tp)
    return {m: _as_assignment(ps) for m, ps in got.items()}


def expire(group: ConsumerGroup, now_ms: int) -> list[str]:
    """Remove the members whose session ran out (the group epoch is bumped); their ids."""
    gone = [m for m, mem in group.members.items() if mem.deadline_ms and mem.deadline_ms <= now_ms]
    for m in gone:
        del group.members[m]
        group.target.pop(m, None)
    if gone:
        group.group_epoch += 1
    return gone


def _refresh_target(group: ConsumerGroup, topics: Topics, default_assignor: str) -> None:
    subscribed = sorted({t for m in group.members.values() for t in m.subscribed if t in topics})
    layout = tuple((t, topics[t][1]) for t in subscribed)
    if layout != group.layout:
        group.layout = layout
        group.group_epoch += 1
    if group.assignment_epoch == group.group_epoch:
        return
    assignor = next((m.server_assignor for m in group.members.values() if m.server_assignor), None) or default_assignor
    counts = dict(layout)
    group.assignor = assignor
    group.target = assign(assignor, {m: mem.subscribed for m, mem in group.members.items()}, counts, group.target)
    group.assignment_epoch = group.group_epoch


def heartbeat(
    group: ConsumerGroup, req: Any, topics: Topics, now_ms: int, session_timeout_ms: int, default_assignor: str = "uniform", new_member_id: str = ""
) -> HeartbeatAnswer:
    """Decide one ConsumerGroupHeartbeat (cases H1-H5 of the module docstring)."""
    expire(group, now_ms)
    names_by_id = {tid: name for name, (tid, _n) in topics.items()}
    epoch = req.member_epoch
    member = group.members.get(req.member_id) if req.member_id else None
    if getattr(req, "subscribed_topic_regex", None):
        return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, error_message="regular expression subscriptions are not supported by this coordinator")
    if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
        return HeartbeatAnswer(ErrorCode.UNSUPPORTED_ASSIGNOR, error_message=f"unknown server assignor {req.server_assignor!r}")
    # H2 leave
    if epoch in (-1, -2):
        if member is None:
            return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID)
        if epoch == -2 and member.instance_id is not None:
            # H2s: reserved for the instance's restart (its epoch kept as the previous one)
            member.previous_epoch, member.member_epoch = member.member_epoch, -2
            member.deadline_ms = now_ms + session_timeout_ms
            return HeartbeatAnswer(ErrorCode.NONE, member.member_id, epoch)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.group_epoch += 1
        _refresh_target(group, topics, default_assignor)
        return HeartbeatAnswer(ErrorCode.NONE, member.member_id, epoch)
    if epoch == 0:
        # H1 join (again)
        mid = req.member_id or new_member_id
        same = next((m for m in group.members.values() if req.instance_id is not None and m.instance_id == req.instance_id and m.member_id != mid), None)
        if same is not None:
            if same.member_epoch != -2:
                return HeartbeatAnswer(ErrorCode.UNRELEASED_INSTANCE_ID, error_message=f"instance id {req.instance_id!r} is still in use")
            # H2s: the restarted instance takes its place, assignment and epoch
            del group.members[same.member_id]
            reserved = group.target.pop(same.member_id, None)
            same.member_id, same.member_epoch, same.previous_epoch = mid, same.previous_epoch, -1
            group.members[mid] = same
            if reserved is not None:
                group.target[mid] = reserved
            same.deadline_ms = now_ms + session_timeout_ms
            return HeartbeatAnswer(ErrorCode.NONE, mid, same.member_epoch, dict(same.current))
        if member is None:
            member = ConsumerMember(mid, instance_id=req.instance_id)
            group.members[mid] = member
        member.member_epoch, member.previous_epoch, member.current = 0, -1, {}
    elif member is None:
        # H3
        return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID, error_message="unknown member id")
    elif epoch != member.member_epoch:
        reported = _reported(req, names_by_id)
        # H4 (a lost answer: the previous epoch, owning no more than it was told, is fine)
        if not (epoch == member.previous_epoch and reported is not None and reported <= _owned(member.current)):
            return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH, error_message=f"epoch {epoch} is not the member's {member.member_epoch}")
    member.deadline_ms = now_ms + session_timeout_ms
    if req.instance_id is not None:
        member.instance_id = req.instance_id
    if req.rebalance_timeout_ms >= 0:
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
    # one group epoch bump per heartbeat that changed the group (a join, a subscription, an
    # assignor), as Kafka's: the join and the fields it carries are one change
    changed = epoch == 0
    if req.subscribed_topic_names is not None and tuple(sorted(set(req.subscribed_topic_names))) != member.subscribed:
        member.subscribed = tuple(sorted(set(req.subscribed_topic_names)))
        changed = True
    if req.server_assignor is not None and req.server_assignor != member.server_assignor:
        member.server_assignor = req.server_assignor
        changed = True
    if changed:
        group.group_epoch += 1
    _refresh_target(group, topics, default_assignor)
    # H5 reconcile
    given = _reconcile(group, member, _reported(req, names_by_id))
    return HeartbeatAnswer(ErrorCode.NONE, member.member_id, member.member_epoch, given)


def _reconcile(group: ConsumerGroup, member: ConsumerMember, reported: set[tuple[str, int]] | None) -> Assignment:
    """H5 (and K1): what ``member`` may own now; its epoch moves to the assignment epoch once it
    has nothing left to revoke."""
    if reported is not None:
        member.current = _as_assignment(_owned(member.current) & reported)
    target = _owned(group.target.get(member.member_id, {}))
    current = _owned(member.current)
    if current - target:
        # it keeps current & target and revokes the rest; ``current`` still holds what it must
        # revoke until a heartbeat no longer lists it, so nobody else gets those meanwhile
        given = _as_assignment(current & target)
    else:
        held = set()
        for m, other in group.members.items():
            if m != member.member_id:
                held |= _owned(other.current)
        member.current = given = _as_assignment(current | (target - held))
        if member.member_epoch != group.assignment_epoch:
            member.previous_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
    return given


def _reported(req: Any, names_by_id: dict[uuid.UUID, str]) -> set[tuple[str, int]] | None:
    if req.topic_partitions is None:
        return None
    return {(names_by_id[tp.topic_id], p) for tp in req.topic_partitions if tp.topic_id in names_by_id for p in tp.partitions}


def state_of(group: ConsumerGroup) -> str:
    """Kafka's name of a consumer group's state (ConsumerGroupDescribe, ListGroups): Empty
    without members, Assigning while the target lags the group epoch, Reconciling while a
    member's epoch or assignment is not the target's, else Stable."""
    if not group.members:
        return "Empty"
    if group.assignment_epoch != group.group_epoch:
        return "Assigning"
    for m, member in group.members.items():
        if member.member_epoch != group.assignment_epoch or _owned(member.current) != _owned(group.target.get(m, {})):
            return "Reconciling"
    return "Stable"


def validate_commit(group: ConsumerGroup, member_id: str, epoch: int, api_version: int = 9) -> int:
    """OffsetCommit from a member of a consumer group (cases C1-C4 of the module docstring)."""
    if epoch < 0 and not group.members:
        return ErrorCode.NONE  # C1 an admin's (or a group-less consumer's) commit
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID  # C2
    if member.classic is not None:
        # K5 a classic member's generation is its member epoch
        return ErrorCode.NONE if epoch == member.member_epoch else ErrorCode.ILLEGAL_GENERATION
    if api_version < 9:
        return ErrorCode.UNSUPPORTED_VERSION  # C3 consumer-protocol members commit with v9+
    if epoch not in (member.member_epoch, member.previous_epoch) or epoch > member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH  # C4
    return ErrorCode.NONE


def validate_fetch(group: ConsumerGroup, member_id: str, epoch: int) -> int:
    """OffsetFetch v9+ naming its member (C5): UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH."""
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        # K5: a classic member's epoch is its generation (Kafka's validateMemberEpoch)
        return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
    return ErrorCode.NONE


# -- classic members (K1-K5), upgrade (U) and downgrade (D) ---------------------------------------


@dataclass(frozen=True)
class ClassicJoinAnswer:
    error_code: int
    member_id: str
    generation_id: int = -1
    protocol_name: str = ""


def _subscription(protocols: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, ...], set[tuple[str, int]]] | None:
    """(topics, owned partitions) from the first protocol's ConsumerProtocol metadata."""
    if not protocols:
        return None
    try:
        meta = decode_member_metadata(protocols[0][1])
    except (ProtocolError, ValueError, IndexError, TypeError):
        return None
    owned = {(e.topic, int(p)) for e in (getattr(meta, "owned_partitions", None) or ()) for p in e.partitions}
    return tuple(sorted(set(meta.topics or ()))), owned


def classic_join(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    protocols: tuple[tuple[str, bytes], ...],
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    require_known_member_id: bool,
    topics: Topics,
    now_ms: int,
    default_assignor: str = "uniform",
    new_member_id: str = "",
) -> ClassicJoinAnswer:
    """K1: a classic member's JoinGroup in a consumer group."""
    expire(group, now_ms)
    sub = _subscription(protocols)
    if sub is None:
        return ClassicJoinAnswer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
    subscribed, owned = sub
    mid = member_id or new_member_id
    others = [m.classic for m in group.members.values() if m.classic is not None and m.member_id != mid]
    if others and not any(all(any(n == name for n, _ in o.protocols) for o in others) for name, _ in protocols):
        # as Kafka: the classic members share a protocol, so that the group can go back to classic
        return ClassicJoinAnswer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
    if not member_id and instance_id is None and require_known_member_id:
        return ClassicJoinAnswer(ErrorCode.MEMBER_ID_REQUIRED, new_member_id)
    changed = False
    if instance_id is not None:
        # a static member's restart replaces the member that had its instance id
        for other in [m for m in group.members.values() if m.instance_id == instance_id and m.member_id != mid]:
            del group.members[other.member_id]
            group.target.pop(other.member_id, None)
            changed = True
    member = group.members.get(mid)
    if member is None:
        member = group.members[mid] = ConsumerMember(mid, instance_id=instance_id)
        changed = True
    member.instance_id = instance_id
    member.rebalance_timeout_ms = rebalance_timeout_ms
    member.server_assignor = None
    member.classic = ClassicInfo(session_timeout_ms, rebalance_timeout_ms, tuple(protocols))
    member.deadline_ms = now_ms + max(session_timeout_ms, 1)
    if subscribed != member.subscribed:
        member.subscribed = subscribed
        changed = True
    if changed:
        group.group_epoch += 1
    _refresh_target(group, topics, default_assignor)
    # K1 reconcile with what it says it owns (an eager member revoked everything before joining)
    member.classic.given = _reconcile(group, member, owned)
    return ClassicJoinAnswer(ErrorCode.NONE, mid, member.member_epoch, protocols[0][0])


def _classic_member(group: ConsumerGroup, member_id: str, generation_id: int) -> tuple[int, ConsumerMember | None]:
    member = group.members.get(member_id)
    if member is None or member.classic is None:
        return ErrorCode.UNKNOWN_MEMBER_ID, None
    if generation_id != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION, None
    return ErrorCode.NONE, member


def classic_sync(group: ConsumerGroup, member_id: str, generation_id: int, now_ms: int) -> tuple[int, bytes]:
    """K2: the SyncGroup answer (error, ConsumerProtocol Assignment bytes)."""
    expire(group, now_ms)
    error, member = _classic_member(group, member_id, generation_id)
    if member is None or member.classic is None:
        return error, b""
    member.deadline_ms = now_ms + member.classic.session_timeout_ms
    assigned = [(t, sorted(ps)) for t, ps in sorted(member.classic.given.items()) if ps]
    return ErrorCode.NONE, ConsumerProtocolMemberAssignment[0](assigned_partitions=assigned, user_data=None).encode()


def classic_heartbeat(group: ConsumerGroup, member_id: str, generation_id: int, now_ms: int) -> int:
    """K3: NONE, or REBALANCE_IN_PROGRESS when the member must rejoin."""
    expire(group, now_ms)
    error, member = _classic_member(group, member_id, generation_id)
    if member is None or member.classic is None:
        return error
    member.deadline_ms = now_ms + member.classic.session_timeout_ms
    current = _owned(member.current)
    target = _owned(group.target.get(member_id, {}))
    held: set[tuple[str, int]] = set()
    for m, other in group.members.items():
        if m != member_id:
            held |= _owned(other.current)
    if member.member_epoch < group.group_epoch or current - target or (target - current) - held:
        member.deadline_ms = now_ms + max(member.classic.session_timeout_ms, member.classic.rebalance_timeout_ms)
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


def classic_leave(group: ConsumerGroup, member_id: str, topics: Topics, now_ms: int, default_assignor: str = "uniform") -> int:
    """K4: a classic member leaves (UNKNOWN_MEMBER_ID if it is no member)."""
    expire(group, now_ms)
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    del group.members[member_id]
    group.target.pop(member_id, None)
    group.group_epoch += 1
    _refresh_target(group, topics, default_assignor)
    return ErrorCode.NONE


def upgrade(group_id: str, generation_id: int, members: list[tuple[Any, bytes]], topics: Topics, now_ms: int) -> ConsumerGroup | None:
    """U: a consumer group from a classic group's members (``(member, metadata)`` pairs, the
    member as :class:`.state.Member`); None when a member's metadata or assignment is not the
    consumer protocol's (the upgrade is refused)."""
    group = ConsumerGroup(group_id, group_epoch=max(generation_id, 0), assignment_epoch=max(generation_id, 0))
    for m, metadata in members:
        if m.protocol_type != PROTOCOL_TYPE:
            return None
        sub = _subscription(((m.protocols[0][0] if m.protocols else "", metadata),))
        if sub is None:
            return None
        current: set[tuple[str, int]] = set()
        if m.assignment:
            try:
                assigned = decode_member_assignment(m.assignment)
            except (ProtocolError, ValueError, IndexError, TypeError):
                return None
            current = {(e.topic, int(p)) for e in assigned.assigned_partitions or () for p in e.partitions}
        member = ConsumerMember(
            m.member_id,
            member_epoch=group.group_epoch,
            instance_id=m.group_instance_id,
            subscribed=sub[0],
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            current=_as_assignment(current),
            deadline_ms=now_ms + m.session_timeout_ms,
            client_id=m.client_id,
            client_host=m.client_host,
            classic=ClassicInfo(m.session_timeout_ms, m.rebalance_timeout_ms, tuple(m.protocols), _as_assignment(current)),
        )
        group.members[m.member_id] = member
        group.target[m.member_id] = member.current
    subscribed = sorted({t for mem in group.members.values() for t in mem.subscribed if t in topics})
    group.layout = tuple((t, topics[t][1]) for t in subscribed)
    return group


def should_downgrade(group: ConsumerGroup, policy: str) -> bool:
    """D: members remain and every one of them speaks the classic protocol."""
    return policy in ("downgrade", "bidirectional") and bool(group.members) and all(m.classic is not None for m in group.members.values())


def downgrade_record(group: ConsumerGroup) -> tuple[int, str, list[tuple[ConsumerMember, bytes, bytes]]]:
    """D: (generation, protocol name, [(member, its metadata for that protocol, its current
    assignment as ConsumerProtocol bytes)]) of the classic group replacing ``group``; the
    protocol is the first of the first member's that every member supports."""
    members = sorted(group.members.values(), key=lambda m: m.member_id)
    infos = [m.classic for m in members if m.classic is not None]
    common = [name for name, _ in infos[0].protocols if all(any(n == name for n, _ in i.protocols) for i in infos)] if infos else []
    protocol = common[0] if common else (infos[0].protocols[0][0] if infos and infos[0].protocols else "")
    out = []
    for m in members:
        assert m.classic is not None
        meta = next((b for n, b in m.classic.protocols if n == protocol), m.classic.protocols[0][1] if m.classic.protocols else b"")
        assigned = [(t, sorted(ps)) for t, ps in sorted(m.current.items()) if ps]
        out.append((m, meta, ConsumerProtocolMemberAssignment[0](assigned_partitions=assigned, user_data=None).encode()))
    return group.group_epoch, protocol, out
