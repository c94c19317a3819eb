"""Network partitions (see partitions.py): no acknowledged value lost, no dirty read, no
acknowledgement from an isolated leader, committed offsets never moved back.

The bounded run below applies every partition kind once with two producers (hmbclient async,
librdkafka idempotent) and both readers; the ``chaos`` runs (``make chaos``) repeat each kind
three times with every producer kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .partitions import PARTITION_KINDS, PartitionRun
from .readers import READER_KINDS

pytestmark = pytest.mark.filterwarnings(
    "ignore:read_text is deprecated:DeprecationWarning", "ignore:open_text is deprecated:DeprecationWarning"
)


@pytest.mark.timeout(240)
def test_no_acknowledged_loss_and_no_dirty_read_under_partitions(tmp_path: Any, fault_summary: Callable[..., None]) -> None:
    result = PartitionRun(tmp_path, 21, PARTITION_KINDS, producers=("hmb-async", "librdkafka-idem"), readers=READER_KINDS).run()
    fault_summary(result.summary(), result)
    result.check()


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", PARTITION_KINDS)
def test_chaos_partitions(tmp_path: Any, kind: str, fault_summary: Callable[..., None]) -> None:
    """Each kind three times over (aimed by the seed), every producer kind, both readers."""
    result = PartitionRun(tmp_path, 200 + PARTITION_KINDS.index(kind), [kind] * 3, readers=READER_KINDS).run()
    fault_summary(result.summary(), result)
    result.check()


class _Seen:
    name = "reader"
    problems: list[str] = []

    def __init__(self, seen: dict[tuple[int, int], bytes | None]) -> None:
        self.seen = seen


def test_the_validation_counts_a_dirty_read(tmp_path: Any) -> None:
    """The judge can fail: a record read at an offset the final log holds something else at (or
    nothing) is a dirty read; one read where the log holds it is not."""
    run = PartitionRun(tmp_path, 0, [])
    run.readers = [_Seen({(0, 0): b"0000000001", (0, 1): b"0000000002", (1, 7): b"0000000003"})]  # type: ignore[list-item]
    run._judge_readers({(0, 0): b"0000000001", (0, 1): b"0000000009"})
    assert run.result.dirty_reads == {"reader": 2} and run.result.reads == {"reader": 3}
    assert any("2 dirty read(s), first faults-0@1" in p for p in run.result.problems), run.result.problems
    assert not run.result.ok


def test_the_validation_reports_a_committed_offset_moving_back(hmb_broker: Any) -> None:
    """The commit judge can fail: a group whose committed offset (read back from a real broker)
    is below what the reader recorded as committed is reported as moved back at the end (a
    problem), and as a stale commit read during the faults; one at or above it is not."""
    import confluent_kafka

    from .readers import Reader, _check_committed

    topic = "commit-judge"
    group = "commit-judge-group"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": hmb_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        p = confluent_kafka.Producer({"bootstrap.servers": hmb_broker.bootstrap})
        p.produce(topic, b"x")
        p.flush(30)
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 1)], asynchronous=False)
        reader = Reader(0, None, topic, 1)
        _check_committed(reader, consumer, {0: 1}, final=True)
        assert reader.problems == []
        _check_committed(reader, consumer, {0: 5}, final=False)
        assert reader.problems == [] and reader.stale_commit_reads == [f"committed offset of {topic}-0 moved back: 1 read after 5 was committed"]
        _check_committed(reader, consumer, {0: 5}, final=True)
        assert reader.problems == [f"committed offset of {topic}-0 moved back: 1 read after 5 was committed (at the end)"]
    finally:
        consumer.close()
