"""The SASL exchange state machines (hmbclient.protocol.sasl), client against server, no sockets.

The client side uses the real client mechanisms, the server side the broker's real server
mechanisms over a real file credential store; requests and responses are passed through the
codec (encode, decode) so what each side sees is what it would read off the wire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
from hmbclient.broker.security.sasl import new_sasl_server
from hmbclient.errors import ErrorCode, ProtocolError
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import Request
from hmbclient.protocol.api.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from hmbclient.protocol.frame import ClientConnection, ServerConnection
from hmbclient.protocol.sasl import (
    SaslAuthenticationFailed,
    SaslClientExchange,
    SaslServerExchange,
    ServerMechanism,
    UnsupportedSaslMechanismError,
)
from hmbclient.protocol.sasl_mechanisms import SaslAuthenticationFailedError, client_mechanism

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORD = "alice-secret"


@pytest.fixture
def store(tmp_path: Path) -> FileCredentialStore:
    s = FileCredentialStore(str(tmp_path / "credentials.json"))
    for user, password in (("alice", PASSWORD), ("bob", "bob-secret")):
        s.put(user, {m: make_credential(m, password) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    return s


def _server(store: FileCredentialStore, reauth_ms: int = 0, mechanisms: tuple[str, ...] = MECHANISMS) -> SaslServerExchange:
    return SaslServerExchange(mechanisms, lambda m: new_sasl_server(m, store), reauth_ms=reauth_ms)


def _wire(request: Request, server: SaslServerExchange, now_ms: float) -> tuple[Any, Any]:
    """Send ``request`` through the codec to ``server``; its step and the decoded answer."""
    client = ClientConnection("test")
    _, data = client.send_request(request)
    sconn = ServerConnection()
    sconn.receive_data(data)
    ev = sconn.next_request()
    step = server.receive_request(ev.header.api_key, ev.header.api_version, ev.request, now_ms)
    if step.response is None:
        return step, None
    client.receive_data(b"".join(ServerConnection.encode_response(ev.header.correlation_id, step.response)))
    return step, client.next_response()[1]


def _run(client: SaslClientExchange, server: SaslServerExchange, now_ms: float = 0.0) -> list[Any]:
    """Drive both sides to the end; the server's steps."""
    steps = []
    out: Any = client.start()
    while isinstance(out, Request):
        step, answer = _wire(out, server, now_ms)
        steps.append(step)
        out = client.receive(answer)
    while isinstance(out, bytes) and out:  # raw v0 tokens
        token = out[4:]
        step = server.receive_token(token, now_ms)
        steps.append(step)
        assert step.close is None, step.close
        out = client.receive_data(len(step.response).to_bytes(4, "big") + step.response)
    return steps


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("handshake_version", [1, 0])
def test_client_and_server_agree(store: FileCredentialStore, mechanism: str, handshake_version: int) -> None:
    server = _server(store, reauth_ms=60_000)
    client = SaslClientExchange(client_mechanism(mechanism, "alice", PASSWORD), handshake_version=handshake_version)
    steps = _run(client, server, now_ms=1000.0)
    assert client.done and not client.raw
    assert server.state == "done" and server.user == "alice" and server.mechanism == mechanism
    assert [s.authenticated for s in steps if s.authenticated] == ["alice"]
    assert all(s.close is None and not s.pass_on for s in steps)
    if handshake_version == 1:
        # KIP-368: the session lifetime reaches the client, and the server's clock starts.
        assert client.session_lifetime_ms == 60_000 and server.expires_at_ms == 61_000
    else:
        assert client.session_lifetime_ms == 0 and server.expires_at_ms == 0


def test_negotiate_picks_versions_from_the_ranges() -> None:
    mech = client_mechanism("PLAIN", "alice", PASSWORD)
    both: dict[int, tuple[int, int]] = {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)}
    assert (SaslClientExchange.negotiate(mech, both).handshake_version,
            SaslClientExchange.negotiate(mech, both).authenticate_version) == (1, 1)
    old: dict[int, tuple[int, int]] = {ApiKey.SASL_HANDSHAKE: (0, 0)}
    assert SaslClientExchange.negotiate(mech, old).handshake_version == 0
    assert SaslClientExchange.negotiate(mech, None).handshake_version == 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password_fails_both_sides_and_names_no_secret(store: FileCredentialStore, mechanism: str) -> None:
    server = _server(store)
    client = SaslClientExchange(client_mechanism(mechanism, "alice", "not-it"), peer="node 1 at h:1")
    with pytest.raises(SaslAuthenticationFailedError, match=f"{mechanism} authentication of user 'alice' failed at node 1 at h:1") as ei:
        _run(client, server)
    assert "not-it" not in str(ei.value) and client.state == "failed"
    assert server.user is None and server.state == "authenticate"


def test_unknown_user_and_wrong_password_read_the_same(store: FileCredentialStore) -> None:
    """An attacker must not learn which names exist: the server closes with the same reason."""
    reasons = []
    for user in ("nobody", "alice"):
        server = _server(store)
        client = SaslClientExchange(client_mechanism("SCRAM-SHA-256", user, "wrong"))
        out: Any = client.start()
        closed = None
        while isinstance(out, Request) and closed is None:
            step, answer = _wire(out, server, 0.0)
            closed = step.close
            if closed is None:
                out = client.receive(answer)
        reasons.append(closed)
    assert reasons[0] is not None and reasons[0] == reasons[1]


def test_mechanism_not_enabled(store: FileCredentialStore) -> None:
    server = _server(store, mechanisms=("SCRAM-SHA-512",))
    client = SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD), peer="node 2")
    with pytest.raises(UnsupportedSaslMechanismError, match="node 2 does not enable SASL mechanism PLAIN .it offers: SCRAM-SHA-512"):
        _run(client, server)


def test_out_of_order_requests(store: FileCredentialStore) -> None:
    server = _server(store)
    # ApiVersions before the handshake goes to the APIs; Metadata gets no answer and closes.
    assert server.receive_request(ApiKey.API_VERSIONS, 0, None, 0).pass_on
    step = server.receive_request(ApiKey.METADATA, 0, None, 0)
    assert not step.pass_on and step.response is None and "not expected in SASL state handshake" in (step.close or "")
    # SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE, then close.
    step = _server(store).receive_request(ApiKey.SASL_AUTHENTICATE, 1, None, 0)
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and step.close
    # A second handshake while authenticating: ILLEGAL_SASL_STATE too.
    s = _server(store)
    assert s.receive_request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest[1](mechanism="PLAIN"), 0).close is None
    step = s.receive_request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest[1](mechanism="PLAIN"), 0)
    assert step.response.error_code == ErrorCode.ILLEGAL_SASL_STATE and step.close


def test_reauthentication_and_expiry(store: FileCredentialStore) -> None:
    server = _server(store, reauth_ms=1000)
    _run(SaslClientExchange(client_mechanism("SCRAM-SHA-512", "alice", PASSWORD)), server, now_ms=0.0)
    assert server.receive_request(ApiKey.METADATA, 0, None, 999).pass_on
    # Re-authentication as the same user renews the session.
    steps = _run(SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD)), server, now_ms=900.0)
    assert steps[-1].authenticated == "alice" and steps[-1].reauthenticated
    assert server.receive_request(ApiKey.METADATA, 0, None, 1500).pass_on
    # As somebody else: refused (a session cannot change hands).
    client = SaslClientExchange(client_mechanism("PLAIN", "bob", "bob-secret"))
    with pytest.raises(SaslAuthenticationFailedError, match="User:bob on a session of User:alice"):
        _run(client, server, now_ms=1600.0)
    # Expired: the next request closes the connection.
    expired = _server(store, reauth_ms=1000)
    _run(SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD)), expired, now_ms=0.0)
    step = expired.receive_request(ApiKey.METADATA, 0, None, 1000)
    assert not step.pass_on and "expired" in (step.close or "")


def test_no_reauthentication_after_v0(store: FileCredentialStore) -> None:
    server = _server(store, reauth_ms=1000)
    _run(SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD), handshake_version=1, authenticate_version=0), server)
    # SaslAuthenticate v0 cannot carry a lifetime: the session never expires, and a new
    # handshake is not a re-authentication but a request to pass on (the APIs refuse it).
    assert server.expires_at_ms == 0
    assert server.receive_request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest[1](mechanism="PLAIN"), 5000).pass_on


def test_a_mechanism_bug_never_passes_for_success(store: FileCredentialStore) -> None:
    class Broken:
        mechanism = "PLAIN"
        complete = True
        user: str | None = "alice"

        def evaluate(self, token: bytes) -> bytes:
            raise KeyError("bug")

    def make(name: str) -> ServerMechanism:
        return Broken()

    server = SaslServerExchange(["PLAIN"], make)
    client = SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD))
    step, answer = _wire(client.start(), server, 0)
    token_request = client.receive(answer)
    assert isinstance(token_request, Request)
    step, answer = _wire(token_request, server, 0)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "internal error" in answer.error_message
    assert isinstance(step.internal_error, KeyError) and step.close and step.authenticated is None
    assert server.user is None
    assert issubclass(SaslAuthenticationFailed, Exception)


def test_client_refuses_bad_raw_tokens_and_wrong_calls() -> None:
    client = SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD), handshake_version=0, max_token_bytes=100)
    with pytest.raises(ProtocolError):
        client.receive_data(b"\x00\x00\x00\x01x")  # not in raw mode yet
    client = SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD), handshake_version=0, max_token_bytes=100)
    client.start()
    first = client.receive(_handshake_ok())
    assert isinstance(first, bytes) and first[4:] == b"\x00alice\x00" + PASSWORD.encode() and client.raw
    assert client.receive_data(b"\x00\x00") == b"" and client.raw  # half a size: wait
    with pytest.raises(ProtocolError, match="SASL token of size 1000"):
        client.receive_data(b"\x03\xe8")
    assert client.state == "failed"


def test_peer_closing_mid_exchange_reads_as_failed_authentication() -> None:
    client = SaslClientExchange(client_mechanism("SCRAM-SHA-256", "alice", PASSWORD), peer="node 3")
    client.start()
    err = client.connection_closed()
    assert isinstance(err, SaslAuthenticationFailedError) and "node 3 closed the connection during authentication" in str(err)


def test_authenticate_error_codes_keep_their_class() -> None:
    client = SaslClientExchange(client_mechanism("PLAIN", "alice", PASSWORD))
    client.start()
    client.receive(_handshake_ok())
    resp = SaslAuthenticateResponse[1].build(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message="no", auth_bytes=b"", session_lifetime_ms=0)
    with pytest.raises(Exception) as ei:
        client.receive(resp)
    assert getattr(ei.value, "errno", None) == ErrorCode.ILLEGAL_SASL_STATE


def _handshake_ok() -> Any:
    from hmbclient.protocol.api.sasl import SaslHandshakeResponse

    return SaslHandshakeResponse[1](error_code=ErrorCode.NONE, mechanisms=list(MECHANISMS))


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64), mechanism=st.sampled_from(MECHANISMS))
def test_fuzz_raw_bytes_into_the_client_raise_only_its_errors(data: bytes, mechanism: str) -> None:
    """Whatever a broker sends in raw mode, the client exchange answers bytes or raises a
    ProtocolError / the mechanism's SaslAuthenticationFailedError; nothing else escapes."""
    client = SaslClientExchange(client_mechanism(mechanism, "alice", PASSWORD), handshake_version=0, max_token_bytes=32)
    client.start()
    client.receive(_handshake_ok())
    try:
        out = client.receive_data(data)
    except (ProtocolError, SaslAuthenticationFailedError):
        assert client.state == "failed"
    else:
        assert isinstance(out, bytes)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=st.binary(max_size=96), mechanism=st.sampled_from(MECHANISMS))
def test_fuzz_tokens_into_the_server_never_authenticate_or_raise(store: FileCredentialStore, token: bytes, mechanism: str) -> None:
    """A random client token is refused with a step (an answer and a close), never an exception,
    and never authenticates anybody."""
    server = _server(store)
    server.receive_request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest[1](mechanism=mechanism), 0)
    step = server.receive_request(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest[1](auth_bytes=token), 0)
    assert step.authenticated is None and server.user is None
    assert step.internal_error is None, repr(step.internal_error)
