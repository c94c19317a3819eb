"""Flexible versions (KIP-482) on the wire with Apache Kafka 4: request header v2 and response
header v1 from hmbclient's frame layer, on one connection interleaved with non-flexible
requests (a header byte too many or too few would desynchronise everything after it)."""

from __future__ import annotations

from hmbclient.errors import ErrorCode
from hmbclient.net.client import NetClient
from hmbclient.protocol.api import MetadataRequest
from hmbclient.protocol.api.txn import DescribeTransactionsRequest, ListTransactionsRequest


def test_list_and_describe_transactions_interleaved_with_metadata(kafka4) -> None:
    client = NetClient(kafka4.bootstrap, client_id="flexible-probe")
    try:
        node = client.bootstrap_ids[0]
        for _ in range(3):
            lt = client.call(node, lambda v: ListTransactionsRequest[0].build(), timeout_ms=10_000)
            assert lt.error_code == 0 and lt.unknown_state_filters == []
            lt1 = client.call(node, lambda v: ListTransactionsRequest[1].build(state_filters=["Bogus"], duration_filter=1),
                              timeout_ms=10_000)
            assert lt1.error_code == 0 and lt1.unknown_state_filters == ["Bogus"]
            dt = client.call(node, lambda v: DescribeTransactionsRequest[0].build(transactional_ids=["no-such-txn-id"]),
                             timeout_ms=10_000)
            (state,) = dt.transaction_states
            assert state.transactional_id == "no-such-txn-id"
            # (not found, or the coordinator of its __transaction_state partition not loaded yet)
            assert state.error_code in (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, ErrorCode.NOT_COORDINATOR,
                                        ErrorCode.COORDINATOR_NOT_AVAILABLE)
            md = client.call(node, lambda v: MetadataRequest[1](topics=[]), timeout_ms=10_000)
            assert md.brokers
    finally:
        client.close()
