"""Read-only cluster inspection used by the ``hmb`` command and by tools: topics, partition
leaders, and ZooKeeper consumer groups (members, owners, committed offsets, lag).

Everything here goes through the public client pieces (``NetClient`` + ``Metadata``,
``SimpleConsumer``) and kazoo with the Kafka 0.8 znode layout from :mod:`rebalance.paths`,
so what it reports is what a Java 0.8 tool would read from the same cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from hmbclient.errors import CoordinationError, UnknownTopicOrPartitionError
from rebalance import paths

__all__ = ["topic_partitions", "list_topics", "list_groups", "describe_group", "latest_offsets"]

_TIMEOUT_MS = 10_000


@contextlib.contextmanager
def _metadata(brokers: str, api_version: str, timeout_ms: float) -> Iterator[Any]:
    from hmbclient.net.client import NetClient
    from hmbclient.net.metadata import Metadata

    client = NetClient(brokers, api_version=api_version, client_id="hmb-admin",
                       request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms)
    try:
        yield Metadata(client, allow_auto_topic_creation=False)
    finally:
        client.close()


def topic_partitions(brokers: str, topic: str, *, api_version: str = "auto",
                     timeout_ms: float = _TIMEOUT_MS) -> dict[int, tuple[str, int]]:
    """Partition -> leader (host, port) for one topic.

    Raises:
        KeyError: the topic does not exist (no auto-creation is asked for).
        KafkaConnectionError / RequestTimedOutError: no broker answered in time.
    """
    with _metadata(brokers, api_version, timeout_ms) as md:
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


def list_topics(brokers: str, *, api_version: str = "auto", timeout_ms: float = _TIMEOUT_MS) -> dict[str, int]:
    """Topic -> number of partitions, for every topic the cluster reports."""
    with _metadata(brokers, api_version, timeout_ms) as md:
        view = md.refresh(None, timeout_ms=timeout_ms)
        return {t: len(info.partitions) for t, info in view.topics.items() if not info.error_code}


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
