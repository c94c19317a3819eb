"""The same admin script against our broker and against Apache Kafka 4.4 (KRaft, one node),
through hmbclient.admin: the error codes (and the outcomes a client acts on) must be the same.

Kafka 4.4's KRaft controller words some refusals differently from its ZooKeeper-mode brokers,
whose messages ours follow, so the messages are not compared; the codes are.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import admin
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import BrokerError


@pytest.fixture(scope="module")
def ours() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(group_initial_rebalance_delay_ms=0) as b:
        yield b


def _code(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        fn(*args, **kwargs)
        return 0
    except BrokerError as e:
        return e.errno


def script(bootstrap: str) -> dict[str, Any]:
    topic = f"vs-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    admin.create_topic(bootstrap, topic, 2, 1)
    wait_until(lambda: admin.list_topics(bootstrap).get(topic) == 2, 30, "topic served")
    cp = admin.create_partitions
    out["same count"] = cp(bootstrap, {topic: 2}, raise_errors=False)[topic][0]
    out["fewer"] = cp(bootstrap, {topic: 1}, raise_errors=False)[topic][0]
    out["assignment count"] = cp(bootstrap, {topic: 4}, assignments={topic: [[0]]}, raise_errors=False)[topic][0]
    out["validate only"] = cp(bootstrap, {topic: 3}, validate_only=True, raise_errors=False)[topic][0]
    out["unknown topic"] = cp(bootstrap, {topic + "-x": 3}, raise_errors=False)[topic + "-x"][0]
    out["grow"] = cp(bootstrap, {topic: 4}, raise_errors=False)[topic][0]
    wait_until(lambda: admin.list_topics(bootstrap).get(topic) == 4, 30, "4 partitions")
    out["set config"] = _code(admin.alter_configs, bootstrap, "topic", topic, {"retention.ms": "3600000"})
    entry = admin.describe_configs(bootstrap, "topic", topic)["retention.ms"]
    out["described"] = (entry.value, entry.source, entry.read_only)
    out["unknown config"] = _code(admin.alter_configs, bootstrap, "topic", topic, {"retention.mss": "1"})
    out["bad value"] = _code(admin.alter_configs, bootstrap, "topic", topic, {"retention.ms": "soon"})
    out["delete config"] = _code(admin.alter_configs, bootstrap, "topic", topic, {}, delete=["retention.ms"])
    out["after delete"] = admin.describe_configs(bootstrap, "topic", topic)["retention.ms"].source != "TOPIC_CONFIG"
    out["unknown topic config"] = _code(admin.describe_configs, bootstrap, "topic", topic + "-x")
    out["election"] = sorted(admin.elect_preferred_leaders(bootstrap, [(topic, 0)]).values())
    # (a fresh cluster answers COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / LOAD_IN_PROGRESS while its
    # offsets topic gets a leader and loads, as clients retry)
    codes: list[Any] = []
    wait_until(lambda: codes.append(_code(admin.delete_group_offsets, bootstrap, f"g-{uuid.uuid4().hex[:6]}", [(topic, 0)])) or codes[-1] not in (14, 15, 16),
               30, "a group coordinator")
    out["unknown group"] = codes[-1]
    out["cluster brokers"] = len(admin.describe_cluster(bootstrap)["brokers"])
    out["delete"] = admin.delete_topics(bootstrap, [topic, topic + "-x"], raise_errors=False)
    out["delete"] = sorted((k == topic, v) for k, v in out["delete"].items())
    wait_until(lambda: topic not in admin.list_topics(bootstrap), 30, "deleted")
    return out


def test_same_answers_as_kafka_4(ours: EmbeddedBroker, apache_kafka: Any) -> None:
    theirs = script(apache_kafka.bootstrap)
    mine = script(ours.bootstrap)
    assert mine == theirs
    # ... and the script saw refusals, not only successes
    assert (theirs["same count"], theirs["fewer"], theirs["assignment count"], theirs["unknown config"]) == (37, 37, 39, 40)
    assert theirs["described"] == ("3600000", "TOPIC_CONFIG", False) and theirs["delete"] == [(False, 3), (True, 0)]
