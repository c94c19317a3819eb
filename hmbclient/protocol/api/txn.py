"""Transaction APIs (KIP-98, KIP-664): AddPartitionsToTxn (24) v0-2, AddOffsetsToTxn (25) v0-2,
EndTxn (26) v0-2, WriteTxnMarkers (27) v0, TxnOffsetCommit (28) v0-2 (all non-flexible), and
the admin pair DescribeTransactions (65) v0 and ListTransactions (66) v0-1, which only exist
flexible. InitProducerId (22, in :mod:`.admin`) carries the transactional id and FindCoordinator
(10, in :mod:`.offsets`) v1+ finds a transaction coordinator with ``key_type`` 1.

A transactional producer's conversation with its coordinator:

    InitProducerId(transactional_id, transaction_timeout_ms) -> producer_id, producer_epoch
    AddPartitionsToTxn(transactional_id, producer_id, producer_epoch, [topic [partition]])
    Produce(transactional_id, batches with the transactional bit)       -> partition leaders
    AddOffsetsToTxn(transactional_id, producer_id, producer_epoch, group_id)
    TxnOffsetCommit(transactional_id, group_id, producer_id, producer_epoch, offsets) -> group coordinator
    EndTxn(transactional_id, producer_id, producer_epoch, committed)
    coordinator -> leaders: WriteTxnMarkers([producer_id producer_epoch result [topic [partition]]
                                             coordinator_epoch])

Versions: AddPartitionsToTxn v1 and v2 are v0 re-versioned (v2 clients may see
PRODUCER_FENCED where v1 saw INVALID_PRODUCER_EPOCH); the same for AddOffsetsToTxn and EndTxn.
TxnOffsetCommit v2 adds committed_leader_epoch per partition. WriteTxnMarkers v1+ and every
later version of the others are flexible; Kafka 4 dropped WriteTxnMarkers v0, which Kafka 2.x
and 3.x brokers speak between themselves.

The flexible classes (``FLEXIBLE = True``) travel with request header v2 / response header v1
(:mod:`hmbclient.protocol.frame`).
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
    Array,
    Boolean,
    FieldSpec,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
)

__all__ = [
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "EndTxnRequest",
    "EndTxnResponse",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersResponse",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
]

_producer: list[FieldSpec] = [("transactional_id", String), ("producer_id", Int64), ("producer_epoch", Int16)]

# --- AddPartitionsToTxn ------------------------------------------------------------------------
_apt_req: list[FieldSpec] = [*_producer, ("topics", Array(("topic", String), ("partitions", Array(Int32)), name="topics"))]
_apt_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("results", Array(("topic", String), ("results", Array(("partition", Int32), ("error_code", Int16), name="results")), name="results")),
]
AddPartitionsToTxnRequest = {}
AddPartitionsToTxnResponse = {}
for _v in (0, 1, 2):
    AddPartitionsToTxnRequest[_v], AddPartitionsToTxnResponse[_v] = define(ApiKey.ADD_PARTITIONS_TO_TXN, _v, _apt_req, _apt_resp)

# --- AddOffsetsToTxn ---------------------------------------------------------------------------
_aot_req: list[FieldSpec] = [*_producer, ("group_id", String)]
_error: list[FieldSpec] = [("throttle_time_ms", Int32), ("error_code", Int16)]
AddOffsetsToTxnRequest = {}
AddOffsetsToTxnResponse = {}
for _v in (0, 1, 2):
    AddOffsetsToTxnRequest[_v], AddOffsetsToTxnResponse[_v] = define(ApiKey.ADD_OFFSETS_TO_TXN, _v, _aot_req, _error)

# --- EndTxn ------------------------------------------------------------------------------------
_et_req: list[FieldSpec] = [*_producer, ("committed", Boolean)]
EndTxnRequest = {}
EndTxnResponse = {}
for _v in (0, 1, 2):
    EndTxnRequest[_v], EndTxnResponse[_v] = define(ApiKey.END_TXN, _v, _et_req, _error)

# --- WriteTxnMarkers ---------------------------------------------------------------------------
_wtm_req: list[FieldSpec] = [
    (
        "markers",
        Array(
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("transaction_result", Boolean),
            ("topics", Array(("topic", String), ("partitions", Array(Int32)), name="topics")),
            ("coordinator_epoch", Int32),
            name="markers",
        ),
    )
]
_wtm_resp: list[FieldSpec] = [
    (
        "markers",
        Array(
            ("producer_id", Int64),
            ("topics", Array(("topic", String), ("partitions", Array(("partition", Int32), ("error_code", Int16), name="partitions")), name="topics")),
            name="markers",
        ),
    )
]
WriteTxnMarkersRequest = {}
WriteTxnMarkersResponse = {}
WriteTxnMarkersRequest[0], WriteTxnMarkersResponse[0] = define(ApiKey.WRITE_TXN_MARKERS, 0, _wtm_req, _wtm_resp)

# --- TxnOffsetCommit ---------------------------------------------------------------------------
def _toc_req(*partition_fields: FieldSpec) -> list[FieldSpec]:
    partitions = Array(*partition_fields, name="partitions")
    return [
        ("transactional_id", String),
        ("group_id", String),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("topics", Array(("topic", String), ("partitions", partitions), name="topics")),
    ]


_toc_v0 = _toc_req(("partition", Int32), ("offset", Int64), ("metadata", NullableString))
_toc_v2 = _toc_req(("partition", Int32), ("offset", Int64), ("committed_leader_epoch", Int32, -1), ("metadata", NullableString))
_toc_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("topics", Array(("topic", String), ("partitions", Array(("partition", Int32), ("error_code", Int16), name="partitions")), name="topics")),
]
TxnOffsetCommitRequest = {}
TxnOffsetCommitResponse = {}
for _v, _rq in ((0, _toc_v0), (1, _toc_v0), (2, _toc_v2)):
    TxnOffsetCommitRequest[_v], TxnOffsetCommitResponse[_v] = define(ApiKey.TXN_OFFSET_COMMIT, _v, _rq, _toc_resp)

# --- DescribeTransactions (flexible only) ------------------------------------------------------
_dt_req: list[FieldSpec] = [("transactional_ids", Array(String))]
_dt_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    (
        "transaction_states",
        Array(
            ("error_code", Int16),
            ("transactional_id", String),
            ("transaction_state", String),
            ("transaction_timeout_ms", Int32),
            ("transaction_start_time_ms", Int64),
            ("producer_id", Int64),
            ("producer_epoch", Int16),
            ("topics", Array(("topic", String), ("partitions", Array(Int32)), name="topics")),
            name="transaction_states",
        ),
    ),
]
DescribeTransactionsRequest = {}
DescribeTransactionsResponse = {}
DescribeTransactionsRequest[0], DescribeTransactionsResponse[0] = define(ApiKey.DESCRIBE_TRANSACTIONS, 0, _dt_req, _dt_resp, flexible=True)

# --- ListTransactions (flexible only) ----------------------------------------------------------
_lt_v0: list[FieldSpec] = [("state_filters", Array(String)), ("producer_id_filters", Array(Int64))]
_lt_v1: list[FieldSpec] = [*_lt_v0, ("duration_filter", Int64, -1)]
_lt_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("error_code", Int16),
    ("unknown_state_filters", Array(String)),
    (
        "transaction_states",
        Array(("transactional_id", String), ("producer_id", Int64), ("transaction_state", String), name="transaction_states"),
    ),
]
ListTransactionsRequest = {}
ListTransactionsResponse = {}
for _v, _rq in ((0, _lt_v0), (1, _lt_v1)):
    ListTransactionsRequest[_v], ListTransactionsResponse[_v] = define(ApiKey.LIST_TRANSACTIONS, _v, _rq, _lt_resp, flexible=True)
