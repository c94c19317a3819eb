"""SASL session lifetime and re-authentication on the broker (KIP-368).

With ``connections.max.reauth.ms`` set, a SaslAuthenticate v1 success carries the session
lifetime; the client re-authenticates on the same connection (SaslHandshake + SaslAuthenticate
again, as the same user) before it ends, or the broker closes the connection at its next
request. hmbclient's connections do that by themselves while producing and consuming.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey, MetadataRequest
from hmbclient.protocol.api.base import REQUESTS

from .conftest import RawClient

LIFETIME_MS = 1500
PASSWORDS = {"alice": "alice-pw-1", "bob": "bob-pw-2"}


def _req(key: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(key, version)].build(**fields)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    path = str(tmp_path_factory.mktemp("creds") / "credentials.json")
    store = FileCredentialStore(path)
    for user, pw in PASSWORDS.items():
        store.put(user, {m: make_credential(m, pw) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    with EmbeddedBroker(listeners=["SASL_PLAINTEXT://127.0.0.1:0"], sasl_credentials_file=path, connections_max_reauth_ms=LIFETIME_MS) as b:
        yield b


def _port(b: EmbeddedBroker) -> int:
    return b.broker.server.listeners[0].port


def _plain(c: RawClient, user: str, version: int = 1) -> Any:
    assert c.request(_req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")).error_code == ErrorCode.NONE
    return c.request(_req(ApiKey.SASL_AUTHENTICATE, version, auth_bytes=f"\0{user}\0{PASSWORDS[user]}".encode()))


def _until(deadline: float) -> None:
    # The session lifetime is the condition here: nothing to poll but the clock.
    time.sleep(max(0.0, deadline - time.monotonic()))


def test_session_expires_without_reauthentication(broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="hmbclient.broker.server")
    with RawClient("127.0.0.1", _port(broker)) as c:
        t0 = time.monotonic()
        resp = _plain(c, "alice")
        assert (resp.error_code, resp.session_lifetime_ms) == (ErrorCode.NONE, LIFETIME_MS)
        assert c.request(MetadataRequest[1](topics=[])).brokers  # within the session: served
        _until(t0 + LIFETIME_MS / 1000 + 0.2)
        with pytest.raises((ConnectionError, OSError)):
            c.request(MetadataRequest[1](topics=[]))  # expired: the broker closes instead
    assert "SASL session of User:alice expired (connections.max.reauth.ms) without re-authentication" in caplog.text


def test_reauthentication_extends_the_session(broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(broker)) as c:
        t0 = time.monotonic()
        assert _plain(c, "alice").session_lifetime_ms == LIFETIME_MS
        _until(t0 + LIFETIME_MS / 2000)
        again = _plain(c, "alice")  # same connection, same user
        assert (again.error_code, again.session_lifetime_ms) == (ErrorCode.NONE, LIFETIME_MS)
        _until(t0 + LIFETIME_MS / 1000 + 0.2)  # past the first session's end
        assert c.request(MetadataRequest[1](topics=[])).brokers


def test_reauthentication_as_another_user_is_refused(broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(broker)) as c:
        assert _plain(c, "alice").error_code == ErrorCode.NONE
        resp = _plain(c, "bob")
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "User:bob" in resp.error_message and "User:alice" in resp.error_message
        with pytest.raises((ConnectionError, OSError)):
            c.request(MetadataRequest[1](topics=[]))


def test_v0_authenticate_gets_no_lifetime(broker: EmbeddedBroker) -> None:
    """A client speaking SaslAuthenticate v0 cannot learn a lifetime, so it is not cut off."""
    with RawClient("127.0.0.1", _port(broker)) as c:
        t0 = time.monotonic()
        assert _plain(c, "alice", version=0).error_code == ErrorCode.NONE
        _until(t0 + LIFETIME_MS / 1000 + 0.2)
        assert c.request(MetadataRequest[1](topics=[])).brokers


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_hmbclient_reauthenticates_while_producing_and_consuming(broker: EmbeddedBroker, mechanism: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="hmbclient.broker")
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    security = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}
    sent: list[bytes] = []
    with Producer(metadata_broker_list=f"127.0.0.1:{_port(broker)}", request_timeout_ms=8000, **security) as p:
        end = time.monotonic() + 2.5 * LIFETIME_MS / 1000  # spans two session ends
        while time.monotonic() < end:
            value = f"m{len(sent)}".encode()
            for f in p.send(ProducerData(topic, None, [value])):
                f.result(10)
            sent.append(value)
            time.sleep(0.1)  # paced: the session ends between sends, not during one
    got: list[bytes] = []
    with SimpleConsumer("127.0.0.1", _port(broker), so_timeout_ms=8000, **security) as c:
        deadline = time.monotonic() + 20
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += [m.value for m in c.fetch(FetchRequest(topic, 0, len(got), 1 << 20))]
    assert got == sent
    assert "re-authenticated as User:alice with " + mechanism in caplog.text
    assert "expired" not in caplog.text
