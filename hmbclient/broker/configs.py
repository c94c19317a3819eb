"""DescribeConfigs (api key 32): what Kafka's AdminClient, ``kafka-topics --describe`` and
``kafka-configs --describe`` ask before they print a topic or a broker.

Contract:

* Our brokers keep no per-topic overrides (CreateTopics' configs are not stored), so a topic's
  configs are the broker-wide settings that apply to every topic, under their topic names
  (``retention.ms`` <- ``log.retention.ms``, ...), each with source DEFAULT_CONFIG (5) when the
  broker setting has its default value, else STATIC_BROKER_CONFIG (4); all read-only.
* A broker's configs (resource name = this broker's id, or "" for the default) are every
  BrokerConfig setting by its Kafka property name, source as above; secrets are marked
  sensitive with a null value, never sent.
* ``configuration_keys`` (not null) keeps only the names asked for; unknown names are left out
  (as Kafka does).

Labelled cases of one resource (:func:`describe_resource`, a pure function of the request
entry, the config and whether the topic exists):

* (a) topic that exists: its configs, error 0;
* (b) topic unknown: UNKNOWN_TOPIC_OR_PARTITION, no configs;
* (c) broker resource naming this broker (or ""): its configs, error 0;
* (d) broker resource naming another broker: INVALID_REQUEST (Kafka says the same);
* (e) any other resource type (groups, client metrics...): INVALID_REQUEST.
* (f) the session may not DescribeConfigs the topic (or the cluster for a broker):
  TOPIC/CLUSTER_AUTHORIZATION_FAILED (checked by the caller with the authorizer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hmbclient.broker.config import BrokerConfig
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api.configs import (
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
)

__all__ = ["ConfigDescriber", "TOPIC_CONFIG_FROM_BROKER", "describe_resource"]

#: topic config name -> the BrokerConfig field whose value every topic has
TOPIC_CONFIG_FROM_BROKER: dict[str, str] = {
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "segment.bytes": "log_segment_bytes",
    "segment.index.bytes": "log_index_size_max_bytes",
    "index.interval.bytes": "log_index_interval_bytes",
    "flush.messages": "log_flush_interval_messages",
    "flush.ms": "log_flush_interval_ms",
    "max.message.bytes": "message_max_bytes",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
}

Entry = tuple[str, str | None, int, bool]  # name, value, source, sensitive


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def _entries(config: BrokerConfig, topic: bool) -> list[Entry]:
    infos = {i.name: i for i in BrokerConfig.settings()}
    out: list[Entry] = []
    if topic:
        for name, field in TOPIC_CONFIG_FROM_BROKER.items():
            info = infos.get(field)
            if info is None:
                continue
            value = getattr(config, field)
            out.append((name, _render(value), SOURCE_DEFAULT if value == info.default else SOURCE_STATIC_BROKER, False))
        return out
    for info in infos.values():
        value = getattr(config, info.name)
        if info.secret:
            out.append((info.prop, None, SOURCE_STATIC_BROKER, True))
        elif value is not None and isinstance(value, (str, int, float, bool, tuple, list)):
            out.append((info.prop, _render(value), SOURCE_DEFAULT if value == info.default else SOURCE_STATIC_BROKER, False))
    return out


def describe_resource(resource_type: int, name: str, keys: list[str] | None, config: BrokerConfig,
                      topic_exists: bool) -> tuple[int, str | None, list[Entry]]:
    """(error code, error message, entries) for one resource (cases (a)-(e) above)."""
    if resource_type == RESOURCE_TOPIC:
        if not topic_exists:  # (b)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist", []
        entries = _entries(config, topic=True)  # (a)
    elif resource_type == RESOURCE_BROKER:
        if name not in ("", str(config.broker_id)):  # (d)
            return ErrorCode.INVALID_REQUEST, f"unexpected broker id, expected {config.broker_id} or empty, got {name}", []
        entries = _entries(config, topic=False)  # (c)
    else:  # (e)
        return ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported", []
    if keys is not None:
        wanted = set(keys)
        entries = [e for e in entries if e[0] in wanted]
    return ErrorCode.NONE, None, entries


class ConfigDescriber:
    """Serves DescribeConfigs for one broker."""

    def __init__(self, config: BrokerConfig, topic_exists: Callable[[str], bool]) -> None:
        self.config = config
        self.topic_exists = topic_exists

    def handle_describe_configs(self, header: Any, req: Any, channel: Any,
                                allowed: Callable[[Any, str, str, str], bool]) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        result_shape = resp_cls.SCHEMA.field("results").item.values
        config_shape = resp_cls.SCHEMA.field("results").item.field("configs").item.values
        results = []
        code: int
        msg: str | None
        entries: list[Entry]
        for r in req.resources:
            if r.resource_type == RESOURCE_TOPIC and not allowed(channel, "DescribeConfigs", "Topic", r.resource_name):
                code, msg, entries = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.", []  # (f)
            elif r.resource_type == RESOURCE_BROKER and not allowed(channel, "DescribeConfigs", "Cluster", "kafka-cluster"):
                code, msg, entries = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.", []  # (f)
            else:
                code, msg, entries = describe_resource(
                    r.resource_type, r.resource_name, r.configuration_keys, self.config,
                    r.resource_type == RESOURCE_TOPIC and self.topic_exists(r.resource_name))
            results.append(result_shape(code, msg, r.resource_type, r.resource_name,
                                        [config_shape(n, v, True, src, sens, []) for n, v, src, sens in entries]))
        channel.send(resp_cls.build(throttle_time_ms=0, results=results))
