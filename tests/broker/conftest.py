"""Shared fixtures of the broker tests: a module-scoped embedded broker, a raw protocol client
(real socket, our sans-IO codec) and helpers to build record sets; for the admin tests, a
3-broker cluster on a ZooKeeper chroot of the module's own (``chroot``, ``cluster``, ``zk``: a
module that needs another shape defines its own fixture of the same name, which wins) and
``unique_topic``."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until as wait_until  # re-exported for the broker test modules

from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.protocol import records
from hmbclient.protocol.api import FetchRequest, MetadataRequest, ProduceRequest
from hmbclient.protocol.frame import NEED_DATA, ClientConnection


class RawClient:
    """One blocking connection speaking the wire protocol through ``ClientConnection``."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0, client_id: str = "broker-tests") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.conn = ClientConnection(client_id)

    def send(self, request: Any) -> int:
        cid, data = self.conn.send_request(request)
        self.sock.sendall(data)
        return cid

    def send_no_response(self, request: Any) -> None:
        _, data = self.conn.send_request(request, expect_response=False)
        self.sock.sendall(data)

    def receive(self) -> Any:
        while True:
            ev = self.conn.next_response()
            if ev is not NEED_DATA:
                return ev[1]
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.conn.receive_data(chunk)

    def request(self, request: Any) -> Any:
        self.send(request)
        return self.receive()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode(items: list[tuple[bytes | None, bytes | None]], magic: int = 2, codec: int = records.NONE, ts: int | None = None) -> bytes:
    ts = ts if ts is not None else int(time.time() * 1000)
    return records.encode_records(magic, codec, [(k, v, ts) for k, v in items], timestamp_ms=ts)


def produce(client: RawClient, topic: str, partition: int, buf: bytes, *, version: int = 7, acks: int = 1) -> Any:
    """Produce one record set; returns the partition response."""
    req = ProduceRequest[version].build(transactional_id=None, acks=acks, timeout_ms=5000, topics=[(topic, [(partition, buf)])])
    resp = client.request(req)
    return resp.topics[0].partitions[0]


def fetch(client: RawClient, topic: str, partition: int, offset: int, *, version: int = 10, max_wait_ms: int = 0, min_bytes: int = 0, max_bytes: int = 1 << 20) -> Any:
    """Fetch one partition; returns the partition response."""
    part: dict[str, Any] = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}
    if version >= 5:
        part["log_start_offset"] = -1
    if version >= 9:
        part["current_leader_epoch"] = -1
    req = FetchRequest[version].build(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[(topic, [part])], forgotten_topics_data=[],
    )
    resp = client.request(req)
    return resp.topics[0].partitions[0]


def create_topic(client: RawClient, topic: str) -> None:
    client.request(MetadataRequest[1](topics=[topic]))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("broker")), num_partitions=1) as b:
        yield b


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[RawClient]:
    with RawClient(broker.host, broker.port) as c:
        yield c


def unique_topic(prefix: str) -> str:
    """``prefix`` and 8 random hex digits: a topic no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def chroot(zookeeper: Any, request: pytest.FixtureRequest) -> str:
    """A ZooKeeper chroot of this test module's own."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    return f"{zookeeper.connect}/{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(chroot: str) -> Iterator[EmbeddedCluster]:
    """Three brokers on ``chroot``: one partition and two replicas per topic by default."""
    with EmbeddedCluster(brokers=3, zookeeper_connect=chroot, num_partitions=1, replication_factor=2,
                         offsets_topic_replication_factor=1) as c:
        yield c


@pytest.fixture(scope="module")
def zk(chroot: str) -> Iterator[Any]:
    """A kazoo client on ``chroot`` (to check what the brokers wrote)."""
    from kazoo.client import KazooClient

    z = KazooClient(hosts=chroot)
    z.start(timeout=10)
    yield z
    z.stop()
    z.close()
