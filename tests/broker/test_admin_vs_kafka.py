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
from hmbclient.broker.configs import (
    ALTERABLE_TOPIC_CONFIGS,
    DESCRIBED_TOPIC_CONFIGS,
    LOG_OVERRIDE_FROM_BROKER,
)
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


def describe_topic_script(bootstrap: str) -> dict[str, Any]:
    """A topic with overrides set at creation and by IncrementalAlterConfigs, described with synonyms."""
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    admin.create_topic(bootstrap, topic, 1, 1, configs={"cleanup.policy": "compact", "min.compaction.lag.ms": "1000"})
    wait_until(lambda: admin.list_topics(bootstrap).get(topic) == 1, 30, "topic served")
    admin.alter_configs(bootstrap, "topic", topic, {"retention.ms": "3600000", "leader.replication.throttled.replicas": "0:1"})
    described = admin.describe_configs(bootstrap, "topic", topic, include_synonyms=True)
    # a config set at creation is the topic's like any other: removed by a DELETE, and by an
    # AlterConfigs that leaves it out
    admin.alter_configs(bootstrap, "topic", topic, {}, delete=["cleanup.policy"])
    after = admin.describe_configs(bootstrap, "topic", topic)
    described["after delete"] = after["cleanup.policy"]._replace(name="after delete")
    admin.alter_configs(bootstrap, "topic", topic, {"retention.ms": "7200000"}, incremental=False)
    after = admin.describe_configs(bootstrap, "topic", topic)
    described["after replace"] = after["min.compaction.lag.ms"]._replace(name="after replace")
    admin.delete_topics(bootstrap, [topic])
    return described


def test_a_topic_lists_its_configs_as_kafka_4(apache_kafka: Any) -> None:
    theirs = describe_topic_script(apache_kafka.bootstrap)
    with EmbeddedBroker(log_segment_bytes=64 << 20) as b:  # Kafka's fixture sets log.segment.bytes too
        mine = describe_topic_script(b.bootstrap)
    common = set(DESCRIBED_TOPIC_CONFIGS) & (set(theirs) - {"after delete", "after replace"})
    assert common == set(DESCRIBED_TOPIC_CONFIGS), set(DESCRIBED_TOPIC_CONFIGS) - set(theirs)  # Kafka has them all
    assert mine.pop("after delete") == theirs.pop("after delete") == ("after delete", "delete", "DEFAULT_CONFIG", False, False, ())
    assert mine.pop("after replace") == theirs.pop("after replace") == ("after replace", "0", "DEFAULT_CONFIG", False, False, ())
    assert set(mine) == common  # ... and so do we
    # where each value comes from and how it is flagged (KRaft formats its cluster with a dynamic
    # default min.insync.replicas, for KIP-966: not a default of ours to copy)
    assert theirs["min.insync.replicas"].source == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    sourced = common - {"min.insync.replicas"}
    assert {n: (mine[n].source, mine[n].sensitive) for n in sourced} == {n: (theirs[n].source, theirs[n].sensitive) for n in sourced}
    assert {n: mine[n].read_only for n in common & ALTERABLE_TOPIC_CONFIGS} == {n: theirs[n].read_only for n in common & ALTERABLE_TOPIC_CONFIGS}
    same_defaults = common - {"max.message.bytes"}  # (our default message size is Kafka 0.8's)
    assert {n: mine[n].value for n in same_defaults} == {n: theirs[n].value for n in same_defaults}
    # synonyms where the broker properties have Kafka's names (retention.ms's is log.retention.hours there)
    named_alike = [*LOG_OVERRIDE_FROM_BROKER, "segment.bytes", "leader.replication.throttled.replicas",
                   "follower.replication.throttled.replicas"]
    assert {n: mine[n].synonyms for n in named_alike} == {n: theirs[n].synonyms for n in named_alike}
    assert theirs["cleanup.policy"].synonyms[0] == ("cleanup.policy", "compact", "TOPIC_CONFIG")
    assert theirs["retention.ms"][:3] == ("retention.ms", "3600000", "TOPIC_CONFIG")
