"""MetadataCache.is_ready is remembered per topic and forgotten on every change that can alter it."""

from __future__ import annotations

from hmbclient.broker.metadata import NO_LEADER, BrokerEndpoint, MetadataCache, PartitionMeta

B0 = BrokerEndpoint(0, "127.0.0.1", 9092)
B1 = BrokerEndpoint(1, "127.0.0.1", 9093)


def _meta(leader: int) -> PartitionMeta:
    return PartitionMeta(leader, 0, (leader,), (leader,))


def test_ready_follows_leaders_and_live_brokers() -> None:
    m = MetadataCache()
    assert not m.is_ready("t")  # unknown
    m.update(0, 1, [B0, B1], [("t", 0, _meta(0)), ("t", 1, _meta(NO_LEADER))])
    assert not m.is_ready("t")
    assert not m.is_ready("t")  # asked again: the remembered answer
    m.update(0, 1, [B0, B1], [("t", 1, _meta(1))])
    assert m.is_ready("t")
    m.update(0, 1, [B0], [])  # broker 1 (leader of partition 1) left
    assert not m.is_ready("t")
    m.update(0, 1, [B0, B1], [])
    assert m.is_ready("t")
    m.remove_topic("t")
    assert not m.is_ready("t")
    m.update(0, 1, [B0, B1], [("t", 0, _meta(0))])
    assert m.is_ready("t")


def test_unknown_topic_is_not_remembered() -> None:
    m = MetadataCache()
    for i in range(100):
        assert not m.is_ready(f"nope-{i}")
    assert m._ready == {}
