"""DeleteRecords on a replicated cluster (issue 27): three broker processes on a real ZooKeeper,
a topic with three replicas and small segments.

* The answer's low watermark waits for the followers (Kafka's DelayedDeleteRecords): once it
  says N, every follower's log start is N (``log-start-offset-checkpoint`` on each broker's
  disk, written before the follower's next fetch reports it) and their segments below N are
  gone.
* A live follower that does not fetch (SIGSTOP) holds the answer back until ``timeout_ms``:
  REQUEST_TIMED_OUT (the leader's start has moved all the same); resumed, it follows.
* kill -9 of the leader: the new leader (a former follower) answers ListOffsets earliest with
  the new start and consumers begin there; kill -9 of every broker and a restart keep it
  (the checkpoint, not the segments, says where the log starts inside a segment).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import EARLIEST_TIME, FetchRequest, Producer, ProducerData, SimpleConsumer, admin
from hmbclient.broker import EmbeddedCluster
from hmbclient.errors import OffsetOutOfRangeError, RequestTimedOutError

pytestmark = pytest.mark.timeout(240)

TOPIC = "delrec"


@pytest.fixture()
def cluster(zookeeper: Any, tmp_path: Any) -> Iterator[EmbeddedCluster]:
    chroot = f"{zookeeper.connect}/delrec-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(3, chroot, log_dir=str(tmp_path), processes=True, replication_factor=3, num_partitions=1,
                         log_segment_bytes=1024, log_index_interval_bytes=100, replica_lag_time_max_ms=30_000,
                         replica_fetch_wait_max_ms=100, zookeeper_session_timeout_ms=3000, offsets_topic_num_partitions=1) as c:
        yield c


def _produce(cluster: EmbeddedCluster, values: list[bytes]) -> None:
    p = Producer(metadata_broker_list=cluster.bootstrap, request_required_acks=-1, message_send_max_retries=20, retry_backoff_ms=100)
    try:
        for f in [f for v in values for f in p.send(ProducerData(TOPIC, None, [v]))]:
            f.result(timeout=60)
    finally:
        p.close()


def _checkpointed_start(cluster: EmbeddedCluster, broker_id: int) -> int | None:
    path = os.path.join(cluster.broker_log_dir(broker_id), "log-start-offset-checkpoint")
    if not os.path.exists(path):
        return None
    lines = open(path, encoding="utf-8").read().split("\n")[2:]
    found = [int(x.split()[2]) for x in lines if x.startswith(f"{TOPIC} 0 ")]
    return found[0] if found else None


def _segment_bases(cluster: EmbeddedCluster, broker_id: int) -> list[int]:
    folder = os.path.join(cluster.broker_log_dir(broker_id), f"{TOPIC}-0")
    return sorted(int(n[:-4]) for n in os.listdir(folder) if n.endswith(".log"))


def _leader_view(cluster: EmbeddedCluster) -> tuple[int, list[bytes]]:
    """(ListOffsets earliest, the values read from there) at the current leader."""
    leader = cluster.leader(TOPIC, 0)
    assert leader is not None and leader >= 0
    b = cluster.broker(leader)
    c = SimpleConsumer(b.host, b.port)
    try:
        start = c.get_offsets_before(TOPIC, 0, EARLIEST_TIME, 1)[0]
        out: list[bytes] = []
        offset = start
        while True:
            got = list(c.fetch(FetchRequest(TOPIC, 0, offset, 1 << 20)))
            if not got:
                break
            out += [mo.message.value for mo in got]
            offset = got[-1].next_offset
        with pytest.raises(OffsetOutOfRangeError):
            list(c.fetch(FetchRequest(TOPIC, 0, start - 1, 1 << 20)))
        return start, out
    finally:
        c.close()


def test_followers_follow_the_log_start_and_it_survives_kill_9(cluster: EmbeddedCluster) -> None:
    cluster.create_topic(TOPIC, 1, replication_factor=3)
    cluster.await_isr(TOPIC)
    values = [b"value-%03d" % i for i in range(200)]
    _produce(cluster, values)
    leader = cluster.leader(TOPIC, 0)
    assert leader is not None
    followers = [b for b in range(3) if b != leader]

    # The answer comes once every live follower's log start reached the offset.
    assert admin.delete_records(cluster.bootstrap, {(TOPIC, 0): 137}, timeout_ms=20_000) == {(TOPIC, 0): 137}
    for b in range(3):
        assert _checkpointed_start(cluster, b) == 137, f"broker {b}"
        bases = _segment_bases(cluster, b)
        assert bases[0] <= 137 and (len(bases) == 1 or bases[1] > 137), f"broker {b}: segments {bases} below 137 are not all gone"
    assert _leader_view(cluster) == (137, values[137:])

    # A live follower that does not fetch holds the answer back until timeout_ms.
    cluster.pause(followers[0])
    try:
        with pytest.raises(RequestTimedOutError):
            # (bootstrapped from the leader: a paused broker would not answer Metadata either)
            lb = cluster.broker(leader)
            admin.delete_records(f"{lb.host}:{lb.port}", {(TOPIC, 0): 150}, timeout_ms=1500)
        assert _checkpointed_start(cluster, leader) == 150 and _checkpointed_start(cluster, followers[0]) == 137
    finally:
        cluster.resume(followers[0])
    wait_until(lambda: _checkpointed_start(cluster, followers[0]) == 150, 20, "the resumed follower takes the leader's log start")

    # kill -9 of the leader: a former follower leads, from the same start.
    cluster.kill(leader)
    wait_until(lambda: cluster.leader(TOPIC, 0) in followers, 30, "a follower leads")
    # (a new leader's high watermark reaches its log end once the ISR fetched: wait for that)
    wait_until(lambda: _leader_view(cluster) == (150, values[150:]), 30, "the new leader serves from 150")

    # kill -9 of every broker, then a restart of all: the start is still 150 wherever it leads.
    for b in followers:
        cluster.kill(b)
    for b in range(3):
        cluster.restart(b, timeout_s=60)
    wait_until(lambda: _leader_view(cluster) == (150, values[150:]), 60, "the leader after the restart serves from 150")
    assert _leader_view(cluster)[0] == 150
    cluster.await_isr(TOPIC, timeout_s=60)
    for b in range(3):
        assert _checkpointed_start(cluster, b) == 150, f"broker {b} after the restart"
