"""Shared by the examples: use the servers named in the environment, or start embedded ones.

``HMB_BROKERS=host:port[,host:port]`` and ``HMB_ZOOKEEPER=host:port`` point an example at
existing servers; without them it starts what it needs in a temp dir and stops it at the end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def brokers(num_partitions: int = 4) -> Iterator[str]:
    """Yield a bootstrap string: $HMB_BROKERS, or a fresh EmbeddedBroker's."""
    if os.environ.get("HMB_BROKERS"):
        yield os.environ["HMB_BROKERS"]
        return
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, num_partitions=num_partitions) as broker:
        yield broker.bootstrap


@contextlib.contextmanager
def cluster(num_partitions: int = 4) -> Iterator[tuple[str, str]]:
    """Yield (bootstrap, zookeeper_connect): $HMB_BROKERS/$HMB_ZOOKEEPER, or embedded ones."""
    if os.environ.get("HMB_BROKERS") and os.environ.get("HMB_ZOOKEEPER"):
        yield os.environ["HMB_BROKERS"], os.environ["HMB_ZOOKEEPER"]
        return
    from hmbclient.broker import EmbeddedCluster
    from hmbclient.testing import LocalZooKeeper

    with LocalZooKeeper() as zk, EmbeddedCluster(
        brokers=3, zookeeper_connect=zk.connect, num_partitions=num_partitions
    ) as c:
        yield c.bootstrap, zk.connect
