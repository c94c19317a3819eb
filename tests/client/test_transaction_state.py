"""The transactional producer's state machine (producer/transaction.py) and the checks a
transactional Producer makes before any I/O: the transition table, the error classes, calls
in the wrong state (typed errors, nothing queued, state unchanged), config refusals.
No broker: every case here is decided before a request would be sent."""

from __future__ import annotations

import pytest

from hmbclient import Producer, ProducerData
from hmbclient.errors import (
    ConfigError,
    ErrorCode,
    InvalidProducerEpochError,
    KafkaConnectionError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionStateError,
    TransactionTimedOutError,
    for_code,
)
from hmbclient.producer.transaction import (
    ABORTABLE,
    FATAL,
    RETRY,
    TRANSITIONS,
    TransactionManager,
    TxnState,
    classify,
)

S = TxnState


def test_happy_path_through_the_table():
    txn = TransactionManager("t", 60_000)
    for event, state in [
        ("init", S.UNINITIALIZED),
        ("initialized", S.READY),
        ("begin", S.IN_TRANSACTION),
        ("commit", S.COMMITTING),
        ("completed", S.READY),
        ("begin", S.IN_TRANSACTION),
        ("abort", S.ABORTING),
        ("completed", S.READY),
    ]:
        txn.transition(event)
        assert txn.state is state, event


@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("event", ["init", "begin", "commit", "abort", "completed"])
def test_every_move_not_in_the_table_is_refused_and_changes_nothing(state, event):
    txn = TransactionManager("t", 60_000)
    txn.state = state
    if (state, event) in TRANSITIONS:
        txn.transition(event)
        assert txn.state is TRANSITIONS[(state, event)]
        return
    with pytest.raises(TransactionStateError, match=f"cannot {event}"):
        txn.transition(event)
    assert txn.state is state


def test_abortable_then_only_abort():
    txn = TransactionManager("t", 60_000)
    txn.state = S.IN_TRANSACTION
    cause = for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)("Produce")
    txn.fail(cause)
    assert txn.state is S.ABORTABLE_ERROR and txn.error is cause
    with pytest.raises(TransactionAbortableError) as info:
        txn.raise_for_end(committing=True)
    assert info.value.__cause__ is cause
    with pytest.raises(TransactionStateError, match="call abort_transaction"):
        txn.check_send()
    txn.transition("abort")
    txn.transition("completed")
    assert txn.state is S.READY and txn.error is None and not txn.partitions


def test_fencing_is_fatal_and_sticks():
    txn = TransactionManager("t", 60_000)
    txn.state = S.IN_TRANSACTION
    txn.fail(InvalidProducerEpochError("Produce"))  # the pre-KIP-588 spelling of fenced
    assert txn.state is S.FATAL_ERROR and isinstance(txn.error, ProducerFencedError)
    for event in ("begin", "commit", "abort"):
        with pytest.raises(ProducerFencedError):
            txn.transition(event)
    assert txn.state is S.FATAL_ERROR


def test_fenced_commit_after_the_timeout_is_a_timeout():
    txn = TransactionManager("t", 1)
    txn.state = S.READY
    txn.transition("begin")
    txn.transition("commit")
    txn.started_ms -= 10
    err = txn.failed(ProducerFencedError("EndTxn"))
    assert isinstance(err, TransactionTimedOutError) and "transaction.timeout.ms=1" in str(err)
    assert txn.state is S.FATAL_ERROR


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (for_code(ErrorCode.CONCURRENT_TRANSACTIONS)(""), RETRY),
        (for_code(ErrorCode.NOT_COORDINATOR)(""), RETRY),
        (for_code(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)(""), RETRY),
        (KafkaConnectionError("lost"), RETRY),
        (ProducerFencedError(""), FATAL),
        (for_code(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)(""), FATAL),
        (for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED)(""), ABORTABLE),
        (for_code(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)(""), ABORTABLE),
        (for_code(ErrorCode.MESSAGE_TOO_LARGE)(""), ABORTABLE),
    ],
)
def test_classify(err, kind):
    assert classify(err) == kind


def test_missing_partitions_are_those_not_added():
    txn = TransactionManager("t", 60_000)
    txn.partitions = {("a", 0)}
    assert txn.missing([("b", 1), ("a", 0), ("a", 1), ("b", 1)]) == [("a", 1), ("b", 1)]
    assert txn.started and not TransactionManager("u", 1).started


# -- Producer: refused before any I/O (the broker address is never contacted) ----------------

_NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"request_required_acks": 1}, "request.required.acks'=-1"),
        ({"request_required_acks": 0}, "request.required.acks'=-1"),
        ({"enable_idempotence": False}, "needs idempotence"),
        ({"message_send_max_retries": 0}, "message.send.max.retries"),
        ({"max_in_flight_requests_per_connection": 6}, "<= 5"),
        ({"api_version": "0.8"}, "Kafka 0.11"),
        ({"transactional_id": ""}, "non-empty"),
    ],
)
def test_config_refuses_what_transactions_cannot_do(settings, match):
    base = {"metadata_broker_list": _NOWHERE, "transactional_id": "tx", "request_required_acks": -1}
    with pytest.raises(ConfigError, match=match):
        Producer(**{**base, **settings})


def test_properties_spelling_and_idempotence_implied():
    p = Producer.from_properties({"bootstrap.servers": _NOWHERE, "transactional.id": "tx", "acks": "all", "transaction.timeout.ms": 5000})
    try:
        assert p.config.transactional_id == "tx" and p.config.transaction_timeout_ms == 5000
        assert p.idempotent and p.transaction_state == "Uninitialized"
    finally:
        p.close()


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_calls_in_the_wrong_state(ptype):
    p = Producer(metadata_broker_list=_NOWHERE, transactional_id="tx", request_required_acks=-1, producer_type=ptype)
    try:
        with pytest.raises(TransactionStateError, match="init_transactions"):
            p.begin_transaction()
        with pytest.raises(TransactionStateError, match="init_transactions"):
            p.send(ProducerData("t", None, [b"x"]))
        with pytest.raises(TransactionStateError, match="init_transactions"):
            p.produce("t", b"x")
        with pytest.raises(TransactionStateError, match="init_transactions"):
            p.commit_transaction()
        with pytest.raises(TransactionStateError, match="init_transactions"):
            p.send_offsets_to_transaction({("t", 0): 1}, "g")
        assert p.transaction_state == "Uninitialized"
        assert p.flush(1) == 0  # nothing was queued
    finally:
        p.close()


def test_non_transactional_producer_refuses_transactions():
    p = Producer(metadata_broker_list=_NOWHERE)
    try:
        assert p.transaction_state is None
        for call in (p.init_transactions, p.begin_transaction, p.commit_transaction, p.abort_transaction):
            with pytest.raises(TransactionStateError, match="transactional.id"):
                call()
    finally:
        p.close()
