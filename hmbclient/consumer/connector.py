"""The high-level consumer: ``Consumer.create(config) -> ConsumerConnector``, Kafka 0.8's
``kafka.consumer.Consumer`` and ``ZookeeperConsumerConnector`` (group membership and partition
ownership in ZooKeeper, streams per consuming thread), or the same front over a group balanced
by the brokers' group coordinator (``group.coordination=broker``, alias ``group.protocol=broker``: Kafka 0.9+, Kafka 4, Tansu).

Usage::

    connector = Consumer.create({"zookeeper.connect": zk, "group.id": "billing",
                                 "auto.offset.reset": "smallest", "consumer.timeout.ms": 5000})
    # or, without ZooKeeper: {"bootstrap.servers": "h:9092", "group.id": "billing", ...}
    streams = connector.create_message_streams({"events": 2}, value_decoder=StringDecoder())
    for message_and_metadata in streams["events"][0]:
        handle(message_and_metadata.message)
    connector.shutdown()

Pieces: the group membership -- a :class:`rebalance.rebalancer.ZkRebalancer` (ZooKeeper:
membership, ownership, the rebalance loop) or a :class:`.group.BrokerGroupMember` (the
coordinator: JoinGroup, SyncGroup, Heartbeat, with a NetClient of its own) --, a
:class:`~hmbclient.net.NetClient` with :class:`~hmbclient.net.Metadata`, a
:class:`.fetcher.FetcherManager` (one fetcher thread per leader broker), one
:class:`.stream.KafkaStream` per consuming thread, an offset store (:mod:`.offsets`; always the
coordinator in broker mode, committing with the member's generation) and an auto-commit
thread. The connector is the membership's :class:`OwnershipListener` either way, so fetching,
hand-out and commits are one code path.

Invariant: a partition's messages are handed out only by its current owner, and its offsets
are committed before its ownership is released (broker mode: before the member rejoins). The connector's part: ``on_revoke`` first
stops hand-out (under each stream's lock), then commits exactly the handed-out positions
under ``_commit_lock`` -- the same lock ``commit_offsets`` (auto or manual) holds, so a
periodic commit can never write an older position after the final one -- and raises if the
commit failed, which keeps the rebalancer from releasing the owner node.

Life cycle: nothing connects until ``create_message_streams``. A registration (a ZooKeeper
node, or a JoinGroup) holds one subscription, so each further ``create_message_streams[_by_filter]`` call on the same
connector joins the group as one more member (``<consumer_id>-s<k>``) that this connector
commits, awaits and shuts down with itself (Kafka 0.8 refuses a second call; this is what a
second connector would do). ``shutdown`` stops the loop, revokes with a final commit, releases the owner
nodes, removes the registration, closes the ZooKeeper session and the broker connections,
and ends every stream's iteration.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from hmbclient.clock import monotonic_ms
from hmbclient.consumer.config import ConsumerConfig, isolation_code
from hmbclient.errors import ConfigError, CoordinationError, HmbError
from hmbclient.metrics import Metrics
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.security import Security
from hmbclient.zkpaths import make_consumer_id
from rebalance.filters import Blacklist, TopicFilter, Whitelist
from rebalance.rebalancer import Subscription, ZkRebalancer
from rebalance.registry import BrokerInfo, TopicPartition, thread_index

from .fetcher import FetcherManager
from .group import BrokerGroupMember
from .metrics import ConsumerMetrics
from .offsets import DualOffsetStorage, KafkaOffsetStorage, OffsetStorage, ZooKeeperOffsetStorage
from .stream import KafkaStream, MessageAndMetadata, PartitionTopicInfo

__all__ = [
    "Consumer",
    "ConsumerConnector",
    "ConsumerRebalanceListener",
    "ConsumerEvent",
    "KafkaStream",
    "MessageAndMetadata",
    "TopicFilter",
    "Whitelist",
    "Blacklist",
]

log = logging.getLogger("hmbclient.consumer")


class ConsumerRebalanceListener(Protocol):
    """Callbacks around ownership changes (called on the rebalance thread; keep them short).

    ``on_partitions_revoked`` runs after the partitions stopped being handed out and before
    their offsets are committed and their ownership released; ``on_partitions_assigned`` runs
    once they are owned and about to be fetched.
    """

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None: ...

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...


class ConsumerEvent(NamedTuple):
    """A status event: ``kind`` such as ``registered``, ``rebalance_started``,
    ``rebalance_completed``, ``partitions_revoked``, ``partitions_assigned``,
    ``claim_conflict``, ``rebalance_incomplete``, ``rebalance_failed``,
    ``zookeeper_suspended``, ``zookeeper_connected``, ``zookeeper_lost``, ``committed``,
    ``commit_failed``, ``closed``; in broker mode also ``coordinator_found``,
    ``coordinator_lost``, ``joined`` (generation, member id, leader), ``fenced`` (dropped by the
    coordinator: partitions revoked without a commit) and ``left``; ``fields`` carries the
    details."""

    kind: str
    consumer_id: str
    fields: Mapping[str, Any]


StatusListener = Callable[[ConsumerEvent], None]

_CONNECTOR_ONLY = ("rebalance_listener", "status_listener")


class Consumer:
    """Factory for high-level consumers (Kafka's ``kafka.consumer.Consumer``)."""

    @staticmethod
    def create(
        config: ConsumerConfig | Mapping[str, Any] | None = None,
        /,
        *,
        rebalance_listener: ConsumerRebalanceListener | None = None,
        status_listener: StatusListener | None = None,
        **settings: Any,
    ) -> ConsumerConnector:
        """Create a ConsumerConnector.

        Args:
            config: a ConsumerConfig, or a dict of Kafka property names
                (``{"zookeeper.connect": ..., "group.id": ...}``); or None and keyword settings.
            rebalance_listener: optional revoked/assigned callbacks.
            status_listener: optional ``fn(ConsumerEvent)``.
            **settings: ConsumerConfig settings (any spelling); they override ``config``.

        Returns:
            The connector (nothing connects until streams are created).

        Raises:
            ConfigError: unknown keys or invalid values.
        """
        if isinstance(config, ConsumerConfig):
            cfg = config.replace(**settings) if settings else config
        elif config is None:
            cfg = ConsumerConfig.from_properties(settings)
        elif isinstance(config, Mapping):
            cfg = ConsumerConfig.from_properties(config, **settings)
        else:
            raise ConfigError(
                f"Consumer.create expects a ConsumerConfig or a mapping, not {type(config).__name__}"
            )
        return ConsumerConnector(
            cfg, rebalance_listener=rebalance_listener, status_listener=status_listener
        )


class ConsumerConnector:
    """A member of a consumer group, balanced through ZooKeeper or the brokers' coordinator
    (``group.coordination``). Create it with :meth:`Consumer.create`.

    Args:
        config: the consumer configuration.
        rebalance_listener: optional revoked/assigned callbacks.
        status_listener: optional ``fn(ConsumerEvent)``.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        rebalance_listener: ConsumerRebalanceListener | None = None,
        status_listener: StatusListener | None = None,
    ) -> None:
        self.config = config
        self.group = config.group_id
        self.consumer_id = config.consumer_id or make_consumer_id(config.group_id)
        self._rebalance_listener = rebalance_listener
        self._status_listeners: list[StatusListener] = [status_listener] if status_listener else []
        self._lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._rebalancer: ZkRebalancer | BrokerGroupMember | None = None
        self._client: NetClient | None = None
        # Broker mode: the coordinator's own client (a JoinGroup must not hold up fetches).
        self._group_client: NetClient | None = None
        self._metadata: Metadata | None = None
        self._fetchers: FetcherManager | None = None
        self._storage: OffsetStorage | None = None
        self._streams_by_topic: dict[str, list[KafkaStream]] = {}
        self._filter_streams: list[KafkaStream] | None = None
        self._all_streams: list[KafkaStream] = []
        self._ptis: dict[TopicPartition, PartitionTopicInfo] = {}
        # Final positions of partitions taken away whose commit has not succeeded yet.
        self._pending: dict[TopicPartition, int] = {}
        self._paused = False
        self._shutdown = False
        self._auto_commit_stop = threading.Event()
        # Further subscriptions, each a member of its own (see _add_member).
        self._members: list[ConsumerConnector] = []
        self._auto_commit_thread: threading.Thread | None = None
        self._metrics = ConsumerMetrics(Metrics(tags={"client-id": config.client_id or ""}))
        self._metrics.watch_lag(lambda: [(pti.high_watermark, pti.consumed) for pti in list(self._ptis.values())])

    # ------------------------------------------------------------------ public API

    def create_message_streams(
        self,
        topic_count_map: Mapping[str, int],
        key_decoder: Any = None,
        value_decoder: Any = None,
    ) -> dict[str, list[KafkaStream]]:
        """Subscribe to topics with a number of streams each and join the group.

        Args:
            topic_count_map: ``{topic: number of streams}``.
            key_decoder: an ``encoders`` Decoder for keys (default: bytes as stored).
            value_decoder: an ``encoders`` Decoder for values (default: bytes as stored).

        Returns:
            ``{topic: [KafkaStream, ...]}``.

        Raises:
            ConfigError: bad counts or topic names, or the connector was shut down.
            CoordinationError: ZooKeeper could not be reached.
        """
        try:
            subscription = Subscription(topic_counts=dict(topic_count_map))
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc)) from None
        with self._lock:
            if self._needs_member():
                member = self._add_member()
                try:
                    return member.create_message_streams(topic_count_map, key_decoder, value_decoder)
                except BaseException:
                    self._drop_member(member)
                    raise
            streams = {
                topic: [self._new_stream(f"{topic}-{i}", key_decoder, value_decoder) for i in range(n)]
                for topic, n in subscription.topic_counts.items()  # type: ignore[union-attr]
            }
            self._streams_by_topic = streams
            self._start_or_reset(subscription)
            return {t: list(s) for t, s in streams.items()}

    def create_message_streams_by_filter(
        self,
        topic_filter: TopicFilter,
        num_streams: int = 1,
        key_decoder: Any = None,
        value_decoder: Any = None,
    ) -> list[KafkaStream]:
        """Subscribe to every topic a Whitelist/Blacklist allows, now and later.

        Args:
            topic_filter: ``Whitelist(regex)`` or ``Blacklist(regex)``.
            num_streams: streams shared by all matching topics.
            key_decoder: an ``encoders`` Decoder for keys.
            value_decoder: an ``encoders`` Decoder for values.

        Returns:
            The streams; each may carry messages of several topics.

        Raises:
            ConfigError: bad arguments, or the connector was shut down.
            CoordinationError: ZooKeeper could not be reached.
        """
        if not isinstance(topic_filter, TopicFilter):
            raise ConfigError(f"expected a Whitelist or Blacklist, got {topic_filter!r}")
        try:
            subscription = Subscription(topic_filter=topic_filter, num_streams=num_streams)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc)) from None
        with self._lock:
            if self._needs_member():
                member = self._add_member()
                try:
                    return member.create_message_streams_by_filter(
                        topic_filter, num_streams, key_decoder, value_decoder
                    )
                except BaseException:
                    self._drop_member(member)
                    raise
            streams = [
                self._new_stream(f"{topic_filter.regex}-{i}", key_decoder, value_decoder)
                for i in range(num_streams)
            ]
            self._filter_streams = streams
            self._start_or_reset(subscription)
            return list(streams)

    def commit_offsets(self) -> None:
        """Commit the position of every owned partition (what has been handed out).

        Raises:
            HmbError: the store refused the commit (or ZooKeeper did, with a kazoo error);
                nothing is lost: the next commit writes the same or a later position.
        """
        for member in list(self._members):
            member.commit_offsets()
        storage = self._storage
        if storage is None:
            return
        with self._commit_lock:
            offsets: dict[TopicPartition, int] = {}
            for tp, pti in list(self._ptis.items()):
                position = pti.consumed
                if position is not None and position != pti.committed and not pti.revoked:
                    offsets[tp] = position
            if not offsets:
                return
            started = monotonic_ms()
            try:
                storage.commit(offsets)
            except Exception as exc:
                self._emit("commit_failed", error=repr(exc), partitions=len(offsets))
                raise
            self._metrics.committed(monotonic_ms() - started)
            for tp, offset in offsets.items():
                done = self._ptis.get(tp)
                if done is not None:
                    done.committed = offset
            self._emit("committed", partitions=len(offsets))

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind :meth:`metrics` (tag ``client-id``): what the exporters of
        :mod:`hmbclient.metrics_exporters` read."""
        return self._metrics.registry

    def metrics(self) -> dict[str, dict[str, float]]:
        """The consumer's metrics under Kafka's names: ``{"consumer-fetch-manager-metrics":
        {name: value}, "consumer-coordinator-metrics": {...}}`` (see
        :mod:`hmbclient.consumer.metrics`); the same shape as ``Producer.metrics()``. Covers
        this connector's own subscription (a further subscription's member keeps its own).

        Returns:
            ``{group: {name: value}}``.
        """
        return self._metrics.snapshot()

    def await_rebalance(self, timeout: float | None = None) -> bool:
        """Wait until this member owns its share of the current group and fetches it.

        Args:
            timeout: seconds (None: forever).

        Returns:
            True when settled, False on timeout (or before streams were created).
        """
        rebalancer = self._rebalancer
        if rebalancer is None:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        if not rebalancer.await_rebalance(timeout):
            return False
        for member in list(self._members):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not member.await_rebalance(left):
                return False
        return True

    def owned_partitions(self) -> dict[TopicPartition, str]:
        """Partitions this connector currently owns (``tp -> thread id``)."""
        rebalancer = self._rebalancer
        out = dict(rebalancer.owned) if rebalancer is not None else {}
        for member in list(self._members):
            out.update(member.owned_partitions())
        return out

    def set_rebalance_listener(self, listener: ConsumerRebalanceListener | None) -> None:
        """Set (or clear) the revoked/assigned callbacks (Java's setConsumerRebalanceListener)."""
        self._rebalance_listener = listener
        for member in list(self._members):
            member.set_rebalance_listener(listener)

    def add_status_listener(self, listener: StatusListener) -> None:
        """Receive :class:`ConsumerEvent` status events (called on internal threads)."""
        self._status_listeners = [*self._status_listeners, listener]

    def shutdown(self) -> None:
        """Stop consuming: commit what was handed out, release ownership, leave the group.

        Idempotent. Streams end their iteration (StopIteration).
        """
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
        for member in list(self._members):
            member.shutdown()
        self._auto_commit_stop.set()
        if self._auto_commit_thread is not None:
            self._auto_commit_thread.join(10)
        try:
            if self._rebalancer is not None:
                self._rebalancer.close(release=True)
        finally:
            if self._fetchers is not None:
                self._fetchers.close()
            for stream in self._all_streams:
                stream.close()
            if self._client is not None:
                self._client.close()
            if self._group_client is not None:
                self._group_client.close()

    def __enter__(self) -> ConsumerConnector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ set-up

    def _needs_member(self) -> bool:
        if self._shutdown:
            raise ConfigError("this ConsumerConnector has been shut down")
        return self._rebalancer is not None

    def _add_member(self) -> ConsumerConnector:
        # A ZooKeeper registration holds one subscription (static counts *or* one filter), so
        # a further subscription joins the group as another member, "<consumer_id>-s<k>",
        # whose life cycle (commit, await, shutdown) this connector drives. Kafka 0.8 refuses
        # a second call instead; this is what a second connector would do, made implicit.
        member = ConsumerConnector(
            self.config.replace(consumer_id=f"{self.consumer_id}-s{len(self._members) + 1}"),
            rebalance_listener=self._rebalance_listener,
            status_listener=self._forward_status,
        )
        self._members.append(member)
        return member

    def _drop_member(self, member: ConsumerConnector) -> None:
        self._members.remove(member)
        member.shutdown()

    def _forward_status(self, event: ConsumerEvent) -> None:
        for listener in self._status_listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001
                log.exception("status listener failed on %s", event.kind)

    def _new_stream(self, name: str, key_decoder: Any, value_decoder: Any) -> KafkaStream:
        stream = KafkaStream(
            name,
            queued_max_chunks=self.config.queued_max_message_chunks,
            consumer_timeout_ms=self.config.consumer_timeout_ms,
            key_decoder=key_decoder,
            value_decoder=value_decoder,
        )
        self._all_streams.append(stream)
        return stream

    def _start_or_reset(self, subscription: Subscription) -> None:
        # A failed start (ZooKeeper unreachable, no brokers) leaves the connector as it was,
        # so the caller may fix the cause and create streams again.
        try:
            self._start(subscription)
        except BaseException:
            self._stop_parts()
            if self._rebalancer is not None:
                self._rebalancer.close(release=False)
            self._rebalancer = None
            self._streams_by_topic, self._filter_streams, self._all_streams = {}, None, []
            raise

    def _stop_parts(self) -> None:
        if self._fetchers is not None:
            self._fetchers.close()
            self._fetchers = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._group_client is not None:
            self._group_client.close()
            self._group_client = None
        self._metadata = None
        self._storage = None

    def _start(self, subscription: Subscription) -> None:
        if self.config.group_coordination == "broker":
            self._start_broker_group(subscription)
        else:
            self._start_zookeeper_group(subscription)
        if self.config.auto_commit_enable:
            self._auto_commit_thread = threading.Thread(
                target=self._auto_commit, name=f"hmb-autocommit-{self.group}", daemon=True
            )
            self._auto_commit_thread.start()

    def _start_broker_group(self, subscription: Subscription) -> None:
        # The fetch side first, then the coordinator's client, offsets and membership; start()
        # returns once the coordinator has our JoinGroup (or raises).
        cfg = self.config
        self._client = self._new_client(None)
        self._metadata = Metadata(self._client, allow_auto_topic_creation=False)
        self._fetchers = self._new_fetchers(self._client, self._metadata)
        group_client = self._group_client = NetClient(
            list(cfg.metadata_broker_list),
            client_id=cfg.client_id,
            api_version=cfg.api_version,
            request_timeout_ms=cfg.socket_timeout_ms,
            security=Security.from_config(cfg),  # the coordinator's connections are secured too
            name=f"hmb-group-io-{self.group}",
        )
        storage = KafkaOffsetStorage(
            group_client,
            self.group,
            max_retries=cfg.offsets_commit_max_retries,
            backoff_ms=cfg.offsets_channel_backoff_ms,
            timeout_ms=cfg.offsets_channel_socket_timeout_ms,
        )
        member = BrokerGroupMember(
            client=group_client,
            offsets=storage,
            group=self.group,
            consumer_id=self.consumer_id,
            subscription=subscription,
            listener=self,
            metadata_partitions=self._metadata_partitions,
            assignor=cfg.partition_assignment_strategy,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            rebalance_timeout_ms=cfg.max_poll_interval_ms,
            request_timeout_ms=cfg.socket_timeout_ms,
            retry_backoff_ms=cfg.rebalance_backoff_ms,
            exclude_internal_topics=cfg.exclude_internal_topics,
            status=self._on_status,
        )
        storage.generation = member.commit_generation
        self._storage = storage
        self._rebalancer = member
        try:
            member.start()
        except CoordinationError:
            raise
        except HmbError as exc:  # refused for good: an invalid group id, no group APIs...
            raise CoordinationError(f"cannot join group {self.group!r} through the brokers: {exc}") from exc

    def _start_zookeeper_group(self, subscription: Subscription) -> None:
        # ZooKeeper first (it may name the brokers), then the broker side, then join the group.
        cfg = self.config
        rebalancer = self._new_rebalancer(subscription)
        self._rebalancer = rebalancer
        try:
            rebalancer.connect()
            brokers = rebalancer.registry.brokers()
        except (KazooException, KazooTimeoutError) as exc:
            raise CoordinationError(
                f"cannot reach ZooKeeper at {cfg.zookeeper_connect!r}: {type(exc).__name__}: {exc}"
            ) from exc
        self._client = self._new_client(brokers)
        self._metadata = Metadata(self._client, allow_auto_topic_creation=False)
        self._fetchers = self._new_fetchers(self._client, self._metadata)
        self._storage = self._new_offset_storage(rebalancer, self._client)
        try:
            rebalancer.start()
        except (KazooException, KazooTimeoutError) as exc:
            raise CoordinationError(f"cannot register in group {self.group!r}: {exc}") from exc

    def _new_fetchers(self, client: NetClient, metadata: Metadata) -> FetcherManager:
        cfg = self.config
        return FetcherManager(
            client,
            metadata,
            fetch_max_bytes=cfg.fetch_message_max_bytes,
            min_bytes=cfg.fetch_min_bytes,
            max_wait_ms=cfg.fetch_wait_max_ms,
            auto_offset_reset=cfg.auto_offset_reset,
            isolation_level=isolation_code(cfg.isolation_level),
            refresh_leader_backoff_ms=cfg.refresh_leader_backoff_ms,
            request_timeout_ms=cfg.socket_timeout_ms,
            metrics=self._metrics,
        )

    def _new_rebalancer(self, subscription: Subscription) -> ZkRebalancer:
        cfg = self.config
        assert cfg.zookeeper_connect is not None  # ConsumerConfig requires it for this protocol
        return ZkRebalancer(
            zookeeper_connect=cfg.zookeeper_connect,
            group=self.group,
            consumer_id=self.consumer_id,
            subscription=subscription,
            listener=self,
            assignor=cfg.partition_assignment_strategy,
            session_timeout_ms=cfg.zookeeper_session_timeout_ms,
            connection_timeout_ms=cfg.zookeeper_connection_timeout_ms,
            rebalance_backoff_ms=cfg.rebalance_backoff_ms,
            rebalance_max_retries=cfg.rebalance_max_retries,
            exclude_internal_topics=cfg.exclude_internal_topics,
            metadata_partitions=self._metadata_partitions if cfg.metadata_broker_list else None,
            status=self._on_status,
        )

    def _new_client(self, brokers: list[BrokerInfo] | None) -> NetClient:
        # Bootstrap from metadata.broker.list, else from the brokers registered in ZooKeeper.
        cfg = self.config
        bootstrap: Any = list(cfg.metadata_broker_list)
        if not bootstrap:
            if not brokers:
                raise ConfigError(
                    "no brokers registered in ZooKeeper under /brokers/ids and no "
                    "metadata.broker.list: set metadata_broker_list for brokers that do not "
                    "register in ZooKeeper (Tansu, HMB)"
                )
            bootstrap = [(broker.host, broker.port) for broker in brokers]
        return NetClient(
            bootstrap,
            client_id=cfg.client_id,
            api_version=cfg.api_version,
            request_timeout_ms=cfg.socket_timeout_ms,
            receive_buffer_bytes=cfg.socket_receive_buffer_bytes if cfg.socket_receive_buffer_bytes > 0 else None,
            security=Security.from_config(cfg),
            name=f"hmb-consumer-io-{self.group}",
        )

    def _new_offset_storage(self, rebalancer: ZkRebalancer, client: NetClient) -> OffsetStorage:
        # offsets.storage=zookeeper (default) or kafka, the latter optionally dual-committing
        # to ZooKeeper too while a group migrates.
        cfg = self.config
        zk_storage = ZooKeeperOffsetStorage(rebalancer.zk, self.group)
        if cfg.offsets_storage != "kafka":
            return zk_storage
        kafka = KafkaOffsetStorage(
            client,
            self.group,
            max_retries=cfg.offsets_commit_max_retries,
            backoff_ms=cfg.offsets_channel_backoff_ms,
            timeout_ms=cfg.offsets_channel_socket_timeout_ms,
        )
        return DualOffsetStorage(kafka, zk_storage) if cfg.dual_commit_enabled else kafka

    def _metadata_partitions(self, topics: list[str] | None) -> Mapping[str, list[int]]:
        # Partition discovery for brokers that are not in ZooKeeper (Tansu, HMB): Metadata API.
        metadata = self._metadata
        if metadata is None:
            raise CoordinationError("metadata is not available yet")
        view = metadata.refresh(topics, timeout_ms=self.config.socket_timeout_ms)
        out: dict[str, list[int]] = {}
        for name, info in view.topics.items():
            if topics is not None and name not in topics:
                continue
            if info.partitions and not info.error_code:
                out[name] = sorted(info.partitions)
        return out

    def _auto_commit(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000.0
        while not self._auto_commit_stop.wait(interval):
            try:
                self.commit_offsets()
            except Exception as exc:  # noqa: BLE001 - the next period tries again
                log.warning("auto commit for %s failed: %s", self.consumer_id, exc)

    # ------------------------------------------------------------------ OwnershipListener

    def _stream_for(self, tp: TopicPartition, tid: str) -> KafkaStream:
        index = thread_index(self.consumer_id, tid)
        if index is None:
            raise CoordinationError(f"thread id {tid!r} is not one of {self.consumer_id}'s")
        if self._filter_streams is not None:
            return self._filter_streams[index]
        return self._streams_by_topic[tp[0]][index]

    def on_pause(self) -> None:
        self._paused = True
        for stream in self._all_streams:
            stream.set_paused(True)

    def on_resume(self) -> None:
        self._paused = False
        for stream in self._all_streams:
            stream.set_paused(False)

    def on_revoke(self, partitions: Mapping[TopicPartition, str], commit: bool) -> None:
        # 1. Stop hand-out: after _revoke returns, not one more message of tp leaves its stream.
        stopped: list[TopicPartition] = []
        for tp in partitions:
            pti = self._ptis.pop(tp, None)
            if pti is None:
                continue
            position = pti.stream.revoke(pti)
            stopped.append(tp)
            if position is not None and position != pti.committed:
                self._pending[tp] = position
        if self._fetchers is not None:
            self._fetchers.remove(partitions)
        if stopped and self._rebalance_listener is not None:
            try:
                self._rebalance_listener.on_partitions_revoked(sorted(stopped))
            except Exception:  # noqa: BLE001 - user code must not break the rebalance
                log.exception("on_partitions_revoked raised")
        # 2. Commit exactly what was handed out, before the rebalancer releases ownership.
        todo = {tp: self._pending[tp] for tp in partitions if tp in self._pending}
        if not commit:
            for tp in todo:
                self._pending.pop(tp, None)
            return
        if not todo or self._storage is None:
            return
        with self._commit_lock:
            started = monotonic_ms()
            try:
                self._storage.commit(todo)
                self._metrics.committed(monotonic_ms() - started)
            except Exception as exc:
                self._emit("commit_failed", error=repr(exc), partitions=len(todo))
                raise CoordinationError(
                    f"could not commit offsets of {len(todo)} revoked partitions; keeping "
                    f"ownership until they are committed: {exc}"
                ) from exc
        for tp in todo:
            self._pending.pop(tp, None)
        self._emit("committed", partitions=len(todo), reason="revoke")

    def on_assign(self, partitions: Mapping[TopicPartition, str]) -> None:
        storage = self._storage
        assert storage is not None and self._fetchers is not None
        # Read offsets only now that we own the partitions: the previous owner committed before
        # it released them, so this read sees its final position. (ZooKeeper orders our owner
        # create after their delete, and a session's reads after its own writes, even on a
        # lagging follower; the Kafka coordinator answered their commit before they released.)
        fresh = [tp for tp in partitions if tp not in self._pending]
        offsets: dict[TopicPartition, int | None] = dict(storage.fetch(fresh)) if fresh else {}
        ptis = []
        for tp, tid in partitions.items():
            offset = self._pending.pop(tp, None)
            if offset is None:
                offset = offsets.get(tp)
            pti = PartitionTopicInfo(tp[0], tp[1], self._stream_for(tp, tid), tid, offset)
            self._ptis[tp] = pti
            ptis.append(pti)
        self._fetchers.add(ptis)
        if self._rebalance_listener is not None:
            try:
                self._rebalance_listener.on_partitions_assigned(sorted(partitions))
            except Exception:  # noqa: BLE001
                log.exception("on_partitions_assigned raised")

    def on_brokers_changed(self, brokers: list[BrokerInfo] | None) -> None:
        if brokers and self._client is not None:
            self._client.update_brokers({broker.broker_id: (broker.host, broker.port) for broker in brokers})
        if self._metadata is not None:
            self._metadata.invalidate()

    # ------------------------------------------------------------------ status

    def _on_status(self, kind: str, fields: Mapping[str, Any]) -> None:
        if kind == "rebalance_completed":
            self._metrics.rebalanced(float(fields.get("seconds", 0.0)) * 1000.0)
        self._emit(kind, **fields)

    def _emit(self, kind: str, **fields: Any) -> None:
        if not self._status_listeners:
            return
        event = ConsumerEvent(kind, self.consumer_id, fields)
        for listener in self._status_listeners:
            try:
                listener(event)
            except Exception:  # noqa: BLE001
                log.exception("status listener failed on %s", kind)
