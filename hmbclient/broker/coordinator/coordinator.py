"""GroupCoordinator: the I/O shell around the group state machine (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups, and the group side of
OffsetCommit), and around Kafka 4's consumer groups (ConsumerGroupHeartbeat, KIP-848, decided by
:mod:`.consumer_group`; a group id is either kind: JoinGroup for a consumer group and
ConsumerGroupHeartbeat for a classic group with members answer INCONSISTENT_GROUP_PROTOCOL;
OffsetCommit from a consumer group's member is checked against its member epoch). With
``group.consumer.migration.policy`` (KIP-848's online migration) classic members whose protocol
type is "consumer" join consumer groups (JoinGroup, SyncGroup, Heartbeat and LeaveGroup are
decided by :mod:`.consumer_group`'s K1-K4), a classic group is upgraded when a consumer-protocol
member joins it, and a consumer group left with classic members only is downgraded.

The coordinator of a group is the leader of the group's partition of ``__consumer_offsets``
(``offset_manager.partition_for_group``). The offset manager tells this shell which partitions'
groups it holds (``load_partition`` after replaying the partition, ``unload_partition`` when the
leadership moves away: the groups become Dead here and their parked requests are answered
NOT_COORDINATOR, so clients look the coordinator up again and rejoin there, where the groups were
reloaded from the log).

A handler checks the group's status (INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR: Kafka's validateGroupStatus), then, under the
coordinator's one lock, asks the pure core (:mod:`.state`) to decide and carries out the effects
in order: answers, delayed operations (:mod:`.delayed`, in two purgatories on the injected
clock), group records (through the :class:`GroupStore`, also under the lock so records of one
group reach the log in the order they were decided). Parked JoinGroup/SyncGroup requests are
answered later by whichever thread completes them (another member's request, a purgatory's
expiry, the store's callback). Nothing under the lock waits: answers fill response slots,
appends are asynchronous.

Kafka's special cases kept: SyncGroup while loading answers REBALANCE_IN_PROGRESS (old clients
do not expect COORDINATOR_LOAD_IN_PROGRESS there); Heartbeat while loading answers NONE; the
JoinGroup v0 rebalance timeout is the session timeout; member ids are ``client_id-uuid``
(``group_instance_id-uuid`` for a static member, as Kafka names them).
"""

from __future__ import annotations

import base64
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from hmbclient.broker.coordinator import consumer_group as cg
from hmbclient.broker.coordinator import state
from hmbclient.broker.coordinator.delayed import (
    DelayedHeartbeat,
    DelayedJoin,
    DelayedSync,
    InitialDelayedJoin,
)
from hmbclient.broker.coordinator.state import (
    AwaitHeartbeat,
    AwaitJoin,
    AwaitSync,
    CheckHeartbeat,
    CheckJoin,
    CheckSync,
    Effect,
    Group,
    GroupConfig,
    GroupRecord,
    GroupState,
    JoinReply,
    JoinRequest,
    JoinResult,
    StoreGroup,
    SyncReply,
    SyncRequest,
    SyncResult,
)
from hmbclient.broker.purgatory import DelayedOperation, Purgatory
from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.errors import ErrorCode

__all__ = ["GroupCoordinator", "GroupStore"]

log = logging.getLogger("hmbclient.broker.coordinator")

_NO_AUTHORIZED_OPERATIONS = -(2**31)


class GroupStore(Protocol):
    """Where the coordinator learns who coordinates a group and persists group records (the
    offset manager)."""

    def group_status(self, group: str) -> int:
        """NONE, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS."""
        ...

    def partition_for(self, group: str) -> int: ...

    def is_loading(self) -> bool: ...

    def store_group(self, group: str, record: GroupRecord, callback: Callable[[int], None]) -> None: ...

    def delete_group(self, group: str, callback: Callable[[int], None]) -> None: ...


class GroupCoordinator:
    """The classic group protocol of one broker.

    Args:
        store: status of groups and persistence of group records (the offset manager).
        config: session timeout bounds and the initial rebalance delay.
        now_ms: the clock of decisions and delayed operations (inject one in tests and drive
            the purgatories with ``advance_clock``).
        name: for thread names and logs.
    """

    def __init__(self, store: GroupStore, config: GroupConfig, *, now_ms: Callable[[], int] = monotonic_ms, name: str = "broker") -> None:
        self.store = store
        self.config = config
        self._now_ms = now_ms
        self._lock = threading.RLock()
        self._groups: dict[str, Group] = {}
        #: consumer-protocol (KIP-848) groups, in memory only (see consumer_group.py)
        self._consumer_groups: dict[str, cg.ConsumerGroup] = {}
        #: name -> (topic id, partition count) of the served topics (set by the Broker)
        self.consumer_topics: Callable[[], dict[str, tuple[uuid.UUID, int]]] = dict
        self._partitions: set[int] = set()
        self._active = False
        self.rebalance_purgatory: Purgatory[DelayedOperation] = Purgatory(f"{name}-rebalance", now_ms)
        self.heartbeat_purgatory: Purgatory[DelayedHeartbeat] = Purgatory(f"{name}-heartbeat", now_ms)

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self, *, reapers: bool = True) -> None:
        """Serve; ``reapers`` False leaves expiry to ``advance_clock`` (tests)."""
        self._active = True
        if reapers:
            self.rebalance_purgatory.start()
            self.heartbeat_purgatory.start()

    def shutdown(self) -> None:
        """Stop serving: every group is unloaded (parked requests answered NOT_COORDINATOR)."""
        self._active = False
        with self._lock:
            for partition in sorted(self._partitions):
                self._unload_locked(partition)
            self._partitions.clear()
        self.rebalance_purgatory.shutdown(complete_pending=False)
        self.heartbeat_purgatory.shutdown(complete_pending=False)

    def advance_clock(self, now_ms: int | None = None) -> int:
        """Expire the delayed operations that are due (tests without reaper threads)."""
        return self.rebalance_purgatory.advance_clock(now_ms) + self.heartbeat_purgatory.advance_clock(now_ms)

    # -- the offset manager's hooks ------------------------------------------------------------------
    def load_partition(self, partition: int, groups: Mapping[str, GroupRecord | None]) -> None:
        with self._lock:
            self._unload_locked(partition)
            now = self._now_ms()
            for group_id, record in groups.items():
                group, effects = state.load_group(group_id, record, now)
                self._groups[group_id] = group
                self._run(group_id, group, effects)
            self._partitions.add(partition)
        if groups:
            log.info("loaded %d groups of offsets partition %d", len(groups), partition)

    def unload_partition(self, partition: int) -> None:
        with self._lock:
            self._unload_locked(partition)

    def _unload_locked(self, partition: int) -> None:
        if partition not in self._partitions:
            return
        self._partitions.discard(partition)
        now = self._now_ms()
        for group_id in [g for g in self._consumer_groups if self.store.partition_for(g) == partition]:
            del self._consumer_groups[group_id]
        for group_id in [g for g in self._groups if self.store.partition_for(g) == partition]:
            group = self._groups.pop(group_id)
            self._run(group_id, group, state.unload_group(group, ErrorCode.NOT_COORDINATOR, now))
        log.info("unloaded the groups of offsets partition %d", partition)

    def validate_offset_commit(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None, *, api_version: int = 9) -> int:
        with self._lock:
            if not self._owns(group_id):
                return ErrorCode.NOT_COORDINATOR
            cgroup = self._consumer_groups.get(group_id)
            if cgroup is not None:
                cg.expire(cgroup, self._now_ms())
                return cg.validate_commit(cgroup, member_id, generation_id, api_version)
            group = self._groups.get(group_id)
            error, found, effects = state.validate_offset_commit(group, group_id, generation_id, member_id, self._now_ms(), group_instance_id)
            if group is None and found is not None:
                self._groups[group_id] = found
            if found is not None:
                self._run(group_id, found, effects)
            return error

    def validate_offset_fetch(self, group_id: str, member_id: str, member_epoch: int) -> int:
        """OffsetFetch v9+ naming its member: checked for consumer-protocol groups only."""
        with self._lock:
            if not self._owns(group_id):
                return ErrorCode.NOT_COORDINATOR
            cgroup = self._consumer_groups.get(group_id)
            if cgroup is None:
                return ErrorCode.NONE
            cg.expire(cgroup, self._now_ms())
            return cg.validate_fetch(cgroup, member_id, member_epoch)

    # -- inspection (tests, tools) ---------------------------------------------------------------------
    def group(self, group_id: str) -> Group | None:
        """The group as this coordinator holds it (do not change it)."""
        with self._lock:
            return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    # -- the delayed operations' callbacks -----------------------------------------------------------
    def on_join_done(self, group: Group, epoch: int) -> None:
        with self._lock:
            self._run(group.group_id, group, state.complete_join(group, epoch, self._now_ms()))

    def on_initial_delay_done(self, group: Group, epoch: int, delay_ms: int, remaining_ms: int) -> None:
        with self._lock:
            self._run(group.group_id, group, state.initial_delay_done(group, epoch, delay_ms, remaining_ms, self.config, self._now_ms()))

    def on_heartbeat_expired(self, group: Group, member_id: str, due_ms: int, pending: bool) -> None:
        with self._lock:
            effects = state.heartbeat_expired(group, member_id, due_ms, pending, self._now_ms())
            if effects and not pending and member_id not in group.members:
                log.info("group %s: member %s removed, its session timed out", group.group_id, member_id)
            self._run(group.group_id, group, effects)

    def on_sync_expired(self, group: Group, generation_id: int) -> None:
        with self._lock:
            effects = state.sync_expired(group, generation_id, self._now_ms())
            if effects:
                log.info("group %s: members that sent no SyncGroup for generation %d removed", group.group_id, generation_id)
            self._run(group.group_id, group, effects)

    def _on_stored(self, group: Group, effect: StoreGroup, error: int) -> None:
        if error:
            log.warning("group %s: storing generation %d failed (error %d)", group.group_id, effect.generation_id, error)
        if effect.static is not None:
            with self._lock:
                self._run(group.group_id, group, state.static_member_stored(group, effect.static, error, self._now_ms()))
            return
        if not effect.for_sync:
            return
        with self._lock:
            self._run(group.group_id, group, state.group_stored(group, effect.generation_id, effect.assignment, error, self._now_ms()))

    # -- effects ---------------------------------------------------------------------------------------
    def _run(self, group_id: str, group: Group | None, effects: list[Effect]) -> None:
        """Carry out ``effects`` in order (under the lock)."""
        for e in effects:
            if isinstance(e, JoinReply | SyncReply):
                try:
                    e.waiter(e.result)
                except Exception:
                    log.exception("group %s: answering failed", group_id)
                continue
            assert group is not None
            if isinstance(e, AwaitJoin):
                join: DelayedJoin
                if e.initial:
                    join = InitialDelayedJoin(self, group, e.epoch, e.delay_ms, e.remaining_ms, self._lock)
                else:
                    join = DelayedJoin(self, group, e.epoch, e.delay_ms, self._lock)
                self.rebalance_purgatory.try_complete_else_watch(join, [("join", group_id)])
            elif isinstance(e, CheckJoin):
                self.rebalance_purgatory.check_and_complete(("join", group_id))
            elif isinstance(e, AwaitHeartbeat):
                beat = DelayedHeartbeat(self, group, e.member_id, e.due_ms, e.delay_ms, e.pending, self._lock)
                self.heartbeat_purgatory.try_complete_else_watch(beat, [(group_id, e.member_id)])
            elif isinstance(e, CheckHeartbeat):
                self.heartbeat_purgatory.check_and_complete((group_id, e.member_id))
            elif isinstance(e, AwaitSync):
                self.rebalance_purgatory.try_complete_else_watch(DelayedSync(self, group, e.generation_id, e.delay_ms, self._lock), [("sync", group_id)])
            elif isinstance(e, CheckSync):
                self.rebalance_purgatory.check_and_complete(("sync", group_id))
            elif isinstance(e, StoreGroup):
                record = e.record._replace(state_timestamp_ms=wall_ms())
                self.store.store_group(group_id, record, self._stored_callback(group, e))
            else:  # pragma: no cover - a new effect without its executor
                raise TypeError(f"unknown effect {e!r}")

    def _stored_callback(self, group: Group, effect: StoreGroup) -> Callable[[int], None]:
        def stored(error: int) -> None:
            self._on_stored(group, effect, error)

        return stored

    # -- status ----------------------------------------------------------------------------------------
    def _owns(self, group_id: str) -> bool:
        return self.store.partition_for(group_id) in self._partitions

    def _group_error(self, group_id: str | None, *, empty_ok: bool = False) -> int:
        """Kafka's validateGroupStatus (without the lock; ``_owns`` is checked again under it)."""
        if group_id is None or (not group_id and not empty_ok):
            return ErrorCode.INVALID_GROUP_ID
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.store.group_status(group_id)

    @staticmethod
    def _client_host(channel: Any) -> str:
        peer = getattr(getattr(channel, "conn", None), "peer", "") or ""
        host = peer.rsplit(":", 1)[0] if ":" in peer else peer
        return f"/{host}" if host else ""

    # -- JoinGroup -------------------------------------------------------------------------------------
    def handle_join_group(self, header: Any, req: Any, channel: Any) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        member_shape = resp_cls.nested("members")

        def reply(result: JoinResult) -> None:
            members = [member_shape.build(member_id=m, group_instance_id=i, metadata=meta) for m, i, meta in result.members]
            channel.send(
                resp_cls.build(
                    throttle_time_ms=0,
                    error_code=result.error,
                    generation_id=result.generation_id,
                    protocol_name=result.protocol_name,
                    leader=result.leader_id,
                    member_id=result.member_id,
                    members=members,
                )
            )

        error = self._group_error(req.group_id)
        if error:
            reply(JoinResult(error, req.member_id))
            return
        client_id = header.client_id or ""
        instance_id = req.group_instance_id if v >= 5 else None
        rebalance_timeout_ms = req.rebalance_timeout_ms if v >= 1 and req.rebalance_timeout_ms > 0 else req.session_timeout_ms
        if req.group_id in self._consumer_groups:
            # a classic member joining a consumer-protocol group (KIP-848 migration, K1)
            topics = self.consumer_topics()
            with self._lock:
                cgroup = self._consumer_groups.get(req.group_id)
                if cgroup is not None:
                    if not self._owns(req.group_id):
                        reply(JoinResult(ErrorCode.NOT_COORDINATOR, req.member_id))
                        return
                    if req.protocol_type != "consumer":
                        reply(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
                        return
                    answer = cg.classic_join(
                        cgroup,
                        req.member_id,
                        instance_id,
                        tuple((p.name, bytes(p.metadata)) for p in req.protocols),
                        req.session_timeout_ms,
                        rebalance_timeout_ms,
                        v >= 4,
                        topics,
                        self._now_ms(),
                        self.config.consumer_assignors[0],
                        _new_member_id(),
                    )
                    member = cgroup.members.get(answer.member_id)
                    if member is not None:
                        member.client_id, member.client_host = client_id, self._client_host(channel)
                    reply(JoinResult(answer.error_code, answer.member_id, answer.generation_id, answer.protocol_name, ""))
                    return
        join = JoinRequest(
            member_id=req.member_id,
            client_id=client_id,
            client_host=self._client_host(channel),
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
            new_member_id=f"{instance_id or client_id}-{uuid.uuid4()}",
            require_known_member_id=v >= 4,
            group_instance_id=instance_id,
            waiter=reply,
        )
        group_id = req.group_id
        with self._lock:
            if not self._owns(group_id):
                reply(JoinResult(ErrorCode.NOT_COORDINATOR, req.member_id))
                return
            known = self._groups.get(group_id)
            group, effects = state.join_group(known, group_id, join, self.config, self._now_ms())
            if known is None and group is not None and (group.members or group.pending_members):
                self._groups[group_id] = group
            self._run(group_id, group, effects)

    # -- SyncGroup -------------------------------------------------------------------------------------
    def handle_sync_group(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE

        def reply(result: SyncResult) -> None:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=result.error, assignment=result.assignment))

        error = self._group_error(req.group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in flight was lost with the old coordinator: rejoin.
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error:
            reply(SyncResult(error))
            return
        assignments = {a.member_id: bytes(a.assignment) for a in req.assignments or ()}
        sync = SyncRequest(req.member_id, req.generation_id, assignments, getattr(req, "group_instance_id", None), reply)
        with self._lock:
            if not self._owns(req.group_id):
                reply(SyncResult(ErrorCode.NOT_COORDINATOR))
                return
            cgroup = self._consumer_groups.get(req.group_id)
            if cgroup is not None:
                # K2 a classic member of a consumer-protocol group
                error, assignment = cg.classic_sync(cgroup, req.member_id, req.generation_id, self._now_ms())
                self._maybe_downgrade(req.group_id)
                reply(SyncResult(error, assignment))
                return
            group = self._groups.get(req.group_id)
            self._run(req.group_id, group, state.sync_group(group, sync, self._now_ms()))

    # -- Heartbeat -------------------------------------------------------------------------------------
    def handle_heartbeat(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        error = self._group_error(req.group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            error = ErrorCode.NONE  # Kafka answers blindly while loading
        elif not error:
            with self._lock:
                if not self._owns(req.group_id):
                    error = ErrorCode.NOT_COORDINATOR
                elif req.group_id in self._consumer_groups:
                    # K3 a classic member of a consumer-protocol group
                    error = cg.classic_heartbeat(self._consumer_groups[req.group_id], req.member_id, req.generation_id, self._now_ms())
                    self._maybe_downgrade(req.group_id)
                else:
                    group = self._groups.get(req.group_id)
                    error, effects = state.heartbeat(group, req.member_id, req.generation_id, self._now_ms(), getattr(req, "group_instance_id", None))
                    self._run(req.group_id, group, effects)
        channel.send(resp_cls.build(throttle_time_ms=0, error_code=error))

    # -- ConsumerGroupHeartbeat (KIP-848) ------------------------------------------------------------
    def handle_consumer_group_heartbeat(self, header: Any, req: Any, channel: Any) -> None:
        """One heartbeat of a consumer-protocol member, decided by :func:`.consumer_group.heartbeat`."""
        resp_cls = type(req).RESPONSE_TYPE
        error = self._group_error(req.group_id)
        answer = None
        if not error:
            topics = self.consumer_topics()
            with self._lock:
                classic = self._groups.get(req.group_id)
                if not self._owns(req.group_id):
                    error = ErrorCode.NOT_COORDINATOR
                elif classic is not None and classic.members and not (req.member_epoch == 0 and self._upgrade(req.group_id, classic, topics)):
                    error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
                else:
                    group = self._consumer_groups.get(req.group_id)
                    if group is None:
                        group = self._consumer_groups[req.group_id] = cg.ConsumerGroup(req.group_id)
                    answer = cg.heartbeat(
                        group, req, topics, self._now_ms(), self.config.consumer_session_timeout_ms, self.config.consumer_assignors[0], _new_member_id()
                    )
                    member = group.members.get(answer.member_id or "")
                    if member is not None:
                        member.client_id, member.client_host = header.client_id or "", self._client_host(channel)
                    if not group.members:
                        del self._consumer_groups[req.group_id]
                    else:
                        self._maybe_downgrade(req.group_id)
        if answer is None:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=error, member_epoch=-1))
            return
        assignment = None
        if answer.assignment is not None:
            assignment = {
                "topic_partitions": [
                    {"topic_id": topics[t][0], "partitions": sorted(ps)} for t, ps in sorted(answer.assignment.items()) if t in topics and ps
                ]
            }
        channel.send(
            resp_cls.build(
                throttle_time_ms=0,
                error_code=answer.error_code,
                error_message=answer.error_message,
                member_id=answer.member_id,
                member_epoch=answer.member_epoch,
                heartbeat_interval_ms=self.config.consumer_heartbeat_interval_ms if not answer.error_code else 0,
                assignment=assignment,
            )
        )

    # -- ConsumerGroupDescribe (KIP-848) ----------------------------------------------------------------
    def handle_consumer_group_describe(self, header: Any, req: Any, channel: Any) -> None:
        """Consumer-protocol groups as Kafka describes them; a group id that is no consumer
        group (unknown, or a classic group) is answered GROUP_ID_NOT_FOUND."""
        resp_cls = type(req).RESPONSE_TYPE
        topics = self.consumer_topics()
        out = []
        for group_id in req.group_ids:
            error = self._group_error(group_id, empty_ok=True)
            described: dict[str, Any] = {"group_id": group_id, "group_state": "", "assignor_name": "", "members": []}
            if not error:
                with self._lock:
                    group = self._consumer_groups.get(group_id) if self._owns(group_id) else None
                    if not self._owns(group_id):
                        error = ErrorCode.NOT_COORDINATOR
                    elif group is None:
                        error = ErrorCode.GROUP_ID_NOT_FOUND
                        described["error_message"] = f"Group {group_id} not found."
                    else:
                        cg.expire(group, self._now_ms())
                        described.update(
                            group_state=cg.state_of(group),
                            group_epoch=group.group_epoch,
                            assignment_epoch=group.assignment_epoch,
                            assignor_name=group.assignor,
                            members=[
                                {
                                    "member_id": m.member_id,
                                    "instance_id": m.instance_id,
                                    "member_epoch": m.member_epoch,
                                    "client_id": m.client_id,
                                    "client_host": m.client_host,
                                    "subscribed_topic_names": list(m.subscribed),
                                    "assignment": {"topic_partitions": _described(m.current, topics)},
                                    "target_assignment": {"topic_partitions": _described(group.target.get(m.member_id, {}), topics)},
                                    "member_type": 0 if m.classic is not None else 1,  # KIP-1099: 0 classic, 1 consumer
                                }
                                for m in sorted(group.members.values(), key=lambda m: m.member_id)
                            ],
                        )
            out.append({**described, "error_code": error, "authorized_operations": _NO_AUTHORIZED_OPERATIONS})
        channel.send(resp_cls.build(throttle_time_ms=0, groups=out))

    # -- KIP-848 online migration (upgrade U, downgrade D of consumer_group.py) ------------------------
    def _upgrade(self, group_id: str, classic: Group, topics: dict[str, tuple[uuid.UUID, int]]) -> bool:
        """U: ``classic`` becomes a consumer group if the policy and its members allow (under the lock)."""
        if self.config.consumer_migration_policy not in ("upgrade", "bidirectional") or classic.protocol_type != "consumer":
            return False
        now = self._now_ms()
        pairs = [(m, m.metadata(classic.protocol_name) if classic.protocol_name else (m.protocols[0][1] if m.protocols else b"")) for m in classic.members.values()]
        upgraded = cg.upgrade(group_id, classic.generation_id, pairs, topics, now)
        if upgraded is None:
            return False
        # the classic group's parked requests are answered REBALANCE_IN_PROGRESS: they rejoin
        # the consumer group; its delayed operations find it Dead
        del self._groups[group_id]
        self._run(group_id, classic, state.unload_group(classic, ErrorCode.REBALANCE_IN_PROGRESS, now))
        self._consumer_groups[group_id] = upgraded
        # the stored classic group ends here (a reload finds it Empty, as Kafka's tombstones)
        empty = GroupRecord(classic.protocol_type or "", classic.generation_id, None, None, wall_ms(), ())
        self.store.store_group(group_id, empty, lambda error: None)
        log.info("group %s: upgraded from classic (generation %d) to a consumer group", group_id, classic.generation_id)
        return True

    def _maybe_downgrade(self, group_id: str) -> None:
        """D: the consumer group has classic members only: back to a classic group that
        rebalances (under the lock)."""
        cgroup = self._consumer_groups.get(group_id)
        if cgroup is None:
            return
        cg.expire(cgroup, self._now_ms())
        if not cgroup.members:
            del self._consumer_groups[group_id]
            return
        if not cg.should_downgrade(cgroup, self.config.consumer_migration_policy):
            return
        generation, protocol, members = cg.downgrade_record(cgroup)
        now = self._now_ms()
        record = GroupRecord(
            "consumer",
            generation,
            protocol,
            members[0][0].member_id,
            wall_ms(),
            tuple(
                state.MemberRecord(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.classic.session_timeout_ms, meta, assigned)
                for m, meta, assigned in members
                if m.classic is not None
            ),
        )
        group, effects = state.load_group(group_id, record, now)
        for m, _meta, _assigned in members:
            if m.classic is not None and m.member_id in group.members:
                group.members[m.member_id].protocols = m.classic.protocols
        del self._consumer_groups[group_id]
        self._groups[group_id] = group
        self._run(group_id, group, effects + state.rebalance(group, now))
        log.info("group %s: downgraded to a classic group (generation %d)", group_id, generation)

    def consumer_group(self, group_id: str) -> cg.ConsumerGroup | None:
        """A consumer-protocol group (tests, tools)."""
        with self._lock:
            return self._consumer_groups.get(group_id)

    # -- LeaveGroup ------------------------------------------------------------------------------------
    def handle_leave_group(self, header: Any, req: Any, channel: Any) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        if v >= 3:
            leaving = [(m.member_id, m.group_instance_id) for m in req.members]
        else:
            leaving = [(req.member_id, None)]
        error = self._group_error(req.group_id)
        member_errors: list[int] = []
        if not error:
            with self._lock:
                if not self._owns(req.group_id):
                    error = ErrorCode.NOT_COORDINATOR
                elif req.group_id in self._consumer_groups:
                    # K4 classic members of a consumer-protocol group
                    cgroup = self._consumer_groups[req.group_id]
                    topics = self.consumer_topics()
                    for member_id, instance_id in leaving:
                        if not member_id and instance_id is not None:
                            member_id = next((m.member_id for m in cgroup.members.values() if m.instance_id == instance_id), "")
                        member_errors.append(cg.classic_leave(cgroup, member_id, topics, self._now_ms(), self.config.consumer_assignors[0]))
                    self._maybe_downgrade(req.group_id)
                else:
                    group = self._groups.get(req.group_id)
                    error, member_errors, effects = state.leave_group(group, leaving, self._now_ms())
                    self._run(req.group_id, group, effects)
        if v >= 3:
            shape = resp_cls.nested("members")
            members = [shape.build(member_id=m, group_instance_id=i, error_code=c) for (m, i), c in zip(leaving, member_errors, strict=False)]
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=error, members=members))
        else:
            # One member: its error is the answer's (Kafka's LeaveGroupResponse below v3).
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=error or (member_errors[0] if member_errors else ErrorCode.NONE)))

    # -- ListGroups, DescribeGroups, DeleteGroups -------------------------------------------------------
    def handle_list_groups(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        if not self._active:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, groups=[]))
            return
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.store.is_loading() else ErrorCode.NONE
        with self._lock:
            groups = [(g.group_id, g.protocol_type or "") for _, g in sorted(self._groups.items()) if g.state is not GroupState.DEAD]
            # consumer-protocol (KIP-848) groups, protocol type "consumer" as Kafka lists them
            groups += [(gid, "consumer") for gid in sorted(self._consumer_groups) if gid not in self._groups]
            groups.sort()
        channel.send(resp_cls.build(throttle_time_ms=0, error_code=error, groups=groups))

    def handle_describe_groups(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        group_shape = resp_cls.nested("groups")
        member_shape = resp_cls.nested("groups", "members")
        out = []
        for group_id in req.groups:
            error = self._group_error(group_id, empty_ok=True)
            summary = state.GroupSummary("", "", "", ())
            if not error:
                with self._lock:
                    if not self._owns(group_id):
                        error = ErrorCode.NOT_COORDINATOR
                    else:
                        summary = state.describe_group(self._groups.get(group_id))
            members = [
                member_shape.build(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata,
                    member_assignment=m.assignment,
                )
                for m in summary.members
            ]
            out.append(
                group_shape.build(
                    error_code=error,
                    group_id=group_id,
                    group_state=summary.state,
                    protocol_type=summary.protocol_type,
                    protocol_data=summary.protocol_data,
                    members=members,
                    authorized_operations=_NO_AUTHORIZED_OPERATIONS,
                )
            )
        channel.send(resp_cls.build(throttle_time_ms=0, groups=out))

    def handle_delete_groups(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        names = list(dict.fromkeys(req.groups_names or ()))
        results: dict[str, int] = {}
        count_lock = threading.Lock()
        pending = [1]  # one for this loop, so the answer cannot go before every group is decided

        def one_done() -> None:
            with count_lock:
                pending[0] -= 1
                done = pending[0] == 0
            if done:
                channel.send(resp_cls.build(throttle_time_ms=0, results=[(g, results[g]) for g in names]))

        def tombstoned(group_id: str) -> Callable[[int], None]:
            def done(error: int) -> None:
                results[group_id] = error
                one_done()

            return done

        for group_id in names:
            error = self._group_error(group_id, empty_ok=True)
            if error:
                results[group_id] = error
                continue
            with self._lock:
                if not self._owns(group_id):
                    results[group_id] = ErrorCode.NOT_COORDINATOR
                    continue
                group = self._groups.get(group_id)
                results[group_id] = state.delete_group(group, self._now_ms())
                if results[group_id] == ErrorCode.NONE:
                    del self._groups[group_id]
                    with count_lock:
                        pending[0] += 1
                    # Under the lock that decided it: the tombstones follow every record of
                    # the group in the log, and precede any record of a group of that name
                    # created after.
                    self.store.delete_group(group_id, tombstoned(group_id))
        one_done()


def _described(assignment: Mapping[str, Any], topics: Mapping[str, tuple[uuid.UUID, int]]) -> list[dict[str, Any]]:
    return [
        {"topic_id": topics[t][0], "topic_name": t, "partitions": sorted(ps)}
        for t, ps in sorted(assignment.items()) if ps and t in topics
    ]


def _new_member_id() -> str:
    """A member id as Kafka draws one (a random Uuid in its string form)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
