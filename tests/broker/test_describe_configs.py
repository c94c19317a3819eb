"""DescribeConfigs' pure decision (hmbclient.broker.configs.describe_resource), case by case;
served end to end to Kafka's own AdminClient in tests/reference/test_java_clients_to_our_broker.py."""

from __future__ import annotations

from hmbclient.broker.configs import describe_resource
from hmbclient.config import BrokerConfig
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api.configs import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
)

CFG = BrokerConfig(broker_id=3, log_retention_ms=60_000, sasl_inter_broker_username="broker",
                   sasl_inter_broker_password="s3cret")


def test_a_topic_that_exists_has_the_broker_wide_values_under_topic_names():
    code, _, entries = describe_resource(RESOURCE_TOPIC, "t", None, CFG, topic_exists=True)
    by_name = {n: (v, src) for n, v, src, _, _ in entries}
    assert code == ErrorCode.NONE
    assert by_name["retention.ms"] == ("60000", SOURCE_STATIC_BROKER)  # set: not the default
    assert by_name["segment.bytes"] == (str(CFG.log_segment_bytes), SOURCE_DEFAULT)


def test_b_unknown_topic():
    assert describe_resource(RESOURCE_TOPIC, "t", None, CFG, topic_exists=False)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_c_this_broker_with_secrets_hidden_and_keys_filtered():
    code, _, entries = describe_resource(RESOURCE_BROKER, "3", None, CFG, topic_exists=False)
    by_name = {n: (v, sens) for n, v, _, sens, _ in entries}
    assert code == ErrorCode.NONE and by_name["broker.id"] == ("3", False)
    assert by_name["sasl.inter.broker.password"] == (None, True)
    assert "s3cret" not in repr(entries)
    _, _, some = describe_resource(RESOURCE_BROKER, "", ["broker.id", "no.such"], CFG, topic_exists=False)
    assert [e[0] for e in some] == ["broker.id"]


def test_d_another_broker_and_e_other_resource_types_are_invalid():
    assert describe_resource(RESOURCE_BROKER, "4", None, CFG, topic_exists=False)[0] == ErrorCode.INVALID_REQUEST
    assert describe_resource(32, "g", None, CFG, topic_exists=False)[0] == ErrorCode.INVALID_REQUEST
