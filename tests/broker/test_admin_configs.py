"""AlterConfigs / IncrementalAlterConfigs / DescribeConfigs on a 3-broker cluster on a real
ZooKeeper, from hmbclient.admin, kafka-python's KafkaAdminClient and Kafka 4.4's ConfigCommand
(kafka-configs.sh).

* A topic override is stored as Kafka stores it (``/config/topics/<t>``, a
  ``/config/changes/config_change_<n>`` naming ``topics/<t>``), reaches every broker without a
  restart (each replica's log takes it; every broker's DescribeConfigs reports TOPIC_CONFIG),
  and takes effect: ``max.message.bytes`` refuses a larger batch, ``min.insync.replicas``
  above the ISR refuses acks=all; removing it restores the broker's value.
* Broker configs: this broker's (``/config/brokers/<id>``) and every broker's default
  (``/config/brokers/<default>``) are reported with their sources, apply to topics without
  overrides, and survive a broker restart (read back from ZooKeeper at start).
* Refusals carry Kafka's codes: unknown topic config, a value of the wrong type, a static
  broker config, another broker's id, validate_only stores nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kazoo.client import KazooClient
from waiting import wait_until

from hmbclient import admin, zkpaths
from hmbclient.broker import EmbeddedCluster
from hmbclient.errors import ErrorCode, InvalidConfigError, InvalidRequestError
from hmbclient.protocol.api.base import ApiKey
from hmbclient.testing import kafka_java

from .conftest import RawClient, encode, produce, unique_topic

E = ErrorCode
TIMEOUT_S = 30.0


def _replica_logs(cluster: EmbeddedCluster, topic: str) -> list[Any]:
    return [lg for b in cluster.brokers for (t, _p), lg in b.logs.all_logs() if t == topic]


def _described_everywhere(cluster: EmbeddedCluster, topic: str, name: str) -> set[tuple[str | None, str]]:
    out = set()
    for b in cluster.brokers:
        c = admin.describe_configs(f"127.0.0.1:{b.port}", "topic", topic)[name]
        out.add((c.value, c.source))
    return out


def _produce_code(cluster: EmbeddedCluster, topic: str, value: bytes, acks: int = 1) -> int:
    wait_until(lambda: cluster.leader(topic, 0) is not None, TIMEOUT_S, "leader")
    with RawClient("127.0.0.1", cluster.broker(cluster.leader(topic, 0)).port) as c:
        return int(produce(c, topic, 0, encode([(None, value)]), acks=acks).error_code)


def test_topic_override_reaches_every_broker_and_applies(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = unique_topic("cfg")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    cluster.await_isr(topic, size=2)
    assert _produce_code(cluster, topic, b"x" * 1000) == E.NONE
    admin.alter_configs(cluster.bootstrap, "topic", topic, {"max.message.bytes": "500", "retention.ms": "3600000"})
    # Kafka's layout in ZooKeeper, and the change notification naming the topic.
    assert json.loads(zk.get(zkpaths.config_path("topics", topic))[0]) == {
        "version": 1, "config": {"max.message.bytes": "500", "retention.ms": "3600000"}}
    notes = [json.loads(zk.get(f"{zkpaths.CONFIG_CHANGES_PATH}/{n}")[0]) for n in zk.get_children(zkpaths.CONFIG_CHANGES_PATH)]
    assert {"version": 2, "entity_path": f"topics/{topic}"} in notes
    wait_until(lambda: all(lg.config.max_message_bytes == 500 and lg.config.retention_ms == 3_600_000 for lg in _replica_logs(cluster, topic))
               and len(_replica_logs(cluster, topic)) == 2, TIMEOUT_S, "both replicas reconfigured")
    wait_until(lambda: _described_everywhere(cluster, topic, "max.message.bytes") == {("500", "TOPIC_CONFIG")}, TIMEOUT_S,
               "every broker describes the override")
    assert _produce_code(cluster, topic, b"x" * 1000) == E.MESSAGE_TOO_LARGE
    assert _produce_code(cluster, topic, b"x" * 100) == E.NONE
    # min.insync.replicas above the ISR: acks=all refused, acks=1 still served.
    admin.alter_configs(cluster.bootstrap, "topic", topic, {"min.insync.replicas": "3"})
    wait_until(lambda: _produce_code(cluster, topic, b"y", acks=-1) == E.NOT_ENOUGH_REPLICAS, TIMEOUT_S, "min ISR 3 applied")
    assert _produce_code(cluster, topic, b"y", acks=1) == E.NONE
    # Removing the overrides restores the broker's values.
    admin.alter_configs(cluster.bootstrap, "topic", topic, {}, delete=["max.message.bytes", "min.insync.replicas"])
    wait_until(lambda: all(lg.config.max_message_bytes == cluster.brokers[0].config.message_max_bytes for lg in _replica_logs(cluster, topic)),
               TIMEOUT_S, "override removed everywhere")
    assert _produce_code(cluster, topic, b"x" * 1000, acks=-1) == E.NONE
    assert json.loads(zk.get(zkpaths.config_path("topics", topic))[0])["config"] == {"retention.ms": "3600000"}
    # AlterConfigs (not incremental) replaces the whole set.
    admin.alter_configs(cluster.bootstrap, "topic", topic, {"retention.bytes": "1000000"}, incremental=False)
    assert json.loads(zk.get(zkpaths.config_path("topics", topic))[0])["config"] == {"retention.bytes": "1000000"}


def test_refusals(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = unique_topic("cfg-bad")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    with pytest.raises(InvalidConfigError, match="Unknown topic config name: retention.mss"):
        admin.alter_configs(cluster.bootstrap, "topic", topic, {"retention.mss": "1"})
    with pytest.raises(InvalidConfigError, match="retention"):
        admin.alter_configs(cluster.bootstrap, "topic", topic, {"retention.ms": "soon"})
    with pytest.raises(InvalidRequestError, match="dynamically"):
        admin.alter_configs(cluster.bootstrap, "broker", "1", {"num.partitions": "5"})
    admin.alter_configs(cluster.bootstrap, "topic", topic, {"retention.ms": "1000"}, validate_only=True)
    assert zk.exists(zkpaths.config_path("topics", topic)) is None
    with RawClient("127.0.0.1", cluster.broker(0).port) as c:  # broker 0 asked about broker 2's configs
        from hmbclient.protocol.api.configs import IncrementalAlterConfigsRequest

        r = c.request(IncrementalAlterConfigsRequest[0](resources=[(4, "2", [("log.retention.ms", 0, "1000")])], validate_only=False))
        assert r.responses[0].error_code == E.INVALID_REQUEST
        r = c.request(IncrementalAlterConfigsRequest[0](resources=[(2, "no-such-topic", [("retention.ms", 0, "1000")])], validate_only=False))
        assert r.responses[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        r = c.request(IncrementalAlterConfigsRequest[0](resources=[(2, topic, [("retention.ms", 2, "1000")])], validate_only=False))
        assert (r.responses[0].error_code, r.responses[0].error_message) == (
            E.INVALID_CONFIG, "Config value append is not allowed for config key: retention.ms")


def test_broker_configs_layers_and_restart(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    topic = unique_topic("cfg-broker")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    admin.alter_configs(cluster.bootstrap, "broker", "", {"log.retention.ms": "7200000"})
    admin.alter_configs(cluster.bootstrap, "broker", "1", {"log.retention.ms": "3600000"})
    assert json.loads(zk.get(zkpaths.config_path("brokers", "<default>"))[0])["config"] == {"log.retention.ms": "7200000"}
    assert json.loads(zk.get(zkpaths.config_path("brokers", "1"))[0])["config"] == {"log.retention.ms": "3600000"}

    def seen() -> dict[int, tuple[str | None, str]]:
        out = {}
        for b in cluster.brokers:
            c = admin.describe_configs(cluster.bootstrap, "broker", str(b.config.broker_id))["log.retention.ms"]
            out[b.config.broker_id] = (c.value, c.source)
        return out

    expected = {0: ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), 1: ("3600000", "DYNAMIC_BROKER_CONFIG"),
                2: ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    wait_until(lambda: seen() == expected, TIMEOUT_S, "every broker reports its layer")
    wait_until(lambda: all(lg.config.retention_ms == (3_600_000 if b.config.broker_id == 1 else 7_200_000)
                           for b in cluster.brokers for (t, _p), lg in b.logs.all_logs() if t == topic), TIMEOUT_S, "logs follow")
    cluster.stop_broker(2)
    cluster.restart(2)
    assert seen()[2] == expected[2]
    admin.alter_configs(cluster.bootstrap, "broker", "", {}, delete=["log.retention.ms"])
    admin.alter_configs(cluster.bootstrap, "broker", "1", {}, delete=["log.retention.ms"])
    wait_until(lambda: {v[1] for v in seen().values()} == {"DEFAULT_CONFIG"}, TIMEOUT_S, "layers removed")


def test_kafka_python_and_java_config_tools(cluster: EmbeddedCluster, zk: KazooClient) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = unique_topic("cfg-peers")
    admin.create_topic(cluster.bootstrap, topic, 1, 2)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="admin-tests", request_timeout_ms=30_000)
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "123456"})])
        wait_until(lambda: _described_everywhere(cluster, topic, "retention.ms") == {("123456", "TOPIC_CONFIG")}, TIMEOUT_S, "set by kafka-python")
        described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        text = repr(described)
        assert "retention.ms" in text and "123456" in text
    finally:
        client.close()
    # Kafka's ConfigCommand: --alter through IncrementalAlterConfigs, then --describe.
    kafka_java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", cluster.bootstrap, "--entity-type", "topics",
               "--entity-name", topic, "--alter", "--add-config", "max.message.bytes=4096", "--delete-config", "retention.ms",
               timeout_s=120)
    assert json.loads(zk.get(zkpaths.config_path("topics", topic))[0])["config"] == {"max.message.bytes": "4096"}
    done = kafka_java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", cluster.bootstrap, "--entity-type", "topics",
                      "--entity-name", topic, "--describe", timeout_s=120)
    assert "max.message.bytes=4096" in done.stdout, done.stdout


# -- the pure rules (broker/configs.py), without a broker ------------------------------------------
def test_layers_describe_with_kafka_sources() -> None:
    from hmbclient.broker.config import BrokerConfig
    from hmbclient.broker.configs import Layers, describe_resource, effective_config
    from hmbclient.protocol.api.configs import (
        RESOURCE_BROKER,
        RESOURCE_TOPIC,
        SOURCE_DYNAMIC_BROKER,
        SOURCE_DYNAMIC_DEFAULT_BROKER,
        SOURCE_TOPIC,
    )

    static = BrokerConfig(broker_id=3)
    layers = Layers(default={"log.retention.ms": "1000", "log.segment.bytes": "100000"}, broker={"log.retention.ms": "2000"},
                    topics={"t": {"max.message.bytes": "500"}})
    _, _, entries = describe_resource(RESOURCE_TOPIC, "t", None, static, True, layers)
    by_name = {n: (v, src, ro) for n, v, src, _, ro, _ in entries}
    assert by_name["max.message.bytes"] == ("500", SOURCE_TOPIC, False)
    assert by_name["retention.ms"] == ("2000", SOURCE_DYNAMIC_BROKER, False)
    assert by_name["segment.bytes"] == ("100000", SOURCE_DYNAMIC_DEFAULT_BROKER, False)
    assert by_name["unclean.leader.election.enable"][2] is True  # not a per-topic setting here
    _, _, entries = describe_resource(RESOURCE_BROKER, "3", ["log.retention.ms", "num.partitions"], static, False, layers)
    assert sorted((n, v, src, ro) for n, v, src, _, ro, _ in entries) == [
        ("log.retention.ms", "2000", SOURCE_DYNAMIC_BROKER, False), ("num.partitions", "1", 5, True)]
    eff = effective_config(static, layers, "t")
    assert (eff.message_max_bytes, eff.log_retention_ms, eff.log_segment_bytes) == (500, 2000, 100000)
    assert effective_config(static, layers, "other").message_max_bytes == static.message_max_bytes


def test_check_alter_and_incremental_cases() -> None:
    from hmbclient.broker.config import BrokerConfig
    from hmbclient.broker.configs import apply_incremental, check_alter
    from hmbclient.protocol.api.configs import (
        OP_APPEND,
        OP_DELETE,
        OP_SET,
        RESOURCE_BROKER,
        RESOURCE_TOPIC,
    )

    static = BrokerConfig()
    assert check_alter(RESOURCE_TOPIC, {"retention.ms": "5"}, static) == (E.NONE, None)
    assert check_alter(RESOURCE_TOPIC, {"retention.ms": None}, static)[0] == E.INVALID_REQUEST  # (g)
    assert check_alter(RESOURCE_TOPIC, {"nope": "1"}, static) == (E.INVALID_CONFIG, "Unknown topic config name: nope")  # (h)
    assert check_alter(RESOURCE_BROKER, {"broker.id": "7"}, static)[0] == E.INVALID_REQUEST  # (i)
    assert check_alter(RESOURCE_TOPIC, {"min.insync.replicas": "0"}, static)[0] == E.INVALID_CONFIG  # (j)
    # (j): a cross-field rule of BrokerConfig (index interval above the segment size)
    assert check_alter(RESOURCE_TOPIC, {"segment.bytes": "100", "index.interval.bytes": "4096"}, static)[0] == E.INVALID_CONFIG
    assert apply_incremental({"a": "1", "b": "2"}, [("a", OP_DELETE, None), ("c", OP_SET, "3")]) == (E.NONE, None, {"b": "2", "c": "3"})
    assert apply_incremental({}, [("a", OP_SET, "1"), ("a", OP_DELETE, None)])[0] == E.INVALID_REQUEST  # (k)
    assert apply_incremental({}, [("a", OP_APPEND, "1")])[:2] == (E.INVALID_CONFIG, "Config value append is not allowed for config key: a")  # (l)
    assert apply_incremental({}, [("a", 9, "1")])[0] == E.INVALID_REQUEST  # (m)


def test_created_overrides_and_dynamic_ones_combine(cluster: EmbeddedCluster) -> None:
    """CreateTopics configs (cleanup.policy, stored in the same /config/topics/<t>) survive a
    dynamic change of another config, and cleanup.policy itself can be altered."""
    from hmbclient.net.client import NetClient

    topic = unique_topic("cfg-compact")
    client = NetClient(cluster.bootstrap)
    try:
        resp = client.call(client.bootstrap_ids[0], lambda v: v.build(
            ApiKey.CREATE_TOPICS, topics=[(topic, 1, 2, [], [("cleanup.policy", "compact")])], timeout_ms=10_000, validate_only=False))
        assert resp.topics[0].error_code == E.NONE
    finally:
        client.close()
    wait_until(lambda: len(_replica_logs(cluster, topic)) == 2 and all(lg.config.compact for lg in _replica_logs(cluster, topic)),
               TIMEOUT_S, "compacted replicas")
    admin.alter_configs(cluster.bootstrap, "topic", topic, {"max.message.bytes": "4096"})
    wait_until(lambda: all(lg.config.compact and lg.config.max_message_bytes == 4096 for lg in _replica_logs(cluster, topic)),
               TIMEOUT_S, "both kept")
    admin.alter_configs(cluster.bootstrap, "topic", topic, {"cleanup.policy": "delete"})
    wait_until(lambda: not any(lg.config.compact for lg in _replica_logs(cluster, topic)), TIMEOUT_S, "policy altered")
    with pytest.raises(InvalidConfigError):
        admin.alter_configs(cluster.bootstrap, "topic", topic, {"cleanup.policy": "shred"})
