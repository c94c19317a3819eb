"""DescribeConfigs (api key 32): what Kafka's AdminClient, ``kafka-topics --describe`` and
``kafka-configs --describe`` ask before they print a topic or a broker; and the pure rules of
AlterConfigs / IncrementalAlterConfigs (:func:`check_alter`, :func:`apply_incremental`,
:func:`effective_config`), whose I/O is ``broker.dynamic_config``.

Contract:

* Dynamic configs are layered as Kafka's: a topic's override (``/config/topics/<t>``, source
  TOPIC_CONFIG 1) over this broker's (``/config/brokers/<id>``, DYNAMIC_BROKER_CONFIG 2) over
  every broker's default (``/config/brokers/<default>``, DYNAMIC_DEFAULT_BROKER_CONFIG 3) over
  the static BrokerConfig (STATIC_BROKER_CONFIG 4, or DEFAULT_CONFIG 5 when it has its default
  value). A topic config is the broker property it overrides under its topic name
  (``retention.ms`` <- ``log.retention.ms``, ``cleanup.policy`` <- ``log.cleanup.policy``, ...).
* A topic's configs are every topic config our logs honour (:data:`DESCRIBED_TOPIC_CONFIGS`:
  the broker-backed ones, the log overrides of ``log.overrides`` and the replication throttles),
  as Kafka lists them: the topic's override (stored at creation or set by AlterConfigs,
  source TOPIC_CONFIG) else the broker layers; a config without a broker property (the
  throttled replica lists) is ``""`` from DEFAULT_CONFIG. Internal topics report the
  ``cleanup.policy=compact`` their logs have as an override, as Kafka creates them.
* Synonyms (``include_synonyms``) are Kafka's: the topic override, then the broker property
  from each layer that sets it (DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER) and its
  DEFAULT_CONFIG value, most specific first; the entry's source is the first synonym's.
* Alterable topic configs: :data:`ALTERABLE_TOPIC_CONFIGS` (read_only false); dynamic broker
  configs: :data:`DYNAMIC_BROKER_CONFIGS`. Refusals (labelled in :func:`check_alter`):
  (g) a null value: INVALID_REQUEST; (h) an unknown topic config: INVALID_CONFIG "Unknown topic
  config name"; (i) a broker property that is not dynamic: INVALID_REQUEST "Cannot update these
  configs dynamically"; (j) a value BrokerConfig refuses (type, range, cross-field rules):
  INVALID_CONFIG with its reason. Incremental operations (:func:`apply_incremental`): (k) a
  name twice: INVALID_REQUEST; (l) APPEND/SUBTRACT on a non-list config: INVALID_CONFIG;
  (m) an unknown operation: INVALID_REQUEST.
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

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.log.overrides import TOPIC_CONFIGS, validate_topic_configs
from hmbclient.broker.metadata import is_internal_topic
from hmbclient.broker.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    parse_throttled_replicas,
)
from hmbclient.errors import ConfigError, ErrorCode, StorageError
from hmbclient.protocol.api.configs import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
)

__all__ = [
    "ConfigDescriber",
    "TOPIC_CONFIG_FROM_BROKER",
    "TOPIC_TO_BROKER_PROP",
    "LOG_OVERRIDE_FROM_BROKER",
    "DESCRIBED_TOPIC_CONFIGS",
    "ALTERABLE_TOPIC_CONFIGS",
    "DYNAMIC_BROKER_CONFIGS",
    "Layers",
    "describe_resource",
    "check_alter",
    "apply_incremental",
    "effective_config",
]

#: topic config name -> the BrokerConfig field whose value every topic has (and whose layers
#: AlterConfigs' topic overrides are applied through, ``effective_config``)
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

_PROP = {i.name: i.prop for i in BrokerConfig.settings()}
#: topic config name -> the broker property it overrides
TOPIC_TO_BROKER_PROP: dict[str, str] = {n: _PROP[f] for n, f in TOPIC_CONFIG_FROM_BROKER.items() if f in _PROP}
#: topic configs AlterConfigs may set: the broker-backed ones (not segment.index.bytes, unused
#: by our indexes, nor unclean election, a controller-wide setting) and the log overrides of
#: ``log.overrides`` (cleanup.policy, compaction settings)
ALTERABLE_TOPIC_CONFIGS: frozenset[str] = ((frozenset(TOPIC_TO_BROKER_PROP) - {"segment.index.bytes", "unclean.leader.election.enable"})
                                            | frozenset(TOPIC_CONFIGS) | {LEADER_REPLICAS, FOLLOWER_REPLICAS})
#: broker properties AlterConfigs may set for a broker or for every broker, applied without a restart
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {TOPIC_TO_BROKER_PROP[n] for n in ALTERABLE_TOPIC_CONFIGS if n in TOPIC_TO_BROKER_PROP}
    | {"unclean.leader.election.enable", LEADER_RATE, FOLLOWER_RATE})

#: log overrides (``log.overrides.TOPIC_CONFIGS``) -> the BrokerConfig field of their default
#: (applied by ``log.overrides.log_config_with``, not through the BrokerConfig)
LOG_OVERRIDE_FROM_BROKER: dict[str, str] = {
    "cleanup.policy": "log_cleanup_policy",
    "min.cleanable.dirty.ratio": "log_cleaner_min_cleanable_ratio",
    "min.compaction.lag.ms": "log_cleaner_min_compaction_lag_ms",
    "delete.retention.ms": "log_cleaner_delete_retention_ms",
}
#: every config DescribeConfigs lists for a topic (name -> BrokerConfig field, or None: no
#: broker property, default "")
DESCRIBED_TOPIC_CONFIGS: dict[str, str | None] = {
    **TOPIC_CONFIG_FROM_BROKER,
    **{n: f for n, f in LOG_OVERRIDE_FROM_BROKER.items() if n not in TOPIC_CONFIG_FROM_BROKER},
    **{n: None for n in TOPIC_CONFIGS if n not in TOPIC_CONFIG_FROM_BROKER and n not in LOG_OVERRIDE_FROM_BROKER},
    LEADER_REPLICAS: None,
    FOLLOWER_REPLICAS: None,
}

Synonym = tuple[str, str | None, int]  # name, value, source
Entry = tuple[str, str | None, int, bool, bool, list[Synonym]]  # name, value, source, sensitive, read_only, synonyms


@dataclasses.dataclass(frozen=True)
class Layers:
    """The dynamic configs that apply to one broker: every broker's default, this broker's
    own, and per topic."""

    default: Mapping[str, str] = dataclasses.field(default_factory=dict)
    broker: Mapping[str, str] = dataclasses.field(default_factory=dict)
    topics: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)


def effective_config(static: BrokerConfig, layers: Layers, topic: str | None = None) -> BrokerConfig:
    """The BrokerConfig with the dynamic layers applied (a topic's overrides as the broker
    properties they stand for).

    Raises:
        ConfigError: a layer holds a value BrokerConfig refuses.
    """
    merged: dict[str, str] = {**layers.default, **layers.broker}
    if topic is not None:
        merged.update({TOPIC_TO_BROKER_PROP[k]: v for k, v in layers.topics.get(topic, {}).items() if k in TOPIC_TO_BROKER_PROP})
    if not merged:
        return static
    base = {f.name: getattr(static, f.name) for f in dataclasses.fields(static)}
    return BrokerConfig.from_properties(base, **merged)


def check_alter(resource_type: int, props: Mapping[str, str | None], static: BrokerConfig) -> tuple[int, str | None]:
    """(error, message) for setting ``props`` as the whole dynamic config of a resource (cases
    (g)-(j) above); NONE when it may be stored."""
    topic = resource_type == RESOURCE_TOPIC
    for name, value in props.items():
        if value is None:  # (g)
            return ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}"
        if topic and name not in ALTERABLE_TOPIC_CONFIGS:  # (h)
            if name in TOPIC_TO_BROKER_PROP:
                return ErrorCode.INVALID_CONFIG, f"Topic config {name} cannot be altered on this broker"
            return ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}"
        if not topic and name not in DYNAMIC_BROKER_CONFIGS:  # (i)
            if name in _PROP.values():
                return ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({name})"
            return ErrorCode.INVALID_CONFIG, f"Unknown broker config name: {name}"
    try:  # (j)
        if topic:
            validate_topic_configs({k: v for k, v in props.items() if k in TOPIC_CONFIGS})
            for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
                if props.get(k) is not None:
                    parse_throttled_replicas(str(props[k]))
        layer = {k: str(v) for k, v in props.items()}
        layers = Layers(topics={"t": layer}) if topic else Layers(broker=layer)
        effective_config(static, layers, "t" if topic else None)
    except (ConfigError, ValueError, TypeError) as e:
        return ErrorCode.INVALID_CONFIG, f"Invalid value: {e}"
    return ErrorCode.NONE, None


def apply_incremental(current: Mapping[str, str], ops: Sequence[tuple[str, int, str | None]]) -> tuple[int, str | None, dict[str, str | None]]:
    """(error, message, the new whole config) after IncrementalAlterConfigs' operations (cases
    (k)-(m)); the result is then judged by :func:`check_alter`."""
    names = [n for n, _, _ in ops]
    if len(set(names)) != len(names):  # (k)
        return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys", {}
    new: dict[str, str | None] = dict(current)
    for name, op, value in ops:
        if op == OP_SET:
            new[name] = value
        elif op == OP_DELETE:
            new.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):  # (l)
            verb = "append" if op == OP_APPEND else "subtract"
            return ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}", {}
        else:  # (m)
            return ErrorCode.INVALID_REQUEST, f"Unknown alter config operation {op}", {}
    return ErrorCode.NONE, None, new


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def _broker_synonyms(config: BrokerConfig, info: Any, layers: Layers) -> list[Synonym]:
    """The layers that give broker property ``info`` a value, most specific first."""
    out: list[Synonym] = []
    if info.prop in layers.broker:
        out.append((info.prop, layers.broker[info.prop], SOURCE_DYNAMIC_BROKER))
    if info.prop in layers.default:
        out.append((info.prop, layers.default[info.prop], SOURCE_DYNAMIC_DEFAULT_BROKER))
    value = getattr(config, info.name)
    if value != info.default and value is not None:
        out.append((info.prop, _render(value), SOURCE_STATIC_BROKER))
    if info.default is not None:
        out.append((info.prop, _render(info.default), SOURCE_DEFAULT))
    return out


def _entries(config: BrokerConfig, topic: str | None, layers: Layers,
             stored: Mapping[str, str] | None = None, internal: bool = False) -> list[Entry]:
    infos = {i.name: i for i in BrokerConfig.settings()}
    out: list[Entry] = []
    if topic is not None:
        overrides: dict[str, str] = {"cleanup.policy": "compact"} if internal else {}
        overrides.update(stored or {})
        overrides.update(layers.topics.get(topic, {}))
        for name, field in DESCRIBED_TOPIC_CONFIGS.items():
            info = infos.get(field) if field is not None else None
            if field is not None and info is None:
                continue
            read_only = name not in ALTERABLE_TOPIC_CONFIGS
            synonyms: list[Synonym] = [(name, overrides[name], SOURCE_TOPIC)] if name in overrides else []
            if info is not None:
                synonyms += _broker_synonyms(config, info, layers)
            if synonyms:
                out.append((name, synonyms[0][1], synonyms[0][2], False, read_only, synonyms))
            else:  # (no broker property: Kafka's empty default)
                out.append((name, "", SOURCE_DEFAULT, False, read_only, []))
        return out
    for info in infos.values():
        value = getattr(config, info.name)
        read_only = info.prop not in DYNAMIC_BROKER_CONFIGS
        if info.secret:
            out.append((info.prop, None, SOURCE_STATIC_BROKER, True, True, []))
            continue
        synonyms = _broker_synonyms(config, info, layers)
        if synonyms and synonyms[0][2] in (SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER):
            out.append((info.prop, synonyms[0][1], synonyms[0][2], False, read_only, synonyms))
        elif value is not None and isinstance(value, (str, int, float, bool, tuple, list)):
            out.append((info.prop, _render(value), SOURCE_DEFAULT if value == info.default else SOURCE_STATIC_BROKER, False,
                        read_only, synonyms))
    return out


def describe_resource(resource_type: int, name: str, keys: list[str] | None, config: BrokerConfig,
                      topic_exists: bool, layers: Layers | None = None,
                      stored: Mapping[str, str] | None = None) -> tuple[int, str | None, list[Entry]]:
    """(error code, error message, entries) for one resource (cases (a)-(e) above); ``stored``:
    the topic's overrides stored at creation (``topic_configs``), under its dynamic ones."""
    layers = layers or Layers()
    if resource_type == RESOURCE_TOPIC:
        if not topic_exists:  # (b)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name} does not exist", []
        entries = _entries(config, name, layers, stored, is_internal_topic(name))  # (a)
    elif resource_type == RESOURCE_BROKER:
        if name not in ("", str(config.broker_id)):  # (d)
            return ErrorCode.INVALID_REQUEST, f"unexpected broker id, expected {config.broker_id} or empty, got {name}", []
        entries = _entries(config, None, layers)  # (c)
    else:  # (e)
        return ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported", []
    if keys is not None:
        wanted = set(keys)
        entries = [e for e in entries if e[0] in wanted]
    return ErrorCode.NONE, None, entries


class ConfigDescriber:
    """Serves DescribeConfigs for one broker."""

    def __init__(self, config: BrokerConfig, topic_exists: Callable[[str], bool], layers: Callable[[], Layers] | None = None,
                 stored: Callable[[str], Mapping[str, str]] | None = None) -> None:
        self.config = config
        self.topic_exists = topic_exists
        self.layers = layers or Layers
        self.stored = stored

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
                exists = r.resource_type == RESOURCE_TOPIC and self.topic_exists(r.resource_name)
                try:
                    stored = self.stored(r.resource_name) if exists and self.stored is not None else None
                except StorageError:  # unreadable (another tool wrote it): what the logs apply, none
                    stored = None
                code, msg, entries = describe_resource(
                    r.resource_type, r.resource_name, r.configuration_keys, self.config, exists, self.layers(), stored)
            synonyms = bool(getattr(req, "include_synonyms", False))
            results.append(result_shape(code, msg, r.resource_type, r.resource_name,
                                        [config_shape(n, v, ro, src, sens, syn if synonyms else [])
                                         for n, v, src, sens, ro, syn in entries]))
        channel.send(resp_cls.build(throttle_time_ms=0, results=results))
