"""No acknowledged message is lost while brokers crash, freeze and come back.

Each run (see harness.py) starts 3 broker processes (replication factor 3, min.insync.replicas
2), writes sequential values with acks=-1 from six clients (hmbclient async and sync,
kafka-python and librdkafka with idempotence off and on) and applies seeded faults one after another, waiting for the cluster
to recover after each; then every acknowledged value must be read back where it was
acknowledged, the replicas' logs must be identical and every ISR whole again; the idempotent
producers must have no duplicate and their values stored in send order.

The bounded runs below cover every fault kind in under two minutes; the ``chaos`` runs (more
seeds, eight faults each, about ten to fifteen minutes) run with ``make chaos`` only, with the
transactional producers of transactions.py beside the others, a read_committed reader among
the readers, and ``kill_txn_coordinator`` among the faults (``TxnFaultRun``).
A failed run says which values were lost, whether any broker's log directory still holds them,
and where the full report (events, client errors, broker output) was written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from .harness import FAULT_KINDS, PRODUCER_KINDS, TOPIC, FaultRun, encode_value, fault_sequence
from .readers import READER_KINDS
from .transactions import TXN_KINDS, TxnFaultRun

#: (seed, faults): together every kind, each run short.
BOUNDED: list[tuple[int, Sequence[str]]] = [
    (11, ("kill_leader", "pause_follower", "kill_controller")),
    (12, ("pause_past_session", "restart_all", "shrink_then_kill_leader")),
]
assert {k for _, kinds in BOUNDED for k in kinds} == set(FAULT_KINDS)

CHAOS_SEEDS = range(101, 111)

# kafka-python loads its protocol schemas through a deprecated importlib.resources call.
pytestmark = pytest.mark.filterwarnings(
    "ignore:read_text is deprecated:DeprecationWarning", "ignore:open_text is deprecated:DeprecationWarning"
)
CHAOS_FAULTS = 8


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("seed", "faults"), BOUNDED, ids=[f"seed{s}-{'+'.join(k)}" for s, k in BOUNDED])
def test_no_acknowledged_loss_under_faults(zookeeper: Any, tmp_path: Any, seed: int, faults: Sequence[str],
                                           fault_summary: Callable[..., None]) -> None:
    result = FaultRun(zookeeper.connect, tmp_path, seed, faults).run()
    fault_summary(result.summary(), result)
    result.check()


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", CHAOS_SEEDS)
def test_chaos_no_acknowledged_loss(zookeeper: Any, tmp_path: Any, seed: int, fault_summary: Callable[..., None]) -> None:
    result = TxnFaultRun(zookeeper.connect, tmp_path, seed, CHAOS_FAULTS, producers=PRODUCER_KINDS + TXN_KINDS,
                         readers=READER_KINDS).run()
    fault_summary(result.summary(), result)
    result.check()


class _ForgedAck(FaultRun):
    """A run that claims one more acknowledged value than was ever written."""

    def _run_producers_and_faults(self) -> None:
        super()._run_producers_and_faults()
        w = self.workers[0]
        never_written = w.log.next_value()
        w.log.on_ack(never_written, 0, 10**9)
        self.result.acked[w.name] += 1


def test_the_validation_reports_a_lost_value(zookeeper: Any, tmp_path: Any) -> None:
    """The check can fail: an acknowledged value that is on no broker is reported lost, with
    the verdict of the disk search."""
    result = _ForgedAck(zookeeper.connect, tmp_path, 0, [], producers=("hmb-async",)).run()
    assert len(result.lost) == 1 and "on no broker's disk: LOST" in result.lost[0], result.details()
    assert not result.ok
    with pytest.raises(AssertionError, match="lost=1"):
        result.check()


class _InjectedCopy(FaultRun):
    """A run in which, once the producers are done, a plain producer writes again a value the
    idempotent producer had acknowledged earlier: a duplicate, stored out of send order."""

    def _run_producers_and_faults(self) -> None:
        super()._run_producers_and_faults()
        from kafka import KafkaProducer

        w = self.workers[0]
        value, (partition, _) = min(w.log.acked.items())
        p = KafkaProducer(bootstrap_servers=self.cluster.bootstrap.split(","), acks="all", enable_idempotence=False)
        try:
            p.send(TOPIC, value=encode_value(value), partition=partition).get(timeout=30)
        finally:
            p.close(timeout=10)


def test_the_validation_fails_an_idempotent_producers_duplicate(zookeeper: Any, tmp_path: Any) -> None:
    """The check can fail: a copy of an idempotent producer's value is a duplicate and a
    reordering, and each fails the run."""
    result = _InjectedCopy(zookeeper.connect, tmp_path, 0, [], producers=("librdkafka-idem",)).run()
    assert result.duplicates["librdkafka-idem"] == 1 and result.reordered["librdkafka-idem"] == 1, result.details()
    assert any("idempotent) stored 1 duplicate" in p for p in result.problems), result.details()
    assert any("out of send order" in p for p in result.problems), result.details()
    assert not result.ok


def test_fault_sequences_are_seeded_and_cover_every_kind() -> None:
    assert fault_sequence(5, 8) == fault_sequence(5, 8)
    assert set(fault_sequence(5, len(FAULT_KINDS))) == set(FAULT_KINDS)
    assert fault_sequence(5, 8) != fault_sequence(6, 8)
