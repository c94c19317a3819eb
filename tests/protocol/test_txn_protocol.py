"""The transaction APIs (protocol/api/txn.py) beyond what test_api_golden.py's harness covers.

test_api_golden.py checks every non-flexible pair (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit v0-2, WriteTxnMarkers v0, InitProducerId, FindCoordinator) field by field and
byte for byte against kafka-python. Here:

* the flexible-only admin pairs (DescribeTransactions v0, ListTransactions v0-1): bodies both
  ways against kafka-python, whose generated code writes the compact forms and tagged sections;
* the transactional uses of the older APIs, with the values a producer really sends
  (FindCoordinator key_type 1, InitProducerId with a transactional id), against kafka-python;
* one builder call per request at every version, as a version-agnostic caller writes it.
"""

from __future__ import annotations

from typing import Any

import kafka.protocol.admin as kp_admin
import kafka.protocol.metadata as kp_metadata
import kafka.protocol.producer as kp_producer
import pytest

from hmbclient.protocol.api import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiKey,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from hmbclient.protocol.frame import encode_request
from tests.protocol.test_api_golden import from_kp, plain, to_kp

_DT_RESP = {
    "throttle_time_ms": 3,
    "transaction_states": [
        {
            "error_code": 0,
            "transactional_id": "orders-0",
            "transaction_state": "Ongoing",
            "transaction_timeout_ms": 60000,
            "transaction_start_time_ms": 1_700_000_000_000,
            "producer_id": 4001,
            "producer_epoch": 7,
            "topics": [{"topic": "orders", "partitions": [0, 2]}, {"topic": "tópic-✓", "partitions": []}],
        },
        {
            "error_code": 105,  # TRANSACTIONAL_ID_NOT_FOUND
            "transactional_id": "",
            "transaction_state": "",
            "transaction_timeout_ms": -1,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        },
    ],
}

FLEXIBLE_CASES: list[tuple[Any, Any, int, dict[str, Any]]] = [
    (DescribeTransactionsRequest, kp_admin.DescribeTransactionsRequest, 0, {"transactional_ids": ["orders-0", "", "x" * 200]}),
    (DescribeTransactionsRequest, kp_admin.DescribeTransactionsRequest, 0, {"transactional_ids": []}),
    (DescribeTransactionsResponse, kp_admin.DescribeTransactionsResponse, 0, _DT_RESP),
    (ListTransactionsRequest, kp_admin.ListTransactionsRequest, 0, {"state_filters": ["Ongoing", "PrepareCommit"], "producer_id_filters": [1, 2**62]}),
    (ListTransactionsRequest, kp_admin.ListTransactionsRequest, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": 30_000}),
    (ListTransactionsRequest, kp_admin.ListTransactionsRequest, 1, {"state_filters": ["Empty"], "producer_id_filters": [-1]}),
] + [
    (
        ListTransactionsResponse,
        kp_admin.ListTransactionsResponse,
        v,
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "unknown_state_filters": ["Bogus"],
            "transaction_states": [
                {"transactional_id": "a", "producer_id": 1, "transaction_state": "CompleteCommit"},
                {"transactional_id": "b" * 300, "producer_id": 2**63 - 1, "transaction_state": "PrepareAbort"},
            ],
        },
    )
    for v in (0, 1)
]


@pytest.mark.parametrize("case", FLEXIBLE_CASES, ids=lambda c: f"{c[0][c[2]].__name__}-{len(str(c[3]))}")
def test_flexible_admin_pairs_match_kafka_python(case: tuple[Any, Any, int, dict[str, Any]]) -> None:
    ours_by_v, kp_by_v, v, fields = case
    ours, kp = ours_by_v[v], kp_by_v[v]
    assert ours.FLEXIBLE and kp.flexible_version_q(v)
    value = ours.build(**fields)
    kp_fields = kp._struct.untagged_fields(v)
    data = ours(*value).encode()
    kp_data = bytes(kp(**to_kp(ours.SCHEMA, kp_fields, value, v, {})).encode())
    assert data == kp_data
    assert plain(ours.SCHEMA, ours.decode(kp_data)) == plain(ours.SCHEMA, value)
    assert plain(ours.SCHEMA, from_kp(ours.SCHEMA, kp_fields, kp.decode(data), v, {})) == plain(ours.SCHEMA, value)


def test_list_transactions_v1_duration_filter_defaults_to_none() -> None:
    """Kafka's default -1 (no filter) for the v1 duration filter."""
    assert ListTransactionsRequest[1].build().duration_filter == -1


def test_find_coordinator_for_a_transactional_id_matches_kafka_python() -> None:
    """key_type 1 (TRANSACTION): the request a transactional producer sends first, framed."""
    for v in (1, 2):
        req = FindCoordinatorRequest[v].build(key="orders-0", key_type=1)
        kp_req = kp_metadata.FindCoordinatorRequest[v](key="orders-0", key_type=1)
        assert req.encode() == bytes(kp_req.encode())
        kp_req.with_header(correlation_id=9, client_id="rdkafka")
        assert b"".join(encode_request(req, 9, "rdkafka")) == bytes(kp_req.encode(header=True, framed=True))


def test_init_producer_id_with_a_transactional_id_matches_kafka_python() -> None:
    for v in (0, 1):
        req = InitProducerIdRequest[v].build(transactional_id="orders-0", transaction_timeout_ms=60_000)
        kp_req = kp_producer.InitProducerIdRequest[v](transactional_id="orders-0", transaction_timeout_ms=60_000)
        assert req.encode() == bytes(kp_req.encode())
        assert InitProducerIdRequest[v].decode(req.encode()).transactional_id == "orders-0"


_CALLS: list[tuple[Any, dict[str, Any]]] = [
    (AddPartitionsToTxnRequest, {"transactional_id": "t", "producer_id": 5, "producer_epoch": 1, "topics": [{"topic": "a", "partitions": [0, 1]}]}),
    (AddOffsetsToTxnRequest, {"transactional_id": "t", "producer_id": 5, "producer_epoch": 1, "group_id": "g"}),
    (EndTxnRequest, {"transactional_id": "t", "producer_id": 5, "producer_epoch": 1, "committed": True}),
    (
        TxnOffsetCommitRequest,
        {
            "transactional_id": "t",
            "group_id": "g",
            "producer_id": 5,
            "producer_epoch": 1,
            "topics": [{"topic": "a", "partitions": [{"partition": 0, "offset": 42, "committed_leader_epoch": 3, "metadata": None}]}],
        },
    ),
    (
        WriteTxnMarkersRequest,
        {"markers": [{"producer_id": 5, "producer_epoch": 1, "transaction_result": False, "topics": [{"topic": "a", "partitions": [0]}], "coordinator_epoch": 2}]},
    ),
]


@pytest.mark.parametrize("call", _CALLS, ids=lambda c: c[0][0].__name__)
def test_one_build_call_serves_every_version(call: tuple[Any, dict[str, Any]]) -> None:
    """A caller describes a request once; each version keeps what it has (TxnOffsetCommit v0-1
    drop committed_leader_epoch) and decodes back to the same value."""
    by_version, fields = call
    for v, cls in sorted(by_version.items()):
        req = cls.build(**fields)
        assert cls.decode(req.encode()) == req
        assert (req.API_KEY, req.API_VERSION) == (cls.API_KEY, v)
    old = TxnOffsetCommitRequest[0].build(**_CALLS[3][1]).topics[0].partitions[0]
    assert "committed_leader_epoch" not in old._fields and old.offset == 42


def test_add_partitions_response_shape() -> None:
    """Per topic, per partition, an error code: how a coordinator answers (CONCURRENT_TRANSACTIONS
    on one partition, OPERATION_NOT_ATTEMPTED on the rest)."""
    resp = AddPartitionsToTxnResponse[0].build(
        throttle_time_ms=0, results=[{"topic": "a", "results": [{"partition": 0, "error_code": 51}, {"partition": 1, "error_code": 55}]}]
    )
    got = AddPartitionsToTxnResponse[0].decode(resp.encode())
    assert [(r.partition, r.error_code) for r in got.results[0].results] == [(0, 51), (1, 55)]
    assert ApiKey.ADD_PARTITIONS_TO_TXN == 24 and ApiKey.LIST_TRANSACTIONS == 66
