"""Cluster administration used by the ``hmb`` command and by tools: topics (list, create,
delete, add partitions, describe partition leaders and replicas), preferred leader election,
partition reassignment (KIP-455, with kafka-reassign-partitions.sh's JSON and throttles),
ZooKeeper consumer groups (members, owners, committed offsets, lag), and the deletion of a
partition's records below an offset (DeleteRecords).

Everything here goes through the public client pieces (``NetClient`` + ``Metadata``,
``SimpleConsumer``) and kazoo with the Kafka 0.8 znode layout from :mod:`hmbclient.zkpaths`,
so what it reports is what a Java 0.8 tool would read from the same cluster. Every request's
version is chosen by the connection's version seam (:mod:`hmbclient.net.versions`), so
``api_version`` pins or probes it exactly as for the producer and consumer; a dialect without
an API (CreateTopics on "0.8" or "hmb") raises ``UnsupportedByBroker`` before anything is sent.

Broker answers are reported through :func:`hmbclient.errors.for_code`: a refused topic
creation raises the BrokerError subclass of the answer's code, with the broker's own
error_message as its message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from hmbclient import zkpaths as paths
from hmbclient.errors import (
    CoordinationError,
    ErrorCode,
    KafkaConnectionError,
    RemoteProtocolError,
    UnknownTopicOrPartitionError,
    for_code,
)
from hmbclient.protocol.api.base import ApiKey

__all__ = [
    "PartitionInfo",
    "topic_partitions",
    "list_topics",
    "create_topic",
    "delete_topics",
    "create_partitions",
    "elect_preferred_leaders",
    "ConfigEntry",
    "describe_cluster",
    "plan_offset_reset",
    "delete_group_offsets",
    "reset_group_offsets",
    "describe_log_dirs",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "describe_client_quotas",
    "alter_client_quotas",
    "describe_topics",
    "list_groups",
    "describe_group",
    "latest_offsets",
    "TransactionInfo",
    "list_transactions",
    "describe_transactions",
    "delete_records",
    "Reassignment",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "parse_reassignment_json",
    "reassignment_throttles",
]

_TIMEOUT_MS = 10_000
# CreateTopics: the broker may use all of timeout_ms before it answers (it waits for the new
# partitions to get leaders), so the client waits this much longer for the answer to travel.
_ANSWER_MARGIN_MS = 5_000


class PartitionInfo(NamedTuple):
    """One partition as Metadata reports it (``describe_topics``).

    ``leader`` is -1 while the partition has no leader; ``offline_replicas`` are replicas whose
    broker is down (always empty below Metadata v5, which added the field).
    """

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@contextlib.contextmanager
def _client(brokers: str, api_version: str, timeout_ms: float, security: Any = None) -> Iterator[Any]:
    # security: a hmbclient.net.security.Security (TLS / SASL), or None for PLAINTEXT.
    from hmbclient.net.client import NetClient

    client = NetClient(brokers, api_version=api_version, client_id="hmb-admin",
                       request_timeout_ms=timeout_ms,
                       connect_timeout_ms=min(timeout_ms, _TIMEOUT_MS), security=security)
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def _metadata(brokers: str, api_version: str, timeout_ms: float, security: Any = None) -> Iterator[Any]:
    from hmbclient.net.metadata import Metadata

    with _client(brokers, api_version, timeout_ms, security) as client:
        yield Metadata(client, allow_auto_topic_creation=False)


def topic_partitions(brokers: str, topic: str, *, api_version: str = "auto",
                     timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> dict[int, tuple[str, int]]:
    """Partition -> leader (host, port) for one topic.

    Raises:
        KeyError: the topic does not exist (no auto-creation is asked for).
        KafkaConnectionError / RequestTimedOutError: no broker answered in time.
    """
    with _metadata(brokers, api_version, timeout_ms, security) as md:
        view = md.refresh([topic], timeout_ms=timeout_ms)
        info = view.topics.get(topic)
        if info is None or info.error_code == UnknownTopicOrPartitionError.errno or not info.partitions:
            raise KeyError(topic)
        out: dict[int, tuple[str, int]] = {}
        for p, pinfo in info.partitions.items():
            addr = view.brokers.get(pinfo.leader)
            if addr is not None:
                out[p] = addr
        return out


def list_topics(brokers: str, *, api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS,
                security: Any = None) -> dict[str, int]:
    """Topic -> number of partitions, for every topic the cluster reports."""
    with _metadata(brokers, api_version, timeout_ms, security) as md:
        view = md.refresh(None, timeout_ms=timeout_ms)
        return {t: len(info.partitions) for t, info in view.topics.items() if not info.error_code}


def create_topic(brokers: str, name: str, num_partitions: int, replication_factor: int, *,
                 timeout_ms: float = 30_000, api_version: str = "auto", security: Any = None,
                 configs: dict[str, str] | None = None) -> None:
    """Create one topic with CreateTopics (no explicit assignment).

    Any broker takes the request (Kafka sends it to the controller itself; our brokers accept
    it anywhere). The bootstrap brokers are asked in turn until one answers.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        name: the topic.
        num_partitions: as the broker is asked to create them; the broker judges it (-1 asks
            for its default, on brokers that know CreateTopics v4).
        replication_factor: likewise.
        timeout_ms: how long the broker may take to create the topic (sent in the request);
            the client waits a few seconds longer for the answer.
        api_version: the dialect ("auto" asks the broker).
        security: TLS/SASL settings (``hmbclient.net.Security``) or None.
        configs: topic configs (``{"cleanup.policy": "compact"}``); the broker refuses unknown
            names and bad values with InvalidConfigError.

    Raises:
        BrokerError: the broker refused, as the subclass of the answer's code (for_code), with
            the broker's error_message: TopicAlreadyExistsError, InvalidReplicationFactorError,
            InvalidTopicExceptionError, InvalidPartitionsError, RequestTimedOutError (the
            broker did not finish within timeout_ms; the topic may still appear).
        UnsupportedByBroker: the dialect or broker has no CreateTopics; nothing was sent.
        KafkaConnectionError / RequestTimedOutError: no broker answered in time. A connection
            lost after the request was written moves on to the next broker, which may then
            answer TOPIC_ALREADY_EXISTS for a topic the first one created.
    """

    def build(versions: Any) -> Any:
        return versions.build(
            ApiKey.CREATE_TOPICS,
            topics=[(name, num_partitions, replication_factor, [], sorted((configs or {}).items()))],
            timeout_ms=int(timeout_ms),
            validate_only=False,
        )

    wait_ms = timeout_ms + _ANSWER_MARGIN_MS
    with _client(brokers, api_version, wait_ms, security) as client:
        last: KafkaConnectionError | None = None
        for node in client.bootstrap_ids:
            try:
                resp = client.call(node, build, timeout_ms=wait_ms, api_key=ApiKey.CREATE_TOPICS)
                break
            except KafkaConnectionError as e:
                last = e
        else:
            assert last is not None
            raise last
    for t in resp.topics:
        if t.topic != name:
            continue
        if t.error_code:
            # error_message exists from v1 on; v0 answers carry only the code.
            message = getattr(t, "error_message", None) or f"topic {name!r} was not created"
            raise for_code(t.error_code)(message)
        return
    raise RemoteProtocolError(f"the CreateTopics answer does not mention topic {name!r}")


def _any_broker(brokers: str, api_version: str, wait_ms: float, security: Any, api_key: int,
                build: Callable[[Any], Any], *, controller: bool = False) -> Any:
    """Send one request to the first bootstrap broker that answers (or to the controller that
    Metadata names, for ``controller``) and return its answer."""
    with _client(brokers, api_version, wait_ms, security) as client:
        if controller:
            from hmbclient.net.metadata import Metadata

            view = Metadata(client, allow_auto_topic_creation=False).refresh([], timeout_ms=wait_ms)
            if view.controller_id >= 0:
                return client.call(view.controller_id, build, timeout_ms=wait_ms, api_key=api_key)
        last: KafkaConnectionError | None = None
        for node in client.bootstrap_ids:
            try:
                return client.call(node, build, timeout_ms=wait_ms, api_key=api_key)
            except KafkaConnectionError as e:
                last = e
        assert last is not None
        raise last


def _raise_first(errors: dict[str, tuple[int, str | None]], what: str) -> None:
    for name, (code, message) in errors.items():
        if code:
            raise for_code(code)(message or f"{what} {name!r} failed")


def delete_topics(brokers: str, topics: Iterable[str], *, timeout_ms: float = 30_000, api_version: str = "auto",
                  security: Any = None, raise_errors: bool = True) -> dict[str, int]:
    """Delete topics with DeleteTopics; returns topic -> error code (0: deleted).

    The broker marks each topic for deletion and answers once its metadata no longer has it
    (a topic with a replica on a dead broker waits for that broker: REQUEST_TIMED_OUT, the
    deletion goes on).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        topics: the topics to delete.
        timeout_ms: how long the broker may wait for the deletions.
        api_version: the version dialect (``auto`` probes).
        security: TLS / SASL (a ``hmbclient.net.security.Security``), or None.
        raise_errors: raise the first refusal instead of returning it.

    Raises:
        BrokerError: (``raise_errors``) the first refused topic's error, as the subclass of its
            code: UnknownTopicOrPartitionError, TopicAuthorizationFailedError,
            TopicDeletionDisabledError, RequestTimedOutError.
        UnsupportedByBroker: the broker has no DeleteTopics; nothing was sent.
        KafkaConnectionError: no broker answered.
    """
    names = list(topics)
    wait_ms = timeout_ms + _ANSWER_MARGIN_MS
    resp = _any_broker(brokers, api_version, wait_ms, security, ApiKey.DELETE_TOPICS,
                       lambda v: v.build(ApiKey.DELETE_TOPICS, topic_names=names, timeout_ms=int(timeout_ms)))
    out = {r.name: r.error_code for r in resp.responses}
    if raise_errors:
        _raise_first({n: (c, f"topic {n!r} was not deleted") for n, c in out.items()}, "deleting")
    return out


def create_partitions(brokers: str, counts: dict[str, int], *, assignments: dict[str, list[list[int]]] | None = None,
                      timeout_ms: float = 30_000, validate_only: bool = False, api_version: str = "auto",
                      security: Any = None, raise_errors: bool = True) -> dict[str, tuple[int, str | None]]:
    """Grow topics to more partitions with CreatePartitions; topic -> (error code, message).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        counts: topic -> the total partition count wanted (above the current one).
        assignments: topic -> the replicas of each NEW partition (default: the broker's choice).
        timeout_ms: how long the broker may wait for the new partitions' leaders.
        validate_only: only check the request.
        api_version: the version dialect (``auto`` probes).
        security: TLS / SASL, or None.
        raise_errors: raise the first refusal instead of returning it.

    Raises:
        BrokerError: (``raise_errors``) InvalidPartitionsError, InvalidReplicaAssignmentError,
            UnknownTopicOrPartitionError, TopicAuthorizationFailedError... with the broker's message.
        UnsupportedByBroker: the broker has no CreatePartitions; nothing was sent.
        KafkaConnectionError: no broker answered.
    """
    topics = [(t, n, (assignments or {}).get(t)) for t, n in counts.items()]
    wait_ms = timeout_ms + _ANSWER_MARGIN_MS
    resp = _any_broker(brokers, api_version, wait_ms, security, ApiKey.CREATE_PARTITIONS,
                       lambda v: v.build(ApiKey.CREATE_PARTITIONS, topics=[(t, n, None if a is None else [(r,) for r in a]) for t, n, a in topics],
                                         timeout_ms=int(timeout_ms), validate_only=validate_only))
    out = {r.name: (r.error_code, r.error_message) for r in resp.results}
    if raise_errors:
        _raise_first(out, "adding partitions to")
    return out


def elect_preferred_leaders(brokers: str, partitions: Iterable[tuple[str, int]] | None = None, *, timeout_ms: float = 30_000,
                            api_version: str = "auto", security: Any = None) -> dict[tuple[str, int], int]:
    """Move leaderships back to the preferred replicas (ElectLeaders, preferred), sent to the
    controller; returns (topic, partition) -> error code (0 elected, ELECTION_NOT_NEEDED: it
    already leads, PREFERRED_LEADER_NOT_AVAILABLE: not live or not in sync).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        partitions: the partitions (None: every partition).
        timeout_ms: how long the controller may take.
        api_version: the version dialect (``auto`` probes).
        security: TLS / SASL, or None.

    Raises:
        BrokerError: a request-level error (ClusterAuthorizationFailedError, NotControllerError).
        UnsupportedByBroker: the broker has no ElectLeaders; nothing was sent.
    """
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions or ():
        by_topic.setdefault(t, []).append(p)
    asked = None if partitions is None else sorted(by_topic.items())
    wait_ms = timeout_ms + _ANSWER_MARGIN_MS
    resp = _any_broker(brokers, api_version, wait_ms, security, ApiKey.ELECT_LEADERS,
                       lambda v: v.build(ApiKey.ELECT_LEADERS, election_type=0, topic_partitions=asked, timeout_ms=int(timeout_ms)),
                       controller=True)
    if getattr(resp, "error_code", 0):
        raise for_code(resp.error_code)("leader election refused")
    return {(r.topic, p.partition_id): p.error_code for r in resp.replica_election_results for p in r.partition_result}


def describe_cluster(brokers: str, *, api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS,
                     security: Any = None) -> dict[str, Any]:
    """The cluster id, controller and brokers (DescribeCluster, a flexible-only API).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long to wait for the answer.
        security: TLS / SASL, or None.

    Returns:
        ``{"cluster_id", "controller_id", "brokers": {id: (host, port)}}``.

    Raises:
        BrokerError: the answer's error (ClusterAuthorizationFailedError, ...).
        UnsupportedByBroker: the broker has no DescribeCluster; nothing was sent.
    """
    resp = _any_broker(brokers, api_version, timeout_ms, security, ApiKey.DESCRIBE_CLUSTER,
                       lambda v: v.build(ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False, endpoint_type=1))
    if resp.error_code:
        raise for_code(resp.error_code)(resp.error_message or "DescribeCluster refused")
    return {"cluster_id": resp.cluster_id, "controller_id": resp.controller_id,
            "brokers": {b.broker_id: (b.host, b.port) for b in resp.brokers}}


def describe_log_dirs(brokers: str, broker_id: int, *, api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS,
                      security: Any = None) -> dict[str, dict[tuple[str, int], int]]:
    """The log directories of one broker with the size in bytes of each partition's log
    (DescribeLogDirs, asked of that broker).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        broker_id: the broker to ask.
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long to wait for the answer.
        security: TLS / SASL, or None.

    Returns:
        log dir -> {(topic, partition): size}.

    Raises:
        BrokerError: a log directory's error.
    """
    resp = _to_resource(brokers, api_version, timeout_ms, security, ApiKey.DESCRIBE_LOG_DIRS, "broker", str(broker_id),
                        lambda v: v.build(ApiKey.DESCRIBE_LOG_DIRS, topics=None))
    out: dict[str, dict[tuple[str, int], int]] = {}
    for r in resp.results:
        if r.error_code:
            raise for_code(r.error_code)(f"log dir {r.log_dir}")
        out[r.log_dir] = {(t.name, p.partition_index): p.partition_size for t in r.topics for p in t.partitions}
    return out


class ConfigEntry(NamedTuple):
    """One config of a topic or broker as DescribeConfigs reports it.

    ``source`` is Kafka's: ``TOPIC_CONFIG``, ``DYNAMIC_BROKER_CONFIG``,
    ``DYNAMIC_DEFAULT_BROKER_CONFIG``, ``STATIC_BROKER_CONFIG``, ``DEFAULT_CONFIG`` (or
    ``UNKNOWN``); ``value`` is None for a sensitive config. ``synonyms`` (when asked for):
    ``(name, value, source)`` of each layer that sets it, most specific first.
    """

    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    synonyms: tuple[tuple[str, str | None, str], ...] = ()


_SOURCES = {1: "TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
            5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
_RESOURCE_TYPES = {"topic": 2, "broker": 4}


def _resource(kind: str) -> int:
    try:
        return _RESOURCE_TYPES[kind]
    except KeyError:
        raise ValueError(f"resource kind must be 'topic' or 'broker', not {kind!r}") from None


def describe_configs(brokers: str, kind: str, name: str, *, api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS,
                     security: Any = None, include_synonyms: bool = False) -> dict[str, ConfigEntry]:
    """The configs of one topic or broker (DescribeConfigs), by name.

    A broker resource is asked of that broker (its id as ``name``; "" for the default of every
    broker, asked of any broker), as Kafka's AdminClient does.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        kind: ``topic`` or ``broker``.
        name: the topic, or the broker id.
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long to wait for the answer.
        security: TLS / SASL, or None.
        include_synonyms: also ask for each config's synonyms (``ConfigEntry.synonyms``).

    Raises:
        BrokerError: the answer's error (UnknownTopicOrPartitionError, InvalidRequestError, ...).
        ValueError: ``kind`` is neither topic nor broker.
    """
    rtype = _resource(kind)
    resp = _to_resource(brokers, api_version, timeout_ms, security, ApiKey.DESCRIBE_CONFIGS, kind, name,
                        lambda v: v.build(ApiKey.DESCRIBE_CONFIGS, resources=[(rtype, name, None)],
                                                  include_synonyms=include_synonyms))
    r = resp.results[0]
    if r.error_code:
        raise for_code(r.error_code)(r.error_message or f"describing {kind} {name!r} failed")
    return {c.name: ConfigEntry(c.name, c.value, _SOURCES.get(c.config_source, "UNKNOWN"), bool(c.read_only), bool(c.is_sensitive),
                                tuple((s.name, s.value, _SOURCES.get(s.source, "UNKNOWN")) for s in (getattr(c, "synonyms", None) or ())))
            for c in r.configs}


def _to_resource(brokers: str, api_version: str, timeout_ms: float, security: Any, api_key: int, kind: str, name: str,
                 build: Callable[[Any], Any]) -> Any:
    """Send to the broker a broker resource names (its id), else to any broker."""
    if kind == "broker" and name:
        with _client(brokers, api_version, timeout_ms, security) as client:
            from hmbclient.net.metadata import Metadata

            view = Metadata(client, allow_auto_topic_creation=False).refresh([], timeout_ms=timeout_ms)
            if not name.isdigit() or int(name) not in view.brokers:
                raise for_code(ErrorCode.BROKER_NOT_AVAILABLE)(f"broker {name} is not in the cluster")
            client.update_brokers(view.brokers)
            return client.call(int(name), build, timeout_ms=timeout_ms, api_key=api_key)
    return _any_broker(brokers, api_version, timeout_ms, security, api_key, build)


def alter_configs(brokers: str, kind: str, name: str, configs: dict[str, str], *, incremental: bool = True,
                  delete: Iterable[str] = (), validate_only: bool = False, api_version: str = "auto",
                  timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> None:
    """Set dynamic configs of a topic or broker, applied without a restart.

    With ``incremental`` (IncrementalAlterConfigs, the default) the named configs are set and
    those in ``delete`` removed, the others kept; without, AlterConfigs replaces the whole set
    of the resource's dynamic configs by ``configs``.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        kind: ``topic`` or ``broker``.
        name: the topic, a broker id, or "" for the default of every broker.
        configs: name -> value.
        incremental: IncrementalAlterConfigs (True) or AlterConfigs.
        delete: configs to remove (incremental only).
        validate_only: only check.
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long to wait for the answer.
        security: TLS / SASL, or None.

    Raises:
        BrokerError: refused, with the broker's message (InvalidConfigError, InvalidRequestError,
            UnknownTopicOrPartitionError, TopicAuthorizationFailedError, ...).
        ValueError: ``kind`` is neither topic nor broker, or ``delete`` without ``incremental``.
    """
    rtype = _resource(kind)
    gone = list(delete)
    if gone and not incremental:
        raise ValueError("delete needs incremental=True (AlterConfigs replaces the whole set)")
    entries: list[tuple[Any, ...]]
    if incremental:
        entries = [(k, 0, v) for k, v in configs.items()] + [(k, 1, None) for k in gone]
        key = ApiKey.INCREMENTAL_ALTER_CONFIGS
    else:
        entries = list(configs.items())
        key = ApiKey.ALTER_CONFIGS
    resp = _to_resource(brokers, api_version, timeout_ms, security, key, kind, name,
                        lambda v: v.build(key, resources=[(rtype, name, entries)], validate_only=validate_only))
    r = resp.responses[0]
    if r.error_code:
        raise for_code(r.error_code)(r.error_message or f"altering {kind} {name!r} failed")


def incremental_alter_configs(brokers: str, kind: str, name: str, set_configs: dict[str, str], delete: Iterable[str] = (),
                              **kwargs: Any) -> None:
    """``alter_configs(..., incremental=True)``: set ``set_configs``, remove ``delete``.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        kind: ``topic`` or ``broker``.
        name: the topic, a broker id, or "".
        set_configs: name -> value to set.
        delete: names to remove.
        **kwargs: as :func:`alter_configs`.
    """
    alter_configs(brokers, kind, name, set_configs, incremental=True, delete=delete, **kwargs)


#: the name of a default quota entity (``<default>``, as ZooKeeper and kafka-configs spell it)
QUOTA_DEFAULT = "<default>"


def _quota_entity(user: str | None, client_id: str | None) -> list[tuple[str, str | None]]:
    parts = [(t, None if n == QUOTA_DEFAULT else n) for t, n in (("user", user), ("client-id", client_id)) if n is not None]
    if not parts:
        raise ValueError("a quota entity names a user and/or a client id")
    return parts


def describe_client_quotas(brokers: str, *, user: str | None = None, client_id: str | None = None, api_version: str = "auto",
                           timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> dict[tuple[str | None, str | None], dict[str, float]]:
    """The client quotas (DescribeClientQuotas), by ``(user, client_id)`` entity (None: the
    entity does not name that part; ``<default>``: the default).

    With neither ``user`` nor ``client_id``: every entity. With one or both: only the entity
    naming exactly those (Kafka's ``ClientQuotaFilter.containsOnly``, what ``kafka-configs
    --describe --entity-type users --entity-name alice`` asks).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        user: the user (``<default>``: the default user entity), or None.
        client_id: the client id (``<default>``: the default), or None.
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long to wait for the answer.
        security: TLS / SASL, or None.

    Raises:
        BrokerError: the answer's error (ClusterAuthorizationFailedError, InvalidRequestError, ...).
    """
    from hmbclient.protocol.api.quotas import MATCH_DEFAULT, MATCH_EXACT

    comps = [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in _quota_entity(user, client_id)] \
        if user is not None or client_id is not None else []
    resp = _any_broker(brokers, api_version, timeout_ms, security, ApiKey.DESCRIBE_CLIENT_QUOTAS,
                       lambda v: v.build(ApiKey.DESCRIBE_CLIENT_QUOTAS, components=comps, strict=bool(comps)))
    if resp.error_code:
        raise for_code(resp.error_code)(resp.error_message or "describing client quotas failed")
    out: dict[tuple[str | None, str | None], dict[str, float]] = {}
    for e in resp.entries or ():
        named = {x.entity_type: (QUOTA_DEFAULT if x.entity_name is None else x.entity_name) for x in e.entity}
        out[(named.get("user"), named.get("client-id"))] = {v.key: v.value for v in e.values}
    return out


def alter_client_quotas(brokers: str, *, user: str | None = None, client_id: str | None = None,
                        set_quotas: Mapping[str, float] | None = None, remove: Iterable[str] = (), validate_only: bool = False,
                        api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> None:
    """Set and remove quotas of one entity (AlterClientQuotas); the other quotas of the
    entity are kept. Applied by the brokers without a restart.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        user: the user (``<default>``: the default user entity), or None.
        client_id: the client id (``<default>``: the default), or None.
        set_quotas: ``producer_byte_rate`` / ``consumer_byte_rate`` -> bytes/s.
        remove: quota keys to remove.
        validate_only: only check.
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long to wait for the answer.
        security: TLS / SASL, or None.

    Raises:
        BrokerError: refused, with the broker's message (InvalidRequestError for an unknown key
            or a bad rate, ClusterAuthorizationFailedError, ...).
        ValueError: the entity names neither a user nor a client id.
    """
    entity = _quota_entity(user, client_id)
    ops = [(k, float(v), False) for k, v in (set_quotas or {}).items()] + [(k, 0.0, True) for k in remove]
    resp = _any_broker(brokers, api_version, timeout_ms, security, ApiKey.ALTER_CLIENT_QUOTAS,
                       lambda v: v.build(ApiKey.ALTER_CLIENT_QUOTAS, entries=[(entity, ops)], validate_only=validate_only))
    for e in resp.entries:
        if e.error_code:
            raise for_code(e.error_code)(e.error_message or "altering client quotas failed")


def describe_topics(brokers: str, topics: Iterable[str] | None = None, *, api_version: str = "auto",
                    timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> list[PartitionInfo]:
    """Every partition of the named topics (all topics when ``topics`` is None or empty),
    sorted by topic and partition: leader, replicas, ISR and offline replicas from Metadata.

    Metadata is asked for every topic and the named ones are picked from the answer, as
    kafka-topics.sh does: a request naming an unknown topic would make a broker with
    auto-creation on create it under Metadata v0-3, which cannot say "do not create".
    Partitions without a leader are reported (leader -1), not raised.

    Raises:
        UnknownTopicOrPartitionError: a named topic does not exist.
        KafkaConnectionError / RequestTimedOutError: no broker answered in time.
    """
    wanted = sorted(set(topics)) if topics else None
    with _metadata(brokers, api_version, timeout_ms, security) as md:
        # The raw answer, not md.refresh(): the cluster view keeps no offline_replicas. The
        # request still goes through Metadata's broker fallback and version choice.
        resp = md._request(None, timeout_ms)
    # A topic-level error with no partitions is a topic in flux (being created or deleted):
    # nothing to describe yet.
    answered = {t.topic: t for t in resp.topics if t.partitions or not t.error_code}
    out: list[PartitionInfo] = []
    for name in wanted if wanted is not None else sorted(answered):
        t = answered.get(name)
        if t is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        for p in sorted(t.partitions, key=lambda p: p.partition):
            out.append(PartitionInfo(
                name, p.partition, p.leader, tuple(p.replicas), tuple(p.isr),
                tuple(getattr(p, "offline_replicas", None) or ()),
            ))
    return out


@contextlib.contextmanager
def _zk(connect: str, timeout_s: float = 10.0) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=connect, timeout=timeout_s, connection_retry={"max_tries": 1})
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        zk.close()
        raise CoordinationError(f"ZooKeeper at {connect} did not answer within {timeout_s:g} s") from None
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def list_groups(zookeeper: str) -> list[str]:
    """Consumer groups registered under /consumers, sorted."""
    with _zk(zookeeper) as zk:
        try:
            return sorted(zk.get_children(paths.CONSUMERS_PATH))
        except NoNodeError:
            return []


def latest_offsets(brokers: str, topic: str, *, api_version: str = "auto") -> dict[int, int]:
    """Partition -> log end offset (the next offset to be written)."""
    from hmbclient import LATEST_TIME, SimpleConsumer

    out: dict[int, int] = {}
    consumers: dict[tuple[str, int], Any] = {}
    try:
        for p, (host, port) in sorted(topic_partitions(brokers, topic, api_version=api_version).items()):
            c = consumers.get((host, port))
            if c is None:
                c = consumers[(host, port)] = SimpleConsumer(host, port, client_id="hmb-admin",
                                                             api_version=api_version)
            out[p] = int(c.get_offsets_before(topic, p, LATEST_TIME, 1)[0])
    finally:
        for c in consumers.values():
            c.close()
    return out


def _brokers_from_zk(zk: KazooClient) -> str | None:
    try:
        ids = zk.get_children(paths.BROKER_IDS_PATH)
    except NoNodeError:
        return None
    addrs = []
    for bid in ids:
        with contextlib.suppress(NoNodeError):
            data, _ = zk.get(paths.broker_path(int(bid)))
            reg = paths.decode_broker_registration(data)
            addrs.append(f"{reg.host}:{reg.port}")
    return ",".join(addrs) or None


def _partition_nodes(zk: KazooClient, base: str) -> Iterator[tuple[tuple[str, int], bytes]]:
    """((topic, partition), data) for every ``base/<topic>/<partition>`` node that exists."""
    try:
        topics = zk.get_children(base)
    except NoNodeError:
        return
    for topic in topics:
        try:
            parts = zk.get_children(f"{base}/{topic}")
        except NoNodeError:
            continue
        for p in parts:
            with contextlib.suppress(NoNodeError):
                data, _ = zk.get(f"{base}/{topic}/{p}")
                yield (topic, int(p)), data


def describe_group(zookeeper: str, group: str, *, brokers: str | None = None,
                   api_version: str = "auto") -> dict[str, Any]:
    """Members, owners, committed offsets and lag of a ZooKeeper consumer group.

    Args:
        zookeeper: connect string.
        group: group id.
        brokers: bootstrap brokers for the log end offsets; default: the brokers registered
            in the same ZooKeeper (/brokers/ids). Without either, latest and lag are None.

    Returns:
        ``{"members": [consumer ids], "partitions": [{"topic", "partition", "owner",
        "committed", "latest", "lag"}, ...]}`` sorted by topic and partition.

    Raises:
        CoordinationError: ZooKeeper unreachable, or the group does not exist.
    """
    with _zk(zookeeper) as zk:
        if not zk.exists(paths.consumer_group_path(group)):
            raise CoordinationError(f"no consumer group {group!r} in ZooKeeper at {zookeeper}")
        try:
            members = sorted(zk.get_children(paths.consumer_ids_path(group)))
        except NoNodeError:
            members = []
        committed = {k: paths.decode_offset(v) for k, v in _partition_nodes(zk, paths.consumer_offsets_path(group))}
        owners = {k: paths.decode_owner(v) for k, v in _partition_nodes(zk, paths.consumer_owners_path(group))}
        if brokers is None:
            brokers = _brokers_from_zk(zk)
    latest: dict[tuple[str, int], int] = {}
    if brokers:
        for topic in sorted({t for t, _ in committed} | {t for t, _ in owners}):
            with contextlib.suppress(KeyError):
                for p, log_end in latest_offsets(brokers, topic, api_version=api_version).items():
                    latest[(topic, p)] = log_end
    keys = sorted(set(committed) | set(owners) | {k for k in latest if k[0] in {t for t, _ in committed}})
    rows = []
    for key in keys:
        c = committed.get(key)
        end = latest.get(key)
        rows.append({
            "topic": key[0],
            "partition": key[1],
            "owner": owners.get(key),
            "committed": c,
            "latest": end,
            "lag": None if end is None else end - (c or 0),
        })
    return {"members": members, "partitions": rows}


def delete_group_offsets(brokers: str, group: str, partitions: Iterable[tuple[str, int]], *, api_version: str = "auto",
                         timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> dict[tuple[str, int], int]:
    """Delete a broker-coordinated group's committed offsets of ``partitions`` (OffsetDelete, to
    the group's coordinator); returns (topic, partition) -> error code (0 deleted,
    GROUP_SUBSCRIBED_TO_TOPIC while a member consumes that topic).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        group: the group.
        partitions: the partitions whose offsets go.
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long each request may take.
        security: TLS / SASL, or None.

    Raises:
        BrokerError: the group-level error (GroupIdNotFoundError, GroupAuthorizationFailedError,
            NonEmptyGroupError, NotCoordinatorError).
        UnsupportedByBroker: the broker has no OffsetDelete; nothing was sent.
    """
    from hmbclient.consumer.group_admin import _find_coordinator

    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    with _client(brokers, api_version, timeout_ms, security) as client:
        coordinator = _find_coordinator(client, group, int(timeout_ms))
        resp = client.call(coordinator, lambda v: v.build(ApiKey.OFFSET_DELETE, group_id=group, topics=[
            {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in sorted(by_topic.items())]),
            timeout_ms=timeout_ms, api_key=ApiKey.OFFSET_DELETE)
    if resp.error_code:
        raise for_code(resp.error_code)(f"deleting offsets of group {group!r}")
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


# --------------------------------------------------------------------- resetting group offsets

ResetSpec = tuple[str, int]
"""How to reset: ("earliest", 0), ("latest", 0), ("datetime", epoch ms) or ("shift", n)."""


def plan_offset_reset(spec: ResetSpec, current: dict[tuple[str, int], int | None], earliest: dict[tuple[str, int], int],
                      latest: dict[tuple[str, int], int], at_time: dict[tuple[str, int], int] | None = None) -> dict[tuple[str, int], int]:
    """The new committed offset of each partition (a pure function, as kafka-consumer-groups.sh
    computes it).

    Cases: ``earliest``/``latest``: the log start / the high watermark; ``datetime``: the first
    offset whose timestamp is at or after the time (``at_time``; none: the high watermark);
    ``shift``: the committed offset plus n (no committed offset: from the log start), kept
    within [log start, high watermark].

    Args:
        spec: the reset, see :data:`ResetSpec`.
        current: the committed offsets (None: nothing committed).
        earliest: log start offsets.
        latest: high watermarks.
        at_time: offsets for the time of a ``datetime`` reset (-1 or absent: none).

    Returns:
        partition -> new offset, for every partition of ``earliest``.

    Raises:
        ValueError: an unknown reset kind.
    """
    kind, n = spec
    out: dict[tuple[str, int], int] = {}
    for tp in sorted(earliest):
        lo, hi = earliest[tp], latest.get(tp, earliest[tp])
        if kind == "earliest":
            new = lo
        elif kind == "latest":
            new = hi
        elif kind == "datetime":
            found = (at_time or {}).get(tp, -1)
            new = hi if found is None or found < 0 else found
        elif kind == "shift":
            c = current.get(tp)
            new = (lo if c is None else c) + n
        else:
            raise ValueError(f"unknown reset {kind!r}: earliest, latest, datetime or shift")
        out[tp] = min(max(new, lo), hi)
    return out


def _offsets_at(client: Any, metadata: Any, partitions: list[tuple[str, int]], timestamp: int, timeout_ms: float) -> dict[tuple[str, int], int]:
    """ListOffsets of ``timestamp`` (-2 earliest, -1 latest, else a time) from each leader."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t, p in partitions:
        leader = metadata.leader(t, p)
        if leader is None or leader < 0:
            raise for_code(ErrorCode.LEADER_NOT_AVAILABLE)(f"{t}-{p} has no leader")
        by_leader.setdefault(leader, []).append((t, p))
    out: dict[tuple[str, int], int] = {}
    for leader, tps in by_leader.items():
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)

        def build(versions: Any, by_topic: dict[str, list[int]] = by_topic) -> Any:
            return versions.build(ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=0, topics=[
                {"topic": t, "partitions": [{"partition": p, "timestamp": timestamp, "max_num_offsets": 1, "current_leader_epoch": -1}
                                            for p in ps]} for t, ps in by_topic.items()])

        resp = client.call(leader, build, timeout_ms=timeout_ms, api_key=ApiKey.LIST_OFFSETS)
        for topic in resp.topics:
            for a in topic.partitions:
                if a.error_code:
                    raise for_code(a.error_code)(f"ListOffsets {topic.topic}-{a.partition}")
                if hasattr(a, "old_style_offsets"):
                    offs = list(a.old_style_offsets)
                    out[(topic.topic, a.partition)] = offs[0] if offs else -1
                else:
                    out[(topic.topic, a.partition)] = int(a.offset)
    return out


def reset_group_offsets(brokers: str, group: str, spec: ResetSpec, *, topics: Iterable[str] | None = None,
                        zookeeper: str | None = None, execute: bool = False, api_version: str = "auto",
                        timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> list[dict[str, Any]]:
    """Reset a consumer group's committed offsets (dry run unless ``execute``), for a ZooKeeper
    group (``zookeeper``: ``/consumers/<group>/offsets``) or a group the brokers coordinate
    (OffsetCommit to its coordinator). Like ``kafka-consumer-groups.sh --reset-offsets``, an
    active group (members registered / in the group) is refused: its members would overwrite
    the reset.

    Args:
        brokers: bootstrap "host:port[,host:port]" (offsets of the logs).
        group: the group.
        spec: ("earliest", 0), ("latest", 0), ("datetime", epoch ms) or ("shift", n).
        topics: the topics (default: every topic the group has committed offsets for).
        zookeeper: the ZooKeeper of a ZooKeeper group (None: a broker-coordinated group).
        execute: commit the new offsets (False: only compute them).
        api_version: the version dialect (``auto`` probes).
        timeout_ms: how long each request may take.
        security: TLS / SASL, or None.

    Returns:
        ``[{"topic", "partition", "current", "new"}]`` sorted by topic and partition.

    Raises:
        CoordinationError: the group is active, or it has no offsets and no topic was named.
        BrokerError: a broker refused (UnknownTopicOrPartitionError, ...).
    """
    from hmbclient.consumer.group_admin import _committed, _find_coordinator
    from hmbclient.net.metadata import Metadata

    named = sorted(set(topics)) if topics else None
    with _client(brokers, api_version, timeout_ms, security) as client:
        metadata = Metadata(client, allow_auto_topic_creation=False)
        coordinator = -1
        if zookeeper is not None:
            with _zk(zookeeper) as zk:
                try:
                    members = zk.get_children(paths.consumer_ids_path(group))
                except NoNodeError:
                    members = []
                committed_zk = {k: paths.decode_offset(v) for k, v in _partition_nodes(zk, paths.consumer_offsets_path(group))}
            if members:
                raise CoordinationError(f"group {group!r} is active ({len(members)} member(s) registered): stop its consumers first")
            wanted = named or sorted({t for t, _ in committed_zk})
        else:
            coordinator = _find_coordinator(client, group, int(timeout_ms))
            described = client.call(coordinator, lambda v: v.build(ApiKey.DESCRIBE_GROUPS, groups=[group], include_authorized_operations=False),
                                    timeout_ms=timeout_ms, api_key=ApiKey.DESCRIBE_GROUPS).groups[0]
            if described.members:
                raise CoordinationError(f"group {group!r} is active (state {described.group_state}, {len(described.members)} member(s)): "
                                        "stop its consumers first")
            wanted = named or []
        if not wanted and zookeeper is not None:
            raise CoordinationError(f"group {group!r} has no committed offsets: name the topics")
        view = metadata.refresh(wanted or None, timeout_ms=timeout_ms)
        if not wanted:  # a broker group without named topics: the topics it has offsets for
            all_parts = [(t, p) for t, info in view.topics.items() if not t.startswith("__") for p in info.partition_ids]
            fetched = _committed(client, coordinator, group, all_parts, int(timeout_ms))
            wanted = sorted({t for (t, _p), o in fetched.items() if o is not None})
            if not wanted:
                raise CoordinationError(f"group {group!r} has no committed offsets: name the topics")
        missing = [t for t in wanted if t not in view.topics or not view.topics[t].partition_ids]
        if missing:
            raise UnknownTopicOrPartitionError(f"topic(s) {', '.join(missing)} do not exist")
        partitions = [(t, p) for t in wanted for p in view.topics[t].partition_ids]
        if zookeeper is not None:
            current: dict[tuple[str, int], int | None] = {tp: committed_zk.get(tp) for tp in partitions}
        else:
            current = dict(_committed(client, coordinator, group, partitions, int(timeout_ms)))
        earliest = _offsets_at(client, metadata, partitions, -2, timeout_ms)
        latest = _offsets_at(client, metadata, partitions, -1, timeout_ms)
        at_time = _offsets_at(client, metadata, partitions, spec[1], timeout_ms) if spec[0] == "datetime" else None
        plan = plan_offset_reset(spec, current, earliest, latest, at_time)
        if execute and zookeeper is None:
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for (t, p), off in plan.items():
                by_topic.setdefault(t, []).append((p, off))
            resp = client.call(coordinator, lambda v: v.build(
                ApiKey.OFFSET_COMMIT, group_id=group, generation_id=-1, member_id="", retention_time_ms=-1,
                topics=[{"topic": t, "partitions": [{"partition": p, "offset": o, "metadata": ""} for p, o in ps]} for t, ps in by_topic.items()]),
                timeout_ms=timeout_ms, api_key=ApiKey.OFFSET_COMMIT)
            for t in resp.topics:
                for a in t.partitions:
                    if a.error_code:
                        raise for_code(a.error_code)(f"committing {t.topic}-{a.partition} for group {group!r}")
    if execute and zookeeper is not None:
        with _zk(zookeeper) as zk:
            if zk.get_children(paths.consumer_ids_path(group)) if zk.exists(paths.consumer_ids_path(group)) else []:
                raise CoordinationError(f"group {group!r} became active: nothing reset")
            for (t, p), off in plan.items():
                path = paths.offset_path(group, t, p)
                zk.ensure_path(path)
                zk.set(path, paths.encode_offset(off))
    return [{"topic": t, "partition": p, "current": current.get((t, p)), "new": off} for (t, p), off in sorted(plan.items())]


class TransactionInfo(NamedTuple):
    """One transactional id as its coordinator describes it (DescribeTransactions)."""

    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


def list_transactions(brokers: str, *, api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS,
                      security: Any = None) -> list[tuple[str, int, str]]:
    """Every transactional id the brokers' coordinators hold (ListTransactions on every broker).

    Args:
        brokers: bootstrap ``host:port[,host:port...]``.
        api_version: the client version seam (``"auto"`` probes).
        timeout_ms: bound of each request.
        security: TLS/SASL (a ``hmbclient.net.security.Security``), None for PLAINTEXT.
    Returns:
        ``[(transactional_id, producer_id, state), ...]`` sorted by id.
    Raises:
        BrokerError: a broker refused ListTransactions (its Kafka error).
        UnsupportedByBroker: the brokers do not serve ListTransactions.
    """
    with _metadata(brokers, api_version, timeout_ms, security) as md:
        client = md.client
        view = md.refresh([], timeout_ms=timeout_ms)
        found: dict[str, tuple[str, int, str]] = {}
        for node in sorted(view.brokers) or list(client.bootstrap_ids):
            answer = client.call(node, lambda v: v.build(ApiKey.LIST_TRANSACTIONS, state_filters=[], producer_id_filters=[], duration_filter=-1),
                                 timeout_ms=timeout_ms, api_key=ApiKey.LIST_TRANSACTIONS)
            if answer.error_code:
                raise for_code(answer.error_code)(f"ListTransactions on broker {node}")
            for t in answer.transaction_states:
                found[t.transactional_id] = (t.transactional_id, int(t.producer_id), t.transaction_state)
        return [found[k] for k in sorted(found)]


def describe_transactions(brokers: str, transactional_ids: Iterable[str], *, api_version: str = "auto",
                          timeout_ms: float = _TIMEOUT_MS, security: Any = None) -> list[TransactionInfo]:
    """Each transactional id as its coordinator describes it (FindCoordinator key type 1, then
    DescribeTransactions to that broker).

    Args:
        brokers: bootstrap ``host:port[,host:port...]``.
        transactional_ids: the ids to describe.
        api_version: the client version seam (``"auto"`` probes).
        timeout_ms: bound of each request.
        security: TLS/SASL (a ``hmbclient.net.security.Security``), None for PLAINTEXT.
    Returns:
        One TransactionInfo per id, in the order asked.
    Raises:
        BrokerError: an id's coordinator answered an error (TRANSACTIONAL_ID_NOT_FOUND for an
            unknown id), or FindCoordinator failed.
    """
    out: list[TransactionInfo] = []
    with _client(brokers, api_version, timeout_ms, security) as client:
        for tid in transactional_ids:
            found = client.call(client.least_loaded_node(), lambda v, tid=tid: v.build(ApiKey.FIND_COORDINATOR, key=tid, key_type=1),
                                timeout_ms=timeout_ms, api_key=ApiKey.FIND_COORDINATOR)
            if found.error_code:
                raise for_code(found.error_code)(f"FindCoordinator for transactional id {tid!r}")
            client.update_brokers({found.node_id: (found.host, found.port)})
            answer = client.call(found.node_id, lambda v, tid=tid: v.build(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=[tid]),
                                 timeout_ms=timeout_ms, api_key=ApiKey.DESCRIBE_TRANSACTIONS)
            d = answer.transaction_states[0]
            if d.error_code:
                raise for_code(d.error_code)(f"DescribeTransactions of {tid!r}")
            parts = tuple((t.topic, int(p)) for t in d.topics for p in t.partitions)
            out.append(TransactionInfo(d.transactional_id, d.transaction_state, d.transaction_timeout_ms, d.transaction_start_time_ms,
                                       int(d.producer_id), int(d.producer_epoch), parts))
    return out


# --------------------------------------------------------------------- deleting records (DeleteRecords)

def delete_records(brokers: str, offsets: Mapping[tuple[str, int], int], *, timeout_ms: float = 30_000,
                   api_version: str = "auto", security: Any = None, retries: int = 5) -> dict[tuple[str, int], int]:
    """Delete every record below an offset of each partition (DeleteRecords, sent to each
    partition's leader, as Kafka's ``AdminClient.deleteRecords``); returns (topic, partition) ->
    its low watermark, the new first offset every live replica keeps.

    The whole input is checked before anything is deleted: an offset below -1, a partition that
    does not exist, or an offset past the partition's high watermark raises and nothing is sent
    (a partition's high watermark may still move in between: the broker then refuses that
    partition alone, the others are deleted). A NOT_LEADER / LEADER_NOT_AVAILABLE answer (a
    leadership move) refreshes the metadata and retries those partitions.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        offsets: (topic, partition) -> the offset below which records go (-1: the high
            watermark, i.e. every record consumers can read now).
        timeout_ms: how long each leader may wait for its followers' log starts to follow.
        api_version: the version dialect (``auto`` probes).
        security: TLS / SASL (a ``hmbclient.net.security.Security``), or None.
        retries: retries of partitions whose leader moved.

    Raises:
        ValueError: an offset below -1 (or not an integer); nothing was sent.
        UnknownTopicOrPartitionError: a partition that does not exist; nothing was deleted.
        OffsetOutOfRangeError: an offset past the partition's high watermark; nothing was
            deleted.
        BrokerError: the first partition the broker refused, as the subclass of its code
            (TopicAuthorizationFailedError, PolicyViolationError on a ``compact``-only topic,
            RequestTimedOutError when a follower did not follow in ``timeout_ms``: the
            leader's log start has moved all the same); the other partitions were done.
        UnsupportedByBroker: the broker has no DeleteRecords; nothing was sent.
        KafkaConnectionError: no broker answered.
    """
    from hmbclient.net.retry import retry_policy

    wanted = dict(offsets)
    for (t, p), off in wanted.items():
        if not isinstance(off, int) or isinstance(off, bool) or off < -1:
            raise ValueError(f"offset {off!r} for {t}-{p}: an offset >= 0, or -1 for the high watermark")
    if not wanted:
        return {}
    wait_ms = timeout_ms + _ANSWER_MARGIN_MS
    out: dict[tuple[str, int], int] = {}
    with _metadata(brokers, api_version, min(wait_ms, max(_TIMEOUT_MS, timeout_ms)), security) as md:
        client = md.client
        view = md.refresh(sorted({t for t, _ in wanted}), timeout_ms=_TIMEOUT_MS)
        for t, p in sorted(wanted):
            info = view.topics.get(t)
            if info is None or info.error_code == UnknownTopicOrPartitionError.errno or p not in info.partitions:
                raise UnknownTopicOrPartitionError(f"{t}-{p} does not exist: no records deleted")
        high = _offsets_at(client, md, sorted(wanted), -1, _TIMEOUT_MS)
        for (t, p), off in sorted(wanted.items()):
            if off > high[(t, p)]:
                raise for_code(ErrorCode.OFFSET_OUT_OF_RANGE)(
                    f"offset {off} of {t}-{p} is past its high watermark {high[(t, p)]}: no records deleted")
        todo = dict(wanted)
        failed: dict[tuple[str, int], int] = {}

        def attempt() -> None:
            by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
            for (t, p), off in sorted(todo.items()):
                leader = md.leader(t, p)
                if leader is None or leader < 0:
                    failed[(t, p)] = ErrorCode.LEADER_NOT_AVAILABLE
                    continue
                by_leader.setdefault(leader, {}).setdefault(t, []).append((p, off))
            for leader, topics in by_leader.items():
                resp = client.call(leader, lambda v, topics=topics: v.build(ApiKey.DELETE_RECORDS, timeout_ms=int(timeout_ms), topics=[
                    {"name": t, "partitions": [{"partition_index": p, "offset": off} for p, off in ps]} for t, ps in sorted(topics.items())]),
                    timeout_ms=wait_ms, api_key=ApiKey.DELETE_RECORDS)
                for rt in resp.topics:
                    for rp in rt.partitions:
                        tp = (rt.name, rp.partition_index)
                        if tp not in todo:
                            continue
                        if rp.error_code:
                            failed[tp] = rp.error_code
                        else:
                            out[tp] = int(rp.low_watermark)
                            failed.pop(tp, None)
                            del todo[tp]
            moved = [tp for tp in todo if failed.get(tp) in (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE)]
            if moved:
                for t, _ in moved:
                    md.invalidate(t)
                md.refresh(sorted({t for t, _ in todo}), timeout_ms=_TIMEOUT_MS)
                raise for_code(failed[moved[0]])(f"DeleteRecords of {moved[0][0]}-{moved[0][1]}: the leader moved")

        # Only a leadership move raises in ``attempt`` (retriable); it propagates once retries run out.
        retry_policy(max_retries=retries, backoff_ms=100)(attempt)
    for (t, p), code in sorted(failed.items()):
        if (t, p) not in out:
            raise for_code(code)(f"DeleteRecords of {t}-{p} refused")
    return out


# -- partition reassignment (KIP-455) -----------------------------------------------------------

class Reassignment(NamedTuple):
    """An ongoing partition reassignment (``list_partition_reassignments``): the full replica
    set now (target, then the original replicas being removed), and the replicas being added
    and removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def alter_partition_reassignments(brokers: str, reassignments: dict[tuple[str, int], list[int] | None], *,
                                  timeout_ms: float = 30_000, api_version: str = "auto",
                                  security: Any = None) -> dict[tuple[str, int], tuple[int, str | None]]:
    """Start (a list of target replicas) or cancel (None) the reassignment of each partition
    (AlterPartitionReassignments, sent to the controller). The answer comes once the moves are
    started; :func:`list_partition_reassignments` shows the ones not finished.

    Args:
        brokers: bootstrap "host:port[,host:port]".
        reassignments: (topic, partition) -> target replicas, or None to cancel.
        timeout_ms: how long the controller may take.
        api_version: the version dialect (``auto`` probes).
        security: TLS / SASL, or None.

    Returns:
        (topic, partition) -> (error code, message): 0 started (or cancelled),
        NO_REASSIGNMENT_IN_PROGRESS (nothing to cancel), INVALID_REPLICA_ASSIGNMENT (empty,
        a broker twice, an unregistered broker), UNKNOWN_TOPIC_OR_PARTITION.

    Raises:
        BrokerError: a request-level error (ClusterAuthorizationFailedError, NotControllerError).
        UnsupportedByBroker: the broker has no AlterPartitionReassignments; nothing was sent.
    """
    by_topic: dict[str, list[tuple[int, list[int] | None]]] = {}
    for (t, p), replicas in sorted(reassignments.items()):
        by_topic.setdefault(t, []).append((p, None if replicas is None else [int(r) for r in replicas]))
    wait_ms = timeout_ms + _ANSWER_MARGIN_MS
    resp = _any_broker(brokers, api_version, wait_ms, security, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                       lambda v: v.build(ApiKey.ALTER_PARTITION_REASSIGNMENTS, timeout_ms=int(timeout_ms),
                                         allow_replication_factor_change=True, topics=sorted(by_topic.items())),
                       controller=True)
    if resp.error_code:
        raise for_code(resp.error_code)(resp.error_message or "AlterPartitionReassignments refused")
    return {(t.name, p.partition_index): (p.error_code, p.error_message) for t in resp.responses for p in t.partitions}


def list_partition_reassignments(brokers: str, partitions: Iterable[tuple[str, int]] | None = None, *,
                                 timeout_ms: float = _TIMEOUT_MS, api_version: str = "auto",
                                 security: Any = None) -> dict[tuple[str, int], Reassignment]:
    """The ongoing partition reassignments (ListPartitionReassignments, sent to the controller).

    Args:
        brokers: bootstrap "host:port[,host:port]".
        partitions: the partitions to look at (None: every ongoing reassignment).
        timeout_ms: how long to wait for the answer.
        api_version: the version dialect (``auto`` probes).
        security: TLS / SASL, or None.

    Returns:
        (topic, partition) -> Reassignment, for partitions being reassigned only.

    Raises:
        BrokerError: a request-level error (ClusterAuthorizationFailedError, NotControllerError).
        UnsupportedByBroker: the broker has no ListPartitionReassignments; nothing was sent.
    """
    asked = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        asked = sorted(by_topic.items())
    resp = _any_broker(brokers, api_version, timeout_ms, security, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                       lambda v: v.build(ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout_ms=int(timeout_ms), topics=asked),
                       controller=True)
    if resp.error_code:
        raise for_code(resp.error_code)(resp.error_message or "ListPartitionReassignments refused")
    return {(t.name, p.partition_index): Reassignment(tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in resp.topics for p in t.partitions}


def parse_reassignment_json(text: str) -> dict[tuple[str, int], list[int]]:
    """The partitions of a kafka-reassign-partitions.sh JSON file:
    ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":[...]}]}``
    (``log_dirs`` may only say ``any``: moves between log directories are not served).

    Args:
        text: the file's content.

    Returns:
        (topic, partition) -> target replicas.

    Raises:
        ValueError: not that format, a partition named twice, or a log dir other than "any".
    """
    import json

    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("partitions"), list):
        raise ValueError('expected {"version":1,"partitions":[{"topic":...,"partition":...,"replicas":[...]}]}')
    out: dict[tuple[str, int], list[int]] = {}
    for entry in obj["partitions"]:
        if not isinstance(entry, dict):
            raise ValueError(f"a partition entry is not an object: {entry!r}")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise ValueError(f"an entry needs a string 'topic' and an integer 'partition': {entry!r}")
        if not isinstance(replicas, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise ValueError(f"{topic}-{partition}: 'replicas' must be a list of broker ids")
        dirs = entry.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or any(d != "any" for d in dirs)):
            raise ValueError(f"{topic}-{partition}: log_dirs other than \"any\" (moves between log directories) are not served")
        if (topic, partition) in out:
            raise ValueError(f"{topic}-{partition} is named twice")
        out[(topic, partition)] = list(replicas)
    return out


def reassignment_throttles(current: dict[tuple[str, int], tuple[int, ...]],
                           proposed: dict[tuple[str, int], list[int]]) -> dict[str, tuple[str, str]]:
    """Kafka's throttled replicas of a reassignment, per topic: the leader side throttles the
    moving partitions' current replicas (which send), the follower side their new replicas
    (which fetch); values are ``partition:broker`` lists.

    Args:
        current: the partitions' replicas now.
        proposed: their targets.

    Returns:
        topic -> (leader.replication.throttled.replicas, follower.replication.throttled.replicas),
        for topics with a partition whose replicas change.
    """
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for (topic, p), target in sorted(proposed.items()):
        now = current.get((topic, p), ())
        if list(now) == list(target):
            continue
        leader.setdefault(topic, []).extend(f"{p}:{b}" for b in now)
        follower.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in now)
    return {t: (",".join(leader[t]), ",".join(follower.get(t, []))) for t in leader}
