"""The subscribe/poll ``Consumer`` against real brokers (Tansu and the embedded broker, the
``broker`` fixture): every record read back as produced (key, value, headers, timestamp), a
group member resuming at what the previous one committed, manual assignment with seek,
seek_to_beginning/end, position, pause/resume, offsets_for_times and beginning/end offsets,
synchronous and asynchronous commits, a pattern subscription seeing a topic created later,
``max.poll.interval.ms`` running out (the member leaves, a second one takes every partition,
the next poll joins again), and bad input refused with typed errors.
"""

from __future__ import annotations

import gc
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from waiting import wait_until

from encoders import StringDecoder
from hmbclient import Consumer, ConsumerRecord, Producer, TopicPartition
from hmbclient.errors import ConfigError, ConsumerClosedError, IllegalStateError

from .conftest import BROKER_KINDS, BrokerHandle, create_topic, unique

pytestmark = pytest.mark.timeout(120)

# Short group timings so the tests run fast on both brokers.
GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "fetch.max.wait.ms": 100}


@pytest.fixture(scope="module", params=BROKER_KINDS)
def broker(request: pytest.FixtureRequest) -> Iterator[BrokerHandle]:
    """The suite's ``broker`` fixture, but an embedded broker that starts a new group's first
    rebalance at once (``group.initial.rebalance.delay.ms=0``) and accepts short sessions."""
    if request.param == "tansu":
        t = request.getfixturevalue("tansu")
        yield BrokerHandle("tansu", t.host, t.port, t)
        return
    from hmbclient.broker import EmbeddedBroker

    log_dir = str(request.getfixturevalue("tmp_path_factory").mktemp("hmb"))
    with EmbeddedBroker(port=0, log_dir=log_dir, group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1000) as b:
        yield BrokerHandle("embedded", b.host, b.port, b)


def _produce(bootstrap: str, topic: str, n: int, partitions: int, tag: str = "v") -> list[tuple[int, bytes]]:
    """n messages spread over the partitions (key k<i%7>, a header); returns (partition, value)."""
    sent = []
    with Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=2) as p:
        for i in range(n):
            value = b"%s-%05d" % (tag.encode(), i)
            p.produce(topic, value, key=b"k%d" % (i % 7), partition=i % partitions, headers=[("n", b"%d" % i)])
            sent.append((i % partitions, value))
        assert p.flush(30) == 0
    return sent


def _poll_until(consumer: Consumer, n: int, timeout_s: float = 30) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))
    return got


def _peer_end_offsets(bootstrap: str, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as PeerTopicPartition

    peer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        found = peer.end_offsets([PeerTopicPartition(*tp) for tp in tps])
    finally:
        peer.close()
    return {TopicPartition(tp.topic, tp.partition): offset for tp, offset in found.items()}


def _peer_offsets_for_times(bootstrap: str, asked: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as PeerTopicPartition

    peer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        found = peer.offsets_for_times({PeerTopicPartition(*tp): ts for tp, ts in asked.items()})
    finally:
        peer.close()
    return {TopicPartition(tp.topic, tp.partition): None if f is None else f.offset for tp, f in found.items()}


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for c in made:
        c.close()


def _consumer(made: list[Consumer], broker: BrokerHandle, **settings: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", **GROUP}, **settings)
    made.append(c)
    return c


def test_subscribe_poll_every_record_then_the_next_member_resumes_at_the_commit(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    topic, group = unique("pc-sub"), unique("pc-g")
    create_topic(broker.bootstrap, topic, 3)
    sent = _produce(broker.bootstrap, topic, 600, 3)
    assigned: list[list[TopicPartition]] = []
    c = _consumer(consumers, broker, group_id=group, value_deserializer=StringDecoder(), enable_auto_commit=False)
    c.subscribe([topic], on_assign=lambda consumer, parts: assigned.append(parts))
    got = _poll_until(c, 600)
    assert len(got) == 600, f"{len(got)} of 600"
    assert assigned == [[TopicPartition(topic, p) for p in range(3)]]
    # Per partition: in offset order, dense from 0, values as produced (decoded), headers kept.
    for p in range(3):
        mine = [r for r in got if r.partition == p]
        assert [r.offset for r in mine] == list(range(200))
        assert [r.value.encode() for r in mine] == [v for q, v in sent if q == p]
        assert all(r.headers == (("n", b"%d" % int(r.value.split("-")[1])),) for r in mine)
    assert all(r.topic == topic and r.key.startswith(b"k") and r.timestamp > 0 and r.timestamp_type == 0 for r in got)
    assert {tp: c.position(tp) for tp in c.assignment()} == {TopicPartition(topic, p): 200 for p in range(3)}
    # Nothing committed yet (no auto commit); commit() commits the positions.
    assert c.committed([(topic, 0)]) == {(topic, 0): None}
    c.commit(offsets={(topic, 0): 150, (topic, 1): 120, (topic, 2): 100})
    assert c.committed([(topic, p) for p in range(3)]) == {(topic, 0): 150, (topic, 1): 120, (topic, 2): 100}
    c.close()
    # The next member of the group starts where the commit left off.
    c2 = _consumer(consumers, broker, group_id=group)
    c2.subscribe([topic])
    rest = _poll_until(c2, 50 + 80 + 100)
    assert sorted((r.partition, r.offset) for r in rest) == sorted(
        [(0, o) for o in range(150, 200)] + [(1, o) for o in range(120, 200)] + [(2, o) for o in range(100, 200)]
    )
    # Without deserializers the fetcher decodes straight into ConsumerRecords, the cyclic GC
    # paused meanwhile: it is back on.
    assert gc.isenabled()
    assert all(type(r) is ConsumerRecord and r.value.startswith(b"v") and r.topic == topic for r in rest)
    # Auto commit is on for c2: close() commits the positions.
    c2.close()
    probe = _consumer(consumers, broker, group_id=group)
    assert probe.committed([(topic, p) for p in range(3)]) == {(topic, p): 200 for p in range(3)}


def test_assign_seek_pause_resume_and_offsets(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    topic = unique("pc-assign")
    create_topic(broker.bootstrap, topic, 2)
    before_ms = int(time.time() * 1000)
    _produce(broker.bootstrap, topic, 200, 2)
    t0, t1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    c = _consumer(consumers, broker)  # no group: assign() only
    c.assign([t0, t1])
    assert c.assignment() == {t0, t1}
    assert c.beginning_offsets([t0, t1]) == {t0: 0, t1: 0}
    # Tansu answers ListOffsets(latest) with the next *batch* number (kafka-python and
    # librdkafka read the same from it): there we hold ours to what kafka-python reads.
    ends = {t0: 100, t1: 100} if broker.kind == "embedded" else _peer_end_offsets(broker.bootstrap, [t0, t1])
    assert c.end_offsets([t0, t1]) == ends
    got = _poll_until(c, 200)
    assert len(got) == 200 and {(r.partition, r.offset) for r in got} == {(p, o) for p in (0, 1) for o in range(100)}
    assert c.poll(0.2) == []  # nothing new

    c.seek(t0, 90)
    assert c.position(t0) == 90
    again = _poll_until(c, 10)
    assert [(r.partition, r.offset) for r in again] == [(0, o) for o in range(90, 100)]

    c.seek_to_beginning([t1])
    assert c.position(t1) == 0
    c.pause([t1])
    assert c.paused() == {t1}
    c.seek(t0, 95)
    only0 = _poll_until(c, 5)
    only0 += c.poll(0.3)  # the paused partition must not show up here either
    assert [(r.partition, r.offset) for r in only0] == [(0, o) for o in range(95, 100)], "a paused partition was handed out"
    c.resume([t1])
    assert c.paused() == set()
    resumed = _poll_until(c, 100)
    assert [(r.partition, r.offset) for r in resumed] == [(1, o) for o in range(100)]
    c.seek_to_end()
    assert c.position(t0) == ends[t0] and c.position(t1) == ends[t1]

    # offsets_for_times: the first record at/after a time; None past the last one.
    asked = {t0: before_ms, t1: int(time.time() * 1000) + 3_600_000}
    found = c.offsets_for_times(asked)
    assert {tp: None if f is None else f.offset for tp, f in found.items()} == _peer_offsets_for_times(broker.bootstrap, asked)
    if broker.kind == "embedded":  # Tansu does not search by time (it answers offset 0, timestamp -1)
        assert found[t0] is not None and found[t0].offset == 0 and found[t0].timestamp >= before_ms
        assert found[t1] is None


def test_commits_sync_async_with_callback_and_manual_assignment(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    topic, group = unique("pc-commit"), unique("pc-g")
    create_topic(broker.bootstrap, topic, 1)
    _produce(broker.bootstrap, topic, 50, 1)
    tp = TopicPartition(topic, 0)
    c = _consumer(consumers, broker, group_id=group, enable_auto_commit=False)
    c.assign([tp])  # a group.id without subscribe: commits as a group without members
    assert len(_poll_until(c, 30, 10)) >= 30
    c.seek(tp, 30)
    c.commit()
    assert c.committed([tp]) == {tp: 30}
    done = threading.Event()
    seen: list[Any] = []

    def callback(err: BaseException | None, offsets: dict[TopicPartition, int]) -> None:
        seen.append((err, offsets, threading.current_thread().name))
        done.set()

    future = c.commit({tp: 42}, asynchronous=True, callback=callback)
    assert isinstance(future, Future)
    assert future.result(10) == {tp: 42}
    assert done.wait(10) and seen[0][:2] == (None, {tp: 42}) and seen[0][2].startswith("hmb-commit")
    assert c.committed([tp]) == {tp: 42}
    # A new consumer assigned the partition starts at the committed offset.
    c2 = _consumer(consumers, broker, group_id=group)
    c2.assign([tp])
    assert [r.offset for r in _poll_until(c2, 8)] == list(range(42, 50))
    c2.close()
    # A member that leaves (unsubscribe) and then assigns commits as a memberless group again;
    # replacing an assignment commits the old one's positions first (auto commit, as Java).
    c3 = _consumer(consumers, broker, group_id=group)
    c3.subscribe([tp.topic])
    wait_until(lambda: (c3.poll(0.1), c3.assignment() == {tp})[1], 30, "the member owning the partition")
    c3.unsubscribe()
    assert c3.assignment() == set()
    c3.assign([tp])
    assert c3.committed([tp]) == {tp: 50}  # the revoke on unsubscribe committed what it polled
    c3.seek(tp, 45)
    got = wait_until(lambda: c3.poll(0.5, max_records=2), 10, "two records from 45")
    assert [r.offset for r in got] == [45, 46]
    c3.assign([])
    assert c3.committed([tp]) == {tp: 47}


def test_pattern_subscription_sees_a_topic_created_later(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    prefix = unique("pcpat")
    first, later = f"{prefix}-a", f"{prefix}-b"
    create_topic(broker.bootstrap, first, 1)
    _produce(broker.bootstrap, first, 5, 1)
    c = _consumer(consumers, broker, group_id=unique("pc-g"))
    c.subscribe(re.compile(re.escape(prefix) + r"-.*"))
    got = _poll_until(c, 5)
    assert {r.topic for r in got} == {first}
    create_topic(broker.bootstrap, later, 2)
    _produce(broker.bootstrap, later, 6, 2)
    more = _poll_until(c, 6, 40)
    assert sorted((r.topic, r.partition, r.offset) for r in more) == sorted((later, p, o) for p in (0, 1) for o in range(3))
    assert c.assignment() == {TopicPartition(first, 0), TopicPartition(later, 0), TopicPartition(later, 1)}


@pytest.mark.parametrize("broker", ["embedded"], indirect=True)  # timing-bound: our coordinator only
def test_max_poll_interval_exceeded_leaves_the_group_and_the_next_poll_rejoins(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    topic, group = unique("pc-slow"), unique("pc-g")
    create_topic(broker.bootstrap, topic, 2)
    lost: list[list[TopicPartition]] = []
    slow = _consumer(consumers, broker, group_id=group, max_poll_interval_ms=1500)
    slow.subscribe([topic], on_lost=lambda c, parts: lost.append(parts))
    wait_until(lambda: (slow.poll(0.1), len(slow.assignment()) == 2)[1], 20, "the first member owning both partitions")
    # No poll for longer than max.poll.interval.ms: the member leaves (its partitions lost).
    wait_until(lambda: lost, 15, "the member leaving after max.poll.interval.ms")
    assert lost[0] == [TopicPartition(topic, 0), TopicPartition(topic, 1)] and slow.assignment() == set()
    other = _consumer(consumers, broker, group_id=group)
    other.subscribe([topic])
    wait_until(lambda: (other.poll(0.1), len(other.assignment()) == 2)[1], 20, "the other member owning both")
    # The next poll joins again: the two share the partitions.
    wait_until(lambda: (slow.poll(0.1), other.poll(0.1), len(slow.assignment()) == 1 and len(other.assignment()) == 1)[2], 30, "both members sharing")


@pytest.mark.parametrize("broker", ["embedded"], indirect=True)  # timing-bound: our coordinator only
def test_heartbeats_go_on_between_polls(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    topic, group = unique("pc-hb"), unique("pc-g")
    create_topic(broker.bootstrap, topic, 2)
    lost: list[Any] = []
    c = _consumer(consumers, broker, group_id=group, session_timeout_ms=1000, heartbeat_interval_ms=200)
    c.subscribe([topic], on_lost=lambda consumer, parts: lost.append(parts))
    wait_until(lambda: (c.poll(0.1), len(c.assignment()) == 2)[1], 20, "the member owning both partitions")
    generation = c.generation
    # Three session timeouts without a poll: the group member's own thread kept the session.
    threading.Event().wait(3.0)
    assert not lost and c.generation == generation and len(c.assignment()) == 2
    _produce(broker.bootstrap, topic, 4, 2)
    assert len(_poll_until(c, 4, 10)) == 4


def test_bad_input_is_refused_with_typed_errors(broker: BrokerHandle, consumers: list[Consumer]) -> None:
    with pytest.raises(ConfigError, match="unknown PollConsumerConfig key 'fetch.max.bytez'"):
        Consumer({"bootstrap.servers": broker.bootstrap, "fetch.max.bytez": 1})
    with pytest.raises(ConfigError, match="bootstrap"):
        Consumer({"group.id": "g"})
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        Consumer({"bootstrap.servers": broker.bootstrap, "partition.assignment.strategy": "sticky-ish"})
    topic = unique("pc-bad")
    create_topic(broker.bootstrap, topic, 1)
    c = _consumer(consumers, broker)
    with pytest.raises(IllegalStateError, match="subscribe\\(\\) or assign\\(\\)"):
        c.poll(0)
    with pytest.raises(IllegalStateError, match="group.id"):
        c.subscribe([topic])
    with pytest.raises(IllegalStateError, match="group.id"):
        c.commit()
    with pytest.raises(ConfigError):
        c.assign(["not-a-pair"])  # type: ignore[list-item]
    c.assign([(topic, 0)])
    with pytest.raises(IllegalStateError, match="not assigned"):
        c.seek((topic, 5), 0)
    with pytest.raises(ConfigError):
        c.seek((topic, 0), -1)
    g = _consumer(consumers, broker, group_id=unique("pc-g"))
    with pytest.raises(ConfigError):
        g.subscribe([])
    g.assign([(topic, 0)])
    with pytest.raises(IllegalStateError, match="after assign"):
        g.subscribe([topic])
    c.close()
    c.close()  # idempotent
    for call in (lambda: c.poll(0), lambda: c.assign([(topic, 0)]), lambda: c.position((topic, 0))):
        with pytest.raises(ConsumerClosedError):
            call()
    assert list(c) == []  # iteration ends after close


def test_close_ends_a_waiting_poll_and_the_context_manager_closes(broker: BrokerHandle) -> None:
    topic = unique("pc-close")
    create_topic(broker.bootstrap, topic, 1)
    with Consumer({"bootstrap.servers": broker.bootstrap, **GROUP}) as c:
        c.assign([(topic, 0)])
        result: list[Any] = []
        waiter = threading.Thread(target=lambda: result.append(c.poll(30)))
        started = time.monotonic()
        waiter.start()
        wait_until(lambda: c._in_poll, 5, "poll waiting")
        c.close()
        waiter.join(5)
        assert result == [[]] and time.monotonic() - started < 5
    with pytest.raises(ConsumerClosedError):
        c.poll(0)
