"""Client-side security: TLS contexts and SASL mechanisms (sans-IO), used by :mod:`.connection`.

Contract:

* :class:`Security` is what a connection needs: an ``ssl.SSLContext`` (protocols SSL and
  SASL_SSL) and SASL credentials (SASL_PLAINTEXT and SASL_SSL). ``Security.from_config`` builds
  it from any client config carrying the shared security settings (Kafka property names:
  ``security.protocol``, ``ssl.*``, ``sasl.*``); PLAINTEXT gives None, i.e. no security.
* Secrets (``sasl.password``, ``ssl.password``) never appear in a repr, an exception or a log
  line: :class:`Security` shows protocol, mechanism and user only, and every error raised here
  names the mechanism and the user, never the password.
* The mechanisms themselves (PLAIN, SCRAM-SHA-256/512) are sans-IO and live in
  :mod:`hmbclient.protocol.sasl_mechanisms`, shared with the broker's own connections to the
  other brokers; they are re-exported here under their public names.
"""

from __future__ import annotations

import ssl
from typing import Any

from hmbclient.errors import ConfigError
from hmbclient.protocol.sasl import UnsupportedSaslMechanismError
from hmbclient.protocol.sasl_mechanisms import (
    SASL_MECHANISMS,
    PlainMechanism,
    SaslAuthenticationFailedError,
    SaslMechanism,
    ScramMechanism,
    client_mechanism,
)

__all__ = [
    "SECURITY_PROTOCOLS",
    "SASL_MECHANISMS",
    "Security",
    "SaslMechanism",
    "PlainMechanism",
    "ScramMechanism",
    "build_ssl_context",
    "describe_tls_error",
    "SaslAuthenticationFailedError",
    "UnsupportedSaslMechanismError",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def build_ssl_context(
    *,
    cafile: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    password: str | None = None,
    check_hostname: bool = True,
    crlfile: str | None = None,
) -> ssl.SSLContext:
    """A client TLS context: verifies the broker's certificate (against ``cafile``, else the
    system's trust store) and, with ``check_hostname``, that it names the host we dialled.

    ``certfile``/``keyfile`` present a client certificate (mutual TLS); ``password`` unlocks an
    encrypted key; ``crlfile`` adds a revocation list checked for the broker's certificate.

    Raises:
        ConfigError: a file cannot be read or the key does not match (names the file only).
    """
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = bool(check_hostname)
    try:
        if cafile:
            ctx.load_verify_locations(cafile=cafile)
        if certfile:
            ctx.load_cert_chain(certfile, keyfile or None, password=password or None)
        if crlfile:
            ctx.load_verify_locations(cafile=crlfile)
            ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    except (OSError, ssl.SSLError) as e:
        # The ssl module's messages name files and OpenSSL reasons, never the key password.
        what = getattr(e, "strerror", None) or getattr(e, "reason", None) or type(e).__name__
        raise ConfigError(
            f"TLS settings: cannot load ssl.cafile={cafile!r} ssl.certfile={certfile!r} "
            f"ssl.keyfile={keyfile!r} ssl.crlfile={crlfile!r}: {what}"
        ) from None
    return ctx


def describe_tls_error(e: BaseException, host: str) -> str:
    """A human sentence for a failed TLS handshake: what was wrong with the broker's certificate
    (untrusted, self-signed, expired, issued for another host) or the TLS exchange."""
    if isinstance(e, ssl.SSLCertVerificationError):
        msg = e.verify_message or str(e)
        if "Hostname mismatch" in msg or "IP address mismatch" in msg:
            return f"TLS: the broker's certificate does not name {host!r} ({msg}); set ssl.check.hostname=false only for testing"
        if "expired" in msg:
            return f"TLS: the broker's certificate has expired ({msg})"
        if "self-signed" in msg or "self signed" in msg or "unable to get local issuer" in msg:
            return f"TLS: the broker's certificate is not trusted ({msg}); give its CA as ssl.cafile"
        return f"TLS: the broker's certificate was rejected ({msg})"
    reason = getattr(e, "reason", None)
    if reason == "WRONG_VERSION_NUMBER":
        return "TLS: the broker did not answer with TLS (wrong version number): is this a plaintext listener?"
    return f"TLS handshake failed: {reason or e}"


class Security:
    """TLS and SASL settings of one client, resolved (the SSL context is built once).

    Args:
        protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
        ssl_context: a ready context (else one is built from the ``ssl_*`` arguments).
        sasl_mechanism: the SASL mechanism.
        sasl_username: the SASL user.
        sasl_password: that user's password.

    Raises:
        ConfigError: an unknown protocol or mechanism, or SASL without user and password.
    """

    __slots__ = ("protocol", "ssl_context", "sasl_mechanism", "sasl_username", "_sasl_password")

    def __init__(
        self,
        protocol: str = "PLAINTEXT",
        *,
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        ssl_crlfile: str | None = None,
        sasl_mechanism: str = "PLAIN",
        sasl_username: str | None = None,
        sasl_password: str | None = None,
    ) -> None:
        protocol = protocol.strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {protocol!r}")
        mechanism = sasl_mechanism.strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}")
        self.protocol = protocol
        self.sasl_mechanism = mechanism
        self.sasl_username = sasl_username
        self._sasl_password = sasl_password
        if self.sasl and (not sasl_username or sasl_password is None):
            raise ConfigError(f"security.protocol={protocol} needs sasl.username and sasl.password")
        self.ssl_context: ssl.SSLContext | None = None
        if self.tls:
            self.ssl_context = ssl_context or build_ssl_context(
                cafile=ssl_cafile,
                certfile=ssl_certfile,
                keyfile=ssl_keyfile,
                password=ssl_password,
                check_hostname=ssl_check_hostname,
                crlfile=ssl_crlfile,
            )

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __repr__(self) -> str:
        if not self.sasl:
            return f"Security({self.protocol})"
        return f"Security({self.protocol}, {self.sasl_mechanism}, user={self.sasl_username!r})"

    def mechanism(self) -> SaslMechanism:
        """A fresh client mechanism for one authentication exchange."""
        assert self.sasl_username is not None and self._sasl_password is not None
        return client_mechanism(self.sasl_mechanism, self.sasl_username, self._sasl_password)

    @classmethod
    def from_config(cls, cfg: Any) -> Security | None:
        """From a config with the shared security settings; None for PLAINTEXT."""
        protocol = getattr(cfg, "security_protocol", "PLAINTEXT")
        if protocol == "PLAINTEXT":
            return None
        return cls(
            protocol,
            ssl_cafile=cfg.ssl_cafile,
            ssl_certfile=cfg.ssl_certfile,
            ssl_keyfile=cfg.ssl_keyfile,
            ssl_password=cfg.ssl_password,
            ssl_check_hostname=cfg.ssl_check_hostname,
            ssl_crlfile=cfg.ssl_crlfile,
            sasl_mechanism=cfg.sasl_mechanism,
            sasl_username=cfg.sasl_username,
            sasl_password=cfg.sasl_password,
        )
