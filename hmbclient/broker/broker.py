"""Broker: one Kafka-protocol broker assembled from its parts (Kafka's ``KafkaServer``).

Start-up order: logs (recovery happens here, so a damaged log fails before we listen) ->
replica manager and purgatories -> offset manager -> socket server (binds; the port is known
from here on) -> registration in the cluster view and, if configured, ZooKeeper -> scheduler
(retention, time-based flush, offset loading). Shutdown runs the other way round, so nothing
answers from a half-closed log.

A Broker either owns its cluster view and logs (standalone) or shares them with the other
brokers of an in-process ``EmbeddedCluster`` (then the cluster owns them).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from typing import Any

from hmbclient.broker.apis import KafkaApis
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.metadata import BrokerEndpoint, ClusterView
from hmbclient.broker.offset_manager import OFFSETS_TOPIC, OffsetManager
from hmbclient.broker.producer_ids import ProducerIdManager
from hmbclient.broker.replica_manager import ReplicaManager
from hmbclient.broker.server import SocketServer
from hmbclient.broker.topics import TopicManager
from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.config import NEVER, BrokerConfig

__all__ = ["Broker", "log_config_from", "Scheduler"]

log = logging.getLogger("hmbclient.broker")


def _opt(v: int) -> int | None:
    return None if v < 0 or v >= NEVER else v


def log_config_from(config: BrokerConfig, *, compact: bool = False) -> LogConfig:
    """The LogConfig a BrokerConfig asks for."""
    return LogConfig(
        segment_bytes=min(config.log_segment_bytes, 2**31 - 1),
        index_interval_bytes=config.log_index_interval_bytes,
        flush_interval_messages=_opt(config.log_flush_interval_messages),
        flush_interval_ms=_opt(config.log_flush_interval_ms),
        retention_ms=None if compact else _opt(config.log_retention_ms),
        retention_bytes=None if compact else _opt(config.log_retention_bytes),
        max_message_bytes=max(config.message_max_bytes, 1),
        compact=compact,
    )


def make_log_manager(config: BrokerConfig, log_dir: str) -> LogManager:
    default = log_config_from(config)
    offsets = log_config_from(config, compact=True)
    return LogManager(log_dir, default, lambda topic: offsets if topic == OFFSETS_TOPIC else None)


class Scheduler:
    """One daemon thread running periodic log chores: retention, time-based flush, compaction."""

    def __init__(self, logs: LogManager, config: BrokerConfig, name: str) -> None:
        self.logs = logs
        self.retention_every_s = config.log_retention_check_interval_ms / 1000.0
        fms = _opt(config.log_flush_interval_ms)
        self.flush_every_s = None if fms is None else max(min(fms, 1000), 10) / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{name}-scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

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
                self.logs.run_compaction()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def register_disk_topics(view: ClusterView, logs: LogManager) -> None:
    """Put the topics found on disk into the cluster view (start-up)."""
    for topic, n in sorted(logs.topics().items()):
        view.add_topic(topic, n, internal=topic == OFFSETS_TOPIC)


class Broker:
    """One broker.

    Args:
        config: the broker settings.
        view: a shared cluster view (cluster mode) or None to own one.
        logs: shared logs (cluster mode) or None to open ``config.log_dirs[0]`` (or a temp dir,
            removed on stop).
        producer_ids: shared producer id source (cluster mode) or None for a private one.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        view: ClusterView | None = None,
        logs: LogManager | None = None,
        producer_ids: ProducerIdManager | None = None,
    ) -> None:
        self.config = config
        self.producer_ids = producer_ids or ProducerIdManager()
        self.broker_id = config.broker_id
        self._shared_view = view
        self._shared_logs = logs
        self.view: ClusterView | None = None
        self.logs: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.offset_manager: OffsetManager | None = None
        self.apis: KafkaApis | None = None
        self.server: SocketServer | None = None
        self.scheduler: Scheduler | None = None
        self.zk: Any = None
        self._temp_dir: str | None = None
        self._port = config.port
        self.running = False

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
    def log_dir(self) -> str | None:
        return self.logs.log_dir if self.logs is not None else None

    def start(self) -> None:
        """Open the logs, bind and serve.

        Raises:
            StorageError: a log cannot be recovered (nothing is served then).
            OSError: the port cannot be bound.
        """
        if self.running:
            return
        cfg = self.config
        name = f"broker-{cfg.broker_id}"
        if self._shared_logs is not None:
            logs = self._shared_logs
        else:
            if cfg.log_dirs:
                log_dir = cfg.log_dirs[0]
            else:
                if self._temp_dir is None:
                    self._temp_dir = tempfile.mkdtemp(prefix="hmb-broker-")
                log_dir = self._temp_dir
            logs = make_log_manager(cfg, log_dir)
        self.logs = logs
        try:
            if self._shared_view is not None:
                view = self._shared_view
            else:
                view = ClusterView()
                register_disk_topics(view, logs)
            self.view = view
            topics = TopicManager(view, logs, cfg.num_partitions, cfg.auto_create_topics_enable)
            rm = ReplicaManager(cfg.broker_id, view, logs)
            self.replica_manager = rm
            om = OffsetManager(cfg.broker_id, view, rm, topics, cfg)
            self.offset_manager = om
            self.apis = KafkaApis(cfg.broker_id, view, rm, topics, om, self.producer_ids)
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
            )
            rm.start()
            om.start()
            self.server.start()
            self._port = self.server.port
            view.register_broker(BrokerEndpoint(cfg.broker_id, self.host, self.advertised_port))
            if cfg.zookeeper_connect:
                from hmbclient.broker.zk import ZkRegistration

                self.zk = ZkRegistration(cfg, view, self.host, self.advertised_port)
                self.zk.start()
            if self._shared_logs is None:
                self.scheduler = Scheduler(logs, cfg, name)
                self.scheduler.start()
        except BaseException:
            self._teardown()
            raise
        self.running = True
        log.info("broker %d serving on %s:%d (log dir %s)", cfg.broker_id, cfg.host, self._port, logs.log_dir)

    def _teardown(self) -> None:
        if self.zk is not None:
            try:
                self.zk.stop()
            except Exception:
                log.exception("ZooKeeper deregistration failed")
            self.zk = None
        if self.view is not None:
            self.view.deregister_broker(self.broker_id)
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.offset_manager is not None:
            self.offset_manager.shutdown()
            self.offset_manager = None
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
            self.replica_manager = None
        if self._shared_logs is None and self.logs is not None:
            self.logs.close()
        self.logs = None if self._shared_logs is None else self.logs
        self.view = None if self._shared_view is None else self.view

    def stop(self, *, remove_temp_dir: bool = True) -> None:
        """Stop serving and close the logs (idempotent). A temp log dir is removed unless
        ``remove_temp_dir`` is False (a restart then finds the data again)."""
        if not self.running:
            return
        self.running = False
        self._teardown()
        if remove_temp_dir and self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None
        log.info("broker %d stopped", self.broker_id)

    def __repr__(self) -> str:
        return f"Broker(id={self.broker_id}, {self.host}:{self._port}, running={self.running})"


