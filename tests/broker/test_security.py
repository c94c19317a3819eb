"""Broker-side security against real peers: listeners, TLS, SASL (PLAIN, SCRAM-SHA-256/512)
with salted credentials, and ACL authorization.

Certificates are made per module with ``cryptography`` (hmbclient.testing.pki). Real
clients: kafka-python and confluent-kafka (librdkafka) produce and consume over SASL_SSL with
SCRAM-SHA-512 and SCRAM-SHA-256, over SASL_PLAINTEXT with PLAIN, and over SSL with client
certificates. Refusals (wrong password, unknown user, SASL out of order, an oversized token,
plaintext on a TLS listener, an untrusted client certificate) each close that connection only;
the broker keeps serving, and nothing the refused client sent is stored.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.security.authorizer import Acl, Authorizer, FileAclStore
from hmbclient.broker.security.credentials import (
    FileCredentialStore,
    ScramCredential,
    check_password,
    make_credential,
)
from hmbclient.broker.security.sasl import SaslAuthenticationFailed, new_sasl_server
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey, FindCoordinatorRequest, MetadataRequest
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.testing.pki import Pki, make_pki

from .conftest import RawClient, encode

PASSWORD = "alice-secret"
TIMEOUT_S = 20.0


def _req(key: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(key, version)].build(**fields)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def creds_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("creds") / "credentials.json")
    store = FileCredentialStore(path)
    for user, pw in (("alice", PASSWORD), ("bob", "bob-secret"), ("admin", "admin-secret")):
        store.put(user, {m: make_credential(m, pw) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    return path


@pytest.fixture(scope="module")
def sasl_broker(pki: Pki, creds_file: str) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        listeners=["PLAINTEXT://127.0.0.1:0", "SASL_SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"],
        ssl_certfile=pki.server_cert,
        ssl_keyfile=pki.server_key,
        sasl_credentials_file=creds_file,
    ) as b:
        yield b


@pytest.fixture(scope="module")
def ssl_broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        listeners=["SSL://127.0.0.1:0"],
        ssl_certfile=pki.server_cert,
        ssl_keyfile=pki.server_key,
        ssl_cafile=pki.ca,
        ssl_client_auth="required",
    ) as b:
        yield b


def _port(b: EmbeddedBroker, protocol: str) -> int:
    return next(lst.port for lst in b.broker.server.listeners if lst.protocol == protocol)


def _topic() -> str:
    return f"sec-{uuid.uuid4().hex[:8]}"


def _stored(b: EmbeddedBroker, topic: str) -> bool:
    """Whether the broker knows the topic at all, or has a log directory for it."""
    return b.broker.metadata.has_topic(topic) or any(d.startswith(topic + "-") for d in os.listdir(b.log_dir))


# -- credentials and mechanisms (no network) --------------------------------------------------------
def test_credential_text_is_kafkas_and_holds_no_password(creds_file: str) -> None:
    with open(creds_file) as f:
        text = f.read()
    assert PASSWORD not in text
    assert os.stat(creds_file).st_mode & 0o077 == 0
    entry = json.loads(text)["alice"]["SCRAM-SHA-512"]
    assert entry.startswith("salt=") and ",stored_key=" in entry and ",server_key=" in entry and entry.endswith(",iterations=4096")
    cred = ScramCredential.from_text(entry)
    assert check_password("SCRAM-SHA-512", cred, PASSWORD.encode())
    assert not check_password("SCRAM-SHA-512", cred, b"nope")
    assert PASSWORD not in repr(cred)


def test_scram_server_against_rfc7677_client_proof() -> None:
    # RFC 7677 section 3 test vector (user "user", password "pencil"), with the server nonce
    # pinned to the one the RFC uses.
    salt = __import__("base64").b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, salt)

    class _Store:
        def credentials(self, user: str) -> dict[str, ScramCredential]:
            return {"SCRAM-SHA-256": cred} if user == "user" else {}

    server = new_sasl_server("SCRAM-SHA-256", _Store())  # type: ignore[arg-type]
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").decode()
    assert first.startswith("r=rOprNGfwEbeRWgbNEkqO") and ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096" in first
    # Pin the nonce to the RFC's, then check its proof and signature.
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    server._nonce = nonce  # type: ignore[attr-defined]
    server._server_first = f"r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"  # type: ignore[attr-defined]
    final = server.evaluate(f"c=biws,r={nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.user == "user"
    bad = new_sasl_server("SCRAM-SHA-256", _Store())  # type: ignore[arg-type]
    with pytest.raises(SaslAuthenticationFailed):
        bad.evaluate(b"n,,n=nobody,r=abc")


# -- real clients ---------------------------------------------------------------------------------
def _kafka_python_roundtrip(bootstrap: str, topic: str, **security: Any) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **security)
    try:
        for i in range(3):
            producer.send(topic, f"m{i}".encode()).get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000, **security)
    try:
        got = []
        for m in consumer:
            got.append(m.value)
            if len(got) == 3:
                break
        return got
    finally:
        consumer.close()


def _confluent_roundtrip(topic: str, conf: dict[str, Any]) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    producer = Producer(conf)
    errors: list[Any] = []
    for i in range(3):
        producer.produce(topic, f"c{i}".encode(), on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 3 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_kafka_python_over_sasl_ssl_scram(sasl_broker: EmbeddedBroker, pki: Pki, mechanism: str) -> None:
    got = _kafka_python_roundtrip(
        f"127.0.0.1:{_port(sasl_broker, 'SASL_SSL')}", _topic(), security_protocol="SASL_SSL", sasl_mechanism=mechanism,
        sasl_plain_username="alice", sasl_plain_password=PASSWORD, ssl_cafile=pki.ca,
    )
    assert got == [b"m0", b"m1", b"m2"]


def test_kafka_python_over_sasl_plaintext_plain(sasl_broker: EmbeddedBroker) -> None:
    got = _kafka_python_roundtrip(
        f"127.0.0.1:{_port(sasl_broker, 'SASL_PLAINTEXT')}", _topic(), security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
        sasl_plain_username="alice", sasl_plain_password=PASSWORD,
    )
    assert got == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_confluent_over_sasl_ssl_scram(sasl_broker: EmbeddedBroker, pki: Pki, mechanism: str) -> None:
    conf = {
        "bootstrap.servers": f"127.0.0.1:{_port(sasl_broker, 'SASL_SSL')}", "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": PASSWORD, "ssl.ca.location": pki.ca,
    }
    assert _confluent_roundtrip(_topic(), conf) == [b"c0", b"c1", b"c2"]


def test_confluent_over_sasl_plaintext_plain(sasl_broker: EmbeddedBroker) -> None:
    conf = {
        "bootstrap.servers": f"127.0.0.1:{_port(sasl_broker, 'SASL_PLAINTEXT')}", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": PASSWORD,
    }
    assert _confluent_roundtrip(_topic(), conf) == [b"c0", b"c1", b"c2"]


def test_kafka_python_over_ssl_with_client_certificate(ssl_broker: EmbeddedBroker, pki: Pki) -> None:
    got = _kafka_python_roundtrip(
        ssl_broker.bootstrap, _topic(), security_protocol="SSL", ssl_cafile=pki.ca, ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key,
    )
    assert got == [b"m0", b"m1", b"m2"]


def test_confluent_over_ssl_with_client_certificate(ssl_broker: EmbeddedBroker, pki: Pki) -> None:
    conf = {
        "bootstrap.servers": ssl_broker.bootstrap, "security.protocol": "SSL", "ssl.ca.location": pki.ca,
        "ssl.certificate.location": pki.client_cert, "ssl.key.location": pki.client_key,
    }
    assert _confluent_roundtrip(_topic(), conf) == [b"c0", b"c1", b"c2"]


# -- refusals -------------------------------------------------------------------------------------------
def _closed(sock: socket.socket) -> bool:
    """Whether the peer closed (EOF or reset) within the timeout."""
    sock.settimeout(TIMEOUT_S)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _produce(topic: str) -> Any:
    return _req(ApiKey.PRODUCE, 3, transactional_id=None, acks=1, timeout_ms=5000, topics=[(topic, [(0, encode([(None, b"secret-data")]))])])


def _still_serves(b: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(b, "PLAINTEXT")) as c:
        assert c.request(_req(ApiKey.API_VERSIONS, 0)).error_code == ErrorCode.NONE


def _sasl_plain(c: RawClient, user: str, password: str) -> Any:
    hs = c.request(_req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    assert hs.error_code == ErrorCode.NONE and "PLAIN" in hs.mechanisms
    return c.request(_req(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=f"\0{user}\0{password}".encode()))


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "whatever")])
def test_wrong_password_or_unknown_user_is_refused_and_closed(sasl_broker: EmbeddedBroker, user: str, password: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic()
    caplog.set_level("DEBUG", logger="hmbclient")
    with RawClient("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT")) as c:
        resp = _sasl_plain(c, user, password)
        assert resp.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        # The same words for both: nobody learns which user names exist.
        assert resp.error_message == "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"
        try:
            c.send(_produce(topic))
        except OSError:
            pass
        assert _closed(c.sock)
    assert not _stored(sasl_broker, topic)
    assert password not in caplog.text
    _still_serves(sasl_broker)


def test_scram_wrong_password_with_kafka_python_fails(sasl_broker: EmbeddedBroker, pki: Pki) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    topic = _topic()
    with pytest.raises(KafkaError):
        p = KafkaProducer(
            bootstrap_servers=f"127.0.0.1:{_port(sasl_broker, 'SASL_SSL')}", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice", sasl_plain_password="wrong", ssl_cafile=pki.ca, max_block_ms=3000,
        )
        try:
            p.send(topic, b"x").get(timeout=5)
        finally:
            p.close()
    assert not _stored(sasl_broker, topic)


def test_request_before_handshake_is_refused(sasl_broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT")) as c:
        resp = c.request(_req(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=b"\0alice\0" + PASSWORD.encode()))
        assert resp.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert _closed(c.sock)
    topic = _topic()
    with RawClient("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT")) as c:
        c.send(_produce(topic))  # no answer for an unauthenticated client: just the close
        assert _closed(c.sock)
    assert not _stored(sasl_broker, topic)
    _still_serves(sasl_broker)


def test_unsupported_mechanism_is_refused(sasl_broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT")) as c:
        resp = c.request(_req(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI"))
        assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert sorted(resp.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert _closed(c.sock)


def test_oversized_sasl_token_closes(sasl_broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT")) as c:
        assert c.request(_req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")).error_code == ErrorCode.NONE
        c.sock.sendall(struct.pack(">i", 10 * 1024 * 1024) + b"\0" * 1024)  # a 10 MB "token"
        assert _closed(c.sock)
    _still_serves(sasl_broker)


def test_sasl_on_plaintext_listener_is_illegal_state(sasl_broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(sasl_broker, "PLAINTEXT")) as c:
        assert c.request(_req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN")).error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_sasl_v0_handshake_with_raw_tokens(sasl_broker: EmbeddedBroker) -> None:
    with RawClient("127.0.0.1", _port(sasl_broker, "SASL_PLAINTEXT")) as c:
        assert c.request(_req(ApiKey.SASL_HANDSHAKE, 0, mechanism="PLAIN")).error_code == ErrorCode.NONE
        token = b"\0alice\0" + PASSWORD.encode()
        c.sock.sendall(struct.pack(">i", len(token)) + token)
        assert c.sock.recv(4) == struct.pack(">i", 0)  # an empty server token: authenticated
        assert c.request(_req(ApiKey.METADATA, 0, topics=[])).brokers


def test_plaintext_on_tls_listener_closes(sasl_broker: EmbeddedBroker, ssl_broker: EmbeddedBroker) -> None:
    for b, proto in ((sasl_broker, "SASL_SSL"), (ssl_broker, "SSL")):
        with RawClient("127.0.0.1", _port(b, proto)) as c:
            c.send(_req(ApiKey.API_VERSIONS, 0))
            assert _closed(c.sock)
    _still_serves(sasl_broker)


def _tls_client(b: EmbeddedBroker, pki: Pki, cert: str | None, key: str | None) -> RawClient:
    ctx = ssl.create_default_context(cafile=pki.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    c = RawClient("127.0.0.1", b.port)
    c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
    return c


@pytest.mark.parametrize("who", ["stranger", "none"])
def test_untrusted_or_missing_client_certificate_is_refused(ssl_broker: EmbeddedBroker, pki: Pki, who: str) -> None:
    topic = _topic()
    cert, key = (pki.rogue_cert, pki.rogue_key) if who == "stranger" else (None, None)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        # TLS 1.3: the server's verdict on the client certificate arrives after the client
        # finished its side, so it surfaces on the first read.
        c = _tls_client(ssl_broker, pki, cert, key)
        with c:
            c.request(_produce(topic))
    assert not _stored(ssl_broker, topic)
    with _tls_client(ssl_broker, pki, pki.client_cert, pki.client_key) as ok:
        assert ok.request(_req(ApiKey.API_VERSIONS, 0)).error_code == ErrorCode.NONE


# -- ACLs -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory, creds_file: str) -> Iterator[tuple[EmbeddedBroker, FileAclStore]]:
    acls = FileAclStore(str(tmp_path_factory.mktemp("acls") / "acls.json"))
    acls.add([
        Acl.make("Topic", "open-", "User:alice", "Write", pattern_type="PREFIXED"),
        Acl.make("Topic", "open-", "User:alice", "Read", pattern_type="PREFIXED"),
        Acl.make("Topic", "open-", "User:alice", "Create", pattern_type="PREFIXED"),
        Acl.make("Group", "alice-group", "User:alice", "Read"),
        Acl.make("Topic", "open-but-not-bob", "User:*", "All"),
        Acl.make("Topic", "open-but-not-bob", "User:bob", "Write", permission="Deny"),
    ])
    with EmbeddedBroker(
        listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
        sasl_credentials_file=creds_file,
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        authorizer_acls_file=acls.path,
        super_users=("User:admin",),
    ) as b:
        yield b, acls


def _client_as(b: EmbeddedBroker, user: str) -> RawClient:
    c = RawClient("127.0.0.1", b.port)
    resp = _sasl_plain(c, user, {"alice": PASSWORD}.get(user, f"{user}-secret"))
    assert resp.error_code == ErrorCode.NONE
    return c


def _produce_code(c: RawClient, topic: str) -> int:
    return c.request(_produce(topic)).topics[0].partitions[0].error_code


def test_authorizer_unit_rules() -> None:
    class _Mem:
        def __init__(self, acls: list[Acl]) -> None:
            self.acls = acls

        def acls_for(self, rt: str, name: str) -> list[Acl]:
            return [a for a in self.acls if a.matches_resource(rt, name)]

        def all(self) -> list[Acl]:
            return self.acls

    auth = Authorizer(_Mem([Acl.make("Topic", "t", "User:a", "Read", host="10.0.0.1")]), ("User:root",))  # type: ignore[arg-type]
    assert auth.authorize("User:a", "10.0.0.1", "Read", "Topic", "t")
    assert auth.authorize("User:a", "10.0.0.1", "Describe", "Topic", "t")  # implied by Read
    assert not auth.authorize("User:a", "10.0.0.2", "Read", "Topic", "t")  # other host
    assert not auth.authorize("User:a", "10.0.0.1", "Write", "Topic", "t")
    assert not auth.authorize("User:a", "10.0.0.1", "Read", "Topic", "u")  # no ACL: closed
    assert auth.authorize("User:root", "1.2.3.4", "Alter", "Cluster", "kafka-cluster")
    assert Authorizer(_Mem([]), (), True).authorize("User:x", "h", "Write", "Topic", "u")  # type: ignore[arg-type]


def test_acl_allows_and_denies_produce_and_fetch(acl_broker: tuple[EmbeddedBroker, FileAclStore]) -> None:
    b, _ = acl_broker
    allowed, refused = f"open-{uuid.uuid4().hex[:6]}", f"closed-{uuid.uuid4().hex[:6]}"
    with _client_as(b, "alice") as c:
        assert _produce_code(c, allowed) == ErrorCode.NONE
        assert _produce_code(c, refused) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        fetch = c.request(_req(ApiKey.FETCH, 4, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                               topics=[(allowed, [(0, 0, 1 << 20)]), (refused, [(0, 0, 1 << 20)])]))
        codes = {t.topic: t.partitions[0].error_code for t in fetch.topics}
        assert codes == {allowed: ErrorCode.NONE, refused: ErrorCode.TOPIC_AUTHORIZATION_FAILED}
        meta = c.request(_req(ApiKey.METADATA, 4, topics=[refused], allow_auto_topic_creation=True))
        assert meta.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert not _stored(b, refused)  # not even auto-created
    with _client_as(b, "bob") as c:
        assert _produce_code(c, allowed) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert _produce_code(c, "open-but-not-bob") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # DENY wins over User:* All
        listing = c.request(_req(ApiKey.METADATA, 1, topics=None))
        assert allowed not in [t.topic for t in listing.topics]  # not even described
    log = b.broker.replica_manager.partition(allowed, 0)
    assert log is not None and log.log.log_end_offset == 1  # alice's one message, nothing of bob's
    with _client_as(b, "admin") as c:  # a super user
        assert _produce_code(c, refused) == ErrorCode.NONE


def _commit(c: RawClient, group: str, topics: list[tuple[str, list[Any]]]) -> dict[str, int]:
    """OffsetCommit v2; waits out the offsets topic's first election (COORDINATOR_NOT_AVAILABLE)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        resp = c.request(_req(ApiKey.OFFSET_COMMIT, 2, group_id=group, generation_id=-1, member_id="", retention_time_ms=-1, topics=topics))
        codes = {t.topic: t.partitions[0].error_code for t in resp.topics}
        waiting = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR}
        if not waiting & set(codes.values()) or time.monotonic() > deadline:
            return codes
        time.sleep(0.1)


def test_acl_denied_commit_stores_nothing(acl_broker: tuple[EmbeddedBroker, FileAclStore]) -> None:
    b, acls = acl_broker
    topic = f"open-{uuid.uuid4().hex[:6]}"
    with _client_as(b, "alice") as c:
        assert _produce_code(c, topic) == ErrorCode.NONE
        assert _commit(c, "bob-group", [(topic, [(0, 1, None)])]) == {topic: ErrorCode.GROUP_AUTHORIZATION_FAILED}
        codes = _commit(c, "alice-group", [(topic, [(0, 1, None)]), ("closed-x", [(0, 1, None)])])
        assert codes == {topic: ErrorCode.NONE, "closed-x": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    with _client_as(b, "admin") as c:
        fetched = c.request(_req(ApiKey.OFFSET_FETCH, 1, group_id="bob-group", topics=[(topic, [0])]))
        assert fetched.topics[0].partitions[0].offset == -1  # the refused commit stored nothing
        fetched = c.request(_req(ApiKey.OFFSET_FETCH, 1, group_id="alice-group", topics=[(topic, [0]), ("closed-x", [0])]))
        assert {t.topic: t.partitions[0].offset for t in fetched.topics} == {topic: 1, "closed-x": -1}
    acls.add([Acl.make("Group", "bob-group", "User:alice", "Read")])  # takes effect at once
    with _client_as(b, "alice") as c:
        assert _commit(c, "bob-group", [(topic, [(0, 1, None)])]) == {topic: ErrorCode.NONE}


def test_inter_broker_apis_need_cluster_action(acl_broker: tuple[EmbeddedBroker, FileAclStore]) -> None:
    b, _ = acl_broker
    with _client_as(b, "alice") as c:
        resp = c.request(_req(ApiKey.STOP_REPLICA, 0, controller_id=0, controller_epoch=99, delete_partitions=1, ungrouped_partitions=[]))
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        fetch = c.request(_req(ApiKey.FETCH, 4, replica_id=0, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                               topics=[("open-x", [(0, 0, 1 << 20)])]))
        assert fetch.topics[0].partitions[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_kafka_python_sees_topic_authorization_failed(acl_broker: tuple[EmbeddedBroker, FileAclStore]) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError, TopicAuthorizationFailedError

    b, _ = acl_broker
    p = KafkaProducer(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                      sasl_plain_username="alice", sasl_plain_password=PASSWORD, max_block_ms=5000)
    try:
        with pytest.raises((TopicAuthorizationFailedError, KafkaError)) as info:
            p.send("closed-kp", b"x").get(timeout=10)
        assert "Authorization" in type(info.value).__name__ or "TopicAuthorization" in str(info.value)
    finally:
        p.close()
    assert not _stored(b, "closed-kp")


def test_group_listing_apis_show_only_authorized_groups() -> None:
    from hmbclient.broker.security import Session
    from hmbclient.broker.security.hooks import refuse_request
    from hmbclient.protocol.frame import RequestHeader

    class _Mem:
        acls = [Acl.make("Group", "mine", "User:alice", "Read"), Acl.make("Group", "mine", "User:alice", "Delete")]

        def acls_for(self, rt: str, name: str) -> list[Acl]:
            return [a for a in self.acls if a.matches_resource(rt, name)]

        def all(self) -> list[Acl]:
            return self.acls

    class _Channel:
        session = Session("User:alice", "127.0.0.1")

        def __init__(self) -> None:
            self.sent: list[Any] = []

        def send(self, response: Any) -> None:
            self.sent.append(response)

        def close(self, reason: str) -> None:
            raise AssertionError(reason)

    auth = Authorizer(_Mem())  # type: ignore[arg-type]
    seen: list[Any] = []

    def describe(header: Any, req: Any, channel: Any) -> None:  # the coordinator's part
        seen.append(list(req.groups))
        shape = type(req).RESPONSE_TYPE
        channel.send(shape.build(throttle_time_ms=0, groups=[{"error_code": 0, "group_id": g, "group_state": "Empty"} for g in req.groups]))

    ch = _Channel()
    req = _req(ApiKey.DESCRIBE_GROUPS, 1, groups=["mine", "theirs"])
    assert refuse_request(auth, RequestHeader(ApiKey.DESCRIBE_GROUPS, 1, 1, "t"), req, ch, describe)
    assert seen == [["mine"]]  # the handler never sees the refused group
    groups = {g["group_id"] if isinstance(g, dict) else g.group_id: (g["error_code"] if isinstance(g, dict) else g.error_code) for g in ch.sent[0].groups}
    assert groups == {"mine": ErrorCode.NONE, "theirs": ErrorCode.GROUP_AUTHORIZATION_FAILED}

    def listing(header: Any, req: Any, channel: Any) -> None:
        channel.send(type(req).RESPONSE_TYPE.build(throttle_time_ms=0, error_code=0, groups=[("mine", "consumer"), ("theirs", "consumer")]))

    ch = _Channel()
    lreq = _req(ApiKey.LIST_GROUPS, 1)
    assert refuse_request(auth, RequestHeader(ApiKey.LIST_GROUPS, 1, 2, "t"), lreq, ch, listing)
    assert [g[0] for g in ch.sent[0].groups] == ["mine"]

    ch = _Channel()
    dreq = _req(ApiKey.DELETE_GROUPS, 0, groups_names=["theirs"])
    assert refuse_request(auth, RequestHeader(ApiKey.DELETE_GROUPS, 0, 3, "t"), dreq, ch, lambda *a: pytest.fail("must not run"))
    assert [tuple(r) for r in ch.sent[0].results] == [("theirs", ErrorCode.GROUP_AUTHORIZATION_FAILED)]


def test_cluster_with_authorizer_replicates_when_brokers_may_cluster_action(zookeeper: Any, creds_file: str) -> None:
    """Two brokers, ACLs and credentials in ZooKeeper: the brokers talk to each other on the
    first (PLAINTEXT) listener as User:ANONYMOUS, which an ACL limited to the brokers' host
    lets do ClusterAction; clients use SASL. Replication works, and a client on the plaintext
    listener still may not produce."""
    from hmbclient.broker import EmbeddedCluster
    from hmbclient.broker.security.authorizer import ZkAclStore
    from hmbclient.broker.security.credentials import ZkCredentialStore
    from hmbclient.broker.security.tool import add_user, open_store

    chroot = f"{zookeeper.connect}/sec-{uuid.uuid4().hex[:8]}"
    with open_store("acls", zookeeper=chroot) as acls:
        assert isinstance(acls, ZkAclStore)
        acls.add([
            Acl.make("Cluster", "kafka-cluster", "User:ANONYMOUS", "ClusterAction", host="127.0.0.1"),
            Acl.make("Topic", "rep-", "User:alice", "All", pattern_type="PREFIXED"),
            # EmbeddedCluster's own create_topic/await_isr helpers speak plaintext too.
            Acl.make("Topic", "rep-", "User:ANONYMOUS", "Create", host="127.0.0.1", pattern_type="PREFIXED"),
            Acl.make("Topic", "rep-", "User:ANONYMOUS", "Describe", host="127.0.0.1", pattern_type="PREFIXED"),
        ])
    with open_store("users", zookeeper=chroot) as users:
        assert isinstance(users, ZkCredentialStore)
        add_user(users, "alice", PASSWORD)
    topic = f"rep-{uuid.uuid4().hex[:6]}"
    with EmbeddedCluster(brokers=2, zookeeper_connect=chroot, listeners=["PLAINTEXT://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"],
                         authorizer_class_name="AclAuthorizer", offsets_topic_replication_factor=2) as cluster:
        cluster.create_topic(topic, 1, 2)
        cluster.await_isr(topic, size=2)
        leader = cluster.broker(cluster.leader(topic, 0))
        sasl_port = next(lst.port for lst in leader.server.listeners if lst.protocol == "SASL_PLAINTEXT")
        with RawClient("127.0.0.1", sasl_port) as c:
            assert _sasl_plain(c, "alice", PASSWORD).error_code == ErrorCode.NONE
            resp = c.request(_req(ApiKey.PRODUCE, 3, transactional_id=None, acks=-1, timeout_ms=10000, topics=[(topic, [(0, encode([(None, b"both")]))])]))
            assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE
        with RawClient("127.0.0.1", leader.port) as c:  # plaintext: anonymous, no Write
            assert _produce_code(c, topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        for b in cluster.brokers:
            part = b.replica_manager.partition(topic, 0)
            deadline = time.monotonic() + TIMEOUT_S
            while part.log.log_end_offset < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert part.log.log_end_offset == 1  # the one SASL message on both replicas


def test_find_coordinator_answers_the_listener_asked_on(pki: Pki) -> None:
    """A client on the TLS listener must be sent to the coordinator's TLS address (librdkafka
    otherwise tries TLS against the plaintext port and stalls), as Metadata does."""
    with EmbeddedBroker(listeners=["PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0"], ssl_certfile=pki.server_cert, ssl_keyfile=pki.server_key) as b:
        tls_port, plain_port = _port(b, "SSL"), _port(b, "PLAINTEXT")
        ctx = ssl.create_default_context(cafile=pki.ca)
        c = RawClient("127.0.0.1", tls_port)
        c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
        with c:
            r = c.request(FindCoordinatorRequest[1](key="tls-group", key_type=0))
            assert (r.error_code, r.port) == (0, tls_port)
            md = c.request(MetadataRequest[1](topics=[]))
            assert [b_.port for b_ in md.brokers] == [tls_port]
        with RawClient("127.0.0.1", plain_port) as p:
            assert p.request(FindCoordinatorRequest[1](key="tls-group", key_type=0)).port == plain_port
