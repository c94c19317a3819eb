"""Frames and the two sans-IO connections: partial reads, pipelining, correlation, acks=0,
size limits, unsupported requests (including a flexible header v2 ApiVersions probe, from
kafka-python's encoder and from a live librdkafka client), and the "dead after an error" rule."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import pytest
from kafka.protocol.metadata import ApiVersionsRequest as KpApiVersionsRequest

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from hmbclient.protocol.frame import (
    DEFAULT_MAX_FRAME_BYTES,
    NEED_DATA,
    ClientConnection,
    FrameBuffer,
    HmbClientConnection,
    RequestEvent,
    ServerConnection,
    UnsupportedRequest,
    encode_request,
    fetch_v0_body_end,
)


def _metadata_response(n: int) -> Any:
    return MetadataResponse[1](
        brokers=[(1, "127.0.0.1", 9092, None)],
        controller_id=1,
        topics=[(0, f"t{n}", False, [(0, 0, 1, [1], [1])])],
    )


def _frame(cid: int, response: Any) -> bytes:
    return b"".join(ServerConnection.encode_response(cid, response))


def _drain(conn: Any, method: str) -> list[Any]:
    out = []
    while (ev := getattr(conn, method)()) is not NEED_DATA:
        out.append(ev)
    return out


# --- client side -------------------------------------------------------------------------------


def test_client_byte_by_byte_and_pipelined() -> None:
    client = ClientConnection(client_id="t")
    cids = [client.send_request(MetadataRequest[1](topics=[f"t{i}"]))[0] for i in range(3)]
    assert cids == [0, 1, 2] and client.in_flight == 3
    wire = b"".join(_frame(cid, _metadata_response(cid)) for cid in cids)
    got = []
    for i in range(len(wire)):
        client.receive_data(wire[i : i + 1])
        got += _drain(client, "next_response")
        # nothing is returned before a frame's last byte arrives
        assert len(got) == sum(1 for end in _ends(wire) if end <= i + 1)
    assert [cid for cid, _ in got] == cids
    assert [r.topics[0].topic for _, r in got] == ["t0", "t1", "t2"]
    assert client.in_flight == 0 and client.next_response() is NEED_DATA


def _ends(wire: bytes) -> list[int]:
    ends, pos = [], 0
    while pos < len(wire):
        (n,) = struct.unpack_from(">i", wire, pos)
        pos += 4 + n
        ends.append(pos)
    return ends


def test_client_several_frames_in_one_buffer_any_buffer_type() -> None:
    client = ClientConnection()
    for _ in range(4):
        client.send_request(MetadataRequest[1](topics=None))
    wire = b"".join(_frame(cid, _metadata_response(cid)) for cid in range(4))
    client.receive_data(bytearray(wire[:10]))
    client.receive_data(memoryview(wire)[10:])
    assert [cid for cid, _ in _drain(client, "next_response")] == [0, 1, 2, 3]


def test_correlation_mismatch_kills_the_connection() -> None:
    client = ClientConnection()
    client.send_request(MetadataRequest[1](topics=None))
    client.send_request(MetadataRequest[1](topics=None))
    client.receive_data(_frame(1, _metadata_response(1)))  # answers the second one first
    with pytest.raises(ProtocolError, match="correlation id 1"):
        client.next_response()
    # dead for good: every later call raises the same error
    for call in (
        client.next_response,
        lambda: client.receive_data(_frame(0, _metadata_response(0))),
        lambda: client.send_request(MetadataRequest[1](topics=None)),
    ):
        with pytest.raises(ProtocolError, match="correlation id 1"):
            call()
    assert client.fail_all() == [0, 1] and client.in_flight == 0


def test_response_without_request_and_short_frames() -> None:
    client = ClientConnection()
    client.receive_data(_frame(0, _metadata_response(0)))
    with pytest.raises(ProtocolError, match="no request in flight"):
        client.next_response()

    client = ClientConnection()
    client.send_request(MetadataRequest[1](topics=None))
    client.receive_data(b"\x00\x00\x00\x02\x00\x00")
    with pytest.raises(ProtocolError, match="no header"):
        client.next_response()

    client = ClientConnection()
    client.send_request(MetadataRequest[1](topics=None))
    client.receive_data(b"\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00")  # body too short
    with pytest.raises(ProtocolError, match="MetadataResponse_v1"):
        client.next_response()
    with pytest.raises(ProtocolError):
        client.next_response()


def test_acks_zero_expects_no_response() -> None:
    client = ClientConnection()
    produce = ProduceRequest[2](acks=0, timeout_ms=1000, topics=[("t", [(0, b"records")])])
    cid0, data0 = client.send_request(produce, expect_response=False)
    assert client.in_flight == 0
    cid1, _ = client.send_request(MetadataRequest[1](topics=None))
    cid2, _ = client.send_request(produce._replace(acks=1))
    assert (cid0, cid1, cid2) == (0, 1, 2) and client.in_flight == 2
    # the frame itself is an ordinary Produce frame
    server = ServerConnection()
    server.receive_data(data0)
    ev = server.next_request()
    assert isinstance(ev, RequestEvent) and ev.request.acks == 0 and ev.header.correlation_id == 0
    client.receive_data(_frame(1, _metadata_response(1)))
    client.receive_data(_frame(2, ProduceResponse[2](topics=[("t", [(0, 0, 5, -1)])], throttle_time_ms=0)))
    (c1, r1), (c2, r2) = _drain(client, "next_response")
    assert (c1, c2) == (1, 2) and isinstance(r1, MetadataResponse[1]) and r2.topics[0].partitions[0].base_offset == 5


def test_correlation_ids_wrap_and_explicit_ids() -> None:
    client = ClientConnection()
    client._next_correlation_id = 2**31 - 1
    assert client.next_correlation_id() == 2**31 - 1 and client.next_correlation_id() == 0
    cid, data = client.send_request(MetadataRequest[0](topics=[]), correlation_id=-5)
    assert cid == -5 and data[8:12] == struct.pack(">i", -5)
    with pytest.raises(ProtocolError):
        encode_request(MetadataRequest[0](topics=[]), 2**31, "x")


def test_api_versions_v0_fallback() -> None:
    """KIP-511: a broker that does not know our ApiVersions version answers in the v0 layout."""
    v0_body = ApiVersionsResponse[0](error_code=35, api_keys=[(18, 0, 2), (3, 0, 8)])
    for version in (1, 2):
        client = ClientConnection()
        client.send_request(ApiVersionsRequest[version]())
        client.receive_data(_frame(0, v0_body))
        cid, resp = client.next_response()
        assert cid == 0 and type(resp) is ApiVersionsResponse[0] and resp.error_code == 35
        assert [tuple(k) for k in resp.api_keys] == [(18, 0, 2), (3, 0, 8)]
    # a well-formed v2 answer decodes as v2
    client = ClientConnection()
    client.send_request(ApiVersionsRequest[2]())
    client.receive_data(_frame(0, ApiVersionsResponse[2](error_code=0, api_keys=[(0, 0, 7)], throttle_time_ms=3)))
    assert type(client.next_response()[1]) is ApiVersionsResponse[2]
    # garbage is still an error
    client = ClientConnection()
    client.send_request(ApiVersionsRequest[1]())
    client.receive_data(b"\x00\x00\x00\x05\x00\x00\x00\x00\x07")
    with pytest.raises(ProtocolError):
        client.next_response()


# --- frame size limits -------------------------------------------------------------------------


def test_max_frame_bytes() -> None:
    server = ServerConnection(max_frame_bytes=64)
    req = MetadataRequest[0](topics=["x" * 30])
    ok = b"".join(encode_request(req, 1, "c"))
    assert len(ok) - 4 <= 64
    server.receive_data(ok)
    assert isinstance(server.next_request(), RequestEvent)
    # one byte over: rejected from the 4 size bytes alone, before the body arrives
    server.receive_data(struct.pack(">i", 65))
    with pytest.raises(ProtocolError, match="max_frame_bytes"):
        server.next_request()
    with pytest.raises(ProtocolError):
        server.receive_data(b"more")

    client = ClientConnection(max_frame_bytes=DEFAULT_MAX_FRAME_BYTES)
    client.send_request(MetadataRequest[0](topics=[]))
    client.receive_data(struct.pack(">i", 2**31 - 1))  # a 2 GiB frame: refused at once
    t0 = time.perf_counter()
    with pytest.raises(ProtocolError, match="max_frame_bytes"):
        client.next_response()
    assert time.perf_counter() - t0 < 0.5

    for size in (-1, -(2**31)):
        fb = FrameBuffer(1024)
        fb.feed(struct.pack(">i", size))
        with pytest.raises(ProtocolError):
            fb.next_frame()


def test_frame_buffer_exact_limit_and_empty_frames() -> None:
    fb = FrameBuffer(8)
    fb.feed(struct.pack(">i", 8) + b"12345678" + struct.pack(">i", 0))
    assert fb.next_frame() == b"12345678"
    assert fb.next_frame() == b""
    assert fb.next_frame() is None and fb.buffered == 0
    fb.feed(b"\x00\x00")
    assert fb.peek_size() is None


# --- server side -------------------------------------------------------------------------------


def test_server_byte_by_byte_pipelined_requests() -> None:
    reqs = [
        (0, MetadataRequest[1](topics=None), "a"),
        (1, FetchRequest[4](replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, topics=[("t", [(0, 5, 1024)])]), None),
        (2, ProduceRequest[3](transactional_id=None, acks=-1, timeout_ms=5, topics=[("t", [(0, b"batch")])]), "ü"),
    ]
    wire = b"".join(b"".join(encode_request(r, cid, client_id)) for cid, r, client_id in reqs)
    server = ServerConnection()
    events = []
    for i in range(len(wire)):
        server.receive_data(wire[i : i + 1])
        events += _drain(server, "next_request")
    assert [(e.header.correlation_id, e.header.client_id, type(e.request)) for e in events] == [(cid, c, type(r)) for cid, r, c in reqs]
    assert events[1].request.topics[0].partitions[0].fetch_offset == 5
    assert bytes(events[2].request.topics[0].partitions[0].records) == b"batch"


def test_unsupported_api_key_and_version_keep_the_header() -> None:
    server = ServerConnection()
    body = b"\x00\x01\x02"
    for api_key, version in ((1000, 0), (1, 11), (3, 13), (0, 8), (18, 3), (7, 0), (-1, 0), (0, -1)):
        frame = struct.pack(">hhi", api_key, version, 99) + b"\x00\x02id" + body
        server.receive_data(struct.pack(">i", len(frame)) + frame)
        ev = server.next_request()
        assert isinstance(ev, UnsupportedRequest)
        assert tuple(ev.header) == (api_key, version, 99, "id") and ev.body == body
    # the connection is still usable after an unsupported request
    server.receive_data(b"".join(encode_request(MetadataRequest[0](topics=[]), 100, None)))
    assert server.next_request().header.correlation_id == 100


def test_api_versions_v3_flexible_header_from_kafka_python() -> None:
    """Header v2 (client_id as int16 string + tagged fields), as kafka-python and librdkafka
    send their first ApiVersions probe: we still see api_key 18, version 3 and the id."""
    req = KpApiVersionsRequest[3](client_software_name="kafka-python", client_software_version="3.0.12")
    req.with_header(correlation_id=4242, client_id="kafka-python-3.0.12")
    server = ServerConnection()
    server.receive_data(bytes(req.encode(header=True, framed=True)))
    ev = server.next_request()
    assert isinstance(ev, UnsupportedRequest)
    assert tuple(ev.header) == (18, 3, 4242, "kafka-python-3.0.12")
    assert ev.body[:1] == b"\x00"  # the header's empty tagged-field section


def test_bad_request_bodies_and_headers_kill_the_server_side() -> None:
    good = b"".join(encode_request(MetadataRequest[0](topics=["t"]), 1, "c"))
    cases = [
        struct.pack(">i", 9) + b"\x00" * 9,  # shorter than a header
        struct.pack(">i", 11) + struct.pack(">hhi", 3, 0, 1) + b"\x00\x09c",  # client_id past the frame
        struct.pack(">i", len(good) - 4 + 1) + good[4:] + b"x",  # a trailing byte in the body
        struct.pack(">i", 11) + struct.pack(">hhi", 3, 0, 1) + b"\x00\x01\xff",  # client_id not UTF-8
    ]
    for wire in cases:
        server = ServerConnection()
        server.receive_data(wire)
        with pytest.raises(ProtocolError):
            server.next_request()
        with pytest.raises(ProtocolError):
            server.next_request()
        with pytest.raises(ProtocolError):
            server.receive_data(good)


# --- a live librdkafka client ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_librdkafka_probe_is_parsed_and_v0_fallback_answer_understood() -> None:
    """confluent-kafka (librdkafka) connects to a raw socket we serve with ServerConnection. Its
    first request is ApiVersions v3+ with a flexible header v2; we answer in the v0 layout with
    UNSUPPORTED_VERSION, which makes librdkafka retry ApiVersions at a version we implement."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    port = listener.getsockname()[1]
    seen: list[Any] = []
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            conn.settimeout(20)
            server = ServerConnection()
            with conn:
                while len(seen) < 2:
                    data = conn.recv(65536)
                    if not data:
                        return
                    server.receive_data(data)
                    for ev in _drain(server, "next_request"):
                        seen.append(ev)
                        if isinstance(ev, UnsupportedRequest) and ev.header.api_key == 18:
                            resp = ApiVersionsResponse[0](error_code=35, api_keys=[(18, 0, 2), (3, 0, 1)])
                            conn.sendall(b"".join(ServerConnection.encode_response(ev.header.correlation_id, resp)))
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "rdk-test", "socket.timeout.ms": 5000})
    try:
        admin.list_topics(timeout=3)
    except confluent_kafka.KafkaException:
        pass  # our fake broker never answers Metadata; we only need the probe
    t.join(10)
    listener.close()
    assert not errors, errors
    assert seen, "librdkafka sent nothing"
    first = seen[0]
    assert isinstance(first, UnsupportedRequest)
    assert first.header.api_key == 18 and first.header.api_version >= 3 and first.header.client_id == "rdk-test"
    assert len(seen) >= 2, "librdkafka did not retry ApiVersions after the v0 UNSUPPORTED_VERSION answer"
    retry = seen[1]
    assert retry.header.api_key == 18 and retry.header.api_version <= 2
    assert retry.header.correlation_id != first.header.correlation_id
    assert isinstance(retry, RequestEvent) and isinstance(retry.request, ApiVersionsRequest[retry.header.api_version])


def test_fetch_response_frame_roundtrip_through_both_sides() -> None:
    client = ClientConnection()
    req = FetchRequest[10](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=100, isolation_level=1, session_id=0, session_epoch=-1, topics=[("t", [(0, -1, 7, 0, 100)])], forgotten_topics_data=[("old", [1, 2])])
    cid, data = client.send_request(req)
    server = ServerConnection()
    server.receive_data(data)
    ev = server.next_request()
    assert ev.request == req and ev.header.client_id == "hmbclient"
    resp = FetchResponse[10](throttle_time_ms=0, error_code=0, session_id=9, topics=[("t", [(0, 0, 10, 10, 0, [(1, 2)], b"rec")])])
    client.receive_data(_frame(ev.header.correlation_id, resp))
    got_cid, got = client.next_response()
    assert got_cid == cid and got.session_id == 9 and bytes(got.topics[0].partitions[0].records) == b"rec"


def test_take_frame_matches_whole_frames_like_next_response() -> None:
    """The receive path that cuts frames itself (hmbclient.net) gets the same checks."""
    client = ClientConnection("c")
    cid, _ = client.send_request(ApiVersionsRequest[0]())
    answer = ApiVersionsResponse[0](error_code=0, api_keys=[])
    frame = b"".join(ServerConnection.encode_response(cid, answer))[4:]
    assert client.take_frame(frame) == (cid, answer)
    with pytest.raises(ProtocolError, match="no request in flight"):
        client.take_frame(frame)
    client.send_request(ApiVersionsRequest[0]())
    with pytest.raises(ProtocolError, match="does not match the oldest request"):
        client.take_frame(b"".join(ServerConnection.encode_response(cid + 7, answer))[4:])


def test_hmb_fetch_v0_frames_with_zero_header() -> None:
    """HMB answers Fetch v0 with size 0 / correlation id 0 in the header; the reply's end is
    found from the body's length fields, whatever the split."""
    records = b"r" * 10  # one topic, one partition, built by hand
    raw = (struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1)
           + struct.pack(">ihqi", 0, 0, 5, len(records)) + records)
    assert fetch_v0_body_end(raw, 0) == len(raw)
    assert fetch_v0_body_end(raw[:-1], 0) is None and fetch_v0_body_end(raw[:3], 0) is None
    with pytest.raises(ProtocolError, match="negative topic count"):
        fetch_v0_body_end(struct.pack(">i", -1), 0)
    client = HmbClientConnection("c")
    cid, _ = client.send_request(FetchRequest[0](replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[]))
    wire = b"\x00" * 8 + raw
    for i in range(len(wire)):  # byte by byte: NEED_DATA until the last one
        client.receive_data(wire[i : i + 1])
        got = client.next_response()
        if i < len(wire) - 1:
            assert got is NEED_DATA
    assert got[0] == cid and got[1].topics[0].partitions[0].high_watermark == 5
