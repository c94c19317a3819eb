"""Transactions (KIP-98), the pure layers: the coordinator's decisions (:mod:`.state`), the
records of ``__transaction_state`` (:mod:`.log`), and a partition log's side — open
transactions, the last stable offset, aborted transactions and the ``.txnindex``
(:mod:`.partition`), and transactional offset commits on the group side (:mod:`.offsets`).
The I/O shells are built on these: :mod:`.coordinator` (the APIs, the replicated topic, the
timeout chore), :mod:`.markers` (WriteTxnMarkers on this broker's leaders, and the thread
sending markers to every leader), ``broker/log/txn_state.py`` (a log's state and ``.txnindex``)
and the offset manager's TxnOffsetCommit."""

from .log import (
    TRANSACTION_STATE_TOPIC,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    metadata_of,
    partition_for,
    value_of,
)
from .state import (
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
)

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TRANSITIONS",
    "Decision",
    "Forget",
    "IllegalStateTransition",
    "Reply",
    "SendMarkers",
    "TxnConfig",
    "TxnLogValue",
    "TxnMetadata",
    "TxnState",
    "WriteTxnLog",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "metadata_of",
    "partition_for",
    "value_of",
]
