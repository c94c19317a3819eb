"""Broker: one Kafka-protocol broker assembled from its parts (Kafka's ``KafkaServer``).

Start-up order: logs (recovery happens here, so a damaged log fails before we listen) ->
coordination store (ZooKeeper, or in memory for a standalone broker) -> metadata cache, replica
manager, replica fetchers, topic and offset managers, group coordinator -> socket server
(binds; the port is known from here on) -> registration in the store -> controller (every broker competes for
``/controller``) -> scheduler (retention, time-based flush) and log cleaner threads (``log.cleaner``). Shutdown runs the other way round,
after a controlled shutdown (the controller moves this broker's leaderships away first), so
nothing answers from a half-closed log and clients see leaders move instead of vanish.

A standalone broker (no ``zookeeper.connect``) is a cluster of one: its in-memory store holds
the topics found in its log directory, and it is its own controller, so it runs the same code
paths as a broker of a ZooKeeper cluster.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from hmbclient.broker.admin_apis import AdminApis
from hmbclient.broker.apis import KafkaApis
from hmbclient.broker.channel import BrokerChannel
from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.configs import ConfigDescriber
from hmbclient.broker.controller.controller import Controller
from hmbclient.broker.controller.decisions import LeaderIsr
from hmbclient.broker.controller.reassignment import stray_replicas
from hmbclient.broker.controller.store import (
    DYNAMIC_CONFIGS_FILE,
    TOPIC_IDS_FILE,
    CoordinationStore,
    MemoryStore,
    ZkStore,
)
from hmbclient.broker.coordinator.coordinator import GroupCoordinator
from hmbclient.broker.coordinator.state import GroupConfig
from hmbclient.broker.dynamic_config import DynamicConfigs
from hmbclient.broker.log.cleaner import CleanerSettings, LogCleaner
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.log.overrides import log_config_with, parse_cleanup_policy
from hmbclient.broker.metadata import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    BrokerEndpoint,
    MetadataCache,
)
from hmbclient.broker.metrics import BrokerMetrics, MetricsEndpoint
from hmbclient.broker.offset_manager import OffsetManager
from hmbclient.broker.producer_ids import (
    STANDALONE_FILE,
    FileBlockSource,
    ProducerIdManager,
    ZkBlockSource,
)
from hmbclient.broker.quota_configs import ClientQuotaApis, QuotaConfigSource
from hmbclient.broker.quotas import QuotaConfigs, QuotaManager
from hmbclient.broker.replica_fetcher import ReplicaFetcherManager
from hmbclient.broker.replica_manager import ReplicaManager
from hmbclient.broker.replication_quota import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    ReplicationThrottles,
)
from hmbclient.broker.security.setup import authorizer_from, inter_broker_security, listeners_from
from hmbclient.broker.server import SocketServer
from hmbclient.broker.topic_configs import FileTopicConfigs, TopicConfigStore, ZkTopicConfigs
from hmbclient.broker.topics import TopicManager
from hmbclient.broker.transaction.coordinator import TransactionCoordinator
from hmbclient.broker.transaction.markers import MarkerWriter
from hmbclient.broker.transaction.state import TxnConfig
from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.config import NEVER
from hmbclient.errors import ErrorCode, HmbError, StorageError
from hmbclient.metrics import Metrics
from hmbclient.protocol.api.cluster import ControlledShutdownRequest

__all__ = ["Broker", "log_config_from", "Scheduler"]


def _outcome(fn: Callable[[], Any]) -> Any:
    """``fn()``, or the exception it raised (for a worker thread's answer box)."""
    try:
        return fn()
    except Exception as e:
        return e

log = logging.getLogger("hmbclient.broker")


def _opt(v: int) -> int | None:
    return None if v < 0 or v >= NEVER else v


def log_config_from(config: BrokerConfig, *, compact: bool | None = None) -> LogConfig:
    """The LogConfig a BrokerConfig asks for (``compact``: the internal topics; None: as
    ``log.cleanup.policy`` says, ``compact,delete`` keeping retention)."""
    if compact is None:
        compact, delete = parse_cleanup_policy(config.log_cleanup_policy)
        lc = log_config_from(config, compact=not delete)
        return dataclasses.replace(lc, compact=compact) if compact and delete else lc
    return LogConfig(
        segment_bytes=min(config.log_segment_bytes, 2**31 - 1),
        index_interval_bytes=config.log_index_interval_bytes,
        flush_interval_messages=_opt(config.log_flush_interval_messages),
        flush_interval_ms=_opt(config.log_flush_interval_ms),
        retention_ms=None if compact else _opt(config.log_retention_ms),
        retention_bytes=None if compact else _opt(config.log_retention_bytes),
        max_message_bytes=max(config.message_max_bytes, 1),
        compact=compact,
        delete=not compact,
        min_cleanable_dirty_ratio=config.log_cleaner_min_cleanable_ratio,
        min_compaction_lag_ms=config.log_cleaner_min_compaction_lag_ms,
        delete_retention_ms=config.log_cleaner_delete_retention_ms,
        producer_id_expiration_ms=config.producer_id_expiration_ms,
    )


def make_log_manager(config: BrokerConfig, log_dir: str, overrides: Callable[[str], dict[str, str]] | None = None) -> LogManager:
    """The LogManager of ``log_dir``; ``overrides(topic)``: the topic's stored configs (see
    ``topic_configs``), applied over the broker's (a bad stored value is logged and ignored)."""
    default = log_config_from(config)
    offsets = log_config_from(config, compact=True)

    def config_for(topic: str) -> LogConfig | None:
        if topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
            return offsets
        if overrides is None:
            return None
        try:
            return log_config_with(default, overrides(topic))
        except (HmbError, ValueError) as e:
            log.error("topic %s: its stored configs are not usable (%s): broker defaults apply", topic, e)
            return None

    return LogManager(log_dir, default, config_for, max_open_read_handles=config.log_max_open_read_handles)


class Scheduler:
    """One daemon thread running periodic log chores: retention, time-based flush, compaction."""

    def __init__(self, logs: LogManager, config: BrokerConfig, name: str) -> None:
        self.logs = logs
        self.retention_every_s = config.log_retention_check_interval_ms / 1000.0
        fms = _opt(config.log_flush_interval_ms)
        self.flush_every_s = None if fms is None else max(min(fms, 1000), 10) / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{name}-scheduler", daemon=True)
        io_rate = config.log_cleaner_io_max_bytes_per_second
        self.cleaner = LogCleaner(
            logs,
            CleanerSettings(config.log_cleaner_threads, config.log_cleaner_backoff_ms, config.log_cleaner_dedupe_buffer_size, io_rate),
            f"{name}-log-cleaner",
        )

    def start(self) -> None:
        self._thread.start()
        self.cleaner.start()

    def _run(self) -> None:
        every_ms = int(self.retention_every_s * 1000)
        next_retention_ms = monotonic_ms() + every_ms
        tick = min(self.retention_every_s, self.flush_every_s or self.retention_every_s, 1.0)
        while not self._stop.wait(tick):
            now_ms = wall_ms()
            if self.flush_every_s is not None:
                self.logs.run_flush(now_ms)
            if monotonic_ms() >= next_retention_ms:
                next_retention_ms = monotonic_ms() + every_ms
                self.logs.run_retention(now_ms)

    def stop(self) -> None:
        self._stop.set()
        self.cleaner.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def _seed_memory_store(store: MemoryStore, logs: LogManager, broker_id: int) -> None:
    """A standalone broker's topics are the ones in its log directory (all replicas here)."""
    for topic, n in sorted(logs.topics().items()):
        store.create_topic(topic, [(broker_id,)] * n)


def _served_topics(metadata: MetadataCache, topics: TopicManager) -> Callable[[], dict[str, tuple[uuid.UUID, int]]]:
    """name -> (topic id, partition count) of the served topics, for consumer-protocol groups."""

    def served() -> dict[str, tuple[uuid.UUID, int]]:
        out = {}
        for name, parts in metadata.topics().items():
            tid = topics.topic_id(name)
            if tid is not None and parts:
                out[name] = (tid, len(parts))
        return out

    return served


class Broker:
    """One broker.

    Args:
        config: the broker settings.
        producer_ids: producer id source (None: a private one).
    """

    def __init__(self, config: BrokerConfig, *, producer_ids: ProducerIdManager | None = None) -> None:
        self.config = config
        self.producer_ids = producer_ids or ProducerIdManager(config.broker_id)
        self._own_producer_ids = producer_ids is None
        self.broker_id = config.broker_id
        self.metadata: MetadataCache | None = None
        self.logs: LogManager | None = None
        self.store: CoordinationStore | None = None
        self.replica_manager: ReplicaManager | None = None
        self.offset_manager: OffsetManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self.topics: TopicManager | None = None
        self.controller: Controller | None = None
        self.apis: KafkaApis | None = None
        self.server: SocketServer | None = None
        self.scheduler: Scheduler | None = None
        self._metrics: Metrics | None = None
        #: the Prometheus endpoint (``metrics.port``), while serving
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.topic_configs: TopicConfigStore | None = None
        self._temp_dir: str | None = None
        self._port = config.port
        self.running = False
        #: TLS/SASL of this broker's connections to the others (None: plaintext)
        self.inter_broker_security = inter_broker_security(config)

    @property
    def host(self) -> str:
        return self.config.advertised_host_name or self.config.host

    @property
    def port(self) -> int:
        return self._port

    @property
    def advertised_port(self) -> int:
        return self.config.advertised_port or self._port

    @property
    def endpoint(self) -> BrokerEndpoint:
        """This broker as the others see it: its inter-broker listener's address, and every
        listener's advertised address (known once serving)."""
        listeners = self.advertised_listeners()
        inter = next(((h, p) for name, h, p in listeners if name == self.config.inter_broker_protocol), (self.host, self.advertised_port))
        return BrokerEndpoint(self.broker_id, inter[0], inter[1], listeners)

    def advertised_listeners(self) -> tuple[tuple[str, str, int], ...]:
        """``(name, host, port)`` of each listener: the first at ``advertised.host.name`` /
        ``advertised.port`` when set; a listener bound to every interface is advertised at
        ``advertised.host.name``, else ``host.name``, else this machine's name."""
        if self.server is None:
            return (("PLAINTEXT", self.host, self.advertised_port),)
        out = []
        for i, lst in enumerate(self.server.listeners):
            if i == 0:
                out.append((lst.name, self.host, self.advertised_port))
                continue
            host = lst.host
            if host in ("0.0.0.0", "::", ""):
                host = self.config.advertised_host_name or (self.config.host if self.config.host not in ("0.0.0.0", "::") else socket.getfqdn())
            out.append((lst.name, host, lst.port))
        return tuple(out)

    def channel(self, client_id: str) -> BrokerChannel:
        """A channel to this broker on its inter-broker listener, with the inter-broker TLS and
        SASL settings (what the other brokers and the cluster's test helpers use)."""
        ep = self.endpoint
        return BrokerChannel(ep.host, ep.port, client_id, security=self.inter_broker_security)

    def _marker_channel(self, broker_id: int) -> BrokerChannel | None:
        """A channel to another broker's inter-broker listener (transaction markers)."""
        ep = self.metadata.broker(broker_id) if self.metadata is not None else None
        if ep is None:
            return None
        return BrokerChannel(ep.host, ep.port, f"broker-{self.config.broker_id}-txn-markers", security=self.inter_broker_security)

    @property
    def log_dir(self) -> str | None:
        return self.logs.log_dir if self.logs is not None else None

    # -- start ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the logs, bind, register and serve.

        Raises:
            StorageError: a log cannot be recovered (nothing is served then).
            CoordinationError: ZooKeeper is unreachable or the broker id is taken.
            OSError: the port cannot be bound.
        """
        if self.running:
            return
        cfg = self.config
        name = f"broker-{cfg.broker_id}"
        if cfg.log_dirs:
            log_dir = cfg.log_dirs[0]
        else:
            if self._temp_dir is None:
                self._temp_dir = tempfile.mkdtemp(prefix="hmb-broker-")
            log_dir = self._temp_dir
        # Topic overrides: in the log dir standalone (readable now), in ZooKeeper once connected.
        self.topic_configs = None if cfg.zookeeper_connect else FileTopicConfigs(log_dir)
        self.logs = logs = make_log_manager(cfg, log_dir, self._topic_overrides)
        try:
            store = self._open_store(logs)
            if cfg.zookeeper_connect:
                self._delete_stray_logs(store, logs)  # before registering (reassignment Case R6)
            if self.topic_configs is None:
                self.topic_configs = ZkTopicConfigs(store.zk)  # type: ignore[attr-defined]
                logs.reconfigure()
            if self._own_producer_ids:
                # Producer id blocks are recorded where they survive this broker: ZooKeeper
                # for a cluster, the log directory standalone (see producer_ids).
                zk = getattr(store, "zk", None)
                source = ZkBlockSource(zk) if zk is not None else FileBlockSource(os.path.join(logs.log_dir, STANDALONE_FILE))
                self.producer_ids.attach(source, cfg.broker_id)
            self.metadata = metadata = MetadataCache()
            rm = ReplicaManager(
                cfg.broker_id,
                metadata,
                logs,
                min_insync_replicas=cfg.min_insync_replicas,
                replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
                hw_checkpoint_interval_ms=cfg.replica_high_watermark_checkpoint_interval_ms,
                isr_writer=self._isr_writer(store),
            )
            self.replica_manager = rm
            rm.fetchers = ReplicaFetcherManager(
                rm,
                fetch_wait_max_ms=cfg.replica_fetch_wait_max_ms,
                fetch_max_bytes=cfg.replica_fetch_max_bytes,
                backoff_ms=cfg.replica_fetch_backoff_ms,
                request_timeout_s=cfg.controller_socket_timeout_ms / 1000.0,
                security=self.inter_broker_security,
            )
            self.topics = topics = TopicManager(metadata, store, cfg.num_partitions, cfg.default_replication_factor, cfg.auto_create_topics_enable)
            topics.config_store = self.topic_configs
            om = OffsetManager(cfg.broker_id, metadata, rm, topics, cfg, store)
            self.offset_manager = om
            group_config = GroupConfig(
                cfg.group_min_session_timeout_ms,
                cfg.group_max_session_timeout_ms,
                cfg.group_initial_rebalance_delay_ms,
                cfg.group_consumer_session_timeout_ms,
                cfg.group_consumer_heartbeat_interval_ms,
                tuple(a.strip() for a in cfg.group_consumer_assignors.split(",") if a.strip()),
                cfg.group_consumer_migration_policy,
            )
            self.group_coordinator = groups = GroupCoordinator(om, group_config, name=name)
            groups.consumer_topics = _served_topics(metadata, topics)
            om.coordinator = groups
            self.transactions = txns = TransactionCoordinator(
                cfg.broker_id,
                metadata,
                rm,
                topics,
                self.producer_ids,
                num_partitions=cfg.transaction_state_log_num_partitions,
                replication_factor=cfg.transaction_state_log_replication_factor,
                config=TxnConfig(cfg.transaction_max_timeout_ms, cfg.transactional_id_expiration_ms),
                abort_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            )
            om.transactions = txns
            txns.marker_writer = MarkerWriter(rm, om)
            txns.group_partition_for = om.partition_for
            txns.channel_for = self._marker_channel
            self.controller = controller = Controller(
                cfg.broker_id,
                store,
                self._local_delivery,
                unclean_leader_election=cfg.unclean_leader_election_enable,
                request_timeout_s=cfg.controller_socket_timeout_ms / 1000.0,
                security=self.inter_broker_security,
                auto_rebalance=(float(cfg.leader_imbalance_check_interval_seconds), cfg.leader_imbalance_per_broker_percentage)
                if cfg.auto_leader_rebalance_enable else None,
            )
            # Dynamic configs (AlterConfigs): read from the store and applied before serving.
            # Its topic layer adds to the stored CreateTopics configs (the same /config/topics/<t>
            # in a cluster; topic-configs.json standalone).
            self.dynamic_configs = dynamic = DynamicConfigs(cfg, store, logs, log_config_from, controller,
                                                            stored_overrides=self._topic_overrides)
            internal_log_config = log_config_from(cfg, compact=True)
            logs.set_config_for(lambda topic: internal_log_config if topic in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
                                else dynamic.log_config(topic))
            rm.min_insync_for = dynamic.min_insync_replicas

            def throttle_rates() -> tuple[int | None, int | None]:
                c = dynamic.config_for(None)
                return c.leader_replication_throttled_rate, c.follower_replication_throttled_rate

            def throttled_replicas(topic: str) -> tuple[str | None, str | None]:
                t = dynamic.layers().topics.get(topic, {})
                return t.get(LEADER_REPLICAS), t.get(FOLLOWER_REPLICAS)

            rm.throttles = ReplicationThrottles(throttle_rates, throttled_replicas, monotonic_ms, cfg.replication_quota_window_num,
                                                cfg.replication_quota_window_size_seconds * 1000)
            dynamic.start()
            self.apis = KafkaApis(
                cfg.broker_id,
                metadata,
                rm,
                topics,
                om,
                self.producer_ids,
                controller_guard=self._check_controller,
                controlled_shutdown=self._serve_controlled_shutdown,
                group_coordinator=groups,
                configs=ConfigDescriber(cfg, metadata.has_topic, dynamic.layers, self._topic_overrides),
                transactions=txns,
                admin=AdminApis(cfg, metadata, topics, controller, dynamic, logs, groups, rm),
            )
            self.apis.authorizer = authorizer_from(cfg, store)
            self.apis.quotas = QuotaManager(
                QuotaConfigs(producer_default=cfg.quota_producer_default, consumer_default=cfg.quota_consumer_default),
                cfg.quota_window_num, cfg.quota_window_size_seconds * 1000,
            )
            quota_source = QuotaConfigSource(store, self.apis.quotas)
            dynamic.change_listeners.append(quota_source.on_changes)
            quota_source.start()  # after subscribing: a change in between is read here
            self.apis.serve(ClientQuotaApis(store, quota_source).handlers())
            self.apis.inter_broker_listener = cfg.inter_broker_protocol
            self.server = SocketServer(
                self.apis,
                cfg.host,
                self._port,
                num_network_threads=cfg.num_network_threads,
                num_io_threads=cfg.num_io_threads,
                max_frame_bytes=cfg.socket_request_max_bytes,
                connections_max_idle_ms=cfg.connections_max_idle_ms,
                send_buffer_bytes=cfg.socket_send_buffer_bytes,
                receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
                name=name,
                listeners=listeners_from(cfg, self._port, store),
            )
            self._start_metrics(rm, controller)
            topics.purgatory.start()
            rm.start()
            groups.start()
            om.start()
            txns.start()
            self.server.start()
            self._port = self.server.port
            store.register_broker(self.endpoint)
            announced = threading.Event()

            def on_metadata(event: str, _: Any) -> None:
                if metadata.broker(cfg.broker_id) is not None:
                    announced.set()

            metadata.add_listener(on_metadata)
            controller.start()
            # Ready once the controller has told this broker about the cluster (and, being
            # first in the same queue, about the partitions it hosts): a client connecting right
            # after start() finds its topics instead of UNKNOWN_TOPIC_OR_PARTITION.
            if not announced.wait(cfg.zookeeper_session_timeout_ms / 1000.0 + 5):
                log.warning("broker %d: no metadata from the controller yet; serving anyway", cfg.broker_id)
            metadata.remove_listener(on_metadata)
            self.scheduler = Scheduler(logs, cfg, name)
            self.scheduler.start()
        except BaseException:
            self._teardown()
            raise
        self.running = True
        log.info("broker %d serving on %s:%d (log dir %s)", cfg.broker_id, cfg.host, self._port, logs.log_dir)

    def _delete_stray_logs(self, store: CoordinationStore, logs: LogManager) -> None:
        """Delete the logs of partitions this broker stopped being a replica of while it was
        down (``controller.reassignment`` Case R6); best effort: trouble is logged, the logs kept."""
        local = [tp for tp, _lg in logs.all_logs()]
        try:
            assignments = {t: store.assignment(t) for t in sorted({t for t, _p in local})}
        except Exception as e:
            log.warning("broker %d: stray replicas not checked (%r)", self.config.broker_id, e)
            return
        for topic, partition in stray_replicas(self.config.broker_id, local, assignments):
            log.warning("broker %d: %s-%d is no longer assigned here (moved away while this broker was down): its log is deleted",
                        self.config.broker_id, topic, partition)
            try:
                logs.delete_log(topic, partition)
            except StorageError as e:
                log.error("broker %d: deleting %s-%d failed: %s", self.config.broker_id, topic, partition, e)

    def _start_metrics(self, rm: ReplicaManager, controller: Controller) -> None:
        """The broker's registry and sensors (see broker/metrics.py), and its endpoint when
        ``metrics.port`` is set."""
        cfg = self.config
        self._metrics = registry = Metrics(
            num_samples=cfg.metrics_num_samples, sample_window_ms=cfg.metrics_sample_window_ms,
            tags={"broker": str(cfg.broker_id)},
        )
        sensors = BrokerMetrics(registry)
        rm.metrics = sensors
        assert self.server is not None
        self.server.metrics = sensors
        if self.apis is not None:
            self.apis.metrics = sensors
        sensors.watch_replicas(rm.under_replicated, lambda: len(rm.partitions()), lambda: len(rm.leader_partitions()))
        sensors.watch_purgatories(rm.produce_purgatory.delayed, rm.fetch_purgatory.delayed)
        sensors.watch_controller(lambda: controller.active)
        if cfg.metrics_port is not None:
            self.metrics_endpoint = MetricsEndpoint(lambda: [registry], cfg.metrics_host or cfg.host, cfg.metrics_port)
            log.info("broker %d: metrics at http://%s:%d/metrics", cfg.broker_id, self.metrics_endpoint.host, self.metrics_endpoint.port)

    @property
    def metrics_registry(self) -> Metrics | None:
        """The registry behind :meth:`metrics` (tag ``broker``), None before the broker first
        started: what the exporters of :mod:`hmbclient.metrics_exporters` read."""
        return self._metrics

    def metrics(self) -> dict[str, dict[str, float]]:
        """The broker's metrics under Kafka's MBean names (see :mod:`hmbclient.broker.metrics`):
        ``{group: {name: value}}``, e.g. ``["kafka.server.ReplicaManager"]["UnderReplicatedPartitions"]``.

        Returns:
            A fresh snapshot; empty before the broker first started.
        """
        return self._metrics.snapshot() if self._metrics is not None else {}

    def _topic_overrides(self, topic: str) -> dict[str, str]:
        tc = self.topic_configs
        return {} if tc is None else tc.get(topic)

    def _open_store(self, logs: LogManager) -> CoordinationStore:
        cfg = self.config
        store: CoordinationStore
        if cfg.zookeeper_connect:
            store = ZkStore(
                cfg.zookeeper_connect,
                cfg.zookeeper_session_timeout_ms,
                cfg.zookeeper_connection_timeout_ms,
                inter_broker_listener=cfg.inter_broker_protocol,
            )
        else:
            memory = MemoryStore(os.path.join(logs.log_dir, TOPIC_IDS_FILE), os.path.join(logs.log_dir, DYNAMIC_CONFIGS_FILE))
            _seed_memory_store(memory, logs, cfg.broker_id)
            store = memory
        self.store = store
        return store

    @staticmethod
    def _isr_writer(store: CoordinationStore) -> Callable[[str, int, int, int, tuple[int, ...], int, int], int | None]:
        def write(topic: str, partition: int, leader: int, leader_epoch: int, isr: tuple[int, ...], controller_epoch: int, version: int) -> int | None:
            try:
                return store.write_isr(topic, partition, LeaderIsr(leader, leader_epoch, isr, controller_epoch), version)
            except Exception as e:  # ZooKeeper trouble: keep the old ISR, try again later
                log.warning("ISR write for %s-%d failed: %r", topic, partition, e)
                return None

        return write

    # -- the controller's hooks ----------------------------------------------------------------------
    def _local_delivery(self, request: Any) -> Any:
        assert self.apis is not None
        return self.apis.handle_local(request, client_id=f"broker-{self.broker_id}-controller")

    def _check_controller(self, controller_id: int, controller_epoch: int) -> int:
        controller, metadata = self.controller, self.metadata
        if controller is None or metadata is None:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if controller_epoch < metadata.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if (controller_id, controller_epoch) != controller.known_controller:
            try:
                controller.refresh_known_controller()
            except Exception as e:
                log.warning("cannot check the controller: %s", e)
                return ErrorCode.STALE_CONTROLLER_EPOCH
        if (controller_id, controller_epoch) != controller.known_controller:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        return ErrorCode.NONE

    def _serve_controlled_shutdown(self, broker_id: int, answer: Callable[[int, list[tuple[str, int]]], None]) -> None:
        controller = self.controller
        if controller is None or not controller.active:
            answer(ErrorCode.NOT_CONTROLLER, [])
            return

        def done(fut: Any) -> None:
            try:
                code, remaining = fut.result()
            except HmbError as e:
                code, remaining = getattr(e, "errno", ErrorCode.UNKNOWN_SERVER_ERROR), []
            except Exception:
                log.exception("controlled shutdown of broker %d failed", broker_id)
                code, remaining = ErrorCode.UNKNOWN_SERVER_ERROR, []
            answer(code, remaining)

        controller.controlled_shutdown(broker_id).add_done_callback(done)

    # -- stop ----------------------------------------------------------------------------------------
    def _coordination_reachable(self) -> bool:
        """Whether the coordination store answers now (ZooKeeper: the session is connected)."""
        zk = getattr(self.store, "zk", None)
        return zk is None or bool(getattr(zk, "connected", True))

    def _movable(self, remaining: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The partitions of ``remaining`` another live ISR member could take over (retrying
        cannot move the others: the last replica standing keeps its leadership)."""
        metadata = self.metadata
        if metadata is None:
            return remaining
        live = metadata.live_broker_ids()
        out = []
        for topic, p in remaining:
            metas = metadata.topic_partitions(topic)
            meta = metas[p] if 0 <= p < len(metas) else None
            if meta is None or any(b != self.broker_id and b in live for b in meta.isr):
                out.append((topic, p))
        return out

    def _shutdown_attempt(self) -> tuple[int, list[tuple[str, int]]]:
        """One ControlledShutdown round trip to the controller (raises on trouble)."""
        cfg = self.config
        controller, store = self.controller, self.store
        assert controller is not None and store is not None
        cid, _ = controller.refresh_known_controller()
        if cid < 0:
            return ErrorCode.NOT_CONTROLLER, []
        if cid == self.broker_id:
            return controller.controlled_shutdown(self.broker_id).result(timeout=cfg.controller_socket_timeout_ms / 1000.0)
        ep = store.live_brokers().get(cid)
        if ep is None:
            return ErrorCode.NOT_CONTROLLER, []
        channel = BrokerChannel(ep.host, ep.port, f"broker-{self.broker_id}-shutdown", security=self.inter_broker_security)
        try:
            resp = channel.request(ControlledShutdownRequest[1](broker_id=self.broker_id), cfg.controller_socket_timeout_ms / 1000.0)
        finally:
            channel.close()
        return resp.error_code, [(p.topic, p.partition) for p in resp.remaining_partitions]

    def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (Kafka's controlled
        shutdown); True when nothing is left that another replica could take over.

        Bounded: at most ``controlled.shutdown.max.retries`` + 1 attempts,
        ``controlled.shutdown.retry.backoff.ms`` apart, each given at most
        ``controller.socket.timeout.ms``; an attempt while ZooKeeper is unreachable is skipped
        at once (its calls would wait for a reconnection that may never come). What was not
        done is logged, and the caller stops locally anyway."""
        cfg = self.config
        controller, store = self.controller, self.store
        if controller is None or store is None or not cfg.controlled_shutdown_enable:
            return False
        attempts = cfg.controlled_shutdown_max_retries + 1
        why = "not tried"
        for attempt in range(attempts):
            if attempt:
                time.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000.0)
            if not self._coordination_reachable():
                why = "ZooKeeper is unreachable"
                log.warning("controlled shutdown of broker %d: attempt %d of %d skipped: %s", self.broker_id, attempt + 1, attempts, why)
                continue
            box: list[Any] = []
            worker = threading.Thread(target=lambda b=box: b.append(_outcome(self._shutdown_attempt)), name=f"broker-{self.broker_id}-controlled-shutdown", daemon=True)
            worker.start()
            # Wait for the answer, but give the attempt up as soon as ZooKeeper drops: a signal
            # can arrive before the client has noticed ZooKeeper is gone, and the attempt's
            # calls would then wait for a reconnection for the whole socket timeout.
            deadline = monotonic_ms() + cfg.controller_socket_timeout_ms
            while worker.is_alive() and monotonic_ms() < deadline and self._coordination_reachable():
                worker.join(0.05)
            if not box:
                if not self._coordination_reachable():
                    why = "ZooKeeper became unreachable during the attempt"
                else:
                    why = f"no answer within controller.socket.timeout.ms={cfg.controller_socket_timeout_ms}"
                log.warning("controlled shutdown of broker %d: attempt %d of %d: %s", self.broker_id, attempt + 1, attempts, why)
                continue
            outcome = box[0]
            if isinstance(outcome, BaseException):
                why = f"{type(outcome).__name__}: {outcome}"
                log.info("controlled shutdown of broker %d: attempt %d failed: %s", self.broker_id, attempt + 1, why)
                continue
            code, remaining = outcome
            movable = self._movable(remaining)
            if code == ErrorCode.NONE and not movable:
                log.info("controlled shutdown of broker %d done", self.broker_id)
                return True
            why = f"error {code}, still leading {movable}"
            log.info("controlled shutdown of broker %d: %s", self.broker_id, why)
        log.warning(
            "controlled shutdown of broker %d skipped after %d attempts (%s): its leaderships were not moved; "
            "stopping locally (logs flushed and closed, offsets and producer state saved)", self.broker_id, attempts, why,
        )
        return False

    def _teardown(self) -> None:
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
            self.metrics_endpoint = None
        # Stop answering first: once the ZooKeeper session is closed the controller moves this
        # broker's leaderships, and nothing may be acknowledged from here after that.
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.store is not None and not self._coordination_reachable():
            # ZooKeeper is gone: its client would wait for it forever (the controller's
            # resignation, ISR writes). Close it first, so those calls fail at once; the
            # registration goes when ZooKeeper expires the session.
            log.warning("broker %d: ZooKeeper unreachable at shutdown: its session is left to expire (no resignation, no ISR writes)", self.broker_id)
            try:
                self.store.close()
            except Exception:
                log.exception("closing the coordination store failed")
            self.store = None
        if self.controller is not None:
            self.controller.shutdown()
            self.controller = None
        if self.store is not None:
            try:
                self.store.close()
            except Exception:
                log.exception("closing the coordination store failed")
            self.store = None
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.transactions is not None:
            self.transactions.shutdown()
            self.transactions = None
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()
            self.group_coordinator = None
        if self.offset_manager is not None:
            self.offset_manager.shutdown()
            self.offset_manager = None
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
            self.replica_manager = None
        if self.topics is not None:
            self.topics.purgatory.shutdown(complete_pending=True)
            self.topics = None
        if self.logs is not None:
            self.logs.close()
        self.logs = None
        self.metadata = None

    def stop(self, *, remove_temp_dir: bool = True, controlled: bool = True) -> None:
        """Stop serving and close the logs (idempotent). ``controlled`` first moves this
        broker's leaderships to other ISR members (when ``controlled.shutdown.enable``). A temp
        log dir is removed unless ``remove_temp_dir`` is False (a restart then finds the data)."""
        if not self.running:
            return
        if controlled:
            self.controlled_shutdown()
        self.running = False
        self._teardown()
        if remove_temp_dir and self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        log.info("broker %d stopped", self.broker_id)

    def kill(self) -> None:
        """Stop at once, as a crash would: no controlled shutdown, no final checkpoint beyond
        what the components write on close, the ZooKeeper session closed (so the registration
        disappears now, as after a session expiry). The log dir is kept."""
        if not self.running:
            return
        self.running = False
        self._teardown()
        log.info("broker %d killed", self.broker_id)

    def __repr__(self) -> str:
        return f"Broker(id={self.broker_id}, {self.host}:{self._port}, running={self.running})"
