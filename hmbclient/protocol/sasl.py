"""The SASL exchange, sans-IO: what a connection sends and expects while it authenticates.

No sockets, no clocks of its own, no threads: responses (or raw bytes) go in, requests (or raw
bytes) and decisions come out. Two state machines, one per side of a Kafka connection:

* :class:`SaslClientExchange` drives one client authentication (the client's connections in
  ``hmbclient.net`` and a broker's connections to the other brokers, ``broker/channel.py``).
* :class:`SaslServerExchange` is a SASL listener's per-connection authority (the broker's
  processor, ``broker/server.py``): it answers SaslHandshake / SaslAuthenticate, says which
  requests may reach the APIs, and when a session has expired (KIP-368).

The mechanisms themselves are separate: the client ones (PLAIN, SCRAM) in
:mod:`hmbclient.protocol.sasl_mechanisms`, the server ones (which need the broker's credential
store) in ``hmbclient.broker.security.sasl``; an exchange takes a mechanism object.

Client contract (:class:`SaslClientExchange`)
---------------------------------------------
States: ``handshake`` (SaslHandshake sent) -> ``authenticate`` (a SaslAuthenticate sent, KIP-152)
or ``raw`` (after a v0 handshake, Kafka 0.10: tokens travel as bare size-prefixed frames) ->
``done``; ``failed`` from any of them.

* :meth:`~SaslClientExchange.start` returns the SaslHandshake request. Its version and the
  SaslAuthenticate version come from the broker's ranges (:meth:`~SaslClientExchange.negotiate`):
  v1 + SaslAuthenticate when the broker lists SaslAuthenticate, else v0 + raw tokens.
* :meth:`~SaslClientExchange.receive` takes the answer to the last request and returns what to
  send next: a :class:`Request`, ``bytes`` to write as they are (the first raw token), or
  ``None`` when the exchange is over (``done``; ``session_lifetime_ms`` > 0 asks for a
  re-authentication before it ends). In ``raw`` state :meth:`~SaslClientExchange.receive_data`
  takes bytes as they arrive and returns the bytes to write (possibly empty).
* Failures raise: :data:`UnsupportedSaslMechanismError` (the broker does not enable the
  mechanism), ``SaslAuthenticationFailedError`` (wrong password, unknown user, a server proof
  that does not match), another ``BrokerError`` for other error codes, and
  :class:`~hmbclient.errors.ProtocolError` for malformed raw tokens or a call in the wrong
  state. The exchange is ``failed`` afterwards. Messages name the mechanism, the user and the
  peer, never the password.

Server contract (:class:`SaslServerExchange`)
---------------------------------------------
States: ``handshake`` -> ``authenticate`` -> ``done``; ``done`` -> ``authenticate`` again on a
re-authentication (a SaslHandshake on a connection that authenticated with SaslAuthenticate
v1+; the session is kept until the new exchange ends, which must prove the same user), and
``done`` -> ``expired`` when a request arrives after ``connections.max.reauth.ms`` ran out.

Each request header goes to :meth:`~SaslServerExchange.receive_request` (raw tokens after a v0
handshake to :meth:`~SaslServerExchange.receive_token`), which returns a :class:`ServerStep`:

* Case A, ``pass_on``: not the exchange's business (ApiVersions before the handshake, anything
  on an authenticated, unexpired session): hand the request to the APIs.
* Case B, an answer (``response``: a Response, or the raw token bytes after a v0 handshake)
  and the exchange goes on.
* Case C, ``close`` set: answer ``response`` if any, then close the connection for that reason
  (unknown mechanism, failed authentication, out-of-order request, expired session).
  Out-of-order SASL requests are answered ILLEGAL_SASL_STATE; other APIs get no answer.
* ``authenticated`` names the user when an exchange has just succeeded (``reauthenticated``
  says it was a re-authentication). A failure's message is the same for an unknown user and a
  wrong password.

A server mechanism that raises anything but :class:`SaslAuthenticationFailed` is a bug: the
exchange fails (never succeeds) with "internal error" and hands the exception to the caller in
``ServerStep.internal_error`` to log.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from hmbclient.errors import BrokerError, ErrorCode, HmbError, ProtocolError, for_code
from hmbclient.protocol.api.base import ApiKey, Request
from hmbclient.protocol.api.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from hmbclient.protocol.frame import DEFAULT_MAX_FRAME_BYTES
from hmbclient.protocol.sasl_mechanisms import SaslAuthenticationFailedError, SaslMechanism

__all__ = [
    "SaslAuthenticationFailed",
    "SaslClientExchange",
    "SaslServerExchange",
    "ServerMechanism",
    "ServerStep",
    "UnsupportedSaslMechanismError",
]

#: Kafka error 33 (UNSUPPORTED_SASL_MECHANISM): the broker does not enable our mechanism.
UnsupportedSaslMechanismError = for_code(ErrorCode.UNSUPPORTED_SASL_MECHANISM)

_size = struct.Struct(">i")


# ============================================================================ client side


class SaslClientExchange:
    """The client side of one SASL authentication (see the module docstring).

    Args:
        mechanism: a fresh client mechanism (``client_mechanism(...)``), used for this exchange only.
        handshake_version: SaslHandshake version: 1 (tokens in SaslAuthenticate) or 0 (raw tokens).
        authenticate_version: SaslAuthenticate version (v1 carries ``session_lifetime_ms``).
        peer: names the other side in error messages (``"node 1 at h:9092"``).
        max_token_bytes: the largest raw token accepted (a hostile size is refused before buffering).
    """

    def __init__(
        self,
        mechanism: SaslMechanism,
        *,
        handshake_version: int = 1,
        authenticate_version: int = 1,
        peer: str = "the broker",
        max_token_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.mechanism = mechanism
        self.handshake_version = handshake_version
        self.authenticate_version = authenticate_version
        self.peer = peer
        self.max_token_bytes = max_token_bytes
        self.state = "new"
        #: KIP-368: how long the session lasts (0: for ever), from the last SaslAuthenticate v1 answer
        self.session_lifetime_ms = 0
        self._buf = bytearray()

    @classmethod
    def negotiate(
        cls,
        mechanism: SaslMechanism,
        ranges: Mapping[int, tuple[int, int]] | None,
        *,
        peer: str = "the broker",
        max_token_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> SaslClientExchange:
        """An exchange at the versions the broker's ApiVersions ranges allow: SaslHandshake v1 +
        SaslAuthenticate (v1 when offered) if it lists SaslAuthenticate (KIP-152), else
        SaslHandshake v0 + raw tokens (``ranges`` None: a broker that was not probed)."""
        handshake_v, auth_v = 0, 0
        auth_range = ranges.get(ApiKey.SASL_AUTHENTICATE) if ranges else None
        hs_range = ranges.get(ApiKey.SASL_HANDSHAKE) if ranges else None
        if auth_range is not None and hs_range is not None and hs_range[1] >= 1:
            handshake_v, auth_v = 1, min(1, auth_range[1])
        return cls(mechanism, handshake_version=handshake_v, authenticate_version=auth_v, peer=peer,
                   max_token_bytes=max_token_bytes)

    def __repr__(self) -> str:
        return f"SaslClientExchange({self.mechanism.name}, user={self.mechanism.username!r}, {self.state})"

    @property
    def label(self) -> str:
        """``"<MECH> authentication of user '<name>'"``, the start of every message."""
        return f"{self.mechanism.name} authentication of user {self.mechanism.username!r}"

    @property
    def raw(self) -> bool:
        """True while tokens travel as bare size-prefixed frames (feed :meth:`receive_data`)."""
        return self.state == "raw"

    @property
    def done(self) -> bool:
        return self.state == "done"

    def start(self) -> Request:
        """The SaslHandshake request that opens the exchange."""
        self._expect("new")
        self.state = "handshake"
        return SaslHandshakeRequest[self.handshake_version](mechanism=self.mechanism.name)

    def receive(self, response: Any) -> Request | bytes | None:
        """Take the answer to the last request; return what to send next (see the module docstring).

        Raises:
            BrokerError: the broker refused (its error code's class), or the mechanism failed.
            ProtocolError: no request of this exchange awaits an answer.
        """
        if self.state == "handshake":
            return self._on_handshake(response)
        if self.state == "authenticate":
            return self._on_authenticate(response)
        raise self._fail(ProtocolError(f"{self.label}: unexpected answer in state {self.state}"))

    def receive_data(self, data: bytes | bytearray | memoryview) -> bytes:
        """Raw mode: bytes from the connection in; the bytes to write out (maybe empty).

        Bytes past the token that ends the exchange are dropped (the broker sends nothing
        until asked).

        Raises:
            SaslAuthenticationFailedError: the mechanism refused a server token.
            ProtocolError: a token size outside 0..max_token_bytes, or not in raw mode.
        """
        self._expect("raw")
        buf = self._buf
        buf += data
        out = bytearray()
        while self.state == "raw" and len(buf) >= 4:
            (size,) = _size.unpack_from(buf, 0)
            if size < 0 or size > self.max_token_bytes:
                raise self._fail(ProtocolError(f"{self.peer}: SASL token of size {size}"))
            if len(buf) < 4 + size:
                break
            token = bytes(buf[4 : 4 + size])
            del buf[: 4 + size]
            reply = self._step(token, 0)
            if reply is not None:
                out += _size.pack(len(reply)) + reply
        if self.state != "raw":
            buf.clear()
        return bytes(out)

    def connection_closed(self) -> HmbError:
        """The error to report when the peer closed the connection mid-exchange (Kafka's only
        answer to a wrong password with raw v0 tokens)."""
        self.state = "failed"
        return SaslAuthenticationFailedError(
            f"{self.label} failed: {self.peer} closed the connection during authentication"
        )

    # -- internals -----------------------------------------------------------------------

    def _expect(self, state: str) -> None:
        if self.state != state:
            raise self._fail(ProtocolError(f"{self.label}: exchange is {self.state}, not {state}"))

    def _fail(self, err: HmbError) -> HmbError:
        self.state = "failed"
        return err

    def _on_handshake(self, resp: Any) -> Request | bytes | None:
        mech = self.mechanism
        if resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            offered = ", ".join(resp.mechanisms) or "none"
            raise self._fail(UnsupportedSaslMechanismError(
                f"{self.peer} does not enable SASL mechanism {mech.name} (it offers: {offered})"
            ))
        if resp.error_code != ErrorCode.NONE:
            raise self._fail(for_code(resp.error_code)(f"{self.peer}: SaslHandshake for {mech.name} refused"))
        token = mech.first()
        if self.handshake_version == 0:
            self.state = "raw"
            return _size.pack(len(token)) + token
        self.state = "authenticate"
        return SaslAuthenticateRequest[self.authenticate_version](auth_bytes=token)

    def _on_authenticate(self, resp: Any) -> Request | None:
        if resp.error_code != ErrorCode.NONE:
            detail = f"{self.label} failed at {self.peer}: {resp.error_message or 'refused'}"
            raise self._fail(for_code(resp.error_code)(detail))
        reply = self._step(bytes(resp.auth_bytes or b""), getattr(resp, "session_lifetime_ms", 0) or 0)
        if reply is None:
            return None
        return SaslAuthenticateRequest[self.authenticate_version](auth_bytes=reply)

    def _step(self, token: bytes, lifetime_ms: int) -> bytes | None:
        """One server token into the mechanism: its reply, or None when the exchange is done."""
        mech = self.mechanism
        try:
            reply = None if mech.done else mech.step(token)
        except BrokerError as e:
            raise self._fail(type(e)(f"{self.peer}: {e.args[0] if e.args else e}")) from None
        if reply is not None:
            return reply
        if not mech.done:
            raise self._fail(SaslAuthenticationFailedError(f"{self.label}: the exchange ended early"))
        self.state = "done"
        self.session_lifetime_ms = max(0, int(lifetime_ms))
        return None


# ============================================================================ server side


class SaslAuthenticationFailed(Exception):
    """A client failed to authenticate (message safe to send to it and to log). Raised by the
    server mechanisms; the exchange turns it into SASL_AUTHENTICATION_FAILED."""


class ServerMechanism(Protocol):
    """A server mechanism (``broker/security/sasl.py``): ``evaluate`` takes the client's next
    token and returns the server's answer, raising :class:`SaslAuthenticationFailed`;
    ``complete`` turns True on success, with ``user`` the authenticated name."""

    mechanism: str
    complete: bool
    user: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class ServerStep(NamedTuple):
    """What the processor does with one request of a SASL connection (see the module docstring)."""

    #: the request is not the exchange's: hand it to the APIs
    pass_on: bool = False
    #: the answer (a response, or a raw token's bytes without their size), None: no answer
    response: Any = None
    #: close the connection after the answer, for this reason
    close: str | None = None
    #: the user an exchange has just authenticated
    authenticated: str | None = None
    reauthenticated: bool = False
    #: a mechanism's unexpected exception (a bug), for the caller to log
    internal_error: BaseException | None = None


_PASS_ON = ServerStep(pass_on=True)


class SaslServerExchange:
    """The server side of a SASL connection (see the module docstring).

    Args:
        mechanisms: the mechanism names the listener enables (offered in SaslHandshake answers).
        new_mechanism: makes a server mechanism by name; None: no credentials, nothing is enabled.
        reauth_ms: ``connections.max.reauth.ms``: sessions authenticated with SaslAuthenticate
            v1+ last this long (0: for ever) and are told so (KIP-368).
    """

    __slots__ = ("mechanisms", "new_mechanism", "reauth_ms", "state", "raw", "version", "expires_at_ms",
                 "reauth", "user", "mechanism", "_server")

    def __init__(
        self,
        mechanisms: Sequence[str],
        new_mechanism: Callable[[str], ServerMechanism] | None,
        *,
        reauth_ms: int = 0,
    ) -> None:
        self.mechanisms = list(mechanisms)
        self.new_mechanism = new_mechanism
        self.reauth_ms = reauth_ms
        self.state = "handshake"
        #: after a v0 handshake: the client's tokens come as bare size-prefixed frames
        self.raw = False
        #: SaslAuthenticate version of the last exchange (v1+: may re-authenticate)
        self.version = 0
        #: when the session ends (monotonic ms; 0: never)
        self.expires_at_ms = 0
        self.reauth = False
        #: the authenticated user (None until the first exchange succeeds)
        self.user: str | None = None
        #: the mechanism of the last handshake
        self.mechanism: str | None = None
        self._server: ServerMechanism | None = None

    def __repr__(self) -> str:
        return f"SaslServerExchange({self.state}, user={self.user!r})"

    @property
    def authenticated(self) -> bool:
        return self.user is not None

    def receive_request(self, api_key: int, api_version: int, request: Any, now_ms: float) -> ServerStep:
        """Decide about one request of this connection (Cases A-C of the module docstring)."""
        state = self.state
        if state == "done":
            if api_key == ApiKey.SASL_HANDSHAKE and self.version >= 1:
                # KIP-368: a re-authentication; the session stays until it ends.
                state = self.state = "handshake"
                self.reauth = True
            elif self.expires_at_ms and now_ms >= self.expires_at_ms:
                self.state = "expired"
                return ServerStep(close=f"SASL session of User:{self.user} expired (connections.max.reauth.ms) "
                                  "without re-authentication")
            else:
                return _PASS_ON  # Case A: an authenticated session
        if api_key == ApiKey.API_VERSIONS and state == "handshake":
            return _PASS_ON  # Case A: Kafka answers ApiVersions before authentication
        if state == "expired":
            return ServerStep(close=f"SASL session of User:{self.user} expired (connections.max.reauth.ms) "
                              "without re-authentication")
        if api_key == ApiKey.SASL_HANDSHAKE and state == "handshake":
            return self._handshake(api_version, request.mechanism)
        if api_key == ApiKey.SASL_AUTHENTICATE and state == "authenticate" and not self.raw:
            return self._authenticate(api_version, bytes(request.auth_bytes), now_ms)
        # Case C: out of order. SASL requests learn why; other APIs get no answer.
        why = f"api key {api_key} v{api_version} is not expected in SASL state {state}"
        if api_key == ApiKey.SASL_AUTHENTICATE:
            return ServerStep(
                response=SaslAuthenticateResponse[api_version].build(
                    error_code=ErrorCode.ILLEGAL_SASL_STATE,
                    error_message=f"SaslAuthenticate is not expected in SASL state {state}",
                    auth_bytes=b"",
                    session_lifetime_ms=0,
                ),
                close=why,
            )
        if api_key == ApiKey.SASL_HANDSHAKE:
            return ServerStep(
                response=SaslHandshakeResponse[api_version](
                    error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=list(self.mechanisms)
                ),
                close=why,
            )
        return ServerStep(close=why)

    def receive_token(self, token: bytes, now_ms: float) -> ServerStep:
        """One raw token after a v0 handshake: ``response`` is the token to send back (the
        caller frames it with its size). A failure closes with no answer: v0 cannot carry one."""
        if not (self.raw and self.state == "authenticate"):
            return ServerStep(close=f"raw SASL token in SASL state {self.state}")
        out, fail, internal = self._evaluate(token)
        if fail is not None:
            self.raw = False
            return ServerStep(close=f"SASL authentication failed: {fail}", internal_error=internal)
        return self._progress(ServerStep(response=out))

    # -- internals -----------------------------------------------------------------------

    def _handshake(self, version: int, mechanism: str) -> ServerStep:
        enabled = list(self.mechanisms)
        if mechanism not in enabled or self.new_mechanism is None:
            return ServerStep(
                response=SaslHandshakeResponse[version](error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled),
                close=f"SASL mechanism {mechanism!r} is not enabled",
            )
        self._server = self.new_mechanism(mechanism)
        self.mechanism = mechanism
        self.state = "authenticate"
        self.raw = version == 0
        return ServerStep(response=SaslHandshakeResponse[version](error_code=ErrorCode.NONE, mechanisms=enabled))

    def _authenticate(self, version: int, token: bytes, now_ms: float) -> ServerStep:
        resp = SaslAuthenticateResponse[version]
        self.version = version
        out, fail, internal = self._evaluate(token)
        if fail is not None:
            return ServerStep(
                response=resp.build(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(fail),
                                    auth_bytes=b"", session_lifetime_ms=0),
                close=f"SASL authentication failed: {fail}",
                internal_error=internal,
            )
        server = self._server
        lifetime = self.reauth_ms if server is not None and server.complete and version >= 1 else 0
        if lifetime:
            self.expires_at_ms = int(now_ms + lifetime)
        return self._progress(ServerStep(
            response=resp.build(error_code=ErrorCode.NONE, error_message=None, auth_bytes=out, session_lifetime_ms=lifetime)
        ))

    def _evaluate(self, token: bytes) -> tuple[bytes, SaslAuthenticationFailed | None, BaseException | None]:
        """The mechanism's answer to ``token``, or why it failed (and a bug's exception)."""
        server = self._server
        assert server is not None
        try:
            out = server.evaluate(token)
        except SaslAuthenticationFailed as e:
            return b"", e, None
        except Exception as e:  # a bug in a mechanism must not pass for success
            return b"", SaslAuthenticationFailed(f"SASL {server.mechanism}: internal error"), e
        if server.complete and self.reauth and server.user != self.user:
            # KIP-368: a session cannot change hands.
            return b"", SaslAuthenticationFailed(f"re-authentication as User:{server.user} on a session of User:{self.user}"), None
        return out, None, None

    def _progress(self, step: ServerStep) -> ServerStep:
        """After a successful evaluation: ``step``, marked authenticated when the mechanism is complete."""
        server = self._server
        assert server is not None
        if not server.complete:
            return step
        user = server.user
        assert user is not None
        self.state, self.raw, self._server = "done", False, None
        reauth, self.reauth = self.reauth, False
        if not reauth:
            self.user = user
        return step._replace(authenticated=user, reauthenticated=reauth)
