"""Kafka's ACL model and the broker's authorizer (``SimpleAclAuthorizer`` semantics).

An ACL is ``(principal, host, operation, permission)`` on a resource pattern
``(resource type, name, pattern type)``: LITERAL matches that name (``*`` matches every
name), PREFIXED every name starting with it. ``authorize(principal, host, operation, type,
name)``:

1. a super user (``super.users``) is allowed everything;
2. the ACLs whose pattern matches the resource and whose principal (``User:*`` is anyone) and
   host (``*`` is any host) match the request are collected;
3. if none exist for the resource at all, ``allow.everyone.if.no.acl.found`` decides;
4. a matching DENY wins over any ALLOW; otherwise an ALLOW of the operation (or ``All``)
   allows. Describe is implied by Read, Write, Delete and Alter; DescribeConfigs by
   AlterConfigs (as in Kafka).

Stores: ZooKeeper in Kafka's layout (``/kafka-acl/<ResourceType>/<name>`` for literal
patterns, ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` for prefixed ones, each
``{"version":1,"acls":[{"principal","permissionType","operation","host"}]}``) or a JSON file
``{"acls": [{"resourceType","resourceName","patternType", ...}]}``. A change takes effect
for the next request: the file is read when asked; ZooKeeper's ACLs are cached per znode and
each entry dropped by a ZooKeeper watch on that znode (data change, creation, deletion, new
prefixes), and all of them when the session is suspended or lost, so no request is decided on
an ACL ZooKeeper no longer has once the watch has fired.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Acl", "AclStore", "Authorizer", "FileAclStore", "ZkAclStore", "CLUSTER_NAME", "normalize"]

CLUSTER_NAME = "kafka-cluster"
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
OPERATIONS = (
    "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
    "DescribeConfigs", "AlterConfigs", "IdempotentWrite",
)
PATTERN_TYPES = ("LITERAL", "PREFIXED")
PERMISSIONS = ("Allow", "Deny")

_IMPLIES = {
    "Describe": ("Describe", "Read", "Write", "Delete", "Alter"),
    "DescribeConfigs": ("DescribeConfigs", "AlterConfigs"),
}


def normalize(value: str, choices: tuple[str, ...], what: str) -> str:
    """``value`` spelled as in ``choices`` (case and ``_`` insensitive). Raises ValueError."""
    key = value.replace("_", "").lower()
    for c in choices:
        if c.replace("_", "").lower() == key:
            return c
    raise ValueError(f"unknown {what} {value!r} (one of {', '.join(choices)})")


@dataclass(frozen=True)
class Acl:
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str

    @classmethod
    def make(cls, resource_type: str, resource_name: str, principal: str, operation: str,
             permission: str = "Allow", host: str = "*", pattern_type: str = "LITERAL") -> Acl:
        """A validated ACL (names in any case). Raises ValueError."""
        if ":" not in principal:
            raise ValueError(f"principal {principal!r} must be TYPE:NAME, e.g. User:alice")
        rt = normalize(resource_type, RESOURCE_TYPES, "resource type")
        name = CLUSTER_NAME if rt == "Cluster" else resource_name
        if not name:
            raise ValueError("resource name must not be empty")
        return cls(rt, name, normalize(pattern_type, PATTERN_TYPES, "pattern type"), principal, host or "*",
                   normalize(operation, OPERATIONS, "operation"), normalize(permission, PERMISSIONS, "permission type"))

    def entry(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": self.permission, "operation": self.operation, "host": self.host}

    def to_json(self) -> dict[str, str]:
        return {"resourceType": self.resource_type, "resourceName": self.resource_name, "patternType": self.pattern_type, **self.entry()}

    @classmethod
    def from_json(cls, d: dict[str, Any], resource_type: str | None = None, name: str | None = None, pattern: str | None = None) -> Acl:
        return cls.make(
            resource_type or d["resourceType"], name if name is not None else d["resourceName"], d["principal"],
            d["operation"], d.get("permissionType", "Allow"), d.get("host", "*"), pattern or d.get("patternType", "LITERAL"),
        )

    def matches_resource(self, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == "PREFIXED":
            return name.startswith(self.resource_name)
        return self.resource_name in ("*", name)

    def __str__(self) -> str:
        return (f"{self.principal} has {self.permission} permission for operations: {self.operation} from hosts: "
                f"{self.host} on {self.resource_type}:{self.pattern_type}:{self.resource_name}")


class AclStore(Protocol):
    def acls_for(self, resource_type: str, name: str) -> list[Acl]:
        """Every ACL whose pattern may match the resource (literal, wildcard, prefixed)."""

    def all(self) -> list[Acl]: ...

    def add(self, acls: list[Acl]) -> None: ...

    def remove(self, acls: list[Acl]) -> int: ...


class FileAclStore:
    """ACLs in a JSON file (cached on its modification time and size)."""

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int], list[Acl]] | None = None

    def all(self) -> list[Acl]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._cache
        if cached is not None and cached[0] == stamp:
            return cached[1]
        with open(self.path, encoding="utf-8") as f:
            doc = json.load(f)
        acls = [Acl.from_json(d) for d in (doc.get("acls", []) if isinstance(doc, dict) else [])]
        self._cache = (stamp, acls)
        return acls

    def acls_for(self, resource_type: str, name: str) -> list[Acl]:
        return [a for a in self.all() if a.matches_resource(resource_type, name)]

    def _save(self, acls: list[Acl]) -> None:
        d = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=".acls-", dir=d)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"version": 1, "acls": [a.to_json() for a in acls]}, f, indent=1)
        os.replace(tmp, self.path)
        self._cache = None

    def add(self, acls: list[Acl]) -> None:
        with self._lock:
            cur = self.all()
            self._save(cur + [a for a in dict.fromkeys(acls) if a not in cur])

    def remove(self, acls: list[Acl]) -> int:
        with self._lock:
            cur = self.all()
            kept = [a for a in cur if a not in acls]
            self._save(kept)
            return len(cur) - len(kept)


class ZkAclStore:
    """ACLs in ZooKeeper, Kafka's layout (see the module docstring).

    Args:
        zk: a started ``KazooClient``, owned by the caller.
    """

    LITERAL_ROOT = "/kafka-acl"
    PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
    CHANGES = {"LITERAL": "/kafka-acl-changes", "PREFIXED": "/kafka-acl-extended-changes"}

    def __init__(self, zk: Any) -> None:
        self.zk = zk
        # Read-through cache of the authorizer's lookups: znode path -> ACLs (a resource) or
        # child names (a prefix directory). ``_generation`` counts the invalidations of a path,
        # so an answer read before a watch fired is not cached after it.
        self._cache: dict[str, Any] = {}
        self._generation: dict[str, int] = {}
        self._cache_lock = threading.Lock()
        zk.add_listener(self._on_session)

    def _on_session(self, state: Any) -> None:
        if str(state) != "CONNECTED":  # SUSPENDED / LOST: watches may be gone
            with self._cache_lock:
                for path in self._cache:
                    self._generation[path] = self._generation.get(path, 0) + 1
                self._cache.clear()

    def _forget(self, path: str) -> None:
        with self._cache_lock:
            self._cache.pop(path, None)
            self._generation[path] = self._generation.get(path, 0) + 1

    def _cached(self, path: str, read: Any) -> Any:
        """``read(watch)``'s answer for ``path``, from the cache while no watch fired."""
        with self._cache_lock:
            if path in self._cache:
                return self._cache[path]
            generation = self._generation.get(path, 0)
        value = read(lambda _event: self._forget(path))
        with self._cache_lock:
            if self._generation.get(path, 0) == generation:
                self._cache[path] = value
        return value

    def _watched_acls(self, pattern: str, rtype: str, name: str) -> list[Acl]:
        from kazoo.exceptions import NoNodeError

        path = f"{self._root(pattern)}/{rtype}/{name}"

        def read(watch: Any) -> list[Acl]:
            try:
                data, _ = self.zk.get(path, watch=watch)
            except NoNodeError:
                if self.zk.exists(path, watch=watch) is not None:
                    return self._read(pattern, rtype, name)[0]  # created just now: not cached long
                return []
            return self._parse(data, pattern, rtype, name)

        return list(self._cached(path, read))

    def _watched_children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        def read(watch: Any) -> list[str]:
            try:
                return list(self.zk.get_children(path, watch=watch))
            except NoNodeError:
                if self.zk.exists(path, watch=watch) is not None:
                    return self._children(path)
                return []

        return list(self._cached(path, read))

    def _root(self, pattern: str) -> str:
        return self.LITERAL_ROOT if pattern == "LITERAL" else self.PREFIXED_ROOT

    def _read(self, pattern: str, rtype: str, name: str) -> tuple[list[Acl], Any]:
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self.zk.get(f"{self._root(pattern)}/{rtype}/{name}")
        except NoNodeError:
            return [], None
        return self._parse(data, pattern, rtype, name), stat

    @staticmethod
    def _parse(data: bytes, pattern: str, rtype: str, name: str) -> list[Acl]:
        try:
            doc = json.loads(data.decode("utf-8")) if data else {}
            return [Acl.from_json(d, rtype, name, pattern) for d in doc.get("acls", [])]
        except (ValueError, KeyError, AttributeError):
            return []

    def _children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError

        try:
            return list(self.zk.get_children(path))
        except NoNodeError:
            return []

    def acls_for(self, resource_type: str, name: str) -> list[Acl]:
        out = self._watched_acls("LITERAL", resource_type, name)
        if name != "*":
            out += self._watched_acls("LITERAL", resource_type, "*")
        for prefix in self._watched_children(f"{self.PREFIXED_ROOT}/{resource_type}"):
            if name.startswith(prefix):
                out += self._watched_acls("PREFIXED", resource_type, prefix)
        return out

    def all(self) -> list[Acl]:
        out: list[Acl] = []
        for pattern in PATTERN_TYPES:
            root = self._root(pattern)
            for rtype in self._children(root):
                if rtype in RESOURCE_TYPES:
                    for name in self._children(f"{root}/{rtype}"):
                        out += self._read(pattern, rtype, name)[0]
        return out

    def _write(self, pattern: str, rtype: str, name: str, change: Any) -> int:
        from kazoo.exceptions import BadVersionError, NodeExistsError

        path = f"{self._root(pattern)}/{rtype}/{name}"
        while True:
            cur, stat = self._read(pattern, rtype, name)
            new = change(cur)
            body = json.dumps({"version": 1, "acls": [a.entry() for a in new]}).encode()
            try:
                if stat is None:
                    if not new:
                        return 0
                    self.zk.create(path, body, makepath=True)
                else:
                    self.zk.set(path, body, version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue  # a concurrent writer: read again
            self.zk.ensure_path(self.CHANGES[pattern])
            self.zk.create(f"{self.CHANGES[pattern]}/acl_changes_", f"{rtype}:{name}".encode(), sequence=True)
            return len(cur) - len(new)

    def add(self, acls: list[Acl]) -> None:
        for (pattern, rtype, name), group in _grouped(acls).items():
            self._write(pattern, rtype, name, lambda cur, g=group: cur + [a for a in dict.fromkeys(g) if a not in cur])

    def remove(self, acls: list[Acl]) -> int:
        n = 0
        for (pattern, rtype, name), group in _grouped(acls).items():
            n += self._write(pattern, rtype, name, lambda cur, g=group: [a for a in cur if a not in g])
        return n


def _grouped(acls: list[Acl]) -> dict[tuple[str, str, str], list[Acl]]:
    out: dict[tuple[str, str, str], list[Acl]] = {}
    for a in acls:
        out.setdefault((a.pattern_type, a.resource_type, a.resource_name), []).append(a)
    return out


class Authorizer:
    """Decides ``(principal, host, operation, resource)`` against an AclStore.

    Args:
        store: where the ACLs are.
        super_users: principals allowed everything (e.g. ``User:admin``).
        allow_everyone_if_no_acl_found: allow a resource that has no ACL at all.
    """

    def __init__(self, store: AclStore, super_users: tuple[str, ...] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def authorize(self, principal: str, host: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self.store.acls_for(resource_type, CLUSTER_NAME if resource_type == "Cluster" else name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        relevant = [a for a in acls if a.principal in (principal, "User:*") and a.host in (host, "*")]
        if any(a.permission == "Deny" and a.operation in ("All", operation) for a in relevant):
            return False
        ops = _IMPLIES.get(operation, (operation,))
        return any(a.permission == "Allow" and (a.operation == "All" or a.operation in ops) for a in relevant)

    def allows_any(self, principal: str, host: str, operation: str, resource_type: str) -> bool:
        """Whether some ALLOW of ``operation`` on some ``resource_type`` resource exists for the
        principal (Kafka 3's rule that Write on any topic implies IdempotentWrite)."""
        if principal in self.super_users:
            return True
        return any(
            a.resource_type == resource_type and a.permission == "Allow" and a.operation in ("All", operation)
            and a.principal in (principal, "User:*") and a.host in (host, "*")
            for a in self.store.all()
        )

