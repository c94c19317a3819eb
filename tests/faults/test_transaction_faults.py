"""Transactions survive the faults: 0 committed lost, 0 aborted visible, 0 duplicates (issue 23).

Transactional producers (hmbclient's, librdkafka's, kafka-python's: transactions.py) write
sequential values in transactions of a few values to a few partitions, aborting some on
purpose, while a read_committed reader reads and the harness kills the transaction coordinator, a leader and
the controller;
a producer fenced or failing for good is replaced by a new instance with the same
transactional.id. Then every partition is read with read_committed up to its last stable
offset: every committed value exactly once, no aborted value, each transaction of unknown
outcome whole or absent, each producer's values in order (transactions.py, J0-J5). The raw
log is judged too (the harness: every committed value stored, no duplicate, in send order).

The bounded run below takes about a minute; the chaos runs of test_failover_faults.py run
the transactional producers beside the others. The planted run shows the judge can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .harness import FaultRun
from .transactions import ABORTED, COMMITTED, TXN_KINDS, TxnFaultRun, TxnWorker

pytestmark = pytest.mark.filterwarnings(
    "ignore:read_text is deprecated:DeprecationWarning", "ignore:open_text is deprecated:DeprecationWarning"
)


@pytest.mark.timeout(180)
def test_transactions_under_faults(zookeeper: Any, tmp_path: Any, fault_summary: Callable[..., None]) -> None:
    result = TxnFaultRun(zookeeper.connect, tmp_path, 31, ("kill_txn_coordinator", "kill_leader", "kill_controller"),
                         producers=TXN_KINDS, readers=("hmb-reader-rc",), rate=60.0).run()
    fault_summary(result.summary(), result)
    assert any("transactions:" in n for n in result.notes), result.details()
    result.check()


class _Planted(FaultRun):
    """Once the producers are done, the records claim a committed transaction was aborted and an
    aborted one committed: the judge must report an aborted value visible and committed values
    lost."""

    def _run_producers_and_faults(self) -> None:
        super()._run_producers_and_faults()
        w = next(x for x in self.workers if isinstance(x, TxnWorker))
        committed = next(t for t in w.txn_log.txns if t.outcome == COMMITTED)
        aborted = next(t for t in w.txn_log.txns if t.outcome == ABORTED)
        committed.outcome, aborted.outcome = ABORTED, COMMITTED


def test_the_transaction_judge_can_fail(zookeeper: Any, tmp_path: Any) -> None:
    result = _Planted(zookeeper.connect, tmp_path, 3, [], producers=("hmb-txn",), readers=("hmb-reader-rc",)).run()
    text = result.details()
    assert any("aborted value(s) visible to read_committed" in p for p in result.problems), text
    assert any("committed value(s) not read with read_committed" in p for p in result.problems), text
    assert any("hmb-reader-rc#0 (read_committed)" in p for p in result.problems), text
    assert not result.ok
