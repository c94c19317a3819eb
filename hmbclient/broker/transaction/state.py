"""The transaction coordinator's decisions (KIP-98) as pure functions: Kafka's
TransactionMetadata and the decisions of its TransactionCoordinator, with no I/O, no threads
and no clock of its own.

Every decision is a function of ``(txn, request, now_ms)`` and returns a :class:`Decision`: the
transactional id's metadata afterwards (a new frozen value; the input is never changed) and the
*effects* the I/O shell carries out in order: :class:`WriteTxnLog` (append a record to
``__transaction_state``), :class:`SendMarkers` (have the partition leaders write commit/abort
markers), :class:`Reply` (answer a client). When a write to the log is needed the metadata
keeps it as ``pending`` (Kafka's pendingState + TxnTransitMetadata) and the client is answered
only when the shell reports the write with :func:`log_written`; markers are reported with
:func:`markers_written`. Tests call the same functions with their own clock.

States (Kafka's, with their ids in the log) and what moves a transactional id between them;
:data:`TRANSITIONS` is the one table every decision is checked against::

    Empty, CompleteCommit, CompleteAbort ──InitProducerId (epoch bump)──► Empty
    Empty, CompleteCommit, CompleteAbort, Ongoing ──AddPartitions / AddOffsets──► Ongoing
    Ongoing ──EndTxn(commit)──► PrepareCommit ──markers written──► CompleteCommit
    Ongoing ──EndTxn(abort)───► PrepareAbort  ──markers written──► CompleteAbort
    Ongoing ──InitProducerId of a new producer, or the transaction timeout──► PrepareEpochFence
    PrepareEpochFence ──(at once: epoch + 1, never written)──► PrepareAbort
    Empty, CompleteCommit, CompleteAbort ──transactional.id.expiration.ms idle──► Dead (tombstone)

Invariants:

* the producer epoch of a transactional id never decreases, and an epoch handed to a client is
  in the log before the client sees it (replies to writes come from :func:`log_written`);
* at most one transition is pending per transactional id: any request meeting a pending one
  answers CONCURRENT_TRANSACTIONS (retriable), so the log's order is the decisions' order;
* a transaction is ended only by its own producer id and epoch (EndTxn), by a newer producer
  (InitProducerId fences: epoch + 1, abort) or by its timeout (same fence); a fenced producer
  gets PRODUCER_FENCED from then on;
* markers go out only after the Prepare* record is in the log, and Complete* is written only
  after every partition's marker is; a coordinator that takes over (:func:`on_load`) resends
  the markers of every Prepare* it finds, so a decided transaction always completes;
* a fence whose log write failed keeps the bumped epoch in memory (the record may have reached
  the log after all) and does not bump again on the next try (``failed_epoch_fence``).

Not implemented: transaction version 2 (KIP-890's epoch bump on every EndTxn and
AddPartitionsToTxn v4+ verification); EndTxn, InitProducerId etc. answer as version 1 clients
expect. Error codes for old request versions (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below
EndTxn/AddPartitions/AddOffsets/TxnOffsetCommit v2 and InitProducerId v3) are mapped by
:func:`error_for_version` in the shell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, NamedTuple

from hmbclient.errors import ErrorCode

__all__ = [
    "completion_failed",
    "retry_completion",
    "TxnState",
    "TRANSITIONS",
    "IllegalStateTransition",
    "TxnConfig",
    "TxnMetadata",
    "Pending",
    "Decision",
    "Reply",
    "WriteTxnLog",
    "SendMarkers",
    "Forget",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "validate_timeout",
    "needs_new_producer_id",
    "init_producer_id",
    "add_partitions",
    "end_txn",
    "log_written",
    "markers_written",
    "timed_out",
    "abort_timed_out",
    "expired",
    "expire",
    "on_load",
    "error_for_version",
    "is_epoch_exhausted",
    "TxnDescription",
    "describe",
    "list_transactions",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_EPOCH = 32767


class TxnState(Enum):
    """Kafka's transaction states; ``name`` is what DescribeTransactions/ListTransactions report
    and ``id`` the TransactionStatus byte of ``__transaction_state``."""

    EMPTY = ("Empty", 0)
    ONGOING = ("Ongoing", 1)
    PREPARE_COMMIT = ("PrepareCommit", 2)
    PREPARE_ABORT = ("PrepareAbort", 3)
    COMPLETE_COMMIT = ("CompleteCommit", 4)
    COMPLETE_ABORT = ("CompleteAbort", 5)
    DEAD = ("Dead", 6)
    PREPARE_EPOCH_FENCE = ("PrepareEpochFence", 7)

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def id(self) -> int:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_label(cls, label: str) -> TxnState | None:
        for s in cls:
            if s.label == label:
                return s
        return None


_E, _O, _PC, _PA, _CC, _CA, _D, _PF = (
    TxnState.EMPTY,
    TxnState.ONGOING,
    TxnState.PREPARE_COMMIT,
    TxnState.PREPARE_ABORT,
    TxnState.COMPLETE_COMMIT,
    TxnState.COMPLETE_ABORT,
    TxnState.DEAD,
    TxnState.PREPARE_EPOCH_FENCE,
)

#: state -> the states it may move to (Kafka's ``validPreviousStates``, read the other way).
TRANSITIONS: Mapping[TxnState, frozenset[TxnState]] = {
    _E: frozenset({_E, _O, _D}),
    _O: frozenset({_O, _PC, _PA, _PF}),
    _PC: frozenset({_CC}),
    _PA: frozenset({_CA}),
    _CC: frozenset({_E, _O, _D}),
    _CA: frozenset({_E, _O, _D}),
    _D: frozenset(),
    _PF: frozenset({_PA}),
}

#: states in which no transaction is open (an idle transactional id may expire from these).
_IDLE = frozenset({_E, _CC, _CA})


class IllegalStateTransition(RuntimeError):
    """A decision tried a move :data:`TRANSITIONS` does not allow (a bug, never the client's)."""


def _check(src: TxnState, dst: TxnState) -> None:
    if dst not in TRANSITIONS[src]:
        raise IllegalStateTransition(f"transaction state {src.label} -> {dst.label}")


@dataclass(frozen=True)
class TxnConfig:
    """The broker settings the decisions need (``transaction.*`` / ``transactional.id.*``)."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata), immutable.

    ``partitions`` are (topic, partition) pairs in the transaction (while Prepare*, the ones
    whose marker is not written yet). ``start_ms`` is -1 unless a transaction is open or being
    ended. ``pending`` is the transition being written to the log, if any.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    pending: Pending | None = None
    failed_epoch_fence: bool = False

    @property
    def has_pending(self) -> bool:
        return self.pending is not None

    @property
    def is_open(self) -> bool:
        """A transaction is open or being ended (the LSO of its partitions waits for it)."""
        return self.state in (_O, _PC, _PA)


@dataclass(frozen=True)
class Pending:
    """A transition written to the log and not yet acknowledged.

    ``target`` is the metadata once written; ``waiter`` the shell's token for the client to
    answer (None: nobody waits, e.g. a timeout abort); ``reply`` the answer on success
    (``error`` replaces its code on failure); ``fence`` marks the abort of a fenced producer's
    transaction (its bumped epoch survives a failed write)."""

    target: TxnMetadata
    waiter: Any = None
    reply: Reply | None = None
    fence: bool = False


# --- effects ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Answer the client behind ``waiter``: InitProducerId gets (error, producer id, epoch), the
    others the error alone."""

    waiter: Any
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class WriteTxnLog:
    """Append ``value`` (None: a tombstone) for ``transactional_id`` to ``__transaction_state``
    with acks=all; report the outcome with :func:`log_written`."""

    transactional_id: str
    value: TxnMetadata | None


@dataclass(frozen=True)
class SendMarkers:
    """Have the leaders of ``partitions`` write a commit (``committed``) or abort marker for
    (producer_id, producer_epoch) under ``coordinator_epoch``; report each partition done with
    :func:`markers_written`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: frozenset[tuple[str, int]]
    coordinator_epoch: int


@dataclass(frozen=True)
class Forget:
    """Drop the transactional id from the coordinator's cache (its tombstone is written)."""

    transactional_id: str


Effect = Reply | WriteTxnLog | SendMarkers | Forget


@dataclass(frozen=True)
class Decision:
    """The metadata after a decision (None: not cached, nothing changed) and what to do."""

    txn: TxnMetadata | None
    effects: tuple[Effect, ...] = field(default=())

    @property
    def replies(self) -> list[Reply]:
        return [e for e in self.effects if isinstance(e, Reply)]


def _answer(txn: TxnMetadata | None, waiter: Any, error: ErrorCode) -> Decision:
    return Decision(txn, (Reply(waiter, error),))


def _write(txn: TxnMetadata, target: TxnMetadata, waiter: Any, reply: Reply | None, *, fence: bool = False) -> Decision:
    """Start writing ``target``: the shell appends it; the answer waits for :func:`log_written`."""
    _check(txn.state if not fence else _PF, target.state)
    return Decision(replace(txn, pending=Pending(target, waiter, reply, fence)), (WriteTxnLog(txn.transactional_id, target),))


# --- helpers ------------------------------------------------------------------------------------


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for the fence of a transaction: at 32766 a new id is due."""
    return epoch >= _MAX_EPOCH - 1


def validate_timeout(timeout_ms: int, config: TxnConfig) -> bool:
    return 0 < timeout_ms <= config.max_timeout_ms


def error_for_version(error: ErrorCode, api: str, version: int) -> ErrorCode:
    """PRODUCER_FENCED (90) is newer than the old request versions: they get INVALID_PRODUCER_EPOCH."""
    first = {"InitProducerId": 3, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2, "TxnOffsetCommit": 2}
    if error == ErrorCode.PRODUCER_FENCED and version < first.get(api, 0):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def needs_new_producer_id(txn: TxnMetadata | None, expected: tuple[int, int] | None = None) -> bool:
    """Whether :func:`init_producer_id` will want a fresh producer id (the shell allocates one,
    an I/O step, before calling it): the id is unknown, or its epoch is exhausted."""
    if txn is None:
        return True
    return (
        not txn.has_pending
        and txn.state in _IDLE
        and is_epoch_exhausted(txn.producer_epoch)
        and (expected is None or expected[1] == txn.producer_epoch)
    )


# --- InitProducerId -----------------------------------------------------------------------------


def init_producer_id(
    txn: TxnMetadata | None,
    transactional_id: str,
    timeout_ms: int,
    now_ms: int,
    config: TxnConfig,
    *,
    waiter: Any = None,
    new_producer_id: int | None = None,
    expected: tuple[int, int] | None = None,
) -> Decision:
    """InitProducerId with a transactional id (a null id is the idempotent path, not here).

    ``new_producer_id`` must be given when :func:`needs_new_producer_id` says so; ``expected``
    is (producer id, epoch) of InitProducerId v3+ (a producer recovering), None before.

    Cases:
      A. empty transactional id: INVALID_REQUEST.
      B. timeout <= 0 or over transaction.max.timeout.ms: INVALID_TRANSACTION_TIMEOUT.
      C. unknown id: a new metadata (the new producer id, epoch -1, Empty), then as D.
      D. idle (Empty, CompleteCommit, CompleteAbort): epoch + 1 (or a new producer id at epoch 0
         when the epoch is exhausted), written as Empty; the reply follows the write.
      E. a transition pending, or Prepare*: CONCURRENT_TRANSACTIONS (retry).
      F. ``expected`` names another producer: PRODUCER_FENCED.
      G. Ongoing: fence the open transaction's producer (epoch + 1 unless a failed fence already
         bumped it, PrepareEpochFence -> PrepareAbort written, markers after); the new producer
         gets CONCURRENT_TRANSACTIONS and retries, landing in D once the abort completes.
    """
    if not transactional_id:  # Case A
        return _answer(txn, waiter, ErrorCode.INVALID_REQUEST)
    if not validate_timeout(timeout_ms, config):  # Case B
        return _answer(txn, waiter, ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    if txn is None:  # Case C
        if new_producer_id is None:
            raise ValueError("init_producer_id: a new transactional id needs new_producer_id")
        txn = TxnMetadata(transactional_id, new_producer_id, timeout_ms=timeout_ms, last_update_ms=now_ms)
        new_producer_id = None
    if txn.has_pending or txn.state in (_PC, _PA):  # Case E
        return _answer(txn, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
    if expected is not None and not (
        txn.producer_epoch == NO_PRODUCER_EPOCH
        or expected[0] == txn.producer_id
        or (expected[0] == txn.previous_producer_id and is_epoch_exhausted(expected[1]))
    ):  # Case F
        return _answer(txn, waiter, ErrorCode.PRODUCER_FENCED)
    if txn.state is _O:  # Case G
        return _fence(txn, now_ms, waiter, Reply(waiter, ErrorCode.CONCURRENT_TRANSACTIONS))
    if txn.state not in _IDLE:
        raise IllegalStateTransition(f"InitProducerId found {transactional_id} in {txn.state.label}")
    # Case D
    if needs_new_producer_id(txn, expected):
        if new_producer_id is None:
            raise ValueError("init_producer_id: an exhausted epoch needs new_producer_id")
        last = txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        target = replace(txn, producer_id=new_producer_id, previous_producer_id=txn.producer_id, producer_epoch=0, last_producer_epoch=last)
    else:
        bumped = txn.producer_epoch + 1
        if expected is None:
            epochs = (bumped, NO_PRODUCER_EPOCH)
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
            epochs = (bumped, txn.producer_epoch)
        elif expected[1] == txn.last_producer_epoch:
            epochs = (txn.producer_epoch, txn.last_producer_epoch)  # a retry of a bump that succeeded
        else:
            return _answer(txn, waiter, ErrorCode.PRODUCER_FENCED)
        target = replace(txn, producer_epoch=epochs[0], last_producer_epoch=epochs[1])
    target = replace(target, state=_E, timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms, failed_epoch_fence=False)
    return _write(txn, target, waiter, Reply(waiter, ErrorCode.NONE, target.producer_id, target.producer_epoch))


def _fence(txn: TxnMetadata, now_ms: int, waiter: Any, reply: Reply | None) -> Decision:
    """Ongoing -> PrepareEpochFence -> PrepareAbort with the epoch bumped (Kafka's
    prepareFenceProducerEpoch followed by the abort it triggers); only PrepareAbort is written."""
    _check(txn.state, _PF)
    if txn.producer_epoch >= _MAX_EPOCH:
        raise IllegalStateTransition(f"cannot fence {txn.transactional_id}: epoch {txn.producer_epoch} would overflow")
    epoch = txn.producer_epoch if txn.failed_epoch_fence else txn.producer_epoch + 1
    target = replace(txn, state=_PA, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, last_update_ms=now_ms, failed_epoch_fence=False)
    return _write(txn, target, waiter, reply, fence=True)


# --- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------------


def add_partitions(
    txn: TxnMetadata | None,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[tuple[str, int]],
    now_ms: int,
    *,
    waiter: Any = None,
) -> Decision:
    """AddPartitionsToTxn, and AddOffsetsToTxn with the group's ``__consumer_offsets`` partition.

    Cases:
      A. empty transactional id: INVALID_REQUEST.
      B. unknown id, or another producer id: INVALID_PRODUCER_ID_MAPPING.
      C. another epoch: PRODUCER_FENCED.
      D. a transition pending, or Prepare*: CONCURRENT_TRANSACTIONS.
      E. Ongoing and every partition already in: NONE at once (nothing to write).
      F. otherwise: Ongoing with the union written (the transaction starts now if it was idle);
         the reply follows the write.
    """
    if not transactional_id:  # Case A
        return _answer(txn, waiter, ErrorCode.INVALID_REQUEST)
    if txn is None or txn.producer_id != producer_id:  # Case B
        return _answer(txn, waiter, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if txn.producer_epoch != producer_epoch:  # Case C
        return _answer(txn, waiter, ErrorCode.PRODUCER_FENCED)
    if txn.has_pending or txn.state in (_PC, _PA):  # Case D
        return _answer(txn, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
    added = frozenset(partitions)
    if txn.state is _O and added <= txn.partitions:  # Case E
        return _answer(txn, waiter, ErrorCode.NONE)
    # Case F
    start = now_ms if txn.state in _IDLE else txn.start_ms
    target = replace(txn, state=_O, partitions=txn.partitions | added, start_ms=start, last_update_ms=now_ms)
    return _write(txn, target, waiter, Reply(waiter, ErrorCode.NONE))


# --- EndTxn ------------------------------------------------------------------------------------


def end_txn(
    txn: TxnMetadata | None,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    committed: bool,
    now_ms: int,
    *,
    waiter: Any = None,
) -> Decision:
    """EndTxn from the producer (transaction version 1: no epoch bump).

    Cases:
      A. empty transactional id: INVALID_REQUEST.
      B. unknown id, or another producer id: INVALID_PRODUCER_ID_MAPPING.
      C. another epoch: PRODUCER_FENCED.
      D. a transition pending: CONCURRENT_TRANSACTIONS.
      E. Ongoing: PrepareCommit / PrepareAbort written; the reply follows the write, and the
         markers follow the reply.
      F. CompleteCommit asked to commit, CompleteAbort asked to abort: NONE (a retry).
      G. PrepareCommit asked to commit, PrepareAbort asked to abort: CONCURRENT_TRANSACTIONS
         (the markers are on their way; the retry will find Complete*).
      H. anything else (Empty; the opposite outcome of a decided one): INVALID_TXN_STATE.
    """
    if not transactional_id:  # Case A
        return _answer(txn, waiter, ErrorCode.INVALID_REQUEST)
    if txn is None or txn.producer_id != producer_id:  # Case B
        return _answer(txn, waiter, ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    if txn.producer_epoch != producer_epoch:  # Case C
        return _answer(txn, waiter, ErrorCode.PRODUCER_FENCED)
    if txn.has_pending:  # Case D
        return _answer(txn, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
    state = txn.state
    if state is _O:  # Case E
        target = replace(txn, state=_PC if committed else _PA, last_update_ms=now_ms)
        return _write(txn, target, waiter, Reply(waiter, ErrorCode.NONE))
    if (state is _CC and committed) or (state is _CA and not committed):  # Case F
        return _answer(txn, waiter, ErrorCode.NONE)
    if (state is _PC and committed) or (state is _PA and not committed):  # Case G
        return _answer(txn, waiter, ErrorCode.CONCURRENT_TRANSACTIONS)
    if state in (_D, _PF):
        raise IllegalStateTransition(f"EndTxn found {transactional_id} in {state.label}")
    return _answer(txn, waiter, ErrorCode.INVALID_TXN_STATE)  # Case H


# --- the shell reports back ---------------------------------------------------------------------


def log_written(txn: TxnMetadata, error: ErrorCode, now_ms: int, coordinator_epoch: int) -> Decision:
    """The pending record's append finished (``error`` NONE) or failed.

    Cases:
      A. written, Empty/Ongoing: the transition completes, the waiting client gets its reply.
      B. written, Prepare*: completes; the reply (EndTxn: NONE; a fencing InitProducerId:
         CONCURRENT_TRANSACTIONS) and then the markers for every partition. A transaction
         without partitions needs no markers: Complete* is written at once.
      C. written, Complete*: completes, partitions cleared, nobody to answer.
      D. written, Dead: the tombstone is in: forget the id.
      E. failed, a fence: the transaction stays Ongoing with the bumped epoch in memory
         (``failed_epoch_fence``), the client gets the error.
      F. failed, anything else: the pending transition is dropped, the client gets the error.
    """
    pending = txn.pending
    if pending is None:
        raise IllegalStateTransition(f"log_written for {txn.transactional_id} with nothing pending")
    if error != ErrorCode.NONE:
        reply = () if pending.reply is None else (replace(pending.reply, error=error, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH),)
        if pending.fence:  # Case E
            failed = replace(txn, pending=None, producer_epoch=pending.target.producer_epoch, last_producer_epoch=NO_PRODUCER_EPOCH, failed_epoch_fence=True)
            return Decision(failed, reply)
        return Decision(replace(txn, pending=None), reply)  # Case F
    done = replace(pending.target, pending=None)
    replies: tuple[Effect, ...] = () if pending.reply is None else (pending.reply,)
    if done.state is _D:  # Case D
        return Decision(None, (*replies, Forget(txn.transactional_id)))
    if done.state in (_PC, _PA):  # Case B
        if not done.partitions:
            return _complete(done, now_ms, replies)
        markers = SendMarkers(done.transactional_id, done.producer_id, done.producer_epoch, done.state is _PC, done.partitions, coordinator_epoch)
        return Decision(done, (*replies, markers))
    if done.state in (_CC, _CA):  # Case C
        return Decision(replace(done, partitions=frozenset()), replies)
    return Decision(done, replies)  # Case A


def _complete(txn: TxnMetadata, now_ms: int, effects: tuple[Effect, ...] = ()) -> Decision:
    target = replace(txn, state=_CC if txn.state is _PC else _CA, partitions=frozenset(), last_update_ms=now_ms)
    d = _write(txn, target, None, None)
    return Decision(d.txn, (*effects, *d.effects))


def markers_written(txn: TxnMetadata, partitions: Iterable[tuple[str, int]], now_ms: int) -> Decision:
    """The markers of ``partitions`` are written (or their topic is gone).

    Cases:
      A. partitions remain: they stay in the metadata, nothing else.
      B. none remain: Complete* is written (markers written twice are harmless: a leader
         ignores a marker it already has for that producer epoch).
      C. not Prepare* any more (a late report after a coordinator change): nothing.
    """
    if txn.state not in (_PC, _PA) or txn.has_pending:  # Case C
        return Decision(txn)
    left = txn.partitions - frozenset(partitions)
    txn = replace(txn, partitions=left)
    if left:  # Case A
        return Decision(txn)
    return _complete(txn, now_ms)  # Case B


# --- timeouts and expiry -----------------------------------------------------------------------


def timed_out(txn: TxnMetadata, now_ms: int) -> bool:
    """An open (Ongoing) transaction older than its timeout, with nothing pending."""
    return txn.state is _O and not txn.has_pending and txn.start_ms + txn.timeout_ms < now_ms


def abort_timed_out(txn: TxnMetadata, now_ms: int) -> Decision:
    """The coordinator's own abort of a timed-out transaction: the same fence as a new
    producer's (epoch + 1, so the late producer is fenced), nobody to answer. Not timed out:
    nothing (the producer ended it meanwhile)."""
    if not timed_out(txn, now_ms):
        return Decision(txn)
    return _fence(txn, now_ms, None, None)


def completion_failed(txn: TxnMetadata) -> bool:
    """Prepare* with every marker written and nothing pending: its Complete* write failed
    (:func:`log_written` Case F, e.g. NOT_ENOUGH_REPLICAS while ``__transaction_state``'s ISR
    was short). Nothing else would write it again before a coordinator change, and until it
    is written the id answers CONCURRENT_TRANSACTIONS to every InitProducerId and EndTxn."""
    return txn.state in (_PC, _PA) and not txn.partitions and not txn.has_pending


def retry_completion(txn: TxnMetadata, now_ms: int) -> Decision:
    """The chore's retry of a failed Complete* write (Kafka retries that append too); not
    :func:`completion_failed`: nothing."""
    if not completion_failed(txn):
        return Decision(txn)
    return _complete(txn, now_ms)


def expired(txn: TxnMetadata, now_ms: int, config: TxnConfig) -> bool:
    """Idle for ``transactional.id.expiration.ms`` with nothing pending."""
    return txn.state in _IDLE and not txn.has_pending and txn.last_update_ms + config.transactional_id_expiration_ms <= now_ms


def expire(txn: TxnMetadata, now_ms: int, config: TxnConfig) -> Decision:
    """Write the tombstone of an expired transactional id (Dead); :func:`log_written` forgets it."""
    if not expired(txn, now_ms, config):
        return Decision(txn)
    _check(txn.state, _D)
    target = replace(txn, state=_D, last_update_ms=now_ms)
    return Decision(replace(txn, pending=Pending(target)), (WriteTxnLog(txn.transactional_id, None),))


# --- a coordinator takes over -------------------------------------------------------------------


def on_load(txn: TxnMetadata, coordinator_epoch: int, now_ms: int) -> Decision:
    """A transactional id read back from ``__transaction_state`` by a new coordinator.

    Cases:
      A. Prepare* with partitions: the decision was made and its markers may not all be
         written: send them again.
      B. Prepare* without partitions: nothing to mark, write Complete*.
      C. otherwise: nothing to do (an Ongoing transaction resumes, its timeout still runs).
    """
    if txn.state in (_PC, _PA):
        if txn.partitions:  # Case A
            return Decision(txn, (SendMarkers(txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.state is _PC, txn.partitions, coordinator_epoch),))
        return _complete(txn, now_ms)  # Case B
    return Decision(txn)  # Case C


# --- DescribeTransactions / ListTransactions ----------------------------------------------------


class TxnDescription(NamedTuple):
    """One DescribeTransactions entry (the response's fields, in its order)."""

    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[int]]]


def describe(txn: TxnMetadata | None, transactional_id: str) -> TxnDescription:
    """What DescribeTransactions says of ``transactional_id`` (Kafka's handleDescribeTransactions):
    INVALID_REQUEST for an empty id, TRANSACTIONAL_ID_NOT_FOUND for an unknown or expiring one,
    else its state, timeout, start, producer and partitions by topic."""
    if not transactional_id:
        return TxnDescription(ErrorCode.INVALID_REQUEST, transactional_id, "", 0, -1, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, [])
    if txn is None or txn.state is _D or (txn.pending is not None and txn.pending.target.state is _D):
        return TxnDescription(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id, "", 0, -1, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, [])
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(txn.partitions):
        by_topic.setdefault(topic, []).append(p)
    return TxnDescription(ErrorCode.NONE, transactional_id, txn.state.label, txn.timeout_ms, txn.start_ms, txn.producer_id, txn.producer_epoch, list(by_topic.items()))


def list_transactions(
    txns: Iterable[TxnMetadata], state_filters: Iterable[str], producer_id_filters: Iterable[int], now_ms: int, duration_filter_ms: int = -1
) -> tuple[list[tuple[str, int, str]], list[str]]:
    """ListTransactions (Kafka's listTransactionStates): (transactional id, producer id, state)
    of every id matching all filters (an empty filter matches all; state names that are all
    unknown match none; ``duration_filter_ms`` >= 0 keeps ids whose transaction started more
    than that long ago, as Kafka compares ``now - start``, so idle ids with start -1 pass), and
    the state names it did not know."""
    names = list(state_filters)
    wanted: set[TxnState] = set()
    unknown: list[str] = []
    for name in names:
        s = TxnState.from_label(name)
        if s is None:
            unknown.append(name)
        else:
            wanted.add(s)
    pids = set(producer_id_filters)
    out = []
    for txn in sorted(txns, key=lambda t: t.transactional_id):
        if txn.state is _D or (names and txn.state not in wanted) or (pids and txn.producer_id not in pids):
            continue
        if duration_filter_ms >= 0 and now_ms - txn.start_ms <= duration_filter_ms:
            continue
        out.append((txn.transactional_id, txn.producer_id, txn.state.label))
    return out, unknown
