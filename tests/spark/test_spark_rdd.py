"""create_rdd on real local Spark (local[2]) against the embedded broker, ZooKeeper and Tansu."""

from __future__ import annotations

from typing import Any

import pytest
from spark_helpers import create_topic, produce

from encoders import StringDecoder
from hmbclient import MessageAndMetadata
from rebalance import paths
from spark_integration import (
    OffsetRange,
    commit_offset_ranges,
    create_rdd,
    get_earliest_offsets,
    get_latest_offsets,
    offset_ranges,
    ranges_from_group_offsets,
    read_group_offsets,
)

pytestmark = pytest.mark.timeout(240)


def _messages(prefix: str, per_partition: int, partitions: int = 4) -> list[tuple[int, bytes, bytes]]:
    return [
        (p, f"k{p}-{i % 5}".encode(), f"{prefix}-{p}-{i}".encode())
        for i in range(per_partition)
        for p in range(partitions)
    ]


@pytest.fixture(scope="module")
def topic_a(broker: Any) -> tuple[str, list]:
    """A 4-partition topic with 300 messages per partition."""
    create_topic(broker.bootstrap, "rdd-a", 4)
    return "rdd-a", produce(broker.bootstrap, "rdd-a", _messages("a", 300))


def test_create_rdd_one_partition_per_range_with_exact_contents(
    sc: Any, broker: Any, topic_a: tuple[str, list]
) -> None:
    topic, produced = topic_a
    params = {"metadata.broker.list": broker.bootstrap}
    earliest = get_earliest_offsets(params, [topic])
    latest = get_latest_offsets(params, [topic])
    assert earliest == {(topic, p): 0 for p in range(4)}
    assert latest == {(topic, p): 300 for p in range(4)}
    # Out of partition order on purpose, and partial ranges: partition i is ranges[i].
    ranges = [
        OffsetRange(topic, 2, 0, 300),
        OffsetRange(topic, 0, 10, 250),
        OffsetRange(topic, 3, 299, 300),
        OffsetRange(topic, 1, 0, 300),
    ]
    rdd = create_rdd(sc, params, ranges)
    assert rdd.getNumPartitions() == 4
    assert offset_ranges(rdd) == tuple(ranges)
    assert rdd.count() == sum(r.count for r in ranges)
    # Each partition prefers its leader's host (seen through the JVM RDD underneath; PySpark has
    # no public accessor for it or for preferred locations).
    base = rdd._prev_jrdd.rdd()
    assert [str(base.preferredLocations(p)) for p in base.partitions()] == [
        f"List({broker.host})"
    ] * 4

    by_partition = rdd.glom().collect()
    for r, got in zip(ranges, by_partition, strict=True):
        expected = [
            (k, v)
            for p, o, k, v in sorted(produced)
            if p == r.partition and r.from_offset <= o < r.until_offset
        ]
        assert got == expected, f"partition for {r} differs"

    # Decoders and a message handler, run on the executors (a local function: cloudpickle
    # ships it by value; executors cannot import test modules).
    def _handler(mam: MessageAndMetadata) -> tuple:
        return (mam.topic, mam.partition, mam.offset, mam.key, mam.message, mam.next_offset)

    decoded = create_rdd(
        sc, params, [OffsetRange(topic, 1, 5, 8)], key_decoder=StringDecoder(),
        value_decoder=StringDecoder(), message_handler=_handler,
    ).collect()
    assert decoded == [
        (topic, 1, o, f"k1-{o % 5}", f"a-1-{o}", o + 1) for o in (5, 6, 7)
    ]
    # Only the RDD create_rdd returned carries ranges.
    with pytest.raises(TypeError, match="create_rdd"):
        offset_ranges(rdd.map(lambda kv: kv))


def test_create_rdd_small_fetches_and_empty_ranges(sc: Any, broker: Any, topic_a: tuple) -> None:
    topic, _ = topic_a
    # 1 KiB fetches force many round trips per range; an empty range yields nothing.
    params = {"metadata.broker.list": broker.bootstrap, "fetch.message.max.bytes": 1024}
    rdd = create_rdd(sc, params, [OffsetRange(topic, 0, 0, 300), OffsetRange(topic, 1, 7, 7)])
    assert rdd.glom().map(len).collect() == [300, 0]
    assert create_rdd(sc, params, []).count() == 0


def test_range_past_the_end_fails_with_an_error_naming_it(
    sc: Any, broker: Any, topic_a: tuple
) -> None:
    topic, _ = topic_a
    params = {"metadata.broker.list": broker.bootstrap}
    rdd = create_rdd(sc, params, [OffsetRange(topic, 0, 0, 300), OffsetRange(topic, 3, 290, 310)])
    with pytest.raises(Exception) as info:
        rdd.count()
    text = str(info.value)
    assert "OffsetRangeError" in text
    assert f"offset range {topic}-3 [290, 310): ran out of messages at offset 300" in text
    with pytest.raises(Exception, match=r"rdd-a-2 \[400, 410\).*OffsetOutOfRange"):
        create_rdd(sc, params, [OffsetRange(topic, 2, 400, 410)]).collect()
    with pytest.raises(Exception, match="nope"):
        create_rdd(sc, params, [OffsetRange("nope", 0, 0, 1)])


def test_group_offsets_from_zookeeper_to_latest_and_committed_back(
    sc: Any, broker: Any, zookeeper: Any
) -> None:
    topic = "rdd-group"
    create_topic(broker.bootstrap, topic, 4)
    first = produce(broker.bootstrap, topic, _messages("g1", 20))
    params = {
        "metadata.broker.list": broker.bootstrap,
        "zookeeper.connect": zookeeper.connect,
        "group.id": "spark-g",
        "auto.offset.reset": "smallest",
    }
    ranges = ranges_from_group_offsets(params, [topic])
    assert ranges == [OffsetRange(topic, p, 0, 20) for p in range(4)]
    rdd = create_rdd(sc, params, ranges)
    assert sorted(rdd.values().collect()) == sorted(v for _, _, _, v in first)
    written = commit_offset_ranges(params, rdd)
    assert written == {(topic, p): 20 for p in range(4)}
    # What a lag tool (or a ConsumerConnector) reads: decimal next offsets in 0.8 znodes.
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper.connect)
    zk.start(timeout=15)
    try:
        assert zk.get(paths.offset_path("spark-g", topic, 3))[0] == b"20"
    finally:
        zk.stop()
        zk.close()
    assert read_group_offsets(zookeeper.connect, "spark-g", [(topic, 0), (topic, 9)]) == {
        (topic, 0): 20
    }

    second = produce(broker.bootstrap, topic, _messages("g2", 5))
    ranges = ranges_from_group_offsets(params, [topic])
    assert ranges == [OffsetRange(topic, p, 20, 25) for p in range(4)]
    assert sorted(create_rdd(sc, params, ranges).values().collect()) == sorted(
        v for _, _, _, v in second
    )


def test_create_rdd_against_tansu(sc: Any) -> None:
    from hmbclient.testing.tansu import LocalTansu

    with LocalTansu() as tansu:
        topic = "rdd-tansu"
        create_topic(tansu.bootstrap, topic, 4)
        produced = produce(tansu.bootstrap, topic, _messages("t", 50))
        # Ranges from what the broker acknowledged (Tansu's ListOffsets(latest) answers the
        # last batch's base offset + 1, so it cannot be trusted for the end of a log).
        ends: dict[int, int] = {}
        for p, o, _, _ in produced:
            ends[p] = max(ends.get(p, 0), o + 1)
        ranges = [OffsetRange(topic, p, 0, ends[p]) for p in range(4)]
        params = {"metadata.broker.list": tansu.bootstrap}
        rdd = create_rdd(sc, params, ranges)
        assert rdd.getNumPartitions() == 4
        assert sorted(rdd.collect()) == sorted((k, v) for _, _, k, v in produced)
        assert offset_ranges(rdd) == tuple(ranges)
