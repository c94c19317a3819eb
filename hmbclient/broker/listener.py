"""A listener of the broker: one listening socket's protocol, address and security settings.

Plain data, below both the socket server that opens it (``server``) and the security set-up
that makes it from the configuration (``security.setup``), so neither imports the other.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from hmbclient.broker.security.credentials import CredentialStore

__all__ = ["Listener"]


@dataclass
class Listener:
    """One listening socket: ``protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) on
    ``host:port`` (port 0: ephemeral, the bound port is written back on start).

    ``ssl_context`` is required for SSL and SASL_SSL; ``credentials`` and ``mechanisms`` for
    the SASL ones.
    """

    protocol: str = "PLAINTEXT"
    host: str = "127.0.0.1"
    port: int = 0
    ssl_context: ssl.SSLContext | None = None
    credentials: CredentialStore | None = None
    mechanisms: tuple[str, ...] = ()
    #: ``connections.max.reauth.ms``: SASL sessions last this long (0: for ever), told to
    #: SaslAuthenticate v1 clients, which re-authenticate before it ends (KIP-368)
    reauth_ms: int = 0

    @property
    def name(self) -> str:
        return self.protocol

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")
