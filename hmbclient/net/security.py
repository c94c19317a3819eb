"""Client-side security: TLS contexts and SASL mechanisms (sans-IO), used by :mod:`.connection`.

Contract:

* :class:`Security` is what a connection needs: an ``ssl.SSLContext`` (protocols SSL and
  SASL_SSL) and SASL credentials (SASL_PLAINTEXT and SASL_SSL). ``Security.from_config`` builds
  it from any client config carrying the shared security settings (Kafka property names:
  ``security.protocol``, ``ssl.*``, ``sasl.*``); PLAINTEXT gives None, i.e. no security.
* Secrets (``sasl.password``, ``ssl.password``) never appear in a repr, an exception or a log
  line: :class:`Security` shows protocol, mechanism and user only, and every error raised here
  names the mechanism and the user, never the password.
* The mechanisms are sans-IO: ``first()`` is the client's first token, ``step(challenge)``
  answers a server token (or returns None when the exchange is over for this side), ``done``
  says whether the client has verified what it needs. PLAIN (RFC 4616) is one token. SCRAM
  (RFC 5802, SHA-256 per RFC 7677, SHA-512 as Kafka does it) is client-first, server-first,
  client-final with the proof, then the server-final whose signature must match: a wrong
  server signature fails with SaslAuthenticationFailedError, since a server that cannot prove
  it knows the credentials is not the one we meant to talk to.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import ssl
from collections.abc import Callable
from typing import Any, Protocol

from hmbclient.errors import BrokerError, ConfigError, ErrorCode, for_code

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
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: Kafka error 58 (SASL_AUTHENTICATION_FAILED): wrong password, unknown user, bad server proof.
SaslAuthenticationFailedError = for_code(ErrorCode.SASL_AUTHENTICATION_FAILED)
#: Kafka error 33 (UNSUPPORTED_SASL_MECHANISM): the broker does not enable our mechanism.
UnsupportedSaslMechanismError = for_code(ErrorCode.UNSUPPORTED_SASL_MECHANISM)

# Kafka's ScramMechanism minimum: fewer iterations would make a stolen exchange cheap to attack,
# and a server asking for fewer is either broken or trying to downgrade us.
_SCRAM_MIN_ITERATIONS = 4096


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


class SaslMechanism(Protocol):
    """A client SASL mechanism, sans-IO (see the module docstring)."""

    name: str
    username: str

    @property
    def done(self) -> bool: ...

    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None: ...


def _auth_failed(mechanism: str, username: str, why: str) -> BrokerError:
    return SaslAuthenticationFailedError(f"{mechanism} authentication of user {username!r} failed: {why}")


class PlainMechanism:
    """SASL PLAIN: ``authzid NUL user NUL password`` in one token; the broker's empty answer
    (or any answer) ends it."""

    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self.username = username
        self._password = password
        self._done = False

    def __repr__(self) -> str:
        return f"PlainMechanism(user={self.username!r})"

    @property
    def done(self) -> bool:
        return self._done

    def first(self) -> bytes:
        self._done = True
        return b"\x00" + self.username.encode() + b"\x00" + self._password.encode()

    def step(self, challenge: bytes) -> bytes | None:
        return None


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attrs(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        k, eq, v = part.partition("=")
        if eq and len(k) == 1:
            out.setdefault(k, v)
    return out


class ScramMechanism:
    """SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, no channel binding: gs2 header ``n,,``)."""

    def __init__(self, name: str, username: str, password: str, *, nonce: str | None = None) -> None:
        hashes: dict[str, Callable[..., Any]] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
        if name not in hashes:
            raise ConfigError(f"unknown SCRAM mechanism {name!r}")
        self.name = name
        self.username = username
        self._password = password
        self._hash = hashes[name]
        self._hname = name[len("SCRAM-") :].replace("-", "").lower()  # sha256 / sha512
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._state = 0  # 0 first not sent, 1 awaiting server-first, 2 awaiting server-final, 3 done

    def __repr__(self) -> str:
        return f"ScramMechanism({self.name}, user={self.username!r})"

    @property
    def done(self) -> bool:
        return self._state == 3

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def _fail(self, why: str) -> BrokerError:
        return _auth_failed(self.name, self.username, why)

    def first(self) -> bytes:
        self._state = 1
        return ("n,," + self._first_bare).encode()

    def step(self, challenge: bytes) -> bytes | None:
        try:
            text = bytes(challenge).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("the server sent a token that is not UTF-8") from None
        a = _attrs(text)
        if "e" in a:
            raise self._fail(f"the server refused: {a['e']}")
        if self._state == 1:
            return self._client_final(text, a)
        if self._state == 2:
            if "v" not in a:
                raise self._fail("the server's final message carries no signature")
            try:
                sig = base64.b64decode(a["v"], validate=True)
            except ValueError:
                raise self._fail("the server's signature is not base64") from None
            assert self._server_signature is not None
            if not hmac.compare_digest(sig, self._server_signature):
                raise self._fail("the server's signature does not match (the broker does not know this user's credentials)")
            self._state = 3
            return None
        raise self._fail("unexpected token after the exchange ended")

    def _client_final(self, server_first: str, a: dict[str, str]) -> bytes:
        nonce, salt_b64, iters = a.get("r"), a.get("s"), a.get("i")
        if not nonce or salt_b64 is None or not iters:
            raise self._fail("malformed server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise self._fail("the server's nonce does not extend ours")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iters)
        except ValueError:
            raise self._fail("malformed salt or iteration count") from None
        if iterations < _SCRAM_MIN_ITERATIONS:
            raise self._fail(f"the server asks for {iterations} iterations, fewer than {_SCRAM_MIN_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._hname, self._password.encode(), salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = self._hash(client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        client_sig = self._hmac(stored_key, auth_message)
        proof = bytes(x ^ y for x, y in zip(client_key, client_sig, strict=True))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        self._state = 2
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


class Security:
    """TLS and SASL settings of one client, resolved (the SSL context is built once).

    Args:
        protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
        ssl_context: a ready context (else one is built from the ``ssl_*`` arguments).
        sasl_mechanism / sasl_username / sasl_password: the SASL credentials.

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
        if self.sasl_mechanism == "PLAIN":
            return PlainMechanism(self.sasl_username, self._sasl_password)
        return ScramMechanism(self.sasl_mechanism, self.sasl_username, self._sasl_password)

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
