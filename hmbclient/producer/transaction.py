"""A transactional producer's state (KIP-98): one transition table and the pure decisions the
send engine (sender.py) acts on. No I/O here; :class:`TransactionManager` is consulted by the
producer's calling thread and the engine's driver under its own small lock.

States (the Java client's, librdkafka's):

    Uninitialized --init--> Ready --begin--> InTransaction --commit--> Committing --completed--> Ready
                                             InTransaction --abort---> Aborting   --completed--> Ready
    InTransaction / Committing --abortable--> AbortableError --abort--> Aborting
    any --fatal--> FatalError (only close() is left)

Cases, labelled where the code acts on them:

* (T1) ``init_transactions()``: FindCoordinator (key_type 1) then InitProducerId with the
  transactional id; the coordinator fences every older epoch of the id and aborts its open
  transaction. Only from Uninitialized (again after a timeout: the call is resumed).
* (T2) ``send``/``produce`` only in InTransaction: anything else raises
  TransactionStateError and queues nothing.
* (T3) the engine adds a partition (AddPartitionsToTxn) before it sends the partition's first
  batch of the transaction, and sends no batch of a partition not yet added. A retriable
  answer (CONCURRENT_TRANSACTIONS right after a previous EndTxn, a moved coordinator) puts the
  batches back after a backoff.
* (T4) a batch of the transaction that fails for good (after its retries, or a non-retriable
  answer) makes the transaction abortable: ``commit_transaction()`` raises
  TransactionAbortableError; ``abort_transaction()`` is the way on. Batches drained while the
  transaction is abortable or aborting are failed unsent.
* (T5) ``send_offsets_to_transaction``: AddOffsetsToTxn to the transaction coordinator, then
  TxnOffsetCommit to the group's coordinator; the offsets become the group's committed offsets
  only when the transaction commits.
* (T6) commit: flush (every batch acknowledged), then EndTxn(commit); abort: batches not yet
  sent fail, the in-flight ones complete, then EndTxn(abort). EndTxn is skipped when nothing was
  added to the transaction (the coordinator knows no transaction then). A commit or abort that
  timed out is resumed by calling it again.
* (T7) fatal: PRODUCER_FENCED / INVALID_PRODUCER_EPOCH (a newer producer with the same id
  took over: ProducerFencedError), authorization of the transactional id, a broker without
  transactions. A fenced commit of a transaction open longer than ``transaction.timeout.ms`` is
  reported as TransactionTimedOutError (the coordinator aborted it by bumping the epoch); the
  producer cannot go on either, because re-initialising could fence a newer instance.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from enum import Enum

from hmbclient.clock import monotonic_ms
from hmbclient.errors import (
    ErrorCode,
    HmbError,
    InvalidProducerEpochError,
    KafkaConnectionError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
    TransactionTimedOutError,
    UnsupportedByBroker,
)

__all__ = ["TxnState", "TransactionManager", "classify", "RETRY", "ABORTABLE", "FATAL"]

TopicPartition = tuple[str, int]


class TxnState(Enum):
    UNINITIALIZED = "Uninitialized"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "Committing"
    ABORTING = "Aborting"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


_S = TxnState
# (state, event) -> next state. Anything missing is a call in the wrong state.
TRANSITIONS: dict[tuple[TxnState, str], TxnState] = {
    (_S.UNINITIALIZED, "init"): _S.UNINITIALIZED,  # (T1) stays until the coordinator answered
    (_S.UNINITIALIZED, "initialized"): _S.READY,
    (_S.READY, "begin"): _S.IN_TRANSACTION,
    (_S.IN_TRANSACTION, "commit"): _S.COMMITTING,
    (_S.COMMITTING, "commit"): _S.COMMITTING,  # (T6) resumed after a timeout
    (_S.IN_TRANSACTION, "abort"): _S.ABORTING,
    (_S.ABORTABLE_ERROR, "abort"): _S.ABORTING,
    (_S.ABORTING, "abort"): _S.ABORTING,  # (T6) resumed after a timeout
    (_S.COMMITTING, "completed"): _S.READY,
    (_S.ABORTING, "completed"): _S.READY,
    (_S.IN_TRANSACTION, "abortable"): _S.ABORTABLE_ERROR,
    (_S.COMMITTING, "abortable"): _S.ABORTABLE_ERROR,
    (_S.ABORTABLE_ERROR, "abortable"): _S.ABORTABLE_ERROR,
    (_S.ABORTING, "abortable"): _S.ABORTING,  # a batch failing during an abort changes nothing
}

# What to do about an error answer (classify)
RETRY = "retry"
ABORTABLE = "abortable"
FATAL = "fatal"

_FENCED = (ProducerFencedError, InvalidProducerEpochError)
_FATAL_CODES = frozenset(
    int(c)
    for c in (
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    )
)
_RETRY_CODES = frozenset(
    int(c)
    for c in (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    )
)
# Answers after which the coordinator must be looked up again.
COORDINATOR_MOVED = frozenset(int(c) for c in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE))


def classify(err: BaseException) -> str:
    """RETRY, ABORTABLE or FATAL for an error met by a transactional request (pure)."""
    if isinstance(err, KafkaConnectionError):
        return RETRY
    if isinstance(err, (UnsupportedByBroker, TransactionFatalError)):
        return FATAL
    code = getattr(err, "errno", None)
    if isinstance(code, int):
        if code in _FATAL_CODES:
            return FATAL
        if code in _RETRY_CODES:
            return RETRY
        return ABORTABLE
    if getattr(err, "retriable", False):
        return RETRY
    return ABORTABLE


def fenced(err: BaseException) -> bool:
    return isinstance(err, _FENCED)


class TransactionManager:
    """The transaction state of one producer. See the module docstring."""

    def __init__(self, transactional_id: str, timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.coordinator: int | None = None  # node id of the transaction coordinator
        self.partitions: set[TopicPartition] = set()  # added to the current transaction
        self.offsets_added = False  # AddOffsetsToTxn done in the current transaction
        self.started_ms = 0.0  # monotonic, at begin_transaction
        self.error: BaseException | None = None  # why AbortableError / FatalError
        self.lock = threading.Lock()
        #: Called with the new state after every change, under ``lock`` (the producer turns its
        #: inlined send path on in InTransaction only: T2 without a check per message).
        self.on_state: Callable[[TxnState], None] | None = None

    def _set(self, state: TxnState) -> None:
        self.state = state
        if self.on_state is not None:
            self.on_state(state)

    # -- transitions -----------------------------------------------------------------------

    def _refuse(self, event: str) -> HmbError:
        if self.state is TxnState.FATAL_ERROR:
            if isinstance(self.error, (ProducerFencedError, TransactionFatalError)):
                # the same error again: what the producer needs is a replacement
                fatal = type(self.error)(f"cannot {event}: {self.error}")
                fatal.__cause__ = self.error
                return fatal
            err = TransactionStateError(
                f"transactional id {self.transactional_id!r}: cannot {event}: the producer hit a fatal error "
                f"({self.error}); close it and create a new one"
            )
            err.__cause__ = self.error
            return err
        hint = {
            TxnState.UNINITIALIZED: "call init_transactions() first",
            TxnState.READY: "call begin_transaction() first",
            TxnState.IN_TRANSACTION: "a transaction is open: commit_transaction() or abort_transaction() it first",
            TxnState.COMMITTING: "a commit is under way: call commit_transaction() again to finish it",
            TxnState.ABORTING: "an abort is under way: call abort_transaction() again to finish it",
            TxnState.ABORTABLE_ERROR: f"the transaction failed ({self.error}): call abort_transaction()",
        }[self.state]
        return TransactionStateError(f"transactional id {self.transactional_id!r}: cannot {event} in state {self.state.value}; {hint}")

    def transition(self, event: str) -> TxnState:
        """Apply ``event``; raise TransactionStateError (state unchanged) if the table has no
        such move. Returns the previous state."""
        with self.lock:
            nxt = TRANSITIONS.get((self.state, event))
            if nxt is None:
                raise self._refuse(event)
            prev = self.state
            self._set(nxt)
            if event == "begin":
                self.started_ms = monotonic_ms()
                self.partitions = set()
                self.offsets_added = False
                self.error = None
            elif event == "completed":
                self.partitions = set()
                self.offsets_added = False
                self.error = None
            return prev

    def check_send(self) -> None:
        """(T2) Raises TransactionStateError unless records may be queued now."""
        state = self.state
        if state is not TxnState.IN_TRANSACTION:
            raise self._refuse("send")

    def abortable(self, err: BaseException) -> None:
        """(T4) The transaction cannot commit any more (no-op once fatal)."""
        with self.lock:
            nxt = TRANSITIONS.get((self.state, "abortable"))
            if nxt is not None:
                if self.state is not TxnState.ABORTING and self.error is None:
                    self.error = err
                self._set(nxt)

    def fatal(self, err: BaseException) -> None:
        """(T7) Nothing transactional may be done any more."""
        with self.lock:
            if self.state is not TxnState.FATAL_ERROR:
                self.error = err
                self._set(TxnState.FATAL_ERROR)

    # -- what the engine asks --------------------------------------------------------------

    @property
    def sending(self) -> bool:
        """Whether drained batches go out (else they fail unsent: (T4))."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)

    def unsent_error(self) -> BaseException:
        """The error a batch drained while not ``sending`` fails with."""
        if self.state is TxnState.FATAL_ERROR:
            err: BaseException = TransactionFatalError(f"transactional producer failed: {self.error}")
        elif self.state is TxnState.ABORTING:
            err = TransactionAbortableError("the transaction was aborted before this batch was sent")
        else:
            err = TransactionAbortableError(f"the transaction failed before this batch was sent: {self.error}")
        err.__cause__ = self.error
        return err

    def missing(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """(T3) The partitions among ``tps`` not yet added to the transaction, sorted."""
        added = self.partitions
        return sorted({tp for tp in tps if tp not in added})

    @property
    def started(self) -> bool:
        """Whether the coordinator knows of the current transaction (EndTxn is due: (T6))."""
        return bool(self.partitions) or self.offsets_added

    def raise_for_end(self, committing: bool) -> None:
        """Before EndTxn: the error to raise instead, if any ((T4), (T7))."""
        state = self.state
        if state is TxnState.FATAL_ERROR:
            raise self._refuse("commit_transaction()" if committing else "abort_transaction()")
        if committing and state is TxnState.ABORTABLE_ERROR:
            err = TransactionAbortableError(f"the transaction cannot commit: {self.error}; call abort_transaction()")
            err.__cause__ = self.error
            raise err

    def require(self, state: TxnState, call: str) -> None:
        """Raises TransactionStateError unless in ``state``."""
        if self.state is not state:
            raise self._refuse(call)

    def failed(self, err: BaseException) -> BaseException:
        """A coordinator request answered ``err`` for good: record it and return the error to
        raise ((T7): a fenced commit past the timeout is a timeout)."""
        if fenced(err):
            elapsed = monotonic_ms() - self.started_ms
            if self.state in (TxnState.COMMITTING, TxnState.ABORTABLE_ERROR) and elapsed > self.timeout_ms:
                out: BaseException = TransactionTimedOutError(
                    f"transaction of {self.transactional_id!r} open {elapsed / 1000:.1f} s, longer than "
                    f"transaction.timeout.ms={self.timeout_ms}: the coordinator aborted it; close this producer "
                    "and create a new one (its init_transactions() takes the id over)"
                )
                out.__cause__ = err
                self.fatal(out)
                return out
            out = as_fenced(err)
            self.fatal(out)
            return out
        if classify(err) == FATAL:
            self.fatal(err)
            return err
        self.abortable(err)
        return err

    def fail(self, err: BaseException) -> None:
        """A batch or request of the transaction failed for good: fatal or abortable by its
        class (INVALID_PRODUCER_EPOCH is reported as the fencing it is)."""
        if fenced(err):
            self.fatal(as_fenced(err))
        elif classify(err) == FATAL:
            self.fatal(err)
        else:
            self.abortable(err)


def as_fenced(err: BaseException) -> BaseException:
    """ProducerFencedError for INVALID_PRODUCER_EPOCH too (Java's ProducerFencedException):
    either way a newer producer with the transactional id took over."""
    if isinstance(err, ProducerFencedError):
        return err
    out = ProducerFencedError(f"a newer producer with the same transactional.id took over ({err})")
    out.__cause__ = err
    return out
