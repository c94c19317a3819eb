"""SCRAM salted credentials in Kafka's format, kept in ZooKeeper or in a file.

A credential is what a broker keeps instead of a password (RFC 5802 section 3):
``salt``, ``stored_key = H(HMAC(SaltedPassword, "Client Key"))``,
``server_key = HMAC(SaltedPassword, "Server Key")`` and ``iterations``, where
``SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)``. Its text form is Kafka's
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.

Stores (both hold only that text form, never a password):

* ZooKeeper: ``/config/users/<name>`` holds ``{"version":1,"config":{"SCRAM-SHA-256": "..."}}``
  as Kafka's ``kafka-configs --entity-type users`` writes it (plus a change notification under
  ``/config/changes`` so a real Kafka broker on the same ZooKeeper notices).
* A JSON file ``{"<name>": {"SCRAM-SHA-256": "...", "SCRAM-SHA-512": "..."}}`` written
  atomically with mode 0600.

Both are read on every lookup, so a user added or removed takes effect for the next
authentication without a broker restart.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from hmbclient.protocol.sasl_mechanisms import (
    MIN_ITERATIONS,
    SCRAM_HASHES,
    salted_password,
    scram_keys,
)

__all__ = [
    "SCRAM_MECHANISMS",
    "ScramCredential",
    "CredentialStore",
    "FileCredentialStore",
    "ZkCredentialStore",
    "make_credential",
    "salted_password",
]

#: mechanism -> hashlib name (the one table, shared with the client mechanisms).
SCRAM_MECHANISMS = SCRAM_HASHES


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Parse Kafka's text form. Raises ValueError when a field is missing or bad."""
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as e:
            raise ValueError(f"not a SCRAM credential: missing or bad {e}") from None

    def __repr__(self) -> str:  # keys are secrets of a kind: never in logs
        return f"ScramCredential(iterations={self.iterations})"


def keys_from_salted(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    """``(stored_key, server_key)`` of a salted password: what the broker keeps."""
    _, stored, server = scram_keys(mechanism, salted)
    return stored, server


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    """A fresh salted credential for ``password``.

    Raises:
        ValueError: an unknown mechanism or too few iterations.
    """
    if mechanism not in SCRAM_MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = salt if salt is not None else secrets.token_bytes(32)
    stored, server = keys_from_salted(mechanism, salted_password(mechanism, password.encode(), salt, iterations))
    return ScramCredential(salt, stored, server, iterations)


def check_password(mechanism: str, credential: ScramCredential, password: bytes) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    stored, _ = keys_from_salted(mechanism, salted_password(mechanism, password, credential.salt, credential.iterations))
    return hmac.compare_digest(stored, credential.stored_key)


class CredentialStore(Protocol):
    def credentials(self, user: str) -> dict[str, ScramCredential]:
        """mechanism -> credential of ``user`` (empty: unknown user)."""

    def users(self) -> dict[str, list[str]]:
        """user -> mechanisms with a credential."""

    def put(self, user: str, creds: dict[str, ScramCredential]) -> None:
        """Set (add or replace) credentials of ``user``; other mechanisms are kept."""

    def remove(self, user: str) -> bool:
        """Delete every credential of ``user``; False when there was none."""


def _parse_config(config: dict[str, Any]) -> dict[str, ScramCredential]:
    out = {}
    for mech, text in config.items():
        if mech in SCRAM_MECHANISMS and isinstance(text, str):
            try:
                out[mech] = ScramCredential.from_text(text)
            except ValueError:
                continue
    return out


class FileCredentialStore:
    """Credentials in a JSON file (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, data: dict[str, dict[str, str]]) -> None:
        d = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=".credentials-", dir=d)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        entry = self._load().get(user)
        return _parse_config(entry) if isinstance(entry, dict) else {}

    def users(self) -> dict[str, list[str]]:
        return {u: sorted(c) for u, c in sorted(self._load().items()) if isinstance(c, dict)}

    def put(self, user: str, creds: dict[str, ScramCredential]) -> None:
        with self._lock:
            data = self._load()
            entry = data.setdefault(user, {})
            entry.update({m: c.to_text() for m, c in creds.items()})
            self._save(data)

    def remove(self, user: str) -> bool:
        with self._lock:
            data = self._load()
            if data.pop(user, None) is None:
                return False
            self._save(data)
            return True


class ZkCredentialStore:
    """Credentials in ZooKeeper under ``/config/users`` (Kafka's layout).

    Args:
        zk: a started ``KazooClient`` (chroot included in its hosts), owned by the caller.
    """

    USERS = "/config/users"
    CHANGES = "/config/changes"

    def __init__(self, zk: Any) -> None:
        self.zk = zk

    def _read(self, user: str) -> dict[str, Any]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"{self.USERS}/{user}")
        except NoNodeError:
            return {}
        try:
            doc = json.loads(data.decode("utf-8")) if data else {}
        except ValueError:
            return {}
        config = doc.get("config") if isinstance(doc, dict) else None
        return config if isinstance(config, dict) else {}

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        return _parse_config(self._read(user))

    def users(self) -> dict[str, list[str]]:
        from kazoo.exceptions import NoNodeError

        try:
            names = self.zk.get_children(self.USERS)
        except NoNodeError:
            return {}
        out = {}
        for name in sorted(names):
            mechs = sorted(m for m in self._read(name) if m in SCRAM_MECHANISMS)
            if mechs:
                out[name] = mechs
        return out

    def _notify(self, user: str) -> None:
        self.zk.ensure_path(self.CHANGES)
        body = json.dumps({"version": 2, "entity_path": f"users/{user}"}).encode()
        self.zk.create(f"{self.CHANGES}/config_change_", body, sequence=True)

    def put(self, user: str, creds: dict[str, ScramCredential]) -> None:
        config = self._read(user)
        config.update({m: c.to_text() for m, c in creds.items()})
        body = json.dumps({"version": 1, "config": config}).encode()
        path = f"{self.USERS}/{user}"
        if self.zk.exists(path):
            self.zk.set(path, body)
        else:
            self.zk.create(path, body, makepath=True)
        self._notify(user)

    def remove(self, user: str) -> bool:
        config = self._read(user)
        if not any(m in SCRAM_MECHANISMS for m in config):
            return False
        rest = {m: v for m, v in config.items() if m not in SCRAM_MECHANISMS}
        self.zk.set(f"{self.USERS}/{user}", json.dumps({"version": 1, "config": rest}).encode())
        self._notify(user)
        return True
