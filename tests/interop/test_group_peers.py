"""Consumer groups of independent clients on the embedded broker's group coordinator.

One group, members of four kinds at once — confluent-kafka (librdkafka), kafka-python,
aiokafka and hmbclient itself in broker mode (``group.protocol=broker``, range configured: it
offers range first and roundrobin second, and the group's vote picks roundrobin, the one protocol
every kind offers) — joining and leaving while a producer writes, on one EmbeddedBroker and on a
three-broker EmbeddedCluster (where the group's coordinator also moves to another broker
mid-stream). Each member commits synchronously after every batch and records every delivery
(member, generation when the client exposes it, partition, offset, time) and every commit.
Checked afterwards:

* every acknowledged message was delivered;
* a message is delivered twice only if no commit past it had been acknowledged before the second
  deliverer started the run of offsets that re-read it (duplicates come only from uncommitted
  windows of members that lost the partition, never from a committed offset not honoured);
* no partition is consumed by two members of one generation: the assignments the coordinator
  stored (group records read back from ``__consumer_offsets``, Kafka's format) are disjoint per
  generation, and every delivery tagged with a generation is of a partition its member was
  assigned in that generation; librdkafka, which does not expose its generation, must deliver
  only partitions assigned to it at that moment (its rebalance callbacks).

Plus the user's view: a test file written against the ``hmb_broker`` fixture with a kafka-python
group consumer passes under pytest.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.broker.offset_manager import (
    OFFSETS_TOPIC,
    decode_group_key,
    decode_group_value,
    partition_for_group,
)
from hmbclient.protocol import records
from hmbclient.protocol.api.consumer_protocol import decode_member_assignment

pytestmark = pytest.mark.timeout(300)

TOPIC = "peer-events"
PARTITIONS = 6
MESSAGES = 2400
SESSION_MS = 6_000
HEARTBEAT_MS = 500
MAX_POLL_MS = 10_000  # JoinGroup's rebalance timeout
BROKER_SETTINGS: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1_000, "num_partitions": PARTITIONS}


@dataclass(frozen=True)
class Delivery:
    kind: str
    member: str
    generation: int | None
    partition: int
    offset: int
    at: float


@dataclass(frozen=True)
class Commit:
    member: str
    partition: int
    offset: int  # the next offset to read
    acked_at: float


@dataclass
class Journal:
    """What every member saw, from all threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    deliveries: list[Delivery] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    failed_commits: list[tuple[str, str]] = field(default_factory=list)
    unowned: list[Delivery] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def delivered(self, batch: list[Delivery]) -> None:
        with self.lock:
            self.deliveries.extend(batch)

    def committed(self, member: str, offsets: dict[int, int]) -> None:
        now = time.monotonic()
        with self.lock:
            self.commits.extend(Commit(member, p, o, now) for p, o in offsets.items())

    def commit_failed(self, member: str, error: BaseException) -> None:
        with self.lock:
            self.failed_commits.append((member, repr(error)))


class Member(threading.Thread):
    """One consumer in its own thread until ``leave()``: poll, record, commit the batch."""

    kind = "?"

    def __init__(self, name: str, bootstrap: str, group: str, journal: Journal) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.group = group
        self.journal = journal
        self.stop = threading.Event()
        self.member_ids: set[str] = set()
        self.events: list[Any] = []  # hmbclient's status events, for a failure's message

    def leave(self) -> None:
        self.stop.set()

    def consume(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.journal.errors.append(f"{self.name}: {e!r}")


class KafkaPythonMember(Member):
    kind = "kafka-python"

    def consume(self) -> None:
        from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.errors import KafkaError

        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=MAX_POLL_MS,
            partition_assignment_strategy=[RoundRobinPartitionAssignor, RangePartitionAssignor],
        )
        try:
            while not self.stop.is_set():
                batch = consumer.poll(timeout_ms=200)
                if not batch:
                    continue
                meta = consumer.group_metadata()  # public: generation and member id of this member
                now = time.monotonic()
                self.member_ids.add(meta.member_id)
                generation = meta.generation_id if meta.generation_id > 0 else None
                self.journal.delivered([Delivery(self.kind, meta.member_id, generation, tp.partition, r.offset, now) for tp, recs in batch.items() for r in recs])
                offsets = {tp.partition: recs[-1].offset + 1 for tp, recs in batch.items()}
                try:
                    consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
                    self.journal.committed(meta.member_id, offsets)
                except KafkaError as e:
                    self.journal.commit_failed(meta.member_id, e)
        finally:
            consumer.close(autocommit=False)


class ConfluentMember(Member):
    kind = "librdkafka"

    def consume(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": self.name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "max.poll.interval.ms": MAX_POLL_MS,
                "partition.assignment.strategy": "roundrobin,range",
            }
        )
        owned: set[int] = set()

        # With rebalance callbacks librdkafka hands the rebalance to this thread (inside
        # consume()), so what it delivers and commits between two consume() calls belongs to one
        # assignment; the callbacks also tell which partitions it owns (its generation is not
        # exposed).
        def on_assign(c: Any, partitions: list[Any]) -> None:
            owned.clear()
            owned.update(p.partition for p in partitions)

        def on_revoke(c: Any, partitions: list[Any]) -> None:
            owned.clear()

        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop.is_set():
                msgs = consumer.consume(num_messages=200, timeout=0.2)
                batch = [m for m in msgs if m.error() is None]
                if not batch:
                    continue
                member_id = consumer.memberid()
                self.member_ids.add(member_id)
                now = time.monotonic()
                # A message without an error always has its partition and offset.
                placed = [(int(m.partition() or 0), int(m.offset() or 0)) for m in batch]
                deliveries = [Delivery(self.kind, member_id, None, p, o, now) for p, o in placed]
                self.journal.delivered(deliveries)
                with self.journal.lock:
                    self.journal.unowned.extend(d for d in deliveries if d.partition not in owned)
                offsets: dict[int, int] = {}
                for p, o in placed:
                    offsets[p] = max(offsets.get(p, 0), o + 1)
                try:
                    result = consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
                    failed = [tp for tp in result or () if tp.error is not None]
                    if failed:
                        self.journal.commit_failed(member_id, RuntimeError(str(failed)))
                    else:
                        self.journal.committed(member_id, offsets)
                except KafkaException as e:
                    self.journal.commit_failed(member_id, e)
        finally:
            consumer.close()


class AiokafkaMember(Member):
    kind = "aiokafka"

    def consume(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.errors import KafkaError

        consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=MAX_POLL_MS,
        )
        await consumer.start()
        try:
            while not self.stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                if not batch:
                    continue
                # aiokafka has no public accessor for the member id and generation: its group
                # coordinator's attributes are read right after getmany (no await between, so
                # they are the ones the batch was handed out under).
                member_id, generation = consumer._coordinator.member_id, consumer._coordinator.generation
                self.member_ids.add(member_id)
                now = time.monotonic()
                self.journal.delivered([Delivery(self.kind, member_id, generation if generation > 0 else None, tp.partition, r.offset, now) for tp, recs in batch.items() for r in recs])
                offsets = {tp.partition: recs[-1].offset + 1 for tp, recs in batch.items()}
                try:
                    await consumer.commit({TopicPartition(TOPIC, p): o for p, o in offsets.items()})
                    self.journal.committed(member_id, offsets)
                except KafkaError as e:
                    self.journal.commit_failed(member_id, e)
        finally:
            await consumer.stop()


class HmbclientMember(Member):
    """Our consumer in broker mode (``group.protocol=broker``, the range assignor only)."""

    kind = "hmbclient"

    def consume(self) -> None:
        from hmbclient.consumer.connector import Consumer
        from hmbclient.errors import ConsumerTimeoutError, HmbError

        connector = Consumer.create(
            {
                "group.protocol": "broker",
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": self.name,
                "auto.commit.enable": False,
                "auto.offset.reset": "smallest",
                "consumer.timeout.ms": 200,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "max.poll.interval.ms": MAX_POLL_MS,
                "partition.assignment.strategy": "range",
                "fetch.wait.max.ms": 50,
                "rebalance.backoff.ms": 100,
            },
            status_listener=lambda e: self.events.append((round(time.monotonic(), 2), e.kind, e.fields)),
        )
        try:
            stream = connector.create_message_streams({TOPIC: 1})[TOPIC][0]
            # The connector has no public accessor for its member id and generation: they are read
            # from its group member before and after each hand-out. A delivery is tagged with the
            # generation only when both reads agree (the message was handed out inside it).
            member = connector._rebalancer
            assert member is not None
            while not self.stop.is_set():
                batch: list[Delivery] = []
                first_generation = member.generation_id
                try:
                    while len(batch) < 200:
                        before = member.generation_id
                        m = next(stream)
                        member_id = member.member_id
                        after = member.generation_id
                        generation = after if before == after and after > 0 else None
                        self.member_ids.add(member_id)
                        batch.append(Delivery(self.kind, member_id, generation, m.partition, m.offset, time.monotonic()))
                except (ConsumerTimeoutError, StopIteration):
                    pass
                if not batch:
                    continue
                self.journal.delivered(batch)
                offsets: dict[int, int] = {}
                for d in batch:
                    offsets[d.partition] = max(offsets.get(d.partition, 0), d.offset + 1)
                try:
                    connector.commit_offsets()
                except HmbError as e:
                    self.journal.commit_failed(batch[-1].member, e)
                    continue
                # commit_offsets commits the handed-out position of the partitions owned now; the
                # batch is recorded as committed only when one generation covered all of it and
                # the commit (otherwise a revoke may have committed it, or nothing did).
                if first_generation == member.generation_id and all(d.generation == first_generation for d in batch):
                    self.journal.committed(batch[-1].member, offsets)
        finally:
            connector.shutdown()


KINDS: dict[str, type[Member]] = {"kp": KafkaPythonMember, "ck": ConfluentMember, "ak": AiokafkaMember, "hm": HmbclientMember}


def _produce(bootstrap: str, acked: list[tuple[int, int]], done: threading.Event, errors: list[str]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, retries=10)
    try:
        futures = []
        for i in range(MESSAGES):
            futures.append(producer.send(TOPIC, key=b"%d" % i, value=b"message-%d" % i, partition=i % PARTITIONS))
            if i % 40 == 39:
                time.sleep(0.15)  # ~260 messages/s: the group changes while they flow
        producer.flush(30)
        for f in futures:
            md = f.get(30)
            acked.append((md.partition, md.offset))
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"producer: {e!r}")
    finally:
        producer.close(10)
        done.set()


def _group_assignments(read_log: Callable[[], bytes], group: str) -> dict[int, dict[str, set[int]]]:
    """generation -> member -> partitions of TOPIC, from the group records the coordinator
    stored (the last record of a generation wins)."""
    out: dict[int, dict[str, set[int]]] = {}
    for r in records.decode_records(read_log()):
        if r.key is None or r.value is None or decode_group_key(bytes(r.key)) != group:
            continue
        record = decode_group_value(bytes(r.value))
        members: dict[str, set[int]] = {}
        for m in record.members:
            parts: set[int] = set()
            if m.assignment:
                for topic, partitions in decode_member_assignment(m.assignment).assigned_partitions:
                    if topic == TOPIC:
                        parts.update(partitions)
            members[m.member_id] = parts
        out[record.generation_id] = members
    return out


def _runs(deliveries: list[Delivery]) -> dict[tuple[str, int], list[list[Delivery]]]:
    """Per (member, partition): maximal runs of consecutive offsets, in delivery order."""
    by_owner: dict[tuple[str, int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_owner[(d.member, d.partition)].append(d)
    out: dict[tuple[str, int], list[list[Delivery]]] = {}
    for key, ds in by_owner.items():
        runs: list[list[Delivery]] = []
        for d in ds:
            if runs and d.offset == runs[-1][-1].offset + 1:
                runs[-1].append(d)
            else:
                runs.append([d])
        out[key] = runs
    return out


def _check(journal: Journal, acked: list[tuple[int, int]], assignments: dict[int, dict[str, set[int]]]) -> dict[str, int]:
    deliveries = sorted(journal.deliveries, key=lambda d: d.at)
    assert not journal.errors, journal.errors
    assert len(acked) == MESSAGES

    # Every acknowledged message delivered.
    seen = {(d.partition, d.offset) for d in deliveries}
    missing = sorted(set(acked) - seen)
    assert not missing, f"{len(missing)} acknowledged messages never delivered, e.g. {missing[:5]}"

    # The coordinator's assignments: disjoint per generation. (A generation may leave partitions
    # unassigned: a leader that has no metadata for the topic yet assigns nothing and rejoins
    # once it has, as the Java consumer does.)
    assert assignments, "no group records found"
    covering = 0
    for generation, members in assignments.items():
        owners: dict[int, str] = {}
        for member, parts in members.items():
            for p in parts:
                assert p not in owners, f"generation {generation}: partition {p} assigned to {owners[p]} and {member}"
                owners[p] = member
        covering += set(owners) == set(range(PARTITIONS))
    assert covering >= 3, f"only {covering} generations assigned every partition: {assignments}"

    # Deliveries under a generation: of partitions the member was assigned in it.
    tagged = [d for d in deliveries if d.generation is not None]
    assert tagged
    for d in tagged:
        assert d.generation is not None
        assigned = assignments.get(d.generation, {}).get(d.member)
        assert assigned is not None and d.partition in assigned, f"{d} outside the member's assignment of generation {d.generation}: {assignments.get(d.generation)}"
    by_generation: dict[tuple[int, int], set[str]] = defaultdict(set)
    for d in tagged:
        by_generation[(d.generation, d.partition)].add(d.member)  # type: ignore[index]
    shared = {k: v for k, v in by_generation.items() if len(v) > 1}
    assert not shared, f"partitions consumed by two members of one generation: {shared}"
    assert not journal.unowned, f"librdkafka delivered partitions it did not own: {journal.unowned[:5]}"

    # Duplicates only where no commit past them had been acknowledged when their re-reading began.
    commits_by_partition: dict[int, list[Commit]] = defaultdict(list)
    for c in journal.commits:
        commits_by_partition[c.partition].append(c)
    first: dict[tuple[int, int], Delivery] = {}
    run_start: dict[tuple[str, int, int], float] = {}
    for (member, partition), runs in _runs(deliveries).items():
        for run in runs:
            for d in run:
                run_start[(member, partition, d.offset)] = run[0].at
    duplicates = 0
    for d in deliveries:
        key = (d.partition, d.offset)
        if key not in first:
            first[key] = d
            continue
        duplicates += 1
        began = run_start[(d.member, d.partition, d.offset)]
        honoured = [c for c in commits_by_partition[d.partition] if c.offset > d.offset and c.acked_at < began]
        assert not honoured, f"{d} re-read although {honoured[0]} was acknowledged before the re-reading began (first delivery {first[key]})"
    kinds = {d.kind for d in deliveries}
    assert kinds == {"kafka-python", "librdkafka", "aiokafka", "hmbclient"}, kinds
    # hmbclient's deliveries are held to its generations' assignments too, not only counted.
    assert any(d.kind == "hmbclient" for d in tagged), "no hmbclient delivery tagged with a generation"
    return {"deliveries": len(deliveries), "hmbclient": sum(d.kind == "hmbclient" for d in tagged), "duplicates": duplicates, "generations": len(assignments), "failed_commits": len(journal.failed_commits)}


def _run_scenario(bootstrap: str, read_log: Callable[[], bytes], group: str, midway: Callable[[], None] | None = None) -> dict[str, int]:
    """Members of four kinds join and leave while the producer writes; then they drain."""
    journal = Journal()
    acked: list[tuple[int, int]] = []
    produced = threading.Event()
    producer_errors: list[str] = []
    members: dict[str, Member] = {}

    def join(name: str) -> None:
        member = KINDS[name[:2]](f"{name}-{uuid.uuid4().hex[:4]}", bootstrap, group, journal)
        members[name] = member
        member.start()

    def leave(name: str) -> None:
        members[name].leave()
        members[name].join(30)
        assert not members[name].is_alive(), f"{name} did not close"

    start = time.monotonic()

    def at(seconds: float) -> None:
        while time.monotonic() - start < seconds:
            time.sleep(0.05)

    for name in ("kp1", "ck1", "ak1"):
        join(name)
    threading.Thread(target=_produce, args=(bootstrap, acked, produced, producer_errors), daemon=True).start()
    try:
        at(2.5)
        join("kp2")
        join("ak2")
        join("hm1")
        at(4.5)
        leave("ck1")
        join("ck2")
        at(6.5)
        if midway is not None:
            midway()
        leave("kp1")
        leave("hm1")
        at(8)
        leave("ak1")
        join("kp3")
        join("hm2")
        assert produced.wait(60), "the producer did not finish"
        assert not producer_errors, producer_errors
        wanted = set(acked)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with journal.lock:
                if wanted <= {(d.partition, d.offset) for d in journal.deliveries}:
                    break
            time.sleep(0.2)
    finally:
        for member in members.values():
            if member.is_alive():
                member.leave()
        for member in members.values():
            member.join(30)
    assert not any(m.is_alive() for m in members.values()), "a member did not close"
    try:
        return _check(journal, acked, _group_assignments(read_log, group))
    except AssertionError as e:
        events = {m.name: m.events for m in members.values() if m.events}
        raise AssertionError(f"{e}\nhmbclient members' events: {events}") from None


def _log_reader(broker: Any, group: str, num_partitions: int) -> Callable[[], bytes]:
    def read() -> bytes:
        offsets_log = broker.logs.get_or_create(OFFSETS_TOPIC, partition_for_group(group, num_partitions))
        found, _ = offsets_log.read(offsets_log.log_start_offset, 1 << 26, min_one_entry=True)
        return b"" if found is None else bytes(found.read())

    return read


@pytest.fixture(autouse=True)
def _quiet_clients() -> Iterator[None]:
    # The clients log every rebalance and every refused commit at WARNING/ERROR; expected here.
    loggers = [logging.getLogger(n) for n in ("kafka", "aiokafka")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    yield
    for lg, level in zip(loggers, levels, strict=True):
        lg.setLevel(level)


def test_three_kinds_of_members_in_one_group_on_one_broker(tmp_path: Any) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), **BROKER_SETTINGS) as broker:
        stats = _run_scenario(broker.bootstrap, _log_reader(broker.broker, "peers", broker.config.offsets_topic_num_partitions), "peers")
    print(f"\n{stats}")
    assert stats["generations"] >= 5, stats  # every join and leave above rebalanced the group


def test_three_kinds_of_members_on_a_cluster_while_the_coordinator_moves(zookeeper: Any, tmp_path: Any) -> None:
    connect = f"{zookeeper.connect}/group-peers-{uuid.uuid4().hex[:8]}"
    group = "peers-cluster"
    with EmbeddedCluster(brokers=3, zookeeper_connect=connect, log_dir=str(tmp_path), **BROKER_SETTINGS) as cluster:
        cluster.await_brokers()
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        num_offsets = cluster.broker(0).config.offsets_topic_num_partitions
        offsets_partition = partition_for_group(group, num_offsets)

        def move_coordinator() -> None:
            current = cluster.leader(OFFSETS_TOPIC, offsets_partition)
            target = next(b.broker_id for b in cluster.brokers if b.broker_id != current)
            cluster.move_leader(OFFSETS_TOPIC, offsets_partition, target)

        def read_log() -> bytes:
            leader = cluster.leader(OFFSETS_TOPIC, offsets_partition)
            assert leader is not None
            return _log_reader(cluster.broker(leader), group, num_offsets)()

        stats = _run_scenario(cluster.bootstrap, read_log, group, midway=move_coordinator)
    assert stats["generations"] >= 5, stats


USER_TEST = '''
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def test_billing_reads_every_order_once(hmb_broker):
    producer = KafkaProducer(bootstrap_servers=hmb_broker.bootstrap)
    for i in range(20):
        producer.send("orders", b"order-%d" % i)
    producer.flush()
    producer.close()

    consumer = KafkaConsumer("orders", bootstrap_servers=hmb_broker.bootstrap, group_id="billing",
                             auto_offset_reset="earliest", consumer_timeout_ms=20000)
    seen = []
    for message in consumer:
        seen.append(message.value)
        if len(seen) == 20:
            break
    consumer.commit()
    consumer.close()
    assert seen == [b"order-%d" % i for i in range(20)]

    later = KafkaConsumer(bootstrap_servers=hmb_broker.bootstrap, group_id="billing")
    assert later.committed(TopicPartition("orders", 0)) == 20
    later.close()
'''


def test_a_user_test_file_with_the_hmb_broker_fixture_and_a_kafka_python_group(tmp_path: Any) -> None:
    (tmp_path / "test_billing.py").write_text(textwrap.dedent(USER_TEST))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_billing.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
