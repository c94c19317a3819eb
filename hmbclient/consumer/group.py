"""Membership of one consumer-group member through the brokers' group coordinator (the
connector's ``group.coordination=broker``, the poll Consumer's ``group.protocol=classic``): the
classic group protocol of Kafka 0.9 and later, as Kafka 4 and Tansu, which have no ZooKeeper,
balance groups.

One :class:`BrokerGroupMember` per ``ConsumerConnector`` in broker mode, in the place the
ZooKeeper mode's :class:`rebalance.rebalancer.ZkRebalancer` takes: the same
:class:`~rebalance.rebalancer.OwnershipListener` callbacks (``on_revoke`` / ``on_assign``), the
same ``start`` / ``close`` / ``await_rebalance`` / ``owned``, so the connector's fetchers,
streams and offset storage serve both.

Protocol
--------
FindCoordinator -> JoinGroup (protocol type "consumer"; one protocol per assignor, the
configured ``partition.assignment.strategy`` first, each with a ConsumerProtocolMemberMetadata
naming the subscribed topics; v4+ coordinators first answer a dynamic member MEMBER_ID_REQUIRED
with the id to join with) -> the leader assigns with :mod:`.assignors` (the Java consumer's
"range", "roundrobin" and "cooperative-sticky", so kafka-python, aiokafka and librdkafka
members can share the group) and hands every member's ConsumerProtocolMemberAssignment in with
SyncGroup -> each member spreads its share over its streams and the consumer fetches ->
Heartbeat every ``heartbeat_interval_ms``.

Two rebalance protocols, decided by the assignor:

* EAGER ("range", "roundrobin", offered together, subscription v0): every rebalance revokes
  every partition before rejoining.
* COOPERATIVE ("cooperative-sticky", KIP-429, offered alone, so a group with members that only
  offer eager assignors refuses us, INCONSISTENT_GROUP_PROTOCOL): the subscription (v3) carries
  the partitions we own and their generation; on a rebalance we rejoin *still owning and
  consuming* them; after SyncGroup the partitions no longer ours are revoked (with a commit),
  then only the new ones are assigned, and if anything was revoked we rejoin at once: the
  follow-up rebalance hands the revoked partitions to their new owner (the assignor never gives
  a partition another member still owns). Partitions that stay put are never revoked.

Static membership (``group_instance_id``, KIP-345): sent in JoinGroup v5+, SyncGroup v3+,
Heartbeat v3+; the coordinator gives a restarted member its partitions back under the same
generation (no rebalance), so ``close`` sends no LeaveGroup for a static member (as Java). A
coordinator answer FENCED_INSTANCE_ID (another process took our instance id) stops the member
for good: partitions lost, ``fatal_error`` set, state CLOSED; it never rejoins (that would
fence the other in turn).

Hooks for a consumer (the ``listener``, an OwnershipListener)
--------------------------------------------------------------
Called on the group thread, never concurrently, in this order within a rebalance:

* ``on_revoke(partitions, commit=True)`` -- *revoked*: stop handing out and fetching these,
  commit what was handed out, return (raise if the commit failed: the rebalance goes on and the
  partitions are then reported again with ``commit=False``). Eager: every owned partition at
  the start of each rebalance; cooperative: only the partitions taken away, after SyncGroup.
* ``on_revoke(partitions, commit=False)`` -- *lost*: the coordinator dropped us (session ran
  out, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, coordinator lost during a
  cooperative rejoin): stop at once, commit nothing (another member may own them already).
* ``on_assign(partitions)`` -- *assigned*: ``{tp: stream thread id}`` of the partitions that
  are new to us (eager: the whole share; cooperative: only the increment); read committed
  offsets and start fetching. May raise (the offsets could not be read): SyncGroup is retried.

A subscribe/poll consumer maps these to ``on_revoke``/``on_lost``/``on_assign`` user callbacks;
``owned`` is the current assignment; ``commit_generation()`` gives the generation and member id
for OffsetCommit; ``fatal_error`` says why a member stopped for good.

Kafka 4's consumer group protocol (KIP-848, ``group.protocol=consumer`` on the poll Consumer) is
:mod:`.group_consumer`'s member, with the same face. Kafka's ``group.protocol`` (classic |
consumer) clashed with the connector's ``group.protocol`` (zookeeper | broker): the connector's
choice is ``group.coordination`` (zookeeper | broker), with ``group.protocol=zookeeper|broker``
accepted as its alias there.

Member states
-------------
Where the member stands is one :class:`MemberState`; every change goes through
``BrokerGroupMember._transition(event)``, which looks the move up in ``_TRANSITIONS`` (see
:func:`next_state`); an event a state does not expect raises :class:`IllegalTransition`::

    NEW              --START-------------> DISCOVERING
    DISCOVERING      --COORDINATOR_FOUND-> JOINING
    JOINING          --JOINED------------> SYNCING
    SYNCING          --SYNCED------------> STABLE
    SYNCING          --REJOIN------------> JOINING        (SyncGroup refused)
    STABLE           --REJOIN, FENCED----> JOINING        (revoked with / without a commit)
    STABLE           --COORDINATOR_LOST--> REDISCOVERING
    REDISCOVERING    --COORDINATOR_FOUND-> STABLE         (same generation: heartbeats resume)
    REDISCOVERING    --FENCED------------> DISCOVERING    (the session ran out: revoked uncommitted)
    JOINING, SYNCING --COORDINATOR_LOST--> DISCOVERING
    every state      --CLOSE-------------> CLOSED

* NEW: constructed; :meth:`BrokerGroupMember.start` starts the group thread.
* DISCOVERING: no coordinator known, nothing owned: FindCoordinator (retried with backoff).
* JOINING: nothing owned (cooperative: what we keep through the rebalance); JoinGroup is due
  (again after MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS or a retriable
  error).
* SYNCING: JoinGroup answered (the leader also got every member's subscription); SyncGroup is
  due, then the assignment is handed to the consumer (``on_assign``).
* STABLE: the consumer fetches our share; heartbeats every ``heartbeat_interval_ms``. A
  heartbeat answered REBALANCE_IN_PROGRESS, a change of the subscribed topics or their
  partitions, or :meth:`BrokerGroupMember.trigger` -> revoke every partition *with* a commit
  (eager; cooperative: none), then REJOIN. ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID (the coordinator dropped us) -> revoke
  *without* a commit (our partitions may already be someone else's), then FENCED.
* REDISCOVERING: the coordinator moved or cannot be reached (NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, a lost connection, a heartbeat without answer) while we own
  partitions: look it up again and resume heartbeats under the same generation; the consumer
  keeps consuming while our session may still be alive. FENCED when it is not.
* CLOSED: :meth:`BrokerGroupMember.close` was called.

Events a state does not draw are refused, except these, which leave the state as it is:
COORDINATOR_LOST in DISCOVERING and REDISCOVERING (still looking), REJOIN in DISCOVERING and
REDISCOVERING (remembered: acted on once back in STABLE), REJOIN in JOINING (join again), and
everything once CLOSED.

Invariants
----------
* Only the owner hands out: partitions are handed to the consumer (``on_assign``) only after
  a SyncGroup of the current generation answered, and revoked (``on_revoke``) before any
  JoinGroup is sent (cooperative: those taken away are revoked before the follow-up JoinGroup,
  and the assignor gives nobody a partition another member still reports owned). A member whose last successful heartbeat was *sent* a session timeout
  ago revokes without a commit: the coordinator, whose clock for us started no earlier, may
  have dropped us and given our partitions away.
* Commit before revoke: on a rebalance the consumer stops handing out, then commits exactly
  what it handed out with the current generation and member id (OffsetCommit v2+; a
  coordinator accepts those while the group prepares the rebalance) and only then rejoins.
  A member that was dropped commits nothing: what it handed out since its last commit is
  consumed again by the next owner (the only source of duplicates).
* Only the group thread changes the state (but for START and CLOSE), ``owned`` and the
  generation; other threads ask for a rejoin (:meth:`trigger`) or a heartbeat
  (:meth:`await_rebalance`) through flags and a wake-up event. Heartbeats run on the group
  thread: the thread consuming a stream never waits for them, nor they for it.
* The group thread talks to the coordinator over its own :class:`~hmbclient.net.NetClient`
  (its own connection): a broker answers one request per connection at a time, and a
  JoinGroup may wait for a whole rebalance, which must not hold up fetches or Metadata.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypedDict, Unpack

from hmbclient.errors import (
    BrokerError,
    CoordinationError,
    ErrorCode,
    HmbError,
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedByBroker,
    for_code,
)
from hmbclient.net.client import NetClient
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
    decode_member_assignment,
    decode_member_metadata,
)
from rebalance.rebalancer import OwnershipListener, Subscription

from .assignors import COOPERATIVE_ASSIGNORS, GROUP_ASSIGNORS, MemberSubscription, streams_for
from .offsets import COORDINATOR_MOVED, KafkaOffsetStorage

__all__ = [
    "BrokerGroupMember",
    "MemberState",
    "Event",
    "next_state",
    "IllegalTransition",
]

log = logging.getLogger("hmbclient.consumer.group")

TopicPartition = tuple[str, int]
#: ``metadata_partitions(topics)``: partition ids per topic (None: every topic).
MetadataPartitions = Callable[[list[str] | None], Mapping[str, list[int]]]
StatusCallback = Callable[[str, Mapping[str, Any]], None]


class _RequiredMemberArgs(TypedDict):
    client: NetClient
    offsets: KafkaOffsetStorage
    group: str
    consumer_id: str
    subscription: Subscription
    listener: OwnershipListener
    metadata_partitions: MetadataPartitions


class MemberArgs(_RequiredMemberArgs, total=False):
    """The keyword arguments both kinds of group member take alike (see their Args); the
    last three may be left out (``True``, ``None``, ``None``)."""

    exclude_internal_topics: bool
    status: StatusCallback | None
    group_instance_id: str | None

#: How often a stable member compares its topics and their partitions with the ones it
#: joined with (a change means a rebalance).
METADATA_CHECK_S = 2.0
#: Longest wait between retries of a failing step.
_MAX_RETRY_S = 5.0
#: Extra time a JoinGroup answer may take beyond the rebalance timeout (as the Java client).
_JOIN_GRACE_MS = 5_000
#: How long shutdown waits for LeaveGroup (the session timeout cleans up if it gets lost).
_LEAVE_TIMEOUT_MS = 3_000

# Heartbeat, SyncGroup and OffsetCommit answers that mean "the coordinator dropped us".
_DROPPED = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})


class IllegalTransition(RuntimeError):
    """An event arrived in a state that does not expect it (a bug in the member)."""


class _Closed(Exception):
    """close() was called: the group thread leaves whatever it was waiting for."""


class _GroupThread:
    """What the two kinds of group member share on their group thread (the classic
    :class:`BrokerGroupMember` and KIP-848's ``group_consumer.ConsumerProtocolMember``): the
    start-and-wait, the loop of steps with its backoff after a failure, the interruptible sleep,
    the wait for the coordinator's answer, the coordinator lookup, the revocation, the stop of
    the thread, the leave request and the status events. The subclass's ``__init__`` sets the
    attributes below through ``_init_member`` (with the :class:`MemberArgs` both take), then
    its own; it gives ``_step`` (one step of its loop), ``_refuses_start`` (a failure that
    ends ``start()`` at once) and ``_CLOSED`` (its closed state)."""

    _log: logging.Logger = log
    group: str
    consumer_id: str
    client: NetClient
    offsets: KafkaOffsetStorage
    listener: OwnershipListener
    owned: dict[TopicPartition, str]
    backoff_s: float
    _state: enum.Enum
    _CLOSED: enum.Enum  # the subclass's MemberState.CLOSED
    _coordinator: int | None
    _wake: threading.Event
    _closing: threading.Event
    _changed: threading.Condition
    _thread: threading.Thread | None
    _start_error: BaseException | None
    _failures: int
    _last_error: str
    _status: Callable[[str, dict[str, Any]], None] | None

    def _init_member(
        self,
        state: enum.Enum,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        retry_backoff_ms: int,
        **member: Unpack[MemberArgs],
    ) -> None:
        """Set what both members keep alike (the subclass's ``__init__`` calls it first, then
        sets its own): the arguments they share, the first ``state``, the thread's events and
        Condition, the owned partitions and the step-failure counters.

        Raises:
            TypeError: an argument :class:`MemberArgs` does not name, or one it requires
                missing (as a signature that listed them would refuse).
        """
        unknown = member.keys() - MemberArgs.__required_keys__ - MemberArgs.__optional_keys__
        missing = MemberArgs.__required_keys__ - member.keys()
        if unknown or missing:
            raise TypeError(f"{type(self).__name__}(): unexpected arguments {sorted(unknown)}, "
                            f"missing arguments {sorted(missing)}")
        self.client = member["client"]
        self.offsets = member["offsets"]
        self.group = member["group"]
        self.consumer_id = member["consumer_id"]
        self.subscription = member["subscription"]
        self.listener = member["listener"]
        self.metadata_partitions = member["metadata_partitions"]
        self.session_timeout_s = session_timeout_ms / 1000
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.backoff_s = retry_backoff_ms / 1000
        self.exclude_internal_topics = member.get("exclude_internal_topics", True)
        self._status = member.get("status")
        self.group_instance_id = member.get("group_instance_id")
        #: Set when the member stopped for good (another member took our group.instance.id,
        #: or the coordinator refused us for good); the member is CLOSED then and owns nothing.
        self.fatal_error: BaseException | None = None

        # The state and the Condition await_rebalance and start wait on.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._state = state
        # Wakes the group thread: close, a rejoin or a heartbeat asked for.
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread = None
        # Set by other threads (under _lock): heartbeat at once.
        self._heartbeat_wanted = False
        # What stopped start() for good.
        self._start_error = None

        #: Partitions the consumer fetches for us (tp -> stream thread id). Group thread only.
        self.owned = {}
        #: Completed rebalances (for tests and benchmarks).
        self.rounds = 0
        self._coordinator = None
        # monotonic() at which the last heartbeat that succeeded was *sent*.
        self._last_alive = 0.0
        self._next_heartbeat = 0.0
        self._failures = 0
        self._last_error = ""

    def _step(self) -> None:
        raise NotImplementedError

    def _refuses_start(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _start_thread(self, name: str, wait_s: float, ready: Callable[[], bool]) -> None:
        """Start the group thread; wait (under ``_changed``) until ``ready()`` or a refusal.

        Raises:
            CoordinationError: not ready within ``wait_s``.
            HmbError: the coordinator refused us for good (``_start_error``).
        """
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + wait_s
        with self._changed:
            while not ready() and self._start_error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CoordinationError(
                        f"group {self.group!r}: no group coordinator answered within {wait_s:g}s"
                        + (f" (last error: {self._last_error})" if self._last_error else "")
                    )
                self._changed.wait(min(left, 0.5))
            if self._start_error is not None:
                raise self._start_error

    def _run(self) -> None:
        while not self._closing.is_set():
            try:
                self._step()
            except _Closed:
                return
            except Exception as exc:  # noqa: BLE001 - the loop must go on; logged, retried
                try:
                    self._step_failed(exc)
                except _Closed:
                    return

    def _step_failed(self, exc: BaseException) -> None:
        # A failing step is retried after a backoff that doubles per consecutive failure
        # (capped), so a persistent problem neither spins nor floods the log.
        self._failures += 1
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, HmbError):
            self._log.warning("%s: group step in %s failed (%s); retrying", self.consumer_id, self._state.name, text)
        elif self._failures == 1 or text != self._last_error:
            self._log.error("%s: unexpected error in group step %s", self.consumer_id, self._state.name, exc_info=exc)
        self._last_error = text
        if self._refuses_start(exc):
            # Before the member is in, a refusal for good ends start() (a wrong group id, no
            # group APIs, no authorization) rather than leaving it to time out.
            with self._changed:
                self._start_error = exc
                self._changed.notify_all()
        self._emit("rebalance_failed", consumer_id=self.consumer_id, error=repr(exc), failures=self._failures)
        self._sleep(min(_MAX_RETRY_S, (self.backoff_s + 0.01) * 2 ** (self._failures - 1)))

    def _find_coordinator(self) -> int | None:
        """FindCoordinator (shared with the offset storage); None after a failure worth a retry
        (a lost connection, no answer, a retriable error), after a short sleep."""
        try:
            return self.offsets.coordinator()
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            self._log.info("%s: FindCoordinator failed: %s", self.consumer_id, exc)
        except BrokerError as exc:
            if not exc.retriable:
                raise
            self._last_error = f"{type(exc).__name__}: {exc}"
        self._sleep(self.backoff_s + 0.05)
        return None

    def _stop_thread(self) -> None:
        """Wake the group thread and wait for it to end (close(); not from the thread itself)."""
        self._closing.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()
        if self._closing.is_set():
            raise _Closed()

    def _wait(self, future: Future[Any], timeout_ms: float) -> Any:
        # Wait for an answer, but leave at once when closing (the request is abandoned).
        deadline = time.monotonic() + timeout_ms / 1000 + 1.0
        while True:
            if self._closing.is_set():
                raise _Closed()
            try:
                return future.result(timeout=0.1)
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise RequestTimedOutError(f"no answer from the group coordinator in {timeout_ms:g} ms") from None

    def _revoke(self, owned: Mapping[TopicPartition, str], *, commit: bool, reason: str) -> None:
        committed = commit
        if commit:
            try:
                self.listener.on_revoke(dict(owned), True)
            except Exception as exc:  # noqa: BLE001 - the rebalance goes on without the commit
                # Holding on would not keep the partitions (the coordinator moves on without
                # us): forget the uncommitted positions; the next owner repeats them.
                self._log.warning("%s: commit before revoking failed (%s); %d partitions revoked uncommitted",
                                  self.consumer_id, exc, len(owned))
                committed = False
                self.listener.on_revoke(dict(owned), False)
        else:
            self.listener.on_revoke(dict(owned), False)
        self._emit(
            "partitions_revoked",
            consumer_id=self.consumer_id,
            partitions=sorted(owned),
            committed=committed,
            reason=reason,
        )

    def _await_settled(
        self, timeout: float | None, settled: Callable[[float], bool], nudge: Callable[[], bool]
    ) -> bool:
        """await_rebalance's wait: under ``_changed`` until ``settled(started)`` (True), the
        state ``_CLOSED`` or ``timeout`` seconds (False; None: forever); while ``nudge()``, asks
        the thread for a heartbeat at once, so ``_last_alive`` passes ``started`` soon."""
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        with self._changed:
            while True:
                if settled(started):
                    return True
                if self._state is self._CLOSED:
                    return False
                if not self._heartbeat_wanted and nudge():
                    self._heartbeat_wanted = True
                    self._wake.set()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(min(left, 0.5) if left is not None else 0.5)

    def _revoke_all(self, *, commit: bool, reason: str) -> None:
        """Give up every owned partition: revoked (committing first when ``commit``)."""
        owned, self.owned = self.owned, {}
        if owned:
            self._revoke(owned, commit=commit, reason=reason)

    def _send_leave(self, api_key: ApiKey, build: Callable[[BrokerVersions], Any], member_id: str) -> None:
        """Send the leave request (LeaveGroup, or a heartbeat with a leaving epoch); a failure
        is only logged: the session timeout removes us."""
        try:
            answer = self.client.call(self._coordinator, build, timeout_ms=_LEAVE_TIMEOUT_MS, api_key=api_key)  # type: ignore[arg-type]
            code = answer.error_code or next((m.error_code for m in getattr(answer, "members", None) or () if m.error_code), 0)
            if code:
                self._log.info("%s: %s (leave) answered %s", self.consumer_id, api_key.name, for_code(code).__name__)
            else:
                self._emit("left", consumer_id=self.consumer_id, member_id=member_id)
        except HmbError as exc:
            self._log.info("%s: leaving failed (%s); the session timeout removes us", self.consumer_id, exc)

    def _emit(self, kind: str, **fields: Any) -> None:
        if self._status is None:
            return
        try:
            self._status(kind, fields)
        except Exception:  # noqa: BLE001 - listeners must not break the loop
            self._log.exception("status listener failed on %s", kind)


# ---------------------------------------------------------------------- the state machine


class MemberState(enum.Enum):
    """Where one member of a broker-coordinated group stands (see the module docstring)."""

    NEW = "new"
    DISCOVERING = "discovering"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    REDISCOVERING = "rediscovering"
    CLOSED = "closed"


class Event(enum.Enum):
    """What moves a member from one :class:`MemberState` to another."""

    #: ``start()``.
    START = "start"
    #: FindCoordinator named the coordinator.
    COORDINATOR_FOUND = "coordinator_found"
    #: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection or no answer in time.
    COORDINATOR_LOST = "coordinator_lost"
    #: JoinGroup answered with a generation.
    JOINED = "joined"
    #: SyncGroup answered with our assignment, and the consumer has it.
    SYNCED = "synced"
    #: Join (again): the coordinator asked for it, or our view of the group is stale.
    REJOIN = "rejoin"
    #: The coordinator dropped us (or our session ran out): partitions revoked uncommitted.
    FENCED = "fenced"
    #: ``close()``.
    CLOSE = "close"


_S, _E = MemberState, Event

#: state -> {event: next state}. An event missing from a state's row is refused.
_TRANSITIONS: dict[MemberState, dict[Event, MemberState]] = {
    _S.NEW: {_E.START: _S.DISCOVERING, _E.CLOSE: _S.CLOSED},
    _S.DISCOVERING: {
        _E.COORDINATOR_FOUND: _S.JOINING,
        _E.COORDINATOR_LOST: _S.DISCOVERING,
        _E.REJOIN: _S.DISCOVERING,
        _E.CLOSE: _S.CLOSED,
    },
    _S.JOINING: {
        _E.JOINED: _S.SYNCING,
        _E.REJOIN: _S.JOINING,
        _E.COORDINATOR_LOST: _S.DISCOVERING,
        _E.CLOSE: _S.CLOSED,
    },
    _S.SYNCING: {
        _E.SYNCED: _S.STABLE,
        _E.REJOIN: _S.JOINING,
        _E.COORDINATOR_LOST: _S.DISCOVERING,
        _E.CLOSE: _S.CLOSED,
    },
    _S.STABLE: {
        _E.REJOIN: _S.JOINING,
        _E.FENCED: _S.JOINING,
        _E.COORDINATOR_LOST: _S.REDISCOVERING,
        _E.CLOSE: _S.CLOSED,
    },
    _S.REDISCOVERING: {
        _E.COORDINATOR_FOUND: _S.STABLE,
        _E.COORDINATOR_LOST: _S.REDISCOVERING,
        _E.REJOIN: _S.REDISCOVERING,
        _E.FENCED: _S.DISCOVERING,
        _E.CLOSE: _S.CLOSED,
    },
    _S.CLOSED: {event: _S.CLOSED for event in Event},
}

#: States in which this member owns partitions (the consumer fetches them).
_OWNING = frozenset({_S.STABLE, _S.REDISCOVERING})


def next_state(state: MemberState, event: Event) -> MemberState:
    """The state ``event`` leads to from ``state`` (the module docstring draws the table).

    Raises:
        IllegalTransition: ``state`` does not expect ``event``.
    """
    try:
        return _TRANSITIONS[state][event]
    except KeyError:
        raise IllegalTransition(f"event {event.name} is not expected in state {state.name}") from None


# ---------------------------------------------------------------------- the member


def _member_subscription(meta: Any, instance: str | None) -> MemberSubscription:
    """A member's JoinGroup metadata as the assignors read it: owned partitions (v1+) and their
    generation (v2+ ``generation_id``; before, Java's 4-byte ``user_data``, or the generation
    that ends librdkafka's sticky ``user_data``)."""
    owned = tuple((e.topic, int(p)) for e in (getattr(meta, "owned_partitions", None) or ()) for p in e.partitions)
    generation = getattr(meta, "generation_id", -1)
    if meta.version < 2 or generation is None:
        generation = -1
        data = meta.user_data
        if data is not None and len(data) >= 4:
            generation = int.from_bytes(bytes(data[-4:]), "big", signed=True)
    return MemberSubscription(tuple(meta.topics), instance, owned, generation)



class BrokerGroupMember(_GroupThread):
    """Membership and assignment of one member of a broker-coordinated consumer group.

    Args:
        client: a NetClient of its own for the coordinator (see the module docstring).
        offsets: the group's offset storage on that client; its coordinator lookup
            (FindCoordinator) is shared, so commits follow the coordinator when it moves.
        group: the group id.
        consumer_id: this connector's id; stream thread ids are ``<consumer_id>-<n>`` (the
            coordinator names the member itself: ``member_id``).
        subscription: what this member consumes.
        listener: the consumer's callbacks (the connector).
        metadata_partitions: partition ids per topic from the Metadata API.
        assignor: ``"range"`` or ``"roundrobin"``: offered first; the other one second.
        session_timeout_ms / heartbeat_interval_ms / rebalance_timeout_ms: as Kafka's
            ``session.timeout.ms``, ``heartbeat.interval.ms`` and ``max.poll.interval.ms``.
        request_timeout_ms: how long FindCoordinator, SyncGroup and Heartbeat may take.
        retry_backoff_ms: first wait after a failed step (doubles, at most 5 s).
        exclude_internal_topics: topic filters never match internal topics.
        status: ``status(kind, fields)`` for status events (never raises into the loop).
        group_instance_id: Kafka's ``group.instance.id``: a static member (KIP-345; needs
            JoinGroup v5+). Restarted within the session timeout it gets its partitions back
            without a rebalance; it sends no LeaveGroup on close.
    """

    _state: MemberState
    _CLOSED = MemberState.CLOSED

    def __init__(
        self,
        *,
        assignor: str = "range",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        rebalance_timeout_ms: int = 300_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 200,
        **member: Unpack[MemberArgs],
    ) -> None:
        if assignor not in GROUP_ASSIGNORS:
            raise ValueError(f"assignor must be one of {sorted(GROUP_ASSIGNORS)}, got {assignor!r}")
        if member.get("group_instance_id") == "":
            raise ValueError("group_instance_id must be a non-empty string or None")
        self._init_member(MemberState.NEW, session_timeout_ms, rebalance_timeout_ms, retry_backoff_ms, **member)
        #: COOPERATIVE rebalance protocol (KIP-429): offered alone, so a group never picks an
        #: eager assignor for it (members sharing no assignor are refused by the coordinator).
        self.cooperative = assignor in COOPERATIVE_ASSIGNORS
        if self.cooperative:
            self.protocols = [assignor]
        else:
            eager = set(GROUP_ASSIGNORS) - COOPERATIVE_ASSIGNORS - {assignor}
            self.protocols = [assignor, *sorted(eager)]
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.session_timeout_ms = session_timeout_ms
        self.request_timeout_ms = min(request_timeout_ms, session_timeout_ms)
        self.find_timeout_ms = request_timeout_ms

        # Flags other threads set (under _lock) and the group thread acts on.
        self._rejoin_wanted = False
        # The first real JoinGroup is on its way (start() returns then).
        self._join_sent = False

        #: This member's id and generation as the coordinator knows them.
        self.member_id = ""
        self.generation_id = -1
        self.leader_id = ""
        self.protocol = ""
        self.last_view: dict[str, Any] = {}

        # What the last join was based on: our topics and their partition counts, and (as
        # the leader) every member's topics and theirs.
        self._joined_topics: list[str] = []
        self._joined_partitions: dict[str, int] = {}
        self._group_topics: list[str] = []
        self._group_partitions: dict[str, int] = {}
        self._join_members: list[Any] = []
        self._next_metadata_check = 0.0
        self._rebalance_started = 0.0

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> MemberState:
        """Where this member stands now (see the module docstring)."""
        return self._state

    @property
    def stable(self) -> bool:
        return self._state is MemberState.STABLE

    def _transition(self, event: Event) -> MemberState:
        """Apply ``event``: the one place the state changes. Returns the state before it.

        Raises:
            IllegalTransition: the current state does not expect ``event``.
        """
        with self._lock:
            previous = self._state
            state = next_state(previous, event)
            if state is not previous:
                self._state = state
                log.debug("%s: %s --%s--> %s", self.consumer_id, previous.name, event.name, state.name)
            self._changed.notify_all()
            return previous

    def commit_generation(self) -> tuple[int, str]:
        """``(generation_id, member_id)`` for OffsetCommit (the storage's ``generation``)."""
        return self.generation_id, self.member_id

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float | None = None) -> None:
        """Start the group thread and wait until the coordinator has our JoinGroup.

        Args:
            timeout_s: how long to wait (default: the request timeout).

        Raises:
            CoordinationError: no coordinator answered in time.
            HmbError: the coordinator refused us for good (an invalid group id, no
                authorization, a broker without group APIs...).
            IllegalTransition: already started or closed.
        """
        self._transition(Event.START)
        wait_s = self.find_timeout_ms / 1000 if timeout_s is None else timeout_s
        self._start_thread(f"hmb-group-{self.group}", wait_s, lambda: self._join_sent)

    def close(self, release: bool = True) -> None:
        """Stop: revoke our partitions (committing when ``release``), LeaveGroup, end the thread.

        Args:
            release: commit what was handed out before revoking. Either way the member
                leaves the group (LeaveGroup), so the others rebalance at once.
        """
        previous = self._transition(Event.CLOSE)
        if previous is MemberState.CLOSED:
            return
        self._stop_thread()
        try:
            # Commit under a generation we still hold (not after being dropped: FENCED
            # cleared it); a SyncGroup that completed while we closed counts too.
            self._revoke_all(commit=release and self.generation_id >= 0, reason="close")
        finally:
            # A static member does not leave (as Java's): restarted within the session timeout
            # it takes its partitions back with no rebalance.
            if self.member_id and self._coordinator is not None and self.group_instance_id is None:
                self._leave()
            self._emit("closed", consumer_id=self.consumer_id)

    def trigger(self, reason: str = "manual") -> None:
        """Ask for a rebalance: this member revokes (committing) and rejoins."""
        with self._lock:
            self._rejoin_wanted = True
        log.debug("%s: rejoin asked for (%s)", self.consumer_id, reason)
        self._wake.set()

    def await_rebalance(self, timeout: float | None = None) -> bool:
        """Block until this member owns its share under the group's *current* generation.

        STABLE counts only once a heartbeat sent after this call began came back without
        error, so a member that has not yet heard of a join or leave does not report a stale
        share (a heartbeat is sent at once).

        Args:
            timeout: seconds (None: forever).

        Returns:
            True when settled, False on timeout.
        """
        return self._await_settled(
            timeout,
            lambda started: (
                self._state is MemberState.STABLE and not self._rejoin_wanted and self._last_alive >= started
            ),
            lambda: self._state is MemberState.STABLE,
        )

    # ------------------------------------------------------------------ the group thread

    def _step(self) -> None:
        steps: dict[MemberState, Callable[[], None]] = {
            MemberState.DISCOVERING: self._discover,
            MemberState.REDISCOVERING: self._discover,
            MemberState.JOINING: self._join,
            MemberState.SYNCING: self._sync,
            MemberState.STABLE: self._stable,
        }
        step = steps.get(self._state)
        if step is None:
            raise _Closed()
        step()
        self._failures = 0

    def _refuses_start(self, exc: BaseException) -> bool:
        return not self._join_sent and isinstance(exc, (UnsupportedByBroker, BrokerError)) and not exc.retriable

    def _call(self, api_key: ApiKey, timeout_ms: float, **fields: Any) -> Any:
        """Send one request to the coordinator and wait; a lost connection or no answer in
        time raise KafkaConnectionError / RequestTimedOutError (the coordinator is lost)."""
        assert self._coordinator is not None

        def build(versions: BrokerVersions) -> Any:
            return versions.build(api_key, **fields)

        future = self.client.send(self._coordinator, build, timeout_ms=timeout_ms, api_key=api_key)
        return self._wait(future, timeout_ms)

    def _lose_coordinator(self, why: str) -> None:
        log.info("%s: coordinator of %s lost (%s); looking it up again", self.consumer_id, self.group, why)
        if self._state in (MemberState.JOINING, MemberState.SYNCING):
            self._lose_owned(f"coordinator lost while rejoining: {why}")
        self.offsets.forget_coordinator()
        self._coordinator = None
        self._emit("coordinator_lost", consumer_id=self.consumer_id, reason=why)
        self._transition(Event.COORDINATOR_LOST)

    # ------------------------------------------------------------------ DISCOVERING

    def _discover(self) -> None:
        if self._state is MemberState.REDISCOVERING:
            self._check_session()
            if self._state is not MemberState.REDISCOVERING:
                return
        node = self._find_coordinator()
        if node is None:
            return
        self._coordinator = node
        self._emit("coordinator_found", consumer_id=self.consumer_id, node=node, address=self.client.address(node))
        if self._transition(Event.COORDINATOR_FOUND) is MemberState.REDISCOVERING:
            self._next_heartbeat = 0.0  # resume heartbeats under the same generation at once

    # ------------------------------------------------------------------ JOINING

    def _join(self) -> None:
        assert self.cooperative or not self.owned, "partitions must be revoked before joining"
        with self._lock:
            self._rejoin_wanted = False
        topics, partitions = self._subscribed_now()
        self._joined_topics, self._joined_partitions = topics, partitions
        metadata = self._subscription_metadata(topics)
        versions = self._coordinator_versions()
        if versions is None:
            return
        if self.group_instance_id is not None and versions.version(ApiKey.JOIN_GROUP) < 5:
            raise UnsupportedByBroker(
                f"group.instance.id needs JoinGroup v5+ (KIP-345); the coordinator speaks "
                f"v{versions.version(ApiKey.JOIN_GROUP)}"
            )
        # v4+: a dynamic member's join without member id only fetches one (MEMBER_ID_REQUIRED);
        # the next counts. A static member joins at once.
        real = bool(self.member_id) or versions.version(ApiKey.JOIN_GROUP) < 4 or self.group_instance_id is not None
        if not self._rebalance_started:
            self._rebalance_started = time.monotonic()
        timeout_ms = self.rebalance_timeout_ms + _JOIN_GRACE_MS
        future = self.client.send(
            self._coordinator,  # type: ignore[arg-type]
            lambda v: v.build(
                ApiKey.JOIN_GROUP,
                group_id=self.group,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[{"name": name, "metadata": metadata} for name in self.protocols],
            ),
            timeout_ms=timeout_ms,
            api_key=ApiKey.JOIN_GROUP,
        )
        if real and not self._join_sent:
            with self._changed:
                self._join_sent = True
                self._changed.notify_all()
        try:
            answer = self._wait(future, timeout_ms)
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._lose_coordinator(f"JoinGroup: {exc}")
            return
        code = answer.error_code
        if not code:
            self.generation_id, self.member_id = answer.generation_id, answer.member_id
            self.leader_id, self.protocol = answer.leader, answer.protocol_name
            self._join_members = list(answer.members)
            self._transition(Event.JOINED)
            self._emit(
                "joined",
                consumer_id=self.consumer_id,
                member_id=self.member_id,
                generation=self.generation_id,
                leader=self.leader_id == self.member_id,
                protocol=self.protocol,
                members=len(self._join_members),
            )
            return
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            self._transition(Event.REJOIN)
            return
        if code in _DROPPED:
            # The coordinator no longer knows our generation: what we kept is lost.
            self._lose_owned(f"JoinGroup: {for_code(code).__name__}")
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation_id = -1
            self._transition(Event.REJOIN)
            return
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fatal("JoinGroup", code)
            return
        if code in COORDINATOR_MOVED:
            self._lose_coordinator(f"JoinGroup: {for_code(code).__name__}")
            return
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            self._transition(Event.REJOIN)
            self._sleep(self.backoff_s)
            return
        raise for_code(code)(f"JoinGroup of group {self.group!r}")

    def _subscription_metadata(self, topics: list[str]) -> bytes:
        """ConsumerProtocolSubscription: v0 (topics) for the eager assignors; v3 for the
        cooperative ones, with what we own and since which generation (also in ``user_data``,
        4 bytes, as Java's CooperativeStickyAssignor writes it for leaders reading v0/v1)."""
        if not self.cooperative:
            return ConsumerProtocolMemberMetadata[0](topics=topics, user_data=None).encode()
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.owned):
            by_topic.setdefault(topic, []).append(partition)
        generation = self.generation_id if self.owned else -1
        return ConsumerProtocolMemberMetadata[3](
            topics=topics,
            user_data=generation.to_bytes(4, "big", signed=True) if generation >= 0 else None,
            owned_partitions=sorted(by_topic.items()),
            generation_id=generation,
            rack_id=None,
        ).encode()

    def _coordinator_versions(self) -> BrokerVersions | None:
        """The versions the coordinator connection speaks; None (coordinator lost) when it
        cannot be reached."""
        assert self._coordinator is not None
        try:
            versions: BrokerVersions = self._wait(self.client.versions(self._coordinator), self.find_timeout_ms)
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._lose_coordinator(f"connect: {exc}")
            return None
        return versions

    def _subscribed_now(self) -> tuple[list[str], dict[str, int]]:
        """Our topics (a filter matches the topics that exist now) and their partition counts."""
        counts = self.subscription.topic_counts
        if counts is not None:
            topics = sorted(counts)
            known = self.metadata_partitions(topics)
        else:
            topic_filter = self.subscription.topic_filter
            assert topic_filter is not None
            known = {
                t: p for t, p in self.metadata_partitions(None).items()
                if topic_filter.is_topic_allowed(t, self.exclude_internal_topics)
            }
            topics = sorted(known)
        return topics, {t: len(known.get(t, ())) for t in topics}

    # ------------------------------------------------------------------ SYNCING

    def _sync(self) -> None:
        leader = self.leader_id == self.member_id
        assignments = self._assign_group() if leader else []
        sent = time.monotonic()
        try:
            answer = self._call(
                ApiKey.SYNC_GROUP,
                self.rebalance_timeout_ms + _JOIN_GRACE_MS,
                group_id=self.group,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                assignments=assignments,
            )
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._lose_coordinator(f"SyncGroup: {exc}")
            return
        code = answer.error_code
        if code in COORDINATOR_MOVED:
            self._lose_coordinator(f"SyncGroup: {for_code(code).__name__}")
            return
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fatal("SyncGroup", code)
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS or code in _DROPPED:
            if code in _DROPPED:
                self._lose_owned(f"SyncGroup: {for_code(code).__name__}")
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._transition(Event.REJOIN)
            return
        if code:
            raise for_code(code)(f"SyncGroup of group {self.group!r}")
        share = self._decode_share(answer.assignment)
        mine = streams_for(
            self.consumer_id, share, self.subscription.topic_counts, self.subscription.num_streams
        )
        added = mine
        if self.cooperative:
            # Keep consuming what we still own (same streams); revoke only what was taken
            # away, then start the new partitions; a revocation calls for the follow-up
            # rebalance at once, in which the partitions reach their new owner.
            kept = {tp: tid for tp, tid in self.owned.items() if tp in mine}
            revoked = {tp: tid for tp, tid in self.owned.items() if tp not in mine}
            if revoked:
                self.owned = kept
                self._revoke(revoked, commit=True, reason="cooperative rebalance")
                with self._lock:
                    self._rejoin_wanted = True
            added = {tp: tid for tp, tid in mine.items() if tp not in kept}
            mine = {**kept, **added}
        if added:
            # Raises when the committed offsets cannot be read: SyncGroup is sent again.
            self.listener.on_assign(dict(added))
        self.owned = mine
        self._last_alive = sent
        self._next_heartbeat = sent + self.heartbeat_interval_s
        self._next_metadata_check = sent + METADATA_CHECK_S
        self.rounds += 1
        self.last_view = {
            "generation": self.generation_id,
            "member_id": self.member_id,
            "leader": leader,
            "protocol": self.protocol,
            "topics": list(self._joined_topics),
            "partitions": dict(self._joined_partitions),
        }
        if added:
            self._emit("partitions_assigned", consumer_id=self.consumer_id, partitions=sorted(added))
        seconds = time.monotonic() - self._rebalance_started if self._rebalance_started else 0.0
        self._rebalance_started = 0.0
        self._transition(Event.SYNCED)
        self._emit(
            "rebalance_completed",
            consumer_id=self.consumer_id,
            generation=self.generation_id,
            owned=len(mine),
            seconds=round(seconds, 4),
        )

    def _assign_group(self) -> list[dict[str, Any]]:
        """As the leader: every member's assignment, with the protocol the coordinator chose."""
        assignor = GROUP_ASSIGNORS.get(self.protocol)
        if assignor is None:
            raise CoordinationError(
                f"group {self.group!r}: the coordinator chose assignor {self.protocol!r}, "
                f"which this member does not implement ({sorted(GROUP_ASSIGNORS)})"
            )
        members: dict[str, MemberSubscription] = {}
        for member in self._join_members:
            instance = getattr(member, "group_instance_id", None)
            try:
                members[member.member_id] = _member_subscription(decode_member_metadata(member.metadata), instance)
            except HmbError as exc:
                log.warning("%s: member %s sent unreadable metadata (%s); it gets nothing",
                            self.consumer_id, member.member_id, exc)
                members[member.member_id] = MemberSubscription((), instance)
        topics = sorted({t for sub in members.values() for t in sub.topics})
        partitions = {t: sorted(p) for t, p in self.metadata_partitions(topics).items()} if topics else {}
        self._group_topics = topics
        self._group_partitions = {t: len(partitions.get(t, ())) for t in topics}
        result = assignor(partitions, members)
        out = []
        for member_id, share in result.items():
            by_topic: dict[str, list[int]] = {}
            for topic, partition in share:
                by_topic.setdefault(topic, []).append(partition)
            payload = ConsumerProtocolMemberAssignment[0](
                assigned_partitions=sorted(by_topic.items()), user_data=None
            ).encode()
            out.append({"member_id": member_id, "assignment": payload})
        return out

    def _decode_share(self, payload: bytes) -> list[TopicPartition]:
        if not payload:
            return []  # some leaders send nothing at all to a member without partitions
        assignment = decode_member_assignment(payload)
        return [(entry.topic, int(p)) for entry in assignment.assigned_partitions for p in entry.partitions]

    # ------------------------------------------------------------------ STABLE

    def _stable(self) -> None:
        self._check_session()
        if self._state is not MemberState.STABLE:
            return
        with self._lock:
            rejoin, heartbeat_now = self._rejoin_wanted, self._heartbeat_wanted
        if rejoin:
            self._rebalance("rejoin asked for")
            return
        now = time.monotonic()
        if heartbeat_now or now >= self._next_heartbeat:
            self._heartbeat()
            return
        if now >= self._next_metadata_check:
            self._next_metadata_check = now + METADATA_CHECK_S
            self._check_metadata()
            return
        left = min(self._next_heartbeat, self._next_metadata_check) - now
        self._sleep(max(0.0, left))

    def _heartbeat(self) -> None:
        with self._lock:
            self._heartbeat_wanted = False
        sent = time.monotonic()
        self._next_heartbeat = sent + self.heartbeat_interval_s
        try:
            answer = self._call(
                ApiKey.HEARTBEAT,
                self.request_timeout_ms,
                group_id=self.group,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
            )
        except (KafkaConnectionError, RequestTimedOutError) as exc:
            self._lose_coordinator(f"Heartbeat: {exc}")
            return
        code = answer.error_code
        if not code:
            with self._changed:
                self._last_alive = max(self._last_alive, sent)
                self._changed.notify_all()
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._rebalance("the coordinator is rebalancing the group")
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            self._fatal("Heartbeat", code)
        elif code in _DROPPED:
            self._fence(f"Heartbeat: {for_code(code).__name__}", forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
        elif code in COORDINATOR_MOVED:
            self._lose_coordinator(f"Heartbeat: {for_code(code).__name__}")
        else:
            raise for_code(code)(f"Heartbeat of group {self.group!r}")

    def _check_metadata(self) -> None:
        # New topics matching a filter, or partitions added to a topic we (or, as the leader,
        # any member) subscribed to, mean another assignment: rejoin.
        try:
            topics, partitions = self._subscribed_now()
            if self.leader_id == self.member_id and self._group_topics:
                others = [t for t in self._group_topics if t not in partitions]
                if others:
                    for topic, ids in self.metadata_partitions(others).items():
                        partitions[topic] = len(ids)
        except HmbError as exc:
            log.debug("%s: metadata check failed: %s", self.consumer_id, exc)
            return
        joined = dict(self._joined_partitions)
        if self.leader_id == self.member_id:
            joined.update(self._group_partitions)
        changed = topics != self._joined_topics or any(partitions.get(t, 0) != n for t, n in joined.items())
        if changed:
            self._rebalance("subscribed topics or partitions changed")

    def _check_session(self) -> None:
        # The coordinator drops a member a session timeout after the last heartbeat it got,
        # which it got no earlier than we sent it: past that, our partitions may be moving.
        if self._state in _OWNING and time.monotonic() - self._last_alive >= self.session_timeout_s:
            self._fence("no heartbeat answered within session.timeout.ms", forget_member=False)

    def _rebalance(self, reason: str) -> None:
        """Eager: revoke everything with a commit (stop hand-out, commit, stop fetching), then
        rejoin. Cooperative: rejoin owning what we own (the assignment says what goes)."""
        self._rebalance_started = time.monotonic()
        self._emit("rebalance_started", consumer_id=self.consumer_id, reason=reason, owned=len(self.owned))
        if not self.cooperative:
            self._revoke_all(commit=True, reason=reason)
        self._transition(Event.REJOIN)

    def _lose_owned(self, reason: str) -> None:
        """Partitions kept through a cooperative rebalance are lost (revoked uncommitted):
        the coordinator dropped us or cannot be reached while we rejoin."""
        self._revoke_all(commit=False, reason=reason)

    def _fence(self, reason: str, *, forget_member: bool) -> None:
        """The coordinator dropped us: revoke everything *without* a commit, then join anew."""
        log.warning("%s: dropped from group %s (%s)", self.consumer_id, self.group, reason)
        self._rebalance_started = time.monotonic()
        self._emit("fenced", consumer_id=self.consumer_id, reason=reason, owned=len(self.owned))
        self._revoke_all(commit=False, reason=reason)
        if forget_member:
            self.member_id = ""
        self.generation_id = -1
        self._transition(Event.FENCED)

    def _fatal(self, api: str, code: int) -> None:
        """Another member registered our ``group.instance.id``: we are a zombie. Revoke without
        a commit and stop for good (no rejoin, which would fence the other in turn)."""
        exc = for_code(code)(
            f"{api} of group {self.group!r}: group.instance.id {self.group_instance_id!r} was "
            f"taken by another member; this member stops"
        )
        log.error("%s: %s", self.consumer_id, exc)
        self._revoke_all(commit=False, reason="fenced instance")
        self.generation_id = -1
        with self._changed:
            self.fatal_error = exc
            if not self._join_sent:
                self._start_error = exc
            self._changed.notify_all()
        self._emit("fatal", consumer_id=self.consumer_id, error=repr(exc))
        self._transition(Event.CLOSE)
        raise _Closed()

    # ------------------------------------------------------------------ leaving

    def _leave(self) -> None:
        member_id = self.member_id

        def build(versions: BrokerVersions) -> Any:
            return versions.build(
                ApiKey.LEAVE_GROUP,
                group_id=self.group,
                member_id=member_id,
                members=[{"member_id": member_id, "group_instance_id": None}],
            )

        self._send_leave(ApiKey.LEAVE_GROUP, build, member_id)

    # ------------------------------------------------------------------ status
