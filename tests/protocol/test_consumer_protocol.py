"""The "consumer" embedded protocol (JoinGroup metadata, SyncGroup assignment) against
kafka-python 3.0.12's ConsumerProtocolSubscription / ConsumerProtocolAssignment, which are
generated from Kafka's JSON schemas: for v0-1 the bytes are identical both ways (fixed samples
and random values), newer versions (v2-v3: generation_id, rack_id) decode with the fields we
know, and malformed bytes are a ProtocolError. Round-trips and fuzzing of these classes run in
test_api_roundtrip.py and test_fuzz.py with the API classes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupResponse,
    decode_member_assignment,
    decode_member_metadata,
)
from hmbclient.protocol.api.consumer_protocol import PROTOCOL_TYPE

_TP = st.tuples(st.text(max_size=12), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4))


def _kp_tp(kp_cls: Any, version: int, field: str, items: list[tuple[str, list[int]]]) -> list[Any]:
    (f,) = [x for x in kp_cls._struct.untagged_fields(version) if x.name == field]
    return [f.data_class(topic=t, partitions=list(ps)) for t, ps in items]


def _subscription_to_kp(version: int, topics: list[str], user_data: bytes | None, owned: list[tuple[str, list[int]]]) -> bytes:
    fields: dict[str, Any] = {"topics": topics, "user_data": user_data}
    if version >= 1:
        fields["owned_partitions"] = _kp_tp(KpSubscription, version, "owned_partitions", owned)
    return bytes(KpSubscription(version=version, **fields).encode(version=version))


def _assignment_to_kp(version: int, assigned: list[tuple[str, list[int]]], user_data: bytes | None) -> bytes:
    parts = _kp_tp(KpAssignment, version, "assigned_partitions", assigned)
    return bytes(KpAssignment(version=version, assigned_partitions=parts, user_data=user_data).encode(version=version))


def _tps(xs: Any) -> list[tuple[str, list[int]]]:
    return [(x.topic, list(x.partitions)) for x in xs]


def check_subscription(version: int, topics: list[str], user_data: bytes | None, owned: list[tuple[str, list[int]]]) -> None:
    fields: dict[str, Any] = {"topics": topics, "user_data": user_data}
    if version >= 1:
        fields["owned_partitions"] = owned
    ours = ConsumerProtocolMemberMetadata[version](**fields)
    data = ours.encode()
    theirs = _subscription_to_kp(version, topics, user_data, owned)
    assert data == theirs
    # ours -> kafka-python
    kp = KpSubscription.decode(data)
    assert (kp.version, list(kp.topics), kp.user_data) == (version, topics, user_data)
    if version >= 1:
        assert _tps(kp.owned_partitions) == owned
    # kafka-python -> ours
    got = decode_member_metadata(theirs)
    assert type(got) is ConsumerProtocolMemberMetadata[version]
    assert (got.version, got.topics, got.user_data) == (version, topics, user_data)
    if version >= 1:
        assert _tps(got.owned_partitions) == owned


def check_assignment(version: int, assigned: list[tuple[str, list[int]]], user_data: bytes | None) -> None:
    ours = ConsumerProtocolMemberAssignment[version](assigned_partitions=assigned, user_data=user_data)
    data = ours.encode()
    theirs = _assignment_to_kp(version, assigned, user_data)
    assert data == theirs
    kp = KpAssignment.decode(data)
    assert (kp.version, _tps(kp.assigned_partitions), kp.user_data) == (version, assigned, user_data)
    got = decode_member_assignment(theirs)
    assert type(got) is ConsumerProtocolMemberAssignment[version]
    assert (got.version, _tps(got.assigned_partitions), got.user_data) == (version, assigned, user_data)


@pytest.mark.parametrize("version", [0, 1])
def test_subscription_matches_kafka_python(version: int) -> None:
    check_subscription(version, ["events", "tópic-✓"], b"\x00assignor\xff", [("events", [0, 5]), ("t", [])])
    check_subscription(version, [], None, [])
    check_subscription(version, ["x" * 300], b"", [("x" * 300, [2**31 - 1, -(2**31)])])


@pytest.mark.parametrize("version", [0, 1])
def test_assignment_matches_kafka_python(version: int) -> None:
    check_assignment(version, [("events", [0, 1, 2]), ("tópic-✓", [7])], b"ud")
    check_assignment(version, [], None)


@pytest.mark.parametrize("version", [0, 1])
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    topics=st.lists(st.text(max_size=12), max_size=3),
    user_data=st.one_of(st.none(), st.binary(max_size=16)),
    tps=st.lists(_TP, max_size=3),
)
def test_random_values_match_kafka_python(version: int, topics: list[str], user_data: bytes | None, tps: list[tuple[str, list[int]]]) -> None:
    check_subscription(version, topics, user_data, tps)
    check_assignment(version, tps, user_data)


def test_newer_versions_decode_with_the_fields_we_know() -> None:
    """A v3 subscription (v2 generation_id, v3 rack_id) written by kafka-python reads as our v3;
    a version above ours reads with the fields we know; the value keeps the member's version."""
    data = bytes(
        KpSubscription(
            version=3,
            topics=["events"],
            user_data=b"u",
            owned_partitions=_kp_tp(KpSubscription, 3, "owned_partitions", [("events", [3])]),
            generation_id=9,
            rack_id="rack-a",
        ).encode(version=3)
    )
    got = decode_member_metadata(data)
    assert type(got) is ConsumerProtocolMemberMetadata[3]
    assert (got.version, got.topics, got.user_data, _tps(got.owned_partitions), got.generation_id, got.rack_id) == (3, ["events"], b"u", [("events", [3])], 9, "rack-a")
    # the same bytes are not a valid v1 on their own: the class decode stays exact
    with pytest.raises(ProtocolError):
        ConsumerProtocolMemberMetadata[1].decode(data)
    # a version above ours (4, with a field appended) reads as our v3
    newer = b"\x00\x04" + data[2:] + b"\x00\x00\x00\x07"
    got = decode_member_metadata(newer)
    assert type(got) is ConsumerProtocolMemberMetadata[3] and (got.version, got.generation_id) == (4, 9)

    assign = _assignment_to_kp(3, [("events", [1])], None)
    got_a = decode_member_assignment(assign)
    assert (got_a.version, _tps(got_a.assigned_partitions), got_a.user_data) == (3, [("events", [1])], None)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\xff\xff" + b"\x00" * 12, b"\x80\x00", b"\x00\x01\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00\x00"],
)
def test_malformed_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_member_metadata(data)
    with pytest.raises(ProtocolError):
        decode_member_assignment(data)


def test_inside_join_and_sync_group() -> None:
    """The leader reads every member's subscription out of JoinGroup; each member reads its
    share out of SyncGroup, both through the group APIs' opaque bytes."""
    meta = ConsumerProtocolMemberMetadata[1](topics=["events"], owned_partitions=[("events", [0])])
    req = JoinGroupRequest[5](group_id="g", session_timeout_ms=10000, member_id="", protocol_type=PROTOCOL_TYPE, protocols=[("range", meta.encode())])
    assert JoinGroupRequest[5].decode(req.encode()).protocols[0].metadata == meta.encode()
    resp = JoinGroupResponse[5](generation_id=1, protocol_name="range", leader="m1", member_id="m1", members=[("m1", None, meta.encode())])
    (member,) = JoinGroupResponse[5].decode(resp.encode()).members
    assert decode_member_metadata(member.metadata).topics == ["events"]
    assignment = ConsumerProtocolMemberAssignment[0](assigned_partitions=[("events", [0, 1])])
    sync = SyncGroupResponse[3].decode(SyncGroupResponse[3](assignment=assignment.encode()).encode())
    assert _tps(decode_member_assignment(sync.assignment).assigned_partitions) == [("events", [0, 1])]
