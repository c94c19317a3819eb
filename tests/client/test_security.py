"""TLS and SASL in the client (hmbclient.net.security, BrokerConnection's HANDSHAKING and
AUTHENTICATING states), against real peers:

* Tansu started with ``--authentication`` refuses unknown users for SCRAM-SHA-256/512 (error 58).
  Tansu cannot be used for the successful exchanges here: with ``--authentication`` its
  ``tansu user create`` is itself refused (NotAuthenticated), its storage in this build is
  memory only (``file://`` and ``postgres://`` are not enabled), so no user can ever exist on an
  authenticating broker; and its ``--cert`` option did not make a ``tcp://`` listener speak TLS.
* So the successful exchanges and TLS run through :class:`SecureFront`, a loopback server built
  here in front of a plain Tansu (which advertises the front's address, so every connection of
  the client goes through it): it terminates TLS with Python's ``ssl`` (certificates made in
  the test with ``cryptography``) and/or answers SaslHandshake and SaslAuthenticate itself as a
  Kafka broker would (PLAIN, SCRAM-SHA-256/512 server side written from RFC 5802, v0 raw tokens
  and v1 with ``session_lifetime_ms``), forwarding every other request to Tansu.
* End to end against the embedded broker's own listeners (SASL_SSL with SCRAM-SHA-512/256,
  SASL_PLAINTEXT with PLAIN, SSL requiring a client certificate), with its salted credentials.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.config import ConsumerConfig, ProducerConfig, SimpleConsumerConfig
from hmbclient.errors import ConfigError, ErrorCode, HmbError, KafkaConnectionError, for_code
from hmbclient.net.client import NetClient
from hmbclient.net.security import ScramMechanism, Security
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from hmbclient.testing.tansu import find_tansu

from .loopback import LoopbackServer, close_quietly

SaslAuthenticationFailedError = for_code(ErrorCode.SASL_AUTHENTICATION_FAILED)
UnsupportedSaslMechanismError = for_code(ErrorCode.UNSUPPORTED_SASL_MECHANISM)

SECRET = "s3cr3t-Pa55word-xyzzy"
USERS = {"alice": SECRET}


# -- certificates ----------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    names: list[x509.GeneralName] | None = None,
    ca: bool = False,
    expired: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    start, end = (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)) if expired else (
        now - datetime.timedelta(hours=1),
        now + datetime.timedelta(days=1),
    )
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        b = b.add_extension(x509.SubjectAlternativeName(names or []), critical=False)
        if issuer:
            b = b.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), critical=False
            )
    return b.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey | None = None) -> str:
    data = cert.public_bytes(serialization.Encoding.PEM)
    if key is not None:
        data += key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a broker certificate it signs for 127.0.0.1/localhost, one for another host, an
    expired one, and a self-signed one."""
    d = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca = _cert("test CA", ca_key, None, ca=True)
    local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    out = {"ca": _write(d / "ca.pem", ca)}
    k = _key()
    out["good"] = _write(d / "good.pem", _cert("broker", k, (ca, ca_key), names=local), k)
    k = _key()
    out["other_host"] = _write(
        d / "other.pem", _cert("elsewhere", k, (ca, ca_key), names=[x509.DNSName("broker.example.com")]), k
    )
    k = _key()
    out["expired"] = _write(d / "expired.pem", _cert("old", k, (ca, ca_key), names=local, expired=True), k)
    k = _key()
    out["self_signed"] = _write(d / "self.pem", _cert("self", k, None, names=local), k)
    # A certificate the CA revoked, and the CA's revocation list naming it.
    k = _key()
    revoked = _cert("revoked", k, (ca, ca_key), names=local)
    out["revoked"] = _write(d / "revoked.pem", revoked, k)
    now = datetime.datetime.now(datetime.UTC)
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.subject)
        .last_update(now - datetime.timedelta(hours=1))
        .next_update(now + datetime.timedelta(days=1))
        .add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(revoked.serial_number).revocation_date(now).build()
        )
        .sign(ca_key, hashes.SHA256())
    )
    (d / "crl.pem").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    out["crl"] = str(d / "crl.pem")
    # A client certificate whose key is encrypted (ssl.password unlocks it).
    k = _key()
    out["client_cert"] = _write(d / "client.pem", _cert("client", k, (ca, ca_key), names=local))
    (d / "client.key").write_bytes(
        k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                        serialization.BestAvailableEncryption(SECRET.encode()))
    )
    out["client_key"] = str(d / "client.key")
    return out


# -- the secure front ------------------------------------------------------------------------


def _recv_exact(sock: Any, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _recv_frame(sock: Any) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    return _recv_exact(sock, size)


def _send_frame(sock: Any, body: bytes) -> None:
    sock.sendall(struct.pack(">i", len(body)) + body)


class _ScramServer:
    """RFC 5802 server side, enough to check the client's proof and sign the exchange."""

    def __init__(self, mechanism: str, users: dict[str, str], *, bad_signature: bool = False) -> None:
        self.hash = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
        self.hname = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self.users = users
        self.bad_signature = bad_signature
        self.step = 0

    def _hmac(self, k: bytes, m: bytes) -> bytes:
        return hmac.new(k, m, self.hash).digest()

    def answer(self, token: bytes) -> tuple[bool, bytes]:
        """(ok, reply); ok False means refuse with the reply as the message."""
        text = token.decode()
        if self.step == 0:
            self.first_bare = text[3:]
            attrs = dict(p.split("=", 1) for p in self.first_bare.split(","))
            self.user = attrs["n"]
            if self.user not in self.users:
                return False, b"unknown user"
            self.nonce = attrs["r"] + base64.b64encode(os.urandom(12)).decode()
            self.salt = os.urandom(16)
            self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i=4096"
            self.step = 1
            return True, self.server_first.encode()
        without_proof, _, proof = text.rpartition(",p=")
        salted = hashlib.pbkdf2_hmac(self.hname, self.users[self.user].encode(), self.salt, 4096)
        stored = self.hash(self._hmac(salted, b"Client Key")).digest()
        auth = f"{self.first_bare},{self.server_first},{without_proof}".encode()
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), self._hmac(stored, auth), strict=True))
        if self.hash(client_key).digest() != stored:
            return False, b"invalid credentials"
        sig = self._hmac(self._hmac(salted, b"Server Key"), auth)
        if self.bad_signature:
            sig = bytes(len(sig))
        return True, b"v=" + base64.b64encode(sig)


class SecureFront(LoopbackServer):
    """A TLS and/or SASL front for a plain broker (see the module docstring). Settings are
    attributes, read per accepted connection, so one front serves every test in turn."""

    def __init__(self) -> None:
        self.upstream: tuple[str, int] | None = None
        self.tls: ssl.SSLContext | None = None
        self.sasl = False
        self.users = dict(USERS)
        self.mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
        self.lifetime_ms = 0
        self.bad_signature = False
        self.authentications = 0
        self.accepted = 0
        self.tls_failures = 0
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        self.accepted += 1
        client: Any = conn
        if self.tls is not None:
            try:
                client = self.tls.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError):
                self.tls_failures += 1
                close_quietly(conn)
                return
            self._conns.append(client)
        assert self.upstream is not None
        up = socket.create_connection(self.upstream)
        self._conns.append(up)
        try:
            self._serve(client, up)
        except (EOFError, OSError):
            pass
        finally:
            close_quietly(client, up)

    def _serve(self, client: Any, up: socket.socket) -> None:
        authenticated = not self.sasl
        expires = float("inf")
        raw_mech: Any = None
        mech: Any = None
        while True:
            frame = _recv_frame(client)
            if raw_mech is not None:  # SaslHandshake v0: the next frames are bare tokens
                ok, reply = self._token(raw_mech, frame)
                if not ok:
                    return  # Kafka closes the connection: the only answer a raw exchange gets
                if reply is not None:
                    _send_frame(client, reply)
                if reply is None or reply.startswith(b"v=") or raw_mech == "PLAIN":
                    if reply is None:
                        _send_frame(client, b"")
                    raw_mech, authenticated = None, True
                    self.authentications += 1
                continue
            key, version, cid = struct.unpack_from(">hhi", frame)
            (clen,) = struct.unpack_from(">h", frame, 8)
            body = memoryview(frame)[10 + max(clen, 0) :]
            head = struct.pack(">i", cid)
            if key == ApiKey.SASL_HANDSHAKE:
                req = SaslHandshakeRequest[version].decode(body)
                if req.mechanism not in self.mechanisms:
                    resp = SaslHandshakeResponse[version](error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=list(self.mechanisms))
                    _send_frame(client, head + resp.encode())
                    continue
                mech = [req.mechanism, None]
                _send_frame(client, head + SaslHandshakeResponse[version](error_code=0, mechanisms=list(self.mechanisms)).encode())
                if version == 0:
                    raw_mech = mech
                continue
            if key == ApiKey.SASL_AUTHENTICATE:
                req = SaslAuthenticateRequest[version].decode(body)
                ok, reply = self._token(mech, bytes(req.auth_bytes))
                fields: dict[str, Any] = dict(
                    error_code=0 if ok else ErrorCode.SASL_AUTHENTICATION_FAILED,
                    error_message=None if ok else f"Authentication failed: {reply.decode()}",
                    auth_bytes=reply if ok and reply else b"",
                )
                done = ok and (mech[0] == "PLAIN" or (reply or b"").startswith(b"v="))
                if version >= 1:
                    fields["session_lifetime_ms"] = self.lifetime_ms if done else 0
                _send_frame(client, head + SaslAuthenticateResponse[version](**fields).encode())
                if not ok:
                    return
                if done:
                    authenticated = True
                    self.authentications += 1
                    expires = time.monotonic() + self.lifetime_ms / 1000 if self.lifetime_ms else float("inf")
                continue
            if key != ApiKey.API_VERSIONS and (not authenticated or time.monotonic() > expires):
                return  # unauthenticated, or the session expired (KIP-368): close
            _send_frame(up, frame)
            _send_frame(client, _recv_frame(up))

    def _token(self, mech: list[Any], token: bytes) -> tuple[bool, bytes | None]:
        name = mech[0]
        if name == "PLAIN":
            _, user, password = token.split(b"\x00")
            if self.users.get(user.decode()) != password.decode():
                return False, b"Invalid username or password"
            return True, None
        if mech[1] is None:
            mech[1] = _ScramServer(name, self.users, bad_signature=self.bad_signature)
        return mech[1].answer(token)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_tansu(port: int, advertised: str, *extra: str) -> subprocess.Popen[bytes]:
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [find_tansu(), "broker", "--listener-url", url, "--advertised-listener-url", f"tcp://{advertised}",
         "--storage-engine", "memory://tansu/", *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while True:
        assert proc.poll() is None, "tansu exited on start"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            assert time.monotonic() < deadline, "tansu did not listen in time"
            time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def front() -> Any:
    """A plain Tansu that advertises the front's address, and the front."""
    f = SecureFront()
    port = _free_port()
    proc = _start_tansu(port, f.bootstrap)
    f.upstream = ("127.0.0.1", port)
    try:
        yield f
    finally:
        f.close()
        _stop(proc)


@pytest.fixture
def secure(front: SecureFront) -> Any:
    """Reset the front's settings for each test."""
    front.tls, front.sasl, front.lifetime_ms, front.bad_signature = None, False, 0, False
    front.users = dict(USERS)
    front.mechanisms = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    front.authentications = front.accepted = front.tls_failures = 0
    yield front


def _server_ctx(certfile: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile)
    return ctx


def _metadata(bootstrap: str, security: Security | None, **kw: Any) -> Any:
    kw.setdefault("request_timeout_ms", 8000)
    with NetClient(bootstrap, security=security, **kw) as c:
        return c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=None), api_key=ApiKey.METADATA)


def _roundtrip(bootstrap: str, topic: str, **security: Any) -> list[bytes]:
    """Produce three messages and read them back with a SimpleConsumer, both secured."""
    host, port = bootstrap.rsplit(":", 1)
    with Producer(metadata_broker_list=bootstrap, request_timeout_ms=8000, **security) as p:
        futs = p.send(ProducerData(topic, None, [f"m{i}".encode() for i in range(3)]))
        (part,) = {f.result(10).partition for f in futs}
    got: list[bytes] = []
    with SimpleConsumer(host, int(port), so_timeout_ms=8000, **security) as c:
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value for m in c.fetch(FetchRequest(topic, part, len(got), 1 << 20))]
    return got


# -- unit: SCRAM, settings ---------------------------------------------------------------------


def test_scram_sha256_rfc7677_vector_and_server_signature_checked() -> None:
    m = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert m.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = m.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert m.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None and m.done
    bad = ScramMechanism("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    bad.first()
    bad.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(SaslAuthenticationFailedError, match="signature does not match") as ei:
        bad.step(b"v=" + base64.b64encode(bytes(32)))
    assert "pencil" not in str(ei.value) and ei.value.errno == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_security_settings_are_one_definition_with_aliases_and_hidden_secrets() -> None:
    kw = dict(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512", sasl_plain_username="alice",
              sasl_plain_password=SECRET, ssl_key_password=SECRET)
    p = ProducerConfig(bootstrap_servers="h:1", **kw)
    s = SimpleConsumerConfig(host="h", port=1, **{"sasl.username": "alice", "sasl.password": SECRET,
                                                  "security.protocol": "SASL_PLAINTEXT"})
    c = ConsumerConfig(group_id="g", bootstrap_servers="h:1", **kw)
    assert p.security_protocol == "SASL_SSL" and p.sasl_mechanism == "SCRAM-SHA-512"
    assert p.sasl_password == SECRET and s.sasl_password == SECRET and c.ssl_password == SECRET
    for cfg in (p, s, c):
        assert SECRET not in repr(cfg) and SECRET not in str(cfg)
    assert SECRET not in repr(Security.from_config(s))
    with pytest.raises(ConfigError, match="ssl.cafle|ssl_cafle"):
        ProducerConfig(bootstrap_servers="h:1", ssl_cafle="x")
    with pytest.raises(ConfigError, match="needs 'sasl.username'"):
        ProducerConfig(bootstrap_servers="h:1", security_protocol="SASL_SSL")
    with pytest.raises(ConfigError, match="security.protocol"):
        ProducerConfig(bootstrap_servers="h:1", security_protocol="KERBEROS")
    assert Security.from_config(ProducerConfig(bootstrap_servers="h:1")) is None


# -- SASL --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_produce_consume_with_sasl(secure: SecureFront, mechanism: str) -> None:
    secure.sasl = True
    got = _roundtrip(secure.bootstrap, f"sasl-{mechanism.lower()}", security_protocol="SASL_PLAINTEXT",
                     sasl_mechanism=mechanism, sasl_username="alice", sasl_password=SECRET)
    assert got == [b"m0", b"m1", b"m2"]
    assert secure.authentications >= 2  # producer and consumer connections each authenticated


def test_sasl_v0_handshake_with_raw_tokens(secure: SecureFront) -> None:
    """A pinned 0.10 dialect does not probe: SaslHandshake v0, then raw tokens."""
    secure.sasl = True
    for mech in ("PLAIN", "SCRAM-SHA-512"):
        sec = Security("SASL_PLAINTEXT", sasl_mechanism=mech, sasl_username="alice", sasl_password=SECRET)
        assert _metadata(secure.bootstrap, sec, api_version="0.10").brokers
    assert secure.authentications == 2


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
@pytest.mark.parametrize("user,password", [("alice", "wrong-password"), ("mallory", SECRET)])
def test_wrong_password_or_unknown_user_is_refused_without_leaking(
    secure: SecureFront, mechanism: str, user: str, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    secure.sasl = True
    caplog.set_level(logging.DEBUG)
    sec = Security("SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_username=user, sasl_password=password)
    events: list[Any] = []
    with NetClient(secure.bootstrap, security=sec, request_timeout_ms=8000) as c:
        c.add_listener(events.append)
        with pytest.raises(SaslAuthenticationFailedError) as ei:
            c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=None))
    text = str(ei.value)
    assert mechanism in text and repr(user) in text and password not in text
    assert not ei.value.retriable
    assert password not in caplog.text and all(password not in repr(e) for e in events)
    assert SECRET not in caplog.text


def test_wrong_server_signature_is_an_error(secure: SecureFront) -> None:
    secure.sasl, secure.bad_signature = True, True
    sec = Security("SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="alice", sasl_password=SECRET)
    with pytest.raises(SaslAuthenticationFailedError, match="signature does not match"):
        _metadata(secure.bootstrap, sec)


def test_unsupported_mechanism_is_code_33(secure: SecureFront) -> None:
    secure.sasl, secure.mechanisms = True, ("SCRAM-SHA-512",)
    sec = Security("SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="alice", sasl_password=SECRET)
    with pytest.raises(UnsupportedSaslMechanismError, match="PLAIN.*SCRAM-SHA-512") as ei:
        _metadata(secure.bootstrap, sec)
    assert ei.value.errno == ErrorCode.UNSUPPORTED_SASL_MECHANISM


def test_reauthenticates_before_the_session_lifetime_ends(secure: SecureFront) -> None:
    """KIP-368: the front closes a connection used after its session expired; the client
    re-authenticates in time on the same connection, so requests keep working undisturbed."""
    secure.sasl, secure.lifetime_ms = True, 600
    sec = Security("SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="alice", sasl_password=SECRET)
    events: list[Any] = []
    with NetClient(secure.bootstrap, security=sec, request_timeout_ms=8000) as c:
        c.add_listener(events.append)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=None))
            time.sleep(0.05)
    assert secure.accepted == 1, "the connection was not kept"
    assert secure.authentications >= 4  # about every 510-570 ms over 3 s
    assert [e.kind for e in events] == ["broker_connected"]


def test_reauthentication_waits_for_an_answer_in_flight(secure: SecureFront) -> None:
    """A re-authentication that falls due during a long-polling Fetch starts after its answer,
    and the I/O thread does not spin meanwhile."""
    secure.sasl, secure.lifetime_ms = True, 500
    sec = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="alice", sasl_password=SECRET)
    with Producer(metadata_broker_list=secure.bootstrap, request_timeout_ms=8000, **sec) as p:
        (f,) = p.send(ProducerData("long-poll", b"k", [b"x"]))
        part = f.result(10).partition
    accepted = secure.accepted
    with SimpleConsumer("127.0.0.1", secure.port, so_timeout_ms=8000, fetch_wait_max_ms=1200, fetch_min_bytes=1,
                        prefetch=False, **sec) as c:
        t0, cpu0 = time.monotonic(), time.process_time()
        for _ in range(2):
            assert list(c.fetch(FetchRequest("long-poll", part, 1, 1 << 20))) == []
        elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
        assert [m.value for m in c.fetch(FetchRequest("long-poll", part, 0, 1 << 20))] == [b"x"]
    assert elapsed >= 2.0, "the broker did not hold the fetches: nothing was in flight at the re-auth point"
    assert secure.accepted - accepted == 1, "the consumer's connection was not kept"
    assert secure.authentications >= 3  # producer, consumer, and the consumer's re-authentication(s)
    assert cpu < 0.2 * elapsed, f"{cpu:.2f}s of CPU in {elapsed:.2f}s: the I/O loop spun"


def test_tansu_refuses_unknown_users() -> None:
    """A real broker's refusal: Tansu with --authentication knows no users (see module doc)."""
    port = _free_port()
    proc = _start_tansu(port, f"127.0.0.1:{port}", "--authentication")
    try:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            sec = Security("SASL_PLAINTEXT", sasl_mechanism=mech, sasl_username="nobody", sasl_password=SECRET)
            with pytest.raises(SaslAuthenticationFailedError, match=f"{mech} authentication of user 'nobody'") as ei:
                _metadata(f"127.0.0.1:{port}", sec)
            assert SECRET not in str(ei.value)
    finally:
        _stop(proc)


# -- TLS ---------------------------------------------------------------------------------------


def test_produce_consume_over_tls_and_sasl_ssl(secure: SecureFront, pki: dict[str, str]) -> None:
    secure.tls = _server_ctx(pki["good"])
    assert _roundtrip(secure.bootstrap, "tls", security_protocol="SSL", ssl_cafile=pki["ca"]) == [b"m0", b"m1", b"m2"]
    secure.sasl = True
    got = _roundtrip(secure.bootstrap, "sasl-ssl", security_protocol="SASL_SSL", ssl_cafile=pki["ca"],
                     sasl_mechanism="SCRAM-SHA-512", sasl_username="alice", sasl_password=SECRET)
    assert got == [b"m0", b"m1", b"m2"]


def test_tls_large_fetch_answers_arrive_whole(secure: SecureFront, pki: dict[str, str]) -> None:
    """Frames bigger than a TLS record: decrypted bytes held by the SSL layer are read too."""
    secure.tls = _server_ctx(pki["good"])
    sec = dict(security_protocol="SSL", ssl_cafile=pki["ca"])
    big = os.urandom(300_000)
    with Producer(metadata_broker_list=secure.bootstrap, request_timeout_ms=8000, **sec) as p:
        futs = [f for _ in range(4) for f in p.send(ProducerData("tls-big", b"k", [big]))]
        (part,) = {f.result(10).partition for f in futs}
    with SimpleConsumer("127.0.0.1", secure.port, so_timeout_ms=8000, **sec) as c:
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 4 and time.monotonic() < deadline:
            got += [m.value for m in c.fetch(FetchRequest("tls-big", part, len(got), 4 << 20))]
    assert got == [big] * 4


@pytest.mark.parametrize(
    "cert,cafile,host,match",
    [
        ("self_signed", "ca", "127.0.0.1", "not trusted"),
        ("good", None, "127.0.0.1", "not trusted"),
        ("other_host", "ca", "127.0.0.1", "does not name '127.0.0.1'"),
        ("expired", "ca", "127.0.0.1", "expired"),
    ],
)
def test_tls_refusals_name_the_cause(
    secure: SecureFront, pki: dict[str, str], cert: str, cafile: str | None, host: str, match: str
) -> None:
    secure.tls = _server_ctx(pki[cert])
    sec = Security("SSL", ssl_cafile=pki[cafile] if cafile else None)
    with pytest.raises(KafkaConnectionError, match=match):
        _metadata(f"{host}:{secure.port}", sec, connect_timeout_ms=5000)


def test_revoked_certificate_is_refused_with_ssl_crlfile(secure: SecureFront, pki: dict[str, str]) -> None:
    secure.tls = _server_ctx(pki["revoked"])
    with pytest.raises(KafkaConnectionError, match="revoked"):
        _metadata(secure.bootstrap, Security("SSL", ssl_cafile=pki["ca"], ssl_crlfile=pki["crl"]))
    secure.tls = _server_ctx(pki["good"])  # the list names only the revoked one
    assert _metadata(secure.bootstrap, Security("SSL", ssl_cafile=pki["ca"], ssl_crlfile=pki["crl"])).brokers


def test_encrypted_client_key_needs_ssl_password(pki: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as ei:
        Security("SSL", ssl_cafile=pki["ca"], ssl_certfile=pki["client_cert"], ssl_keyfile=pki["client_key"],
                 ssl_password="wrong-key-password")
    assert "wrong-key-password" not in str(ei.value) and "client.key" in str(ei.value)
    sec = Security("SSL", ssl_cafile=pki["ca"], ssl_certfile=pki["client_cert"], ssl_keyfile=pki["client_key"],
                   ssl_password=SECRET)
    assert sec.ssl_context is not None and SECRET not in repr(sec)


def test_hostname_check_can_be_turned_off(secure: SecureFront, pki: dict[str, str]) -> None:
    secure.tls = _server_ctx(pki["other_host"])
    sec = Security("SSL", ssl_cafile=pki["ca"], ssl_check_hostname=False)
    assert _metadata(secure.bootstrap, sec).brokers


def test_plaintext_client_on_a_tls_listener_fails_clearly(secure: SecureFront, pki: dict[str, str]) -> None:
    """Python's ssl server waits silently for the rest of a "record" a plaintext request never
    completes; the client gives up within its timeouts and says what is likely wrong."""
    secure.tls = _server_ctx(pki["good"])
    t0 = time.monotonic()
    with pytest.raises(HmbError, match="if this is a TLS listener, set security.protocol to SSL") as ei:
        with NetClient(secure.bootstrap, request_timeout_ms=3000, probe_timeout_ms=1000) as c:
            c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=None), api_key=ApiKey.METADATA)
    assert "Metadata" in str(ei.value)
    assert time.monotonic() - t0 < 5


def test_tls_client_on_a_plaintext_listener_fails_clearly(secure: SecureFront, pki: dict[str, str]) -> None:
    sec = Security("SSL", ssl_cafile=pki["ca"])
    with pytest.raises(HmbError, match="TLS"):
        _metadata(secure.bootstrap, sec, connect_timeout_ms=2000)


def test_security_reaches_every_connection_of_a_client(secure: SecureFront, pki: dict[str, str]) -> None:
    """Bootstrap and the broker connections learnt from metadata all speak TLS + SASL."""
    secure.tls = _server_ctx(pki["good"])
    secure.sasl = True
    sec = Security("SASL_SSL", ssl_cafile=pki["ca"], sasl_mechanism="PLAIN", sasl_username="alice", sasl_password=SECRET)
    with NetClient(secure.bootstrap, security=sec, request_timeout_ms=8000) as c:
        md = c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=None))
        b = md.brokers[0]
        c.update_brokers({b.node_id: (b.host, b.port)})
        assert c.call(b.node_id, lambda v: v.build(ApiKey.METADATA, topics=None)).brokers
    assert secure.authentications == 2 and secure.tls_failures == 0


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_produce_and_consume_with_X_settings(
    secure: SecureFront, pki: dict[str, str], tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    from hmbclient.cli import main

    secure.tls = _server_ctx(pki["good"])
    secure.sasl = True
    pw = tmp_path / "password"
    pw.write_text(SECRET + "\n")
    x = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.cafile={pki['ca']}", "-X", "sasl.mechanism=SCRAM-SHA-256",
         "-X", "sasl.username=alice", "-X", f"sasl.password=@{pw}"]
    data = tmp_path / "in.txt"
    data.write_text("a\nb\nc\n")
    assert main(["produce", "cli-secure", "-b", secure.bootstrap, "--file", str(data), "-q", *x]) == 0
    capsysbinary.readouterr()
    assert main(["consume", "cli-secure", "-b", secure.bootstrap, "-e", *x]) == 0
    assert sorted(capsysbinary.readouterr().out.split()) == [b"a", b"b", b"c"]
    assert main(["topics", "-b", secure.bootstrap, *x[:-2], "-X", "sasl.password=wrong"]) == 1
    err = capsysbinary.readouterr().err
    assert b"SaslAuthenticationFailedError" in err and b"wrong" not in err and SECRET.encode() not in err


# -- end to end against the embedded broker's listeners ----------------------------------------


@pytest.fixture(scope="module")
def hmb_secure(pki: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An EmbeddedBroker with SASL_SSL and SASL_PLAINTEXT listeners (alice's SCRAM credentials)
    and one with an SSL listener that requires a client certificate."""
    from hmbclient.broker import EmbeddedBroker
    from hmbclient.broker.security.credentials import FileCredentialStore, make_credential

    creds = str(tmp_path_factory.mktemp("creds") / "credentials.json")
    FileCredentialStore(creds).put("alice", {m: make_credential(m, SECRET) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    with EmbeddedBroker(
        listeners=["SASL_SSL://127.0.0.1:0", "SASL_PLAINTEXT://127.0.0.1:0"],
        ssl_certfile=pki["good"], ssl_keyfile=pki["good"], sasl_credentials_file=creds,
    ) as sasl, EmbeddedBroker(
        listeners=["SSL://127.0.0.1:0"], ssl_certfile=pki["good"], ssl_keyfile=pki["good"],
        ssl_cafile=pki["ca"], ssl_client_auth="required",
    ) as mtls:
        def port(b: Any, protocol: str) -> int:
            return int(next(lst.port for lst in b.broker.server.listeners if lst.protocol == protocol))

        yield {"SASL_SSL": port(sasl, "SASL_SSL"), "SASL_PLAINTEXT": port(sasl, "SASL_PLAINTEXT"),
               "SSL": port(mtls, "SSL")}


@pytest.mark.parametrize(
    "protocol,mechanism",
    [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN")],
)
def test_embedded_broker_roundtrip(hmb_secure: dict[str, int], pki: dict[str, str], protocol: str, mechanism: str) -> None:
    got = _roundtrip(f"127.0.0.1:{hmb_secure[protocol]}", f"e2e-{mechanism.lower()}", security_protocol=protocol,
                     ssl_cafile=pki["ca"], sasl_mechanism=mechanism, sasl_username="alice", sasl_password=SECRET)
    assert got == [b"m0", b"m1", b"m2"]


def test_embedded_broker_refuses_a_wrong_password(hmb_secure: dict[str, int], pki: dict[str, str]) -> None:
    sec = Security("SASL_SSL", ssl_cafile=pki["ca"], sasl_mechanism="SCRAM-SHA-512", sasl_username="alice",
                   sasl_password="not-it")
    with pytest.raises(SaslAuthenticationFailedError, match="SCRAM-SHA-512 authentication of user 'alice'") as ei:
        _metadata(f"127.0.0.1:{hmb_secure['SASL_SSL']}", sec)
    assert "not-it" not in str(ei.value)


def test_embedded_broker_mutual_tls(hmb_secure: dict[str, int], pki: dict[str, str]) -> None:
    """A client certificate (ssl.certfile, its key encrypted: ssl.keyfile + ssl.password) where
    the broker requires one."""
    bootstrap = f"127.0.0.1:{hmb_secure['SSL']}"
    assert _roundtrip(bootstrap, "e2e-mtls", security_protocol="SSL", ssl_cafile=pki["ca"],
                      ssl_certfile=pki["client_cert"], ssl_keyfile=pki["client_key"],
                      ssl_password=SECRET) == [b"m0", b"m1", b"m2"]
    with pytest.raises(KafkaConnectionError):
        _metadata(bootstrap, Security("SSL", ssl_cafile=pki["ca"]), connect_timeout_ms=3000)


def test_embedded_broker_plaintext_client_on_its_tls_listener(hmb_secure: dict[str, int]) -> None:
    t0 = time.monotonic()
    with pytest.raises(KafkaConnectionError, match="if this is a TLS listener, set security.protocol"):
        _metadata(f"127.0.0.1:{hmb_secure['SASL_SSL']}", None, request_timeout_ms=3000, probe_timeout_ms=1000)
    assert time.monotonic() - t0 < 5
