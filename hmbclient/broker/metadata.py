"""MetadataCache: what one broker knows of the cluster, as the controller last told it.

Kafka's ``MetadataCache``: the live brokers, the controller, and every partition's leader,
leader epoch, ISR and replicas. The controller sends it with UpdateMetadata after every change
(a broker joins or dies, a topic is created, a leader or an ISR changes); in a standalone broker
the local controller applies the same updates by a direct call. Metadata answers are built
from here only, so every broker of a cluster answers alike, consistent with ZooKeeper.

Invariants: a partition is known once the controller has decided its first state; its
``leader`` is a broker id or ``NO_LEADER`` (-1: offline); ``controller_epoch`` only grows (an
update from an older controller epoch is refused by the request handler before it gets here).
A partition state whose leader is ``LEADER_DURING_DELETE`` (-2, Kafka's LeaderDuringDelete)
removes the partition (its topic is being deleted); a topic left without partitions is gone.
Listeners hear ``("topic", name)`` for every topic an update touched (waits for a topic to be
ready complete on that) and ``("brokers", None)`` when the live set changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

__all__ = ["BrokerEndpoint", "PartitionMeta", "MetadataCache", "NO_LEADER", "LEADER_DURING_DELETE", "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC", "is_internal_topic"]

NO_LEADER = -1
LEADER_DURING_DELETE = -2
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"

Listener = Callable[[str, Any], None]


def is_internal_topic(topic: str) -> bool:
    """Kafka's internal topics (clients may not produce to them)."""
    return topic == OFFSETS_TOPIC or topic == TRANSACTION_STATE_TOPIC


class BrokerEndpoint(NamedTuple):
    """A broker: ``host``/``port`` is where the other brokers reach it (its inter-broker
    listener); ``listeners`` its advertised ``(name, host, port)`` per listener, empty when only
    that one address is known (a registration of Kafka 0.8's form)."""

    node_id: int
    host: str
    port: int
    listeners: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """Where a client on ``listener`` reaches this broker: None when the broker has no such
        listener (Kafka then leaves it out of the answer); ``listener`` None (a request from
        inside the broker) or no listeners known: the inter-broker address."""
        if listener is None or not self.listeners:
            return self.host, self.port
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        return None


class PartitionMeta(NamedTuple):
    """One partition's state as the controller decided it (the state znode plus replicas)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int = 0
    controller_epoch: int = 0

    def offline_replicas(self, live: Iterable[int]) -> list[int]:
        alive = set(live)
        return [r for r in self.replicas if r not in alive]


class MetadataCache:
    """Thread-safe cluster metadata of one broker.

    Args:
        cluster_id: reported in Metadata v2+.
    """

    def __init__(self, cluster_id: str = "hmb-embedded") -> None:
        self.cluster_id = cluster_id
        self._lock = threading.RLock()
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._controller_id = NO_LEADER
        self.controller_epoch = 0
        # topic -> partition -> meta; partitions are dense 0..n-1 once the topic is complete
        self._topics: dict[str, dict[int, PartitionMeta]] = {}
        # topic -> is_ready, computed on first ask and forgotten on every change: a Produce asks
        # once per topic per request, and the walk over 1,000 partitions costs more than the
        # append of a small batch to each of ten.
        self._ready: dict[str, bool] = {}
        self._listeners: list[Listener] = []

    # -- listeners --------------------------------------------------------------------------
    def add_listener(self, fn: Listener) -> None:
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Listener) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _emit(self, event: str, arg: Any) -> None:
        for fn in list(self._listeners):
            fn(event, arg)

    # -- updates (from UpdateMetadata) --------------------------------------------------------
    def update(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: Iterable[BrokerEndpoint],
        states: Iterable[tuple[str, int, PartitionMeta]],
    ) -> None:
        """Apply one UpdateMetadata: the live brokers are replaced, partition states upserted."""
        touched: set[str] = set()
        with self._lock:
            new_brokers = {b.node_id: b for b in brokers}
            brokers_changed = new_brokers != self._brokers
            self._brokers = new_brokers
            self._controller_id = controller_id
            self.controller_epoch = max(self.controller_epoch, controller_epoch)
            for topic, partition, meta in states:
                touched.add(topic)
                if meta.leader == LEADER_DURING_DELETE:
                    parts = self._topics.get(topic)
                    if parts is not None:
                        parts.pop(partition, None)
                        if not parts:
                            del self._topics[topic]
                    continue
                self._topics.setdefault(topic, {})[partition] = meta
            self._ready = {}
        if brokers_changed:
            self._emit("brokers", None)
        for topic in sorted(touched):
            self._emit("topic", topic)

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)
            self._ready = {}
        self._emit("topic", topic)

    # -- brokers ----------------------------------------------------------------------------
    def brokers(self) -> list[BrokerEndpoint]:
        with self._lock:
            return sorted(self._brokers.values())

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self._brokers.get(node_id)

    def live_broker_ids(self) -> set[int]:
        with self._lock:
            return set(self._brokers)

    def controller_id(self) -> int:
        return self._controller_id

    # -- topics -----------------------------------------------------------------------------
    def has_topic(self, topic: str) -> bool:
        return topic in self._topics

    def is_internal(self, topic: str) -> bool:
        return is_internal_topic(topic)

    def num_partitions(self, topic: str) -> int | None:
        parts = self._topics.get(topic)
        return None if parts is None else len(parts)

    def partition(self, topic: str, partition: int) -> PartitionMeta | None:
        parts = self._topics.get(topic)
        return None if parts is None else parts.get(partition)

    def leader(self, topic: str, partition: int) -> int | None:
        """Leader id, NO_LEADER, or None when the topic-partition is not known."""
        meta = self.partition(topic, partition)
        return None if meta is None else meta.leader

    def leader_epoch(self, topic: str, partition: int) -> int:
        meta = self.partition(topic, partition)
        return -1 if meta is None else meta.leader_epoch

    def topic_partitions(self, topic: str) -> list[PartitionMeta]:
        """The partitions of ``topic`` in order (empty if unknown)."""
        with self._lock:
            parts = self._topics.get(topic, {})
            return [parts[p] for p in sorted(parts)]

    def topics(self) -> dict[str, list[int]]:
        """Snapshot: topic -> leader per partition."""
        with self._lock:
            return {t: [parts[p].leader for p in sorted(parts)] for t, parts in self._topics.items()}

    def is_ready(self, topic: str) -> bool:
        """The topic is known and every partition has a live leader."""
        ready = self._ready.get(topic)
        if ready is not None:
            return ready
        with self._lock:
            parts = self._topics.get(topic)
            # Unknown topics are not cached: they may be asked for under every possible name.
            if not parts:
                return False
            ready = all(m.leader != NO_LEADER and m.leader in self._brokers for m in parts.values())
            self._ready[topic] = ready
            return ready
