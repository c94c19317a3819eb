"""Membership of one consumer-group member through Kafka 4's consumer group protocol
(``group.protocol=consumer``, KIP-848): the coordinator assigns, the member reconciles.

One :class:`ConsumerProtocolMember` per poll ``Consumer`` with ``group.protocol=consumer``, in
the place :class:`.group.BrokerGroupMember` takes for the classic protocol, with the same face
(``start`` / ``close`` / ``trigger`` / ``await_rebalance`` / ``owned`` / ``commit_generation``
/ ``fatal_error``) and the same :class:`~rebalance.rebalancer.OwnershipListener` callbacks, so
the consumer's fetchers, stream and offset storage serve both (one engine).

Protocol
--------
FindCoordinator -> ConsumerGroupHeartbeat, again every ``heartbeat_interval_ms`` *the
coordinator* gives in its answer. Every heartbeat is sent whole (subscribed topic names, the
remote assignor, the rebalance timeout, the instance id, the partitions owned now by topic id):
the coordinator accepts the full request at any time, and a lost answer costs nothing. The
member id is drawn by the member (KIP-1082) and kept across rejoins. Topic ids of the answer
become names through Metadata v10+ (asked by this member itself at the highest version of
v10-12 the coordinator's connection offers; the rest of the client keeps Metadata v8).
Commits are OffsetCommit with the member epoch in ``generation_id`` (v9+ on Kafka 4, which
refuses older versions from consumer-protocol members).

Member states (:class:`MemberState`), moved only by :func:`decide` (pure) and the shell::

    NEW --start--> JOINING --answer--> RECONCILING --revoked, assigned--> STABLE
    STABLE --answer with another assignment--> RECONCILING
    any --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> FENCED --on_lost--> JOINING (epoch 0)
    any --close--> LEAVING (epoch -1; static member: -2) --> CLOSED

Decision cases of :func:`decide` (labelled in the code):

* D1 coordinator moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS): look it up again; state and epoch unchanged.
* D2 fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): every owned partition is *lost*
  (``on_revoke(..., commit=False)`` -> the consumer's ``on_lost``); rejoin with epoch 0.
* D3 fatal (UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, INVALID_REQUEST,
  GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_VERSION, INVALID_GROUP_ID):
  partitions lost, the member stops for good (``fatal_error``).
* D4 any other error: retried after a backoff; nothing changes.
* D5 answered: the epoch and member id are the answer's; an assignment (null: unchanged)
  becomes the target. The shell keeps the target by topic id and hands it to every decision,
  so what could not be taken at once (an id not in Metadata yet, an ``on_assign`` that
  raised) is taken on a later heartbeat although the coordinator does not send it again. Partitions owned but not in the target are *revoked first*
  (``on_revoke(..., commit=True)``: hand-out stops, positions committed), then those in the
  target not owned are assigned (``on_assign``), then a heartbeat goes at once reporting what
  is owned (the acknowledgement the coordinator waits for before it hands the revoked
  partitions to another member). Partitions in both keep being fetched: a member whose
  partitions do not move never pauses.

Invariants: a partition is fetched only between ``on_assign`` and its ``on_revoke``; it is
reported owned to the coordinator only while fetched; commits carry the epoch the member
holds. Only the member's thread changes the state, the epoch and ``owned``.
"""

from __future__ import annotations

import base64
import enum
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Unpack

from hmbclient.errors import (
    ErrorCode,
    HmbError,
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedByBroker,
    for_code,
)
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.metadata import MetadataRequest

from .assignors import streams_for
from .group import MemberArgs, _Closed, _GroupThread

__all__ = ["Answer", "ConsumerProtocolMember", "Decision", "MemberState", "decide"]

log = logging.getLogger("hmbclient.consumer.group_consumer")

TopicPartition = tuple[str, int]

_DEFAULT_INTERVAL_MS = 3_000

_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
_FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
_FATAL = frozenset({
    ErrorCode.UNRELEASED_INSTANCE_ID,
    ErrorCode.FENCED_INSTANCE_ID,
    ErrorCode.UNSUPPORTED_ASSIGNOR,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.UNSUPPORTED_VERSION,
    ErrorCode.INVALID_GROUP_ID,
})


class MemberState(enum.Enum):
    """Where a consumer-protocol member stands (see the module docstring)."""

    NEW = "new"
    JOINING = "joining"
    RECONCILING = "reconciling"
    STABLE = "stable"
    FENCED = "fenced"
    LEAVING = "leaving"
    CLOSED = "closed"


@dataclass(frozen=True)
class Answer:
    """A ConsumerGroupHeartbeat answer, topic ids resolved to names."""

    error_code: int
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    #: the partitions the member may own now; None: unchanged since the last answer
    assignment: frozenset[TopicPartition] | None = None


@dataclass(frozen=True)
class Decision:
    """What the shell does with one answer, in this order: ``lost`` (no commit), ``revoke``
    (commit first), ``assign``, then a heartbeat at once when ``ack``."""

    state: MemberState
    member_id: str
    member_epoch: int
    lost: frozenset[TopicPartition] = frozenset()
    revoke: frozenset[TopicPartition] = frozenset()
    assign: frozenset[TopicPartition] = frozenset()
    ack: bool = False
    interval_ms: int | None = None
    rediscover: bool = False
    retry: bool = False
    fatal: int = 0


def decide(state: MemberState, member_id: str, epoch: int, owned: frozenset[TopicPartition], answer: Answer) -> Decision:
    """Decide one heartbeat answer (cases D1-D5 of the module docstring); pure."""
    code = answer.error_code
    if state is MemberState.LEAVING:
        return Decision(MemberState.CLOSED, member_id, epoch)
    if code in _MOVED:  # D1
        return Decision(state, member_id, epoch, rediscover=True)
    if code in _FENCED:  # D2
        return Decision(MemberState.FENCED, member_id, 0, lost=owned)
    if code in _FATAL:  # D3
        return Decision(MemberState.CLOSED, member_id, -1, lost=owned, fatal=code)
    if code:  # D4
        return Decision(state, member_id, epoch, retry=True)
    # D5
    target = owned if answer.assignment is None else answer.assignment
    revoke, assign = owned - target, target - owned
    interval = answer.heartbeat_interval_ms if answer.heartbeat_interval_ms > 0 else None
    changed = bool(revoke or assign)
    return Decision(
        MemberState.RECONCILING if changed else MemberState.STABLE,
        answer.member_id or member_id,
        answer.member_epoch,
        revoke=revoke,
        assign=assign,
        ack=changed,
        interval_ms=interval,
    )


def new_member_id() -> str:
    """A member id as Kafka's clients draw one (KIP-1082): a random Uuid, base64url."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


class ConsumerProtocolMember(_GroupThread):
    """One member of a consumer-protocol group (KIP-848); see the module docstring.

    Args:
        client: a NetClient of its own for the coordinator.
        offsets: the group's offset storage on that client (its FindCoordinator is shared).
        group: the group id.
        consumer_id: stream thread ids are ``<consumer_id>-<n>``.
        subscription: what this member consumes.
        listener: the consumer's callbacks.
        metadata_partitions: partition ids per topic (to resolve a pattern subscription).
        remote_assignor: ``group.remote.assignor`` (None: the coordinator's default).
        session_timeout_ms: without an answered heartbeat for this long, owned partitions are
            treated as lost.
        rebalance_timeout_ms: ``max.poll.interval.ms``, sent as the rebalance timeout.
        request_timeout_ms: how long one heartbeat may take.
        retry_backoff_ms: first wait after a failed step (doubles, at most 5 s).
        exclude_internal_topics: a pattern never matches internal topics.
        status: ``status(kind, fields)`` for status events.
        group_instance_id: ``group.instance.id`` (static member: leaves with epoch -2).
    """

    _log = log
    _state: MemberState
    _CLOSED = MemberState.CLOSED

    def __init__(
        self,
        *,
        remote_assignor: str | None = None,
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        **member: Unpack[MemberArgs],
    ) -> None:
        self._init_member(MemberState.NEW, session_timeout_ms, rebalance_timeout_ms, retry_backoff_ms, **member)
        self.remote_assignor = remote_assignor
        self.request_timeout_ms = request_timeout_ms
        # The coordinator answered our first heartbeat (start() returns then).
        self._started = False

        #: our member id (drawn here, KIP-1082) and epoch as the coordinator gave it
        self.member_id = new_member_id()
        self.member_epoch = 0
        self._interval_s = _DEFAULT_INTERVAL_MS / 1000
        self._ids: dict[uuid.UUID, str] = {}
        self._names: dict[str, uuid.UUID] = {}
        #: the coordinator's last assignment by topic id (None: none yet since joining)
        self._target_ids: dict[uuid.UUID, frozenset[int]] | None = None

    # ------------------------------------------------------------------ face shared with BrokerGroupMember

    @property
    def state(self) -> MemberState:
        """Where this member stands now."""
        return self._state

    @property
    def stable(self) -> bool:
        """Reconciled: owns what the coordinator last assigned."""
        return self._state is MemberState.STABLE

    @property
    def generation_id(self) -> int:
        """The member epoch (what the classic member calls its generation)."""
        return self.member_epoch

    def commit_generation(self) -> tuple[int, str]:
        """``(member_epoch, member_id)`` for OffsetCommit."""
        return self.member_epoch, self.member_id

    def _set(self, state: MemberState) -> None:
        with self._changed:
            if state is not self._state:
                log.debug("%s: %s -> %s", self.consumer_id, self._state.name, state.name)
                self._state = state
            self._changed.notify_all()

    def start(self, timeout_s: float | None = None) -> None:
        """Start the member's thread; wait until the coordinator answered the first heartbeat.

        Args:
            timeout_s: how long to wait (default: the request timeout).

        Raises:
            CoordinationError: no coordinator answered in time.
            HmbError: the coordinator refused us for good.
        """
        self._set(MemberState.JOINING)
        wait_s = self.request_timeout_ms / 1000 if timeout_s is None else timeout_s
        self._start_thread(f"hmb-group848-{self.group}", wait_s, lambda: self._started)

    def trigger(self, reason: str = "manual") -> None:
        """Heartbeat at once (the subscription changed): the coordinator reassigns."""
        with self._lock:
            self._heartbeat_wanted = True
        log.debug("%s: heartbeat asked for (%s)", self.consumer_id, reason)
        self._wake.set()

    def await_rebalance(self, timeout: float | None = None) -> bool:
        """Block until STABLE with a heartbeat sent after this call began answered.

        Args:
            timeout: seconds (None: forever).

        Returns:
            True when settled, False on timeout or once closed.
        """
        return self._await_settled(
            timeout, lambda started: self._state is MemberState.STABLE and self._last_alive >= started, lambda: True
        )

    def close(self, release: bool = True) -> None:
        """Revoke (committing when ``release``), leave with epoch -1 (static: -2), stop.

        Args:
            release: commit what was handed out before revoking.
        """
        with self._lock:
            if self._state in (MemberState.LEAVING, MemberState.CLOSED):
                return
            joined = self._state is not MemberState.NEW
            self._state = MemberState.LEAVING
            self._changed.notify_all()
        self._stop_thread()
        try:
            self._revoke_all(commit=release and self.member_epoch > 0, reason="close")
        finally:
            if joined and self._coordinator is not None and self.fatal_error is None:
                self._leave()
            self._set(MemberState.CLOSED)
            self._emit("closed", consumer_id=self.consumer_id)

    # ------------------------------------------------------------------ the member's thread

    def _step(self) -> None:
        if self._coordinator is None:
            self._discover()
            return
        self._check_session()
        with self._lock:
            now_wanted = self._heartbeat_wanted
        if now_wanted or time.monotonic() >= self._next_heartbeat:
            self._heartbeat()
            self._failures = 0
        else:
            self._sleep(max(0.0, self._next_heartbeat - time.monotonic()))

    def _refuses_start(self, exc: BaseException) -> bool:
        return not self._started and isinstance(exc, HmbError) and not getattr(exc, "retriable", True)

    def _discover(self) -> None:
        node = self._find_coordinator()
        if node is None:
            return
        self._coordinator = node
        self._next_heartbeat = 0.0
        self._emit("coordinator_found", consumer_id=self.consumer_id, node=self._coordinator)

    def _lose_coordinator(self, why: str) -> None:
        log.info("%s: coordinator of %s lost (%s)", self.consumer_id, self.group, why)
        self.offsets.forget_coordinator()
        self._coordinator = None

    def _check_session(self) -> None:
        # No heartbeat answered for a session: the coordinator may have dropped us and handed
        # our partitions on; they are lost (no commit) and we join again with epoch 0.
        if self.owned and self._last_alive and time.monotonic() - self._last_alive >= self.session_timeout_s:
            self._apply(Decision(MemberState.FENCED, self.member_id, 0, lost=frozenset(self.owned)), "session timeout")

    # ------------------------------------------------------------------ topics

    def _subscribed_topics(self) -> list[str]:
        counts = self.subscription.topic_counts
        if counts is not None:
            return sorted(counts)
        topic_filter = self.subscription.topic_filter
        assert topic_filter is not None
        return sorted(t for t in self.metadata_partitions(None) if topic_filter.is_topic_allowed(t, self.exclude_internal_topics))

    def _refresh_ids(self, topics: list[str] | None) -> None:
        """Topic ids <-> names from Metadata v10-12 on the coordinator's connection."""
        assert self._coordinator is not None
        versions: BrokerVersions = self._wait(self.client.versions(self._coordinator), self.request_timeout_ms)
        hi = versions.ranges.get(ApiKey.METADATA, (0, -1))[1] if versions.ranges is not None else -1
        if hi < 10:
            raise UnsupportedByBroker(
                "group.protocol=consumer needs topic ids (Metadata v10+), which this connection does not offer "
                "(a broker before Kafka 2.8, or api.version pinned below it); use group.protocol=classic"
            )
        version = min(hi, 12)

        def build(_versions: BrokerVersions) -> Any:
            asked = None if topics is None else [{"topic_id": uuid.UUID(int=0), "topic": t} for t in topics]
            return MetadataRequest[version].build(topics=asked, allow_auto_topic_creation=False, include_topic_authorized_operations=False)

        future = self.client.send(self._coordinator, build, timeout_ms=self.request_timeout_ms, api_key=ApiKey.METADATA)
        resp = self._wait(future, self.request_timeout_ms)
        for topic in resp.topics:
            if topic.error_code or not topic.topic or topic.topic_id == uuid.UUID(int=0):
                continue
            self._ids[topic.topic_id] = topic.topic
            self._names[topic.topic] = topic.topic_id

    # ------------------------------------------------------------------ the heartbeat

    def _heartbeat(self) -> None:
        with self._lock:
            self._heartbeat_wanted = False
        topics = self._subscribed_topics()
        if any(t not in self._names for t in topics):
            self._refresh_ids(topics)
        owned: dict[str, list[int]] = {}
        for t, p in self.owned:
            owned.setdefault(t, []).append(p)
        reported = [{"topic_id": self._names[t], "partitions": sorted(ps)} for t, ps in sorted(owned.items()) if t in self._names]
        epoch = self.member_epoch
        sent = time.monotonic()
        self._next_heartbeat = sent + self._interval_s

        def build(versions: BrokerVersions) -> Any:
            return self._heartbeat_request(
                versions,
                epoch,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                topics=[t for t in topics if t in self._names],
                assignor=self.remote_assignor,
                owned=reported,
            )

        assert self._coordinator is not None
        try:
            future = self.client.send(self._coordinator, build, timeout_ms=self.request_timeout_ms, api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT)
            resp = self._wait(future, self.request_timeout_ms)
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._lose_coordinator(f"ConsumerGroupHeartbeat: {exc}")
            return
        if resp.assignment is not None and not resp.error_code:
            # the target by topic id, kept: the coordinator sends it again only when it changes,
            # so a partition not taken yet (an id not in Metadata yet, an on_assign that
            # failed) is taken on a later heartbeat
            self._target_ids = {e.topic_id: frozenset(int(p) for p in e.partitions) for e in resp.assignment.topic_partitions}
        assignment: frozenset[TopicPartition] | None = None
        if self._target_ids is not None and not resp.error_code:
            if any(tid not in self._ids for tid in self._target_ids):
                self._refresh_ids(None)
            unknown = [tid for tid in self._target_ids if tid not in self._ids]
            if unknown:
                log.info("%s: assigned topic ids not in Metadata yet: %s", self.consumer_id, unknown)
            assignment = frozenset((self._ids[tid], p) for tid, ps in self._target_ids.items() if tid in self._ids for p in ps)
        answer = Answer(resp.error_code, resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms, assignment)
        decision = decide(self._state, self.member_id, epoch, frozenset(self.owned), answer)
        if not resp.error_code:
            with self._changed:
                self._last_alive = max(self._last_alive, sent)
                self._changed.notify_all()
        elif resp.error_code:
            self._last_error = f"{for_code(resp.error_code).__name__}: {resp.error_message or ''}"
        self._apply(decision, resp.error_message or "")

    def _heartbeat_request(
        self,
        versions: BrokerVersions,
        epoch: int,
        *,
        rebalance_timeout_ms: int,
        topics: list[str] | None,
        assignor: str | None,
        owned: list[dict[str, Any]] | None,
    ) -> Any:
        """A ConsumerGroupHeartbeat of this member (``epoch`` -1 / -2: the leave)."""
        return versions.build(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.group_instance_id,
            rack_id=None,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=topics,
            subscribed_topic_regex=None,
            server_assignor=assignor,
            topic_partitions=owned,
        )

    def _apply(self, d: Decision, message: str) -> None:
        """Carry out a :class:`Decision` (the shell of :func:`decide`)."""
        if d.rediscover:
            self._lose_coordinator(for_code(ErrorCode.NOT_COORDINATOR).__name__)
            return
        if d.retry:
            raise HmbError(f"ConsumerGroupHeartbeat of group {self.group!r}: {self._last_error}")
        if d.fatal:
            exc = for_code(d.fatal)(f"ConsumerGroupHeartbeat of group {self.group!r}: {message}")
            log.error("%s: %s; the member stops", self.consumer_id, exc)
            self._revoke_all(commit=False, reason="fatal")
            with self._changed:
                self.fatal_error = exc
                self._start_error = self._start_error or (exc if not self._started else None)
                self._state = MemberState.CLOSED
                self._changed.notify_all()
            self._closing.set()
            raise _Closed()
        if d.state is MemberState.FENCED:
            log.warning("%s: fenced in group %s (%s); rejoining with epoch 0", self.consumer_id, self.group, message or self._last_error)
            self._set(MemberState.FENCED)
            self._emit("fenced", consumer_id=self.consumer_id, owned=len(self.owned))
            lost = {tp: self.owned[tp] for tp in d.lost if tp in self.owned}
            self.owned = {}
            if lost:
                self._revoke(lost, commit=False, reason="fenced")
            self.member_epoch = 0
            self._target_ids = None
            self._next_heartbeat = 0.0
            self._set(MemberState.JOINING)
            return
        self.member_id, self.member_epoch = d.member_id, d.member_epoch
        if d.interval_ms is not None:
            self._interval_s = d.interval_ms / 1000
            self._next_heartbeat = min(self._next_heartbeat, time.monotonic() + self._interval_s)
        with self._changed:
            self._started = True
            self._changed.notify_all()
        if d.state is MemberState.RECONCILING:
            self._set(MemberState.RECONCILING)
            if d.revoke:
                revoked = {tp: self.owned[tp] for tp in d.revoke if tp in self.owned}
                for tp in revoked:
                    del self.owned[tp]
                self._revoke(revoked, commit=True, reason="reconcile")
            if d.assign:
                topic_counts = {t: 1 for t, _ in d.assign}
                added = streams_for(self.consumer_id, sorted(d.assign), topic_counts, 1)
                self.listener.on_assign(dict(added))
                self.owned.update(added)
                self._emit("partitions_assigned", consumer_id=self.consumer_id, partitions=sorted(added))
            self.rounds += 1
            self._emit("rebalance_completed", consumer_id=self.consumer_id, generation=self.member_epoch, owned=len(self.owned), seconds=0.0)
            with self._lock:
                self._heartbeat_wanted = True  # acknowledge at once
        self._set(MemberState.STABLE)

    def _leave(self) -> None:
        epoch = -2 if self.group_instance_id is not None else -1

        def build(versions: BrokerVersions) -> Any:
            return self._heartbeat_request(versions, epoch, rebalance_timeout_ms=-1, topics=None, assignor=None, owned=None)

        self._send_leave(ApiKey.CONSUMER_GROUP_HEARTBEAT, build, self.member_id)
