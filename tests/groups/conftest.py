"""Fixtures for the consumer-group suite: real ZooKeeper, real brokers, real sockets.

* ``zk_root`` (module): a fresh chroot in the session's LocalZooKeeper (the
  ``hmbclient.testing`` plugin's ``zookeeper`` fixture), so our ``/brokers`` and
  ``/consumers`` never meet other suites' znodes. ``zk_connect`` = ``"127.0.0.1:P/<chroot>"``.
* ``admin_zk`` (module): a KazooClient inside that chroot for assertions.
* ``cluster`` (module): a 3-broker EmbeddedCluster registered in the chroot (12 partitions per
  auto-created topic).
* ``make_consumer``: builds connectors with short, test-friendly timings and shuts every
  one of them down after the test.
* helpers: ``produce`` (acked produce through our NetClient), ``drain`` (consume streams on
  threads until every one times out), ``unique`` names.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from waiting import wait_until

from hmbclient.consumer.connector import Consumer, ConsumerConnector
from hmbclient.consumer.stream import KafkaStream, MessageAndMetadata
from hmbclient.errors import ConsumerTimeoutError
from hmbclient.net import Metadata, NetClient
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.records import NONE, encode_records
from rebalance import paths

PARTITIONS = 12

#: Consumer settings that keep the suite fast: short sessions, quick commits and fetches.
FAST = {
    "auto.offset.reset": "smallest",
    "consumer.timeout.ms": 1500,
    "zookeeper.session.timeout.ms": 4000,
    "zookeeper.connection.timeout.ms": 10000,
    "auto.commit.interval.ms": 200,
    "rebalance.backoff.ms": 100,
    "rebalance.max.retries": 20,
    "fetch.wait.max.ms": 50,
    "refresh.leader.backoff.ms": 50,
}


def unique(prefix: str) -> str:
    """A name no other test uses (topics, groups)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def zk_root(zookeeper: Any) -> Iterator[str]:
    """``host:port/<chroot>``: this module's private corner of the session's ZooKeeper."""
    chroot = "/" + unique("groups")
    zk = KazooClient(zookeeper.connect)
    zk.start(timeout=15)
    zk.ensure_path(chroot)
    zk.stop()
    zk.close()
    yield zookeeper.connect + chroot


@pytest.fixture(scope="module")
def zk_connect(zk_root: str) -> str:
    return zk_root


@pytest.fixture(scope="module")
def admin_zk(zk_connect: str) -> Iterator[KazooClient]:
    zk = KazooClient(zk_connect)
    zk.start(timeout=15)
    yield zk
    zk.stop()
    zk.close()


@pytest.fixture(scope="module")
def cluster(zk_connect: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Three embedded brokers registered in this module's ZooKeeper chroot."""
    from hmbclient.broker import EmbeddedCluster

    with EmbeddedCluster(
        brokers=3,
        zookeeper_connect=zk_connect,
        num_partitions=PARTITIONS,
        log_dir=str(tmp_path_factory.mktemp("groups-cluster")),
    ) as c:
        yield c


class Producer:
    """Acked produce straight through NetClient (one request per partition batch)."""

    def __init__(self, bootstrap: str) -> None:
        self.client = NetClient(bootstrap)
        self.metadata = Metadata(self.client)

    def partitions(self, topic: str) -> tuple[int, ...]:
        return self.metadata.partitions_for(topic, 15_000)

    def send(self, topic: str, partition: int, values: list[bytes], key: bytes | None = None) -> None:
        records = encode_records(2, NONE, [(key, v, None) for v in values])

        def build(versions: Any) -> Any:
            return versions.build(
                ApiKey.PRODUCE,
                transactional_id=None,
                # acks=-1: a sent message is committed (below the high watermark) when send()
                # returns, so "latest" offsets and consumers see it at once on a replicated topic.
                acks=-1,
                timeout_ms=10_000,
                topics=[{"topic": topic, "partitions": [{"partition": partition, "records": records}]}],
            )

        for _ in range(50):
            leader = self.metadata.leader(topic, partition)
            if leader is None:
                self.metadata.refresh([topic])
                leader = self.metadata.leader(topic, partition)
            resp = self.client.call(leader, build, timeout_ms=10_000) if leader is not None else None
            code = resp.topics[0].partitions[0].error_code if resp is not None else -1
            if code == 0:
                return
            time.sleep(0.05)  # retry backoff: the loop itself waits on success (leader moving)
            self.metadata.refresh([topic])
        raise AssertionError(f"produce to {topic}-{partition} kept failing (last error code {code})")

    def spread(self, topic: str, per_partition: int, tag: str = "") -> set[tuple[int, bytes]]:
        """Produce ``per_partition`` distinct values to every partition; returns (partition, value)."""
        sent: set[tuple[int, bytes]] = set()
        for p in self.partitions(topic):
            values = [f"{tag}{p}-{i}".encode() for i in range(per_partition)]
            self.send(topic, p, values)
            sent.update((p, v) for v in values)
        return sent

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def make_producer() -> Iterator[Callable[[str], Producer]]:
    made: list[Producer] = []

    def make(bootstrap: str) -> Producer:
        p = Producer(bootstrap)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


@pytest.fixture
def make_consumer(zk_connect: str) -> Iterator[Callable[..., ConsumerConnector]]:
    """``make_consumer(group, **overrides)`` -> a connector, shut down after the test."""
    made: list[ConsumerConnector] = []

    def make(group: str, zk: str | None = None, **overrides: Any) -> ConsumerConnector:
        props: dict[str, Any] = {**FAST, "zookeeper.connect": zk or zk_connect, "group.id": group}
        listener = overrides.pop("rebalance_listener", None)
        status = overrides.pop("status_listener", None)
        c = Consumer.create(props, rebalance_listener=listener, status_listener=status, **overrides)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()


class Collector:
    """Consumes streams on threads, recording (consumer tag, MessageAndMetadata)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[tuple[str, MessageAndMetadata]] = []
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def consume(self, tag: str, stream: KafkaStream, until: threading.Event | None = None) -> None:
        """Consume on a thread. Without ``until`` the thread ends at the first consumer
        timeout; with it, timeouts are ridden out until ``until`` is set (then the next
        timeout ends it). StopIteration (connector shut down) always ends it."""

        def run() -> None:
            while True:
                try:
                    for m in stream:
                        with self.lock:
                            self.messages.append((tag, m))
                    return
                except ConsumerTimeoutError:
                    if until is None or until.is_set():
                        return
                except BaseException as exc:  # surfaced by join()
                    self.errors.append(exc)
                    return

        t = threading.Thread(target=run, name=f"collect-{tag}", daemon=True)
        t.start()
        self.threads.append(t)

    def join(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
            assert not t.is_alive(), f"{t.name} still consuming after {timeout}s"
        assert not self.errors, self.errors

    def values(self) -> list[tuple[int, bytes]]:
        return [(m.partition, m.message) for _, m in self.messages]

    def by_tag(self) -> dict[str, list[MessageAndMetadata]]:
        out: dict[str, list[MessageAndMetadata]] = {}
        for tag, m in self.messages:
            out.setdefault(tag, []).append(m)
        return out


def drain(streams: Iterable[tuple[str, KafkaStream]], timeout: float = 60) -> Collector:
    """Consume every (tag, stream) until each times out (consumer.timeout.ms)."""
    c = Collector()
    for tag, s in streams:
        c.consume(tag, s)
    c.join(timeout)
    return c


def owners(zk: KazooClient, group: str, topic: str) -> dict[int, str]:
    """partition -> owning thread id, straight from ZooKeeper."""
    base = paths.consumer_owners_path(group, topic)
    if not zk.exists(base):
        return {}
    out = {}
    for p in zk.get_children(base):
        try:
            out[int(p)] = zk.get(f"{base}/{p}")[0].decode()
        except Exception:  # noqa: BLE001 - released while we read
            continue
    return out


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, diag: Callable[[], Any] | None = None
) -> None:
    """The suite-wide :func:`waiting.wait_until`, under the name the group tests use."""
    wait_until(predicate, timeout, what, diag)


def wait_balanced(
    zk: KazooClient, group: str, topic: str, consumers: list[ConsumerConnector], partitions: int, timeout: float = 30
) -> dict[int, str]:
    """Wait until every partition is owned and each consumer owns its even share."""
    n = len(consumers)

    def ok() -> bool:
        if not all(c.await_rebalance(0.5) for c in consumers):
            return False
        own = owners(zk, group, topic)
        if len(own) != partitions:
            return False
        counts = [sum(1 for t in own.values() if t.startswith(c.consumer_id + "-")) for c in consumers]
        lo, hi = partitions // n, -(-partitions // n)
        return all(lo <= k <= hi for k in counts) and sum(counts) == partitions

    def diag() -> Any:
        return {
            "owners": owners(zk, group, topic),
            # last_view has no public accessor; this is only a failure message
            "members": [
                (c.consumer_id, c.await_rebalance(0), len(c.owned_partitions()),
                 c._rebalancer.last_view if c._rebalancer else None)
                for c in consumers
            ],
        }

    wait_for(ok, timeout, f"{n} consumers balanced over {partitions} partitions of {topic}", diag)
    return owners(zk, group, topic)
