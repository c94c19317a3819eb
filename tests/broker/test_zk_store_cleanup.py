"""A ZooKeeper store that fails half-way through its set-up stops its KazooClient.

``ZkStore.__init__`` starts its client, then makes the broker paths; when making them fails
(here: a chroot whose ACL lets us read only) no store comes back to close, so a client left
started would live (and, once ZooKeeper goes, reconnect) for the rest of the process: the
kazoo reconnect loops seen in the test process of a full run. The broker that could not start
leaves no thread of its own either.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_acl

from hmbclient.broker.broker import Broker
from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.controller.store import ZkStore
from tests.waiting import wait_until


def _kazoo_threads() -> list[threading.Thread]:
    return [
        t for t in threading.enumerate()
        if t.is_alive() and getattr(getattr(t, "_target", None), "__module__", "").startswith("kazoo")
    ]


def _broker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.is_alive() and t.name.startswith(("broker-", "purgatory-"))]


@pytest.fixture
def read_only_chroot(zookeeper: Any) -> Iterator[str]:
    """``host:port/chroot`` of a znode anyone may read and no one may write under."""
    name = f"/read-only-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zookeeper.connect, timeout=10)
    zk.start(timeout=10)
    try:
        zk.create(name, b"", acl=[make_acl("world", "anyone", read=True)])
        yield zookeeper.connect + name
    finally:
        zk.stop()
        zk.close()


def test_a_store_that_cannot_make_its_paths_stops_its_client(read_only_chroot: str) -> None:
    before = set(_kazoo_threads())
    with pytest.raises(NoAuthError):
        ZkStore(read_only_chroot)
    wait_until(lambda: not set(_kazoo_threads()) - before, 10, "the failed store's kazoo threads to end")


def test_a_broker_that_cannot_register_leaves_no_threads(read_only_chroot: str) -> None:
    kazoo_before, broker_before = set(_kazoo_threads()), set(_broker_threads())
    broker = Broker(BrokerConfig(broker_id=0, port=0, host="127.0.0.1", zookeeper_connect=read_only_chroot))
    with pytest.raises(NoAuthError):
        broker.start()
    assert not broker.running
    wait_until(
        lambda: not set(_kazoo_threads()) - kazoo_before and not set(_broker_threads()) - broker_before,
        10,
        "the failed broker's threads to end",
    )
