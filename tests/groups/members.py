"""Bare group members for the rebalance tests: one :class:`BrokerGroupMember` each, with its own
NetClient, Metadata and offset storage, and a listener that journals every assignment change
(``assign`` / ``revoke`` / ``lost``, with the partitions and ``time.monotonic()``) instead of
fetching, so a test reads who owned what, when, and whether it ever stopped owning it."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from hmbclient.consumer.group import BrokerGroupMember
from hmbclient.consumer.offsets import KafkaOffsetStorage
from hmbclient.net import Metadata, NetClient
from rebalance.rebalancer import Subscription

TopicPartition = tuple[str, int]


class Journal:
    """An OwnershipListener that records instead of consuming."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, float, tuple[TopicPartition, ...]]] = []
        self.owned: set[TopicPartition] = set()
        self._mark = 0

    def on_pause(self) -> None:
        pass

    def on_resume(self) -> None:
        pass

    def on_brokers_changed(self, brokers: Any) -> None:
        pass

    def on_revoke(self, partitions: Mapping[TopicPartition, str], commit: bool) -> None:
        with self.lock:
            self.events.append(("revoke" if commit else "lost", time.monotonic(), tuple(sorted(partitions))))
            self.owned -= set(partitions)

    def on_assign(self, partitions: Mapping[TopicPartition, str]) -> None:
        with self.lock:
            self.events.append(("assign", time.monotonic(), tuple(sorted(partitions))))
            self.owned |= set(partitions)

    def mark(self) -> None:
        """Start :meth:`taken_away`'s count now."""
        with self.lock:
            self._mark = len(self.events)

    def taken_away(self) -> set[TopicPartition]:
        """Every partition revoked or lost since :meth:`mark` (or the start)."""
        with self.lock:
            return {tp for kind, _, tps in self.events[self._mark :] if kind != "assign" for tp in tps}


class Member:
    """One group member on ``topic`` (``**options`` go to BrokerGroupMember)."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **options: Any) -> None:
        self.name = name
        self.journal = Journal()
        self.client = NetClient(bootstrap, client_id=name, request_timeout_ms=10_000, name=f"io-{name}")
        self.metadata = Metadata(self.client, allow_auto_topic_creation=False)
        storage = KafkaOffsetStorage(self.client, group)
        settings: dict[str, Any] = {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 300, "rebalance_timeout_ms": 15_000, "retry_backoff_ms": 50}
        settings.update(options)
        self.member = BrokerGroupMember(
            client=self.client, offsets=storage, group=group, consumer_id=name,
            subscription=Subscription(topic_counts={topic: 1}), listener=self.journal,
            metadata_partitions=self._partitions, **settings,
        )  # fmt: skip
        storage.generation = self.member.commit_generation

    def _partitions(self, topics: list[str] | None) -> dict[str, list[int]]:
        view = self.metadata.refresh(topics, timeout_ms=10_000)
        return {n: sorted(i.partitions) for n, i in view.topics.items() if (topics is None or n in topics) and i.partitions and not i.error_code}

    def start(self) -> Member:
        self.member.start()
        return self

    @property
    def generation(self) -> int:
        return self.member.generation_id

    def close(self) -> None:
        try:
            self.member.close()
        finally:
            self.client.close()
