"""KIP-219 on the client side: after a Produce answer with throttle_time_ms (Produce v6+), the
connection writes nothing to that broker until the throttle time is over. Seen on the wire: a
proxy stamps when each request reaches it; the broker (standalone, static
``quota.producer.default``) would only mute its side, so an early write would show."""

from __future__ import annotations

import time
from typing import Any

from hmbclient.broker import EmbeddedBroker
from hmbclient.net import NetClient
from hmbclient.protocol import records
from hmbclient.protocol.api.base import ApiKey

from .conftest import WireProxy


def test_connection_waits_out_the_throttle_time(tmp_path: Any) -> None:
    arrivals: list[tuple[int, float]] = []

    def stamp(key: int) -> str:
        arrivals.append((key, time.monotonic()))
        return "forward"

    ts = int(time.time() * 1000)
    big = records.encode_records(2, records.NONE, [(None, b"v" * 1000, ts)] * 300, timestamp_ms=ts)
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), num_partitions=1, quota_producer_default=100_000, quota_window_num=2) as b, \
            WireProxy((b.host, b.port), policy=stamp) as proxy, NetClient(proxy.bootstrap, client_id="throttled") as c:
        c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=["t"], allow_auto_topic_creation=True), timeout_ms=5000)
        resp = c.call(-1, lambda v: v.build(ApiKey.PRODUCE, transactional_id=None, acks=1, timeout_ms=5000,
                                            topics=[("t", [(0, big)])]), timeout_ms=10_000)
        answered = time.monotonic()
        # 300 KB at 100 KB/s over a 1 s minimum window: 2000 ms (the cap of a 2 x 1 s window)
        assert resp.API_VERSION >= 6 and resp.throttle_time_ms == 2000, resp
        c.call(-1, lambda v: v.build(ApiKey.METADATA, topics=[], allow_auto_topic_creation=False), timeout_ms=10_000)
    key, when = arrivals[-1]
    assert key == ApiKey.METADATA
    assert when - answered >= 1.8, when - answered  # held by the client, not written early
