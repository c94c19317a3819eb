"""Server side of the SASL mechanisms the broker offers: PLAIN and SCRAM-SHA-256/512.

These are the mechanisms only; the exchange around them (SaslHandshake, SaslAuthenticate, raw
v0 tokens, ILLEGAL_SASL_STATE, KIP-368 re-authentication and session expiry) is the sans-IO
:class:`hmbclient.protocol.sasl.SaslServerExchange`, which the processor drives and which makes
these through :func:`new_sasl_server`.

One ``SaslServer`` per connection and authentication: ``evaluate(token)`` takes the client's
next token and returns the server's answer; ``complete`` turns True on success, with ``user``
the authenticated name. Any failure raises ``SaslAuthenticationFailed`` whose message is the
same for an unknown user and a wrong password (an attacker must not learn which names exist)
and never contains the password, the proof or a key.

PLAIN (RFC 4616) is checked against the same salted SCRAM credential the broker keeps: the
password is salted with the stored salt and iterations and compared to ``stored_key``, so no
plaintext password is ever stored. SCRAM follows RFC 5802 / RFC 7677 without channel binding
(the client's GS2 header must be ``n,,``; ``y,,`` is accepted too).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from hmbclient.broker.security.credentials import (
    SCRAM_MECHANISMS,
    CredentialStore,
    ScramCredential,
    check_password,
)
from hmbclient.protocol.sasl import SaslAuthenticationFailed

__all__ = ["SUPPORTED_MECHANISMS", "SaslAuthenticationFailed", "SaslServer", "new_sasl_server"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslServer:
    mechanism = ""

    def __init__(self, store: CredentialStore) -> None:
        self.store = store
        self.complete = False
        self.user: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        raise NotImplementedError


def _invalid(mechanism: str) -> SaslAuthenticationFailed:
    return SaslAuthenticationFailed(f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}")


class PlainServer(SaslServer):
    mechanism = "PLAIN"

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("PLAIN: authentication already complete")
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationFailed("PLAIN: expected authzid NUL authcid NUL password")
        authzid, authcid, password = parts
        try:
            user = authcid.decode("utf-8")
            authz = authzid.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("PLAIN: user name is not UTF-8") from None
        if not user or not password:
            raise SaslAuthenticationFailed("PLAIN: user name and password must not be empty")
        if authz and authz != user:
            raise SaslAuthenticationFailed("PLAIN: authorization id must be empty or the user name")
        creds = self.store.credentials(user)
        # Prefer the strongest hash; any stored mechanism proves the password.
        for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = creds.get(mech)
            if cred is not None:
                if check_password(mech, cred, password):
                    self.complete, self.user = True, user
                    return b""
                break
        raise _invalid(self.mechanism)


def _attrs(msg: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in msg.split(","):
        if len(item) < 2 or item[1] != "=":
            raise SaslAuthenticationFailed(f"SCRAM: malformed attribute {item[:16]!r}")
        out.setdefault(item[0], item[2:])
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise SaslAuthenticationFailed("SCRAM: invalid user name encoding")
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer(SaslServer):
    def __init__(self, store: CredentialStore, mechanism: str) -> None:
        super().__init__(store)
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._step = 0
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce = ""
        self._cred: ScramCredential | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            msg = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed("SCRAM: message is not UTF-8") from None
        if self._step == 0:
            return self._first(msg)
        if self._step == 1:
            return self._final(msg)
        raise SaslAuthenticationFailed("SCRAM: unexpected message after authentication")

    def _first(self, msg: str) -> bytes:
        if not (msg.startswith("n,") or msg.startswith("y,")):
            raise SaslAuthenticationFailed("SCRAM: channel binding is not supported")
        cut = msg.find(",", 2)
        if cut < 0:
            raise SaslAuthenticationFailed("SCRAM: malformed client-first message")
        self._gs2 = msg[: cut + 1]
        self._client_first_bare = bare = msg[cut + 1 :]
        a = _attrs(bare)
        if "m" in a or "n" not in a or "r" not in a or not a["r"]:
            raise SaslAuthenticationFailed("SCRAM: malformed client-first message")
        user = _unescape_name(a["n"])
        cred = self.store.credentials(user).get(self.mechanism)
        if cred is None:
            raise _invalid(self.mechanism)
        self.user, self._cred = user, cred
        self._nonce = a["r"] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self._step = 1
        return self._server_first.encode()

    def _final(self, msg: str) -> bytes:
        cred = self._cred
        assert cred is not None
        a = _attrs(msg)
        if "p" not in a or "c" not in a or "r" not in a or not msg.endswith(",p=" + a["p"]):
            raise SaslAuthenticationFailed("SCRAM: malformed client-final message")
        if a["c"] != base64.b64encode(self._gs2.encode()).decode():
            raise SaslAuthenticationFailed("SCRAM: channel binding does not match")
        if a["r"] != self._nonce:
            raise SaslAuthenticationFailed("SCRAM: nonce does not match")
        without_proof = msg[: -len(",p=" + a["p"])]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(a["p"], validate=True)
        except ValueError:
            raise _invalid(self.mechanism) from None
        signature = hmac.new(cred.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(signature):
            raise _invalid(self.mechanism)
        client_key = bytes(x ^ y for x, y in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise _invalid(self.mechanism)
        server_signature = hmac.new(cred.server_key, auth_message, self._hash).digest()
        self._step = 2
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


def new_sasl_server(mechanism: str, store: CredentialStore) -> SaslServer:
    """A server for ``mechanism`` (one of SUPPORTED_MECHANISMS). Raises ValueError otherwise."""
    if mechanism == "PLAIN":
        return PlainServer(store)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(store, mechanism)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
