"""Log compaction for user topics (issue 27 part 1): the cleaner's decisions, passes on a Log,
CreateTopics configs, the cleaner thread in a broker (read back with our client and kafka-python)
and a kill -9 in the middle of a pass."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import BrokerProcess, EmbeddedBroker
from hmbclient.broker.log import cleaner
from hmbclient.broker.log.cleaner import SegmentInfo
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.overrides import log_config_with, validate_topic_configs
from hmbclient.errors import ConfigError
from hmbclient.protocol import records
from hmbclient.protocol.api import CreateTopicsRequest
from hmbclient.protocol.records import v2

from .conftest import RawClient, encode, fetch, produce, wait_until


# -- decisions -------------------------------------------------------------------------------------
def _seg(base: int, nxt: int, size: int = 100, mtime: int = 0, max_ts: int = 0) -> SegmentInfo:
    return SegmentInfo(base, nxt, size, mtime, max_ts)


def test_cleanable_end_stops_at_active_high_watermark_and_lag() -> None:
    segs = [_seg(0, 10, max_ts=100), _seg(10, 20, max_ts=200), _seg(20, 30, max_ts=300), _seg(30, 35)]
    assert cleaner.cleanable_end(segs, 35, 1000, 0) == 30  # never the active segment
    assert cleaner.cleanable_end(segs, 15, 1000, 0) == 10  # all of a segment below the HW
    assert cleaner.cleanable_end(segs, 35, 1000, 850) == 10  # records newer than the lag wait


def test_dirty_ratio_and_choice() -> None:
    segs = [_seg(0, 10, 300), _seg(10, 20, 100), _seg(20, 30, 100), _seg(30, 31, 5)]
    assert cleaner.dirty_ratio(segs, 10, 30) == (300, 200, 0.4)
    assert cleaner.dirty_ratio(segs, 0, 30)[2] == 1.0
    cands = [("a", 0.4, 0.5), ("b", 0.6, 0.5), ("c", 0.9, 0.5)]
    assert cleaner.choose_log(cands) == "c"
    assert cleaner.choose_log(cands, {"c"}) == "b"
    assert cleaner.choose_log(cands[:1]) is None
    assert cleaner.choose_log([("z", 0.0, 0.0)]) is None


def test_groups_fit_segment_bytes() -> None:
    segs = [_seg(0, 10, 300), _seg(10, 20, 300), _seg(20, 30, 500), _seg(30, 40, 900), _seg(40, 50, 50)]
    assert cleaner.group_segments(segs, 600) == [[0, 1], [2], [3], [4]]


def test_survival_rules() -> None:
    latest = {b"k": 10}
    assert not cleaner.record_survives(5, b"k", b"v", latest, False)
    assert cleaner.record_survives(10, b"k", b"v", latest, False)
    assert cleaner.record_survives(3, b"other", b"v", latest, False)  # not in the dirty range
    assert cleaner.record_survives(1, None, b"v", latest, True)  # keyless records stay
    assert cleaner.record_survives(10, b"k", None, latest, False)  # a fresh tombstone stays
    assert not cleaner.record_survives(10, b"k", None, latest, True)
    clean_old = _seg(0, 10, mtime=1000)
    assert cleaner.tombstone_droppable(clean_old, 10, 5000, 3000)
    assert not cleaner.tombstone_droppable(clean_old, 5, 5000, 3000)  # not cleaned before
    assert not cleaner.tombstone_droppable(clean_old, 10, 3500, 3000)  # too recent


def test_topic_configs_validated_and_applied() -> None:
    assert validate_topic_configs({"cleanup.policy": "delete, compact", "x": None}) == {"cleanup.policy": "compact,delete"}
    with pytest.raises(ConfigError, match="unknown topic config"):
        validate_topic_configs({"cleanup.polcy": "compact"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        validate_topic_configs({"cleanup.policy": "compress"})
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
        validate_topic_configs({"min.cleanable.dirty.ratio": "1.5"})
    base = LogConfig(retention_ms=1000)
    c = log_config_with(base, {"cleanup.policy": "compact"})
    assert c.compact and c.retention_ms is None
    c = log_config_with(base, {"cleanup.policy": "compact,delete", "delete.retention.ms": "5"})
    assert c.compact and c.retention_ms == 1000 and c.delete_retention_ms == 5


# -- passes on a Log -------------------------------------------------------------------------------
def _values(lg: Log) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for s in lg.segments:
        for r in records.decode_records(s.store.read(0, s.size)):
            assert r.key is not None
            out[r.key] = (r.offset, r.value)
    return out


def _all(lg: Log) -> list[records.Record]:
    return [r for s in lg.segments for r in records.decode_records(s.store.read(0, s.size))]


def test_pass_keeps_newest_per_key_producer_fields_and_offsets(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=700, compact=True, retention_ms=None))
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for i in range(60):
        items = [(b"k%d" % ((i * 3 + j) % 7), b"v%d-%d" % (i, j), 1000 + i) for j in range(3)]
        buf = v2.encode(records.NONE, items, 0, 0, producer=(77, 3, i * 3))
        info = lg.append(buf)
        for j, (k, v, _) in enumerate(items):
            model[k] = (info.first_offset + j, v)
    end = lg.log_end_offset
    active = lg.segments[-1].base_offset
    before = len(_all(lg))
    res = cleaner.clean_log(lg, 0)
    assert res is not None and res.first_dirty == active and res.dropped > 0
    assert len(_all(lg)) == before - res.dropped
    assert lg.log_end_offset == end and lg.log_start_offset == 0
    assert _values(lg) == model  # the newest value of each key, at its own offset
    # every rewritten batch keeps its producer id/epoch, and sequence = base seq + offset delta
    for s in lg.segments:
        data = s.store.read(0, s.size)
        for e in records.scan_entries(data)[0]:  # CRCs verified
            h = records.control.batch_header(data, e.position)
            assert (h.producer_id, h.producer_epoch) == (77, 3)
            assert h.base_sequence == h.base_offset  # sequences were written equal to offsets
    # a reader finds every kept offset, gaps skipped
    sl, _ = lg.read(0, 1 << 20)
    assert sl is not None and records.decode_records(sl.read())[0].offset >= 0
    again = cleaner.clean_log(lg, res.first_dirty)
    assert again is None  # nothing dirty until the active segment rolls


def test_tombstones_go_after_delete_retention(tmp_path: Path) -> None:
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=300, compact=True, retention_ms=None, delete_retention_ms=0))
    for i in range(10):
        lg.append(encode([(b"a", b"x%d" % i), (b"b", b"y%d" % i)]))
    lg.append(encode([(b"a", None)]))
    for i in range(10):
        lg.append(encode([(b"c", b"z%d" % i)]))
    first = cleaner.clean_log(lg, 0)
    assert first is not None
    vals = _values(lg)
    assert vals[b"a"][1] is None  # the tombstone survives its first cleaning
    # more dirty data, so a second pass runs; the tombstone's segment is clean by now
    for i in range(10):
        lg.append(encode([(b"c", b"w%d" % i)]))
    second = cleaner.clean_log(lg, first.first_dirty, now_ms=first_now() + 10)
    assert second is not None
    vals = _values(lg)
    assert b"a" not in vals and vals[b"b"][1] == b"y9"


def first_now() -> int:
    from hmbclient.clock import wall_ms

    return wall_ms()


def test_compact_delete_also_applies_retention(tmp_path: Path) -> None:
    cfg = log_config_with(LogConfig(segment_bytes=300), {"cleanup.policy": "compact,delete", "retention.bytes": "600"})
    lg = Log(str(tmp_path / "t-0"), cfg)
    for i in range(40):
        lg.append(encode([(b"k%d" % i, b"v%d" % i)]))
    lg.append(encode([(b"k39", b"newer")]))
    assert lg.apply_retention(first_now()) > 0 and lg.log_start_offset > 0
    res = cleaner.clean_log(lg, lg.log_start_offset)
    assert res is not None and res.dropped == 0 or _values(lg)[b"k39"][1] == b"newer"


def test_start_up_completes_a_committed_swap(tmp_path: Path) -> None:
    """A crash after the .swap rename: start-up deletes the segments in its range and puts it
    in place; a .cleaned file is dropped. Every newest value survives either way."""
    d = tmp_path / "t-0"
    lg = Log(str(d), LogConfig(segment_bytes=300, compact=True, retention_ms=None))
    for i in range(40):
        lg.append(encode([(b"k%d" % (i % 3), b"v%d" % i)]))
    model = _values(lg)
    segs = lg.segments
    # what a pass would write for the first two segments, staged by hand as a crash leaves it
    latest = {r.key: r.offset for s in segs[:2] for r in records.decode_records(s.store.read(0, s.size)) if r.key}
    kept = b"".join(
        e for s in segs[:2] for e in [records.encode_records(2, records.NONE, [(r.key, r.value, r.timestamp)], base_offset=r.offset)
                                      for r in records.decode_records(s.store.read(0, s.size)) if latest[r.key] == r.offset]
    )
    lg.close()
    (d / f"{0:020d}.{segs[1].next_offset:020d}.log.swap").write_bytes(kept)
    (d / f"{segs[2].base_offset:020d}.log.cleaned").write_bytes(b"junk")
    os.unlink(d / f"{0:020d}.index")  # the crash came after the first deletion
    again = Log(str(d), LogConfig(segment_bytes=300, compact=True, retention_ms=None))
    names = sorted(os.listdir(d))
    assert not [n for n in names if n.endswith((".swap", ".cleaned"))]
    assert f"{segs[1].base_offset:020d}.log" not in names
    assert _values(again) == model
    assert again.log_end_offset == 40


# -- in a broker -----------------------------------------------------------------------------------
_FAST = {
    "log_cleaner_backoff_ms": 50,
    "log_retention_check_interval_ms": 100,
}
_TOPIC_CONFIGS = [("cleanup.policy", "compact"), ("segment.bytes", "2000"), ("min.cleanable.dirty.ratio", "0.01")]


def _create(c: RawClient, topic: str, configs: list[tuple[str, str | None]]) -> Any:
    resp = c.request(CreateTopicsRequest[1](topics=[(topic, 1, 1, [], configs)], timeout_ms=10_000, validate_only=False))
    return resp.topics[0]


def _our_read(c: RawClient, topic: str) -> dict[bytes, bytes | None]:
    out: dict[bytes, bytes | None] = {}
    offset = 0
    while True:
        p = fetch(c, topic, 0, offset)
        recs = records.decode_records(p.records or b"")
        if not recs:
            return out
        for r in recs:
            assert r.key is not None
            out[r.key] = r.value
        offset = recs[-1].offset + 1


def _produce_rounds(c: RawClient, topic: str, rounds: int, keys: int) -> dict[bytes, bytes]:
    model: dict[bytes, bytes] = {}
    for i in range(rounds):
        items = [(b"key-%03d" % k, b"value-%d-%d" % (i, k) + b"." * 40) for k in range(keys)]
        r = produce(c, topic, 0, encode(items))
        assert r.error_code == 0
        model.update(items)
    return model


def test_broker_cleans_compacted_topic_and_peers_read_it(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), **_FAST) as b:
        with RawClient(b.host, b.port) as c:
            bad = _create(c, "bad", [("cleanup.policy", "compress")])
            assert bad.error_code == 40 and "cleanup.policy" in bad.error_message  # INVALID_CONFIG
            assert _create(c, "kv", _TOPIC_CONFIGS).error_code == 0
            model = _produce_rounds(c, "kv", 30, 10)
            lg = b.broker.logs.get("kv", 0)
            assert lg.config.compact and lg.config.segment_bytes == 2000
            wait_until(lambda: len(_all(lg)) < 150, 20, "the cleaner thread to compact kv")
            assert _our_read(c, "kv") == model
        from kafka import KafkaConsumer, TopicPartition

        kc = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=None, consumer_timeout_ms=3000, enable_auto_commit=False)
        try:
            tp = TopicPartition("kv", 0)
            kc.assign([tp])
            kc.seek_to_beginning(tp)
            got = {}
            for m in kc:
                got[m.key] = m.value
                if m.offset == lg.log_end_offset - 1:
                    break
        finally:
            kc.close()
        assert got == model
        # hmb topics --create --config; a bad config is refused with the broker's reason
        from hmbclient.cli import main

        assert main(["topics", "-b", b.bootstrap, "--create", "kv2", "--partitions", "1", "--replication-factor", "1",
                     "--config", "cleanup.policy=compact,delete", "--config", "delete.retention.ms=5"]) == 0
        c2 = b.broker.logs.get("kv2", 0) or wait_until(lambda: b.broker.logs.get("kv2", 0), 10, "kv2's log")
        assert c2.config.compact and c2.config.retention_ms is not None and c2.config.delete_retention_ms == 5
        assert main(["topics", "-b", b.bootstrap, "--create", "kv3", "--partitions", "1", "--replication-factor", "1",
                     "--config", "cleanup.policy=shred"]) == 1
        assert "kv3" not in b.broker.logs.topics()
        # kafka-python's admin client creates a compacted topic the same way
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            admin.create_topics([NewTopic("kp", 1, 1, topic_configs={"cleanup.policy": "compact", "min.compaction.lag.ms": "100"})])
        finally:
            admin.close()
        kp = wait_until(lambda: b.broker.logs.get("kp", 0), 10, "kp's log")
        assert kp.config.compact and kp.config.min_compaction_lag_ms == 100 and kp.config.retention_ms is None
    # the override survives a restart of the standalone broker (topic-configs.json)
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), **_FAST) as b:
        assert b.broker.logs.get("kv", 0).config.compact


def test_kill_9_in_the_middle_of_a_cleaning_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bp = BrokerProcess(str(data), log_cleaner_io_max_bytes_per_second=20_000, **_FAST)
    bp.start()
    try:
        with RawClient(bp.host, bp.port) as c:
            assert _create(c, "kv", _TOPIC_CONFIGS).error_code == 0
            model = _produce_rounds(c, "kv", 40, 10)
        part = data / "kv-0"
        wait_until(lambda: any(n.endswith(".cleaned") for n in os.listdir(part)), 20, "a cleaning in progress")
        bp.kill()
        bp.start()
        names = os.listdir(part)
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
        with RawClient(bp.host, bp.port) as c:
            assert _our_read(c, "kv") == model
            # the cleaner carries on after the restart and still loses nothing
            wait_until(lambda: cleaner_passes(data) > 0, 60, "a completed pass after the restart")
            assert _our_read(c, "kv") == model
    finally:
        bp.kill()


def cleaner_passes(data: Path) -> int:
    p = data / cleaner.CLEANER_CHECKPOINT
    return len(p.read_text().split("\n")) - 3 if p.exists() else 0


def test_replicated_compacted_topic_in_a_zookeeper_cluster(zookeeper: Any, tmp_path: Path) -> None:
    """Two brokers on ZooKeeper: the topic's configs are stored in /config/topics as Kafka does,
    both replicas' logs are compacted, the follower keeps replicating past the leader's gaps and
    both end with the newest value of every key."""
    from kazoo.client import KazooClient

    from hmbclient.broker import EmbeddedCluster

    chroot = "/hmb-compaction-test"
    with EmbeddedCluster(brokers=2, zookeeper_connect=zookeeper.connect + chroot, log_dir=str(tmp_path / "c"), **_FAST) as cl:
        b = cl.brokers[0]
        with RawClient(b.host, b.port) as c:
            resp = c.request(CreateTopicsRequest[1](topics=[("rkv", 1, 2, [], _TOPIC_CONFIGS)], timeout_ms=10_000, validate_only=False))
            assert resp.topics[0].error_code == 0
        zk = KazooClient(hosts=zookeeper.connect + chroot)
        zk.start(timeout=10)
        try:
            import json

            assert json.loads(zk.get("/config/topics/rkv")[0])["config"]["cleanup.policy"] == "compact"
        finally:
            zk.stop()
            zk.close()
        leader = cl.broker(cl.leader("rkv", 0))
        with RawClient(leader.host, leader.port) as c:
            model = _produce_rounds(c, "rkv", 30, 10)
            logs = [br.logs.get("rkv", 0) for br in cl.brokers]
            assert all(lg.config.compact for lg in logs)
            wait_until(lambda: all(len(_all(lg)) < 150 and lg.log_end_offset == 300 for lg in logs), 30, "both replicas compacted")
            assert _our_read(c, "rkv") == model
        # (a replica's cleaner may still be swapping a group: a read of a replaced segment
        # raises, and is tried again)
        wait_until(lambda: all({k: v for k, (_, v) in _values(lg).items()} == model for lg in logs), 10, "both replicas hold the model")
