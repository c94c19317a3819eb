"""DescribeConfigs' pure decision (hmbclient.broker.configs.describe_resource), case by case;
served end to end to Kafka's own AdminClient in tests/reference/test_java_clients_to_our_broker.py."""

from __future__ import annotations

from hmbclient.broker.configs import DESCRIBED_TOPIC_CONFIGS, Layers, describe_resource
from hmbclient.config import BrokerConfig
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api.configs import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
)

CFG = BrokerConfig(broker_id=3, log_retention_ms=60_000, sasl_inter_broker_username="broker",
                   sasl_inter_broker_password="s3cret")


def test_a_topic_that_exists_has_the_broker_wide_values_under_topic_names():
    code, _, entries = describe_resource(RESOURCE_TOPIC, "t", None, CFG, topic_exists=True)
    by_name = {n: (v, src) for n, v, src, _, _, _ in entries}
    assert code == ErrorCode.NONE
    assert by_name["retention.ms"] == ("60000", SOURCE_STATIC_BROKER)  # set: not the default
    assert by_name["segment.bytes"] == (str(CFG.log_segment_bytes), SOURCE_DEFAULT)


def test_b_unknown_topic():
    assert describe_resource(RESOURCE_TOPIC, "t", None, CFG, topic_exists=False)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_c_this_broker_with_secrets_hidden_and_keys_filtered():
    code, _, entries = describe_resource(RESOURCE_BROKER, "3", None, CFG, topic_exists=False)
    by_name = {n: (v, sens) for n, v, _, sens, _, _ in entries}
    assert code == ErrorCode.NONE and by_name["broker.id"] == ("3", False)
    assert by_name["sasl.inter.broker.password"] == (None, True)
    assert "s3cret" not in repr(entries)
    _, _, some = describe_resource(RESOURCE_BROKER, "", ["broker.id", "no.such"], CFG, topic_exists=False)
    assert [e[0] for e in some] == ["broker.id"]


def test_d_another_broker_and_e_other_resource_types_are_invalid():
    assert describe_resource(RESOURCE_BROKER, "4", None, CFG, topic_exists=False)[0] == ErrorCode.INVALID_REQUEST
    assert describe_resource(32, "g", None, CFG, topic_exists=False)[0] == ErrorCode.INVALID_REQUEST


def test_a_every_topic_config_is_listed_with_its_source_and_synonyms():
    layers = Layers(default={"log.retention.ms": "1000"}, broker={"log.retention.ms": "2000"},
                    topics={"t": {"min.compaction.lag.ms": "5", "leader.replication.throttled.replicas": "0:1"}})
    _, _, entries = describe_resource(RESOURCE_TOPIC, "t", None, CFG, True, layers, stored={"cleanup.policy": "compact",
                                                                                           "min.compaction.lag.ms": "1"})
    by_name = {n: (v, src, ro, syn) for n, v, src, _, ro, syn in entries}
    assert set(by_name) == set(DESCRIBED_TOPIC_CONFIGS)
    assert {"cleanup.policy", "min.compaction.lag.ms", "delete.retention.ms", "min.cleanable.dirty.ratio",
            "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"} <= set(by_name)
    # stored at creation; the dynamic override over the stored one; the broker's default under it
    assert by_name["cleanup.policy"] == ("compact", SOURCE_TOPIC, False,
                                         [("cleanup.policy", "compact", SOURCE_TOPIC), ("log.cleanup.policy", "delete", SOURCE_DEFAULT)])
    assert by_name["min.compaction.lag.ms"][:2] == ("5", SOURCE_TOPIC)
    assert by_name["leader.replication.throttled.replicas"] == ("0:1", SOURCE_TOPIC, False,
                                                                [("leader.replication.throttled.replicas", "0:1", SOURCE_TOPIC)])
    assert by_name["follower.replication.throttled.replicas"] == ("", SOURCE_DEFAULT, False, [])
    assert by_name["delete.retention.ms"][:2] == (str(CFG.log_cleaner_delete_retention_ms), SOURCE_DEFAULT)
    # every layer of the broker property, most specific first
    assert by_name["retention.ms"][:2] == ("2000", SOURCE_DYNAMIC_BROKER)
    assert [src for _, _, src in by_name["retention.ms"][3]] == [SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER,
                                                                  SOURCE_STATIC_BROKER, SOURCE_DEFAULT]
    # an internal topic's log is compacted: said as its override
    _, _, internal = describe_resource(RESOURCE_TOPIC, "__consumer_offsets", ["cleanup.policy"], CFG, True)
    assert [(n, v, src) for n, v, src, *_ in internal] == [("cleanup.policy", "compact", SOURCE_TOPIC)]
