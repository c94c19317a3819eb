"""Helpers of the Apache Kafka reference tests: :func:`java_read_all` reads topics back with
Kafka's own Java consumer (our tests/java/kafka-4/ReadAll.java), the oracle every test here
checks against."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from hmbclient import zkpaths
from hmbclient.testing import kafka_java


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _b64(s: str) -> bytes | None:
    return None if s == "-" else base64.b64decode(s)


def java_read_all(bootstrap: str, topics: list[str] | str, count: int, *, timeout_ms: int = 60_000,
                  properties: str | None = None) -> list[tuple[str, int, int, bytes | None, bytes | None]]:
    """Every record of ``topics`` from the beginning to the end offsets they had when the
    reader started, read by Kafka's Java consumer: (topic, partition, offset, key, value).
    Fails unless the end and at least ``count`` records were reached within the timeout."""
    names = [topics] if isinstance(topics, str) else topics
    args = [bootstrap, ",".join(names), str(count), str(timeout_ms)]
    if properties:
        args.append(properties)
    done = kafka_java("ReadAll", *args, timeout_s=timeout_ms / 1000 + 60)
    out = []
    for line in done.stdout.splitlines():
        t, p, o, k, v = line.split("\t")
        out.append((t, int(p), int(o), _b64(k), _b64(v)))
    return out


def values(records: list[Any]) -> list[bytes]:
    return [r[4] for r in records]


def zookeeper_owners(zk: str, group: str, topic: str) -> set[str]:
    """The members (consumer ids) owning the topic's partitions, from ZooKeeper's owner znodes
    (data: the owning thread id, ``<consumer id>-<thread>``)."""
    client = KazooClient(hosts=zk)
    client.start(timeout=30)
    try:
        root = zkpaths.consumer_owners_path(group, topic)
        if not client.exists(root):
            return set()
        owners = set()
        for child in client.get_children(root):
            data = client.get(f"{root}/{child}")[0]
            if data:
                owners.add(data.decode().rsplit("-", 1)[0])
        return owners
    except NoNodeError:  # an owner released between listing and reading: ask again
        return set()
    finally:
        client.stop()
        client.close()
