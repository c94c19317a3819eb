"""Building the broker's listeners and authorizer from a ``BrokerConfig``.

``listeners_from(config, port, store)``: one ``Listener`` per ``listeners`` entry (none given:
one PLAINTEXT listener on ``host.name:port``, as a broker always had); SSL ones get a server
``SSLContext`` (``ssl.certfile``/``ssl.keyfile``; client certificates checked against
``ssl.cafile`` as ``ssl.client.auth`` says); SASL ones the credential store
(``sasl.credentials.file``, else ZooKeeper's ``/config/users``) and the enabled mechanisms.
``authorizer_from(config, store)``: None without ``authorizer.class.name``; otherwise an
``Authorizer`` over ``authorizer.acls.file`` or ZooKeeper's ``/kafka-acl``.

Both raise ``ConfigError`` when a needed store is missing (a SASL listener with neither a
credentials file nor ZooKeeper), so a broker never serves with security half set up.

``ssl.client.auth`` applies to every TLS listener (SSL and SASL_SSL), as in Kafka.

``inter_broker_security(config)``: how this broker connects to the others (replica fetchers,
the controller's channels, controlled shutdown): on the listener ``security.inter.broker.protocol``
names (default: the first listener), which every broker of the cluster must have. Every
listener is registered in ZooKeeper (``/brokers/ids/<id>``, Kafka's version-4 endpoints) and
the other brokers' address on that listener is the one used. TLS there checks the other
broker's certificate against ``ssl.cafile`` and its host name, and presents this broker's own
certificate (so ``ssl.client.auth=required`` works between brokers too); SASL there
authenticates as ``sasl.inter.broker.username`` with ``sasl.mechanism.inter.broker.protocol``.
With an authorizer, that principal needs ClusterAction on the Cluster (or a place in
``super.users``); on a PLAINTEXT inter-broker listener it is ``User:ANONYMOUS``, so limit such
an ACL to the brokers' hosts (``hmb acls add --principal User:ANONYMOUS --operation
ClusterAction --cluster --host 10.0.0.5``).
"""

from __future__ import annotations

import ssl
from typing import Any

from hmbclient.broker.channel import ChannelSecurity
from hmbclient.broker.config import BrokerConfig, parse_listener
from hmbclient.broker.listener import Listener
from hmbclient.broker.security.authorizer import Authorizer, FileAclStore, ZkAclStore
from hmbclient.broker.security.credentials import (
    CredentialStore,
    FileCredentialStore,
    ZkCredentialStore,
)
from hmbclient.errors import ConfigError

__all__ = ["listeners_from", "authorizer_from", "server_ssl_context", "inter_broker_security"]


def _zk_client(store: Any) -> Any:
    return getattr(store, "zk", None)


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The TLS context of SSL and SASL_SSL listeners. Raises ConfigError on unreadable files."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        assert config.ssl_certfile is not None
        ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
        if config.ssl_cafile:
            ctx.load_verify_locations(config.ssl_cafile)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"BrokerConfig: cannot load the TLS certificate or key: {e}") from None
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[config.ssl_client_auth]
    return ctx


def credential_store(config: BrokerConfig, store: Any) -> CredentialStore | None:
    if config.sasl_credentials_file:
        return FileCredentialStore(config.sasl_credentials_file)
    zk = _zk_client(store)
    return ZkCredentialStore(zk) if zk is not None else None


def listeners_from(config: BrokerConfig, port: int, store: Any) -> list[Listener]:
    if not config.listeners:
        return [Listener("PLAINTEXT", config.host, port)]
    out = []
    ctx: ssl.SSLContext | None = None
    for text in config.listeners:
        proto, host, lport = parse_listener(text)
        lst = Listener(proto, host, lport)
        if lst.tls:
            ctx = ctx or server_ssl_context(config)
            lst.ssl_context = ctx
        if lst.sasl:
            creds = credential_store(config, store)
            if creds is None:
                raise ConfigError(f"BrokerConfig: listener {text} needs 'sasl.credentials.file' or 'zookeeper.connect' for its credentials")
            lst.credentials = creds
            lst.mechanisms = config.sasl_enabled_mechanisms
            lst.reauth_ms = config.connections_max_reauth_ms
        out.append(lst)
    return out


def authorizer_from(config: BrokerConfig, store: Any) -> Authorizer | None:
    if not config.authorizer_class_name:
        return None
    acls: FileAclStore | ZkAclStore
    if config.authorizer_acls_file:
        acls = FileAclStore(config.authorizer_acls_file)
    elif _zk_client(store) is not None:
        acls = ZkAclStore(_zk_client(store))
    else:
        raise ConfigError("BrokerConfig: 'authorizer.class.name' needs 'authorizer.acls.file' or 'zookeeper.connect' for the ACLs")
    return Authorizer(acls, config.super_users, config.allow_everyone_if_no_acl_found)


def inter_broker_security(config: BrokerConfig) -> ChannelSecurity | None:
    """TLS and SASL of this broker's channels to the others; None on a PLAINTEXT listener.

    Raises:
        ConfigError: the CA, certificate or key cannot be loaded.
    """
    protocol = config.inter_broker_protocol
    if protocol == "PLAINTEXT":
        return None
    ctx: ssl.SSLContext | None = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            if config.ssl_cafile:
                ctx.load_verify_locations(config.ssl_cafile)
            if config.ssl_certfile:
                ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"BrokerConfig: inter-broker TLS: cannot load ssl.cafile or the broker's certificate: {e}") from None
    return ChannelSecurity(
        protocol,
        ctx,
        config.sasl_mechanism_inter_broker_protocol,
        config.sasl_inter_broker_username,
        config.sasl_inter_broker_password,
    )
