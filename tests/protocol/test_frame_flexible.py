"""Request header v2 and response header v1 (KIP-482) in the frame layer: a flexible version's
headers carry a tagged-field section, ApiVersions responses never do.

Checked against kafka-python's encoder (whole frames, byte for byte), through the two sans-IO
connections in both directions (header tags we do not know are skipped, a malformed section is
refused and kills the connection), and the non-flexible layout is unchanged.
"""

from __future__ import annotations

import struct

import kafka.protocol.admin as kp_admin
import pytest

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from hmbclient.protocol.api.base import REQUESTS, RESPONSES
from hmbclient.protocol.api.reassign import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from hmbclient.protocol.api.txn import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from hmbclient.protocol.frame import (
    NEED_DATA,
    ClientConnection,
    RequestEvent,
    ServerConnection,
    encode_request,
)

_FLEXIBLE_REQUESTS = [
    (ListTransactionsRequest[0].build(state_filters=["Ongoing"], producer_id_filters=[5]),
     kp_admin.ListTransactionsRequest[0](state_filters=["Ongoing"], producer_id_filters=[5])),
    (ListTransactionsRequest[1].build(state_filters=[], producer_id_filters=[], duration_filter=30_000),
     kp_admin.ListTransactionsRequest[1](state_filters=[], producer_id_filters=[], duration_filter=30_000)),
    (DescribeTransactionsRequest[0].build(transactional_ids=["orders-0", "x" * 200]),
     kp_admin.DescribeTransactionsRequest[0](transactional_ids=["orders-0", "x" * 200])),
]
_APR = kp_admin.AlterPartitionReassignmentsRequest
_APR_T, _APR_P = _APR.ReassignableTopic, _APR.ReassignableTopic.ReassignablePartition
_LPR = kp_admin.ListPartitionReassignmentsRequest
_FLEXIBLE_REQUESTS += [
    (AlterPartitionReassignmentsRequest[0].build(timeout_ms=5000, topics=[("t", [(0, [1, 2]), (1, None)])]),
     _APR[0](timeout_ms=5000, topics=[_APR_T(name="t", partitions=[_APR_P(partition_index=0, replicas=[1, 2]),
                                                                   _APR_P(partition_index=1, replicas=None)])])),
    (AlterPartitionReassignmentsRequest[1].build(timeout_ms=1, allow_replication_factor_change=False, topics=[("u", [(3, [])])]),
     _APR[1](timeout_ms=1, allow_replication_factor_change=False, topics=[_APR_T(name="u", partitions=[_APR_P(partition_index=3, replicas=[])])])),
    (ListPartitionReassignmentsRequest[0].build(timeout_ms=100, topics=None), _LPR[0](timeout_ms=100, topics=None)),
    (ListPartitionReassignmentsRequest[0].build(timeout_ms=100, topics=[("t", [0, 3])]),
     _LPR[0](timeout_ms=100, topics=[_LPR.ListPartitionReassignmentsTopics(name="t", partition_indexes=[0, 3])])),
]


def test_reassignment_responses_decode_in_kafka_python() -> None:
    """AlterPartitionReassignments v0-1 / ListPartitionReassignments v0 responses as we encode
    them read the same in kafka-python's decoder (Kafka's JSON schemas)."""
    listed = ListPartitionReassignmentsResponse[0].build(throttle_time_ms=3, error_code=0, error_message=None,
                                                        topics=[("t", [(0, [1, 2, 0], [2], [0])])])
    kp = kp_admin.ListPartitionReassignmentsResponse[0].decode(listed.encode())
    p = kp.topics[0].partitions[0]
    assert (kp.throttle_time_ms, kp.topics[0].name, p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas) == (
        3, "t", 0, [1, 2, 0], [2], [0])
    for v in (0, 1):
        altered = AlterPartitionReassignmentsResponse[v].build(throttle_time_ms=0, allow_replication_factor_change=False, error_code=0,
                                                              error_message=None, responses=[("t", [(0, 85, "none in progress")])])
        kp = kp_admin.AlterPartitionReassignmentsResponse[v].decode(altered.encode())
        q = kp.responses[0].partitions[0]
        assert (q.partition_index, q.error_code, q.error_message) == (0, 85, "none in progress")
        assert v == 0 or kp.allow_replication_factor_change is False


def _frame(parts: list) -> bytes:
    return b"".join(bytes(p) for p in parts)


def test_every_flexible_api_is_marked_and_every_other_is_not() -> None:
    """The header choice follows the class flag; the flag is set on exactly the versions
    defined flexible (the txn admin pair today), on requests and responses alike."""
    flexible = sorted(k for k, cls in REQUESTS.items() if cls.FLEXIBLE)
    assert flexible and flexible == sorted(k for k, cls in RESPONSES.items() if cls.FLEXIBLE)
    assert not MetadataRequest[8].FLEXIBLE


@pytest.mark.parametrize("ours,kp", _FLEXIBLE_REQUESTS, ids=lambda x: type(x).__name__)
def test_request_header_v2_matches_kafka_python(ours, kp) -> None:
    """api_key, api_version, correlation_id, client_id (int16 string), an empty tag section."""
    kp.with_header(correlation_id=7, client_id="rdkafka")
    assert _frame(encode_request(ours, 7, "rdkafka")) == bytes(kp.encode(header=True, framed=True))
    # and the header really has the tag byte: the same body framed as header v1 is one byte shorter
    v1 = b"".join([struct.pack(">hhi", ours.API_KEY, ours.API_VERSION, 7), struct.pack(">h", 7), b"rdkafka", ours.encode()])
    assert len(_frame(encode_request(ours, 7, "rdkafka"))) == 4 + len(v1) + 1


def test_non_flexible_request_header_is_unchanged() -> None:
    req = MetadataRequest[1](topics=None)
    frame = _frame(encode_request(req, 3, "c"))
    assert frame == struct.pack(">ihhih", 2 + 2 + 4 + 2 + 1 + 4, 3, 1, 3, 1) + b"c" + b"\xff\xff\xff\xff"


@pytest.mark.parametrize("ours,_kp", _FLEXIBLE_REQUESTS, ids=lambda x: type(x).__name__)
def test_server_reads_a_flexible_request_including_unknown_header_tags(ours, _kp) -> None:
    server = ServerConnection()
    server.receive_data(_frame(encode_request(ours, 11, "x")))
    ev = server.next_request()
    assert isinstance(ev, RequestEvent) and ev.header.correlation_id == 11 and ev.request == ours
    assert server.next_request() is NEED_DATA
    # header v2 with two tags we do not know (tag 0: 3 bytes, tag 5: 0 bytes): skipped
    head = struct.pack(">hhi", ours.API_KEY, ours.API_VERSION, 12) + struct.pack(">h", 1) + b"x"
    body = head + b"\x02" + b"\x00\x03abc" + b"\x05\x00" + ours.encode()
    server.receive_data(struct.pack(">i", len(body)) + body)
    ev = server.next_request()
    assert isinstance(ev, RequestEvent) and ev.request == ours and ev.header.client_id == "x"


def test_a_malformed_request_header_tag_section_kills_the_connection() -> None:
    req = ListTransactionsRequest[0].build()
    head = struct.pack(">hhi", req.API_KEY, 0, 1) + struct.pack(">h", -1)
    body = head + b"\x01" + b"\x00\x7f" + req.encode()  # one tag of 127 bytes: runs past the frame
    server = ServerConnection()
    server.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(ProtocolError, match="tagged field 0"):
        server.next_request()
    with pytest.raises(ProtocolError):
        server.next_request()


def _dt_response() -> DescribeTransactionsResponse:
    return DescribeTransactionsResponse[0].build(
        throttle_time_ms=0,
        transaction_states=[{"error_code": 0, "transactional_id": "t", "transaction_state": "Ongoing",
                             "transaction_timeout_ms": 60_000, "transaction_start_time_ms": 1, "producer_id": 4,
                             "producer_epoch": 2, "topics": [{"topic": "a", "partitions": [0, 1]}]}],
    )


def test_response_header_v1_round_trip_and_matches_kafka_python_decoder() -> None:
    resp = _dt_response()
    client = ClientConnection(client_id="c")
    cid, _ = client.send_request(DescribeTransactionsRequest[0].build(transactional_ids=["t"]))
    frame = _frame(ServerConnection.encode_response(cid, resp))
    # correlation id, then the empty tag section, then the body
    assert frame[4:8] == struct.pack(">i", cid) and frame[8:9] == b"\x00" and frame[9:] == resp.encode()
    kp_resp = kp_admin.DescribeTransactionsResponse[0].decode(frame[9:])
    assert kp_resp.transaction_states[0][1] == "t"
    client.receive_data(frame)
    got_cid, got = client.next_response()
    assert got_cid == cid and got == resp


def test_take_frame_skips_unknown_response_header_tags() -> None:
    resp = ListTransactionsResponse[0].build(error_code=0, unknown_state_filters=[], transaction_states=[])
    client = ClientConnection(client_id="c")
    cid, _ = client.send_request(ListTransactionsRequest[0].build())
    frame = struct.pack(">i", cid) + b"\x01" + b"\x09\x02hi" + resp.encode()
    assert client.take_frame(frame) == (cid, resp)


def test_a_flexible_response_without_its_header_tags_is_an_error_not_a_misread() -> None:
    """A broker that wrote header v0 for a flexible response: the body's first byte is taken as
    the tag count and the rest no longer decodes; refused, never decoded as something else."""
    resp = _dt_response()
    client = ClientConnection(client_id="c")
    cid, _ = client.send_request(DescribeTransactionsRequest[0].build(transactional_ids=["t"]))
    body = struct.pack(">i", cid) + resp.encode()
    client.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(ProtocolError, match="DescribeTransactionsResponse"):
        client.next_response()


def test_api_versions_responses_keep_header_v0() -> None:
    """KIP-511: even a flexible ApiVersions answer has no header tags; ours are non-flexible,
    so this pins that encode_response writes none for ApiVersions."""
    resp = ApiVersionsResponse[0].build(error_code=35, api_keys=[])
    frame = _frame(ServerConnection.encode_response(5, resp))
    assert frame[8:] == resp.encode()
    client = ClientConnection(client_id="c")
    cid, _ = client.send_request(ApiVersionsRequest[0]())
    client.receive_data(_frame(ServerConnection.encode_response(cid, resp)))
    assert client.next_response() == (cid, resp)


def test_librdkafkas_all_topics_metadata_v12_with_trailing_bytes_is_read() -> None:
    """The frame librdkafka 2.16's ``list_topics()`` sends (captured): Metadata v12 asking for
    every topic, whose body ends with 3 bytes v12 does not define. Kafka's parser reads the
    fields and ignores the rest; so do we (the connection used to be closed, and the client
    failed with "Broker transport failure")."""
    frame = bytes.fromhex("000000190003000c00000004000772646b61666b610000000000000000")
    server = ServerConnection()
    server.receive_data(frame)
    ev = server.next_request()
    assert isinstance(ev, RequestEvent) and ev.request.topics is None and ev.header.client_id == "rdkafka"
    assert server.next_request() is NEED_DATA


def test_a_non_flexible_request_must_still_end_where_its_fields_end() -> None:
    body = MetadataRequest[1](topics=None).encode() + b"x"
    head = struct.pack(">hhi", 3, 1, 1) + struct.pack(">h", -1)
    server = ServerConnection()
    server.receive_data(struct.pack(">i", len(head) + len(body)) + head + body)
    with pytest.raises(ProtocolError, match="trailing"):
        server.next_request()
