"""DelayedFetch and DelayedProduce through the real broker: long polls wake on appends, expire
on time, and complete exactly once."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.protocol import records

from .conftest import RawClient, create_topic, encode, fetch, produce, wait_until

pytestmark = pytest.mark.timeout(60)


def test_long_poll_returns_as_soon_as_a_produce_lands(broker: EmbeddedBroker, client: RawClient) -> None:
    create_topic(client, "lp")
    result: dict[str, object] = {}

    def poll() -> None:
        with RawClient(broker.host, broker.port) as c:
            t0 = time.monotonic()
            result["p"] = fetch(c, "lp", 0, 0, max_wait_ms=2000, min_bytes=1)
            result["elapsed"] = time.monotonic() - t0

    rm = broker.broker.replica_manager
    assert rm is not None
    parked = rm.fetch_purgatory.delayed()
    th = threading.Thread(target=poll)
    th.start()
    wait_until(lambda: rm.fetch_purgatory.delayed() > parked, 5, "the fetch parked")
    produce(client, "lp", 0, encode([(None, b"wake up")]))
    th.join(5)
    p = result["p"]
    assert records.decode_records(p.records)[0].value == b"wake up"  # type: ignore[attr-defined]
    # woken by the produce, long before max_wait (2 s) would have answered it empty
    assert result["elapsed"] < 1.5  # type: ignore[operator]


def test_long_poll_returns_empty_at_max_wait(client: RawClient) -> None:
    create_topic(client, "lp-empty")
    for version, wait_ms in ((0, 400), (4, 2000), (10, 600)):
        t0 = time.monotonic()
        p = fetch(client, "lp-empty", 0, 0, version=version, max_wait_ms=wait_ms, min_bytes=1)
        elapsed = time.monotonic() - t0
        assert p.error_code == 0 and len(p.records) == 0
        assert wait_ms / 1000 - 0.05 <= elapsed < wait_ms / 1000 + 1.0


def test_min_bytes_waits_for_enough_data(broker: EmbeddedBroker, client: RawClient) -> None:
    create_topic(client, "lp-min")
    produce(client, "lp-min", 0, encode([(None, b"x" * 100)]))
    result: dict[str, object] = {}

    def poll() -> None:
        with RawClient(broker.host, broker.port) as c:
            t0 = time.monotonic()
            result["p"] = fetch(c, "lp-min", 0, 0, max_wait_ms=5000, min_bytes=2000)
            result["elapsed"] = time.monotonic() - t0

    rm = broker.broker.replica_manager
    assert rm is not None
    parked = rm.fetch_purgatory.delayed()
    th = threading.Thread(target=poll)
    th.start()
    wait_until(lambda: rm.fetch_purgatory.delayed() > parked, 5, "the fetch parked")
    produce(client, "lp-min", 0, encode([(None, b"y" * 100)]))  # not enough yet
    # The behaviour under test: for this window the fetch must stay parked, not answer early.
    time.sleep(0.3)
    assert th.is_alive()
    produce(client, "lp-min", 0, encode([(None, b"z" * 3000)]))
    th.join(5)
    assert len(records.decode_records(result["p"].records)) == 3  # type: ignore[attr-defined]
    assert result["elapsed"] < 2.0  # type: ignore[operator]


def test_many_parked_fetches_complete_exactly_once(broker: EmbeddedBroker, client: RawClient) -> None:
    create_topic(client, "lp-many")
    n = 40
    conns = [RawClient(broker.host, broker.port) for _ in range(n)]
    for c in conns:
        from hmbclient.protocol.api import FetchRequest

        c.send(FetchRequest[4].build(replica_id=-1, max_wait_ms=3000, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[("lp-many", [(0, 0, 1 << 20)])]))
    rm = broker.broker.replica_manager
    assert rm is not None
    wait_until(lambda: rm.fetch_purgatory.delayed() >= n, 5, f"{n} fetches parked")
    assert rm.fetch_purgatory.delayed() == n
    t0 = time.monotonic()
    produce(client, "lp-many", 0, encode([(None, b"one")]))
    for c in conns:
        resp = c.receive()
        assert records.decode_records(resp.topics[0].partitions[0].records)[0].value == b"one"
    assert time.monotonic() - t0 < 2.0
    assert rm.fetch_purgatory.delayed() == 0
    # exactly once: nothing more arrives on any connection
    for c in conns:
        c.sock.settimeout(0.05)
        with pytest.raises((TimeoutError, socket.timeout)):
            c.sock.recv(1)
        c.close()


def test_acks_all_goes_through_delayed_produce(client: RawClient, broker: EmbeddedBroker) -> None:
    create_topic(client, "acks-all")
    r = produce(client, "acks-all", 0, encode([(None, b"a")]), acks=-1)
    assert (r.error_code, r.base_offset) == (0, 0)
    rm = broker.broker.replica_manager
    assert rm is not None and rm.produce_purgatory.delayed() == 0


def test_parked_fetch_completes_when_leadership_moves(zookeeper: Any) -> None:
    with EmbeddedCluster(brokers=2, num_partitions=1, zookeeper_connect=f"{zookeeper.connect}/delayed-{time.monotonic_ns()}") as cluster:
        cluster.create_topic("moving", 1)
        cluster.await_isr("moving")
        leader = cluster.leader("moving", 0)
        assert leader is not None
        b = cluster.broker(leader)
        with RawClient(b.host, b.port) as c:
            result: dict[str, object] = {}

            def poll() -> None:
                t0 = time.monotonic()
                result["p"] = fetch(c, "moving", 0, 0, max_wait_ms=5000, min_bytes=1)
                result["elapsed"] = time.monotonic() - t0

            th = threading.Thread(target=poll)
            th.start()
            rm = b.replica_manager
            # the follower's fetch parks there too: two parked fetches mean ours is one of them
            wait_until(lambda: rm.fetch_purgatory.delayed() >= 2, 5, "the fetch parked")
            cluster.move_leader("moving", 0, 1 - leader)
            th.join(5)
            assert result["p"].error_code == 6  # type: ignore[attr-defined]
            assert result["elapsed"] < 2.0  # type: ignore[operator]
