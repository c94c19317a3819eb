"""``hmb users`` / ``hmb acls`` (files and ZooKeeper in Kafka's layout) and ``hmb broker
--listener``, run as subprocesses, checked with real clients (kafka-python)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker

HMB = [sys.executable, "-m", "hmbclient.cli"]
PASSWORD = "s3cret-pw"


def run(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*HMB, *args], input=input, capture_output=True, timeout=timeout, env=env)


def ok(*args: str, input: bytes | None = None) -> str:
    r = run(*args, input=input)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def test_users_file_add_list_remove(tmp_path: Path) -> None:
    creds = str(tmp_path / "creds.json")
    out = ok("users", "add", "alice", "--password-stdin", "--credentials", creds, input=PASSWORD.encode() + b"\n")
    assert "alice" in out and PASSWORD not in out
    ok("users", "add", "bob", "--password-stdin", "--mechanism", "SCRAM-SHA-512", "--credentials", creds, input=b"pw-of-bob\n")
    text = Path(creds).read_text()
    assert PASSWORD not in text and "pw-of-bob" not in text
    assert ",iterations=4096" in json.loads(text)["alice"]["SCRAM-SHA-256"]
    assert ok("users", "list", "--credentials", creds).splitlines() == ["alice\tSCRAM-SHA-256,SCRAM-SHA-512", "bob\tSCRAM-SHA-512"]
    ok("users", "remove", "bob", "--credentials", creds)
    assert ok("users", "list", "--credentials", creds).splitlines() == ["alice\tSCRAM-SHA-256,SCRAM-SHA-512"]
    r = run("users", "remove", "bob", "--credentials", creds)
    assert r.returncode == 1 and b"no user" in r.stderr
    r = run("users", "add", "carol", "--credentials", creds)  # a password on argv is not offered
    assert r.returncode == 1 and b"--password-stdin" in r.stderr


def test_acls_file_add_list_remove(tmp_path: Path) -> None:
    acls = str(tmp_path / "acls.json")
    ok("acls", "add", "--principal", "User:alice", "--operation", "Read", "--operation", "Write", "--topic", "t-", "--pattern", "PREFIXED", "--acls-file", acls)
    ok("acls", "add", "--principal", "User:bob", "--operation", "All", "--deny", "--group", "g", "--acls-file", acls)
    listed = ok("acls", "list", "--acls-file", acls)
    assert "User:alice has Allow permission for operations: Read from hosts: * on Topic:PREFIXED:t-" in listed
    assert "User:bob has Deny permission for operations: All from hosts: * on Group:LITERAL:g" in listed
    assert "removed 1" in ok("acls", "remove", "--principal", "User:alice", "--operation", "Write", "--topic", "t-", "--pattern", "PREFIXED", "--acls-file", acls)
    assert "Write" not in ok("acls", "list", "--principal", "User:alice", "--acls-file", acls)
    r = run("acls", "add", "--principal", "alice", "--operation", "Read", "--topic", "x", "--acls-file", acls)
    assert r.returncode == 1 and b"TYPE:NAME" in r.stderr


@pytest.fixture
def chroot(zookeeper: Any) -> str:
    return f"{zookeeper.connect}/sec-{uuid.uuid4().hex[:8]}"


def _kafka_python(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> dict[str, Any]:
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)


def test_users_and_acls_in_zookeeper_drive_the_broker(chroot: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError
    from kazoo.client import KazooClient

    ok("users", "add", "alice", "--password-stdin", "--zookeeper", chroot, input=PASSWORD.encode() + b"\n")
    ok("acls", "add", "--principal", "User:alice", "--operation", "Write", "--operation", "Read", "--operation", "Create", "--topic", "zk-", "--pattern", "PREFIXED", "--zookeeper", chroot)
    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    try:
        doc = json.loads(zk.get("/config/users/alice")[0])
        assert doc["version"] == 1 and doc["config"]["SCRAM-SHA-512"].startswith("salt=")
        assert PASSWORD not in json.dumps(doc)
        acl = json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/zk-")[0])
        assert {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"} in acl["acls"]
    finally:
        zk.stop()
        zk.close()
    assert ok("users", "list", "--zookeeper", chroot).splitlines() == ["alice\tSCRAM-SHA-256,SCRAM-SHA-512"]
    topic = f"zk-{uuid.uuid4().hex[:6]}"
    with EmbeddedBroker(zookeeper_connect=chroot, listeners=["SASL_PLAINTEXT://127.0.0.1:0"], authorizer_class_name="AclAuthorizer") as b:
        p = KafkaProducer(**_kafka_python(b.bootstrap, "alice", PASSWORD, "SCRAM-SHA-512"))
        try:
            p.send(topic, b"via-zk").get(timeout=20)
            with pytest.raises(KafkaError):
                p.send("elsewhere", b"no").get(timeout=20)
        finally:
            p.close()
        c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **_kafka_python(b.bootstrap, "alice", PASSWORD))
        try:
            assert [m.value for m in c][:1] == [b"via-zk"]
        finally:
            c.close()
        assert not b.broker.metadata.has_topic("elsewhere")
        ok("users", "remove", "alice", "--zookeeper", chroot)  # the next login fails at once
        with pytest.raises(KafkaError):
            p2 = KafkaProducer(**_kafka_python(b.bootstrap, "alice", PASSWORD), max_block_ms=3000)
            try:
                p2.send(topic, b"after removal").get(timeout=5)
            finally:
                p2.close()


@pytest.fixture
def hmb_sasl_broker(tmp_path: Path) -> Iterator[tuple[dict[str, int], str]]:
    creds = str(tmp_path / "creds.json")
    ok("users", "add", "alice", "--password-stdin", "--credentials", creds, input=PASSWORD.encode() + b"\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [*HMB, "broker", "--port", "0", "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_PLAINTEXT://127.0.0.1:0",
         "--set", f"sasl.credentials.file={creds}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline().decode()
                if " listening on " in line:
                    break
        assert " listeners=" in line, (line, proc.stderr.read().decode() if proc.poll() is not None and proc.stderr else "")
        ports = {}
        for item in line.split(" listeners=", 1)[1].split()[0].split(","):
            proto, _, addr = item.partition("://")
            ports[proto] = int(addr.rsplit(":", 1)[1])
        yield ports, creds
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_hmb_broker_listener_flag_serves_sasl(hmb_sasl_broker: tuple[dict[str, int], str]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    ports, _ = hmb_sasl_broker
    assert set(ports) == {"PLAINTEXT", "SASL_PLAINTEXT"}
    sasl = _kafka_python(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "alice", PASSWORD, "PLAIN")
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    p = KafkaProducer(**sasl)
    try:
        p.send(topic, b"over-sasl").get(timeout=20)
    finally:
        p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, bootstrap_servers=f"127.0.0.1:{ports['PLAINTEXT']}")
    try:
        assert [m.value for m in c][:1] == [b"over-sasl"]
    finally:
        c.close()
