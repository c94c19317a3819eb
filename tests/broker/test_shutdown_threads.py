"""A stopped broker or cluster leaves no thread of its own behind.

The leak this guards: a controller resigning at shutdown deletes ``/controller``; its own watch
queued ``_controller_changed`` before the controller was marked stopped, so it was re-elected
(epoch + 1) and started fresh ``controller-N-to-M`` senders that nothing stopped — one idle
thread per broker lifetime (101 of them after the full suite), and LeaderAndIsr/UpdateMetadata
sent to a broker already refusing them ("from controller 0 epoch 2 refused (error 11)").

Checked: every thread started while the broker/cluster ran is gone (joined) once it is closed,
with a standalone broker (MemoryStore) and a two-broker cluster on a real ZooKeeper (kazoo).
"""

from __future__ import annotations

import threading
from pathlib import Path

from hmbclient.broker.cluster import EmbeddedCluster
from hmbclient.broker.embedded import EmbeddedBroker
from hmbclient.testing import LocalZooKeeper
from tests.waiting import wait_until


def _new_threads(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


def _assert_no_threads_left(before: set[threading.Thread]) -> None:
    # the threads are told to stop by close(); the last ones may still be returning
    wait_until(lambda: not _new_threads(before), 5, "the broker's threads to end", diag=lambda: _new_threads(before))


def test_standalone_broker_leaves_no_threads_and_its_controller_is_not_reelected_at_shutdown() -> None:
    before = set(threading.enumerate())
    with EmbeddedBroker(num_partitions=2) as b:
        b.start()
        controller = b.broker.controller
        assert controller is not None
        wait_until(lambda: controller.active, 10, "the broker to be its own controller")
        epoch = controller.epoch
        senders = [t for t in threading.enumerate() if t.name.startswith("controller-")]
        assert senders, "a controller sends to its own broker through a sender thread"
    assert not controller.active and controller.epoch == epoch, f"re-elected at shutdown: epoch {epoch} -> {controller.epoch}"
    _assert_no_threads_left(before)


def test_zookeeper_cluster_leaves_no_controller_broker_or_kazoo_threads(tmp_path: Path) -> None:
    with LocalZooKeeper(data_dir=tmp_path / "zk") as zk:
        before = set(threading.enumerate())
        with EmbeddedCluster(2, zookeeper_connect=zk.connect, num_partitions=2) as cluster:
            wait_until(lambda: any(t.name.startswith("controller-") for t in threading.enumerate()), 10,
                       "the controller's senders", diag=lambda: _new_threads(before))
            assert len(cluster.brokers) == 2
        _assert_no_threads_left(before)
