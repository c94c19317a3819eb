"""The work behind ``hmb users`` and ``hmb acls``: open a credential or ACL store (a file, or
ZooKeeper in Kafka's layout) and change or list it.

``open_store(kind, path=..., zookeeper=...)`` is a context manager yielding the store; a
ZooKeeper client it opens is closed on exit. Passwords are turned into salted SCRAM
credentials here and never written anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hmbclient.broker.security.authorizer import FileAclStore, ZkAclStore
from hmbclient.broker.security.credentials import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    FileCredentialStore,
    ZkCredentialStore,
    make_credential,
)

__all__ = ["open_store", "add_user"]


@contextmanager
def _zk(connect: str, timeout_s: float = 10.0) -> Iterator[Any]:
    from kazoo.client import KazooClient

    hosts, slash, chroot = connect.partition("/")
    if slash:
        # The chroot may not exist yet on a fresh ZooKeeper: make it, as a broker would.
        root = KazooClient(hosts=hosts, timeout=timeout_s)
        root.start(timeout=timeout_s)
        try:
            root.ensure_path("/" + chroot)
        finally:
            root.stop()
            root.close()
    zk = KazooClient(hosts=connect, timeout=timeout_s)
    zk.start(timeout=timeout_s)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


@contextmanager
def open_store(kind: str, *, path: str | None = None, zookeeper: str | None = None) -> Iterator[Any]:
    """A credential (``kind="users"``) or ACL (``kind="acls"``) store in ``path`` or ZooKeeper.

    Raises:
        ValueError: neither or both of ``path`` and ``zookeeper``.
    """
    if (path is None) == (zookeeper is None):
        raise ValueError("name exactly one of a file or a ZooKeeper")
    if path is not None:
        yield FileCredentialStore(path) if kind == "users" else FileAclStore(path)
        return
    assert zookeeper is not None
    with _zk(zookeeper) as zk:
        yield ZkCredentialStore(zk) if kind == "users" else ZkAclStore(zk)


def add_user(store: Any, name: str, password: str, mechanisms: tuple[str, ...] = tuple(SCRAM_MECHANISMS), iterations: int = MIN_ITERATIONS) -> None:
    """Store salted credentials of ``name`` for ``mechanisms``. Raises ValueError on a bad name,
    an empty password or an unknown mechanism."""
    if not name or any(c in name for c in "/\0") or name in (".", ".."):
        raise ValueError(f"invalid user name {name!r}")
    if not password:
        raise ValueError("the password must not be empty")
    store.put(name, {m: make_credential(m, password, iterations) for m in mechanisms})
