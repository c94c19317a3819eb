"""One consumer group mixing hmbclient's subscribe/poll ``Consumer`` with kafka-python and
confluent-kafka (librdkafka) members on the embedded broker's coordinator, members joining and
leaving while a producer writes (the members and the coordinator's group records come from
``test_group_peers``). Each member commits after every batch. Checked afterwards:

* every acknowledged message was delivered;
* the coordinator's assignments (its group records in ``__consumer_offsets``) are disjoint
  per generation, and every ``Consumer`` delivery made inside one generation is of a partition
  assigned to that member in it; no (generation, partition) delivered by two members;
  librdkafka delivered only partitions its callbacks said it owned;
* a message delivered twice was re-read only where no commit past it had been acknowledged
  when the re-reading began.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest
from test_group_peers import (
    BROKER_SETTINGS,
    HEARTBEAT_MS,
    MAX_POLL_MS,
    PARTITIONS,
    SESSION_MS,
    TOPIC,
    ConfluentMember,
    Delivery,
    Journal,
    KafkaPythonMember,
    Member,
    _group_assignments,
    _log_reader,
    _quiet_clients,  # noqa: F401 - the autouse fixture that quiets the peers' logs
    _runs,
)

from hmbclient import Consumer, Producer
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import HmbError

pytestmark = pytest.mark.timeout(180)

MESSAGES = 1200


class PollConsumerMember(Member):
    """hmbclient's subscribe/poll Consumer; a batch is tagged with the generation when the
    member's generation is the same before and after the poll that handed it out."""

    kind = "hmbclient-poll"

    def consume(self) -> None:
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
                "fetch.max.wait.ms": 50,
                "retry.backoff.ms": 100,
            }
        )
        try:
            consumer.subscribe([TOPIC])
            while not self.stop.is_set():
                before = consumer.generation
                batch = consumer.poll(0.2, max_records=200)
                after, member_id = consumer.generation, consumer.member_id or ""
                if not batch:
                    continue
                generation = after if before == after and after > 0 else None
                self.member_ids.add(member_id)
                now = time.monotonic()
                self.journal.delivered([Delivery(self.kind, member_id, generation, r.partition, r.offset, now) for r in batch])
                offsets: dict[int, int] = {}
                for r in batch:
                    offsets[r.partition] = r.offset + 1
                try:
                    consumer.commit({(TOPIC, p): o for p, o in offsets.items()})
                    self.journal.committed(member_id, offsets)
                except HmbError as e:
                    self.journal.commit_failed(member_id, e)
        finally:
            consumer.close()


KINDS: dict[str, type[Member]] = {"kp": KafkaPythonMember, "ck": ConfluentMember, "pc": PollConsumerMember}


def _produce(bootstrap: str, acked: list[tuple[int, int]], done: threading.Event, errors: list[str]) -> None:
    try:
        with Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, request_required_acks=-1) as p:
            futures = []
            for i in range(MESSAGES):
                futures.append(p.send_record(TOPIC, b"message-%d" % i, b"%d" % i, partition=i % PARTITIONS))
                if i % 40 == 39:
                    time.sleep(0.1)  # ~400 messages/s: the group changes while they flow
            for f in futures:
                md = f.result(30)
                acked.append((md.partition, md.offset))
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"producer: {e!r}")
    finally:
        done.set()


def test_poll_consumer_kafka_python_and_librdkafka_in_one_group(tmp_path: Any) -> None:
    group = "poll-peers"
    journal = Journal()
    acked: list[tuple[int, int]] = []
    produced = threading.Event()
    producer_errors: list[str] = []
    members: dict[str, Member] = {}
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), **BROKER_SETTINGS) as broker:

        def join(name: str) -> None:
            member = KINDS[name[:2]](f"{name}-{uuid.uuid4().hex[:4]}", broker.bootstrap, group, journal)
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

        for name in ("pc1", "kp1", "ck1"):
            join(name)
        threading.Thread(target=_produce, args=(broker.bootstrap, acked, produced, producer_errors), daemon=True).start()
        try:
            at(1.5)
            join("pc2")
            at(3)
            leave("kp1")
            leave("pc1")
            at(4)
            join("pc3")
            assert produced.wait(60), "the producer did not finish"
            assert not producer_errors, producer_errors
            wanted = set(acked)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with journal.lock:
                    if wanted <= {(d.partition, d.offset) for d in journal.deliveries}:
                        break
                time.sleep(0.2)
        finally:
            for member in members.values():
                member.leave()
            for member in members.values():
                member.join(30)
        assert not any(m.is_alive() for m in members.values()), "a member did not close"
        assignments = _group_assignments(_log_reader(broker.broker, group, broker.config.offsets_topic_num_partitions), group)

    assert not journal.errors, journal.errors
    deliveries = sorted(journal.deliveries, key=lambda d: d.at)
    assert len(acked) == MESSAGES
    missing = sorted(set(acked) - {(d.partition, d.offset) for d in deliveries})
    assert not missing, f"{len(missing)} acknowledged messages never delivered, e.g. {missing[:5]}"
    assert {d.kind for d in deliveries} == {"hmbclient-poll", "kafka-python", "librdkafka"}

    # No partition owned twice in a generation: the coordinator's assignments are disjoint...
    assert len(assignments) >= 3, assignments
    for generation, by_member in assignments.items():
        owners: dict[int, str] = {}
        for member, parts in by_member.items():
            for p in parts:
                assert p not in owners, f"generation {generation}: partition {p} assigned to {owners[p]} and {member}"
                owners[p] = member
    # ...and the deliveries made inside a generation are of the member's share in it.
    tagged = [d for d in deliveries if d.generation is not None]
    assert any(d.kind == "hmbclient-poll" for d in tagged), "no Consumer delivery tagged with a generation"
    for d in tagged:
        share = assignments.get(d.generation, {}).get(d.member)  # type: ignore[arg-type]
        assert share is not None and d.partition in share, f"{d} outside its share of generation {d.generation}"
    by_generation: dict[tuple[int, int], set[str]] = defaultdict(set)
    for d in tagged:
        by_generation[(d.generation, d.partition)].add(d.member)  # type: ignore[index]
    shared = {k: v for k, v in by_generation.items() if len(v) > 1}
    assert not shared, f"partitions consumed by two members of one generation: {shared}"
    assert not journal.unowned, f"librdkafka delivered partitions it did not own: {journal.unowned[:5]}"

    # Duplicates only from uncommitted windows.
    run_start: dict[tuple[str, int, int], float] = {}
    for (member, partition), runs in _runs(deliveries).items():
        for run in runs:
            for d in run:
                run_start[(member, partition, d.offset)] = run[0].at
    first: set[tuple[int, int]] = set()
    for d in deliveries:
        if (d.partition, d.offset) not in first:
            first.add((d.partition, d.offset))
            continue
        began = run_start[(d.member, d.partition, d.offset)]
        honoured = [c for c in journal.commits if c.partition == d.partition and c.offset > d.offset and c.acked_at < began]
        assert not honoured, f"{d} re-read although {honoured[0]} was acknowledged before"
