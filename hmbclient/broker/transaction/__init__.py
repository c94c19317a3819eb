"""Transactions (KIP-98), the pure layers: the coordinator's decisions (:mod:`.state`), the
records of ``__transaction_state`` (:mod:`.log`), and a partition log's side — open
transactions, the last stable offset, aborted transactions and the ``.txnindex``
(:mod:`.partition`), and transactional offset commits on the group side (:mod:`.offsets`).
The I/O shells (serving the APIs, the replicated topic, sending markers to
partition leaders, the log keeping its index) are built on these."""

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
