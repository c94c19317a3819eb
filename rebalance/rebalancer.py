"""The ZooKeeper rebalance loop of one consumer-group member (Kafka 0.8 design, §5.6).

One :class:`ZkRebalancer` per ``ConsumerConnector``. It owns a KazooClient, the member's
registration, its owner znodes and a single *rebalance thread*; the consumer plugs in through
the :class:`OwnershipListener` callbacks and never touches ownership itself.

State transitions
-----------------
Triggers: a child watch on ``/consumers/<g>/ids``, a child watch on ``/brokers/ids``, a child
watch on ``/brokers/topics`` and data watches on the subscribed topics' nodes (or, when the
brokers are not in ZooKeeper, a periodic Metadata poll through the ``metadata_partitions``
callback), an owner node we wait for being deleted, and ZooKeeper connection states.
Triggers are debounced (``debounce_ms`` of quiet, at most ``max_debounce_ms``) and one
*round* runs at a time:

1. If the session was LOST: every partition is revoked **without** a commit (its owner nodes
   died with the session, so a new owner may already be committing), leftovers of the old
   session are deleted, and the member registers again.
2. Read a consistent view: members and their subscriptions (re-read while the ids watch keeps
   firing), broker and topic lists, partitions per topic.
3. Assign with the assignor (pure function) and keep our own threads' share.
4. For partitions leaving us (or moving between our own threads): ``on_revoke(commit=True)``
   -- the consumer stops handing their messages out, stops fetching them and commits their
   consumed offsets durably -- and only then are their owner nodes deleted. A failed commit
   aborts the round *before* the release, so the invariant "offsets are committed before
   ownership is released" holds even under failure.
5. Claim the new share: ephemeral owner nodes, pipelined. NodeExists means the previous owner
   has not released yet: retry (tenacity) with ``rebalance_backoff_ms`` plus jitter, at most
   ``rebalance_max_retries`` times, waking early when a watch reports the node deleted. What
   is claimed is handed to ``on_assign`` at once (the consumer reads offsets and fetches),
   so unaffected partitions never stop and claimed ones do not wait for the stragglers. If a
   new trigger arrives meanwhile the round ends and a new one starts from a fresh view. When
   retries run out the member keeps the watches and tries again when the holder releases,
   instead of releasing everything (which caused the PartitionOwnedError storms of pykafka).

Connection states: SUSPENDED pauses hand-out (``on_pause``) -- our session may be expiring
and another member may soon own our partitions; kazoo notices a dead connection after 2/3 of
the session timeout, before the server can expire the session, so pausing there keeps "only
the owner hands out". CONNECTED with the same session resumes and re-verifies our owner nodes.
LOST pauses until the next round has revoked everything, re-registered and rebalanced.

Invariants
----------
* A partition is given to ``on_assign`` only while we hold its owner node under the current
  session, and taken back (``on_revoke``) before the node is deleted.
* Only the rebalance thread changes ``owned``/``assigned``; kazoo callbacks only set flags.
"""

from __future__ import annotations

import logging
import random
import re
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
    Registration,
    TopicPartition,
    thread_index,
)

__all__ = [
    "Subscription",
    "OwnershipListener",
    "ZkRebalancer",
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

#: Kafka's legal topic names.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


class RebalanceError(Exception):
    """A round could not complete (raised inside the loop only; logged and retried)."""


class _Restart(Exception):
    """A new trigger arrived: abandon this round and start again from a fresh view."""


class _Conflicts(Exception):
    """Some partitions are still held by their previous owner."""


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
                if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
                    raise ValueError(
                        f"illegal topic name {topic!r}: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
                    )
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

        self._lock = threading.Lock()
        self._trigger = threading.Event()
        self._wake = threading.Event()
        self._stable = threading.Condition(self._lock)
        self._is_stable = False
        self._stopping = False
        self._suspended = False
        self._lost = False
        self._reconnected = False
        self._paused = False
        self._session_id = 0
        self._brokers_dirty = True
        self._ids_cversion = -1
        self._thread: threading.Thread | None = None
        self._retry_at: float | None = None
        self._failures = 0
        self._last_error = ""
        self._metadata_snapshot: Mapping[str, list[int]] | None = None
        self._metadata_key: tuple[str, ...] | None = None
        self._metadata_at = 0.0
        self._partition_cache: dict[str, list[int]] = {}
        self._metadata_mode = False

        #: Owner nodes we hold (tp -> our thread id). Rebalance thread only.
        self.owned: dict[TopicPartition, str] = {}
        #: Partitions currently handed to the consumer (subset of ``owned``).
        self.assigned: dict[TopicPartition, str] = {}
        #: Our share in the latest view (tp -> thread id).
        self.target: dict[TopicPartition, str] = {}
        #: Completed rounds (for tests and benchmarks).
        self.rounds = 0
        self.last_view: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle

    def connect(self) -> None:
        """Open the ZooKeeper session (idempotent); :meth:`start` calls it if needed.

        Raises:
            kazoo errors (KazooTimeoutError...) when ZooKeeper is unreachable within
            ``connection_timeout_ms``; the caller maps them.
        """
        if self.zk.connected:
            return
        self.zk.add_listener(self._on_state)
        self.zk.start(timeout=self.connection_timeout_s)
        self._session_id = self.registry.session_id

    def start(self) -> None:
        """Register this member and start the rebalance thread (its first round runs at once).

        Raises:
            kazoo errors when ZooKeeper is unreachable or the registration fails.
        """
        self.connect()
        self.registry.register(self.subscription.registration(self.consumer_id))
        self._emit("registered", consumer_id=self.consumer_id)
        self._thread = threading.Thread(
            target=self._run, name=f"hmb-rebalance-{self.group}", daemon=True
        )
        self._trigger.set()
        self._thread.start()

    def close(self, release: bool = True) -> None:
        """Stop rebalancing; revoke (committing), release our nodes, unregister, close.

        Args:
            release: commit and release; False leaves ephemerals to the session close.
        """
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._trigger.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            if self.assigned or self.owned:
                commit = release and not self._lost and self.zk.connected
                try:
                    self.listener.on_revoke(dict(self.owned), commit)
                except Exception as exc:  # noqa: BLE001 - shutdown must go on
                    log.error("final commit for %s failed: %s", self.consumer_id, exc)
                    commit = False
                self.assigned.clear()
                if release and self.zk.connected and not self._lost:
                    self.registry.release(self.owned)
                self.owned.clear()
            if self.zk.connected and not self._lost:
                self.registry.unregister()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("clean release of %s failed (%s); the session close removes it", self.consumer_id, exc)
        finally:
            self.zk.remove_listener(self._on_state)
            try:
                self.zk.stop()
            finally:
                self.zk.close()
            self._emit("closed", consumer_id=self.consumer_id)

    def trigger(self, reason: str = "manual") -> None:
        """Ask for a rebalance round (thread-safe, cheap, coalesced)."""
        with self._lock:
            self._is_stable = False
        log.debug("%s: rebalance trigger (%s)", self.consumer_id, reason)
        self._trigger.set()
        self._wake.set()

    def await_rebalance(self, timeout: float | None = None) -> bool:
        """Block until this member owns its whole share under the group's *current* membership.

        A round that finished counts only if the ids directory has not changed since that
        round read it (one ZooKeeper read), so a member that has not yet seen a join or leave
        does not report a stale share.

        Args:
            timeout: seconds (None: forever).

        Returns:
            True when stable, False on timeout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._stable:
                while not self._is_stable:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._stable.wait(min(remaining, 1.0) if remaining is not None else 1.0)
                seen = self._ids_cversion
            try:
                stat = self.zk.exists_async(self.registry.ids_path).get(timeout=2.0)
            except (KazooException, KazooTimeoutError):
                stat = None
            if stat is not None and stat.cversion == seen:
                return True
            # The membership moved on since our last round (its watch is on its way).
            self.trigger("await_rebalance saw a newer membership")
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    @property
    def stable(self) -> bool:
        """Whether the latest round completed with the whole share claimed."""
        return self._is_stable

    # ------------------------------------------------------------------ kazoo callbacks

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: set flags, never block.
        with self._lock:
            if self._stopping:
                return
            if state == KazooState.SUSPENDED:
                self._suspended = True
            elif state == KazooState.LOST:
                self._suspended = True
                if not self._lost and self._session_id:
                    self.registry.past_sessions.add(self._session_id)
                self._lost = True
            elif state == KazooState.CONNECTED:
                self._suspended = False
                self._reconnected = True
            self._is_stable = False
            self._update_pause_locked()
        self._emit(f"zookeeper_{str(state).lower()}", consumer_id=self.consumer_id)
        self._trigger.set()
        self._wake.set()

    def _update_pause_locked(self) -> None:
        paused = self._suspended or self._lost
        if paused == self._paused:
            return
        self._paused = paused
        try:
            if paused:
                self.listener.on_pause()
            else:
                self.listener.on_resume()
        except Exception:  # noqa: BLE001 - a listener bug must not kill kazoo's thread
            log.exception("pause/resume listener failed")

    def _on_watch(self, event: Any) -> None:
        self.trigger(f"watch {getattr(event, 'path', None)} {getattr(event, 'type', None)}")

    def _on_broker_watch(self, event: Any) -> None:
        self._brokers_dirty = True
        self.trigger(f"brokers {getattr(event, 'type', None)}")

    def _on_owner_watch(self, event: Any) -> None:
        # An owner node we wait for changed (deleted, usually): claim again at once.
        self._wake.set()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while True:
            timeout = self._next_timeout()
            fired = self._trigger.wait(timeout)
            if self._stopping:
                return
            if not fired:
                if self._retry_at is not None and time.monotonic() >= self._retry_at:
                    self._retry_at = None
                elif self._metadata_mode and self._metadata_changed():
                    pass
                else:
                    continue
            self._debounce()
            if self._stopping:
                return
            self._retry_at = None  # a round may set it again (claims still waiting)
            try:
                self._round()
                self._failures = 0
            except _Restart:
                self._trigger.set()
            except (KazooException, KazooTimeoutError, RebalanceError, OSError) as exc:
                self._failed(exc, expected=True)
            except Exception as exc:  # noqa: BLE001 - the loop must survive listener bugs
                self._failed(exc, expected=False)

    def _failed(self, exc: Exception, expected: bool) -> None:
        # Retry with backoff that doubles per consecutive failure (capped), so a persistent
        # problem (ZooKeeper away, an assignor refusing the subscriptions) neither spins nor
        # floods the log, while a one-off hiccup is retried within rebalance_backoff_ms.
        self._failures += 1
        text = f"{type(exc).__name__}: {exc}"
        if expected:
            log.warning("%s: rebalance round failed (%s); retrying", self.consumer_id, text)
        elif self._failures == 1 or text != self._last_error:
            log.error("%s: unexpected error in rebalance round", self.consumer_id, exc_info=exc)
        self._last_error = text
        self._emit("rebalance_failed", consumer_id=self.consumer_id, error=repr(exc), failures=self._failures)
        factor = 2 ** min(self._failures - 1, 6)
        self._retry_at = time.monotonic() + min(self._jittered_backoff() * factor, _MAX_RETRY_S)

    def _next_timeout(self) -> float | None:
        now = time.monotonic()
        candidates = []
        if self._retry_at is not None:
            candidates.append(max(0.0, self._retry_at - now))
        if self._metadata_mode:
            candidates.append(self.metadata_refresh_s)
        return min(candidates) if candidates else None

    def _jittered_backoff(self) -> float:
        return self.backoff_s + random.uniform(0, self.backoff_s) + 0.01

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
            if self._stopping:
                return

    def _check_restart(self) -> None:
        if self._stopping or self._trigger.is_set():
            raise _Restart()

    # ------------------------------------------------------------------ one round

    def _round(self) -> None:
        started = time.monotonic()
        if self._lost:
            self._recover_session()
        if self._reconnected:
            self._reconnected = False
            self._verify_owned()
        self._session_id = self.registry.session_id

        view = self._read_view()
        viewed = time.monotonic()
        partitions_by_topic, threads_by_topic = view
        assignment = self.assignor(partitions_by_topic, threads_by_topic)
        mine_threads = {
            tid for threads in threads_by_topic.values() for tid in threads
            if thread_index(self.consumer_id, tid) is not None
        }
        target: dict[TopicPartition, str] = {}
        for tid, tps in assignment.items():
            if tid in mine_threads:
                for tp in tps:
                    target[(tp[0], int(tp[1]))] = tid
        self.target = target
        self._emit(
            "rebalance_started",
            consumer_id=self.consumer_id,
            target=len(target),
            owned=len(self.owned),
            view_seconds=round(viewed - started, 4),
        )

        # Step 4: revoke and release what leaves us (commit strictly before release).
        leaving = {tp: tid for tp, tid in self.owned.items() if target.get(tp) != tid}
        if leaving:
            for tp in leaving:
                self.assigned.pop(tp, None)
            self.listener.on_revoke(leaving, True)
            self._emit("partitions_revoked", consumer_id=self.consumer_id, partitions=sorted(leaving))
            self.registry.release(leaving)
            for tp in leaving:
                self.owned.pop(tp, None)

        # Partitions we still hold but had stopped (a commit failed in an earlier round).
        resume = {tp: tid for tp, tid in self.owned.items() if tp not in self.assigned}
        if resume:
            self._assign(resume)

        # Step 5: claim the new share.
        wanted = {tp: tid for tp, tid in target.items() if tp not in self.owned}
        if wanted:
            self._claim_with_retries(wanted)

        self.rounds += 1
        with self._lock:
            if not self._trigger.is_set() and not self._lost and not self._suspended:
                self._is_stable = True
                self._stable.notify_all()
        self._emit(
            "rebalance_completed",
            consumer_id=self.consumer_id,
            owned=len(self.owned),
            seconds=round(time.monotonic() - started, 4),
        )

    def _assign(self, partitions: Mapping[TopicPartition, str]) -> None:
        self.listener.on_assign(dict(partitions))
        self.assigned.update(partitions)
        self._emit("partitions_assigned", consumer_id=self.consumer_id, partitions=sorted(partitions))

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
        # tenacity's sleep: wake as soon as a watched owner node changes, or a trigger comes.
        self._wake.wait(seconds)
        self._check_restart()

    def _claim_with_retries(self, wanted: dict[TopicPartition, str]) -> None:
        pending = dict(wanted)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=tenacity.wait_fixed(self.backoff_s) + tenacity.wait_random(0, self.backoff_s),
            retry=tenacity.retry_if_exception_type(_Conflicts),
            sleep=self._sleep_until_released,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self._claim_once(pending)
        except _Conflicts:
            # Do not give back what we hold (that is what made pykafka's groups storm): keep
            # the owner watches -- a release wakes us -- and look again after a backoff.
            log.warning(
                "%s: %d partitions still owned elsewhere after %d attempts; waiting for release",
                self.consumer_id, len(pending), self.max_retries + 1,
            )
            self._emit("rebalance_incomplete", consumer_id=self.consumer_id, partitions=sorted(pending))
            self._retry_at = time.monotonic() + self._jittered_backoff()
            self._watch_pending(pending)
            if self._trigger.is_set():
                raise _Restart() from None

    def _watch_pending(self, pending: Mapping[TopicPartition, str]) -> None:
        # Turn owner-node changes into full triggers while no claim loop is waiting.
        for tp in pending:
            self.zk.exists_async(self.registry.owner_path(tp), watch=self._on_watch)

    # ------------------------------------------------------------------ view

    def _read_view(self) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
        for _ in range(20):
            self._trigger.clear()
            snap = self.registry.snapshot(
                member_watch=self._on_watch,
                broker_watch=self._on_broker_watch,
                topic_watch=self._on_topics_watch,
            )
            members = snap.members
            if self.consumer_id not in members:
                # Our registration is gone (deleted by a tool, or never re-created): restore it.
                self.registry.register(self.subscription.registration(self.consumer_id))
                continue
            brokers = snap.brokers
            if self._brokers_dirty:
                self._brokers_dirty = False
                self.listener.on_brokers_changed(brokers)
            wildcard = any(r.pattern != STATIC for r in members.values())
            static_topics = sorted(
                {t for r in members.values() if r.pattern == STATIC for t in r.subscription}
            )
            # Brokers that register in ZooKeeper also register their topics there; with no
            # registered broker, ask the brokers' Metadata API when we know where they are.
            zk_mode = bool(brokers) or (brokers is not None and self.metadata_partitions is None)
            if zk_mode:
                self._metadata_mode = False
                all_topics = snap.topics or []
                threads_by_topic = self._threads(members, all_topics)
                partitions = self._zk_partitions(sorted(threads_by_topic))
            elif self.metadata_partitions is not None:
                self._metadata_mode = True
                snapshot = self._metadata_view(None if wildcard else static_topics)
                all_topics = sorted(snapshot)
                threads_by_topic = self._threads(members, all_topics)
                partitions = {t: list(snapshot[t]) for t in threads_by_topic if t in snapshot}
            else:
                self._metadata_mode = False
                log.warning(
                    "%s: no brokers in ZooKeeper and no metadata.broker.list: nothing to assign",
                    self.consumer_id,
                )
                threads_by_topic, partitions = {}, {}
            if self._trigger.is_set():
                # A watch fired while we read: the view may be torn. Read again.
                continue
            self._ids_cversion = snap.ids_cversion
            threads = {t: sorted(threads_by_topic[t]) for t in partitions if partitions[t]}
            self.last_view = {
                "members": sorted(members),
                "partitions": {t: len(p) for t, p in partitions.items()},
            }
            return {t: partitions[t] for t in threads}, threads
        raise RebalanceError("group membership kept changing while reading it")

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

    def _threads(self, members: Mapping[str, Registration], all_topics: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for reg in members.values():
            for topic, tids in reg.threads_per_topic(all_topics, self.exclude_internal_topics).items():
                out.setdefault(topic, []).extend(tids)
        return out

    def _metadata_view(self, topics: list[str] | None) -> Mapping[str, list[int]]:
        # Membership changes do not change partitions: reuse a recent Metadata answer for the
        # same question (the periodic poll refreshes it), so a round costs no broker request.
        key = None if topics is None else tuple(topics)
        now = time.monotonic()
        if (
            self._metadata_snapshot is not None
            and self._metadata_key == key
            and now - self._metadata_at < self.metadata_refresh_s
        ):
            return self._metadata_snapshot
        assert self.metadata_partitions is not None
        snapshot = {t: sorted(p) for t, p in self.metadata_partitions(topics).items()}
        self._metadata_snapshot, self._metadata_key, self._metadata_at = snapshot, key, now
        return snapshot

    def _metadata_changed(self) -> bool:
        assert self.metadata_partitions is not None
        key = self._metadata_key
        topics = None if key is None else list(key)
        try:
            now = {t: sorted(p) for t, p in self.metadata_partitions(topics).items()}
        except Exception as exc:  # noqa: BLE001 - a broker hiccup: poll again later
            log.debug("metadata poll failed: %s", exc)
            return False
        changed = now != self._metadata_snapshot
        self._metadata_snapshot, self._metadata_at = now, time.monotonic()
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
            self._lost = False
            self._update_pause_locked()

    def _verify_owned(self) -> None:
        still = self.registry.verify(self.owned)
        gone = {tp: tid for tp, tid in self.owned.items() if tp not in still}
        if gone:
            log.warning("%s: %d owner nodes vanished while disconnected", self.consumer_id, len(gone))
            for tp in gone:
                self.owned.pop(tp, None)
                self.assigned.pop(tp, None)
            self.listener.on_revoke(gone, False)

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
