"""``hmb groups`` and ``hmb consume --group`` without ``--zookeeper``: groups balanced by the
brokers' group coordinator, run as subprocesses (as a user runs them) against Tansu, which has
a classic group coordinator and no ZooKeeper."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.consumer.connector import Consumer
from hmbclient.net import NetClient
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.records import NONE, encode_records

HMB = [sys.executable, "-m", "hmbclient.cli"]

pytestmark = pytest.mark.timeout(180)


def run(*args: str, input: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*HMB, *args], input=input, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def tansu() -> Iterator[Any]:
    from hmbclient.testing.tansu import LocalTansu

    with LocalTansu() as t:
        yield t


def produce_one_by_one(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """``count`` messages spread over the partitions, one record batch each: Tansu's ListOffsets
    counts batches, not records, as the log end offset, so only single-record batches give lag
    rows that add up."""
    client = NetClient(bootstrap)
    try:
        for i in range(count):
            records = encode_records(2, NONE, [(None, f"m{i}".encode(), None)])

            def build(versions: Any, partition: int = i % partitions, records: bytes = records) -> Any:
                return versions.build(
                    ApiKey.PRODUCE, transactional_id=None, acks=1, timeout_ms=10_000,
                    topics=[{"topic": topic, "partitions": [{"partition": partition, "records": records}]}],
                )

            answer = client.call(client.bootstrap_ids[0], build, timeout_ms=10_000)
            assert answer.topics[0].partitions[0].error_code == 0, answer
    finally:
        client.close()


def rows_of(stdout: str, topic: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.startswith(topic + " ")]


def test_consume_as_a_broker_group_then_list_and_describe_it(tansu: Any) -> None:
    topic, group = f"cli-bg-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    r = run("topics", "-b", tansu.bootstrap, "--create", topic, "--partitions", "4", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    produce_one_by_one(tansu.bootstrap, topic, 4, 300)
    r = run("consume", topic, "-b", tansu.bootstrap, "--group", group, "--count", "100", "--timeout-ms", "5000")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 100

    r = run("groups", "-b", tansu.bootstrap)
    assert r.returncode == 0, r.stderr
    assert group in r.stdout.split()

    r = run("groups", group, "-b", tansu.bootstrap)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"group {group}: state "), r.stdout
    rows = rows_of(r.stdout, topic)
    assert {int(row[1]) for row in rows} <= set(range(4)) and rows, r.stdout
    committed = sum(int(row[3]) for row in rows if row[3] != "-")
    lag = sum(int(row[5]) for row in rows if row[5] != "-")
    assert committed >= 100 and committed + lag == 300, r.stdout

    # The same group consumes the rest from where it committed: nothing twice, nothing lost.
    r = run("consume", topic, "-b", tansu.bootstrap, "--group", group, "--timeout-ms", "4000")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 300 - committed
    r = run("groups", group, "-b", tansu.bootstrap)
    rows = rows_of(r.stdout, topic)
    assert sum(int(row[5]) for row in rows if row[5] != "-") == 0, r.stdout


def test_describe_shows_the_live_members(tansu: Any) -> None:
    topic, group = f"cli-bgm-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    r = run("topics", "-b", tansu.bootstrap, "--create", topic, "--partitions", "2", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    members = [
        Consumer.create({"bootstrap.servers": tansu.bootstrap, "group.id": group, "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, "consumer.timeout.ms": 500})
        for _ in range(2)
    ]
    try:
        for m in members:
            m.create_message_streams({topic: 1})
        wait_until(lambda: all(m.await_rebalance(0.5) for m in members)
                   and sum(len(m.owned_partitions()) for m in members) == 2, 60, "two members sharing the topic")
        r = run("groups", group, "-b", tansu.bootstrap)
        assert r.returncode == 0, r.stderr
        assert "2 member(s)" in r.stdout.splitlines()[0], r.stdout
        assert len([line for line in r.stdout.splitlines() if line.startswith("  member ")]) == 2, r.stdout
    finally:
        for m in members:
            m.shutdown()


def test_unknown_broker_group_is_one_error_line(tansu: Any) -> None:
    r = run("groups", f"nobody-{uuid.uuid4().hex[:6]}", "-b", tansu.bootstrap)
    assert r.returncode == 1, r.stdout
    err = r.stderr.strip()
    assert err.startswith("hmb groups:") and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_groups_over_sasl_with_client_settings(tmp_path: Any) -> None:
    """``-X`` security settings reach the group commands: a SASL-only embedded broker, a
    group that consumed through it, listed and described with the password read from a file."""
    from hmbclient.broker import EmbeddedBroker
    from hmbclient.broker.security.credentials import FileCredentialStore, make_credential

    creds = str(tmp_path / "credentials.json")
    FileCredentialStore(creds).put("alice", {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "alice-pw")})
    pw = tmp_path / "pw"
    pw.write_text("alice-pw\n")
    x = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
         "-X", "sasl.username=alice", "-X", f"sasl.password=@{pw}"]
    topic, group = f"cli-sg-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    with EmbeddedBroker(listeners=["SASL_PLAINTEXT://127.0.0.1:0"], sasl_credentials_file=creds) as b:
        bootstrap = f"127.0.0.1:{b.broker.server.listeners[0].port}"
        r = run("produce", topic, "-b", bootstrap, *x, input="a\nb\nc\n")
        assert r.returncode == 0, r.stderr
        r = run("consume", topic, "-b", bootstrap, "--group", group, "--count", "3", "--timeout-ms", "5000", *x)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["a", "b", "c"]
        r = run("groups", "-b", bootstrap, *x)
        assert r.returncode == 0, r.stderr
        assert group in r.stdout.split()
        r = run("groups", group, "-b", bootstrap, *x)
        assert r.returncode == 0, r.stderr
        assert [row[3] for row in rows_of(r.stdout, topic)] == ["3"], r.stdout  # committed offset
        r = run("groups", "-b", bootstrap)  # no credentials: refused, one clear line
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "alice-pw" not in r.stderr
