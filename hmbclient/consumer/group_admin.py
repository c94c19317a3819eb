"""Inspecting groups balanced by the brokers' group coordinator (what ``hmb groups`` shows
without ``--zookeeper``): ListGroups, DescribeGroups, committed offsets and lag.

* :func:`list_broker_groups` asks *every* broker of the cluster (ListGroups answers only for
  the groups that broker coordinates) and merges the answers.
* :func:`describe_broker_group` asks the group's coordinator (FindCoordinator) for its state,
  protocol and members (a consumer-protocol group, KIP-848, through ConsumerGroupDescribe
  when the coordinator serves it: protocol ``consumer/<assignor>``, members with their epoch;
  else DescribeGroups, a "consumer" member's assignment decoded), reads
  the committed offsets (OffsetFetch, topics named explicitly: some brokers, Tansu among
  them, cannot answer "every topic") and the high watermarks from each partition's leader
  (ListOffsets latest); lag is high watermark minus committed offset.

Which topics: the ones the members are assigned or subscribed to; when the coordinator does
not say (an empty group, or a broker that leaves member metadata out), every topic of the
cluster but the internal ones, keeping the partitions that have a committed offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hmbclient.errors import CoordinationError, ErrorCode, HmbError, for_code
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.security import Security
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_member_assignment,
    decode_member_metadata,
)

from .fetcher import list_offsets

__all__ = ["list_broker_groups", "describe_broker_group"]

TopicPartition = tuple[str, int]


def _client(brokers: str, api_version: str, timeout_ms: int, security: Security | None) -> NetClient:
    return NetClient(brokers, client_id="hmb-admin", api_version=api_version, request_timeout_ms=timeout_ms,
                     security=security, name="hmb-admin-io")


def list_broker_groups(
    brokers: str, *, api_version: str = "auto", timeout_ms: int = 10_000, security: Security | None = None
) -> list[tuple[str, str]]:
    """Every group the brokers coordinate: ``[(group_id, protocol_type), ...]`` sorted
    (``security``: TLS/SASL of the connections, None for PLAINTEXT).

    Raises:
        HmbError: no broker answered, or one refused ListGroups.
    """
    client = _client(brokers, api_version, timeout_ms, security)
    try:
        return list_groups_with(client, Metadata(client, allow_auto_topic_creation=False), timeout_ms)
    finally:
        client.close()


def list_groups_with(client: NetClient, metadata: Metadata, timeout_ms: int) -> list[tuple[str, str]]:
    """:func:`list_broker_groups` on a client the caller keeps open (``hmb top``).

    Raises:
        HmbError: no broker answered, or one refused ListGroups.
    """
    view = metadata.refresh([], timeout_ms=timeout_ms)
    nodes = sorted(view.brokers) or list(client.bootstrap_ids)
    found: dict[str, str] = {}
    for node in nodes:
        answer = client.call(node, lambda v: v.build(ApiKey.LIST_GROUPS), timeout_ms=timeout_ms,
                             api_key=ApiKey.LIST_GROUPS)
        if answer.error_code:
            raise for_code(answer.error_code)(f"ListGroups on broker {node}")
        for group in answer.groups:
            found[group.group_id] = group.protocol_type
    return sorted(found.items())


def describe_broker_group(
    brokers: str, group: str, *, api_version: str = "auto", timeout_ms: int = 10_000, security: Security | None = None
) -> dict[str, Any]:
    """State, members, committed offsets and lag of a broker-coordinated group.

    Returns:
        ``{"state", "protocol_type", "protocol", "members": [{"member_id", "client_id",
        "client_host", "partitions": [(topic, partition), ...]}], "partitions": [{"topic",
        "partition", "owner", "committed", "latest", "lag"}, ...]}``; rows sorted by topic and
        partition; ``owner`` is a member id or None, ``latest``/``lag`` None when unknown. A
        consumer-protocol group (KIP-848) has protocol_type ``consumer``, its assignor as
        ``protocol``, a ``group_epoch`` and each member's ``member_epoch``.

    Raises:
        CoordinationError: the coordinator knows no such group (no members, no offsets).
        HmbError: a broker could not be reached or refused a request.
    """
    client = _client(brokers, api_version, timeout_ms, security)
    try:
        info = describe_group_with(client, Metadata(client, allow_auto_topic_creation=False), group, timeout_ms)
    finally:
        client.close()
    if info is None:
        raise CoordinationError(f"no consumer group {group!r} on the brokers at {brokers}")
    return info


def describe_group_with(client: NetClient, metadata: Metadata, group: str, timeout_ms: int) -> dict[str, Any] | None:
    """:func:`describe_broker_group` on a client the caller keeps open (``hmb top``); None
    when the coordinator knows no such group.

    Raises:
        HmbError: a broker could not be reached or refused a request.
    """
    coordinator = _find_coordinator(client, group, timeout_ms)
    modern = _consumer_group_describe(client, coordinator, group, timeout_ms)
    if modern is not None:
        return _with_offsets(client, metadata, coordinator, group, timeout_ms, *modern)
    described = client.call(
        coordinator,
        lambda v: v.build(ApiKey.DESCRIBE_GROUPS, groups=[group], include_authorized_operations=False),
        timeout_ms=timeout_ms,
        api_key=ApiKey.DESCRIBE_GROUPS,
    ).groups[0]
    if described.error_code:
        raise for_code(described.error_code)(f"DescribeGroups {group!r}")
    members, owners, topics = _members(described)
    state = {"state": described.group_state, "protocol_type": described.protocol_type, "protocol": described.protocol_data}
    return _with_offsets(client, metadata, coordinator, group, timeout_ms, state, members, owners, topics)


def _consumer_group_describe(
    client: NetClient, coordinator: int, group: str, timeout_ms: int
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[TopicPartition, str], set[str]] | None:
    """A consumer-protocol group (KIP-848) through ConsumerGroupDescribe; None when the
    coordinator does not serve it or the group is not one (GROUP_ID_NOT_FOUND, or no group
    epoch)."""
    versions: BrokerVersions = client.versions(coordinator).result(timeout_ms / 1000)
    if not versions.has(ApiKey.CONSUMER_GROUP_DESCRIBE):
        return None
    described = client.call(
        coordinator,
        lambda v: v.build(ApiKey.CONSUMER_GROUP_DESCRIBE, group_ids=[group], include_authorized_operations=False),
        timeout_ms=timeout_ms,
        api_key=ApiKey.CONSUMER_GROUP_DESCRIBE,
    ).groups[0]
    if described.error_code:
        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        raise for_code(described.error_code)(f"ConsumerGroupDescribe {group!r}")
    if described.group_epoch < 0:
        return None  # no epoch: not a consumer group (Tansu answers a classic group so)
    members: list[dict[str, Any]] = []
    owners: dict[TopicPartition, str] = {}
    topics: set[str] = set()
    for member in described.members:
        share = sorted((tp.topic_name, int(p)) for tp in member.assignment.topic_partitions for p in tp.partitions)
        topics.update(member.subscribed_topic_names)
        for tp in share:
            owners[tp] = member.member_id
            topics.add(tp[0])
        members.append({
            "member_id": member.member_id,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "partitions": share,
            "member_epoch": member.member_epoch,
        })
    state = {"state": described.group_state, "protocol_type": "consumer", "protocol": described.assignor_name,
             "group_epoch": described.group_epoch}
    return state, members, owners, topics


def _with_offsets(
    client: NetClient,
    metadata: Metadata,
    coordinator: int,
    group: str,
    timeout_ms: int,
    state: dict[str, Any],
    members: list[dict[str, Any]],
    owners: dict[TopicPartition, str],
    topics: set[str],
) -> dict[str, Any] | None:
    if not topics:
        view = metadata.refresh(None, timeout_ms=timeout_ms)
        topics = {t for t in view.topics if not t.startswith("__")}
    view = metadata.refresh(sorted(topics), timeout_ms=timeout_ms)
    partitions = {
        (t, p) for t in topics if t in view.topics for p in view.topics[t].partition_ids
    }
    committed = _committed(client, coordinator, group, partitions, timeout_ms)
    rows_for = sorted({tp for tp, offset in committed.items() if offset is not None} | set(owners))
    latest = _latest(client, metadata, rows_for, timeout_ms)
    if not members and not rows_for and state["state"] in ("Dead", "Empty", ""):
        return None
    rows = []
    for tp in rows_for:
        c, end = committed.get(tp), latest.get(tp)
        rows.append({
            "topic": tp[0],
            "partition": tp[1],
            "owner": owners.get(tp),
            "committed": c,
            "latest": end,
            "lag": None if c is None or end is None else max(0, end - c),
        })
    return {**state, "members": members, "partitions": rows}


def _find_coordinator(client: NetClient, group: str, timeout_ms: int) -> int:
    def build(versions: BrokerVersions) -> Any:
        return versions.build(ApiKey.FIND_COORDINATOR, group_id=group, key=group, key_type=0)

    found = client.call(client.least_loaded_node(), build, timeout_ms=timeout_ms, api_key=ApiKey.FIND_COORDINATOR)
    if found.error_code:
        raise for_code(found.error_code)(f"FindCoordinator for group {group!r}")
    client.update_brokers({found.node_id: (found.host, found.port)})
    return int(found.node_id)


def _members(described: Any) -> tuple[list[dict[str, Any]], dict[TopicPartition, str], set[str]]:
    """Members with their decoded assignments, partition -> member id, topics named anywhere."""
    members: list[dict[str, Any]] = []
    owners: dict[TopicPartition, str] = {}
    topics: set[str] = set()
    consumer = described.protocol_type == PROTOCOL_TYPE
    for member in described.members:
        share: list[TopicPartition] = []
        if consumer and member.member_assignment:
            try:
                assignment = decode_member_assignment(member.member_assignment)
                share = [(e.topic, int(p)) for e in assignment.assigned_partitions for p in e.partitions]
            except HmbError:
                share = []
        if consumer and member.member_metadata:
            try:
                topics.update(decode_member_metadata(member.member_metadata).topics)
            except HmbError:
                pass
        for tp in share:
            owners[tp] = member.member_id
            topics.add(tp[0])
        members.append({
            "member_id": member.member_id,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "partitions": sorted(share),
        })
    return members, owners, topics


def _committed(
    client: NetClient, coordinator: int, group: str, partitions: Iterable[TopicPartition], timeout_ms: int
) -> dict[TopicPartition, int | None]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    if not by_topic:
        return {}
    answer = client.call(
        coordinator,
        lambda v: v.build(
            ApiKey.OFFSET_FETCH, group_id=group,
            topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        ),
        timeout_ms=timeout_ms,
        api_key=ApiKey.OFFSET_FETCH,
    )
    if getattr(answer, "error_code", 0):
        raise for_code(answer.error_code)(f"OffsetFetch {group!r}")
    out: dict[TopicPartition, int | None] = {}
    for topic in answer.topics:
        for p in topic.partitions:
            out[(topic.topic, p.partition)] = int(p.offset) if not p.error_code and p.offset >= 0 else None
    return out


def _latest(
    client: NetClient, metadata: Metadata, partitions: list[TopicPartition], timeout_ms: int
) -> dict[TopicPartition, int]:
    by_leader: dict[int, list[TopicPartition]] = {}
    for topic, partition in partitions:
        leader = metadata.leader(topic, partition)
        if leader is not None and leader >= 0:
            by_leader.setdefault(leader, []).append((topic, partition))
    out: dict[TopicPartition, int] = {}
    for leader, tps in by_leader.items():
        try:
            answers = list_offsets(client, leader, tps, True, timeout_ms)
        except HmbError:
            continue  # that leader is away: its rows show no lag
        out.update({tp: offset for tp, offset in answers.items() if isinstance(offset, int)})
    return out
