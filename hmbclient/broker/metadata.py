"""ClusterView: the brokers, topics and partition leaders one broker (or an in-process cluster)
knows about. It plays the part of Kafka's metadata cache plus the controller's leader choice.

Invariants: a partition's leader is an alive broker id or -1 (no leader: its broker is down);
``preferred`` remembers the assignment so a restarted broker takes its partitions back.
Leaders are spread round-robin over the alive brokers from a per-topic start (crc32 of the name)
so that topics do not all start on the same broker. Listeners hear about every change (the
ZooKeeper registration and the replica managers' purgatories subscribe).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["BrokerEndpoint", "ClusterView", "NO_LEADER"]

NO_LEADER = -1

Listener = Callable[[str, Any], None]


class BrokerEndpoint(NamedTuple):
    node_id: int
    host: str
    port: int


class ClusterView:
    """Shared, thread-safe cluster metadata.

    Args:
        cluster_id: reported in Metadata v2+.
    """

    def __init__(self, cluster_id: str = "hmb-embedded") -> None:
        self.cluster_id = cluster_id
        self._lock = threading.RLock()
        self._alive: dict[int, BrokerEndpoint] = {}
        self._known: set[int] = set()
        self._leaders: dict[str, list[int]] = {}
        self._preferred: dict[str, list[int]] = {}
        self._epochs: dict[tuple[str, int], int] = {}
        self._internal: set[str] = set()
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

    # -- brokers ----------------------------------------------------------------------------
    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        """A broker is up: it leads again the partitions assigned to it that have no leader."""
        changed: list[tuple[str, int]] = []
        with self._lock:
            self._alive[endpoint.node_id] = endpoint
            self._known.add(endpoint.node_id)
            for topic, pref in self._preferred.items():
                leaders = self._leaders[topic]
                for p, b in enumerate(pref):
                    if b == endpoint.node_id and leaders[p] == NO_LEADER:
                        leaders[p] = b
                        self._bump((topic, p))
                        changed.append((topic, p))
        self._emit("broker_up", endpoint.node_id)
        for tp in changed:
            self._emit("leader", tp)

    def deregister_broker(self, node_id: int) -> None:
        """A broker stopped: its partitions have no leader until it is back (one replica each)."""
        changed: list[tuple[str, int]] = []
        with self._lock:
            self._alive.pop(node_id, None)
            for topic, leaders in self._leaders.items():
                for p, b in enumerate(leaders):
                    if b == node_id:
                        leaders[p] = NO_LEADER
                        self._bump((topic, p))
                        changed.append((topic, p))
        self._emit("broker_down", node_id)
        for tp in changed:
            self._emit("leader", tp)

    def brokers(self) -> list[BrokerEndpoint]:
        with self._lock:
            return sorted(self._alive.values())

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return self._alive.get(node_id)

    def controller_id(self) -> int:
        with self._lock:
            return min(self._alive) if self._alive else NO_LEADER

    # -- topics -----------------------------------------------------------------------------
    def add_topic(self, topic: str, num_partitions: int, *, internal: bool = False, leaders: list[int] | None = None) -> bool:
        """Add a topic (spreading leaders unless given). Returns False if it already existed."""
        with self._lock:
            if topic in self._leaders:
                return False
            if leaders is None:
                ids = sorted(self._alive) or sorted(self._known) or [0]
                start = zlib.crc32(topic.encode()) % len(ids)
                leaders = [ids[(start + p) % len(ids)] for p in range(num_partitions)]
            self._preferred[topic] = list(leaders)
            self._leaders[topic] = [b if b in self._alive else NO_LEADER for b in leaders]
            for p in range(num_partitions):
                self._epochs[(topic, p)] = 0
            if internal:
                self._internal.add(topic)
        self._emit("topic", topic)
        return True

    def has_topic(self, topic: str) -> bool:
        return topic in self._leaders

    def is_internal(self, topic: str) -> bool:
        return topic in self._internal

    def num_partitions(self, topic: str) -> int | None:
        leaders = self._leaders.get(topic)
        return None if leaders is None else len(leaders)

    def leader(self, topic: str, partition: int) -> int | None:
        """Leader id, NO_LEADER, or None when the topic-partition does not exist."""
        leaders = self._leaders.get(topic)
        if leaders is None or not 0 <= partition < len(leaders):
            return None
        return leaders[partition]

    def leader_epoch(self, topic: str, partition: int) -> int:
        return self._epochs.get((topic, partition), 0)

    def topics(self) -> dict[str, list[int]]:
        """Snapshot: topic -> leader per partition."""
        with self._lock:
            return {t: list(ls) for t, ls in self._leaders.items()}

    def preferred(self, topic: str) -> list[int]:
        with self._lock:
            return list(self._preferred.get(topic, ()))

    def _bump(self, tp: tuple[str, int]) -> None:
        self._epochs[tp] = self._epochs.get(tp, 0) + 1

    def move_leader(self, topic: str, partition: int, node_id: int) -> None:
        """Make ``node_id`` lead the partition (it becomes its assigned broker too).

        Raises:
            KeyError: unknown topic-partition or broker.
        """
        with self._lock:
            leaders = self._leaders.get(topic)
            if leaders is None or not 0 <= partition < len(leaders):
                raise KeyError(f"unknown partition {topic}-{partition}")
            if node_id not in self._known:
                raise KeyError(f"unknown broker {node_id}")
            self._preferred[topic][partition] = node_id
            leaders[partition] = node_id if node_id in self._alive else NO_LEADER
            self._bump((topic, partition))
        self._emit("leader", (topic, partition))
