"""The transaction coordinator's decisions (broker/transaction/state.py): every labelled case,
whole transactions driven through the shell's reports (log writes, markers), fencing, timeouts,
expiry, a coordinator taking over, and a hypothesis state machine of several producers sharing
one transactional id that checks the module's invariants after every step.

The decisions are pure: the tests are the shell, with their own clock and their own "log".
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hmbclient.broker.transaction.state import (
    TRANSITIONS,
    Decision,
    Forget,
    IllegalStateTransition,
    Reply,
    SendMarkers,
    TxnConfig,
    TxnMetadata,
    TxnState,
    WriteTxnLog,
    abort_timed_out,
    add_partitions,
    completion_failed,
    describe,
    end_txn,
    error_for_version,
    expire,
    expired,
    init_producer_id,
    list_transactions,
    log_written,
    markers_written,
    needs_new_producer_id,
    on_load,
    retry_completion,
    timed_out,
)
from hmbclient.errors import ErrorCode

CFG = TxnConfig(max_timeout_ms=900_000, transactional_id_expiration_ms=3_600_000)
TID = "orders-0"
T0 = 1_000_000
NONE = ErrorCode.NONE
S = TxnState


def kinds(d: Decision) -> list[str]:
    return [type(e).__name__ for e in d.effects]


def written(d: Decision, now: int = T0, coordinator_epoch: int = 4) -> Decision:
    """The shell appends the pending record and reports success."""
    assert d.txn is not None and d.txn.pending is not None
    (w,) = [e for e in d.effects if isinstance(e, WriteTxnLog)]
    assert w.transactional_id == d.txn.transactional_id
    return log_written(d.txn, NONE, now, coordinator_epoch)


def init(txn: TxnMetadata | None, now: int = T0, waiter: Any = "init", **kw: Any) -> Decision:
    pid = 1000 if needs_new_producer_id(txn, kw.get("expected")) else None
    return init_producer_id(txn, TID, kw.pop("timeout_ms", 60_000), now, CFG, waiter=waiter, new_producer_id=pid, **kw)


def ready(now: int = T0) -> TxnMetadata:
    """A producer that ran InitProducerId: (1000, 0), Empty."""
    d = written(init(None, now), now)
    assert d.txn is not None and d.txn.state is S.EMPTY
    return d.txn


def ongoing(parts: set[tuple[str, int]] | None = None, now: int = T0) -> TxnMetadata:
    txn = ready(now)
    d = written(add_partitions(txn, TID, txn.producer_id, txn.producer_epoch, parts or {("a", 0), ("a", 1)}, now, waiter="add"), now)
    assert d.txn is not None and d.txn.state is S.ONGOING
    return d.txn


# --- the table ---------------------------------------------------------------------------------

KAFKA_VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


def test_the_table_is_kafkas_valid_previous_states_read_the_other_way() -> None:
    for src in S:
        assert TRANSITIONS[src] == {dst for dst, prev in KAFKA_VALID_PREVIOUS.items() if src in prev}, src


def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.label, s.id) for s in S] == [
        ("Empty", 0), ("Ongoing", 1), ("PrepareCommit", 2), ("PrepareAbort", 3),
        ("CompleteCommit", 4), ("CompleteAbort", 5), ("Dead", 6), ("PrepareEpochFence", 7),
    ]  # fmt: skip
    assert S.from_id(7) is S.PREPARE_EPOCH_FENCE and S.from_label("Ongoing") is S.ONGOING
    with pytest.raises(ValueError):
        S.from_id(8)


# --- InitProducerId ----------------------------------------------------------------------------


def test_init_case_a_b_bad_id_and_timeouts() -> None:
    d = init_producer_id(None, "", 60_000, T0, CFG, waiter="w", new_producer_id=1)
    assert d.effects == (Reply("w", ErrorCode.INVALID_REQUEST),) and d.txn is None
    for bad in (0, -1, CFG.max_timeout_ms + 1):
        d = init_producer_id(None, TID, bad, T0, CFG, waiter="w", new_producer_id=1)
        assert d.effects == (Reply("w", ErrorCode.INVALID_TRANSACTION_TIMEOUT),)
    d = init_producer_id(None, TID, CFG.max_timeout_ms, T0, CFG, waiter="w", new_producer_id=1)
    assert kinds(d) == ["WriteTxnLog"]


def test_init_case_c_d_new_id_answers_only_after_the_write() -> None:
    d = init(None)
    assert d.txn is not None and d.txn.state is S.EMPTY and d.txn.producer_epoch == -1  # not yet
    assert kinds(d) == ["WriteTxnLog"] and not d.replies
    w = d.effects[0]
    assert isinstance(w, WriteTxnLog) and w.value is not None and (w.value.producer_id, w.value.producer_epoch) == (1000, 0)
    done = written(d)
    assert done.effects == (Reply("init", NONE, 1000, 0),)
    assert done.txn is not None and done.txn.pending is None and done.txn.producer_epoch == 0
    with pytest.raises(ValueError):
        init_producer_id(None, TID, 60_000, T0, CFG)  # a new id needs an allocated producer id


def test_init_case_d_bumps_the_epoch_from_every_idle_state() -> None:
    txn = ready()
    again = written(init(txn, T0 + 1))
    assert again.effects == (Reply("init", NONE, 1000, 1),)
    # after a commit
    txn = ongoing()
    txn = _end(txn, committed=True)
    assert txn.state is S.COMPLETE_COMMIT
    d = written(init(txn, T0 + 2))
    assert d.txn is not None and d.txn.state is S.EMPTY and d.txn.producer_epoch == 1 and d.txn.partitions == frozenset()
    assert d.txn.start_ms == -1 and d.txn.last_update_ms == T0 + 2


def test_init_case_d_exhausted_epoch_rotates_the_producer_id() -> None:
    txn = TxnMetadata(TID, 7, producer_epoch=32766, state=S.COMPLETE_ABORT, last_update_ms=T0)
    assert needs_new_producer_id(txn)
    with pytest.raises(ValueError):
        init_producer_id(txn, TID, 60_000, T0, CFG)
    d = init_producer_id(txn, TID, 60_000, T0, CFG, waiter="w", new_producer_id=8)
    done = written(d)
    assert done.effects == (Reply("w", NONE, 8, 0),)
    assert done.txn is not None and done.txn.previous_producer_id == 7


def test_init_case_e_concurrent_while_pending_or_prepared() -> None:
    d = init(ready(), T0)
    assert d.txn is not None and d.txn.pending is not None
    assert init(d.txn, waiter="second").effects == (Reply("second", ErrorCode.CONCURRENT_TRANSACTIONS),)
    prepared = written(end_txn(ongoing(), TID, 1000, 0, True, T0, waiter="end")).txn
    assert prepared is not None and prepared.state is S.PREPARE_COMMIT
    assert init(prepared, waiter="w").effects == (Reply("w", ErrorCode.CONCURRENT_TRANSACTIONS),)


def test_init_case_f_expected_producer_of_another_id_is_fenced() -> None:
    txn = ready()
    assert init(txn, waiter="w", expected=(999, 0)).effects == (Reply("w", ErrorCode.PRODUCER_FENCED),)
    # the current producer recovering: bump, last epoch remembered; its retry gets the same epoch
    d = written(init(txn, waiter="w", expected=(1000, 0)))
    assert d.effects == (Reply("w", NONE, 1000, 1),) and d.txn is not None and d.txn.last_producer_epoch == 0
    assert written(init(d.txn, waiter="retry", expected=(1000, 0))).effects == (Reply("retry", NONE, 1000, 1),)


def test_init_case_g_fences_the_open_transaction_and_aborts_it() -> None:
    txn = ongoing()
    d = init(txn, T0 + 5, waiter="new")
    assert kinds(d) == ["WriteTxnLog"] and not d.replies
    w = d.effects[0]
    assert isinstance(w, WriteTxnLog) and w.value is not None
    assert (w.value.state, w.value.producer_epoch, w.value.partitions) == (S.PREPARE_ABORT, 1, txn.partitions)
    done = written(d, T0 + 5)
    assert done.effects == (
        Reply("new", ErrorCode.CONCURRENT_TRANSACTIONS),
        SendMarkers(TID, 1000, 1, False, txn.partitions, 4),
    )
    fenced = done.txn
    assert fenced is not None
    # the zombie (epoch 0) is fenced from here on, whatever it tries
    assert end_txn(fenced, TID, 1000, 0, True, T0, waiter="z").effects == (Reply("z", ErrorCode.PRODUCER_FENCED),)
    assert add_partitions(fenced, TID, 1000, 0, {("b", 0)}, T0, waiter="z").effects == (Reply("z", ErrorCode.PRODUCER_FENCED),)
    # the new producer retries while markers are out, then after the abort completes
    assert init(fenced, waiter="new").effects == (Reply("new", ErrorCode.CONCURRENT_TRANSACTIONS),)
    aborted = _markers(fenced)
    assert aborted.state is S.COMPLETE_ABORT
    assert written(init(aborted, waiter="new")).effects == (Reply("new", NONE, 1000, 2),)


# --- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------


def test_add_partitions_cases() -> None:
    txn = ready()
    err = ErrorCode
    assert add_partitions(txn, "", 1000, 0, {("a", 0)}, T0, waiter="w").effects == (Reply("w", err.INVALID_REQUEST),)  # A
    assert add_partitions(None, TID, 1000, 0, {("a", 0)}, T0, waiter="w").effects == (Reply("w", err.INVALID_PRODUCER_ID_MAPPING),)  # B
    assert add_partitions(txn, TID, 1001, 0, {("a", 0)}, T0, waiter="w").effects == (Reply("w", err.INVALID_PRODUCER_ID_MAPPING),)  # B
    assert add_partitions(txn, TID, 1000, 1, {("a", 0)}, T0, waiter="w").effects == (Reply("w", err.PRODUCER_FENCED),)  # C
    d = add_partitions(txn, TID, 1000, 0, {("a", 0)}, T0 + 3, waiter="w")  # F
    assert kinds(d) == ["WriteTxnLog"] and d.txn is not None
    assert add_partitions(d.txn, TID, 1000, 0, {("a", 1)}, T0, waiter="x").effects == (Reply("x", err.CONCURRENT_TRANSACTIONS),)  # D
    on = written(d, T0 + 3)
    assert on.effects == (Reply("w", NONE),) and on.txn is not None and on.txn.start_ms == T0 + 3
    # E: already in, nothing written
    assert add_partitions(on.txn, TID, 1000, 0, {("a", 0)}, T0 + 9, waiter="y") == Decision(on.txn, (Reply("y", NONE),))
    # F again: the union, the start time kept
    more = written(add_partitions(on.txn, TID, 1000, 0, {("__consumer_offsets", 7)}, T0 + 9, waiter="z"), T0 + 9)
    assert more.txn is not None and more.txn.partitions == {("a", 0), ("__consumer_offsets", 7)} and more.txn.start_ms == T0 + 3
    # D: while prepared
    prepared = written(end_txn(more.txn, TID, 1000, 0, False, T0)).txn
    assert add_partitions(prepared, TID, 1000, 0, {("a", 5)}, T0, waiter="p").effects == (Reply("p", err.CONCURRENT_TRANSACTIONS),)


# --- EndTxn ------------------------------------------------------------------------------------


def _end(txn: TxnMetadata, committed: bool, now: int = T0) -> TxnMetadata:
    d = written(end_txn(txn, TID, txn.producer_id, txn.producer_epoch, committed, now, waiter="end"), now)
    assert d.replies == [Reply("end", NONE)]
    return _markers(d.txn)


def _markers(txn: TxnMetadata | None, now: int = T0) -> TxnMetadata:
    assert txn is not None
    d = markers_written(txn, txn.partitions, now)
    return written(d, now).txn  # type: ignore[return-value]


def test_end_txn_case_e_commit_writes_prepare_then_markers_then_complete() -> None:
    txn = ongoing({("a", 0), ("b", 3)})
    d = end_txn(txn, TID, 1000, 0, True, T0 + 1, waiter="end")
    assert kinds(d) == ["WriteTxnLog"] and not d.replies
    d = written(d, T0 + 1, coordinator_epoch=9)
    assert d.effects == (Reply("end", NONE), SendMarkers(TID, 1000, 0, True, frozenset({("a", 0), ("b", 3)}), 9))
    prepared = d.txn
    assert prepared is not None and prepared.state is S.PREPARE_COMMIT
    half = markers_written(prepared, {("a", 0)}, T0 + 2)  # Case A
    assert half.effects == () and half.txn is not None and half.txn.partitions == {("b", 3)}
    last = markers_written(half.txn, {("b", 3)}, T0 + 3)  # Case B
    assert kinds(last) == ["WriteTxnLog"]
    assert markers_written(last.txn, {("b", 3)}, T0 + 3) == Decision(last.txn)  # Case C: late, pending
    done = written(last, T0 + 3)
    assert done.effects == () and done.txn is not None
    assert (done.txn.state, done.txn.partitions, done.txn.producer_epoch) == (S.COMPLETE_COMMIT, frozenset(), 0)


def test_end_txn_cases_on_other_states() -> None:
    err = ErrorCode
    txn = ready()
    assert end_txn(txn, "", 1000, 0, True, T0, waiter="w").effects == (Reply("w", err.INVALID_REQUEST),)  # A
    assert end_txn(None, TID, 1000, 0, True, T0, waiter="w").effects == (Reply("w", err.INVALID_PRODUCER_ID_MAPPING),)  # B
    assert end_txn(txn, TID, 1000, 3, True, T0, waiter="w").effects == (Reply("w", err.PRODUCER_FENCED),)  # C
    assert end_txn(txn, TID, 1000, 0, True, T0, waiter="w").effects == (Reply("w", err.INVALID_TXN_STATE),)  # H: Empty
    on = ongoing()
    pending = end_txn(on, TID, 1000, 0, True, T0).txn
    assert end_txn(pending, TID, 1000, 0, True, T0, waiter="w").effects == (Reply("w", err.CONCURRENT_TRANSACTIONS),)  # D
    prepared = written(end_txn(on, TID, 1000, 0, True, T0)).txn
    assert end_txn(prepared, TID, 1000, 0, True, T0, waiter="w").effects == (Reply("w", err.CONCURRENT_TRANSACTIONS),)  # G
    assert end_txn(prepared, TID, 1000, 0, False, T0, waiter="w").effects == (Reply("w", err.INVALID_TXN_STATE),)  # H
    committed = _markers(prepared)
    assert end_txn(committed, TID, 1000, 0, True, T0, waiter="w").effects == (Reply("w", NONE),)  # F: a retry
    assert end_txn(committed, TID, 1000, 0, False, T0, waiter="w").effects == (Reply("w", err.INVALID_TXN_STATE),)  # H
    aborted = _end(ongoing(), committed=False)
    assert aborted.state is S.COMPLETE_ABORT
    assert end_txn(aborted, TID, 1000, 0, False, T0, waiter="w").effects == (Reply("w", NONE),)  # F


# --- the shell's reports -----------------------------------------------------------------------


def test_log_written_failure_drops_the_transition_and_answers_the_error() -> None:
    txn = ready()
    d = add_partitions(txn, TID, 1000, 0, {("a", 0)}, T0, waiter="w")
    failed = log_written(d.txn, ErrorCode.NOT_COORDINATOR, T0, 4)  # type: ignore[arg-type]
    assert failed.effects == (Reply("w", ErrorCode.NOT_COORDINATOR),)
    assert failed.txn == txn
    with pytest.raises(IllegalStateTransition):
        log_written(txn, NONE, T0, 4)


def test_a_failed_completion_write_is_written_again_by_the_chore() -> None:
    """Found by the transactional fault runs (tests/faults): a Complete* append that failed
    (NOT_ENOUGH_REPLICAS while __transaction_state's ISR was short) left the id in
    PrepareCommit with every marker written and nothing pending, answering
    CONCURRENT_TRANSACTIONS to every InitProducerId for good (until the coordinator moved)."""
    prepared = written(end_txn(ongoing({("a", 0)}), TID, 1000, 0, True, T0, waiter="end"), T0).txn
    assert prepared is not None
    last = markers_written(prepared, {("a", 0)}, T0 + 1)
    assert kinds(last) == ["WriteTxnLog"] and last.txn is not None
    failed = log_written(last.txn, ErrorCode.NOT_ENOUGH_REPLICAS, T0 + 1, 4)  # type: ignore[arg-type]
    stuck = failed.txn
    assert stuck is not None and stuck.state is S.PREPARE_COMMIT and not stuck.partitions and stuck.pending is None
    assert init(stuck, T0 + 2).replies == [Reply("init", ErrorCode.CONCURRENT_TRANSACTIONS)]
    assert completion_failed(stuck) and not completion_failed(prepared) and not completion_failed(last.txn)
    again = retry_completion(stuck, T0 + 3)
    assert kinds(again) == ["WriteTxnLog"]
    done = written(again, T0 + 3).txn
    assert done is not None and done.state is S.COMPLETE_COMMIT
    assert retry_completion(done, T0 + 4) == Decision(done)
    assert kinds(init(done, T0 + 5)) == ["WriteTxnLog"]  # idle again: the epoch bump is written


def test_a_failed_fence_keeps_the_bumped_epoch_and_does_not_bump_twice() -> None:
    txn = ongoing()
    d = init(txn, waiter="new")
    failed = log_written(d.txn, ErrorCode.REQUEST_TIMED_OUT, T0, 4)  # type: ignore[arg-type]
    assert failed.effects == (Reply("new", ErrorCode.REQUEST_TIMED_OUT),)
    f = failed.txn
    assert f is not None and f.state is S.ONGOING and f.producer_epoch == 1 and f.failed_epoch_fence
    # the old producer is fenced already (the bumped epoch may be in the log)
    assert end_txn(f, TID, 1000, 0, True, T0, waiter="z").effects == (Reply("z", ErrorCode.PRODUCER_FENCED),)
    again = written(init(f, waiter="new"))
    assert again.txn is not None and again.txn.producer_epoch == 1 and not again.txn.failed_epoch_fence
    assert again.effects[0] == Reply("new", ErrorCode.CONCURRENT_TRANSACTIONS)


def test_a_prepare_without_partitions_completes_at_once() -> None:
    txn = TxnMetadata(TID, 5, producer_epoch=0, state=S.ONGOING, start_ms=T0, last_update_ms=T0)
    d = written(end_txn(txn, TID, 5, 0, True, T0, waiter="e"))
    assert kinds(d) == ["Reply", "WriteTxnLog"] and d.txn is not None
    assert written(d).txn.state is S.COMPLETE_COMMIT  # type: ignore[union-attr]


# --- timeouts, expiry, take-over ---------------------------------------------------------------


def test_timeout_aborts_with_a_fence_and_nobody_to_answer() -> None:
    txn = ongoing(now=T0)
    assert not timed_out(txn, T0 + 60_000) and timed_out(txn, T0 + 60_001)
    assert abort_timed_out(txn, T0 + 60_000) == Decision(txn)
    d = abort_timed_out(txn, T0 + 60_001)
    assert kinds(d) == ["WriteTxnLog"]
    done = written(d, T0 + 60_001)
    assert done.effects == (SendMarkers(TID, 1000, 1, False, txn.partitions, 4),)
    assert end_txn(done.txn, TID, 1000, 0, True, T0, waiter="late").effects == (Reply("late", ErrorCode.PRODUCER_FENCED),)
    assert not timed_out(done.txn, T0 + 10**9)  # type: ignore[arg-type]


def test_idle_ids_expire_with_a_tombstone_then_are_forgotten() -> None:
    txn = ready(T0)
    assert not expired(txn, T0 + CFG.transactional_id_expiration_ms - 1, CFG)
    assert expire(ongoing(now=T0), T0 + 10**10, CFG).effects == ()  # an open transaction never expires
    d = expire(txn, T0 + CFG.transactional_id_expiration_ms, CFG)
    assert d.effects == (WriteTxnLog(TID, None),)
    gone = log_written(d.txn, NONE, T0, 4)  # type: ignore[arg-type]
    assert gone == Decision(None, (Forget(TID),))


def test_on_load_resends_markers_of_a_decided_transaction() -> None:
    txn = ongoing({("a", 0)})
    prepared = written(end_txn(txn, TID, 1000, 0, False, T0)).txn
    assert prepared is not None
    assert on_load(prepared, 12, T0).effects == (SendMarkers(TID, 1000, 0, False, frozenset({("a", 0)}), 12),)
    assert on_load(txn, 12, T0) == Decision(txn)
    empty_prepared = TxnMetadata(TID, 5, producer_epoch=0, state=S.PREPARE_ABORT, start_ms=T0)
    assert kinds(on_load(empty_prepared, 12, T0)) == ["WriteTxnLog"]


def test_error_for_old_versions() -> None:
    assert error_for_version(ErrorCode.PRODUCER_FENCED, "EndTxn", 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_for_version(ErrorCode.PRODUCER_FENCED, "EndTxn", 2) == ErrorCode.PRODUCER_FENCED
    assert error_for_version(ErrorCode.PRODUCER_FENCED, "InitProducerId", 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert error_for_version(ErrorCode.CONCURRENT_TRANSACTIONS, "EndTxn", 0) == ErrorCode.CONCURRENT_TRANSACTIONS


# --- the invariants, under random interleavings ------------------------------------------------


class CoordinatorMachine(RuleBasedStateMachine):
    """One transactional id; producers come and go (each InitProducerId that succeeds is a new
    producer incarnation); writes and markers succeed or fail at random; the clock moves."""

    def __init__(self) -> None:
        super().__init__()
        self.txn: TxnMetadata | None = None
        self.now = T0
        self.next_pid = 5000
        self.producers: list[tuple[int, int]] = []  # every (pid, epoch) ever handed out
        self.waiting: set[str] = set()
        self.answered: list[str] = []
        self.epochs: dict[int, int] = {}
        self.states_seen: set[TxnState] = set()
        self.n = 0
        self.markers_out: frozenset[tuple[str, int]] = frozenset()

    def _apply(self, d: Decision) -> None:
        for e in d.effects:
            if isinstance(e, Reply):
                assert e.waiter in self.waiting, f"{e.waiter} answered twice or never asked"
                self.waiting.discard(e.waiter)
                self.answered.append(e.waiter)
                if e.error == NONE and e.producer_id >= 0:
                    self.producers.append((e.producer_id, e.producer_epoch))
            elif isinstance(e, SendMarkers):
                self.markers_out = e.partitions
        self.txn = d.txn

    def _waiter(self) -> str:
        self.n += 1
        w = f"w{self.n}"
        self.waiting.add(w)
        return w

    def _current(self, which: int) -> tuple[int, int]:
        return self.producers[which % len(self.producers)] if self.producers else (0, 0)

    @rule(dt=st.integers(0, 70_000))
    def tick(self, dt: int) -> None:
        self.now += dt

    @rule()
    def init(self) -> None:
        pid = self.next_pid if needs_new_producer_id(self.txn) else None
        if pid is not None:
            self.next_pid += 1
        self._apply(init_producer_id(self.txn, TID, 60_000, self.now, CFG, waiter=self._waiter(), new_producer_id=pid))

    @rule(which=st.integers(0, 5), parts=st.sets(st.tuples(st.sampled_from("ab"), st.integers(0, 2)), min_size=1, max_size=3))
    def add(self, which: int, parts: set[tuple[str, int]]) -> None:
        pid, epoch = self._current(which)
        self._apply(add_partitions(self.txn, TID, pid, epoch, parts, self.now, waiter=self._waiter()))

    @rule(which=st.integers(0, 5), commit=st.booleans())
    def end(self, which: int, commit: bool) -> None:
        pid, epoch = self._current(which)
        self._apply(end_txn(self.txn, TID, pid, epoch, commit, self.now, waiter=self._waiter()))

    @precondition(lambda self: self.txn is not None and self.txn.pending is not None)
    @rule(ok=st.booleans())
    def write_done(self, ok: bool) -> None:
        assert self.txn is not None
        self._apply(log_written(self.txn, NONE if ok else ErrorCode.NOT_ENOUGH_REPLICAS, self.now, 1))

    @precondition(lambda self: self.txn is not None and self.txn.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT))
    @rule(data=st.data())
    def markers(self, data: st.DataObject) -> None:
        assert self.txn is not None
        some = data.draw(st.sets(st.sampled_from(sorted(self.txn.partitions))) if self.txn.partitions else st.just(set()))
        self._apply(markers_written(self.txn, some, self.now))

    @precondition(lambda self: self.txn is not None)
    @rule()
    def retry_failed_completion(self) -> None:
        assert self.txn is not None
        self._apply(retry_completion(self.txn, self.now))

    @precondition(lambda self: self.txn is not None)
    @rule()
    def timeout(self) -> None:
        assert self.txn is not None
        self._apply(abort_timed_out(self.txn, self.now))

    @invariant()
    def epochs_never_go_back_and_states_are_consistent(self) -> None:
        txn = self.txn
        if txn is None:
            return
        last = self.epochs.get(txn.producer_id, -1)
        assert txn.producer_epoch >= last, f"epoch of {txn.producer_id} went back: {last} -> {txn.producer_epoch}"
        self.epochs[txn.producer_id] = txn.producer_epoch
        self.states_seen.add(txn.state)
        assert txn.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE)
        if txn.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert txn.partitions == frozenset()
        if txn.state is S.ONGOING:
            assert txn.partitions and txn.start_ms >= 0
        if txn.pending is not None:
            assert txn.pending.target.state in TRANSITIONS[txn.state] or txn.pending.fence
            assert txn.pending.target.pending is None
        # every waiter is answered at once or has its answer parked in the one pending write
        parked = {txn.pending.waiter} if txn.pending is not None and txn.pending.reply is not None else set()
        assert self.waiting == parked

    @invariant()
    def handed_out_epochs_only_grow(self) -> None:
        for (p1, e1), (p2, e2) in zip(self.producers, self.producers[1:], strict=False):
            assert p2 != p1 or e2 > e1


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck))


# --- DescribeTransactions / ListTransactions -----------------------------------------------------


def test_describe() -> None:
    txn = ongoing({("b", 1), ("a", 2), ("a", 0)}, now=T0)
    d = describe(txn, TID)
    assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch, d.transaction_start_time_ms) == (0, "Ongoing", 1000, 0, T0)
    assert d.topics == [("a", [0, 2]), ("b", [1])]
    assert describe(None, TID).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert describe(txn, "").error_code == ErrorCode.INVALID_REQUEST
    dying = expire(ready(T0), T0 + CFG.transactional_id_expiration_ms, CFG).txn
    assert describe(dying, TID).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_list_transactions_filters_as_kafka() -> None:
    a = TxnMetadata("a", 1, producer_epoch=0, state=S.ONGOING, partitions=frozenset({("t", 0)}), start_ms=T0)
    b = TxnMetadata("b", 2, producer_epoch=0, state=S.EMPTY)
    c = TxnMetadata("c", 3, producer_epoch=0, state=S.COMPLETE_COMMIT, start_ms=T0 + 50)
    allx = [c, a, b]
    assert list_transactions(allx, [], [], T0) == ([("a", 1, "Ongoing"), ("b", 2, "Empty"), ("c", 3, "CompleteCommit")], [])
    assert list_transactions(allx, ["Ongoing", "Bogus"], [], T0) == ([("a", 1, "Ongoing")], ["Bogus"])
    assert list_transactions(allx, ["Bogus"], [], T0) == ([], ["Bogus"])  # only unknown names: nothing
    assert list_transactions(allx, [], [2, 3], T0) == ([("b", 2, "Empty"), ("c", 3, "CompleteCommit")], [])
    # started more than 60 ms ago: a (100 ms), b (start -1); not c (50 ms)
    assert list_transactions(allx, [], [], T0 + 100, duration_filter_ms=60)[0] == [("a", 1, "Ongoing"), ("b", 2, "Empty")]
