"""While the ZooKeeper connection is SUSPENDED a member hands out nothing; it resumes when the
same session reconnects.

A private LocalZooKeeper is stopped (the member's connection drops: SUSPENDED) and started again
on the same port and data within the session timeout, so the session survives. Messages produced
meanwhile are fetched into the stream's queue but not handed out until the connection is back:
another member might own the partitions by then if the session had expired, and the member
cannot know until it reconnects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.consumer.connector import ConsumerEvent
from hmbclient.errors import ConsumerTimeoutError

from .conftest import PARTITIONS, unique, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def lone_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("susp")), num_partitions=PARTITIONS) as b:
        yield b


def take(stream: Any, n: int) -> list[tuple[int, bytes]]:
    out = []
    while len(out) < n:
        m = next(stream)
        out.append((m.partition, m.message))
    return out


def test_suspended_connection_pauses_hand_out_until_the_session_reconnects(
    zookeeper_factory: Any, lone_broker: Any, make_consumer: Any, make_producer: Any
) -> None:
    zk = zookeeper_factory()
    topic = unique("susp")
    producer = make_producer(lone_broker.bootstrap)
    events: list[ConsumerEvent] = []

    c = make_consumer(
        unique("g"),
        zk=zk.connect,
        metadata_broker_list=lone_broker.bootstrap,
        zookeeper_session_timeout_ms=15_000,
        consumer_timeout_ms=300,
        status_listener=events.append,
    )
    stream = c.create_message_streams({topic: 1})[topic][0]
    first = producer.spread(topic, 3, tag="a")
    assert c.await_rebalance(20)
    assert Counter(take(stream, len(first))) == Counter(first)

    zk.stop()
    wait_for(lambda: any(e.kind == "zookeeper_suspended" for e in events), 20, "SUSPENDED")
    second = producer.spread(topic, 3, tag="b")
    # The fetchers keep filling the queue, but nothing is handed out while suspended. (A
    # stream's queue has no public size: reading it is the only way to see "fetched, not given".)
    wait_for(lambda: stream.queued > 0, 10, "chunks fetched while suspended")
    for _ in range(3):
        with pytest.raises(ConsumerTimeoutError):
            next(stream)

    suspended_at = max(i for i, e in enumerate(events) if e.kind == "zookeeper_suspended")
    zk.start()
    wait_for(
        lambda: any(e.kind == "zookeeper_connected" for e in events[suspended_at:]), 30, "reconnected"
    )
    try:
        got = take(stream, len(second))
    except ConsumerTimeoutError:
        raise AssertionError(f"nothing after reconnecting; events: {[(e.kind, dict(e.fields)) for e in events]}") from None
    assert Counter(got) == Counter(second)
    kinds = [e.kind for e in events]
    assert "zookeeper_lost" not in kinds, "the session survived the restart"
    assert len(c.owned_partitions()) == PARTITIONS
