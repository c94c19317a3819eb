"""Where a consumer group's offsets live: ZooKeeper, the broker's offset manager, or both.

Every store has ``fetch(partitions) -> {tp: next offset or None}`` and
``commit({tp: next offset})``; a commit returns only once the offsets are durable and raises
otherwise (the rebalance loop releases a partition only after its commit returned).

* :class:`ZooKeeperOffsetStorage` -- ``/consumers/<g>/offsets/<t>/<p>`` (``offsets.storage=zookeeper``,
  the 0.8 default), through :class:`rebalance.offsets.ZkOffsetStore`.
* :class:`KafkaOffsetStorage` -- OffsetCommit/OffsetFetch sent to the group coordinator found with
  FindCoordinator (GroupCoordinator in 0.8.2). COORDINATOR_LOAD_IN_PROGRESS is retried on the
  same broker; NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and lost connections make it look the
  coordinator up again (it moved); each through a tenacity policy with
  ``offsets_channel_backoff_ms`` and ``offsets_commit_max_retries``. A member of a
  broker-coordinated group commits with its generation and member id (``generation``), so the
  coordinator refuses commits of a member it has dropped (ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID: not retried, the partitions may already be someone else's).
* :class:`DualOffsetStorage` -- ``offsets.storage=kafka`` with ``dual.commit.enabled``: commits
  go to both; a fetch takes the larger of the two, so a group migrating from ZooKeeper to
  Kafka (or back) resumes where it was, as Kafka 0.8.2's documented offset migration (dual
  commit on, then ``offsets.storage=kafka``) expects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kazoo.client import KazooClient

from hmbclient.errors import (
    CoordinationError,
    ErrorCode,
    HmbError,
    KafkaConnectionError,
    RequestTimedOutError,
    for_code,
)
from hmbclient.net.client import NetClient
from hmbclient.net.retry import retry_policy
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey
from hmbclient.zkpaths import ZnodeDataError
from rebalance.offsets import ZkOffsetStore

__all__ = ["OffsetStorage", "ZooKeeperOffsetStorage", "KafkaOffsetStorage", "DualOffsetStorage"]

log = logging.getLogger("hmbclient.consumer")

TopicPartition = tuple[str, int]

# Error codes meaning "ask FindCoordinator again".
COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})

#: ``generation() -> (generation_id, member_id)`` of a broker-coordinated group member.
Generation = Callable[[], tuple[int, str]]


class OffsetStorage(Protocol):
    """A group's committed offsets (values are the next offset to consume)."""

    def fetch(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Committed offsets; None where nothing usable is committed."""

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Make ``offsets`` durable or raise."""


class ZooKeeperOffsetStorage:
    """Offsets in ZooKeeper (``offsets.storage=zookeeper``).

    Args:
        zk: the connector's KazooClient.
        group: the group id.
    """

    def __init__(self, zk: KazooClient, group: str) -> None:
        self.store = ZkOffsetStore(zk, group)

    def fetch(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        try:
            return self.store.fetch(partitions)
        except ZnodeDataError as exc:
            # A damaged offset znode is not "nothing committed": restarting the partition
            # from auto.offset.reset would silently skip or repeat messages.
            raise CoordinationError(f"group {self.store.group!r}: {exc}") from exc

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            self.store.commit(offsets)


class _CoordinatorMoved(HmbError):
    retriable = True


class KafkaOffsetStorage:
    """Offsets in the broker's offset manager (``offsets.storage=kafka``).

    Args:
        client: the connector's NetClient.
        group: the group id.
        max_retries: ``offsets_commit_max_retries``.
        backoff_ms: ``offsets_channel_backoff_ms``.
        timeout_ms: ``offsets_channel_socket_timeout_ms``.
        generation: ``() -> (generation_id, member_id)`` for commits of a broker-coordinated
            group member; None commits as a group without members (-1, "").
    """

    def __init__(
        self,
        client: NetClient,
        group: str,
        *,
        max_retries: int = 5,
        backoff_ms: int = 1000,
        timeout_ms: int = 10_000,
        generation: Generation | None = None,
    ) -> None:
        self.client = client
        self.group = group
        self.timeout_ms = timeout_ms
        self.generation = generation
        self._max_retries = max_retries
        self._backoff_ms = backoff_ms
        self._coordinator: int | None = None

    def _policy(self) -> Any:
        return retry_policy(
            max_retries=self._max_retries,
            backoff_ms=self._backoff_ms,
            backoff_max_ms=max(self._backoff_ms, 1) * 4,
        )

    def coordinator(self) -> int:
        """The coordinator's node id, looked up (and remembered) with FindCoordinator.

        Raises:
            BrokerError / KafkaConnectionError: no coordinator could be found.
        """
        if self._coordinator is not None:
            return self._coordinator

        def build(versions: BrokerVersions) -> Any:
            return versions.build(ApiKey.FIND_COORDINATOR, group_id=self.group, key=self.group, key_type=0)

        resp = self.client.call(self.client.least_loaded_node(), build, timeout_ms=self.timeout_ms)
        if resp.error_code:
            self._coordinator = None
            raise for_code(resp.error_code)(f"FindCoordinator for group {self.group!r}")
        self.client.update_brokers({resp.node_id: (resp.host, resp.port)})
        self._coordinator = int(resp.node_id)
        log.debug("group %s: coordinator is broker %s (%s:%s)", self.group, resp.node_id, resp.host, resp.port)
        return self._coordinator

    def forget_coordinator(self) -> None:
        """The coordinator moved or is gone: the next call looks it up again."""
        self._coordinator = None

    def _call(self, build: Any, what: str) -> Any:
        node = self.coordinator()
        try:
            return self.client.call(node, build, timeout_ms=self.timeout_ms)
        except (KafkaConnectionError, RequestTimedOutError):
            self._coordinator = None
            raise

    def _check(self, code: int, what: str) -> None:
        if not code:
            return
        if code in COORDINATOR_MOVED:
            self._coordinator = None
        raise for_code(code)(what)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """OffsetCommit to the coordinator, retried as the module docstring says.

        Raises:
            BrokerError / KafkaConnectionError: still failing after the retries.
        """
        if not offsets:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(
                {"partition": p, "offset": off, "timestamp": -1, "committed_leader_epoch": -1, "metadata": ""}
            )

        generation_id, member_id = self.generation() if self.generation is not None else (-1, "")

        def build(versions: BrokerVersions) -> Any:
            return versions.build(
                ApiKey.OFFSET_COMMIT,
                group_id=self.group,
                generation_id=generation_id,
                member_id=member_id,
                retention_time_ms=-1,
                group_instance_id=None,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            )

        def once() -> None:
            resp = self._call(build, "OffsetCommit")
            for t in resp.topics:
                for p in t.partitions:
                    self._check(p.error_code, f"OffsetCommit {self.group}/{t.topic}-{p.partition}")

        self._policy()(once)

    def fetch(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """OffsetFetch from the coordinator (None for partitions without a commit)."""
        wanted = sorted(set(partitions))
        out: dict[TopicPartition, int | None] = {tp: None for tp in wanted}
        if not wanted:
            return out
        by_topic: dict[str, list[int]] = {}
        for t, p in wanted:
            by_topic.setdefault(t, []).append(p)

        def build(versions: BrokerVersions) -> Any:
            return versions.build(
                ApiKey.OFFSET_FETCH,
                group_id=self.group,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            )

        def once() -> None:
            resp = self._call(build, "OffsetFetch")
            self._check(getattr(resp, "error_code", 0), f"OffsetFetch {self.group}")
            for t in resp.topics:
                for p in t.partitions:
                    tp = (t.topic, p.partition)
                    if p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # 0.8.2's "nothing committed"
                        out[tp] = None
                        continue
                    self._check(p.error_code, f"OffsetFetch {self.group}/{t.topic}-{p.partition}")
                    out[tp] = int(p.offset) if p.offset >= 0 else None

        self._policy()(once)
        return out


class DualOffsetStorage:
    """Commit to both stores; fetch the larger offset (``dual.commit.enabled``)."""

    def __init__(self, primary: OffsetStorage, secondary: OffsetStorage) -> None:
        self.primary = primary
        self.secondary = secondary

    def fetch(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        parts = list(partitions)
        a = self.primary.fetch(parts)
        b = self.secondary.fetch(parts)
        out: dict[TopicPartition, int | None] = {}
        for tp in parts:
            x, y = a.get(tp), b.get(tp)
            out[tp] = y if x is None else x if y is None else max(x, y)
        return out

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.primary.commit(offsets)
        try:
            self.secondary.commit(offsets)
        except Exception as exc:
            raise CoordinationError(f"dual commit: second store failed: {exc}") from exc
