"""Consumer groups on a 3-broker EmbeddedCluster registered in ZooKeeper (Kafka 0.8 layout).

Brokers and topics are found in ``/brokers``; each test uses its own topic (12 partitions,
leaders spread over the three brokers) and its own group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from encoders import StringDecoder
from hmbclient.consumer.connector import ConsumerEvent
from hmbclient.consumer.offsets import KafkaOffsetStorage
from hmbclient.errors import MessageSizeTooLargeError
from hmbclient.net import NetClient
from rebalance import paths
from rebalance.filters import Blacklist, Whitelist

from .conftest import PARTITIONS, Collector, drain, owners, unique, wait_balanced, wait_for

pytestmark = pytest.mark.timeout(120)


def _broker_offsets(cluster: Any, group: str, topic: str) -> dict[tuple[str, int], int | None]:
    """The group's offsets as its coordinator answers OffsetFetch (an observer of our own)."""
    with NetClient(cluster.bootstrap) as client:
        return KafkaOffsetStorage(client, group).fetch([(topic, p) for p in range(PARTITIONS)])


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_consumers_balanced_and_every_message_consumed_once(
    n: int, cluster: Any, admin_zk: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique(f"bal{n}"), unique("g")
    producer = make_producer(cluster.bootstrap)
    sent = producer.spread(topic, 40)
    consumers = [make_consumer(group) for _ in range(n)]
    streams = [c.create_message_streams({topic: 1})[topic][0] for c in consumers]
    wait_balanced(admin_zk, group, topic, consumers, PARTITIONS)

    got = drain((c.consumer_id, s) for c, s in zip(consumers, streams, strict=True))
    assert Counter(got.values()) == Counter(sent), "every message exactly once"
    per = {tag: {m.partition for m in ms} for tag, ms in got.by_tag().items()}
    assert sorted(len(p) for p in per.values()) == sorted(
        PARTITIONS // n + (1 if i < PARTITIONS % n else 0) for i in range(n)
    )
    for c in consumers:
        c.shutdown()
    committed = {p: admin_zk.get(paths.offset_path(group, topic, p))[0] for p in range(PARTITIONS)}
    assert committed == {p: b"40" for p in range(PARTITIONS)}
    assert owners(admin_zk, group, topic) == {}
    assert admin_zk.get_children(paths.consumer_ids_path(group)) == []


def test_join_and_leave_mid_stream_move_partitions_and_lose_nothing(
    cluster: Any, admin_zk: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique("mid"), unique("g")
    producer = make_producer(cluster.bootstrap)
    producer.partitions(topic)
    sent: list[tuple[int, bytes]] = []
    stop_producing = threading.Event()

    def produce() -> None:
        i = 0
        while not stop_producing.is_set():
            for p in range(PARTITIONS):
                v = f"{p}-{i}".encode()
                producer.send(topic, p, [v])
                sent.append((p, v))
            i += 1
            time.sleep(0.01)  # pacing: a steady stream while members join and leave

    done = threading.Event()
    col = Collector()
    a, b = make_consumer(group), make_consumer(group)
    for c in (a, b):
        for s in c.create_message_streams({topic: 2})[topic]:
            col.consume(c.consumer_id, s, until=done)
    wait_balanced(admin_zk, group, topic, [a, b], PARTITIONS)
    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    wait_for(lambda: len(col.messages) >= 5 * PARTITIONS, 30, "consumption under way")

    c = make_consumer(group)  # joins mid-stream
    for s in c.create_message_streams({topic: 2})[topic]:
        col.consume(c.consumer_id, s, until=done)
    wait_balanced(admin_zk, group, topic, [a, b, c], PARTITIONS)
    wait_for(lambda: bool(col.by_tag().get(c.consumer_id)), 30, "the joiner consuming its share")
    before_leave = len(col.messages)
    b.shutdown()  # leaves mid-stream
    wait_balanced(admin_zk, group, topic, [a, c], PARTITIONS)
    wait_for(lambda: len(col.messages) >= before_leave + 5 * PARTITIONS, 30, "consumption after the leave")
    stop_producing.set()
    feeder.join(10)
    done.set()
    col.join(60)

    assert len(col.messages) > before_leave
    assert Counter(col.values()) == Counter(sent), "clean rebalances: nothing lost, nothing twice"
    # Ownership really moved: c consumed something, b stopped after leaving.
    tags = col.by_tag()
    assert tags.get(c.consumer_id), "the joining consumer got a share"
    for tag in (a.consumer_id, b.consumer_id):
        assert tags.get(tag)


def test_killed_member_partitions_move_after_session_timeout(
    cluster: Any, admin_zk: Any, zk_connect: str, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique("kill"), unique("g")
    producer = make_producer(cluster.bootstrap)
    first = producer.spread(topic, 60, tag="a")
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("member_proc.py")),
            zk_connect,
            group,
            topic,
            "auto.offset.reset=smallest",
            "zookeeper.session.timeout.ms=4000",
            "auto.commit.interval.ms=200",
            "consumer.timeout.ms=500",
            "fetch.wait.max.ms=50",
            "queued.max.message.chunks=1",
            "delay=0.01",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    child_lines: list[str] = []

    def read_child() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            child_lines.append(line.strip())

    reader = threading.Thread(target=read_child, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(line.startswith("READY") for line in child_lines), 30, "the child to join")
        child_id = next(line.split()[1] for line in child_lines if line.startswith("READY"))
        parent = make_consumer(group, **{"auto.commit.interval.ms": 200})
        col = Collector()
        done = threading.Event()
        col.consume("parent", parent.create_message_streams({topic: 1})[topic][0], until=done)
        wait_for(
            lambda: parent.await_rebalance(0.2)
            and len(parent.owned_partitions()) == PARTITIONS // 2
            and len(owners(admin_zk, group, topic)) == PARTITIONS,
            30,
            "parent and child sharing the partitions",
        )
        # Let the child consume part of its share (it is slowed down to stay mid-way).
        wait_for(lambda: sum(line.startswith("M ") for line in child_lines) >= 40, 30, "child progress")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        killed_at = time.monotonic()
        reader.join(5)
        committed_at_kill = {}
        for p in range(PARTITIONS):
            path = paths.offset_path(group, topic, p)
            committed_at_kill[p] = int(admin_zk.get(path)[0]) if admin_zk.exists(path) else 0
        child_owned = {p for p, t in owners(admin_zk, group, topic).items() if t.startswith(child_id)}
        assert len(child_owned) == PARTITIONS // 2

        # The dead member's ephemeral nodes vanish with its session; the parent takes over.
        wait_for(lambda: len(parent.owned_partitions()) == PARTITIONS and parent.await_rebalance(0.2), 20, "takeover")
        took = time.monotonic() - killed_at
        assert took > 2.0, "ownership cannot move before the session times out"
        second = producer.spread(topic, 10, tag="b")
        by_child = {(int(p), v.encode()) for _, p, _o, v in (ln.split(" ", 3) for ln in child_lines if ln.startswith("M "))}
        wait_for(
            lambda: {(m.partition, m.message) for _, m in col.messages} | by_child >= (first | second),
            30,
            "everything delivered",
        )
        done.set()
        col.join(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)

    child_msgs = [(int(p), int(o), v.encode()) for _, p, o, v in (line.split(" ", 3) for line in child_lines if line.startswith("M "))]
    parent_msgs = [(m.partition, m.offset, m.message) for _, m in col.messages]
    delivered = Counter((p, v) for p, _, v in child_msgs + parent_msgs)
    assert set(delivered) == first | second, "every message delivered at least once"
    dups = {(p, o) for p, o, _ in parent_msgs} & {(p, o) for p, o, _ in child_msgs}
    # Duplicates come only from the dead member's uncommitted window.
    for p, o in dups:
        assert p in child_owned and o >= committed_at_kill[p], (p, o, committed_at_kill[p])
    assert not [k for k, n in Counter((p, o) for p, o, _ in parent_msgs).items() if n > 1]


def test_expired_session_member_gets_its_share_back_and_keeps_consuming(
    cluster: Any, admin_zk: Any, zk_connect: str, make_consumer: Any, make_producer: Any
) -> None:
    from kazoo.client import KazooClient

    topic, group = unique("exp"), unique("g")
    producer = make_producer(cluster.bootstrap)
    first = producer.spread(topic, 20, tag="a")
    events: list[ConsumerEvent] = []
    a = make_consumer(group, status_listener=events.append)
    b = make_consumer(group)
    col, done = Collector(), threading.Event()
    for c in (a, b):
        col.consume(c.consumer_id, c.create_message_streams({topic: 1})[topic][0], until=done)
    wait_balanced(admin_zk, group, topic, [a, b], PARTITIONS)
    wait_for(lambda: {(m.partition, m.message) for _, m in col.messages} >= first, 30, "first batch")

    # Private on purpose: stealing a session needs its password, which only a's ZooKeeper
    # client holds.
    rb = a._rebalancer
    old = rb.zk.client_id
    thief = KazooClient(zk_connect, client_id=old)
    thief.start(timeout=15)
    thief.stop()  # closes a's session on the server: its ephemeral nodes are gone
    thief.close()
    wait_for(lambda: rb.zk.client_id is not None and rb.zk.client_id[0] != old[0], 20, "a new session")
    own = wait_balanced(admin_zk, group, topic, [a, b], PARTITIONS)
    assert sum(1 for t in own.values() if t.startswith(a.consumer_id)) == PARTITIONS // 2
    kinds = [e.kind for e in events]
    assert "zookeeper_lost" in kinds and kinds.count("registered") >= 2

    second = producer.spread(topic, 10, tag="b")
    wait_for(lambda: {(m.partition, m.message) for _, m in col.messages} >= first | second, 30, "second batch")
    done.set()
    col.join(30)
    assert set(col.values()) == first | second


def test_whitelist_picks_up_a_topic_created_later_and_blacklist_excludes(
    cluster: Any, admin_zk: Any, make_consumer: Any, make_producer: Any
) -> None:
    prefix = unique("wl").replace("-", "_")
    producer = make_producer(cluster.bootstrap)
    a_msgs = producer.spread(f"{prefix}.a", 5)
    skip_msgs = producer.spread(f"{prefix}.skip", 5)
    wl = make_consumer(unique("g"))
    wl_streams = wl.create_message_streams_by_filter(Whitelist(rf"{prefix}\.(a|b)"), num_streams=2)
    bl = make_consumer(unique("g"))
    bl_streams = bl.create_message_streams_by_filter(Blacklist(rf"(?!{prefix}\.).*|{prefix}\.skip"), 1)
    col, done = Collector(), threading.Event()
    for i, s in enumerate(wl_streams):
        col.consume(f"wl{i}", s, until=done)
    col.consume("bl", bl_streams[0], until=done)
    assert wl.await_rebalance(20) and bl.await_rebalance(20)

    b_msgs = producer.spread(f"{prefix}.b", 5)  # created (auto) after the members joined

    def seen(tagp: str) -> set[tuple[str, int, bytes]]:
        return {(m.topic, m.partition, m.message) for t, m in col.messages if t.startswith(tagp)}

    want = {(f"{prefix}.a", p, v) for p, v in a_msgs} | {(f"{prefix}.b", p, v) for p, v in b_msgs}
    wait_for(lambda: seen("wl") >= want, 30, "whitelist consumed both topics")
    wait_for(lambda: seen("bl") >= want, 30, "blacklist consumed both topics")
    done.set()
    col.join(30)
    assert seen("wl") == want and seen("bl") == want, "skip topic never consumed"
    assert skip_msgs
    assert {t for t, _ in wl.owned_partitions()} == {f"{prefix}.a", f"{prefix}.b"}


def test_kafka_offsets_storage_with_dual_commit_and_listener_callbacks(
    cluster: Any, admin_zk: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic, group = unique("kos"), unique("g")
    producer = make_producer(cluster.bootstrap)
    first = producer.spread(topic, 10, tag="a")
    calls: list[tuple[str, int]] = []

    class Listener:
        def on_partitions_revoked(self, partitions: list[tuple[str, int]]) -> None:
            calls.append(("revoked", len(partitions)))

        def on_partitions_assigned(self, partitions: list[tuple[str, int]]) -> None:
            calls.append(("assigned", len(partitions)))

    # The group's first OffsetFetch creates the replicated offsets topic and waits for its
    # leaders and for the coordinator to load; on a loaded machine that outlasts FAST's 1.5 s
    # consumer timeout, which would end the stream before the first message.
    c = make_consumer(
        group,
        offsets_storage="kafka",
        dual_commit_enabled=True,
        rebalance_listener=Listener(),
        consumer_timeout_ms=8000,
    )
    stream = c.create_message_streams({topic: 1}, value_decoder=StringDecoder())[topic][0]
    got = drain([("c", stream)])
    assert {(m.partition, m.message) for _, m in got.messages} == {(p, v.decode()) for p, v in first}
    c.commit_offsets()
    # Committed to the broker's offset manager (OffsetFetch) and, dual, to ZooKeeper.
    assert _broker_offsets(cluster, group, topic) == {(topic, p): 10 for p in range(PARTITIONS)}
    assert admin_zk.get(paths.offset_path(group, topic, 0))[0] == b"10"
    c.shutdown()
    assert ("assigned", PARTITIONS) in calls and ("revoked", PARTITIONS) in calls

    # Only the broker has the newer offsets (ZooKeeper is rolled back): a kafka-storage group
    # takes the larger of the two and resumes after them.
    for p in range(PARTITIONS):
        admin_zk.set(paths.offset_path(group, topic, p), b"0")
    second = producer.spread(topic, 3, tag="b")
    again = make_consumer(group, offsets_storage="kafka", dual_commit_enabled=True)
    got2 = drain([("c", again.create_message_streams({topic: 1})[topic][0])])
    assert Counter(got2.values()) == Counter(second)


def test_largest_reset_skips_history_and_oversized_messages_raise(
    cluster: Any, make_consumer: Any, make_producer: Any
) -> None:
    topic = unique("big")
    producer = make_producer(cluster.bootstrap)
    producer.spread(topic, 5, tag="old")
    c = make_consumer(unique("g"), auto_offset_reset="largest")
    stream = c.create_message_streams({topic: 1})[topic][0]
    assert c.await_rebalance(20)
    # No public view of a connector's fetch positions; without this wait, "largest" could be
    # resolved after the new messages below arrive and skip them.
    wait_for(lambda: all(pti.fetch_offset is not None for pti in c._ptis.values()), 10, "positions reset")
    new = producer.spread(topic, 2, tag="new")
    got = drain([("c", stream)])
    assert Counter(got.values()) == Counter(new)

    # Legacy fetches (0.8) return a truncated message when it exceeds the fetch size (Fetch v3+
    # brokers send the whole first batch instead, KIP-74).
    small = make_consumer(unique("g"), fetch_message_max_bytes=64, api_version="0.8")
    big_topic = unique("big")
    producer.send(big_topic, 0, [b"x" * 500])
    s = small.create_message_streams({big_topic: 1})[big_topic][0]
    with pytest.raises(MessageSizeTooLargeError):
        next(iter(s))


def test_kafka_offsets_follow_a_moving_coordinator(cluster: Any, make_consumer: Any, make_producer: Any) -> None:
    from hmbclient.broker.offset_manager import partition_for_group

    topic, group = unique("coord"), unique("g")
    producer = make_producer(cluster.bootstrap)
    first = producer.spread(topic, 5, tag="a")
    c = make_consumer(
        group,
        offsets_storage="kafka",
        dual_commit_enabled=False,
        auto_commit_enable=False,
        offsets_channel_backoff_ms=50,
    )
    stream = c.create_message_streams({topic: 1})[topic][0]
    assert Counter(drain([("c", stream)]).values()) == Counter(first)
    c.commit_offsets()
    # The group's coordinator is the leader of its partition of the offsets topic.
    offsets_partition = partition_for_group(group, cluster.broker(0).config.offsets_topic_num_partitions)
    old = cluster.leader("__consumer_offsets", offsets_partition)
    assert old is not None
    new = (old + 1) % 3
    cluster.move_leader("__consumer_offsets", offsets_partition, new)

    second = producer.spread(topic, 2, tag="b")
    assert Counter(drain([("c", stream)]).values()) == Counter(second)
    c.commit_offsets()  # the old coordinator says NOT_COORDINATOR: look it up again, retry
    # Only the new coordinator can hold these offsets: the old one refused the commit.
    assert _broker_offsets(cluster, group, topic) == {(topic, p): 7 for p in range(PARTITIONS)}


def test_fetchers_follow_a_moving_leader(cluster: Any, make_consumer: Any, make_producer: Any) -> None:
    topic = unique("lead")
    producer = make_producer(cluster.bootstrap)
    first = producer.spread(topic, 5, tag="a")
    c = make_consumer(unique("g"))
    col, done = Collector(), threading.Event()
    col.consume("c", c.create_message_streams({topic: 1})[topic][0], until=done)
    wait_for(lambda: set(col.values()) >= first, 30, "first batch")
    for p in (0, 1, 2):
        old = cluster.leader(topic, p)
        cluster.move_leader(topic, p, (old + 1) % 3)
    second = producer.spread(topic, 5, tag="b")
    wait_for(lambda: set(col.values()) >= first | second, 30, "messages from the new leaders")
    done.set()
    col.join(30)
    assert Counter(col.values()) == Counter(first | second)


def test_api_md_usage_static_and_filter_streams_on_one_connector(
    cluster: Any, admin_zk: Any, zk_connect: str, make_producer: Any
) -> None:
    from hmbclient import Consumer

    topic, group = unique("api"), unique("g")
    prefix = unique("events").replace("-", "_")
    producer = make_producer(cluster.bootstrap)
    static_sent = producer.spread(topic, 4)
    filtered_sent = producer.spread(f"{prefix}.clicks", 3)
    connector = Consumer.create(
        {
            "zookeeper.connect": zk_connect,
            "group.id": group,
            "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 1500,
            "zookeeper.session.timeout.ms": 4000,
        }
    )
    try:
        streams = connector.create_message_streams(
            {topic: 2}, key_decoder=StringDecoder(), value_decoder=StringDecoder()
        )
        by_filter = connector.create_message_streams_by_filter(Whitelist(rf"{prefix}\..*"), num_streams=2)
        assert connector.await_rebalance(20)
        ids = sorted(admin_zk.get_children(paths.consumer_ids_path(group)))
        assert ids == sorted([connector.consumer_id, f"{connector.consumer_id}-s1"])
        got = drain([(f"s{i}", s) for i, s in enumerate(streams[topic])] + [(f"f{i}", s) for i, s in enumerate(by_filter)])
        static = [m for tag, m in got.messages if tag.startswith("s")]
        filtered = [m for tag, m in got.messages if tag.startswith("f")]
        assert Counter((m.partition, m.message) for m in static) == Counter((p, v.decode()) for p, v in static_sent)
        assert Counter((m.partition, m.message) for m in filtered) == Counter(filtered_sent)
        assert all(m.topic == f"{prefix}.clicks" for m in filtered)
        assert len(connector.owned_partitions()) == 2 * PARTITIONS
        connector.commit_offsets()
    finally:
        connector.shutdown()
    assert admin_zk.get_children(paths.consumer_ids_path(group)) == []
    assert admin_zk.get(paths.offset_path(group, f"{prefix}.clicks", 0))[0] == b"3"
    assert admin_zk.get(paths.offset_path(group, topic, 0))[0] == b"4"
