"""The transaction coordinator (KIP-98): its decisions as pure functions (:mod:`.state`) and
the records of ``__transaction_state`` (:mod:`.log`). The I/O shell (serving the APIs, the
replicated topic, sending markers to partition leaders) is built on these."""

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
