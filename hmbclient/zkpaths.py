"""The Kafka 0.8 znode layout and the JSON each znode holds, compatible with the Java 0.8 code.

Shared by both sides of a ZooKeeper cluster: the broker (registration, topics, partition
state, the controller: ``broker/controller/store.py``), the consumers and their rebalancer
(``rebalance``), the admin tools and Spark. It is a leaf (standard library only) so that each
of them may import it; ``rebalance.paths`` re-exports it name for name (public API).

Layout (as Kafka 0.8's ``ZkUtils`` and ``ZookeeperConsumerConnector`` write it)::

    /consumers/<group>/ids/<consumer_id>            ephemeral  ConsumerRegistration JSON
    /consumers/<group>/owners/<topic>/<partition>   ephemeral  owning thread id (utf-8)
    /consumers/<group>/offsets/<topic>/<partition>  persistent next offset, decimal ascii
    /brokers/ids/<broker_id>                        ephemeral  BrokerRegistration JSON
    /brokers/topics/<topic>                         persistent {"version":1,"partitions":{..},"topic_id":".."}
    /brokers/topics/<topic>/partitions/<n>/state    persistent PartitionState JSON
    /controller                                     ephemeral  {"version":1,"brokerid":..}
    /controller_epoch                               persistent decimal ascii

Ids: a consumer id is ``<group>_<hostname>-<timestamp ms>-<uuid8>`` and its stream threads
are ``<consumer_id>-<n>`` for n in 0..streams-1 (one set per subscribed topic).

Encoding: compact JSON (no spaces) with the Java code's field set *and* field order, so
the bytes match what a Java 0.8 broker or consumer writes. Scala's small immutable maps
(up to 4 entries) keep insertion order; the 5-entry maps (broker registration, partition
state) come out in hash-trie order, which we reproduce. Timestamps are decimal strings, as
Java writes them. Decoding is tolerant: any field order, timestamps as strings or numbers,
unknown fields ignored, and later broker registrations (version 2+, ``endpoints``) accepted.

Topic ids (KIP-516): Kafka 2.8+ keeps a topic's id in its topic znode as ``"topic_id"``, the
Uuid in Kafka's string form (URL-safe base64 of the 16 bytes, no padding, 22 characters). We
write that field after ``partitions`` and keep ``"version":1`` (Kafka 0.8.2 readers ignore the
extra field, Kafka 2.8+ readers take it whatever the version); :func:`new_topic_id` draws one
as Kafka's ``Uuid.randomUuid`` does (never zero or one, never a string starting with ``-``).

Topic names: :func:`is_valid_topic_name` is the project's one statement of Kafka's rule (1-249
characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``), used by the embedded broker, the
group rebalancer and the Spark integration alike. It lives here because a topic name is a
znode name (``/brokers/topics/<topic>``) and a directory name, and because every layer may
import this module.

Pure functions only; nothing here talks to ZooKeeper. Malformed znode data raises
:class:`ZnodeDataError` (a ``ValueError``).
"""

from __future__ import annotations

import base64
import binascii
import json
import platform
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote

__all__ = [
    "CONSUMERS_PATH",
    "BROKERS_PATH",
    "BROKER_IDS_PATH",
    "BROKER_TOPICS_PATH",
    "CONTROLLER_PATH",
    "CONTROLLER_EPOCH_PATH",
    "Pattern",
    "ZnodeDataError",
    "MAX_TOPIC_NAME_LENGTH",
    "TOPIC_NAME_PATTERN",
    "TOPIC_NAME_RULE",
    "is_valid_topic_name",
    "consumer_group_path",
    "consumer_ids_path",
    "consumer_registration_path",
    "consumer_owners_path",
    "owner_path",
    "consumer_offsets_path",
    "offset_path",
    "broker_path",
    "topic_path",
    "delete_topic_path",
    "config_path",
    "encode_config",
    "decode_config",
    "DELETE_TOPICS_PATH",
    "CONFIG_PATH",
    "CONFIG_CHANGES_PATH",
    "CONFIG_CHANGE_PREFIX",
    "DEFAULT_BROKER_ENTITY",
    "quota_entity_name",
    "sanitize_quota_name",
    "desanitize_quota_name",
    "topic_partitions_path",
    "partition_state_path",
    "make_consumer_id",
    "thread_id",
    "thread_ids",
    "parse_thread_id",
    "ConsumerRegistration",
    "encode_consumer_registration",
    "decode_consumer_registration",
    "BrokerRegistration",
    "encode_broker_registration",
    "decode_broker_registration",
    "encode_topic_assignment",
    "decode_topic_assignment",
    "new_topic_id",
    "topic_id_str",
    "parse_topic_id",
    "decode_topic_id",
    "with_topic_id",
    "PartitionState",
    "encode_partition_state",
    "decode_partition_state",
    "ControllerRegistration",
    "encode_controller",
    "decode_controller",
    "NO_OFFSET",
    "encode_offset",
    "decode_offset",
    "encode_owner",
    "decode_owner",
    "consumer_registration_json",
]

CONSUMERS_PATH = "/consumers"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
BROKER_TOPICS_PATH = "/brokers/topics"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
#: ``/admin/delete_topics/<t>``: a topic marked for deletion (any broker writes it, the
#: controller deletes the topic and then the marker), as Kafka's TopicCommand/AdminClient do.
DELETE_TOPICS_PATH = "/admin/delete_topics"
#: ``/config/topics/<t>``, ``/config/brokers/<id|<default>>``: dynamic configs,
#: ``{"version":1,"config":{name: value}}``; each change is announced by a sequential
#: ``/config/changes/config_change_<n>`` holding ``{"version":2,"entity_path":"topics/<t>"}``.
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"
#: the entity name of the default broker config (``/config/brokers/<default>``)
DEFAULT_BROKER_ENTITY = "<default>"

#: How a consumer subscribed: static topic counts, or a white/black-list regex.
Pattern = Literal["static", "white_list", "black_list"]
_PATTERNS: tuple[str, ...] = ("static", "white_list", "black_list")


class ZnodeDataError(ValueError):
    """A znode holds data that does not parse as the Kafka 0.8 layout says it should."""


# --------------------------------------------------------------------- topic names

#: Longest legal topic name (Kafka's limit, so that ``<topic>-<partition>`` fits a file name).
MAX_TOPIC_NAME_LENGTH = 249

#: A legal topic name as a regular expression (without anchors; ``.`` and ``..`` match it
#: but are not legal, see :func:`is_valid_topic_name`).
TOPIC_NAME_PATTERN = rf"[a-zA-Z0-9._-]{{1,{MAX_TOPIC_NAME_LENGTH}}}"

#: Kafka's topic-name rule in words, for error messages.
TOPIC_NAME_RULE = f"1-{MAX_TOPIC_NAME_LENGTH} characters of [a-zA-Z0-9._-], not '.' or '..'"

_TOPIC_NAME = re.compile(TOPIC_NAME_PATTERN)


def is_valid_topic_name(name: object) -> bool:
    """Whether ``name`` is a legal Kafka topic name (:data:`TOPIC_NAME_RULE`).

    Args:
        name: Anything; only a string can be a topic name.

    Returns:
        True for 1-249 characters of ``[a-zA-Z0-9._-]`` other than ``.`` and ``..``.
    """
    return (
        isinstance(name, str)
        and name not in (".", "..")
        and _TOPIC_NAME.fullmatch(name) is not None
    )


# --------------------------------------------------------------------- paths


def _element(kind: str, name: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad {kind} {name!r}: must be a non-empty znode name without '/'")
    return name


def _number(kind: str, value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"bad {kind} {value!r}: must be an int >= 0")
    return str(value)


def _partition(partition: int) -> str:
    return _number("partition", partition)


def consumer_group_path(group: str) -> str:
    """``/consumers/<group>``.

    Args:
        group: The consumer group id.

    Returns:
        The path.

    Raises:
        ValueError: ``group`` is empty or contains ``/``.
    """
    return f"{CONSUMERS_PATH}/{_element('group', group)}"


def consumer_ids_path(group: str) -> str:
    """``/consumers/<group>/ids`` (children: registered consumer ids).

    Args:
        group: The consumer group id.

    Returns:
        The path.

    Raises:
        ValueError: Bad group name.
    """
    return f"{consumer_group_path(group)}/ids"


def consumer_registration_path(group: str, consumer_id: str) -> str:
    """``/consumers/<group>/ids/<consumer_id>`` (ephemeral registration).

    Args:
        group: The consumer group id.
        consumer_id: The consumer's id (see :func:`make_consumer_id`).

    Returns:
        The path.

    Raises:
        ValueError: Bad group or consumer id.
    """
    return f"{consumer_ids_path(group)}/{_element('consumer id', consumer_id)}"


def _group_topic_path(group: str, kind: str, topic: str | None) -> str:
    # /consumers/<group>/<kind> or /consumers/<group>/<kind>/<topic> (owners, offsets)
    base = f"{consumer_group_path(group)}/{kind}"
    return base if topic is None else f"{base}/{_element('topic', topic)}"


def consumer_owners_path(group: str, topic: str | None = None) -> str:
    """``/consumers/<group>/owners`` or ``/consumers/<group>/owners/<topic>``.

    Args:
        group: The consumer group id.
        topic: A topic, or None for the owners root.

    Returns:
        The path.

    Raises:
        ValueError: Bad group or topic name.
    """
    return _group_topic_path(group, "owners", topic)


def owner_path(group: str, topic: str, partition: int) -> str:
    """``/consumers/<group>/owners/<topic>/<partition>`` (ephemeral; data: owning thread id).

    Args:
        group: The consumer group id.
        topic: The topic.
        partition: The partition number.

    Returns:
        The path.

    Raises:
        ValueError: Bad group, topic or partition.
    """
    return f"{consumer_owners_path(group, topic)}/{_partition(partition)}"


def consumer_offsets_path(group: str, topic: str | None = None) -> str:
    """``/consumers/<group>/offsets`` or ``/consumers/<group>/offsets/<topic>``.

    Args:
        group: The consumer group id.
        topic: A topic, or None for the offsets root.

    Returns:
        The path.

    Raises:
        ValueError: Bad group or topic name.
    """
    return _group_topic_path(group, "offsets", topic)


def offset_path(group: str, topic: str, partition: int) -> str:
    """``/consumers/<group>/offsets/<topic>/<partition>`` (data: next offset to consume).

    Args:
        group: The consumer group id.
        topic: The topic.
        partition: The partition number.

    Returns:
        The path.

    Raises:
        ValueError: Bad group, topic or partition.
    """
    return f"{consumer_offsets_path(group, topic)}/{_partition(partition)}"


def broker_path(broker_id: int) -> str:
    """``/brokers/ids/<broker_id>`` (ephemeral broker registration).

    Args:
        broker_id: The broker's id (>= 0).

    Returns:
        The path.

    Raises:
        ValueError: Negative or non-int id.
    """
    return f"{BROKER_IDS_PATH}/{_number('broker id', broker_id)}"


def topic_path(topic: str) -> str:
    """``/brokers/topics/<topic>`` (data: replica assignment).

    Args:
        topic: The topic.

    Returns:
        The path.

    Raises:
        ValueError: Bad topic name.
    """
    return f"{BROKER_TOPICS_PATH}/{_element('topic', topic)}"


def topic_partitions_path(topic: str) -> str:
    """``/brokers/topics/<topic>/partitions``.

    Args:
        topic: The topic.

    Returns:
        The path.

    Raises:
        ValueError: Bad topic name.
    """
    return f"{topic_path(topic)}/partitions"


def delete_topic_path(topic: str) -> str:
    """``/admin/delete_topics/<topic>`` (no data: the topic is marked for deletion).

    Args:
        topic: The topic.

    Returns:
        The path.

    Raises:
        ValueError: Bad topic name.
    """
    return f"{DELETE_TOPICS_PATH}/{_element('topic', topic)}"


def config_path(entity_type: str, name: str) -> str:
    """``/config/<entity_type>/<name>``: the dynamic configs of a topic or broker.

    Args:
        entity_type: ``topics``, ``brokers``, ``clients`` or ``users`` (quotas).
        name: the topic, the broker id, or ``<default>``; a client id; a user, or
            ``<user>/clients/<client-id>`` (quota names sanitized, see :func:`quota_entity_name`).

    Returns:
        The path.

    Raises:
        ValueError: An unknown entity type, or a name that is not a legal topic, broker id or
            ``<default>``.
    """
    if entity_type == "topics":
        return f"{CONFIG_PATH}/topics/{_element('topic', name)}"
    if entity_type == "brokers":
        if name != DEFAULT_BROKER_ENTITY and not (name.isdigit() and name.isascii()):
            raise ValueError(f"bad broker config entity {name!r}: a broker id or {DEFAULT_BROKER_ENTITY}")
        return f"{CONFIG_PATH}/brokers/{name}"
    if entity_type == "clients":
        return f"{CONFIG_PATH}/clients/{_element('client id', name)}"
    if entity_type == "users":
        user, sep, client = name.partition("/clients/")
        return f"{CONFIG_PATH}/users/{_element('user', user)}" + (f"/clients/{_element('client id', client)}" if sep else "")
    raise ValueError(f"unknown config entity type {entity_type!r}")


def sanitize_quota_name(name: str) -> str:
    """A user or client id as a znode name (Kafka's ``Sanitizer``: URL-encoded, so ``/`` and
    ``*`` cannot leak into the path; ``<default>`` is kept as it is).

    Args:
        name: The user principal name, client id, or ``<default>``.

    Returns:
        The znode name.
    """
    return name if name == DEFAULT_BROKER_ENTITY else quote(name, safe="")


def desanitize_quota_name(name: str) -> str:
    """The inverse of :func:`sanitize_quota_name`.

    Args:
        name: The znode name.

    Returns:
        The user or client id.
    """
    return unquote(name)


def quota_entity_name(user: str | None, client_id: str | None) -> tuple[str, str]:
    """The ``(entity_type, name)`` of a quota entity for :func:`config_path`:
    ``/config/users/<user>/clients/<client-id>``, ``/config/users/<user>``,
    ``/config/clients/<client-id>`` (names sanitized; ``<default>`` for the defaults).

    Args:
        user: The user (None: the entity names no user).
        client_id: The client id (None: the entity names no client id).

    Returns:
        ``("users", "<u>[/clients/<c>]")`` or ``("clients", "<c>")``.

    Raises:
        ValueError: Neither part given.
    """
    if user is not None:
        name = sanitize_quota_name(user)
        return "users", name if client_id is None else f"{name}/clients/{sanitize_quota_name(client_id)}"
    if client_id is None:
        raise ValueError("a quota entity names a user, a client id or both")
    return "clients", sanitize_quota_name(client_id)


def encode_config(config: Mapping[str, str]) -> bytes:
    """Encode ``/config/<type>/<name>``: ``{"version":1,"config":{...}}``.

    Args:
        config: name -> value (strings, as Kafka stores them).

    Returns:
        utf-8 JSON bytes.
    """
    return _dumps({"version": 1, "config": {k: str(config[k]) for k in sorted(config)}})


def decode_config(data: bytes | str | None) -> dict[str, str]:
    """Parse ``/config/<type>/<name>``.

    Args:
        data: The znode data.

    Returns:
        name -> value.

    Raises:
        ZnodeDataError: Not JSON, or no ``config`` object of strings.
    """
    obj = _loads(data, "config")
    cfg = obj.get("config", {})
    if not isinstance(cfg, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in cfg.items()):
        raise ZnodeDataError(f"config: bad 'config': {cfg!r}")
    return dict(cfg)


def partition_state_path(topic: str, partition: int) -> str:
    """``/brokers/topics/<topic>/partitions/<partition>/state`` (leader and ISR).

    Args:
        topic: The topic.
        partition: The partition number.

    Returns:
        The path.

    Raises:
        ValueError: Bad topic or partition.
    """
    return f"{topic_partitions_path(topic)}/{_partition(partition)}/state"


# --------------------------------------------------------------------- ids


def make_consumer_id(
    group: str,
    *,
    hostname: str | None = None,
    now_ms: int | None = None,
    uuid8: str | None = None,
) -> str:
    """A consumer id the way the Java 0.8 connector makes one.

    Args:
        group: The consumer group id.
        hostname: Default: this machine's host name.
        now_ms: Default: the current time in epoch milliseconds.
        uuid8: Eight hex digits; default: from a random UUID.

    Returns:
        ``<group>_<hostname>-<now_ms>-<uuid8>``.

    Raises:
        ValueError: Bad group name.
    """
    _element("group", group)
    host = hostname if hostname is not None else (platform.node() or "localhost")
    created_ms = now_ms if now_ms is not None else wall_ms()
    tag = uuid8 if uuid8 is not None else uuid.uuid4().hex[:8]
    return f"{group}_{host}-{created_ms}-{tag}"


def thread_id(consumer_id: str, index: int) -> str:
    """The id of one stream thread: ``<consumer_id>-<index>``.

    Args:
        consumer_id: The consumer's id.
        index: Stream number (>= 0).

    Returns:
        The thread id.

    Raises:
        ValueError: Negative index.
    """
    if index < 0:
        raise ValueError(f"thread index must be >= 0, got {index}")
    return f"{consumer_id}-{index}"


def thread_ids(consumer_id: str, num_streams: int) -> list[str]:
    """All stream thread ids of a consumer for one topic.

    Args:
        consumer_id: The consumer's id.
        num_streams: Streams requested for the topic.

    Returns:
        ``[<consumer_id>-0, ..., <consumer_id>-<num_streams-1>]``.
    """
    return [thread_id(consumer_id, i) for i in range(num_streams)]


def parse_thread_id(value: str) -> tuple[str, int]:
    """Split a thread id into its consumer id and stream number.

    Args:
        value: ``<consumer_id>-<n>``.

    Returns:
        ``(consumer_id, n)``.

    Raises:
        ValueError: No ``-<n>`` suffix.
    """
    consumer, sep, index = value.rpartition("-")
    if not sep or not consumer or not index.isdigit():
        raise ValueError(f"not a consumer thread id: {value!r}")
    return consumer, int(index)


# --------------------------------------------------------------------- JSON helpers


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads(data: bytes | str | None, what: str) -> dict[str, Any]:
    if data is None:
        raise ZnodeDataError(f"{what}: znode has no data")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZnodeDataError(f"{what}: not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ZnodeDataError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _int(obj: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, bool) or value is None:
        raise ZnodeDataError(f"{what}: missing or bad {key!r}: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ZnodeDataError(f"{what}: {key!r} is not an integer: {value!r}")


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ZnodeDataError(f"{what}: expected a list of ints, got {value!r}")
    return list(value)


def wall_ms() -> int:
    """Milliseconds since the Unix epoch, for the timestamps Kafka writes into znodes (this
    package imports nothing of the project, so it keeps this one-liner of hmbclient.clock)."""
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------- consumer registration


@dataclass(frozen=True)
class ConsumerRegistration:
    """``/consumers/<g>/ids/<id>``: what a consumer subscribed to.

    ``subscription`` maps topic -> stream count for ``static``; for ``white_list`` /
    ``black_list`` it holds one entry, the regex -> stream count.
    """

    subscription: Mapping[str, int]
    pattern: Pattern = "static"
    timestamp_ms: int = field(default_factory=wall_ms)
    version: int = 1


def encode_consumer_registration(reg: ConsumerRegistration) -> bytes:
    """Encode as Java 0.8 does: ``{"version":1,"subscription":{..},"pattern":..,"timestamp":"ms"}``.

    Args:
        reg: The registration.

    Returns:
        utf-8 JSON bytes.

    Raises:
        ValueError: Unknown pattern, or a stream count < 1.
    """
    if reg.pattern not in _PATTERNS:
        raise ValueError(f"pattern must be one of {_PATTERNS}, got {reg.pattern!r}")
    for topic, streams in reg.subscription.items():
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ValueError(f"stream count for {topic!r} must be an int >= 1, got {streams!r}")
    return _dumps(
        {
            "version": reg.version,
            "subscription": dict(reg.subscription),
            "pattern": reg.pattern,
            "timestamp": str(reg.timestamp_ms),
        }
    )


def decode_consumer_registration(data: bytes | str | None) -> ConsumerRegistration:
    """Parse a consumer registration (any field order; timestamp string or number).

    Args:
        data: The znode data.

    Returns:
        The registration.

    Raises:
        ZnodeDataError: Not JSON, or a required field is missing or malformed.
    """
    what = "consumer registration"
    obj = _loads(data, what)
    sub = obj.get("subscription")
    if not isinstance(sub, dict):
        raise ZnodeDataError(f"{what}: missing or bad 'subscription': {sub!r}")
    subscription = {str(k): _int(sub, k, what) for k in sub}
    pattern = obj.get("pattern", "static")
    if pattern not in _PATTERNS:
        raise ZnodeDataError(f"{what}: unknown pattern {pattern!r}")
    return ConsumerRegistration(
        subscription=subscription,
        pattern=pattern,
        timestamp_ms=_int(obj, "timestamp", what, default=0),
        version=_int(obj, "version", what, default=1),
    )


# --------------------------------------------------------------------- broker registration


@dataclass(frozen=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``: where a broker listens.

    Version 1 (Kafka 0.8) has ``host``/``port`` only. A broker with several listeners writes
    version 4: ``endpoints`` (``("PLAINTEXT://h:9092", "SASL_SSL://h:9093")``), a listener ->
    security protocol map, and ``host``/``port`` of its PLAINTEXT endpoint for older readers
    (null and -1 when it has none; decoded as ``""`` and -1 with ``require_plaintext=False``).
    """

    host: str
    port: int
    jmx_port: int = -1
    timestamp_ms: int = field(default_factory=wall_ms)
    version: int = 1
    endpoints: tuple[str, ...] = ()

    def listeners(self) -> dict[str, tuple[str, int]]:
        """Listener name -> ``(host, port)``; a version-1 registration is one PLAINTEXT listener.
        Endpoints that do not parse are left out."""
        out: dict[str, tuple[str, int]] = {}
        for endpoint in self.endpoints:
            parsed = _parse_endpoint(endpoint)
            if parsed is not None:
                out.setdefault(*parsed)
        if not out and self.port >= 0:
            out["PLAINTEXT"] = (self.host, self.port)
        return out


def encode_broker_registration(reg: BrokerRegistration) -> bytes:
    """Encode as a 0.8 broker does (field order of Scala's 5-entry hash map).

    ``{"jmx_port":-1,"timestamp":"ms","host":"h","version":1,"port":9092}``

    With ``endpoints``, Kafka's version-4 form instead (field order as Kafka 2.x writes it):
    ``{"listener_security_protocol_map":{...},"endpoints":[...],"jmx_port":-1,"host":"h",
    "timestamp":"ms","port":9092,"version":4}``, ``host``/``port`` being the PLAINTEXT endpoint's
    (null / -1 without one). Listener names are their security protocols.

    Args:
        reg: The registration.

    Returns:
        utf-8 JSON bytes.
    """
    if reg.endpoints:
        listeners = reg.listeners()
        plain = listeners.get("PLAINTEXT")
        return _dumps(
            {
                "listener_security_protocol_map": {name: name for name in listeners},
                "endpoints": list(reg.endpoints),
                "jmx_port": reg.jmx_port,
                "host": plain[0] if plain else None,
                "timestamp": str(reg.timestamp_ms),
                "port": plain[1] if plain else -1,
                "version": max(reg.version, 4),
            }
        )
    return _dumps(
        {
            "jmx_port": reg.jmx_port,
            "timestamp": str(reg.timestamp_ms),
            "host": reg.host,
            "version": reg.version,
            "port": reg.port,
        }
    )


def decode_broker_registration(data: bytes | str | None, *, require_plaintext: bool = True) -> BrokerRegistration:
    """Parse a broker registration, version 1 or later.

    When ``host`` is null or ``port`` is -1 (later brokers with listeners), the first
    ``PLAINTEXT://host:port`` endpoint supplies them.

    Args:
        data: The znode data.
        require_plaintext: a registration without a PLAINTEXT address is an error (what a
            0.8 client needs); False: such a registration decodes with host ``""``, port -1,
            its addresses in ``endpoints``.

    Returns:
        The registration.

    Raises:
        ZnodeDataError: Not JSON, or no usable host and port (and no endpoints at all, with
            ``require_plaintext=False``).
    """
    what = "broker registration"
    obj = _loads(data, what)
    raw_endpoints = obj.get("endpoints") or []
    endpoints = tuple(str(e) for e in raw_endpoints) if isinstance(raw_endpoints, list) else ()
    host = obj.get("host")
    port = obj.get("port", -1)
    if not isinstance(host, str) or not host or not isinstance(port, int) or port < 0:
        try:
            host, port = _from_endpoints(endpoints, what)
        except ZnodeDataError:
            if require_plaintext or not any(_parse_endpoint(e) for e in endpoints):
                raise
            host, port = "", -1
    return BrokerRegistration(
        host=host,
        port=port,
        jmx_port=_int(obj, "jmx_port", what, default=-1),
        timestamp_ms=_int(obj, "timestamp", what, default=0),
        version=_int(obj, "version", what, default=1),
        endpoints=endpoints,
    )


def _parse_endpoint(endpoint: str) -> tuple[str, tuple[str, int]] | None:
    """``"NAME://host:port"`` -> ``("NAME", (host, port))``; None when it does not parse."""
    scheme, sep, address = endpoint.partition("://")
    host, _, port = address.rpartition(":")
    if not sep or not scheme or not host or not port.isdigit():
        return None
    return scheme.upper(), (host.strip("[]"), int(port))


def _from_endpoints(endpoints: Iterable[str], what: str) -> tuple[str, int]:
    for endpoint in endpoints:
        parsed = _parse_endpoint(endpoint)
        if parsed is not None and parsed[0] in ("PLAINTEXT", "PLAINTEXT_HOST"):
            return parsed[1]
    raise ZnodeDataError(f"{what}: no host/port and no PLAINTEXT endpoint")


# --------------------------------------------------------------------- topics, partitions


def encode_topic_assignment(replicas: Mapping[int, Iterable[int]], topic_id: uuid.UUID | None = None) -> bytes:
    """Encode ``/brokers/topics/<t>``: ``{"version":1,"partitions":{"0":[0,1],...}}``, then
    ``"topic_id":"<id>"`` when given (as Kafka 2.8+ writes it).

    Args:
        replicas: partition -> replica broker ids (the first is the preferred leader).
        topic_id: The topic's id (KIP-516), or None for Kafka 0.8's bytes.

    Returns:
        utf-8 JSON bytes, partitions in numeric order.

    Raises:
        ValueError: A negative partition or an empty replica list.
    """
    partitions: dict[str, list[int]] = {}
    for p in sorted(replicas):
        _partition(p)
        brokers = list(replicas[p])
        if not brokers:
            raise ValueError(f"partition {p} has no replicas")
        partitions[str(p)] = brokers
    obj: dict[str, Any] = {"version": 1, "partitions": partitions}
    if topic_id is not None:
        obj["topic_id"] = topic_id_str(topic_id)
    return _dumps(obj)


def new_topic_id() -> uuid.UUID:
    """A random topic id as Kafka draws one (``Uuid.randomUuid``): not the zero id or the
    metadata topic's id (1), and its string form never starts with ``-``.

    Returns:
        The id.
    """
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not topic_id_str(u).startswith("-"):
            return u


def topic_id_str(topic_id: uuid.UUID) -> str:
    """Kafka's string form of a Uuid: URL-safe base64 of its 16 bytes without padding.

    Args:
        topic_id: The id.

    Returns:
        22 characters.
    """
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """The inverse of :func:`topic_id_str`.

    Args:
        text: Kafka's string form of a Uuid.

    Returns:
        The id.

    Raises:
        ZnodeDataError: Not 22 characters of URL-safe base64 for 16 bytes.
    """
    if not isinstance(text, str) or len(text) != 22:
        raise ZnodeDataError(f"topic id: expected 22 characters of base64, got {text!r}")
    try:
        raw = base64.b64decode(text + "==", altchars=b"-_", validate=True)
    except (ValueError, binascii.Error):
        raise ZnodeDataError(f"topic id: not base64: {text!r}") from None
    if len(raw) != 16:
        raise ZnodeDataError(f"topic id: not 16 bytes: {text!r}")
    return uuid.UUID(bytes=raw)


def decode_topic_id(data: bytes | str | None) -> uuid.UUID | None:
    """The ``"topic_id"`` of a ``/brokers/topics/<t>`` znode.

    Args:
        data: The znode data.

    Returns:
        The id, or None when the znode has none (written by Kafka before 2.8, or by us before
        topic ids).

    Raises:
        ZnodeDataError: Not JSON, or a malformed id.
    """
    tid = _loads(data, "topic assignment").get("topic_id")
    return None if tid is None else parse_topic_id(tid)


def with_topic_id(data: bytes | str | None, topic_id: uuid.UUID) -> bytes:
    """A topic znode's data with ``"topic_id"`` set (other fields kept as they were).

    Args:
        data: The znode data.
        topic_id: The id to record.

    Returns:
        utf-8 JSON bytes.

    Raises:
        ZnodeDataError: Not JSON.
    """
    obj = _loads(data, "topic assignment")
    obj["topic_id"] = topic_id_str(topic_id)
    return _dumps(obj)


def decode_topic_assignment(data: bytes | str | None) -> dict[int, list[int]]:
    """Parse ``/brokers/topics/<t>``.

    Args:
        data: The znode data.

    Returns:
        partition -> replica broker ids, in partition order.

    Raises:
        ZnodeDataError: Not JSON, or a malformed partitions map.
    """
    what = "topic assignment"
    obj = _loads(data, what)
    parts = obj.get("partitions")
    if not isinstance(parts, dict):
        raise ZnodeDataError(f"{what}: missing or bad 'partitions': {parts!r}")
    out: dict[int, list[int]] = {}
    for key in sorted(parts, key=lambda k: int(k) if str(k).isdigit() else -1):
        if not str(key).isdigit():
            raise ZnodeDataError(f"{what}: bad partition number {key!r}")
        out[int(key)] = _int_list(parts[key], what)
    return out


def decode_topic_reassignments(data: bytes | str | None) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """The ongoing reassignments of a ``/brokers/topics/<t>`` znode: Kafka 2.4+'s
    ``"adding_replicas"`` / ``"removing_replicas"`` maps (partition -> broker ids; KIP-455).

    Args:
        data: The znode data.

    Returns:
        partition -> (adding replicas, removing replicas), for partitions named in either map
        with a non-empty list.

    Raises:
        ZnodeDataError: Not JSON, or a malformed map.
    """
    what = "topic reassignments"
    obj = _loads(data, what)
    out: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    for i, key in enumerate(("adding_replicas", "removing_replicas")):
        m = obj.get(key) or {}
        if not isinstance(m, dict):
            raise ZnodeDataError(f"{what}: bad {key!r}: {m!r}")
        for p, brokers in m.items():
            if not str(p).isdigit():
                raise ZnodeDataError(f"{what}: bad partition number {p!r}")
            ids = tuple(_int_list(brokers, what))
            if ids:
                cur = out.get(int(p), ((), ()))
                out[int(p)] = (ids, cur[1]) if i == 0 else (cur[0], ids)
    return out


def with_reassignment(data: bytes | str | None, partition: int, replicas: Iterable[int], adding: Iterable[int], removing: Iterable[int]) -> bytes:
    """A topic znode's data with one partition's replicas and its ongoing reassignment set
    (empty ``adding`` and ``removing``: none), other fields kept (``topic_id``, the other
    partitions). The version becomes at least 2, as Kafka 2.4+ writes these maps.

    Args:
        data: The znode data.
        partition: The partition.
        replicas: Its full replica set (target replicas, then the original ones not in the target).
        adding: Replicas being added (empty when no reassignment is in progress).
        removing: Replicas being removed.

    Returns:
        The new znode data.

    Raises:
        ZnodeDataError: The data is not a topic znode.
        ValueError: A negative partition or an empty replica list.
    """
    _partition(partition)
    brokers = list(replicas)
    if not brokers:
        raise ValueError(f"partition {partition} has no replicas")
    obj = _loads(data, "topic assignment")
    parts = obj.get("partitions")
    if not isinstance(parts, dict):
        raise ZnodeDataError(f"topic assignment: missing or bad 'partitions': {parts!r}")
    parts[str(partition)] = brokers
    for key, ids in (("adding_replicas", list(adding)), ("removing_replicas", list(removing))):
        m = obj.get(key)
        m = dict(m) if isinstance(m, dict) else {}
        if ids:
            m[str(partition)] = ids
        else:
            m.pop(str(partition), None)
        obj[key] = m
    obj["version"] = max(2, int(obj.get("version", 1)) if isinstance(obj.get("version"), int) else 2)
    return _dumps(obj)


@dataclass(frozen=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<n>/state``: leader and in-sync replicas."""

    leader: int
    isr: tuple[int, ...]
    leader_epoch: int = 0
    controller_epoch: int = 1
    version: int = 1


def encode_partition_state(state: PartitionState) -> bytes:
    """Encode as a 0.8 controller does (field order of Scala's 5-entry hash map).

    ``{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}``

    Args:
        state: The state.

    Returns:
        utf-8 JSON bytes.
    """
    return _dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": state.version,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes | str | None) -> PartitionState:
    """Parse a partition state znode (any field order).

    Args:
        data: The znode data.

    Returns:
        The state (``leader`` is -1 when there is none).

    Raises:
        ZnodeDataError: Not JSON, or a required field is missing or malformed.
    """
    what = "partition state"
    obj = _loads(data, what)
    return PartitionState(
        leader=_int(obj, "leader", what),
        isr=tuple(_int_list(obj.get("isr"), what)),
        leader_epoch=_int(obj, "leader_epoch", what, default=0),
        controller_epoch=_int(obj, "controller_epoch", what, default=0),
        version=_int(obj, "version", what, default=1),
    )


# --------------------------------------------------------------------- controller


@dataclass(frozen=True)
class ControllerRegistration:
    """``/controller``: which broker is the controller."""

    broker_id: int
    timestamp_ms: int = field(default_factory=wall_ms)
    version: int = 1


def encode_controller(reg: ControllerRegistration) -> bytes:
    """Encode ``/controller``: ``{"version":1,"brokerid":0,"timestamp":"ms"}``.

    Args:
        reg: The registration.

    Returns:
        utf-8 JSON bytes.
    """
    return _dumps(
        {"version": reg.version, "brokerid": reg.broker_id, "timestamp": str(reg.timestamp_ms)}
    )


def decode_controller(data: bytes | str | None) -> ControllerRegistration:
    """Parse ``/controller`` (also the bare-integer form of very old brokers).

    Args:
        data: The znode data.

    Returns:
        The registration.

    Raises:
        ZnodeDataError: Malformed data.
    """
    what = "controller registration"
    if data is not None:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        if text.strip().isdigit():
            return ControllerRegistration(broker_id=int(text), timestamp_ms=0)
    obj = _loads(data, what)
    return ControllerRegistration(
        broker_id=_int(obj, "brokerid", what),
        timestamp_ms=_int(obj, "timestamp", what, default=0),
        version=_int(obj, "version", what, default=1),
    )


# --------------------------------------------------------------------- offsets, owners


#: What an offsets znode may hold: a decimal offset, or ``-1`` -- Kafka 0.8's ``InvalidOffset``,
#: which the Java consumer reads as "no offset" (it applies ``auto.offset.reset``).
_OFFSET_TEXT = re.compile(r"-1|[0-9]+")

#: :func:`decode_offset`'s answer for a znode holding ``-1`` ("nothing usable committed").
NO_OFFSET = -1


def encode_offset(offset: int) -> bytes:
    """Encode an offsets znode: the decimal next offset to consume, as Java 0.8 writes it.

    Args:
        offset: The next offset to consume (>= 0). Nothing ever commits :data:`NO_OFFSET`:
            a partition without an offset simply has no znode.

    Returns:
        ASCII digits.

    Raises:
        ValueError: Not an int, or negative (the message names the offset).
    """
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"a committed offset must be an int >= 0, got {offset!r}")
    return str(offset).encode("ascii")


def decode_offset(data: bytes | str | None, path: str | None = None) -> int:
    """Parse an offsets znode, strictly: a decimal offset or ``-1``, nothing else.

    Args:
        data: The znode data (surrounding whitespace tolerated).
        path: The znode's path, named in the error (recommended for every read from
            ZooKeeper).

    Returns:
        The offset, or :data:`NO_OFFSET` (-1) when the znode says there is none.

    Raises:
        ZnodeDataError: No data, or anything but ASCII digits or ``-1`` (a sign, ``_``
            separators, hex, ...); the message names ``path``.
    """
    where = f"offset znode {path}" if path is not None else "offset znode"
    if data is None:
        raise ZnodeDataError(f"{where} has no data")
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    if _OFFSET_TEXT.fullmatch(text.strip()) is None:
        raise ZnodeDataError(f"{where} holds {text[:40]!r}, not a decimal offset")
    return int(text)


def encode_owner(owner_thread_id: str) -> bytes:
    """Encode an owners znode: the owning thread id.

    Args:
        owner_thread_id: ``<consumer_id>-<n>``.

    Returns:
        utf-8 bytes.
    """
    return owner_thread_id.encode("utf-8")


def decode_owner(data: bytes | str | None) -> str:
    """Parse an owners znode.

    Args:
        data: The znode data.

    Returns:
        The owning thread id.

    Raises:
        ZnodeDataError: Empty.
    """
    if not data:
        raise ZnodeDataError("owner: znode has no data")
    return data.decode("utf-8") if isinstance(data, bytes) else data


# --------------------------------------------------------------------- registration from parts


def consumer_registration_json(
    subscription: Mapping[str, int], pattern: str, timestamp: str | int
) -> bytes:
    """Encode a consumer registration from its parts (see :func:`encode_consumer_registration`).

    Args:
        subscription: topic (or regex) -> stream count.
        pattern: ``"static"``, ``"white_list"`` or ``"black_list"``.
        timestamp: Registration time in ms (int or decimal string).

    Returns:
        utf-8 JSON bytes, as Java 0.8 writes them.

    Raises:
        ValueError: Unknown pattern, bad stream count, or a non-decimal timestamp.
    """
    if pattern not in _PATTERNS:
        raise ValueError(f"pattern must be one of {_PATTERNS}, got {pattern!r}")
    return encode_consumer_registration(
        ConsumerRegistration(
            subscription=dict(subscription),
            pattern=pattern,  # type: ignore[arg-type]
            timestamp_ms=int(timestamp),
        )
    )
