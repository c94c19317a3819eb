"""ZooKeeper ACLs cached by the broker: read once per znode, dropped by ZooKeeper's watches, so
an ACL added or removed (by another process, e.g. ``hmb acls``) decides the next request once
the watch fired, and an unchanged one costs no ZooKeeper round trip per request."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from waiting import wait_until

from hmbclient.broker.security.authorizer import Acl, ZkAclStore


@pytest.fixture
def two_sessions(zookeeper: Any) -> Iterator[tuple[KazooClient, KazooClient]]:
    root = f"/aclc-{uuid.uuid4().hex[:8]}"
    boot = KazooClient(hosts=zookeeper.connect)
    boot.start(timeout=10)
    boot.ensure_path(root)
    boot.stop()
    boot.close()
    chroot = zookeeper.connect + root
    clients = [KazooClient(hosts=chroot) for _ in range(2)]
    for c in clients:
        c.start(timeout=10)
    yield clients[0], clients[1]
    for c in clients:
        c.stop()
        c.close()


class _CountingGets:
    """The broker's kazoo client, counting the reads that reach ZooKeeper."""

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._zk, name)
        if name in ("get", "get_children", "exists"):
            def counted(*a: Any, **kw: Any) -> Any:
                self.reads += 1
                return attr(*a, **kw)
            return counted
        return attr


def test_changes_by_another_session_take_effect_and_unchanged_acls_are_not_reread(two_sessions: tuple[KazooClient, KazooClient]) -> None:
    broker_zk, tool_zk = two_sessions
    spy = _CountingGets(broker_zk)
    broker, tool = ZkAclStore(spy), ZkAclStore(tool_zk)
    topic = "orders"
    assert broker.acls_for("Topic", topic) == []
    reads = spy.reads
    for _ in range(5):
        assert broker.acls_for("Topic", topic) == []
    assert spy.reads == reads  # absent ACLs are cached too (an exists watch stands guard)

    write = Acl.make("Topic", topic, "User:alice", "Write")
    tool.add([write])
    wait_until(lambda: broker.acls_for("Topic", topic) == [write], 10, "the added literal ACL")
    prefixed = Acl.make("Topic", "ord", "User:bob", "Read", pattern_type="PREFIXED")
    tool.add([prefixed])
    wait_until(lambda: sorted(map(repr, broker.acls_for("Topic", topic))) == sorted(map(repr, [write, prefixed])), 10,
               "the new prefix")
    wildcard = Acl.make("Topic", "*", "User:carol", "Describe")
    tool.add([wildcard])
    wait_until(lambda: len(broker.acls_for("Topic", topic)) == 3, 10, "the wildcard ACL")
    reads = spy.reads
    broker.acls_for("Topic", topic)
    assert spy.reads == reads

    tool.remove([write, prefixed, wildcard])
    wait_until(lambda: broker.acls_for("Topic", topic) == [], 10, "all removed")
