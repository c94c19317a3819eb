"""Closing a BrokerChannel from another thread wakes the thread blocked on it at once.

A follower's fetch parks on its leader for up to ``replica.fetch.wait.max.ms``; a controller's
request to a hung broker waits for its timeout. Stopping the broker, the fetcher or the sender
closes their channel from the stopping thread: the blocked ``recv`` must end then (the socket is
shut down, ``SHUT_RDWR``, before it is let go), not when the wait or the timeout runs out. Each
test parks a real request on a real broker for 30 s and expects the blocked thread to be done
within 3 s of the close (joined with a timeout, then checked), over plaintext and over TLS (where
a read on an ``SSLSocket`` closed under it could fail with a ValueError instead of the channel's
``KafkaConnectionError``).
"""

from __future__ import annotations

import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel, ChannelSecurity
from hmbclient.errors import KafkaConnectionError
from hmbclient.protocol.api import FetchRequest, MetadataRequest
from hmbclient.testing.pki import Pki, make_pki

from .conftest import wait_until

pytestmark = pytest.mark.timeout(120)

PARK_MS = 30_000  # how long the parked requests would wait (the bug: the close waited as long)
PROMPT_S = 3.0  # what "at once" allows on a loaded 2-core machine


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="module")
def tls_broker(pki: Pki) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(listeners=["SSL://127.0.0.1:0"], ssl_certfile=pki.server_cert, ssl_keyfile=pki.server_key, num_partitions=1) as b:
        yield b


def _long_poll(topic: str) -> Any:
    part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "log_start_offset": -1, "current_leader_epoch": -1}
    return FetchRequest[10].build(
        replica_id=-1, max_wait_ms=PARK_MS, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[(topic, [part])], forgotten_topics_data=[],
    )


@pytest.mark.parametrize("transport", ["plaintext", "tls"])
@pytest.mark.parametrize("how", ["close", "shutdown"])
def test_close_wakes_a_request_blocked_in_another_thread(request: pytest.FixtureRequest, transport: str, how: str) -> None:
    if transport == "tls":
        broker: EmbeddedBroker = request.getfixturevalue("tls_broker")
        security = ChannelSecurity("SSL", ssl.create_default_context(cafile=request.getfixturevalue("pki").ca))
    else:
        broker = request.getfixturevalue("broker")
        security = None
    topic = f"chan-close-{uuid.uuid4().hex[:8]}"
    ch = BrokerChannel(broker.host, broker.port, "test-close", security=security)
    ch.request(MetadataRequest[1](topics=[topic]), timeout_s=10)  # creates the topic
    ch.close()
    rm = broker.broker.replica_manager
    assert rm is not None
    parked = rm.fetch_purgatory.delayed()
    failure: list[BaseException] = []

    def blocked() -> None:
        try:
            ch.request(_long_poll(topic), timeout_s=PARK_MS / 1000 + 30)
        except BaseException as e:  # what the woken request raised
            failure.append(e)

    th = threading.Thread(target=blocked, daemon=True)
    th.start()
    wait_until(lambda: rm.fetch_purgatory.delayed() > parked, 10, "the fetch parked on the broker")
    t0 = time.monotonic()
    getattr(ch, how)()
    th.join(PROMPT_S)
    elapsed = time.monotonic() - t0
    assert not th.is_alive(), f"the reader still blocked {elapsed:.1f} s after {how}()"
    assert len(failure) == 1 and isinstance(failure[0], KafkaConnectionError), failure
    assert not ch.connected
    if how == "close":  # usable again: the next request connects anew
        assert ch.request(MetadataRequest[1](topics=[topic]), timeout_s=10).topics[0].topic == topic
        ch.close()
    else:  # closed for good: no new connection
        with pytest.raises(KafkaConnectionError, match="shut down"):
            ch.request(MetadataRequest[1](topics=[topic]), timeout_s=10)
        assert not ch.connected


def test_stopping_the_fetchers_ends_a_fetcher_thread_parked_on_its_leader(zookeeper: Any) -> None:
    with EmbeddedCluster(brokers=2, zookeeper_connect=f"{zookeeper.connect}/chan-close-{uuid.uuid4().hex[:8]}", num_partitions=1,
                         replication_factor=2, offsets_topic_replication_factor=1, replica_fetch_wait_max_ms=PARK_MS) as cluster:
        cluster.create_topic("parked", 1)
        cluster.await_isr("parked")
        leader_id = cluster.leader("parked", 0)
        assert leader_id is not None
        follower_id = 1 - leader_id
        leader, follower = cluster.broker(leader_id), cluster.broker(follower_id)
        name = f"broker-{follower_id}-replica-fetcher-{leader_id}"
        fetcher = wait_until(lambda: next((t for t in threading.enumerate() if t.name == name), None), 10, f"thread {name}")
        # the follower's fetch of the empty partition is parked on the leader for PARK_MS
        wait_until(lambda: leader.replica_manager.fetch_purgatory.delayed() >= 1, 10, "the follower's fetch parked")
        t0 = time.monotonic()
        follower.replica_manager.fetchers.shutdown()
        fetcher.join(PROMPT_S)
        elapsed = time.monotonic() - t0
        assert not fetcher.is_alive(), f"{name} still blocked {elapsed:.1f} s after the fetchers' shutdown"
        assert elapsed < PROMPT_S
