"""hmbclient members in broker mode (``group.protocol=broker``) on the embedded broker's own
group coordinator: no ZooKeeper and no Tansu anywhere in this module.

The same contract as over Tansu, checked against our coordinator: 1, 2 and 3 members share a
topic and together get every message exactly once, their shares disjoint and the final commits
stored by the coordinator; a member process killed with SIGKILL keeps its partitions until its
session times out (no sooner), then the survivor owns them, and the only repeats are what the
dead member handed out after its last commit. The broker starts a group's first rebalance at
once (``group.initial.rebalance.delay.ms=0``) and accepts the short sessions used here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import EmbeddedBroker
from hmbclient.consumer.connector import Consumer, ConsumerConnector

from .conftest import Collector, Producer, unique
from .test_broker_groups import (
    FAST,
    PARTITIONS,
    check_members_get_every_message_once,
    create_topic,
    start_victim,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        port=0,
        log_dir=str(tmp_path_factory.mktemp("embedded-groups")),
        group_initial_rebalance_delay_ms=0,
        group_min_session_timeout_ms=1_000,
    ) as b:
        yield b


@pytest.fixture
def make_member(broker: EmbeddedBroker) -> Iterator[Callable[..., ConsumerConnector]]:
    """``make_member(group, **overrides)`` -> a broker-mode connector, shut down after the test."""
    made: list[ConsumerConnector] = []

    def make(group: str, **overrides: Any) -> ConsumerConnector:
        c = Consumer.create({**FAST, "bootstrap.servers": broker.bootstrap, "group.id": group}, **overrides)
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()


@pytest.fixture
def producer(broker: EmbeddedBroker) -> Iterator[Producer]:
    p = Producer(broker.bootstrap)
    yield p
    p.close()


@pytest.mark.parametrize("members", [1, 2, 3])
def test_members_get_every_message_exactly_once(
    broker: EmbeddedBroker, make_member: Any, producer: Producer, members: int
) -> None:
    check_members_get_every_message_once(broker.bootstrap, make_member, producer, members, "emb")


def test_killed_member_loses_its_partitions_after_the_session_timeout(
    broker: EmbeddedBroker, make_member: Any, producer: Producer
) -> None:
    topic, group = unique("emb-kill"), unique("g")
    create_topic(broker.bootstrap, topic)
    session_ms = 3000
    props = {**FAST, "session.timeout.ms": session_ms, "auto.commit.interval.ms": 500, "consumer.timeout.ms": 500}
    proc, victim, ready, reader = start_victim(broker.bootstrap, group, topic, props)
    done = threading.Event()
    collector = Collector()
    try:
        survivor = make_member(group, **{"session.timeout.ms": session_ms})
        collector.consume("survivor", survivor.create_message_streams({topic: 1})[topic][0], until=done)
        wait_until(lambda: ready and survivor.await_rebalance(0.5) and len(survivor.owned_partitions()) == PARTITIONS // 2,
                   60, "the survivor and the process sharing the topic")
        victim_partitions = set(range(PARTITIONS)) - {p for _, p in survivor.owned_partitions()}
        sent = producer.spread(topic, 40)
        # Kill it in the middle of its share, past at least one auto commit.
        wait_until(lambda: len(victim) > 60, 30, "the process consuming")
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(10)
        # Until the session runs out the dead member's partitions stay its own.
        wait_until(lambda: survivor.await_rebalance(0.5) and len(survivor.owned_partitions()) == PARTITIONS,
                   60, "the survivor owning every partition")
        moved_after = time.monotonic() - killed_at
        assert moved_after >= session_ms / 1000 * 0.8, f"partitions moved after {moved_after:.1f}s, before the session ran out"
        assert moved_after < session_ms / 1000 + 10, f"partitions moved only after {moved_after:.1f}s"
        wait_until(lambda: set(collector.values()) | set(victim) >= sent, 60, "every message consumed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        done.set()
    collector.join(30)
    reader.join(10)
    total = Counter(collector.values()) + Counter(victim)
    assert set(total) == sent
    duplicates = {k: n for k, n in total.items() if n > 1}
    # Repeats: only what the killed member handed out after its last commit, at most twice each.
    assert all(n == 2 for n in duplicates.values())
    assert set(duplicates) <= set(victim)
    assert {p for p, _ in duplicates} <= victim_partitions
