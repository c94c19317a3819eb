"""pytest plugin (entry point ``pytest11``): real servers as fixtures, no Docker, no JVM download.

After ``pip install hmbclient`` a user's own suite can ask for:

* ``zookeeper`` (session scope) – a :class:`~hmbclient.testing.LocalZooKeeper` on 127.0.0.1,
  started from Debian's/Apache's ZooKeeper jars (``apt-get install zookeeper`` or
  ``ZOOKEEPER_HOME``); a clear error names both when the jars are missing;
* ``hmb_broker`` (module scope) – one :class:`~hmbclient.broker.EmbeddedBroker` on port 0 in a
  temp dir;
* ``hmb_cluster`` (module scope) – an :class:`~hmbclient.broker.EmbeddedCluster` of 3 brokers
  registered in the ``zookeeper`` fixture;
* ``spark_cluster`` (session scope) – a :class:`~hmbclient.testing.spark.LocalSparkCluster`:
  a Spark standalone master and 2 workers (1 core, 512 MiB each) from the installed pyspark,
  on 127.0.0.1; ``spark_cluster.master_url`` is ``"spark://127.0.0.1:PORT"``;
* ``spark_cluster_session`` (module scope) – a SparkSession on ``spark_cluster`` (driver bound
  to 127.0.0.1, executors running this interpreter, the ``"hmb"`` data source registered),
  returned once both executors run; stopped at the end of the module. PySpark runs one
  SparkContext per process: a module using it must not share the process with an active
  local one (it fails with a clear error rather than silently using that one);
* ``apache_kafka`` (module scope) – an :class:`~hmbclient.testing.ApacheKafka`: one real Kafka
  4.x node (KRaft) on 127.0.0.1 from the jars ``make peers`` fetched (a clear error says to run
  it when they are missing); ``apache_kafka.bootstrap`` is "127.0.0.1:PORT";
* ``apache_kafka_factory`` (function scope) – more Kafka clusters with your own settings
  (``nodes=3``, ``listeners=...``, ``version="0.8.2.2"``), closed at the end of the test;
* ``hmb_broker_factory`` / ``zookeeper_factory`` (function scope) – call them to get more
  servers with your own settings; everything they start is stopped at the end of the test.

Imports are lazy so that loading the plugin costs nothing in suites that never use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = [
    "zookeeper",
    "zookeeper_factory",
    "hmb_broker",
    "hmb_broker_factory",
    "hmb_cluster",
    "spark_cluster",
    "spark_cluster_session",
    "apache_kafka",
    "apache_kafka_factory",
]


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[Any]:
    """A LocalZooKeeper shared by the whole session (``zookeeper.connect`` is "127.0.0.1:PORT")."""
    from hmbclient.testing.zookeeper import LocalZooKeeper

    with LocalZooKeeper() as zk:
        yield zk


@pytest.fixture
def zookeeper_factory() -> Iterator[Callable[..., Any]]:
    """Start extra LocalZooKeeper servers (kwargs go to LocalZooKeeper); stopped after the test."""
    from hmbclient.testing.zookeeper import LocalZooKeeper

    started: list[Any] = []

    def make(**kwargs: Any) -> Any:
        zk = LocalZooKeeper(**kwargs)
        zk.start()
        started.append(zk)
        return zk

    yield make
    for zk in reversed(started):
        zk.close()  # stop the server and remove its temp data dir


@pytest.fixture
def hmb_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """Start extra EmbeddedBrokers (kwargs are BrokerConfig fields); stopped after the test."""
    from hmbclient.broker import EmbeddedBroker

    started: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("log_dir", str(tmp_path_factory.mktemp("hmb-broker")))
        broker = EmbeddedBroker(**kwargs)
        broker.start()
        started.append(broker)
        return broker

    yield make
    for broker in reversed(started):
        broker.stop()


@pytest.fixture(scope="module")
def hmb_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One embedded broker on 127.0.0.1 (``hmb_broker.bootstrap``), shared by a test module."""
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("hmb-broker"))) as broker:
        yield broker


@pytest.fixture(scope="module")
def hmb_cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Three replicating brokers on the session's ZooKeeper, shared by a test module.

    Each module's cluster lives under its own ZooKeeper chroot (``hmb_cluster.zookeeper_connect``
    names it: give that to ZooKeeper-based consumers), so clusters of different modules never
    see each other's brokers, topics or controller. Auto-created topics have 3 replicas.
    """
    import uuid

    from hmbclient.broker import EmbeddedCluster

    with EmbeddedCluster(
        brokers=3,
        zookeeper_connect=f"{zookeeper.connect}/hmb-cluster-{uuid.uuid4().hex[:8]}",
        log_dir=str(tmp_path_factory.mktemp("hmb-cluster")),
        replication_factor=3,
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[Any]:
    """A LocalSparkCluster (master + 2 workers of 1 core / 512 MiB) shared by the session."""
    from hmbclient.testing.spark import LocalSparkCluster

    with LocalSparkCluster(workers=2, cores_per_worker=1, worker_memory="512m",
                           executor_memory="512m") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark_cluster_session(spark_cluster: Any) -> Iterator[Any]:
    """A SparkSession on ``spark_cluster`` with the "hmb" data source, shared by a test module."""
    session = spark_cluster.session("hmbclient-cluster-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def apache_kafka() -> Iterator[Any]:
    """One real Apache Kafka 4.x node (KRaft, PLAINTEXT) shared by a test module."""
    from hmbclient.testing.apache_kafka import ApacheKafka

    with ApacheKafka() as kafka:
        yield kafka


@pytest.fixture
def apache_kafka_factory() -> Iterator[Callable[..., Any]]:
    """Start Apache Kafka clusters (kwargs go to ApacheKafka); closed after the test."""
    from hmbclient.testing.apache_kafka import ApacheKafka

    started: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kafka = ApacheKafka(**kwargs)
        started.append(kafka)
        return kafka.start()

    yield make
    for kafka in reversed(started):
        kafka.close()
