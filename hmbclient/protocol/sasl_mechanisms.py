"""SASL mechanisms, sans-IO: the client side of PLAIN and SCRAM, and the SCRAM key arithmetic
both sides share.

Who uses it: the client's connections (``hmbclient.net``) and a broker talking to the other
brokers of its cluster (``hmbclient.broker.channel``) run the client mechanisms; the broker's
SCRAM server and its credential store (``hmbclient.broker.security``) derive and check keys
with :func:`salted_password` / :func:`scram_keys`. No sockets, no clocks: tokens in, tokens out.

Contract of a client mechanism (:class:`SaslMechanism`):

* ``first()`` is the client's first token; ``step(challenge)`` answers a server token, or
  returns None when this side has nothing more to send; ``done`` says whether the client has
  verified all it needs.
* PLAIN (RFC 4616) is one token ``authzid NUL user NUL password``.
* SCRAM (RFC 5802; SHA-256 per RFC 7677, SHA-512 as Kafka does it; no channel binding, GS2
  header ``n,,``) is client-first, server-first, client-final with the proof, then the
  server-final whose signature must match. A wrong server signature fails: a server that cannot
  prove it knows the credentials is not the one we meant to talk to. A server asking for fewer
  than :data:`MIN_ITERATIONS` is refused (a downgrade would make a stolen exchange cheap to
  attack).
* Every failure is a ``SaslAuthenticationFailedError`` (Kafka error SASL_AUTHENTICATION_FAILED)
  naming the mechanism and the user, never the password, the proof or a key; reprs show the
  mechanism and the user only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Protocol

from hmbclient.errors import BrokerError, ConfigError, ErrorCode, for_code

__all__ = [
    "MIN_ITERATIONS",
    "SCRAM_HASHES",
    "SASL_MECHANISMS",
    "SaslAuthenticationFailedError",
    "SaslMechanism",
    "PlainMechanism",
    "ScramMechanism",
    "client_mechanism",
    "salted_password",
    "scram_keys",
]

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: SCRAM mechanism -> hashlib name.
SCRAM_HASHES: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's minimum SCRAM iteration count, for both mechanisms and both sides.
MIN_ITERATIONS = 4096

#: Kafka error 58 (SASL_AUTHENTICATION_FAILED): wrong password, unknown user, bad server proof.
SaslAuthenticationFailedError = for_code(ErrorCode.SASL_AUTHENTICATION_FAILED)


def salted_password(mechanism: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 ``SaltedPassword = Hi(password, salt, i)`` (PBKDF2-HMAC)."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password, salt, iterations)


def scram_keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """``(client_key, stored_key, server_key)`` of a salted password (RFC 5802 section 3)."""
    h = SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return client_key, hashlib.new(h, client_key).digest(), hmac.new(salted, b"Server Key", h).digest()


class SaslMechanism(Protocol):
    """A client SASL mechanism (see the module docstring)."""

    name: str
    username: str

    @property
    def done(self) -> bool: ...

    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None: ...


def _auth_failed(mechanism: str, username: str, why: str) -> BrokerError:
    return SaslAuthenticationFailedError(f"{mechanism} authentication of user {username!r} failed: {why}")


class PlainMechanism:
    """SASL PLAIN: one token; the broker's answer (empty, or anything) ends it."""

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
    """SCRAM-SHA-256 / SCRAM-SHA-512, client side (``nonce`` fixed only by tests)."""

    def __init__(self, name: str, username: str, password: str, *, nonce: str | None = None) -> None:
        if name not in SCRAM_HASHES:
            raise ConfigError(f"unknown SCRAM mechanism {name!r}")
        self.name = name
        self.username = username
        self._password = password
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
        return hmac.new(key, msg, SCRAM_HASHES[self.name]).digest()

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
        if iterations < MIN_ITERATIONS:
            raise self._fail(f"the server asks for {iterations} iterations, fewer than {MIN_ITERATIONS}")
        salted = salted_password(self.name, self._password.encode(), salt, iterations)
        client_key, stored_key, server_key = scram_keys(self.name, salted)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        client_sig = self._hmac(stored_key, auth_message)
        proof = bytes(x ^ y for x, y in zip(client_key, client_sig, strict=True))
        self._server_signature = self._hmac(server_key, auth_message)
        self._state = 2
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def client_mechanism(name: str, username: str, password: str) -> SaslMechanism:
    """A fresh client mechanism for one authentication exchange.

    Raises:
        ConfigError: ``name`` is not one of :data:`SASL_MECHANISMS`.
    """
    if name == "PLAIN":
        return PlainMechanism(username, password)
    if name in SCRAM_HASHES:
        return ScramMechanism(name, username, password)
    raise ConfigError(f"sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {name!r}")
