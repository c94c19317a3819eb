"""kafka-python 3.0.12 loses a finished rejoin when ``poll()`` times out mid-join: recorded here.

The stall seen in the mixed-group tests (a kafka-python leader, alone, on a fresh broker, quiet
after its generation-2 JoinGroup until its session ends) is kafka-python's, not the coordinator's.
What the wire shows (kafka.coordinator at debug, our coordinator at debug):

1. generation 1 is joined while the subscribed topic does not exist yet (empty assignment);
2. the topic appears; kafka-python's ``need_rejoin()`` turns True through its metadata snapshot
   only (``_assignment_snapshot != _metadata_snapshot``; base ``rejoin_needed`` stays False);
3. it sends JoinGroup, gets generation 2 (it leads), computes the assignment, which sets
   ``_assignment_snapshot = _metadata_snapshot`` — ``need_rejoin()`` is False again while the
   join task is still in flight — and sends SyncGroup;
4. the caller's ``poll(timeout_ms)`` expires before the SyncGroup answer (``coordinator.poll:
   timeout in ensure_active_group; returning early``); the join task is left to finish alone;
5. the broker answers SyncGroup NONE with the full assignment (``Received SyncGroup response``);
6. the next ``poll()`` sees ``need_rejoin()`` False and never awaits the finished join task, and
   only that awaiter (``join_group_async``) enables the heartbeat and runs
   ``_on_join_complete`` (assigns the partitions). No heartbeat, no partitions: the coordinator
   removes the member when its session times out.

The window is the JoinGroup→SyncGroup round trip against the caller's poll timeout, hence
"1 in 3 / 1 in 10" with ``poll(100)``-ish loops and never with extra logging. ``poll(1)`` makes it
likely (5 of 5 on a quiet machine, about half on a loaded one). Workaround in tests: poll with timeouts longer than a join round trip, or create
the topic before the kafka-python consumer subscribes.

The test first checks our side (the coordinator completed generation 2: Stable, the member
holding every partition), then the kafka-python symptom, raised as :class:`KafkaPythonLostJoin`
so the xfail catches only that (not strict: the race may go kafka-python's way), and any failure
of our side fails the test.
"""

from __future__ import annotations

import time

import kafka  # a test dependency: its absence fails, not skips
import pytest

from hmbclient.broker.coordinator.state import GroupState
from hmbclient.broker.embedded import EmbeddedBroker
from tests.waiting import wait_until


class KafkaPythonLostJoin(AssertionError):
    """kafka-python reached the generation but never took its assignment."""


# Not strict: whether kafka-python's poll gives up inside the join round trip is a race (about
# half of the runs on a loaded 2-core machine); our side (generation 2 Stable with an assignment
# stored) is asserted either way and fails the test with any other exception.
@pytest.mark.xfail(strict=False, raises=KafkaPythonLostJoin, reason="kafka-python 3.0.12: a join finished after poll() timed out is never completed")
def test_kafka_python_rejoin_finished_after_poll_timeout_is_lost() -> None:
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient, NewTopic

    # auto.create.topics.enable=false: kafka-python's metadata requests must not create "late"
    # before the test does (seen once on a loaded machine: TopicAlreadyExistsError).
    with EmbeddedBroker(group_initial_rebalance_delay_ms=0, auto_create_topics_enable=False) as b:
        b.start()
        c = KafkaConsumer("late", bootstrap_servers=b.bootstrap, group_id="g-late", session_timeout_ms=6000,
                          heartbeat_interval_ms=500, metadata_max_age_ms=100)
        try:
            coord = b.broker.group_coordinator
            assert coord is not None

            def generation() -> int:
                c.poll(20)
                group = coord.group("g-late")
                return group.generation_id if group is not None and group.state is GroupState.STABLE else 0

            wait_until(lambda: generation() >= 1, 10, "generation 1 (no topic yet)")
            admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
            try:
                admin.create_topics([NewTopic("late", 4, 1)])
            except kafka.errors.TopicAlreadyExistsError:
                pass  # a retry of a create that went through (its answer slow under load): created
            finally:
                admin.close()

            def polled_generation_2() -> bool:
                c.poll(1)  # shorter than a join round trip: every poll gives up mid-join
                group = coord.group("g-late")
                return group is not None and group.generation_id >= 2 and group.state is GroupState.STABLE

            wait_until(polled_generation_2, 10, "generation 2 completed by the coordinator")
            group = coord.group("g-late")
            assert group is not None
            (member,) = group.members.values()
            assert member.assignment, "the coordinator stored no assignment for generation 2"
            # Our side is done; now kafka-python's: does it ever take the partitions?
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                if c.assignment():
                    return
                c.poll(50)
            raise KafkaPythonLostJoin(f"generation {group.generation_id} Stable on the broker, kafka-python holds {c.assignment()}")
        finally:
            c.close()
