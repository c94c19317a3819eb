"""The ZooKeeper rebalance loop of one consumer-group member, as Kafka 0.8's
``ZookeeperConsumerConnector`` runs it (the "Distribution" chapter of the Kafka 0.8 design
documentation: consumer and owner registries, and the rebalance on every change).

One :class:`ZkRebalancer` per ``ConsumerConnector``. It owns a KazooClient, the member's
registration, its owner znodes and a single *rebalance thread*; the consumer plugs in through
the :class:`OwnershipListener` callbacks and never touches ownership itself.

Member states
-------------
Where the member stands is one :class:`MemberState`. Every change goes through
``ZkRebalancer._transition(event)``, which looks the move up in ``_TRANSITIONS`` (see
:func:`next_state`); an event a state does not expect is a bug and raises
:class:`IllegalTransition`. Events come from the rebalance thread (``START``, ``ROUND_*``,
``OWNERS_VERIFIED``, ``SESSION_RESTORED``), from watches and :meth:`ZkRebalancer.trigger`
(``TRIGGER``), from kazoo's connection thread (``SUSPENDED``, ``CONNECTED``, ``LOST``) and
from :meth:`ZkRebalancer.close` (``CLOSE``)::

                          ROUND_DONE
    NEW --START--> REBALANCING -----------------> STABLE
                    ^     |  ROUND_INCOMPLETE
                    |     +---------------------> AWAITING_RELEASE
                    |     |  ROUND_FAILED
                    |     +---------------------> BACKING_OFF
                    |
                    +--- TRIGGER / ROUND_STARTED --- STABLE, AWAITING_RELEASE, BACKING_OFF

    NEW, REBALANCING, STABLE, AWAITING_RELEASE, BACKING_OFF, RECONNECTED
        --SUSPENDED--> SUSPENDED --CONNECTED--> RECONNECTED --OWNERS_VERIFIED--> REBALANCING
    every state but CLOSED
        --LOST--> LOST --SESSION_RESTORED--> REBALANCING
    every state --CLOSE--> CLOSED

Events not drawn leave the state as it is where the table lists them: a trigger, a round
starting or ending while SUSPENDED, RECONNECTED or LOST (those states are left only by
connection events, a verification or a recovery); SUSPENDED and CONNECTED while LOST (the
session is gone whatever the connection does); CONNECTED while NEW (the first connection);
anything once CLOSED. CONNECTED in REBALANCING, STABLE, AWAITING_RELEASE or BACKING_OFF
(kazoo sends it only after SUSPENDED or LOST) leads to RECONNECTED, as after a suspension:
re-verifying our owner nodes is harmless. A round's outcome (``ROUND_DONE`` / ``ROUND_INCOMPLETE`` /
``ROUND_FAILED``) is not applied when a trigger arrived during the round: the member stays
REBALANCING and the next round, which starts at once, decides.

* NEW: constructed; :meth:`ZkRebalancer.start` registers and starts the rebalance thread.
* REBALANCING: a round is due or running.
* STABLE: the last round claimed this member's whole share and nothing changed since.
* AWAITING_RELEASE: the last round left partitions held by their previous owner; their
  owner nodes are watched and a round runs when one is deleted or after a backoff.
* BACKING_OFF: the last round failed; another runs after a backoff that doubles with each
  consecutive failure, or at the next trigger.
* SUSPENDED: the ZooKeeper connection is suspended. Hand-out is paused (``on_pause``): our
  session may be expiring and another member may soon own our partitions; kazoo notices a
  dead connection after 2/3 of the session timeout, before the server can expire the session,
  so pausing here keeps "only the owner hands out".
* RECONNECTED: the connection is back under the same session; hand-out resumes
  (``on_resume``) and the next round first re-verifies our owner nodes.
* LOST: the session expired. Hand-out stays paused until a round has revoked everything
  **without** a commit (the owner nodes died with the session, so a new owner may already be
  committing), deleted the old session's leftovers and registered again.
* CLOSED: :meth:`ZkRebalancer.close` was called; no round starts any more.

Hand-out is paused exactly while the state is SUSPENDED or LOST: ``_transition`` calls
``on_pause`` / ``on_resume`` when a move crosses that line.

A round
-------
Triggers: a child watch on ``/consumers/<g>/ids``, a child watch on ``/brokers/ids``, a child
watch on ``/brokers/topics`` and data watches on the subscribed topics' nodes (or, when the
brokers are not in ZooKeeper, a periodic Metadata poll through the ``metadata_partitions``
callback), an owner node we wait for being deleted, and ZooKeeper connection states.
Triggers are debounced (``debounce_ms`` of quiet, at most ``max_debounce_ms``) and one
*round* runs at a time:

1. LOST: revoke every partition without a commit, delete the old session's leftovers,
   register again. RECONNECTED: drop the partitions whose owner node vanished.
2. Read a consistent view: members and their subscriptions (re-read while the ids watch keeps
   firing), broker and topic lists, partitions per topic.
3. Assign with the assignor (pure function) and keep our own threads' share.
4. For partitions leaving us (or moving between our own threads): ``on_revoke(commit=True)``
   -- the consumer stops handing their messages out, stops fetching them and commits their
   consumed offsets durably -- and only then are their owner nodes deleted. A failed commit
   aborts the round *before* the release, so the invariant "offsets are committed before
   ownership is released" holds even under failure. Partitions that stay are not touched.
5. Claim the new share: ephemeral owner nodes, pipelined. NodeExists means the previous owner
   has not released yet: retry (tenacity) with ``rebalance_backoff_ms`` plus jitter, at most
   ``rebalance_max_retries`` times, waking early when a watch reports the node deleted. What
   is claimed is handed to ``on_assign`` at once (the consumer reads offsets and fetches),
   so unaffected partitions never stop and claimed ones do not wait for the stragglers. If a
   new trigger arrives meanwhile the round ends and a new one starts from a fresh view. When
   retries run out the member keeps the watches and tries again when the holder releases
   (AWAITING_RELEASE), instead of releasing everything (which caused the
   PartitionOwnedError storms of pykafka's balanced consumer).

A failed round is retried through tenacity too (see ``ZkRebalancer._round_retrying``).

Invariants
----------
* A partition is given to ``on_assign`` only while we hold its owner node under the current
  session, and taken back (``on_revoke``) before the node is deleted.
* Only the rebalance thread changes ``owned``/``assigned``; kazoo callbacks only move the
  state and wake the loop.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import tenacity
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from rebalance import paths
from rebalance.assignors import ASSIGNORS as _BUILTIN_ASSIGNORS
from rebalance.filters import STATIC, TopicFilter
from rebalance.offsets import ZkOffsetStore
from rebalance.registry import (
    BrokerInfo,
    GroupRegistry,
    GroupView,
    Registration,
    TopicPartition,
    thread_index,
)

__all__ = [
    "Subscription",
    "OwnershipListener",
    "ZkRebalancer",
    "MemberState",
    "Event",
    "next_state",
    "IllegalTransition",
    "Assignor",
    "ASSIGNORS",
    "RebalanceError",
]

log = logging.getLogger("hmbclient.rebalance")

Assignor = Callable[[Mapping[str, list[int]], Mapping[str, list[str]]], Mapping[str, list[TopicPartition]]]
ASSIGNORS: dict[str, Assignor] = dict(_BUILTIN_ASSIGNORS)

#: ``metadata_partitions(topics)``: partition ids per topic from the brokers' Metadata API;
#: ``topics`` None means every topic (wildcard subscriptions).
MetadataPartitions = Callable[[list[str] | None], Mapping[str, list[int]]]
StatusCallback = Callable[[str, Mapping[str, Any]], None]


#: Longest wait between retries of a failing round.
_MAX_RETRY_S = 5.0

#: How often one round re-reads a membership that keeps changing before it gives up.
_MAX_VIEW_READS = 20


class RebalanceError(Exception):
    """A round could not complete (raised inside the loop only; logged and retried)."""


class IllegalTransition(RuntimeError):
    """An event arrived in a state that does not expect it (a bug in the rebalancer)."""


class _Restart(Exception):
    """A new trigger arrived: abandon this round and start again from a fresh view."""


class _Conflicts(Exception):
    """Some partitions are still held by their previous owner."""


# ---------------------------------------------------------------------- the state machine


class MemberState(enum.Enum):
    """Where one group member stands (see the module docstring for each state)."""

    NEW = "new"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    AWAITING_RELEASE = "awaiting_release"
    BACKING_OFF = "backing_off"
    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    LOST = "lost"
    CLOSED = "closed"


class Event(enum.Enum):
    """What moves a member from one :class:`MemberState` to another."""

    #: Registered; the rebalance thread starts.
    START = "start"
    #: A watch fired (or ``trigger()`` was called): the view the last round used is stale.
    TRIGGER = "trigger"
    #: The rebalance thread begins a round.
    ROUND_STARTED = "round_started"
    #: The round claimed the whole share.
    ROUND_DONE = "round_done"
    #: The round ended with partitions still held by their previous owner.
    ROUND_INCOMPLETE = "round_incomplete"
    #: The round raised (ZooKeeper error, failed commit, listener bug...).
    ROUND_FAILED = "round_failed"
    #: After a reconnection, the owner nodes we hold were checked.
    OWNERS_VERIFIED = "owners_verified"
    #: After a session loss, everything was revoked and the member registered again.
    SESSION_RESTORED = "session_restored"
    #: kazoo's connection states.
    SUSPENDED = "suspended"
    CONNECTED = "connected"
    LOST = "lost"
    #: ``close()``.
    CLOSE = "close"


def _stay(state: MemberState, *events: Event) -> dict[Event, MemberState]:
    return {event: state for event in events}


_S, _E = MemberState, Event
_ROUND_EVENTS = (_E.ROUND_STARTED, _E.ROUND_DONE, _E.ROUND_INCOMPLETE, _E.ROUND_FAILED)
#: Connection events in the states where the connection is up and nothing is pending.
_CONNECTION_MOVES = {
    _E.SUSPENDED: _S.SUSPENDED,
    _E.CONNECTED: _S.RECONNECTED,  # kazoo sends CONNECTED after SUSPENDED; re-verifying is harmless
    _E.LOST: _S.LOST,
    _E.CLOSE: _S.CLOSED,
}
#: Between rounds: a trigger or the loop (a due re-check, a retry, a Metadata change) starts one.
_BETWEEN_ROUNDS = {_E.TRIGGER: _S.REBALANCING, _E.ROUND_STARTED: _S.REBALANCING, **_CONNECTION_MOVES}

#: state -> {event: next state}. An event missing from a state's row is refused.
_TRANSITIONS: dict[MemberState, dict[Event, MemberState]] = {
    _S.NEW: {
        _E.START: _S.REBALANCING,
        **_stay(_S.NEW, _E.TRIGGER, _E.CONNECTED),
        _E.SUSPENDED: _S.SUSPENDED,
        _E.LOST: _S.LOST,
        _E.CLOSE: _S.CLOSED,
    },
    _S.REBALANCING: {
        **_stay(_S.REBALANCING, _E.TRIGGER, _E.ROUND_STARTED),
        _E.ROUND_DONE: _S.STABLE,
        _E.ROUND_INCOMPLETE: _S.AWAITING_RELEASE,
        _E.ROUND_FAILED: _S.BACKING_OFF,
        **_CONNECTION_MOVES,
    },
    _S.STABLE: _BETWEEN_ROUNDS,
    _S.AWAITING_RELEASE: _BETWEEN_ROUNDS,
    _S.BACKING_OFF: _BETWEEN_ROUNDS,
    _S.SUSPENDED: {
        **_stay(_S.SUSPENDED, _E.START, _E.TRIGGER, *_ROUND_EVENTS, _E.OWNERS_VERIFIED, _E.SUSPENDED),
        _E.CONNECTED: _S.RECONNECTED,
        _E.LOST: _S.LOST,
        _E.CLOSE: _S.CLOSED,
    },
    _S.RECONNECTED: {
        **_stay(_S.RECONNECTED, _E.START, _E.TRIGGER, *_ROUND_EVENTS, _E.CONNECTED),
        _E.OWNERS_VERIFIED: _S.REBALANCING,
        _E.SUSPENDED: _S.SUSPENDED,
        _E.LOST: _S.LOST,
        _E.CLOSE: _S.CLOSED,
    },
    _S.LOST: {
        **_stay(
            _S.LOST, _E.START, _E.TRIGGER, *_ROUND_EVENTS, _E.OWNERS_VERIFIED,
            _E.SUSPENDED, _E.CONNECTED, _E.LOST,
        ),
        _E.SESSION_RESTORED: _S.REBALANCING,
        _E.CLOSE: _S.CLOSED,
    },
    _S.CLOSED: _stay(_S.CLOSED, *Event),
}

#: States in which the consumer must not hand out messages.
_PAUSED = frozenset({_S.SUSPENDED, _S.LOST})

_KAZOO_EVENTS = {
    KazooState.SUSPENDED: _E.SUSPENDED,
    KazooState.CONNECTED: _E.CONNECTED,
    KazooState.LOST: _E.LOST,
}

#: Round failures that are part of life (logged without a traceback).
_EXPECTED_FAILURES = (KazooException, KazooTimeoutError, RebalanceError, OSError)


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


@dataclass(frozen=True)
class Subscription:
    """What one member consumes: ``{topic: streams}`` (static) or a filter and a stream count."""

    topic_counts: Mapping[str, int] | None = None
    topic_filter: TopicFilter | None = None
    num_streams: int = 0

    def __post_init__(self) -> None:
        if (self.topic_counts is None) == (self.topic_filter is None):
            raise ValueError("a subscription is either static topic counts or one topic filter")
        if self.topic_counts is not None:
            if not self.topic_counts:
                raise ValueError("subscribe to at least one topic")
            for topic, n in self.topic_counts.items():
                if not paths.is_valid_topic_name(topic):
                    raise ValueError(f"illegal topic name {topic!r}: {paths.TOPIC_NAME_RULE}")
                if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    raise ValueError(f"stream count for {topic!r} must be an int >= 1, got {n!r}")
        elif not isinstance(self.num_streams, int) or self.num_streams < 1:
            raise ValueError(f"num_streams must be an int >= 1, got {self.num_streams!r}")

    def registration(self, consumer_id: str) -> Registration:
        """The registration znode content for ``consumer_id``."""
        if self.topic_filter is None:
            assert self.topic_counts is not None
            return Registration(consumer_id, dict(self.topic_counts), STATIC)
        return Registration(
            consumer_id, {self.topic_filter.regex: self.num_streams}, self.topic_filter.pattern_name
        )


class OwnershipListener(Protocol):
    """What the consumer does when ownership changes. Called from the rebalance thread only,
    except ``on_pause``/``on_resume`` which may come from kazoo's connection thread and must
    not block on I/O."""

    def on_pause(self) -> None:
        """Stop handing out messages now (connection suspended or session lost)."""

    def on_resume(self) -> None:
        """Handing out may continue."""

    def on_revoke(self, partitions: Mapping[TopicPartition, str], commit: bool) -> None:
        """Stop handing out and fetching ``partitions`` first; then, if ``commit``, commit
        their consumed offsets durably before returning (raise if that failed). Must accept
        partitions it already stopped (a retried commit)."""

    def on_assign(self, partitions: Mapping[TopicPartition, str]) -> None:
        """Start consuming ``partitions`` (``tp -> our thread id``): read offsets, fetch."""

    def on_brokers_changed(self, brokers: list[BrokerInfo] | None) -> None:
        """The brokers in ``/brokers/ids`` changed (None: the brokers are not in ZooKeeper)."""


class ZkRebalancer:
    """Membership, ownership and rebalancing of one member of a ZooKeeper consumer group.

    Args:
        zookeeper_connect: ``"h1:p1,h2:p2/chroot"``.
        group: the group id.
        consumer_id: this member's id (see :func:`rebalance.paths.make_consumer_id`).
        subscription: what this member consumes.
        listener: the consumer's callbacks.
        assignor: ``range`` (default) or ``roundrobin``, or a function.
        session_timeout_ms / connection_timeout_ms: ZooKeeper session settings.
        rebalance_backoff_ms / rebalance_max_retries: claim retry policy.
        exclude_internal_topics: filters never match internal topics.
        metadata_partitions: partition discovery through the Metadata API, used when the
            brokers are not registered in ZooKeeper.
        metadata_refresh_ms: how often to poll Metadata for new topics/partitions then.
        debounce_ms / max_debounce_ms: trigger coalescing.
        status: ``status(event, fields)`` for status events (never raises into the loop).
        zk_client: an unstarted KazooClient to use instead (tests, shared clients).
    """

    def __init__(
        self,
        *,
        zookeeper_connect: str,
        group: str,
        consumer_id: str,
        subscription: Subscription,
        listener: OwnershipListener,
        assignor: str | Assignor = "range",
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int = 6000,
        rebalance_backoff_ms: int = 200,
        rebalance_max_retries: int = 4,
        exclude_internal_topics: bool = True,
        metadata_partitions: MetadataPartitions | None = None,
        metadata_refresh_ms: int = 2000,
        debounce_ms: int = 20,
        max_debounce_ms: int = 250,
        status: StatusCallback | None = None,
        zk_client: KazooClient | None = None,
    ) -> None:
        self.group = group
        self.consumer_id = consumer_id
        self.subscription = subscription
        self.listener = listener
        self.assignor: Assignor = ASSIGNORS[assignor] if isinstance(assignor, str) else assignor
        self.connection_timeout_s = connection_timeout_ms / 1000
        self.backoff_s = rebalance_backoff_ms / 1000
        self.max_retries = rebalance_max_retries
        self.exclude_internal_topics = exclude_internal_topics
        self.metadata_partitions = metadata_partitions
        self.metadata_refresh_s = metadata_refresh_ms / 1000
        self.debounce_s = debounce_ms / 1000
        self.max_debounce_s = max_debounce_ms / 1000
        self._status = status
        self.zk = zk_client or KazooClient(
            hosts=zookeeper_connect,
            timeout=session_timeout_ms / 1000,
            # Keep reconnecting forever: giving up would leave the member paused for good.
            connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 0},
        )
        self.registry = GroupRegistry(self.zk, group, consumer_id)
        self.offsets = ZkOffsetStore(self.zk, group)
        #: The wait between two claim attempts (and before re-checking partitions awaiting
        #: release): rebalance_backoff_ms plus up to as much jitter.
        self._claim_backoff = tenacity.wait_fixed(self.backoff_s) + tenacity.wait_random(0, self.backoff_s)

        # The state, and the Condition await_rebalance waits on. Reentrant: a caller may hold
        # it around _transition to decide on more than the state (a pending trigger).
        self._lock = threading.RLock()
        self._state_changed = threading.Condition(self._lock)
        self._state = MemberState.NEW
        # Set by every trigger (under _lock), cleared by the rebalance thread before it reads.
        self._trigger = threading.Event()
        # Wakes a claim waiting for an owner node to be deleted (and any trigger).
        self._wake = threading.Event()
        # The session our registration and owner nodes belong to.
        self._session_id = 0
        # Data flags, not member state: the broker list changed since the listener heard of
        # it; partitions come from Metadata polls (the brokers are not in ZooKeeper).
        self._brokers_changed = True
        self._polling_metadata = False
        self._ids_cversion = -1
        self._thread: threading.Thread | None = None
        # AWAITING_RELEASE: when to look again even if no owner node is deleted.
        self._recheck_at: float | None = None
        self._last_error = ""
        self._metadata_answer: Mapping[str, list[int]] | None = None
        self._metadata_key: tuple[str, ...] | None = None
        self._metadata_at = 0.0
        self._partition_cache: dict[str, list[int]] = {}

        #: Owner nodes we hold (tp -> our thread id). Rebalance thread only.
        self.owned: dict[TopicPartition, str] = {}
        #: Partitions currently handed to the consumer (subset of ``owned``).
        self.assigned: dict[TopicPartition, str] = {}
        #: Our share in the latest view (tp -> thread id).
        self.target: dict[TopicPartition, str] = {}
        #: Completed rounds (for tests and benchmarks).
        self.rounds = 0
        self.last_view: dict[str, Any] = {}

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> MemberState:
        """Where this member stands now (see the module docstring)."""
        return self._state

    @property
    def stable(self) -> bool:
        """Whether the latest round claimed the whole share and nothing changed since."""
        return self._state is MemberState.STABLE

    def _transition(self, event: Event) -> MemberState:
        """Apply ``event``: the one place the state changes.

        Calls ``on_pause``/``on_resume`` when the move crosses into or out of SUSPENDED/LOST
        (not when closing) and wakes :meth:`await_rebalance`.

        Returns:
            The state before the event.

        Raises:
            IllegalTransition: the current state does not expect ``event``.
        """
        with self._lock:
            previous = self._state
            state = next_state(previous, event)
            if state is previous:
                return previous
            self._state = state
            log.debug("%s: %s --%s--> %s", self.consumer_id, previous.name, event.name, state.name)
            paused = state in _PAUSED
            if state is not MemberState.CLOSED and paused != (previous in _PAUSED):
                try:
                    if paused:
                        self.listener.on_pause()
                    else:
                        self.listener.on_resume()
                except Exception:  # noqa: BLE001 - a listener bug must not kill kazoo's thread
                    log.exception("pause/resume listener failed")
            self._state_changed.notify_all()
            return previous

    def _finish_round(self, event: Event) -> None:
        # A trigger during the round makes its outcome stale: stay REBALANCING; the next
        # round (which starts at once) decides.
        with self._lock:
            if not self._trigger.is_set():
                self._transition(event)

    @property
    def _closed(self) -> bool:
        return self._state is MemberState.CLOSED

    def _session_is_ours(self) -> bool:
        # Our registration and owner nodes live in the current session (it was not lost).
        return bool(self.zk.connected) and self.registry.session_id == self._session_id

    # ------------------------------------------------------------------ lifecycle

    def connect(self) -> None:
        """Open the ZooKeeper session (idempotent); :meth:`start` calls it if needed.

        Raises:
            kazoo errors (KazooTimeoutError...) when ZooKeeper is unreachable within
            ``connection_timeout_ms``; the caller maps them.
        """
        if self.zk.connected:
            return
        self.zk.add_listener(self._on_connection_state)
        self.zk.start(timeout=self.connection_timeout_s)
        self._session_id = self.registry.session_id

    def start(self) -> None:
        """Register this member and start the rebalance thread (its first round runs at once).

        Raises:
            kazoo errors when ZooKeeper is unreachable or the registration fails.
            IllegalTransition: already started or closed.
        """
        self.connect()
        self.registry.register(self.subscription.registration(self.consumer_id))
        self._emit("registered", consumer_id=self.consumer_id)
        self._thread = threading.Thread(
            target=self._run, name=f"hmb-rebalance-{self.group}", daemon=True
        )
        with self._lock:
            self._transition(Event.START)
            self._trigger.set()
        self._thread.start()

    def close(self, release: bool = True) -> None:
        """Stop rebalancing; revoke (committing), release our nodes, unregister, close.

        Args:
            release: commit and release; False leaves ephemerals to the session close.
        """
        if self._transition(Event.CLOSE) is MemberState.CLOSED:
            return
        self._trigger.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            if self.assigned or self.owned:
                try:
                    self.listener.on_revoke(dict(self.owned), release and self._session_is_ours())
                except Exception as exc:  # noqa: BLE001 - shutdown must go on
                    log.error("final commit for %s failed: %s", self.consumer_id, exc)
                self.assigned.clear()
                if release and self._session_is_ours():
                    self.registry.release(self.owned)
                self.owned.clear()
            if self._session_is_ours():
                self.registry.unregister()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("clean release of %s failed (%s); the session close removes it", self.consumer_id, exc)
        finally:
            self.zk.remove_listener(self._on_connection_state)
            try:
                self.zk.stop()
            finally:
                self.zk.close()
            self._emit("closed", consumer_id=self.consumer_id)

    def trigger(self, reason: str = "manual") -> None:
        """Ask for a rebalance round (thread-safe, cheap, coalesced)."""
        with self._lock:
            self._transition(Event.TRIGGER)
            self._trigger.set()
        log.debug("%s: rebalance trigger (%s)", self.consumer_id, reason)
        self._wake.set()

    def await_rebalance(self, timeout: float | None = None) -> bool:
        """Block until this member owns its whole share under the group's *current* membership.

        A STABLE state counts only if the ids directory has not changed since the round that
        reached it read it (one ZooKeeper read), so a member that has not yet seen a join or
        leave does not report a stale share.

        Args:
            timeout: seconds (None: forever).

        Returns:
            True when stable, False on timeout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._state_changed:
                while self._state is not MemberState.STABLE:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._state_changed.wait(min(remaining, 1.0) if remaining is not None else 1.0)
                seen = self._ids_cversion
            try:
                stat = self.zk.exists_async(self.registry.ids_path).get(timeout=2.0)
            except (KazooException, KazooTimeoutError):
                stat = None
            if stat is not None and stat.cversion == seen:
                return True
            # The membership moved on since our last round (its watch is on its way): the
            # trigger leaves STABLE, so the wait above lasts until a newer round is done.
            self.trigger("await_rebalance saw a newer membership")
            if deadline is not None and time.monotonic() >= deadline:
                return False

    # ------------------------------------------------------------------ kazoo callbacks

    def _on_connection_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: move the state, wake the loop, never block.
        event = _KAZOO_EVENTS.get(state)
        if event is None:
            return
        with self._lock:
            previous = self._transition(event)
            if previous is MemberState.CLOSED:
                return
            if event is Event.LOST and previous is not MemberState.LOST and self._session_id:
                # Nodes still owned by this session are our own leftovers from now on.
                self.registry.past_sessions.add(self._session_id)
            self._trigger.set()
        self._emit(f"zookeeper_{str(state).lower()}", consumer_id=self.consumer_id)
        self._wake.set()

    def _on_watch(self, event: Any) -> None:
        self.trigger(f"watch {getattr(event, 'path', None)} {getattr(event, 'type', None)}")

    def _on_broker_watch(self, event: Any) -> None:
        self._brokers_changed = True
        self.trigger(f"brokers {getattr(event, 'type', None)}")

    def _on_owner_watch(self, event: Any) -> None:
        # An owner node we wait for changed (deleted, usually): claim again at once.
        self._wake.set()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        retrying = self._round_retrying()
        while self._wait_for_round():
            retrying(self._rounds)

    def _round_retrying(self) -> tenacity.Retrying:
        # A failed round is retried after a backoff that doubles per consecutive failure
        # (capped at _MAX_RETRY_S), so a persistent problem (ZooKeeper away, an assignor
        # refusing the subscriptions) neither spins nor floods the log, while a one-off hiccup
        # is retried within rebalance_backoff_ms. A trigger cuts the wait short.
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(Exception),
            wait=tenacity.wait_exponential_jitter(
                multiplier=self.backoff_s + 0.01, max=_MAX_RETRY_S, jitter=self.backoff_s
            ),
            sleep=self._sleep_until_triggered,
            before_sleep=self._round_failed,
            reraise=True,
        )

    def _wait_for_round(self) -> bool:
        """Block until a round is due, then debounce; False once closed.

        Due: a trigger; the re-check of partitions awaiting release; or, while partitions
        come from Metadata polls, a changed Metadata answer.
        """
        while not self._closed:
            fired = self._trigger.wait(self._next_timeout())
            if fired or self._recheck_due() or (self._polling_metadata and self._metadata_changed()):
                self._debounce()
                self._recheck_at = None  # a round may set it again (claims still waiting)
                return not self._closed
        return False

    def _next_timeout(self) -> float | None:
        candidates = []
        if self._recheck_at is not None:
            candidates.append(max(0.0, self._recheck_at - time.monotonic()))
        if self._polling_metadata:
            candidates.append(self.metadata_refresh_s)
        return min(candidates) if candidates else None

    def _recheck_due(self) -> bool:
        return self._recheck_at is not None and time.monotonic() >= self._recheck_at

    def _rounds(self) -> None:
        # Rounds until one ends without a newer trigger cutting it short.
        while not self._closed:
            try:
                self._round()
                return
            except _Restart:
                self._debounce()

    def _sleep_until_triggered(self, seconds: float) -> None:
        # tenacity's sleep between failed rounds: a trigger (or close) ends it early.
        self._trigger.wait(seconds)
        self._debounce()

    def _round_failed(self, retry_state: tenacity.RetryCallState) -> None:
        # tenacity's before_sleep: log, report, and move to BACKING_OFF.
        assert retry_state.outcome is not None
        exc = retry_state.outcome.exception()
        failures = retry_state.attempt_number
        text = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, _EXPECTED_FAILURES):
            log.warning("%s: rebalance round failed (%s); retrying", self.consumer_id, text)
        elif failures == 1 or text != self._last_error:
            log.error("%s: unexpected error in rebalance round", self.consumer_id, exc_info=exc)
        self._last_error = text
        self._emit("rebalance_failed", consumer_id=self.consumer_id, error=repr(exc), failures=failures)
        self._finish_round(Event.ROUND_FAILED)

    def _debounce(self) -> None:
        # Coalesce bursts (several members joining at once, a watch per member): wait until
        # triggers stop for debounce_s, but never longer than max_debounce_s in total.
        start = time.monotonic()
        while True:
            self._trigger.clear()
            self._wake.clear()
            if self.debounce_s <= 0:
                return
            left = self.max_debounce_s - (time.monotonic() - start)
            if left <= 0 or not self._trigger.wait(min(self.debounce_s, left)):
                return
            if self._closed:
                return

    def _check_restart(self) -> None:
        if self._closed or self._trigger.is_set():
            raise _Restart()

    # ------------------------------------------------------------------ one round

    def _round(self) -> None:
        started = time.monotonic()
        self._prepare_session()
        partitions_by_topic, threads_by_topic = self._read_view()
        viewed = time.monotonic()
        self.target = self._our_share(partitions_by_topic, threads_by_topic)
        self._emit(
            "rebalance_started",
            consumer_id=self.consumer_id,
            target=len(self.target),
            owned=len(self.owned),
            view_seconds=round(viewed - started, 4),
        )
        self._release_leaving(self.target)
        # Partitions we still hold but had stopped (a commit failed in an earlier round).
        stopped = {tp: tid for tp, tid in self.owned.items() if tp not in self.assigned}
        if stopped:
            self._assign(stopped)
        wanted = {tp: tid for tp, tid in self.target.items() if tp not in self.owned}
        still_held = self._claim_with_retries(wanted) if wanted else {}
        self.rounds += 1
        self._finish_round(Event.ROUND_INCOMPLETE if still_held else Event.ROUND_DONE)
        self._emit(
            "rebalance_completed",
            consumer_id=self.consumer_id,
            owned=len(self.owned),
            seconds=round(time.monotonic() - started, 4),
        )

    def _prepare_session(self) -> None:
        # Step 1: a lost session is recovered, a reconnected one verified, before anything.
        state = self._transition(Event.ROUND_STARTED)
        if state is MemberState.LOST:
            self._recover_session()
        elif state is MemberState.RECONNECTED:
            self._verify_owned()
        self._session_id = self.registry.session_id

    def _our_share(
        self, partitions_by_topic: dict[str, list[int]], threads_by_topic: dict[str, list[str]]
    ) -> dict[TopicPartition, str]:
        # Step 3: every member runs the same assignor on the same view and keeps its part.
        assignment = self.assignor(partitions_by_topic, threads_by_topic)
        ours = {
            tid for threads in threads_by_topic.values() for tid in threads
            if thread_index(self.consumer_id, tid) is not None
        }
        share: dict[TopicPartition, str] = {}
        for tid, tps in assignment.items():
            if tid in ours:
                for topic, partition in tps:
                    share[(topic, int(partition))] = tid
        return share

    def _release_leaving(self, target: Mapping[TopicPartition, str]) -> None:
        # Step 4: revoke and release what leaves us, committing strictly before releasing.
        leaving = {tp: tid for tp, tid in self.owned.items() if target.get(tp) != tid}
        if not leaving:
            return
        for tp in leaving:
            self.assigned.pop(tp, None)
        self.listener.on_revoke(leaving, True)  # raises when the commit failed: nothing released
        self._emit("partitions_revoked", consumer_id=self.consumer_id, partitions=sorted(leaving))
        self.registry.release(leaving)
        for tp in leaving:
            self.owned.pop(tp, None)

    def _assign(self, partitions: Mapping[TopicPartition, str]) -> None:
        self.listener.on_assign(dict(partitions))
        self.assigned.update(partitions)
        self._emit("partitions_assigned", consumer_id=self.consumer_id, partitions=sorted(partitions))

    # ------------------------------------------------------------------ claims

    def _claim_with_retries(self, wanted: Mapping[TopicPartition, str]) -> dict[TopicPartition, str]:
        """Step 5: claim ``wanted``; return what is still held by a previous owner."""
        pending = dict(wanted)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=self._claim_backoff,
            retry=tenacity.retry_if_exception_type(_Conflicts),
            sleep=self._sleep_until_released,
            reraise=True,
        )
        last_attempt: tenacity.RetryCallState | None = None
        try:
            for attempt in retrying:
                last_attempt = attempt.retry_state
                with attempt:
                    self._claim_once(pending)
        except _Conflicts:
            # Do not give back what we hold (that is what made pykafka's groups storm): keep
            # the owner watches -- a release triggers a round -- and look again after a
            # backoff (never zero: a zero rebalance_backoff_ms must not spin).
            log.warning(
                "%s: %d partitions still owned elsewhere after %d attempts; waiting for release",
                self.consumer_id, len(pending), self.max_retries + 1,
            )
            self._emit("rebalance_incomplete", consumer_id=self.consumer_id, partitions=sorted(pending))
            assert last_attempt is not None
            self._recheck_at = time.monotonic() + self._claim_backoff(last_attempt) + 0.01
            for tp in pending:
                self.zk.exists_async(self.registry.owner_path(tp), watch=self._on_watch)
            if self._trigger.is_set():
                raise _Restart() from None
        return pending

    def _claim_once(self, pending: dict[TopicPartition, str]) -> None:
        self._check_restart()
        self._wake.clear()
        outcome = self.registry.claim(pending, watch=self._on_owner_watch)
        if outcome.claimed:
            self.owned.update(outcome.claimed)
            self._assign(outcome.claimed)
            for tp in outcome.claimed:
                pending.pop(tp, None)
        if pending:
            self._emit(
                "claim_conflict",
                consumer_id=self.consumer_id,
                partitions=len(pending),
                holders=sorted({h for h in outcome.conflicts.values() if h}),
            )
            raise _Conflicts(f"{len(pending)} partitions still owned by their previous owner")

    def _sleep_until_released(self, seconds: float) -> None:
        # tenacity's sleep between claims: wake as soon as a watched owner node changes, or a
        # trigger comes.
        self._wake.wait(seconds)
        self._check_restart()

    # ------------------------------------------------------------------ view

    def _read_view(self) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
        """Step 2: ``(partitions_by_topic, threads_by_topic)`` of the subscribed topics that
        have partitions, from a view no watch fired during."""
        for _ in range(_MAX_VIEW_READS):
            self._trigger.clear()
            view = self.registry.snapshot(
                member_watch=self._on_watch,
                broker_watch=self._on_broker_watch,
                topic_watch=self._on_topics_watch,
            )
            if self.consumer_id not in view.members:
                # Our registration is gone (deleted by a tool, or never re-created): restore it.
                self.registry.register(self.subscription.registration(self.consumer_id))
                continue
            if self._brokers_changed:
                self._brokers_changed = False
                self.listener.on_brokers_changed(view.brokers)
            partitions, threads_by_topic = self._subscribed_partitions(view)
            if self._trigger.is_set():
                # A watch fired while we read: the view may be torn. Read again.
                continue
            self._ids_cversion = view.ids_cversion
            threads = {t: sorted(threads_by_topic[t]) for t in partitions if partitions[t]}
            self.last_view = {
                "members": sorted(view.members),
                "partitions": {t: len(p) for t, p in partitions.items()},
            }
            return {t: partitions[t] for t in threads}, threads
        raise RebalanceError("group membership kept changing while reading it")

    def _subscribed_partitions(
        self, view: GroupView
    ) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
        # Brokers that register in ZooKeeper also register their topics there; with no
        # registered broker, ask the brokers' Metadata API when we know where they are.
        members = view.members
        if view.brokers or (view.brokers is not None and self.metadata_partitions is None):
            self._polling_metadata = False
            threads_by_topic = self._threads(members, view.topics or [])
            return self._zk_partitions(sorted(threads_by_topic)), threads_by_topic
        if self.metadata_partitions is not None:
            self._polling_metadata = True
            wildcard = any(r.pattern != STATIC for r in members.values())
            static_topics = sorted(
                {t for r in members.values() if r.pattern == STATIC for t in r.subscription}
            )
            answer = self._metadata_view(None if wildcard else static_topics)
            threads_by_topic = self._threads(members, sorted(answer))
            return {t: list(answer[t]) for t in threads_by_topic if t in answer}, threads_by_topic
        self._polling_metadata = False
        log.warning(
            "%s: no brokers in ZooKeeper and no metadata.broker.list: nothing to assign",
            self.consumer_id,
        )
        return {}, {}

    def _threads(self, members: Mapping[str, Registration], all_topics: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for reg in members.values():
            for topic, tids in reg.threads_per_topic(all_topics, self.exclude_internal_topics).items():
                out.setdefault(topic, []).extend(tids)
        return out

    def _zk_partitions(self, topics: list[str]) -> dict[str, list[int]]:
        # Topic znodes change only when partitions are added: cache them, dropping an entry
        # when its data watch fires (or the topic list changes).
        missing = [t for t in topics if t not in self._partition_cache]
        if missing:
            found = self.registry.partitions(missing, watch=self._on_topic_data_watch)
            self._partition_cache.update(found)
        out: dict[str, list[int]] = {}
        for t in topics:
            # A data watch may drop an entry at any moment (kazoo's callback thread).
            parts = self._partition_cache.get(t)
            if parts is None:
                parts = self.registry.partitions([t], watch=self._on_topic_data_watch).get(t)
                if parts is not None:
                    self._partition_cache[t] = parts
            if parts is not None:
                out[t] = parts
        return out

    def _on_topics_watch(self, event: Any) -> None:
        self.trigger(f"topics {getattr(event, 'type', None)}")

    def _on_topic_data_watch(self, event: Any) -> None:
        path = getattr(event, "path", None) or ""
        topic = path.rsplit("/", 1)[-1] if path else None
        if topic:
            self._partition_cache.pop(topic, None)
        else:
            self._partition_cache.clear()
        self.trigger(f"topic data {path}")

    def _metadata_view(self, topics: list[str] | None) -> Mapping[str, list[int]]:
        # Membership changes do not change partitions: reuse a recent Metadata answer for the
        # same question (the periodic poll refreshes it), so a round costs no broker request.
        key = None if topics is None else tuple(topics)
        now = time.monotonic()
        if (
            self._metadata_answer is not None
            and self._metadata_key == key
            and now - self._metadata_at < self.metadata_refresh_s
        ):
            return self._metadata_answer
        assert self.metadata_partitions is not None
        answer = {t: sorted(p) for t, p in self.metadata_partitions(topics).items()}
        self._metadata_answer, self._metadata_key, self._metadata_at = answer, key, now
        return answer

    def _metadata_changed(self) -> bool:
        assert self.metadata_partitions is not None
        key = self._metadata_key
        topics = None if key is None else list(key)
        try:
            answer = {t: sorted(p) for t, p in self.metadata_partitions(topics).items()}
        except Exception as exc:  # noqa: BLE001 - a broker hiccup: poll again later
            log.debug("metadata poll failed: %s", exc)
            return False
        changed = answer != self._metadata_answer
        self._metadata_answer, self._metadata_at = answer, time.monotonic()
        return changed

    # ------------------------------------------------------------------ session recovery

    def _recover_session(self) -> None:
        # The old session is gone and with it every owner node it held: stop without committing
        # (a new owner may already be consuming and committing these partitions).
        lost = dict(self.owned)
        if lost:
            self.listener.on_revoke(lost, False)
            self._emit("partitions_revoked", consumer_id=self.consumer_id, partitions=sorted(lost), committed=False)
        self.owned.clear()
        self.assigned.clear()
        if not self.zk.connected:
            raise RebalanceError("waiting for a new ZooKeeper session")
        self._session_id = self.registry.session_id
        # Nodes our old session left (client-side expiry while the server still holds the
        # session) are ours to delete; otherwise peers would wait a whole session timeout.
        self.registry.purge_leftovers(lost)
        self.registry.register(self.subscription.registration(self.consumer_id))
        self._emit("registered", consumer_id=self.consumer_id, after="session_lost")
        with self._lock:
            # kazoo clears "connected" before it reports SUSPENDED (which waits for this lock):
            # resume hand-out only on a connection that is still up.
            if not self.zk.connected:
                raise RebalanceError("the ZooKeeper connection dropped while registering again")
            self._transition(Event.SESSION_RESTORED)

    def _verify_owned(self) -> None:
        still = self.registry.verify(self.owned)
        gone = {tp: tid for tp, tid in self.owned.items() if tp not in still}
        if gone:
            log.warning("%s: %d owner nodes vanished while disconnected", self.consumer_id, len(gone))
            for tp in gone:
                self.owned.pop(tp, None)
                self.assigned.pop(tp, None)
            self.listener.on_revoke(gone, False)
        self._transition(Event.OWNERS_VERIFIED)

    # ------------------------------------------------------------------ status

    def _emit(self, event: str, **fields: Any) -> None:
        if self._status is None:
            return
        try:
            self._status(event, fields)
        except Exception:  # noqa: BLE001 - listeners must not break the loop
            log.exception("status listener failed on %s", event)

    def thread_ids(self) -> list[str]:
        """Every thread id this member registers (for tests and tools)."""
        if self.subscription.topic_counts is not None:
            n = max(self.subscription.topic_counts.values())
        else:
            n = self.subscription.num_streams
        return paths.thread_ids(self.consumer_id, n)
