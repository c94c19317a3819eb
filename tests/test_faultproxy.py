"""hmbclient.testing.FaultProxy against a real embedded broker: answers pass whole, the rule's
answers are lost with their connection (while the broker did the work), Metadata names the
proxy, ``cut``/``set_link`` cut links, and ``stop`` leaves no thread or socket behind."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import EmbeddedBroker
from hmbclient.protocol import records
from hmbclient.protocol.api import ListOffsetsRequest, MetadataRequest, ProduceRequest
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.frame import NEED_DATA, ClientConnection
from hmbclient.testing import FaultProxy, drop_every, drop_when, proxy_cluster


class _Raw:
    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=10.0)
        self.conn = ClientConnection("faultproxy-test")

    def request(self, req: Any) -> Any:
        _, data = self.conn.send_request(req)
        self.sock.sendall(data)
        while True:
            ev = self.conn.next_response()
            if ev is not NEED_DATA:
                return ev[1]
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            self.conn.receive_data(chunk)

    def close(self) -> None:
        self.sock.close()


def _produce(c: _Raw, topic: str, value: bytes) -> Any:
    buf = records.encode_records(2, records.NONE, [(None, value, int(time.time() * 1000))])
    resp = c.request(ProduceRequest[7].build(transactional_id=None, acks=1, timeout_ms=5000, topics=[(topic, [(0, buf)])]))
    return resp.topics[0].partitions[0]


def _end_offset(broker: EmbeddedBroker, topic: str) -> int:
    c = _Raw((broker.host, broker.port))
    try:
        resp = c.request(ListOffsetsRequest[2].build(replica_id=-1, isolation_level=0, topics=[(topic, [(0, -1)])]))
        return int(resp.topics[0].partitions[0].offset)
    finally:
        c.close()


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(num_partitions=1) as b:
        yield b


def _proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("FaultProxy-")]


def test_metadata_names_the_proxy_and_answers_pass_whole(broker: EmbeddedBroker) -> None:
    with FaultProxy((broker.host, broker.port)) as proxy:
        c = _Raw(proxy.address)
        md = c.request(MetadataRequest[1].build(topics=["fp-md"], allow_auto_topic_creation=True))
        assert [(b.host, b.port) for b in md.brokers] == [proxy.address]
        # flexible versions too (response header v1): Java and librdkafka ask with v12
        md = c.request(MetadataRequest[12].build(topics=[{"topic": "fp-md"}], allow_auto_topic_creation=True))
        assert [(b.host, b.port) for b in md.brokers] == [proxy.address]
        wait_until(lambda: _produce(c, "fp-md", b"v").error_code == 0, what="topic fp-md ready")
        for i in range(20):
            assert _produce(c, "fp-md", b"x" * (i * 5000)).error_code == 0  # large frames, split reads
        c.close()
        assert proxy.stats()["dropped"] == 0 and proxy.stats()["passed"] >= 22
        assert proxy.failure is None


def test_every_nth_produce_answer_is_lost_but_stored(broker: EmbeddedBroker) -> None:
    with FaultProxy(broker.bootstrap) as proxy:
        c = _Raw(proxy.address)
        c.request(MetadataRequest[1].build(topics=["fp-drop"], allow_auto_topic_creation=True))
        wait_until(lambda: _produce(c, "fp-drop", b"warm").error_code == 0, what="topic fp-drop ready")
        base = _end_offset(broker, "fp-drop")
        proxy.set_rule(drop_every(3, first=1))  # counts every Produce answer so far (1 already passed)
        answered = lost = 0
        for i in range(9):
            try:
                _produce(c, "fp-drop", b"v%d" % i)
                answered += 1
            except (ConnectionError, OSError):
                lost += 1
                c.close()
                c = _Raw(proxy.address)
        c.close()
        assert lost == 3 and answered == 6  # nth 3, 6, 9 of the 10 Produce answers
        assert proxy.stats()["dropped"] == 3
        assert _end_offset(broker, "fp-drop") == base + 9  # the broker stored all nine


def test_predicate_rule_sees_key_version_and_link(broker: EmbeddedBroker) -> None:
    seen: list[tuple[int, int, int]] = []

    def rule(a: Any) -> bool:
        seen.append((a.api_key, a.api_version, a.link))
        return a.api_key == ApiKey.METADATA and a.link == 2

    with FaultProxy(broker.bootstrap, drop_when(rule)) as proxy:
        c = _Raw(proxy.address)
        c.request(MetadataRequest[1].build(topics=[], allow_auto_topic_creation=False))
        c.close()
        c = _Raw(proxy.address)
        with pytest.raises((ConnectionError, OSError)):
            c.request(MetadataRequest[5].build(topics=[], allow_auto_topic_creation=False))
        c.close()
    assert seen == [(3, 1, 1), (3, 5, 2)]


def test_cut_and_link_down(broker: EmbeddedBroker) -> None:
    with FaultProxy(broker.bootstrap) as proxy:
        c = _Raw(proxy.address)
        c.request(MetadataRequest[1].build(topics=[], allow_auto_topic_creation=False))
        proxy.cut()
        with pytest.raises((ConnectionError, OSError)):
            c.request(MetadataRequest[1].build(topics=[], allow_auto_topic_creation=False))
        c.close()
        proxy.set_link(False)
        c = _Raw(proxy.address)  # accepted by the kernel, closed by the proxy
        with pytest.raises((ConnectionError, OSError)):
            c.request(MetadataRequest[1].build(topics=[], allow_auto_topic_creation=False))
        c.close()
        assert proxy.stats()["refused"] == 1
        proxy.set_link(True)
        c = _Raw(proxy.address)
        assert c.request(MetadataRequest[1].build(topics=[], allow_auto_topic_creation=False)).brokers
        c.close()


def test_broker_down_closes_the_client_and_stop_leaves_nothing(broker: EmbeddedBroker) -> None:
    proxy = FaultProxy(broker.bootstrap).start()
    assert len(_proxy_threads()) == 1
    address = proxy.address
    broker.stop()
    c = _Raw(address)
    with pytest.raises((ConnectionError, OSError)):
        c.request(MetadataRequest[1].build(topics=[], allow_auto_topic_creation=False))
    c.close()
    proxy.stop()
    proxy.stop()  # idempotent
    assert _proxy_threads() == []
    with pytest.raises(OSError):
        socket.create_connection(address, timeout=2.0).close()


def test_cluster_proxies_share_their_address_map() -> None:
    with EmbeddedBroker() as a, EmbeddedBroker() as b:
        proxies = proxy_cluster([a.bootstrap, b.bootstrap])
        for p in proxies:
            p.start()
        try:
            assert dict(proxies[0]._map) == {(a.host, a.port): proxies[0].address, (b.host, b.port): proxies[1].address}
        finally:
            for p in proxies:
                p.stop()


def test_non_loopback_upstream_refused() -> None:
    with pytest.raises(ValueError, match="127.0.0.1 only"):
        FaultProxy(("10.0.0.1", 9092))
    with pytest.raises(ValueError):
        drop_every(0)
