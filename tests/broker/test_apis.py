"""Every API and version the broker serves, spoken over a real socket with our codec."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.apis import KafkaApis
from hmbclient.protocol import records
from hmbclient.protocol.api import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ProduceRequest,
)
from hmbclient.protocol.api.base import REQUESTS

from .conftest import RawClient, create_topic, encode, fetch, produce

# Inter-broker APIs (4-7, 23) are advertised as Kafka does; they obey only the controller.
# The group coordinator serves 11-16 and 42. SaslHandshake/SaslAuthenticate (17, 36) are
# advertised on every listener, as Kafka does (ILLEGAL_SASL_STATE where there is no SASL).
# DescribeConfigs (32) for Kafka's admin tools. The transaction coordinator serves 22 and
# 24-28 (WriteTxnMarkers, 27, between brokers), 65 and 66. DeleteTopics (20), CreatePartitions
# (37), ElectLeaders (43), AlterConfigs (33), IncrementalAlterConfigs (44), DescribeLogDirs (35),
# DescribeCluster (60), OffsetDelete (47), DeleteRecords (21) for Kafka's AdminClient (broker/admin_apis.py).
# ConsumerGroupHeartbeat (68, KIP-848) for group.protocol=consumer members, ConsumerGroupDescribe
# (69) for their groups.
HANDLED = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 32, 33, 35, 36, 37,
           42, 43, 44, 45, 46, 47, 48, 49, 60, 65, 66, 68, 69}


def _expected_versions() -> list[tuple[int, int, int]]:
    out = []
    for key in sorted(HANDLED):
        vs = [v for (k, v) in REQUESTS if k == key]
        out.append((key, min(vs), max(vs)))
    return out


@pytest.mark.parametrize("version", [0, 1, 2])
def test_api_versions_advertises_exactly_what_is_served(client: RawClient, version: int) -> None:
    resp = client.request(ApiVersionsRequest[version]())
    assert resp.error_code == 0
    assert [tuple(k) for k in resp.api_keys] == _expected_versions()
    assert (1, 0, 10) in [tuple(k) for k in resp.api_keys]  # Fetch v0-10, legacy and modern


def test_api_versions_of_unknown_version_gets_v0_layout_error(broker: EmbeddedBroker) -> None:
    # ApiVersions v3 as librdkafka/kafka-python send it: flexible header v2 + compact body.
    body = struct.pack(">hhi", 18, 3, 77) + struct.pack(">h", 4) + b"kcat" + b"\x00" + b"\x05kcat" + b"\x041.7" + b"\x00"
    import socket

    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        frame = _recv_exact(s, size)
        assert struct.unpack(">i", frame[:4])[0] == 77
        resp = ApiVersionsResponse[0].decode(frame[4:])
        assert resp.error_code == 35
        assert [tuple(k) for k in resp.api_keys] == _expected_versions()
        # the connection stays usable: the client retries with v0
        req = ApiVersionsRequest[0]()
        from hmbclient.protocol.frame import encode_request

        s.sendall(b"".join(encode_request(req, 78, "kcat")))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        frame = _recv_exact(s, size)
        assert ApiVersionsResponse[0].decode(frame[4:]).error_code == 0


def _recv_exact(s: object, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))  # type: ignore[attr-defined]
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


@pytest.mark.parametrize("version", range(9))
def test_metadata_every_version_auto_creates(client: RawClient, broker: EmbeddedBroker, version: int) -> None:
    topic = f"meta-v{version}"
    req = MetadataRequest[version].build(topics=[topic], allow_auto_topic_creation=True)
    resp = client.request(req)
    assert [b.node_id for b in resp.brokers] == [0]
    assert (resp.brokers[0].host, resp.brokers[0].port) == ("127.0.0.1", broker.port)
    (t,) = resp.topics
    assert (t.error_code, t.topic, len(t.partitions)) == (0, topic, 1)
    p = t.partitions[0]
    assert (p.error_code, p.partition, p.leader, list(p.replicas), list(p.isr)) == (0, 0, 0, [0], [0])
    assert os.path.isdir(os.path.join(broker.log_dir, f"{topic}-0"))


def test_metadata_all_topics_and_no_auto_create(client: RawClient) -> None:
    create_topic(client, "listed")
    assert "listed" in [t.topic for t in client.request(MetadataRequest[0](topics=[])).topics]
    assert "listed" in [t.topic for t in client.request(MetadataRequest[1](topics=None)).topics]
    assert client.request(MetadataRequest[1](topics=[])).topics == []
    resp = client.request(MetadataRequest[4](topics=["never-created"], allow_auto_topic_creation=False))
    assert resp.topics[0].error_code == 3
    assert "never-created" not in [t.topic for t in client.request(MetadataRequest[1](topics=None)).topics]


@pytest.mark.parametrize("name", ["../x", "a/b", "", "x" * 250, ".", "..", "sp ace", "ü"])
def test_illegal_topic_names_never_touch_the_filesystem(client: RawClient, broker: EmbeddedBroker, name: str) -> None:
    before = sorted(os.listdir(broker.log_dir))
    parent_before = sorted(os.listdir(Path(broker.log_dir).parent))
    resp = client.request(MetadataRequest[1](topics=[name]))
    assert resp.topics[0].error_code == 17
    p = produce(client, name, 0, encode([(None, b"x")]))
    assert p.error_code == 17
    resp = client.request(CreateTopicsRequest[1].build(topics=[(name, 1, 1, [], [])], timeout_ms=1000, validate_only=False))
    assert resp.topics[0].error_code == 17 and resp.topics[0].error_message
    assert fetch(client, name, 0, 0).error_code == 17
    assert sorted(os.listdir(broker.log_dir)) == before
    assert sorted(os.listdir(Path(broker.log_dir).parent)) == parent_before


def test_249_character_name_is_legal(client: RawClient) -> None:
    resp = client.request(MetadataRequest[1](topics=["n" * 249]))
    assert resp.topics[0].error_code == 0


@pytest.mark.parametrize("produce_version", range(8))
def test_produce_every_version_then_fetch_every_version(client: RawClient, produce_version: int) -> None:
    topic = f"pv{produce_version}"
    create_topic(client, topic)
    magic = 2 if produce_version >= 3 else (1 if produce_version == 2 else 0)
    items = [(b"k%d" % i, b"value-%d" % i) for i in range(5)]
    for codec in (records.NONE, records.GZIP):
        r = produce(client, topic, 0, encode(items, magic=magic, codec=codec), version=produce_version)
        assert r.error_code == 0
    assert r.base_offset == 5
    for fv in range(11):
        p = fetch(client, topic, 0, 0, version=fv)
        assert p.error_code == 0 and p.high_watermark == 10
        recs = records.decode_records(p.records)
        assert [(r.offset, r.key, r.value) for r in recs] == [(i, *items[i % 5]) for i in range(10)], fv
        allowed = 0 if fv <= 1 else (1 if fv <= 3 else 2)
        magics = {e.magic for e in records.scan_entries(p.records)[0]}
        assert max(magics) <= allowed, (fv, magics)


def test_fetch_v4_sends_stored_bytes_untouched(client: RawClient) -> None:
    create_topic(client, "zero-copy")
    wire = encode([(b"k", b"v" * 300)], codec=records.SNAPPY)
    assert produce(client, "zero-copy", 0, wire).error_code == 0
    got = bytes(fetch(client, "zero-copy", 0, 0, version=4).records)
    # Stored as sent but for the broker's offset (bytes 0-8) and the partition leader epoch the
    # leader stamps (bytes 12-16, outside the CRC; -1 from the producer, 0 = the first epoch).
    assert got[8:12] == wire[8:12] and got[16:] == wire[16:]
    assert wire[12:16] == b"\xff\xff\xff\xff" and got[12:16] == b"\x00\x00\x00\x00"


def test_produce_errors(client: RawClient, broker: EmbeddedBroker) -> None:
    create_topic(client, "errs")
    # v3+ must carry RecordBatch v2
    assert produce(client, "errs", 0, encode([(None, b"x")], magic=1), version=3).error_code == 87
    # bad CRC: nothing appended
    bad = bytearray(encode([(None, b"payload")]))
    bad[-1] ^= 1
    assert produce(client, "errs", 0, bytes(bad)).error_code == 2
    bad0 = bytearray(encode([(None, b"payload")], magic=0))
    bad0[-1] ^= 1
    assert produce(client, "errs", 0, bytes(bad0), version=0).error_code == 2
    # over message.max.bytes
    assert produce(client, "errs", 0, encode([(None, b"x" * 1_100_000)])).error_code == 10
    # unknown partition, invalid acks
    assert produce(client, "errs", 5, encode([(None, b"x")])).error_code == 3
    assert produce(client, "errs", 0, encode([(None, b"x")]), acks=2).error_code == 21
    assert fetch(client, "errs", 0, 0).high_watermark == 0
    # the good one lands at offset 0
    assert produce(client, "errs", 0, encode([(None, b"ok")]), acks=-1).base_offset == 0


def test_acks_zero_sends_no_response(client: RawClient) -> None:
    create_topic(client, "acks0")
    req = ProduceRequest[2](acks=0, timeout_ms=1000, topics=[("acks0", [(0, encode([(None, b"fire")], magic=1))])])
    client.send_no_response(req)
    # the next response on this connection is the fetch's, and the record is there
    p = fetch(client, "acks0", 0, 0, version=4)
    assert [r.value for r in records.decode_records(p.records)] == [b"fire"]


def test_fetch_errors(client: RawClient) -> None:
    create_topic(client, "ferr")
    produce(client, "ferr", 0, encode([(None, b"a")]))
    assert fetch(client, "ferr", 0, 5).error_code == 1
    assert fetch(client, "nope-not-here", 0, 0).error_code == 3
    assert fetch(client, "ferr", 3, 0).error_code == 3
    req = FetchRequest[7].build(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1000, isolation_level=0, session_id=12, session_epoch=3, topics=[], forgotten_topics_data=[])
    assert client.request(req).error_code == 70


def test_fetch_max_bytes_and_first_entry(client: RawClient) -> None:
    create_topic(client, "big")
    for _ in range(3):
        produce(client, "big", 0, encode([(None, b"x" * 5000)]))
    # v3+: at least the first whole batch even if it is over the limit (KIP-74)
    p = fetch(client, "big", 0, 0, version=4, max_bytes=100)
    assert len(records.decode_records(p.records)) == 1
    # v0-2: Kafka 0.8 semantics, a partial message the client must re-fetch bigger, whether
    # the stored format is sent as is or down-converted
    create_topic(client, "big0")
    produce(client, "big0", 0, encode([(None, b"x" * 5000)], magic=0), version=0)
    for topic in ("big", "big0"):
        p = fetch(client, topic, 0, 0, version=0, max_bytes=100)
        assert len(p.records) == 100 and records.decode_records(p.records) == []
        assert records.scan_entries(p.records)[1] == 0


def test_list_offsets_v0_and_v1_plus(client: RawClient) -> None:
    create_topic(client, "lo")
    for i in range(3):
        produce(client, "lo", 0, encode([(None, b"x"), (None, b"y")], ts=10_000 * (i + 1)))

    def lo(version: int, ts: int, n: int = 1) -> object:
        part: dict[str, int] = {"partition": 0, "timestamp": ts}
        if version == 0:
            part["max_num_offsets"] = n
        if version >= 4:
            part["current_leader_epoch"] = -1
        req = ListOffsetsRequest[version].build(replica_id=-1, isolation_level=0, topics=[("lo", [part])])
        return client.request(req).topics[0].partitions[0]

    assert list(lo(0, -1).old_style_offsets) == [6]
    assert list(lo(0, -2).old_style_offsets) == [0]
    assert list(lo(0, -1, 10).old_style_offsets) == [6, 0]
    for v in range(1, 6):
        assert (lo(v, -1).offset, lo(v, -2).offset) == (6, 0)
        r = lo(v, 15_000)
        assert (r.error_code, r.offset, r.timestamp) == (0, 2, 20_000)
        assert lo(v, 99_000).offset == -1
    req = ListOffsetsRequest[1].build(replica_id=-1, topics=[("no-such-topic-lo", [(0, -1)])])
    assert client.request(req).topics[0].partitions[0].error_code == 3


@pytest.mark.parametrize("version", range(5))
def test_create_topics(client: RawClient, broker: EmbeddedBroker, version: int) -> None:
    name = f"created-v{version}"

    def ct(topic: str, n: int, rf: int = 1, validate: bool = False) -> object:
        req = CreateTopicsRequest[version].build(topics=[(topic, n, rf, [], [])], timeout_ms=1000, validate_only=validate)
        return client.request(req).topics[0]

    if version >= 1:
        assert ct(name, 3, validate=True).error_code == 0
        assert not os.path.exists(os.path.join(broker.log_dir, f"{name}-0"))
    assert ct(name, 3).error_code == 0
    assert sorted(p for p in os.listdir(broker.log_dir) if p.startswith(name + "-")) == [f"{name}-{i}" for i in range(3)]
    assert ct(name, 3).error_code == 36
    assert ct(name + "-x", 0).error_code == 37
    assert ct(name + "-y", 1, rf=3).error_code == 38
    md = client.request(MetadataRequest[1](topics=[name])).topics[0]
    assert len(md.partitions) == 3


def _commit(client: RawClient, version: int, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[dict[str, object]]] = {}
    for (t, p), o in offsets.items():
        part: dict[str, object] = {"partition": p, "offset": o, "metadata": f"m{o}"}
        if version == 1:
            part["timestamp"] = -1
        if version >= 6:
            part["committed_leader_epoch"] = -1
        by_topic.setdefault(t, []).append(part)
    req = OffsetCommitRequest[version].build(
        group_id=group, generation_id=-1, member_id="", retention_time_ms=-1, group_instance_id=None,
        topics=[(t, ps) for t, ps in by_topic.items()],
    )
    resp = client.request(req)
    return {(t.topic, p.partition): p.error_code for t in resp.topics for p in t.partitions}


def _fetch_offsets(client: RawClient, version: int, group: str, wanted: dict[str, list[int]] | None) -> tuple[int, dict[tuple[str, int], tuple[int, str, int]]]:
    topics = None if wanted is None else list(wanted.items())
    resp = client.request(OffsetFetchRequest[version].build(group_id=group, topics=topics))
    top = getattr(resp, "error_code", 0)
    return top, {(t.topic, p.partition): (p.offset, p.metadata, p.error_code) for t in resp.topics for p in t.partitions}


def test_offset_commit_fetch_every_version_and_reload(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path / "data")) as b:
        with RawClient(b.host, b.port) as c:
            for v in range(3):
                resp = c.request(FindCoordinatorRequest[v].build(group_id="g", key="g", key_type=0))
                assert (resp.error_code, resp.node_id, resp.port) == (0, 0, b.port)
            for v in range(8):
                group = f"group-{v}"
                assert _commit(c, v, group, {("t", 0): 10 + v, ("t", 1): 20 + v, ("u", 0): 5}) == {("t", 0): 0, ("t", 1): 0, ("u", 0): 0}
                assert _commit(c, v, group, {("t", 0): 11 + v}) == {("t", 0): 0}
            for v in range(6):
                _, got = _fetch_offsets(c, v, "group-3", {"t": [0, 1, 7]})
                assert got == {("t", 0): (14, "m14", 0), ("t", 1): (23, "m23", 0), ("t", 7): (-1, "", 0)}
            top, got = _fetch_offsets(c, 2, "group-5", None)
            assert top == 0 and got == {("t", 0): (16, "m16", 0), ("t", 1): (25, "m25", 0), ("u", 0): (5, "m5", 0)}
            assert os.path.isdir(tmp_path / "data" / "__consumer_offsets-0")
            md = c.request(MetadataRequest[1](topics=["__consumer_offsets"])).topics[0]
            assert md.is_internal
            # clients may not write the internal topic
            assert produce(c, "__consumer_offsets", 0, encode([(None, b"x")])).error_code == 17
        b.stop()
        b.start()
        with RawClient(b.host, b.port) as c:
            for _ in range(200):
                top, got = _fetch_offsets(c, 2, "group-3", {"t": [0]})
                if top != 14:
                    break
            assert top == 0 and got == {("t", 0): (14, "m14", 0)}


def test_offset_fetch_while_loading_says_load_in_progress(broker: EmbeddedBroker) -> None:
    """Before an offsets partition is loaded, its groups answer COORDINATOR_LOAD_IN_PROGRESS."""
    from hmbclient.broker.offset_manager import OffsetManager

    inner = broker.broker
    assert inner.replica_manager is not None
    with RawClient(broker.host, broker.port) as c:  # the offsets topic exists and is led here
        assert c.request(FindCoordinatorRequest[0].build(group_id="loading")).error_code == 0
    om = OffsetManager(0, inner.metadata, inner.replica_manager, inner.apis.topics, broker.config)  # type: ignore[union-attr]
    answers: list[object] = []

    class Channel:
        def send(self, response: object) -> None:
            answers.append(response)

        def close(self, reason: str) -> None:
            raise AssertionError(reason)

    req = OffsetFetchRequest[2].decode(OffsetFetchRequest[2].build(group_id="loading", topics=[("t", [0])]).encode())
    om.start()
    try:
        om.handle_offset_fetch(type("H", (), {"api_version": 2})(), req, Channel())
    finally:
        om.shutdown()
    assert answers[0].error_code == 14  # type: ignore[attr-defined]
    assert isinstance(inner.apis, KafkaApis)
