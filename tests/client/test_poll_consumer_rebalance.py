"""The poll ``Consumer`` with the group features of issue 24 on the embedded broker:
``partition.assignment.strategy=cooperative-sticky`` (a member joining takes partitions from
the first without the first giving up the ones it keeps) and ``group.instance.id`` (a static
member restarted within its session timeout gets its partitions back, no rebalance: the other
member's callbacks never run)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import Consumer, TopicPartition

from .conftest import create_topic, unique

pytestmark = pytest.mark.timeout(120)

GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "fetch.max.wait.ms": 100,
         "partition.assignment.strategy": "cooperative-sticky", "auto.offset.reset": "earliest"}


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("hmb")), group_initial_rebalance_delay_ms=0,
                        group_min_session_timeout_ms=1000) as b:
        yield b.bootstrap


class _Member:
    """A Consumer polled by its own thread, recording its callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance, **GROUP})
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _assigned(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.events.append(("assign", frozenset(parts)))

    def _revoked(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.events.append(("revoke", frozenset(parts)))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.1)

    def owned(self) -> set[TopicPartition]:
        return set(self.consumer.assignment())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def test_cooperative_join_then_static_restart(bootstrap: str) -> None:
    topic, group = unique("coop"), unique("coop-g")
    create_topic(bootstrap, topic, 4)
    every = {TopicPartition(topic, p) for p in range(4)}
    a = _Member(bootstrap, group, topic, "member-a")
    b = None
    try:
        wait_until(lambda: a.owned() == every, 30, "the first member owns every partition")
        b = _Member(bootstrap, group, topic, "member-b")
        wait_until(lambda: len(a.owned()) == 2 and len(b.owned()) == 2, 30, "two partitions each",
                   diag=lambda: (a.events, b.events))
        assert a.owned() | b.owned() == every and not a.owned() & b.owned()
        # Cooperative: a gave up only what moved to b, never a partition it kept.
        revoked = set().union(*(parts for kind, parts in a.events if kind == "revoke"))
        assert revoked == b.owned() and not revoked & a.owned()
        before = list(a.events)
        kept = b.owned()
        # Static: b's process ends (no LeaveGroup) and comes back with the same instance id
        # within the session timeout: the same partitions, and nothing happens to a.
        b.close()
        b = _Member(bootstrap, group, topic, "member-b")
        wait_until(lambda: b.owned() == kept, 30, "the restarted static member has its partitions back")
        assert a.events == before and a.owned() == every - kept
    finally:
        a.close()
        if b is not None:
            b.close()
