"""``hmb topics --create`` / ``--describe`` and the admin functions behind them, against a real
standalone embedded broker (one broker, so one replica per partition).

The CLI runs as a subprocess (as a user runs it); ``create_topic`` / ``describe_topics`` are
also called directly where the exception class or the exact broker message is the point.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from hmbclient import errors
from hmbclient.admin import PartitionInfo, create_topic, describe_topics
from hmbclient.net.client import NetClient
from hmbclient.protocol.api.base import ApiKey

HMB = [sys.executable, "-m", "hmbclient.cli"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*HMB, "topics", *args], capture_output=True, text=True, timeout=timeout, env=env)


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("hmb topics:"), err
    return err


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines()]


def test_create_then_describe_shows_the_broker_as_leader_replica_and_isr(hmb_broker: Any) -> None:
    topic = unique("cli-create")
    r = run("-b", hmb_broker.bootstrap, "--create", topic, "--partitions", "3", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"created topic {topic} (3 partitions, replication factor 1)"

    me = str(hmb_broker.broker_id)
    r = run("-b", hmb_broker.bootstrap, "--describe", topic)
    assert r.returncode == 0, r.stderr
    rows = table(r.stdout)
    assert rows[0] == ["topic", "partition", "leader", "replicas", "isr"]  # no offline column: none offline
    assert rows[1:] == [[topic, str(p), me, me, me] for p in range(3)]

    # --describe without names covers every topic, this one included; the plain listing agrees.
    r = run("-b", hmb_broker.bootstrap, "--describe")
    assert r.returncode == 0, r.stderr
    assert [row for row in table(r.stdout) if row[0] == topic] == rows[1:]
    r = run("-b", hmb_broker.bootstrap)
    assert r.returncode == 0, r.stderr
    assert [topic, "3"] in table(r.stdout)

    me_id = hmb_broker.broker_id
    assert describe_topics(hmb_broker.bootstrap, [topic]) == [
        PartitionInfo(topic, p, me_id, (me_id,), (me_id,), ()) for p in range(3)
    ]


def test_create_of_an_existing_topic_names_topic_already_exists(hmb_broker: Any) -> None:
    topic = unique("cli-twice")
    create_topic(hmb_broker.bootstrap, topic, 1, 1)
    r = run("-b", hmb_broker.bootstrap, "--create", topic, "--partitions", "2", "--replication-factor", "1")
    err = one_error_line(r)
    assert "TOPIC_ALREADY_EXISTS" in err and topic in err, err
    with pytest.raises(errors.TopicAlreadyExistsError):
        create_topic(hmb_broker.bootstrap, topic, 1, 1)
    # The refused second create changed nothing.
    assert len(describe_topics(hmb_broker.bootstrap, [topic])) == 1


@pytest.mark.parametrize("name", ["../escape", "a/b", "x" * 250, "."])
def test_create_with_an_illegal_name_names_invalid_topic(hmb_broker: Any, name: str) -> None:
    r = run("-b", hmb_broker.bootstrap, "--create", name, "--partitions", "1", "--replication-factor", "1")
    assert "INVALID_TOPIC" in one_error_line(r)


def _validate_only_message(bootstrap: str, topic: str, partitions: int, rf: int) -> tuple[int, str | None]:
    """What the broker says, in its own words, about creating this topic (validate_only: no change)."""
    with NetClient(bootstrap) as client:
        resp = client.call(client.bootstrap_ids[0], lambda v: v.build(
            ApiKey.CREATE_TOPICS, topics=[(topic, partitions, rf, [], [])], timeout_ms=10_000, validate_only=True))
    (t,) = resp.topics
    return t.error_code, t.error_message


def test_replication_factor_above_the_broker_count_names_invalid_replication_factor(hmb_broker: Any) -> None:
    topic = unique("cli-rf3")
    code, broker_message = _validate_only_message(hmb_broker.bootstrap, topic, 1, 3)
    assert code == errors.ErrorCode.INVALID_REPLICATION_FACTOR and broker_message

    r = run("-b", hmb_broker.bootstrap, "--create", topic, "--partitions", "1", "--replication-factor", "3")
    err = one_error_line(r)
    assert "INVALID_REPLICATION_FACTOR" in err and broker_message in err and topic in err, err
    with pytest.raises(errors.InvalidReplicationFactorError) as e:
        create_topic(hmb_broker.bootstrap, topic, 1, 3)
    assert str(e.value) == str(errors.InvalidReplicationFactorError(broker_message))
    # Nothing was created by the refused requests.
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(run("-b", hmb_broker.bootstrap, "--describe", topic))


def test_describe_of_an_unknown_topic_fails_and_does_not_create_it(hmb_broker: Any) -> None:
    topic = unique("cli-nosuch")
    # Metadata v0 (the "0.8" set) cannot ask "do not auto-create"; describe must not name the
    # topic in its request, or this broker (auto-creation on) would create it.
    for api_version in ("0.8", "auto"):
        err = one_error_line(run("-b", hmb_broker.bootstrap, "--describe", topic, "--api-version", api_version))
        assert "UNKNOWN_TOPIC_OR_PARTITION" in err and topic in err, err
    r = run("-b", hmb_broker.bootstrap)
    assert r.returncode == 0 and topic not in r.stdout, r.stdout


def test_create_tries_the_next_bootstrap_broker(hmb_broker: Any, unused_port: int) -> None:
    topic = unique("cli-fallback")
    r = run("-b", f"127.0.0.1:{unused_port},{hmb_broker.bootstrap}",
            "--create", topic, "--partitions", "2", "--replication-factor", "1")
    assert r.returncode == 0, r.stderr
    assert [p.partition for p in describe_topics(hmb_broker.bootstrap, [topic])] == [0, 1]


def test_a_dialect_without_create_topics_sends_nothing(hmb_broker: Any) -> None:
    topic = unique("cli-legacy")
    err = one_error_line(run("-b", hmb_broker.bootstrap, "--api-version", "0.8",
                             "--create", topic, "--partitions", "1", "--replication-factor", "1"))
    assert "UnsupportedByBroker" in err and "CreateTopics" in err, err
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        describe_topics(hmb_broker.bootstrap, [topic])


@pytest.mark.parametrize(("args", "named"), [
    (["--create", "t"], "--partitions"),
    (["--create", "t", "--partitions", "1"], "--replication-factor"),
    (["--partitions", "1"], "--create"),
    (["--describe", "--replication-factor", "1"], "--create"),
])
def test_create_options_go_together(args: list[str], named: str, unused_port: int) -> None:
    # Refused before any broker is asked: nothing listens on unused_port.
    err = one_error_line(run("-b", f"127.0.0.1:{unused_port}", *args))
    assert named in err, err


def test_create_and_describe_exclude_each_other() -> None:
    r = run("--create", "t", "--describe")
    assert r.returncode == 2 and "not allowed with" in r.stderr, r.stderr
