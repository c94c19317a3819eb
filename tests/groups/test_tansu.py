"""A ZooKeeper group over Tansu, a broker that never touches ZooKeeper.

Partitions come from Tansu's Metadata API (``metadata.broker.list``); membership, ownership and
offsets live in ZooKeeper. Tansu speaks only the modern protocol (RecordBatch v2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.net import NetClient
from hmbclient.protocol.api.base import ApiKey
from rebalance import paths

from .conftest import drain, unique, wait_balanced

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 12


@pytest.fixture(scope="module")
def tansu() -> Iterator[Any]:
    from hmbclient.testing.tansu import LocalTansu

    with LocalTansu() as t:
        yield t


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    client = NetClient(bootstrap)
    try:

        def build(versions: Any) -> Any:
            return versions.build(
                ApiKey.CREATE_TOPICS,
                topics=[
                    {"topic": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
                ],
                timeout_ms=10_000,
                validate_only=False,
            )

        resp = client.call(client.bootstrap_ids[0], build, timeout_ms=15_000)
        assert resp.topics[0].error_code == 0, resp
    finally:
        client.close()


def test_group_over_tansu_shares_partitions_and_resumes_from_zookeeper_offsets(
    tansu: Any, admin_zk: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique("tansu"), unique("g")
    create_topic(tansu.bootstrap, topic, PARTITIONS)
    producer = make_producer(tansu.bootstrap)
    first = producer.spread(topic, 20, tag="a")

    consumers = [make_consumer(group, metadata_broker_list=tansu.bootstrap) for _ in range(2)]
    streams = [c.create_message_streams({topic: 1})[topic][0] for c in consumers]
    wait_balanced(admin_zk, group, topic, consumers, PARTITIONS)
    got = drain((f"c{i}", s) for i, s in enumerate(streams))
    assert Counter(got.values()) == Counter(first)
    assert {tag for tag in got.by_tag()} == {"c0", "c1"}
    for c in consumers:
        c.shutdown()
    assert {p: admin_zk.get(paths.offset_path(group, topic, p))[0] for p in range(PARTITIONS)} == {
        p: b"20" for p in range(PARTITIONS)
    }

    # The same group comes back: it starts where it committed, so only new messages arrive.
    second = producer.spread(topic, 5, tag="b")
    again = make_consumer(group, metadata_broker_list=tansu.bootstrap)
    stream = again.create_message_streams({topic: 3})[topic]
    assert again.await_rebalance(20)
    got2 = drain((f"s{i}", s) for i, s in enumerate(stream))
    assert Counter(got2.values()) == Counter(second)
