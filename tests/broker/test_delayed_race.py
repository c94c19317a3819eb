"""The timeout of a DelayedProduce / DelayedDeleteRecords racing its completion.

The condition becomes true on one thread (an append / a follower's fetch moved the high or low
watermark, then ``check_and_complete``) while the expiry timer fires on another
(``advance_clock`` past the deadline); both threads are released together by a barrier, many
times. Each time, exactly one of them answers, and the answer is the result of one check: all
partitions answered by the completing check (not expired) or all timed out (expired), never a
blend, and nobody changes the statuses after the answer went out.

The replica manager is stood in for by ``Watermarks`` (the ``Replicas`` protocol the delayed
operations read): its ``time.sleep(0)`` hands the interpreter to the other thread in the middle
of a check, where the real replica manager takes a partition lock.
"""

from __future__ import annotations

import copy
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.broker.delayed import (
    DelayedDeleteRecords,
    DelayedProduce,
    DeleteRecordsStatus,
    ProduceStatus,
)
from hmbclient.broker.purgatory import Purgatory
from hmbclient.broker.results import AppendResult
from hmbclient.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)

ROUNDS = 300
TPS = [("t", 0), ("t", 1), ("t", 2)]
REQUIRED = 10


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Watermarks:
    """High and low watermarks of the partitions this broker leads (one value for all)."""

    def __init__(self) -> None:
        self.mark = 0

    def _yield(self) -> None:
        time.sleep(0)

    def acks_status(self, topic: str, partition: int, required_offset: int) -> int | None:
        self._yield()
        return ErrorCode.NONE if self.mark >= required_offset else None

    def low_watermark(self, topic: str, partition: int) -> tuple[int, int]:
        self._yield()
        return ErrorCode.NONE, self.mark

    def fetch_end(self, topic: str, partition: int, from_replica: bool, isolation_level: int = 0) -> tuple[int, Any, int]:
        raise AssertionError("not used by these operations")


@pytest.fixture(autouse=True)
def _fast_switches() -> Iterator[None]:
    """Switch threads often, so the two sides interleave inside a check."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def _complete(barrier: threading.Barrier, replicas: Watermarks, purgatory: Purgatory[Any]) -> None:
    barrier.wait()
    replicas.mark = REQUIRED  # every partition reached it at once
    for tp in TPS:
        purgatory.check_and_complete(tp)


def _expire(barrier: threading.Barrier, purgatory: Purgatory[Any], now_ms: int, lag: int) -> None:
    barrier.wait()
    for _ in range(lag):  # sweep the expiry across the completing check, round by round
        time.sleep(0)
    purgatory.advance_clock(now_ms)


def _race(make_op: Any, answer_of: Any) -> dict[str, int]:
    """Run ROUNDS races; returns how many each side won (both must win some to mean anything)."""
    wins = {"completed": 0, "expired": 0}
    for round_ in range(ROUNDS):
        clock = Clock()
        replicas = Watermarks()
        purgatory: Purgatory[Any] = Purgatory("race", clock)
        answers: list[Any] = []
        op, statuses = make_op(replicas, lambda out, answers=answers: answers.append(copy.deepcopy(out)))
        assert purgatory.try_complete_else_watch(op, list(TPS)) is False
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=_complete, args=(barrier, replicas, purgatory)),
            threading.Thread(target=_expire, args=(barrier, purgatory, clock.now + 100, round_ % 12)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
            assert not t.is_alive()
        assert len(answers) == 1, f"{len(answers)} answers"
        codes = answer_of(answers[0])
        expected = ErrorCode.REQUEST_TIMED_OUT if op.is_expired else ErrorCode.NONE
        assert codes == {tp: expected for tp in TPS}, f"expired={op.is_expired}, answered {codes}"
        # nobody rewrote the statuses after the answer went out
        assert answer_of(statuses) == codes, "statuses rewritten after the answer"
        wins["expired" if op.is_expired else "completed"] += 1
    return wins


def test_delete_records_timeout_racing_completion_answers_once() -> None:
    def make_op(replicas: Watermarks, respond: Any) -> tuple[DelayedDeleteRecords, dict[tuple[str, int], DeleteRecordsStatus]]:
        statuses = {tp: DeleteRecordsStatus(REQUIRED, ErrorCode.NONE) for tp in TPS}
        return DelayedDeleteRecords(50, statuses, replicas, respond), statuses

    def answer_of(statuses: dict[tuple[str, int], DeleteRecordsStatus]) -> dict[tuple[str, int], int]:
        out = {}
        for tp, st in statuses.items():
            # one partition's answer is whole: NONE with the low watermark, or an error with -1
            assert (st.error_code == ErrorCode.NONE) == (st.low_watermark >= REQUIRED), st
            out[tp] = st.error_code
        return out

    wins = _race(make_op, answer_of)
    assert wins["completed"] and wins["expired"], wins


def test_produce_timeout_racing_completion_answers_once() -> None:
    def make_op(replicas: Watermarks, respond: Any) -> tuple[DelayedProduce, dict[tuple[str, int], ProduceStatus]]:
        statuses = {tp: ProduceStatus(REQUIRED, AppendResult(ErrorCode.NONE, REQUIRED - 1, 0)) for tp in TPS}
        return DelayedProduce(50, statuses, replicas, respond), statuses

    def answer_of(out: dict[tuple[str, int], Any]) -> dict[tuple[str, int], int]:
        return {tp: (r.result if isinstance(r, ProduceStatus) else r).error_code for tp, r in out.items()}

    wins = _race(make_op, answer_of)
    assert wins["completed"] and wins["expired"], wins
