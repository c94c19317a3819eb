"""EmbeddedCluster: N brokers in this process sharing one cluster view, for client tests.

    with EmbeddedCluster(brokers=3, zookeeper_connect=zk.connect, num_partitions=6) as cluster:
        cluster.bootstrap                       # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        cluster.leader("events", 0)             # broker id
        cluster.move_leader("events", 0, 2)     # clients now get NOT_LEADER_FOR_PARTITION from
                                                # the old leader and must refresh metadata
        cluster.stop_broker(1); cluster.start_broker(1)   # same port, partitions come back

Each broker is a real TCP server with its own id and port and answers only for the partitions
it leads (NOT_LEADER_FOR_PARTITION otherwise). There is one replica per partition; the logs live
in one directory shared by the brokers (``<log_dir>/<topic>-<partition>``), which is what makes
``move_leader`` possible without replication: the new leader serves the same log, as a
follower that was in sync would. A stopped broker's partitions have no leader
(LEADER_NOT_AVAILABLE) until it is back or they are moved.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from hmbclient.broker.broker import Broker, Scheduler, make_log_manager, register_disk_topics
from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.metadata import ClusterView
from hmbclient.broker.producer_ids import ProducerIdManager
from hmbclient.broker.topics import TopicManager
from hmbclient.config import BrokerConfig
from hmbclient.errors import ConfigError

__all__ = ["EmbeddedCluster"]


class EmbeddedCluster:
    """Several brokers with leaders spread across them.

    Args:
        brokers: how many (ids 0..N-1).
        zookeeper_connect: register every broker (and the topics) there; None: no ZooKeeper.
        num_partitions: partitions of auto-created topics (default: the BrokerConfig default).
        log_dir: shared data directory (None: a temp dir removed on stop).
        **config: other BrokerConfig settings applied to every broker (not broker_id/port).
    Raises:
        ConfigError: bad settings.
    """

    def __init__(self, brokers: int = 3, zookeeper_connect: str | None = None, num_partitions: int | None = None, log_dir: str | None = None, **config: Any) -> None:
        if brokers < 1:
            raise ConfigError(f"brokers must be >= 1, got {brokers}")
        for key in ("broker_id", "port", "log_dirs"):
            if key in config:
                raise ConfigError(f"{key} is chosen by the cluster")
        self._owns_dir = log_dir is None
        self._log_dir = log_dir or tempfile.mkdtemp(prefix="hmb-cluster-")
        extra = dict(config)
        if num_partitions is not None:
            extra["num_partitions"] = num_partitions
        if zookeeper_connect is not None:
            extra["zookeeper_connect"] = zookeeper_connect
        self._configs = [BrokerConfig(broker_id=i, port=0, log_dirs=(self._log_dir,), **extra) for i in range(brokers)]
        self.view = ClusterView()
        self.producer_ids = ProducerIdManager()
        self.logs: LogManager | None = None
        self._brokers: list[Broker] = []
        self._scheduler: Scheduler | None = None
        self.running = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> EmbeddedCluster:
        """Start every broker. Returns self.

        Raises:
            StorageError: the shared log directory cannot be recovered.
        """
        if self.running:
            return self
        self.logs = make_log_manager(self._configs[0], self._log_dir)
        try:
            self._brokers = [Broker(cfg, view=self.view, logs=self.logs, producer_ids=self.producer_ids) for cfg in self._configs]
            for b in self._brokers:
                b.start()
            # Disk topics go in after every broker registered, so their leaders spread.
            register_disk_topics(self.view, self.logs)
            self._scheduler = Scheduler(self.logs, self._configs[0], "cluster")
            self._scheduler.start()
        except BaseException:
            self._shutdown()
            raise
        self.running = True
        return self

    def _shutdown(self) -> None:
        if self._scheduler is not None:
            self._scheduler.stop()
            self._scheduler = None
        for b in reversed(self._brokers):
            b.stop()
        if self.logs is not None:
            self.logs.close()
            self.logs = None

    def stop(self) -> None:
        """Stop every broker and remove the temp dir if the cluster made it."""
        self._shutdown()
        self.running = False
        if self._owns_dir:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    close = stop

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inspection ------------------------------------------------------------------------------
    @property
    def brokers(self) -> list[Broker]:
        """The brokers, index = broker id (``.host``, ``.port``, ``.broker_id``, ``.running``)."""
        return list(self._brokers)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self._brokers)

    @property
    def log_dir(self) -> str:
        return self._log_dir

    def broker(self, broker_id: int) -> Broker:
        return self._brokers[broker_id]

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader id (-1: none; None: unknown partition)."""
        return self.view.leader(topic, partition)

    # -- control ---------------------------------------------------------------------------------
    def create_topic(self, topic: str, num_partitions: int | None = None) -> None:
        """Create a topic now (leaders spread over the alive brokers).

        Raises:
            InvalidTopicError: an illegal name; ValueError if it exists.
        """
        from hmbclient.broker.topics import validate_topic_name

        validate_topic_name(topic)
        assert self.logs is not None
        n = num_partitions or self._configs[0].num_partitions
        code = TopicManager(self.view, self.logs, n, True).create(topic, n)
        if code:
            raise ValueError(f"cannot create {topic}: error {code}")

    def move_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Make ``broker_id`` lead the partition; the old leader answers NOT_LEADER_FOR_PARTITION
        from now on and its parked fetches complete.

        Raises:
            KeyError: unknown partition or broker.
        """
        self.view.move_leader(topic, partition, broker_id)

    def stop_broker(self, broker_id: int) -> None:
        """Stop one broker (its port stays reserved for ``start_broker``)."""
        self._brokers[broker_id].stop()

    def start_broker(self, broker_id: int) -> None:
        """Restart a stopped broker on its old port; it leads its partitions again."""
        self._brokers[broker_id].start()

    def __repr__(self) -> str:
        return f"EmbeddedCluster({self.bootstrap}, running={self.running})"
