"""Broker-side security: SCRAM credentials, SASL server mechanisms, the ACL authorizer.

The network layer (``hmbclient.broker.server``) authenticates each connection (TLS client
certificate and/or SASL) before any request reaches ``KafkaApis``; the resulting ``Session``
(principal, client host, listener) travels with every request of the connection, and
``KafkaApis`` asks the ``Authorizer`` about it at the top of each handler.
"""

from __future__ import annotations

from dataclasses import dataclass

from hmbclient.broker.security.authorizer import Acl, Authorizer, FileAclStore, ZkAclStore
from hmbclient.broker.security.credentials import (
    FileCredentialStore,
    ScramCredential,
    ZkCredentialStore,
    make_credential,
)

__all__ = [
    "ANONYMOUS",
    "Acl",
    "Authorizer",
    "FileAclStore",
    "FileCredentialStore",
    "ScramCredential",
    "Session",
    "ZkAclStore",
    "ZkCredentialStore",
    "make_credential",
]

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class Session:
    """Who sent a request: ``principal`` (``User:<name>``), the client's ``host`` address, the
    ``listener`` name (e.g. ``SASL_SSL``) the connection came in on, and ``advertised``: this
    broker's address on that listener when it is not the registered (first) one."""

    principal: str
    host: str
    listener: str = "PLAINTEXT"
    advertised: tuple[str, int] | None = None
