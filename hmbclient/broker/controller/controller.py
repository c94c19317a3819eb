"""Controller: the I/O shell around the pure decisions of :mod:`.decisions` (Kafka's
``KafkaController`` of 0.8.2, with the 0.9+ ISR change notifications).

Every broker runs one. All of them watch ``/controller``; the one that creates it (``elect``)
bumps ``/controller_epoch`` and becomes *active*: it reads the whole cluster state from the
store, elects leaders for partitions whose leader is gone, and tells every live broker
everything (LeaderAndIsr to the replicas, UpdateMetadata to all). From then on it reacts to:

* Case A — brokers change (``/brokers/ids``): a dead broker's partitions get new leaders from
  their ISR (leader epoch + 1) and it leaves every ISR; a new broker gets the metadata and the
  LeaderAndIsr of its partitions (it becomes a follower and rejoins ISRs by catching up), and
  partitions that were offline waiting for it get a leader again.
* Case B — topics appear (``/brokers/topics``): their partitions get their first leader and ISR.
* Case C — a leader changed an ISR (``/isr_change_notification``): re-read, UpdateMetadata.
* Case D — a broker asks for a controlled shutdown: its leaderships move to other ISR members
  and it leaves the ISRs; the answer lists what it still leads.
* Case E — ``/controller`` changes: a deposed controller (its session expired, or another
  broker bumped the epoch) goes inactive; when nobody holds it, everyone competes again.
* Case F — topics are marked for deletion (``/admin/delete_topics``): once every replica of
  such a topic is live (decisions Case L), each replica gets StopReplica(delete) and every
  live broker an UpdateMetadata with leader -2 (Kafka's LeaderDuringDelete: "forget this
  partition"); then its znodes and the marker go. A topic with a dead replica stays marked
  and is tried again when brokers join.
* Case G — a topic's assignment grows (``/brokers/topics/<t>`` rewritten by CreatePartitions):
  the new partitions get their first leader and ISR, as a new topic's do.
* Case H — ElectLeaders (preferred): the named partitions (all when None) whose preferred
  replica is live and in sync move their leadership to it (decisions Case K); with
  ``auto_rebalance`` the active controller does the same every ``rebalance_interval_s`` for
  the partitions of brokers over the imbalance percentage (decisions Case N).
* Case I — partition reassignment (AlterPartitionReassignments, KIP-455; the decisions are
  :mod:`.reassignment`'s): (1) the topic znode gets the partition's full replica set (target
  ++ original) with its adding/removing replicas, (2) its state a new leader epoch (ISR and
  leader restricted to the full set), (3) LeaderAndIsr to the full set: new replicas start
  fetching. Whenever the ISRs change (Case C), brokers change (Case A) and after a fail-over,
  a reassignment whose target replicas are all in the ISR completes: (4) the state restricted
  to the target (leader moved off a removed replica), LeaderAndIsr to the target and
  UpdateMetadata, (5) StopReplica(delete) to the live removed replicas, (6) the topic znode
  with the target and no reassignment. Each step is in ZooKeeper before the next starts, so a
  controller that takes over reads the ongoing reassignments back and repeats from where the
  last one stopped (steps 4-6 are idempotent). A cancel writes the original back (1-3) and
  stops and deletes the adding replicas.

Every state write is conditional on the version this controller read and fenced by the
controller epoch (see the store); on a version conflict (a leader changed the ISR meanwhile)
the state is re-read and the decision made again, a bounded number of times. All events run on
one thread in arrival order, so the decision state needs no lock; watches only queue events.

Shutdown (``shutdown``): the controller is marked stopped *before* it resigns, so the watch its
own deletion of ``/controller`` fires cannot elect it again; every request sender stopped
(resignation, a dead or moved broker) is joined, so a closed broker leaves no
``controller-N-to-M`` thread behind.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError

from hmbclient.broker.channel import BrokerChannel, ChannelSecurity
from hmbclient.broker.controller import decisions, reassignment
from hmbclient.broker.controller.decisions import Change, ClusterState, LeaderIsr
from hmbclient.broker.controller.reassignment import Ongoing
from hmbclient.broker.controller.store import CoordinationStore
from hmbclient.broker.metadata import LEADER_DURING_DELETE, NO_LEADER, BrokerEndpoint
from hmbclient.clock import monotonic_ms
from hmbclient.errors import ErrorCode, HmbError
from hmbclient.protocol.api.base import Request
from hmbclient.protocol.api.cluster import (
    SECURITY_PROTOCOL_IDS,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)

__all__ = ["Controller", "LocalDelivery"]

log = logging.getLogger("hmbclient.broker.controller")

TP = tuple[str, int]
LocalDelivery = Callable[[Request], Any]
"""Serves a request on this broker directly (the controller's requests to itself)."""

_WRITE_ROUNDS = 5


class _Sender:
    """One broker's request queue and the thread that sends it, in order (Kafka's
    ``RequestSendThread``). A failed send is retried until it goes through or the broker is
    removed, since a broker must not miss a LeaderAndIsr."""

    def __init__(self, owner: Controller, endpoint: BrokerEndpoint) -> None:
        self.owner = owner
        self.endpoint = endpoint
        self.queue: queue.Queue[Request | None] = queue.Queue()
        self.stopped = threading.Event()
        self.channel = BrokerChannel(endpoint.host, endpoint.port, f"broker-{owner.broker_id}-controller", security=owner.security)
        self.thread = threading.Thread(target=self._run, name=f"controller-{owner.broker_id}-to-{endpoint.node_id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            req = self.queue.get()
            if req is None:
                break
            while not self.stopped.is_set():
                try:
                    resp = self.owner.deliver(self.endpoint, self.channel, req)
                    code = getattr(resp, "error_code", 0)
                    if code:
                        log.warning("%s to broker %d answered error %d", type(req).__name__, self.endpoint.node_id, code)
                    break
                except HmbError as e:
                    if self.stopped.is_set():  # (its channel shut by _stop_senders)
                        break
                    log.info("%s to broker %d failed (%s); retrying", type(req).__name__, self.endpoint.node_id, e)
                    self.stopped.wait(0.2)
        self.channel.close()

    def stop(self) -> None:
        self.stopped.set()
        self.queue.put(None)


class Controller:
    """The controller role of one broker.

    Args:
        broker_id: this broker.
        store: the coordination store.
        local: serves this broker's own LeaderAndIsr / UpdateMetadata / StopReplica.
        unclean_leader_election: elect outside the ISR when no ISR member is alive.
        request_timeout_s: the wait for a broker's answer.
        security: TLS/SASL of the channels to the other brokers.
        auto_rebalance: ``(interval_s, imbalance percentage)`` of the automatic preferred
            leader election (``auto.leader.rebalance.enable``), or None.
    """

    def __init__(
        self,
        broker_id: int,
        store: CoordinationStore,
        local: LocalDelivery,
        *,
        unclean_leader_election: bool = False,
        request_timeout_s: float = 30.0,
        security: ChannelSecurity | None = None,
        auto_rebalance: tuple[float, int] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.auto_rebalance = auto_rebalance
        self._rebalance_timer: threading.Timer | None = None
        #: TLS/SASL of the channels to the other brokers (their inter-broker listener)
        self.security = security
        self.store = store
        self.local = local
        self.unclean = unclean_leader_election
        self.request_timeout_s = request_timeout_s
        self._events: queue.Queue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"broker-{broker_id}-controller", daemon=True)
        self._stopped = False
        # Active-controller state: touched only on the controller thread.
        self.active = False
        self.epoch = 0
        self.state: ClusterState | None = None
        self.versions: dict[TP, int] = {}
        self.endpoints: dict[int, BrokerEndpoint] = {}
        self._broker_epochs: dict[int, int] = {}
        self._pending_deletion: set[str] = set()
        #: partitions being reassigned (Case I), as the topic znodes record them
        self.reassigning: dict[TP, Ongoing] = {}
        self._senders: dict[int, _Sender] = {}
        #: senders stopped whose thread may still be finishing (joined at shutdown)
        self._stopped_senders: list[_Sender] = []
        # What this broker knows of the current controller (any broker): (id, epoch).
        self.known_controller: tuple[int, int] = (-1, 0)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        self._thread.start()
        self._put(self._elect)
        self._schedule_rebalance()

    def shutdown(self) -> None:
        """Stop acting (resign if active) and stop the thread."""
        if self._stopped:
            return
        if not self._thread.is_alive():
            self._stopped = True
            return
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        done: Future[None] = Future()
        self._put(self._resign_and_stop, done)
        try:
            done.result(timeout=10)
        except Exception:
            log.warning("controller %d did not stop cleanly", self.broker_id)
        self._stopped = True
        self._events.put(None)
        self._thread.join(timeout=10)
        self._stop_senders(wait_s=5.0)

    def _stop_senders(self, wait_s: float = 0.0) -> None:
        """Stop every sender; given ``wait_s``, wait that long in all for the threads of every
        sender stopped so far (a sender ends after the request it is delivering), then shut the
        channels of those still delivering: their requests (to a hung broker) end now, not at
        ``request_timeout_s``."""
        for s in self._senders.values():
            s.stop()
            self._stopped_senders.append(s)
        self._senders = {}
        self._stopped_senders = [s for s in self._stopped_senders if s.thread.is_alive()]
        if not wait_s:
            return
        deadline_ms = monotonic_ms() + int(wait_s * 1000)
        for s in self._stopped_senders:
            if s.thread is not threading.current_thread():
                s.thread.join(timeout=max(0, deadline_ms - monotonic_ms()) / 1000.0)
        for s in self._stopped_senders:
            if s.thread.is_alive():
                s.channel.shutdown()

    def _schedule_rebalance(self) -> None:
        if self.auto_rebalance is None or self._stopped:
            return
        timer = threading.Timer(self.auto_rebalance[0], self._put, args=(self._check_imbalance,))
        timer.daemon = True
        self._rebalance_timer = timer
        timer.start()

    def _check_imbalance(self) -> None:
        try:
            if self.active and self.auto_rebalance is not None:
                tps = decisions.imbalanced_partitions(self._state(), self.auto_rebalance[1])
                if tps:
                    log.info("controller %d: leader imbalance, preferred election of %s", self.broker_id, tps)
                    self._elect_preferred(tps, Future())
        finally:
            self._schedule_rebalance()

    def _put(self, fn: Callable[..., None], *args: Any) -> None:
        if not self._stopped:
            self._events.put((fn, args))

    def _run(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except (ConnectionLoss, SessionExpiredError, ConnectionClosedError) as e:
                # ZooKeeper went away under this event; the session listener brings the
                # controller back (re-election and a full fail-over) once a lost session is
                # renewed; an election cut short by a mere connection loss is tried again.
                log.warning("controller %d: %s interrupted by ZooKeeper: %r", self.broker_id, getattr(fn, "__name__", fn), e)
                if fn == self._elect and not self._stopped:
                    self._retry_election_later()
            except Exception:
                log.exception("controller %d: %s failed", self.broker_id, getattr(fn, "__name__", fn))

    def _on_session(self, what: str) -> None:
        if what == "lost":
            self._put(self._go_inactive, "ZooKeeper session lost")
        elif what == "renewed":
            self._put(self._elect)

    # -- election (Case E) -------------------------------------------------------------------------
    def _watch_controller(self) -> None:
        self._put(self._controller_changed)

    def _controller_changed(self) -> None:
        cid, epoch = self.store.controller(watch=self._watch_controller)
        self.known_controller = (cid, epoch)
        if self.active and cid != self.broker_id:
            self._go_inactive(f"broker {cid} is the controller now")
        if cid < 0:
            self._elect()

    def _elect(self) -> None:
        if self.active or self._stopped:
            return
        epoch = self.store.elect(self.broker_id)
        cid, current = self.store.controller(watch=self._watch_controller)
        self.known_controller = (cid, current)
        if epoch is None:
            return
        self.known_controller = (self.broker_id, epoch)
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self.active = True
        self.epoch = epoch
        try:
            self._failover()
        except Exception:
            # Half a fail-over is no controller: give /controller back and compete again
            # shortly (another broker may take it meanwhile).
            log.exception("controller %d: fail-over failed; resigning and trying again", self.broker_id)
            self._go_inactive("fail-over failed")
            try:
                self.store.resign(self.broker_id)
            finally:
                self._retry_election_later()

    def _retry_election_later(self, delay_s: float = 1.0) -> None:
        timer = threading.Timer(delay_s, self._put, args=(self._elect,))
        timer.daemon = True
        timer.start()

    def _go_inactive(self, why: str) -> None:
        if not self.active:
            return
        log.info("broker %d stops being the controller: %s", self.broker_id, why)
        self.active = False
        self.state = None
        self.versions = {}
        self.reassigning = {}
        self._stop_senders()

    def _resign_and_stop(self, done: Future[None]) -> None:
        # Stopped before resigning: deleting /controller fires this controller's own watch,
        # whose _controller_changed -> _elect must not make it the controller again (with new
        # senders nothing would stop).
        self._stopped = True
        try:
            if self.active:
                self._go_inactive("shutting down")
                self.store.resign(self.broker_id)
        finally:
            done.set_result(None)

    def refresh_known_controller(self) -> tuple[int, int]:
        """Re-read ``(controller id, epoch)`` from the store (a request claims a newer one)."""
        self.known_controller = self.store.controller()
        return self.known_controller

    # -- fail-over: rebuild everything from the store ----------------------------------------------
    def _failover(self) -> None:
        live = self.store.live_brokers(watch=self._watch_brokers)
        self.endpoints = dict(live)
        self._broker_epochs = dict(self.store.broker_epochs)
        state = ClusterState(controller_epoch=self.epoch, live_brokers=set(live), assignments={}, states={})
        self.state = state
        self.versions = {}
        self.reassigning = {}
        for topic in self.store.topics(watch=self._watch_topics):
            self._load_topic(topic)
        for b in live.values():
            self._ensure_sender(b)
        self._pending_deletion = set(self.store.topics_to_delete(watch=self._watch_deletions))
        # Partitions whose leader or ISR members are gone, and ones never given a leader.
        dead = {r for reps in state.assignments.values() for rs in reps for r in rs} - state.live_brokers
        changes = decisions.on_broker_failure(state, dead, unclean=self.unclean) if dead else []
        self._write(changes, lambda: decisions.on_broker_failure(self._state(), dead, unclean=self.unclean))
        self._write(decisions.on_broker_startup(self._state(), set(live), unclean=self.unclean), lambda: decisions.on_broker_startup(self._state(), set(live), unclean=self.unclean))
        for topic, assignment in list(state.assignments.items()):
            fresh = [c for c in decisions.initial_states(state, topic, assignment) if (c.topic, c.partition) not in state.states]
            if fresh:
                self._write(fresh, None, create=True)
        # Everyone hears everything once.
        all_tps = sorted(state.states)
        self._send_leader_and_isr(all_tps, set(live))
        self._send_update_metadata(all_tps, set(live))
        self.store.isr_changes(watch=self._watch_isr)
        self._delete_ready_topics()
        self._check_reassignments()

    def _state(self) -> ClusterState:
        assert self.state is not None
        return self.state

    def _load_topic(self, topic: str) -> None:
        state = self._state()
        assignment = self.store.assignment(topic, watch=lambda: self._put(self._assignment_changed, topic))
        if assignment is None:
            return
        state.assignments[topic] = assignment
        for p in range(len(assignment)):
            found = self.store.partition_state(topic, p)
            if found is not None:
                state.states[(topic, p)], self.versions[(topic, p)] = found
        for p, (adding, removing) in self.store.reassignments(topic).items():
            if p < len(assignment):
                self.reassigning[(topic, p)] = Ongoing(adding, removing)

    def _reload_partition(self, tp: TP) -> None:
        found = self.store.partition_state(*tp)
        if found is not None:
            self._state().states[tp], self.versions[tp] = found

    # -- writing decisions -------------------------------------------------------------------------
    def _write(self, changes: list[Change], recompute: Callable[[], list[Change]] | None, *, create: bool = False) -> list[Change]:
        """Write each change conditionally; re-read and decide again on a conflict. Returns the
        changes written (and applied to the state)."""
        state = self._state()
        written: list[Change] = []
        pending = changes
        for _ in range(_WRITE_ROUNDS):
            conflicts: list[TP] = []
            for ch in pending:
                tp = (ch.topic, ch.partition)
                expected = -1 if create and tp not in self.versions else self.versions.get(tp, -1)
                version = self.store.write_state(ch.topic, ch.partition, ch.state, expected)
                if version is None:
                    conflicts.append(tp)
                    continue
                self.versions[tp] = version
                state.apply([ch])
                written.append(ch)
            if not conflicts or recompute is None:
                if conflicts:
                    log.warning("controller %d: state writes refused for %s", self.broker_id, conflicts)
                break
            for tp in conflicts:
                self._reload_partition(tp)
            again = set(conflicts)
            pending = [c for c in recompute() if (c.topic, c.partition) in again]
        return written

    # -- sending -------------------------------------------------------------------------------------
    def _ensure_sender(self, endpoint: BrokerEndpoint) -> None:
        cur = self._senders.get(endpoint.node_id)
        if cur is not None and cur.endpoint == endpoint:
            return
        if cur is not None:
            cur.stop()
            self._stopped_senders.append(cur)
        self._senders[endpoint.node_id] = _Sender(self, endpoint)

    def deliver(self, endpoint: BrokerEndpoint, channel: BrokerChannel, req: Request) -> Any:
        """Send on a sender thread: to this broker by a direct call, to others over the wire."""
        if endpoint.node_id == self.broker_id:
            return self.local(req)
        return channel.request(req, self.request_timeout_s)

    def _queue(self, broker: int, req: Request) -> None:
        s = self._senders.get(broker)
        if s is not None:
            s.queue.put(req)

    def _partition_state_tuple(self, tp: TP) -> tuple[Any, ...]:
        state = self._state()
        st = state.states[tp]
        replicas = state.assignments[tp[0]][tp[1]]
        return (tp[0], tp[1], st.controller_epoch, st.leader, st.leader_epoch, list(st.isr), self.versions.get(tp, 0), list(replicas))

    def _send_leader_and_isr(self, tps: Iterable[TP], to: set[int]) -> None:
        state = self._state()
        per_broker: dict[int, list[TP]] = {}
        for tp in tps:
            if tp not in state.states:
                continue
            for r in state.assignments[tp[0]][tp[1]]:
                if r in to and r in state.live_brokers:
                    per_broker.setdefault(r, []).append(tp)
        for broker, parts in per_broker.items():
            leaders = {state.states[tp].leader for tp in parts} - {NO_LEADER}
            req = LeaderAndIsrRequest[0](
                controller_id=self.broker_id,
                controller_epoch=self.epoch,
                ungrouped_partition_states=[self._partition_state_tuple(tp) for tp in parts],
                live_leaders=[(b, self.endpoints[b].host, self.endpoints[b].port) for b in sorted(leaders) if b in self.endpoints],
            )
            self._queue(broker, req)

    def _send_update_metadata(self, tps: Iterable[TP], to: set[int]) -> None:
        state = self._state()
        # v3: every listener of every broker, by name, so each broker answers a client with
        # the others' addresses on the client's own listener.
        req = UpdateMetadataRequest[3](
            controller_id=self.broker_id,
            controller_epoch=self.epoch,
            ungrouped_partition_states=[self._partition_state_tuple(tp) for tp in tps if tp in state.states],
            live_brokers=self._live_broker_entries(),
        )
        for broker in sorted(to & state.live_brokers):
            self._queue(broker, req)

    def _send_stop_replica(self, broker: int, tps: list[TP], delete: bool) -> None:
        if not tps:
            return
        self._queue(broker, StopReplicaRequest[0](controller_id=self.broker_id, controller_epoch=self.epoch, delete_partitions=delete, ungrouped_partitions=[list(tp) for tp in tps]))

    def _announce(self, changes: list[Change]) -> None:
        """LeaderAndIsr to the live replicas of the changed partitions, UpdateMetadata to all."""
        if not changes:
            return
        tps = sorted({(c.topic, c.partition) for c in changes})
        live = self._state().live_brokers
        self._send_leader_and_isr(tps, set(live))
        self._send_update_metadata(tps, set(live))

    # -- Case A: brokers change ------------------------------------------------------------------------
    def _watch_brokers(self) -> None:
        self._put(self._brokers_changed)

    def _brokers_changed(self) -> None:
        if not self.active:
            return
        state = self._state()
        live = self.store.live_brokers(watch=self._watch_brokers)
        dead = state.live_brokers - set(live)
        new = set(live) - state.live_brokers
        epochs = dict(self.store.broker_epochs)
        # A broker that restarted between two reads of /brokers/ids (a new registration, seen by
        # its creation zxid or endpoint) died and came back: handle it as both, so its
        # leaderships get a new epoch and its replicas restart as followers.
        moved = {b for b in set(live) & state.live_brokers if self.endpoints.get(b) != live[b] or epochs.get(b) != self._broker_epochs.get(b)}
        self._broker_epochs = epochs
        self.endpoints.update(live)
        dead |= moved
        if dead:
            log.info("controller %d: brokers %s died", self.broker_id, sorted(dead))
            state.live_brokers -= dead
            state.shutting_down -= dead
            for b in dead:
                s = self._senders.pop(b, None)
                if s is not None:
                    s.stop()
                    self._stopped_senders.append(s)
            changes = self._write(
                decisions.on_broker_failure(state, dead, unclean=self.unclean),
                lambda: decisions.on_broker_failure(self._state(), dead, unclean=self.unclean),
            )
            self._announce(changes)
            self._send_update_metadata(sorted(state.states), set(state.live_brokers))
        if new or moved:
            log.info("controller %d: brokers %s joined", self.broker_id, sorted(new | moved))
            state.live_brokers |= new | moved
            for b in new | moved:
                self._ensure_sender(live[b])
            everything = sorted(state.states)
            # The newcomers learn the whole cluster, then become followers of their partitions.
            self._send_update_metadata(everything, new | moved)
            hosted = [tp for tp in everything if any(r in new | moved for r in state.assignments[tp[0]][tp[1]])]
            self._send_leader_and_isr(hosted, new | moved)
            changes = self._write(
                decisions.on_broker_startup(state, new | moved, unclean=self.unclean),
                lambda: decisions.on_broker_startup(self._state(), new | moved, unclean=self.unclean),
            )
            self._announce(changes)
            self._send_update_metadata(everything, set(state.live_brokers) - (new | moved))
            self._delete_ready_topics()
        if dead or new or moved:
            self._check_reassignments()

    # -- Case B: topics appear ------------------------------------------------------------------------
    def _watch_topics(self) -> None:
        self._put(self._topics_changed)

    def _topics_changed(self) -> None:
        if not self.active:
            return
        state = self._state()
        for topic in self.store.topics(watch=self._watch_topics):
            if topic in state.assignments:
                continue
            self._load_topic(topic)
            assignment = state.assignments.get(topic)
            if assignment is None:
                continue
            fresh = [c for c in decisions.initial_states(state, topic, assignment) if (c.topic, c.partition) not in state.states]
            written = self._write(fresh, None, create=True)
            log.info("controller %d: new topic %s with %d partitions", self.broker_id, topic, len(assignment))
            self._announce(written)

    # -- Case F: topics marked for deletion ---------------------------------------------------------
    def _watch_deletions(self) -> None:
        self._put(self._deletions_changed)

    def _deletions_changed(self) -> None:
        if not self.active:
            return
        self._pending_deletion = set(self.store.topics_to_delete(watch=self._watch_deletions))
        self._delete_ready_topics()

    def _delete_ready_topics(self) -> None:
        state = self._state()
        for topic in sorted(self._pending_deletion):
            if not decisions.deletable(state, topic):
                log.info("controller %d: topic %s waits for its replicas to be live before deletion", self.broker_id, topic)
                continue
            assignment = state.assignments.pop(topic, [])
            tps = [(topic, p) for p in range(len(assignment))]
            for p, replicas in enumerate(assignment):
                for r in replicas:
                    self._send_stop_replica(r, [(topic, p)], delete=True)
            gone: list[tuple[Any, ...]] = [(topic, p, self.epoch, LEADER_DURING_DELETE, 0, [], 0, list(assignment[p])) for p in range(len(assignment))]
            for tp in tps:
                state.states.pop(tp, None)
                self.versions.pop(tp, None)
                self.reassigning.pop(tp, None)
            if gone:
                req = UpdateMetadataRequest[3](controller_id=self.broker_id, controller_epoch=self.epoch, ungrouped_partition_states=gone,
                                               live_brokers=self._live_broker_entries())
                for broker in sorted(state.live_brokers):
                    self._queue(broker, req)
            self.store.finish_topic_deletion(topic)
            self._pending_deletion.discard(topic)
            log.info("controller %d: deleted topic %s (%d partitions)", self.broker_id, topic, len(assignment))

    # -- Case G: a topic's assignment grew ------------------------------------------------------------
    def _assignment_changed(self, topic: str) -> None:
        if not self.active:
            return
        state = self._state()
        if topic not in state.assignments or topic in self._pending_deletion:
            return
        assignment = self.store.assignment(topic, watch=lambda: self._put(self._assignment_changed, topic))
        if assignment is None:
            return
        old = state.assignments[topic]
        if len(assignment) <= len(old) or assignment[: len(old)] != old:
            # Only growth is served here (reassignment of existing partitions is not).
            return
        state.assignments[topic] = assignment
        fresh = decisions.initial_states(state, topic, assignment)
        written = self._write(fresh, None, create=True)
        log.info("controller %d: topic %s grew from %d to %d partitions", self.broker_id, topic, len(old), len(assignment))
        self._announce(written)

    # -- Case H: preferred leader election ------------------------------------------------------------
    def elect_preferred(self, partitions: list[TP] | None) -> Future[dict[TP, int]]:
        """Move each partition's leadership to its preferred replica (all partitions when
        None); resolves to partition -> error (NONE, ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER)."""
        fut: Future[dict[TP, int]] = Future()
        self._put(self._elect_preferred, partitions, fut)
        return fut

    def _elect_preferred(self, partitions: list[TP] | None, fut: Future[dict[TP, int]]) -> None:
        try:
            if not self.active:
                fut.set_result({tp: ErrorCode.NOT_CONTROLLER for tp in partitions or ()})
                return
            state = self._state()
            wanted = set(partitions) if partitions is not None else set(state.states)

            def decide() -> list[Change]:
                return [c for c in decisions.preferred_leader_changes(self._state()) if (c.topic, c.partition) in wanted]

            changes = self._write(decide(), decide)
            self._announce(changes)
            written = {(c.topic, c.partition) for c in changes}
            out: dict[TP, int] = {}
            for tp in sorted(wanted):
                cur = state.states.get(tp)
                if cur is None or tp[0] not in state.assignments:
                    out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif tp in written:
                    out[tp] = ErrorCode.NONE
                elif cur.leader == state.assignments[tp[0]][tp[1]][0]:
                    out[tp] = ErrorCode.ELECTION_NOT_NEEDED
                else:
                    out[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            fut.set_result(out)
        except Exception as e:
            fut.set_exception(e)

    def _live_broker_entries(self) -> list[Any]:
        state = self._state()
        return [
            (b.node_id, [(port, host, name, SECURITY_PROTOCOL_IDS[name]) for name, host, port in b.listeners or (("PLAINTEXT", b.host, b.port),)], None)
            for b in sorted(self.endpoints.values())
            if b.node_id in state.live_brokers
        ]

    # -- Case C: a leader changed an ISR ----------------------------------------------------------------
    def _watch_isr(self) -> None:
        self._put(self._isr_changed)

    def _isr_changed(self) -> None:
        if not self.active:
            return
        tps = sorted(set(self.store.isr_changes(watch=self._watch_isr)))
        tps = [tp for tp in tps if tp[0] in self._state().assignments]
        for tp in tps:
            self._reload_partition(tp)
        if tps:
            self._send_update_metadata(tps, set(self._state().live_brokers))
            self._check_reassignments(tps)

    # -- Case D: controlled shutdown -------------------------------------------------------------------
    def controlled_shutdown(self, broker_id: int) -> Future[tuple[int, list[TP]]]:
        """Move ``broker_id``'s leaderships away; resolves to ``(error, partitions it still leads)``."""
        fut: Future[tuple[int, list[TP]]] = Future()
        self._put(self._controlled_shutdown, broker_id, fut)
        return fut

    def _controlled_shutdown(self, broker_id: int, fut: Future[tuple[int, list[TP]]]) -> None:
        try:
            if not self.active:
                fut.set_result((ErrorCode.NOT_CONTROLLER, []))
                return
            state = self._state()
            if broker_id not in state.live_brokers:
                fut.set_result((ErrorCode.BROKER_NOT_AVAILABLE, []))
                return
            state.shutting_down.add(broker_id)
            changes, _ = decisions.on_controlled_shutdown(state, broker_id)
            written = self._write(changes, lambda: decisions.on_controlled_shutdown(self._state(), broker_id)[0])
            self._announce(written)
            # It stops fetching the partitions it followed and left the ISR of.
            followed = [(c.topic, c.partition) for c in written if c.state.leader != broker_id and broker_id not in c.state.isr]
            self._send_stop_replica(broker_id, followed, delete=False)
            remaining = state.partitions_led_by(broker_id)
            fut.set_result((ErrorCode.NONE, remaining))
        except Exception as e:
            fut.set_exception(e)

    # -- Case I: partition reassignment ---------------------------------------------------------------
    def alter_reassignments(self, requested: dict[TP, tuple[int, ...] | None], allow_replication_factor_change: bool = True,
                            ) -> Future[dict[TP, tuple[int, str | None]]]:
        """Start (target replicas) or cancel (None) the reassignment of each partition;
        resolves to partition -> (error, message) once the moves are started (not finished)."""
        fut: Future[dict[TP, tuple[int, str | None]]] = Future()
        self._put(self._alter_reassignments, dict(requested), allow_replication_factor_change, fut)
        return fut

    def list_reassignments(self, partitions: list[TP] | None) -> Future[dict[TP, tuple[tuple[int, ...], Ongoing]] | None]:
        """The ongoing reassignments (of ``partitions``; all when None): partition -> (full
        replicas, Ongoing); None when this broker is not the controller."""
        fut: Future[dict[TP, tuple[tuple[int, ...], Ongoing]] | None] = Future()
        self._put(self._list_reassignments, partitions, fut)
        return fut

    def _list_reassignments(self, partitions: list[TP] | None, fut: Future[dict[TP, tuple[tuple[int, ...], Ongoing]] | None]) -> None:
        if not self.active:
            fut.set_result(None)
            return
        state = self._state()
        wanted = set(self.reassigning) if partitions is None else set(partitions) & set(self.reassigning)
        fut.set_result({tp: (tuple(state.assignments[tp[0]][tp[1]]), self.reassigning[tp]) for tp in sorted(wanted)})

    def _full(self, tp: TP) -> tuple[int, ...] | None:
        assignment = self._state().assignments.get(tp[0])
        if assignment is None or tp[0] in self._pending_deletion or not 0 <= tp[1] < len(assignment):
            return None
        return tuple(assignment[tp[1]])

    def _alter_reassignments(self, requested: dict[TP, tuple[int, ...] | None], allow_rf: bool,
                             fut: Future[dict[TP, tuple[int, str | None]]]) -> None:
        try:
            if not self.active:
                fut.set_result({tp: (ErrorCode.NOT_CONTROLLER, None) for tp in requested})
                return
            state = self._state()
            registered = state.live_brokers | state.shutting_down
            out: dict[TP, tuple[int, str | None]] = {}
            started: list[TP] = []
            for tp, target in sorted(requested.items()):
                full = self._full(tp)
                ongoing = self.reassigning.get(tp)
                code, msg = reassignment.check(full, ongoing, target, registered, allow_replication_factor_change=allow_rf)
                if code or full is None:
                    out[tp] = (code, msg)
                    continue
                plan = reassignment.cancel(full, ongoing) if target is None else reassignment.start(full, ongoing, target)  # type: ignore[arg-type]
                out[tp] = self._carry_out(tp, plan)
                if out[tp][0] == ErrorCode.NONE:
                    started.append(tp)
            fut.set_result(out)
            if started:
                self._check_reassignments(started)
        except Exception as e:
            fut.set_exception(e)

    def _carry_out(self, tp: TP, plan: reassignment.Plan) -> tuple[int, str | None]:
        """Steps 1-3 of a start or cancel (or 4-6 with the completion's plan, see
        :meth:`_complete`)."""
        state = self._state()
        if reassignment.restrict(state.states.get(tp), plan.replicas, state.live_brokers, self.epoch) is None:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "No replica of the new replica set is in sync and alive to lead the partition."
        ongoing = plan.ongoing
        if not self.store.write_reassignment(tp[0], tp[1], plan.replicas, ongoing.adding if ongoing else (), ongoing.removing if ongoing else ()):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic is gone."
        self._set_replicas(tp, plan.replicas, ongoing)

        def decide() -> list[Change]:
            st = reassignment.restrict(self._state().states.get(tp), plan.replicas, self._state().live_brokers, self.epoch)
            return [] if st is None else [Change(tp[0], tp[1], st, plan.replicas)]

        written = self._write(decide(), decide, create=tp not in self.versions)
        self._announce(written)
        self._stop_removed(tp, plan.stop)
        log.info("controller %d: %s-%d reassignment %s: replicas %s", self.broker_id, tp[0], tp[1],
                 "started" if ongoing else "ended", list(plan.replicas))
        return ErrorCode.NONE, None

    def _set_replicas(self, tp: TP, replicas: tuple[int, ...], ongoing: Ongoing | None) -> None:
        state = self._state()
        assignment = list(state.assignments[tp[0]])
        assignment[tp[1]] = replicas
        state.assignments[tp[0]] = assignment
        if ongoing is None:
            self.reassigning.pop(tp, None)
        else:
            self.reassigning[tp] = ongoing

    def _stop_removed(self, tp: TP, removed: tuple[int, ...]) -> None:
        # A removed replica that is down gets no StopReplica: its broker deletes the log itself
        # when it starts again (reassignment Case R6), as Kafka 4's brokers do with stray replicas.
        for r in removed:
            if r in self._state().live_brokers:
                self._send_stop_replica(r, [tp], delete=True)

    def _check_reassignments(self, tps: Iterable[TP] | None = None) -> None:
        """Complete the reassignments (of ``tps``; all when None) whose target is in sync."""
        if not self.active:
            return
        for tp in sorted(set(self.reassigning) if tps is None else set(tps) & set(self.reassigning)):
            self._complete(tp)

    def _complete(self, tp: TP) -> None:
        state = self._state()
        ongoing = self.reassigning.get(tp)
        full = self._full(tp)
        if ongoing is None or full is None:
            return

        def decide() -> list[Change]:
            st = self._state()
            done = reassignment.completion(full, ongoing, st.states.get(tp), st.live_brokers, self.epoch)
            return [] if done is None else [Change(tp[0], tp[1], done[1], done[0].replicas)]

        changes = decide()
        if not changes:
            return
        plan = reassignment.Plan(changes[0].replicas, None, tuple(r for r in full if r not in changes[0].replicas))
        # (4) the state first, with the target as the replica set the brokers learn.
        self._set_replicas(tp, plan.replicas, ongoing)
        written = self._write(changes, decide)
        if not written:
            self._set_replicas(tp, full, ongoing)
            return
        self._announce(written)
        # (5) the removed replicas stop and delete their logs, (6) the znode forgets the move.
        self._stop_removed(tp, plan.stop)
        self.store.write_reassignment(tp[0], tp[1], plan.replicas, (), ())
        self.reassigning.pop(tp, None)
        self._send_update_metadata([tp], set(state.live_brokers))
        log.info("controller %d: %s-%d reassignment complete: replicas %s", self.broker_id, tp[0], tp[1], list(plan.replicas))

    # -- admin: move a leadership (tests, tools) ---------------------------------------------------------
    def move_leader(self, topic: str, partition: int, broker_id: int) -> Future[bool]:
        """Make ``broker_id`` (an ISR member) lead the partition; resolves to False if it is not
        an ISR member, not live, or this broker is not the controller."""
        fut: Future[bool] = Future()
        self._put(self._move_leader, (topic, partition), broker_id, fut)
        return fut

    def _move_leader(self, tp: TP, broker_id: int, fut: Future[bool]) -> None:
        try:
            if not self.active or tp not in self._state().states:
                fut.set_result(False)
                return

            def decide() -> list[Change]:
                state = self._state()
                cur = state.states[tp]
                if broker_id not in cur.isr or broker_id not in state.live_brokers:
                    return []
                if cur.leader == broker_id:
                    return []
                new = LeaderIsr(broker_id, cur.leader_epoch + 1, cur.isr, self.epoch)
                return [Change(tp[0], tp[1], new, state.assignments[tp[0]][tp[1]])]

            changes = decide()
            if not changes:
                fut.set_result(self._state().states[tp].leader == broker_id)
                return
            written = self._write(changes, decide)
            self._announce(written)
            fut.set_result(bool(written))
        except Exception as e:
            fut.set_exception(e)

    # -- helpers for topic creation -------------------------------------------------------------------
    @staticmethod
    def assign(brokers: Iterable[int], num_partitions: int, replication_factor: int) -> list[tuple[int, ...]]:
        """Kafka's assignment with a random start (spreads topics over brokers)."""
        ids = sorted(brokers)
        n = max(1, len(ids))
        return decisions.assign_replicas(ids, num_partitions, replication_factor, start_index=random.randrange(n), next_replica_shift=random.randrange(n))
