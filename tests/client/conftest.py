"""Fixtures for the client-core suite: real brokers on 127.0.0.1, real sockets.

* ``tansu`` (session): one LocalTansu (modern protocol, memory storage).
* ``broker`` (module, parametrized): each test module runs against every broker kind in
  ``BROKER_KINDS``: "tansu" and "embedded" (our EmbeddedBroker on port 0 in a temp dir); ``broker.bootstrap`` / ``broker.host`` / ``broker.port`` /
  ``broker.kind``.
* helpers: ``unique`` topic names, ``create_topic`` (CreateTopics through our NetClient),
  ``read_partition`` / ``read_all`` (everything in a topic through SimpleConsumer).
"""

from __future__ import annotations

import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hmbclient.consumer.simple import FetchRequest, SimpleConsumer
from hmbclient.errors import for_code
from hmbclient.net import NetClient
from hmbclient.protocol.api.base import ApiKey
from hmbclient.testing.tansu import LocalTansu

from .loopback import LoopbackServer, close_quietly

BROKER_KINDS = ["tansu", "embedded"]


@dataclass
class BrokerHandle:
    kind: str
    host: str
    port: int
    server: Any

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def tansu() -> Iterator[LocalTansu]:
    with LocalTansu() as t:
        yield t


@pytest.fixture(scope="module", params=BROKER_KINDS)
def broker(request: pytest.FixtureRequest) -> Iterator[BrokerHandle]:
    kind = request.param
    if kind == "tansu":
        t = request.getfixturevalue("tansu")
        yield BrokerHandle("tansu", t.host, t.port, t)
        return
    if kind == "embedded":
        from hmbclient.broker import EmbeddedBroker

        with EmbeddedBroker(port=0, log_dir=str(request.getfixturevalue("tmp_path_factory").mktemp("hmb"))) as b:
            yield BrokerHandle("embedded", b.host, b.port, b)
        return
    raise AssertionError(f"unknown broker kind {kind}")


def create_topic(bootstrap: str, topic: str, partitions: int, *, api_version: str = "auto") -> None:
    """Create ``topic`` with ``partitions`` partitions (CreateTopics), then wait for leaders."""
    with NetClient(bootstrap, api_version=api_version) as client:

        def build(v: Any) -> Any:
            return v.build(
                ApiKey.CREATE_TOPICS,
                topics=[(topic, partitions, 1, [], [])],
                timeout_ms=10_000,
                validate_only=False,
            )

        resp = client.call(client.bootstrap_ids[0], build, timeout_ms=15_000)
        for t in resp.topics:
            if t.error_code and t.error_code != 36:  # 36: already exists
                raise for_code(t.error_code)(f"CreateTopics {topic}")
        from hmbclient.net import Metadata

        md = Metadata(client)
        assert len(md.partitions_for(topic, 15_000)) == partitions


def read_partition(host: str, port: int, topic: str, partition: int, *, api_version: str = "auto", start: int = 0) -> list[Any]:
    """Every message of one partition from ``start`` to the end, via SimpleConsumer."""
    out: list[Any] = []
    with SimpleConsumer(host, port, so_timeout_ms=10_000, api_version=api_version) as c:
        offset = start
        while True:
            ms = c.fetch(FetchRequest(topic, partition, offset, 1 << 20))
            recs = list(ms)
            if not recs:
                return out
            out.extend(recs)
            offset = recs[-1].offset + 1


def read_all(host: str, port: int, topic: str, partitions: int, **kw: Any) -> dict[int, list[Any]]:
    return {p: read_partition(host, port, topic, p, **kw) for p in range(partitions)}


class WireProxy(LoopbackServer):
    """A real TCP proxy in front of a broker that sees each request's API key.

    ``policy(api_key) -> "forward" | "close" | "drop"``: forward the request, close the client
    connection (what a Kafka 0.8 broker does on ApiVersions), or swallow it and never answer.
    ``seen`` lists every API key received, in order. ``paused`` stops forwarding requests
    (they are held, unanswered) until cleared.
    """

    def __init__(self, target: tuple[str, int], policy: Any = None) -> None:
        self.target = target
        self.policy = policy or (lambda key: "forward")
        self.seen: list[int] = []
        super().__init__()

    def handle(self, client: Any) -> None:
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        self._conns.append(upstream)
        threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()
        self._up(client, upstream)

    def _up(self, client: Any, upstream: Any) -> None:
        buf = b""
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + n:
                        break
                    frame, buf = buf[: 4 + n], buf[4 + n :]
                    (key,) = struct.unpack_from(">h", frame, 4)
                    self.seen.append(key)
                    action = self.policy(key)
                    if action == "close":
                        raise ConnectionAbortedError
                    if action == "forward":
                        upstream.sendall(frame)
        except OSError:
            pass
        finally:
            close_quietly(client, upstream)

    def _down(self, upstream: Any, client: Any) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            close_quietly(client, upstream)


class SilentServer(LoopbackServer):
    """Accepts connections, reads everything, answers nothing (a broker that hangs)."""

    def handle(self, c: Any) -> None:
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
