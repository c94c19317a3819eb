"""The codec pieces of Kafka 4's consumer group protocol (KIP-848): the Uuid type (KIP-516),
Metadata v9-12 (flexible; topic ids from v10) and ConsumerGroupHeartbeat v0 (api key 68).

Metadata v9-12 are checked both ways and byte for byte against kafka-python 3.0.12, whose
generated code follows Kafka's JSON schemas. kafka-python has no ConsumerGroupHeartbeat class
(only the api key), so its bytes are written here by hand from Kafka's
ConsumerGroupHeartbeatRequest/Response JSON (compact strings are length+1 varints, compact
arrays count+1, null = 0, a nullable struct an int8 marker, every struct a tagged section).
"""

from __future__ import annotations

import uuid
from typing import Any

import kafka.protocol.consumer as kp_consumer
import kafka.protocol.metadata as kp_metadata
import pytest

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import (
    ApiKey,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from hmbclient.protocol.api.consumer_group import ASSIGNMENT
from hmbclient.protocol.types import ZERO_UUID, Uuid
from tests.protocol.test_api_golden import NAMES, from_kp, plain, to_kp

TID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
TID2 = uuid.UUID(int=2**128 - 1)


def test_uuid_is_sixteen_bytes_most_significant_first() -> None:
    assert Uuid.encode(TID) == TID.bytes and len(Uuid.encode(TID)) == 16
    assert Uuid.read(b"\x00" + TID.bytes, 1) == (TID, 17)
    assert Uuid.encode(TID.bytes) == TID.bytes  # the raw 16 bytes are taken too
    assert Uuid.default == ZERO_UUID == uuid.UUID(int=0)
    with pytest.raises(ProtocolError, match="need 16 bytes"):
        Uuid.read(TID.bytes[:15], 0)
    for bad in ("6ba7b810", 7, b"short", None):
        with pytest.raises(ProtocolError, match="Uuid: cannot encode"):
            Uuid.encode(bad)


_REQ_NAMES = {"topics.topic": "name"}

_META_REQS: list[tuple[int, dict[str, Any]]] = [
    (9, {"topics": [{"topic": "events"}, {"topic": "tópic-✓"}], "allow_auto_topic_creation": False, "include_topic_authorized_operations": True}),
    (9, {"topics": None}),
    (10, {"topics": [{"topic": "events", "topic_id": ZERO_UUID}, {"topic": None, "topic_id": TID}], "include_cluster_authorized_operations": True}),
    (11, {"topics": [{"topic": "x" * 249}], "allow_auto_topic_creation": True}),
    (12, {"topics": [{"topic": None, "topic_id": TID2}]}),
    (12, {"topics": []}),
]


def _meta_resp(v: int) -> dict[str, Any]:
    part = {"error_code": 0, "partition": 3, "leader": 1, "leader_epoch": 7, "replicas": [1, 2, 3], "isr": [1, 2], "offline_replicas": [3]}
    return {
        "throttle_time_ms": 5,
        "brokers": [{"node_id": 1, "host": "h1", "port": 9092, "rack": None}, {"node_id": 2, "host": "hé", "port": 1, "rack": "r"}],
        "cluster_id": "cluster-✓",
        "controller_id": 2,
        "topics": [
            {"error_code": 0, "topic": "events", "topic_id": TID, "is_internal": False, "partitions": [part, {**part, "partition": 0}], "topic_authorized_operations": 0x0F},
            {"error_code": 100, "topic": None if v >= 12 else "", "topic_id": TID2, "is_internal": False, "partitions": []},
        ],
        "cluster_authorized_operations": -(2**31),
    }


_CASES = [(MetadataRequest, kp_metadata.MetadataRequest, v, f, _REQ_NAMES) for v, f in _META_REQS] + [
    (MetadataResponse, kp_metadata.MetadataResponse, v, _meta_resp(v), NAMES[(ApiKey.METADATA, "response")]) for v in (9, 10, 11, 12)
]


@pytest.mark.parametrize("case", _CASES, ids=lambda c: f"{c[0][c[2]].__name__}-{len(str(c[3]))}")
def test_flexible_metadata_matches_kafka_python(case: tuple[Any, Any, int, dict[str, Any], dict[str, str]]) -> None:
    ours_by_v, kp_by_v, v, fields, names = case
    ours, kp = ours_by_v[v], kp_by_v[v]
    assert ours.FLEXIBLE and kp.flexible_version_q(v)
    value = ours.build(**fields)
    kp_fields = kp._struct.untagged_fields(v)
    data = ours(*value).encode()
    kp_data = bytes(kp(**to_kp(ours.SCHEMA, kp_fields, value, v, names)).encode())
    assert data == kp_data
    assert plain(ours.SCHEMA, ours.decode(kp_data)) == plain(ours.SCHEMA, value)
    # kafka-python reads the zero Uuid as None
    assert _zero(plain(ours.SCHEMA, from_kp(ours.SCHEMA, kp_fields, kp.decode(data), v, names))) == _zero(plain(ours.SCHEMA, value))


def _zero(x: Any) -> Any:
    if isinstance(x, list | tuple):
        return type(x)(_zero(e) for e in x)
    return None if x == ZERO_UUID else x


def test_metadata_versions_drop_and_add_fields_as_kafka() -> None:
    """v10 adds topic ids; v11 drops the cluster's authorized operations (both directions);
    v12 lets a response topic name be null."""
    assert "topic_id" not in MetadataResponse[9].nested("topics").names
    assert "topic_id" in MetadataResponse[10].nested("topics").names
    assert "cluster_authorized_operations" in MetadataResponse[10].SCHEMA.names
    assert "cluster_authorized_operations" not in MetadataResponse[11].SCHEMA.names
    assert "include_cluster_authorized_operations" not in MetadataRequest[11].SCHEMA.names
    with pytest.raises(ProtocolError):
        MetadataResponse[11].build(topics=[{"topic": None}]).encode()
    got = MetadataResponse[12].decode(MetadataResponse[12].build(topics=[{"error_code": 100, "topic": None, "topic_id": TID}]).encode())
    assert (got.topics[0].topic, got.topics[0].topic_id) == (None, TID)


# --- ConsumerGroupHeartbeat v0: hand-written bytes from Kafka's JSON --------------------------


def _cs(s: str | None) -> bytes:
    """A compact (nullable) string."""
    if s is None:
        return b"\x00"
    b = s.encode()
    assert len(b) < 127
    return bytes([len(b) + 1]) + b


JOIN = (
    _cs("g1")  # group_id
    + _cs("")  # member_id (empty to join)
    + b"\x00\x00\x00\x00"  # member_epoch 0
    + _cs(None)  # instance_id
    + _cs("rack-a")  # rack_id
    + b"\x00\x00\xea\x60"  # rebalance_timeout_ms 60000
    + b"\x03" + _cs("a") + _cs("b")  # subscribed_topic_names: 2 entries
    + _cs("uniform")  # server_assignor
    + b"\x01"  # topic_partitions: empty (count+1 = 1)
    + b"\x00"  # tagged fields
)

HEARTBEAT = (
    _cs("g1") + _cs("m-1") + b"\x00\x00\x00\x05" + _cs(None) + _cs(None) + b"\xff\xff\xff\xff"
    + b"\x00"  # subscribed_topic_names null (unchanged)
    + _cs(None)
    + b"\x02" + TID.bytes + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + b"\x00"  # one topic, partitions [0, 2], its tags
    + b"\x00"
)

ANSWER = (
    b"\x00\x00\x00\x00"  # throttle_time_ms
    + b"\x00\x00"  # error_code
    + _cs(None)  # error_message
    + _cs("m-1")  # member_id
    + b"\x00\x00\x00\x05"  # member_epoch
    + b"\x00\x00\x13\x88"  # heartbeat_interval_ms 5000
    + b"\x01"  # assignment present
    + b"\x02" + TID.bytes + b"\x02" + b"\x00\x00\x00\x01" + b"\x00"  # [topic_id [1]]
    + b"\x00"  # the assignment's tags
    + b"\x00"
)

FENCED = b"\x00\x00\x00\x00" + b"\x00\x6e" + _cs("fenced") + _cs(None) + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00" + b"\xff" + b"\x00"


@pytest.mark.parametrize(
    ("cls", "fields", "wire"),
    [
        (
            ConsumerGroupHeartbeatRequest[0],
            {"group_id": "g1", "member_id": "", "member_epoch": 0, "rack_id": "rack-a", "rebalance_timeout_ms": 60000,
             "subscribed_topic_names": ["a", "b"], "server_assignor": "uniform", "topic_partitions": []},
            JOIN,
        ),
        (ConsumerGroupHeartbeatRequest[0], {"group_id": "g1", "member_id": "m-1", "member_epoch": 5, "topic_partitions": [{"topic_id": TID, "partitions": [0, 2]}]}, HEARTBEAT),
        (
            ConsumerGroupHeartbeatResponse[0],
            {"member_id": "m-1", "member_epoch": 5, "heartbeat_interval_ms": 5000, "assignment": ASSIGNMENT.build(topic_partitions=[{"topic_id": TID, "partitions": [1]}])},
            ANSWER,
        ),
        (ConsumerGroupHeartbeatResponse[0], {"error_code": 110, "error_message": "fenced", "member_epoch": -1}, FENCED),
    ],
    ids=["join", "heartbeat", "answer", "fenced"],
)
def test_consumer_group_heartbeat_bytes(cls: Any, fields: dict[str, Any], wire: bytes) -> None:
    assert cls.API_KEY == ApiKey.CONSUMER_GROUP_HEARTBEAT == 68 and cls.FLEXIBLE
    value = cls.build(**fields)
    assert value.encode() == wire
    assert cls.decode(wire) == cls.decode(value.encode())
    assert plain(cls.SCHEMA, cls.decode(wire)) == plain(cls.SCHEMA, value)


def test_heartbeat_v1_adds_the_topic_regex() -> None:
    """v1 (what librdkafka 2.16 sends): subscribed_topic_regex after the topic names."""
    fields = {"group_id": "g1", "member_id": "", "member_epoch": 0, "rack_id": "rack-a", "rebalance_timeout_ms": 60000,
              "subscribed_topic_names": ["a", "b"], "server_assignor": "uniform", "topic_partitions": []}
    split = JOIN.index(_cs("uniform"))
    assert ConsumerGroupHeartbeatRequest[1].build(**fields).encode() == JOIN[:split] + _cs(None) + JOIN[split:]
    with_regex = ConsumerGroupHeartbeatRequest[1].build(**fields, subscribed_topic_regex="ev.*")
    assert with_regex.encode() == JOIN[:split] + _cs("ev.*") + JOIN[split:]
    assert ConsumerGroupHeartbeatRequest[1].decode(with_regex.encode()).subscribed_topic_regex == "ev.*"


def test_heartbeat_defaults_are_kafkas() -> None:
    """Unchanged fields default to null / -1, so a steady heartbeat sends only what it must."""
    req = ConsumerGroupHeartbeatRequest[0].build(group_id="g", member_id="m", member_epoch=3)
    assert (req.instance_id, req.rack_id, req.rebalance_timeout_ms, req.subscribed_topic_names, req.server_assignor, req.topic_partitions) == (
        None, None, -1, None, None, None
    )
    assert ConsumerGroupHeartbeatResponse[0].build().assignment is None
    # a dict for the assignment is written as its struct
    as_dict = ConsumerGroupHeartbeatResponse[0].build(member_id="m-1", member_epoch=5, heartbeat_interval_ms=5000, assignment={"topic_partitions": [{"topic_id": TID, "partitions": [1]}]})
    assert as_dict.encode() == ANSWER


def test_bad_assignment_marker_is_a_protocol_error() -> None:
    bad = ANSWER.replace(b"\x13\x88\x01", b"\x13\x88\x07", 1)
    with pytest.raises(ProtocolError, match="null marker 7"):
        ConsumerGroupHeartbeatResponse[0].decode(bad)
    with pytest.raises(ProtocolError):
        ConsumerGroupHeartbeatResponse[0].decode(ANSWER[:-20])


def test_client_keeps_metadata_v8_until_it_needs_topic_ids() -> None:
    """The broker serves v12; our client picks v8 (CLIENT_MAX), other APIs their highest."""
    from hmbclient.net.versions import pick_versions

    assert pick_versions([(ApiKey.METADATA, 0, 12), (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)]) == {ApiKey.METADATA: 8, ApiKey.CONSUMER_GROUP_HEARTBEAT: 1}
    assert pick_versions([(ApiKey.METADATA, 0, 5)]) == {ApiKey.METADATA: 5}


# -- OffsetCommit v8-9, OffsetFetch v6-9 (flexible; v9s carry member epochs) ------------------------

_OC = {"group_id": "g", "generation_id": 7, "member_id": "m-✓", "group_instance_id": None,
       "topics": [{"topic": "events", "partitions": [{"partition": 2, "offset": 99, "committed_leader_epoch": -1, "metadata": ""}]}]}
_OF_PART = {"partition": 2, "offset": 99, "committed_leader_epoch": -1, "metadata": "", "error_code": 0}
_OFFSET_CASES = [
    (OffsetCommitRequest, kp_consumer.OffsetCommitRequest, v, _OC, NAMES[(ApiKey.OFFSET_COMMIT, "request")]) for v in (8, 9)
] + [
    (OffsetCommitResponse, kp_consumer.OffsetCommitResponse, v, {"throttle_time_ms": 1, "topics": [{"topic": "events", "partitions": [{"partition": 2, "error_code": 113}]}]},
     NAMES[(ApiKey.OFFSET_COMMIT, "response")]) for v in (8, 9)
] + [
    (OffsetFetchRequest, kp_consumer.OffsetFetchRequest, 6, {"group_id": "g", "topics": None}, NAMES[(ApiKey.OFFSET_FETCH, "request")]),
    (OffsetFetchRequest, kp_consumer.OffsetFetchRequest, 7, {"group_id": "g", "topics": [{"topic": "events", "partitions": [0, 1]}], "require_stable": True},
     NAMES[(ApiKey.OFFSET_FETCH, "request")]),
    (OffsetFetchResponse, kp_consumer.OffsetFetchResponse, 7, {"throttle_time_ms": 0, "topics": [{"topic": "events", "partitions": [_OF_PART]}], "error_code": 0},
     NAMES[(ApiKey.OFFSET_FETCH, "response")]),
    (OffsetFetchRequest, kp_consumer.OffsetFetchRequest, 8, {"groups": [{"group_id": "g", "topics": None}, {"group_id": "h", "topics": [{"topic": "events", "partitions": [3]}]}],
                                                            "require_stable": False},
     {"groups.topics.topic": "name", "groups.topics.partitions": "partition_indexes"}),
    (OffsetFetchRequest, kp_consumer.OffsetFetchRequest, 9, {"groups": [{"group_id": "g", "member_id": "m", "member_epoch": 4, "topics": None}], "require_stable": True},
     {"groups.topics.topic": "name", "groups.topics.partitions": "partition_indexes"}),
    (OffsetFetchResponse, kp_consumer.OffsetFetchResponse, 9, {"throttle_time_ms": 0, "groups": [{"group_id": "g", "topics": [{"topic": "events", "partitions": [_OF_PART]}], "error_code": 113}]},
     {"groups.topics.topic": "name", "groups.topics.partitions": "partitions", "groups.topics.partitions.partition": "partition_index",
      "groups.topics.partitions.offset": "committed_offset"}),
]


@pytest.mark.parametrize("case", _OFFSET_CASES, ids=lambda c: f"{c[0][c[2]].__name__}")
def test_flexible_offset_versions_match_kafka_python(case: tuple[Any, Any, int, dict[str, Any], dict[str, str]]) -> None:
    ours_by_v, kp_by_v, v, fields, names = case
    ours, kp = ours_by_v[v], kp_by_v[v]
    assert ours.FLEXIBLE and kp.flexible_version_q(v)
    value = ours.build(**fields)
    kp_fields = kp._struct.untagged_fields(v)
    data = ours(*value).encode()
    assert data == bytes(kp(**to_kp(ours.SCHEMA, kp_fields, value, v, names)).encode())
    assert plain(ours.SCHEMA, ours.decode(data)) == plain(ours.SCHEMA, value)


# -- ConsumerGroupDescribe (69) v0-1, bytes by hand from Kafka's JSON (flexible only) -----------------

DESCRIBE = b"\x02" + _cs("g1") + b"\x01" + b"\x00"  # group_ids ["g1"], include_authorized_operations, tags


def _described(v: int) -> bytes:
    tps = b"\x02" + TID.bytes + _cs("t") + b"\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x02" + b"\x00"  # [id name [0, 2]]
    member = (
        _cs("m-1") + _cs(None) + _cs("rack") + b"\x00\x00\x00\x07" + _cs("cid") + _cs("/h")
        + b"\x02" + _cs("t")  # subscribed_topic_names
        + _cs(None)  # subscribed_topic_regex
        + tps + b"\x00"  # assignment and its tags
        + b"\x01" + b"\x00"  # target_assignment: no topics, its tags
        + (b"\x01" if v >= 1 else b"")  # member_type (v1+): consumer
        + b"\x00"
    )
    return (
        b"\x00\x00\x00\x00"  # throttle_time_ms
        + b"\x02"  # one group
        + b"\x00\x00" + _cs(None) + _cs("g1") + _cs("Stable") + b"\x00\x00\x00\x07" + b"\x00\x00\x00\x07" + _cs("uniform")
        + b"\x02" + member
        + b"\x80\x00\x00\x00"  # authorized_operations: none asked
        + b"\x00"  # the group's tags
        + b"\x00"
    )


@pytest.mark.parametrize("v", [0, 1])
def test_consumer_group_describe_bytes(v: int) -> None:
    req = ConsumerGroupDescribeRequest[v]
    assert req.API_KEY == ApiKey.CONSUMER_GROUP_DESCRIBE == 69 and req.FLEXIBLE
    assert req.build(group_ids=["g1"], include_authorized_operations=True).encode() == DESCRIBE
    resp = ConsumerGroupDescribeResponse[v]
    value = resp.build(throttle_time_ms=0, groups=[{
        "error_code": 0, "group_id": "g1", "group_state": "Stable", "group_epoch": 7, "assignment_epoch": 7, "assignor_name": "uniform",
        "members": [{"member_id": "m-1", "rack_id": "rack", "member_epoch": 7, "client_id": "cid", "client_host": "/h", "subscribed_topic_names": ["t"],
                     "assignment": {"topic_partitions": [{"topic_id": TID, "topic_name": "t", "partitions": [0, 2]}]},
                     "target_assignment": {"topic_partitions": []}, "member_type": 1}],
    }])
    assert value.encode() == _described(v)
    assert plain(resp.SCHEMA, resp.decode(_described(v))) == plain(resp.SCHEMA, value)
