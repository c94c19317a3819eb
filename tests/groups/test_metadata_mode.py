"""Groups over a broker that never touches ZooKeeper: partitions come from the Metadata API.

One EmbeddedBroker without ``zookeeper_connect``; ZooKeeper holds only the group (ids,
owners, offsets). This is how groups run over Tansu and HMB too (see test_tansu.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from rebalance import paths

from .conftest import PARTITIONS, drain, owners, unique, wait_balanced

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def lone_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(
        port=0, log_dir=str(tmp_path_factory.mktemp("lone")), num_partitions=PARTITIONS
    ) as b:
        yield b


def test_two_consumers_share_partitions_and_consume_each_message_once(
    lone_broker: Any, admin_zk: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique("md"), unique("g")
    producer = make_producer(lone_broker.bootstrap)
    sent = producer.spread(topic, 50)
    consumers = [make_consumer(group, metadata_broker_list=lone_broker.bootstrap) for _ in range(2)]
    streams = [c.create_message_streams({topic: 2})[topic] for c in consumers]

    own = wait_balanced(admin_zk, group, topic, consumers, PARTITIONS)
    assert Counter(t.rsplit("-", 1)[0] for t in own.values()) == {
        consumers[0].consumer_id: 6,
        consumers[1].consumer_id: 6,
    }

    got = drain((f"c{i}-s{j}", s) for i, ss in enumerate(streams) for j, s in enumerate(ss))
    values = got.values()
    assert Counter(values) == Counter(sent), "every message exactly once"
    # A partition feeds exactly one stream.
    feeders: dict[int, set[str]] = {}
    for tag, m in got.messages:
        feeders.setdefault(m.partition, set()).add(tag)
    assert all(len(tags) == 1 for tags in feeders.values()), feeders

    for c in consumers:
        c.shutdown()
    # Clean shutdown: everything committed (next offset to consume), nothing owned or registered.
    for p in range(PARTITIONS):
        data, _ = admin_zk.get(paths.offset_path(group, topic, p))
        assert data == b"50"
    assert owners(admin_zk, group, topic) == {}
    assert admin_zk.get_children(paths.consumer_ids_path(group)) == []
