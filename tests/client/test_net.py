"""The network layer against real servers: versions seam, timeouts, reconnects, status events."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import (
    ConfigError,
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedByBroker,
)
from hmbclient.net import (
    BROKER_CONNECTED,
    BROKER_DISCONNECTED,
    BROKER_UNAVAILABLE,
    BrokerEvent,
    NetClient,
)
from hmbclient.net.versions import LEGACY_VERSIONS, pick_versions, resolve_dialect
from hmbclient.protocol.api.base import ApiKey

from .conftest import SilentServer, WireProxy, closed_port, read_partition, unique

pytestmark = pytest.mark.timeout(60)

API_VERSIONS = int(ApiKey.API_VERSIONS)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("net"))) as b:
        yield b


def metadata_call(client: NetClient, node: int = -1, timeout_ms: float = 5_000) -> Any:
    return client.call(node, lambda v: v.build(ApiKey.METADATA, topics=[], allow_auto_topic_creation=False), timeout_ms=timeout_ms)


def test_pick_versions_takes_the_highest_common_version() -> None:
    picked = pick_versions([(0, 0, 11), (1, 4, 17), (3, 0, 2), (99, 0, 5)])
    assert picked[0] == 7 and picked[1] == 10 and picked[3] == 2
    assert 99 not in picked
    assert pick_versions([(1, 11, 17)]) == {}  # nothing in common


def test_unknown_api_version_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="api_version"):
        resolve_dialect("0.9.1")
    with pytest.raises(ConfigError):
        NetClient("127.0.0.1:1", api_version="3.0")


def test_auto_probe_picks_versions_from_the_broker(embedded: EmbeddedBroker) -> None:
    with WireProxy((embedded.host, embedded.port)) as proxy, NetClient(proxy.bootstrap) as c:
        v = c.versions(-1).result(5)
        assert v.probed and not v.legacy
        assert v.version(ApiKey.PRODUCE) >= 3 and v.version(ApiKey.FETCH) >= 4
        metadata_call(c)
        assert proxy.seen[0] == API_VERSIONS


@pytest.mark.parametrize("pin", ["0.8", "0.10", "2.1", "hmb"])
def test_pinned_versions_never_send_api_versions(embedded: EmbeddedBroker, pin: str) -> None:
    with WireProxy((embedded.host, embedded.port)) as proxy, NetClient(proxy.bootstrap, api_version=pin) as c:
        v = c.versions(-1).result(5)
        assert not v.probed
        resp = metadata_call(c)
        assert resp.brokers
        assert API_VERSIONS not in proxy.seen
        assert proxy.seen == [int(ApiKey.METADATA)]
        assert type(resp).API_VERSION == v.version(ApiKey.METADATA)


def test_probe_closed_by_legacy_broker_falls_back_to_0_8_versions(embedded: EmbeddedBroker) -> None:
    # A Kafka 0.8 broker closes the connection on an API key it does not know.
    policy = lambda key: "close" if key == API_VERSIONS else "forward"  # noqa: E731
    with WireProxy((embedded.host, embedded.port), policy) as proxy, NetClient(proxy.bootstrap) as c:
        v = c.versions(-1).result(5)
        assert v.legacy and dict(v.versions) == dict(LEGACY_VERSIONS)
        assert type(metadata_call(c)).API_VERSION == 0
        assert proxy.seen.count(API_VERSIONS) == 1  # probed once, never again


def test_unanswered_probe_falls_back_after_the_probe_timeout(embedded: EmbeddedBroker) -> None:
    policy = lambda key: "drop" if key == API_VERSIONS else "forward"  # noqa: E731
    with WireProxy((embedded.host, embedded.port), policy) as proxy, NetClient(proxy.bootstrap, probe_timeout_ms=300) as c:
        t0 = time.monotonic()
        v = c.versions(-1).result(5)
        assert 0.25 < time.monotonic() - t0 < 3
        assert v.legacy
        assert type(metadata_call(c)).API_VERSION == 0


def test_0_8_broker_end_to_end_through_probe_fallback(embedded: EmbeddedBroker) -> None:
    policy = lambda key: "close" if key == API_VERSIONS else "forward"  # noqa: E731
    topic = unique("legacy")
    with WireProxy((embedded.host, embedded.port), policy) as proxy:
        with SimpleConsumer(proxy.host, proxy.port) as c:
            # auto-create through metadata, produce through our own client at the picked versions
            with Producer(metadata_broker_list=embedded.bootstrap, api_version="0.8") as p:
                p.send(ProducerData(topic, None, [b"a", b"b"]))
            assert [m.value for m in c.fetch(FetchRequest(topic, 0, 0, 4096))] == [b"a", b"b"]
            assert c.client.versions(-1).result(1).legacy


def test_silent_broker_times_out_naming_the_api() -> None:
    with SilentServer() as s, NetClient(f"{s.host}:{s.port}", api_version="0.8", request_timeout_ms=400) as c:
        t0 = time.monotonic()
        with pytest.raises(RequestTimedOutError, match="Metadata"):
            metadata_call(c, timeout_ms=400)
        assert time.monotonic() - t0 < 2.0


def test_silent_broker_probe_then_request_timeout_is_bounded() -> None:
    # "auto" against a broker that answers nothing: probe times out, legacy reconnect, then the
    # request itself times out. Nothing waits past the request's own timeout.
    with SilentServer() as s, NetClient(f"{s.host}:{s.port}", request_timeout_ms=600, probe_timeout_ms=200) as c:
        t0 = time.monotonic()
        with pytest.raises(RequestTimedOutError):
            metadata_call(c, timeout_ms=600)
        assert time.monotonic() - t0 < 2.5


def test_unreachable_broker_fails_fast_with_the_address() -> None:
    port = closed_port()
    with NetClient(f"127.0.0.1:{port}") as c:
        t0 = time.monotonic()
        with pytest.raises(KafkaConnectionError, match=f"127.0.0.1:{port}"):
            metadata_call(c)
        assert time.monotonic() - t0 < 2.0
    t0 = time.monotonic()
    with pytest.raises(KafkaConnectionError, match=str(port)):
        Producer(metadata_broker_list=f"127.0.0.1:{port}", request_timeout_ms=1000).send(ProducerData("t", None, [b"x"]))
    assert time.monotonic() - t0 < 3.0
    with SimpleConsumer("127.0.0.1", port, so_timeout_ms=1000) as sc, pytest.raises(KafkaConnectionError):
        sc.fetch(FetchRequest("t", 0, 0, 100))


def test_status_events_and_reconnect(tmp_path: Any) -> None:
    events: list[BrokerEvent] = []
    got = threading.Event()
    broker = EmbeddedBroker(port=0, log_dir=str(tmp_path)).start()
    try:
        with NetClient(broker.bootstrap, reconnect_backoff_ms=20) as c:
            c.add_listener(lambda e: (events.append(e), got.set()))
            metadata_call(c)
            assert [e.kind for e in events] == [BROKER_CONNECTED]
            broker.stop()
            wait_until(lambda: BROKER_DISCONNECTED in [e.kind for e in events], 5, "a disconnected event")
            with pytest.raises(KafkaConnectionError):
                metadata_call(c)
            assert events[-1].kind == BROKER_UNAVAILABLE and events[-1].error is not None
            broker.start()
            # The reconnect backoff (20 ms) must pass before the client dials again: here the
            # elapsed time itself is what is waited for.
            time.sleep(0.1)
            metadata_call(c)
            assert events[-1].kind == BROKER_CONNECTED
            assert all(e.port == broker.port and e.node_id == -1 for e in events)
    finally:
        broker.close()


def test_many_requests_in_flight_are_answered_in_order(embedded: EmbeddedBroker) -> None:
    with NetClient(embedded.bootstrap, max_in_flight_requests_per_connection=3) as c:
        futs = [c.send(-1, lambda v: v.build(ApiKey.METADATA, topics=[], allow_auto_topic_creation=False)) for _ in range(200)]
        assert all(f.result(10).brokers for f in futs)


def test_hmb_dialect_refuses_other_apis_locally(embedded: EmbeddedBroker) -> None:
    with WireProxy((embedded.host, embedded.port)) as proxy:
        with SimpleConsumer(proxy.host, proxy.port, api_version="hmb") as c:
            with pytest.raises(UnsupportedByBroker, match="HMB.*ListOffsets"):
                c.get_offsets_before("t", 0, -1, 1)
        assert proxy.seen == []  # nothing at all was sent
        with Producer(metadata_broker_list=proxy.bootstrap, api_version="hmb") as p:
            with pytest.raises(UnsupportedByBroker, match="key"):
                p.send(ProducerData("t", b"k", [b"v"]))
        assert proxy.seen == []


def test_pinned_0_8_and_0_10_round_trip_on_the_embedded_broker(embedded: EmbeddedBroker) -> None:
    for pin, codec in [("0.8", "none"), ("0.8", "gzip"), ("0.8", "snappy"), ("0.10", "lz4"), ("0.10", "none"), ("2.1", "zstd")]:
        topic = unique(f"pin{pin.replace('.', '')}-{codec}")
        with Producer(metadata_broker_list=embedded.bootstrap, api_version=pin, compression_codec=codec) as p:
            fs = p.send(ProducerData(topic, b"k", [b"m%d" % i for i in range(20)]))
            assert [f.result().offset for f in fs] == list(range(20))
        recs = read_partition(embedded.host, embedded.port, topic, 0, api_version=pin)
        assert [(r.offset, r.key, r.value) for r in recs] == [(i, b"k", b"m%d" % i) for i in range(20)]
        if pin != "0.8":
            assert all(r.timestamp > 0 for r in recs)


def test_legacy_partial_messages_grow_then_fail(embedded: EmbeddedBroker) -> None:
    """Fetch v0 answers end wherever max_size ends: a partial trailing message is dropped, a
    lone message larger than max_size is fetched again with the size doubled up to
    fetch_message_max_bytes, and beyond that MessageSizeTooLargeError."""
    from hmbclient.errors import MessageSizeTooLargeError

    topic = unique("partial")
    with Producer(metadata_broker_list=embedded.bootstrap, api_version="0.8") as p:
        p.send(ProducerData(topic, None, [b"a" * 100, b"b" * 5000, b"c" * 100]))
    with SimpleConsumer(embedded.host, embedded.port, api_version="0.8", fetch_message_max_bytes=16384) as c:
        ms = c.fetch(FetchRequest(topic, 0, 0, 1000))
        assert [len(m.value) for m in ms] == [100]  # the 5000-byte message was cut: dropped
        assert ms.valid_bytes < ms.size_in_bytes
        ms = c.fetch(FetchRequest(topic, 0, 1, 1000))  # 1000 -> 2000 -> 4000 -> 8000
        assert [m.value[:1] for m in ms][:1] == [b"b"]
    with SimpleConsumer(embedded.host, embedded.port, api_version="0.8", fetch_message_max_bytes=4096) as c:
        with pytest.raises(MessageSizeTooLargeError, match="fetch_message_max_bytes=4096"):
            c.fetch(FetchRequest(topic, 0, 1, 1000))


def test_get_offsets_before_with_list_offsets_v0(embedded: EmbeddedBroker) -> None:
    topic = unique("lov0")
    with Producer(metadata_broker_list=embedded.bootstrap, api_version="0.8") as p:
        for i in range(5):
            p.send(ProducerData(topic, None, [b"%d" % i]))
    with WireProxy((embedded.host, embedded.port)) as proxy:
        with SimpleConsumer(proxy.host, proxy.port, api_version="0.8") as c:
            assert c.get_offsets_before(topic, 0, -1, 1) == [5]
            assert c.get_offsets_before(topic, 0, -2, 1) == [0]
            offs = c.get_offsets_before(topic, 0, -1, 10)
            assert offs == sorted(offs, reverse=True) and offs[0] == 5 and offs[-1] == 0
        assert int(ApiKey.LIST_OFFSETS) in proxy.seen
