"""Hand-made byte vectors for the (API, version) pairs kafka-python does not implement: the
inter-broker APIs LeaderAndIsr v0-1, StopReplica v0, UpdateMetadata v0-5 and ControlledShutdown
v1-2 (test_api_golden.py lists them as ``NO_PEER``).

Each vector is written field by field with ``struct.pack`` from the layout of Kafka's JSON
message schemas (int16-length strings, int32-count arrays, big-endian integers), never through
our own types, so a field missing, moved or of the wrong width in our schema fails here. For
every vector, both ways: our encoding equals the bytes, and the bytes decode to the value.
Finally every registered pair is checked to have either a vector here or a kafka-python peer.
"""

from __future__ import annotations

import importlib
import struct
from typing import Any

import pytest

from hmbclient import errors
from hmbclient.protocol.api import REQUESTS, RESPONSES, ApiKey, Response
from hmbclient.protocol.api.consumer_group import (
    ASSIGNMENT,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    NullableStruct,
)
from hmbclient.protocol.types import Array, Struct, Type
from tests.protocol import test_kip848_protocol as kip848

# --- the layout, by hand --------------------------------------------------------------------


def i8(x: int) -> bytes:
    return struct.pack(">b", x)


def i16(x: int) -> bytes:
    return struct.pack(">h", x)


def i32(x: int) -> bytes:
    return struct.pack(">i", x)


def i64(x: int) -> bytes:
    return struct.pack(">q", x)


def boolean(x: bool) -> bytes:
    return b"\x01" if x else b"\x00"


def string(x: str | None) -> bytes:
    if x is None:
        return b"\xff\xff"
    data = x.encode("utf-8")
    return i16(len(data)) + data


def array(items: list[Any], enc: Any) -> bytes:
    return i32(len(items)) + b"".join(enc(x) for x in items)


def int32s(xs: list[int]) -> bytes:
    return array(xs, i32)


NOT_LEADER = errors.NotLeaderForPartitionError.errno
STALE_CONTROLLER = errors.StaleControllerEpochError.errno
STORAGE = errors.KafkaStorageErrorError.errno

# --- LeaderAndIsr ---------------------------------------------------------------------------
# One partition state (v0): topic, partition, controller_epoch, leader, leader_epoch, isr,
# zk_version, replicas. A partition led by broker 2, ISR [2, 3], replicas [2, 3, 1].
_STATE = ("events", 4, 7, 2, 5, [2, 3], 11, [2, 3, 1])
_STATE_BYTES = string("events") + i32(4) + i32(7) + i32(2) + i32(5) + int32s([2, 3]) + i32(11) + int32s([2, 3, 1])
_STATE2 = ("tópic-✓", 0, 7, 3, 0, [3], 0, [3])
_STATE2_BYTES = string("tópic-✓") + i32(0) + i32(7) + i32(3) + i32(0) + int32s([3]) + i32(0) + int32s([3])
_LEADERS = [(2, "broker-2.local", 9092), (3, "10.0.0.3", 19093)]
_LEADERS_BYTES = array(_LEADERS, lambda b: i32(b[0]) + string(b[1]) + i32(b[2]))

_LAI_RESP = (STALE_CONTROLLER, [("events", 4, 0), ("events", 5, NOT_LEADER), ("x", 0, STORAGE)])
_LAI_RESP_BYTES = i16(STALE_CONTROLLER) + array(_LAI_RESP[1], lambda p: string(p[0]) + i32(p[1]) + i16(p[2]))

# --- UpdateMetadata -------------------------------------------------------------------------
_UM_HEAD = i32(1) + i32(7)  # controller_id, controller_epoch
_UM_STATES_V0 = array([0, 1], lambda i: (_STATE_BYTES, _STATE2_BYTES)[i])
_UM_STATES_V4 = i32(2) + _STATE_BYTES + int32s([1]) + _STATE2_BYTES + int32s([])
# v0: one host and port per broker
_UM_BROKERS_V0 = i32(2) + i32(2) + string("b2") + i32(9092) + i32(3) + string("b3") + i32(9093)
# v1: endpoints [port, host, security_protocol]; v2 + rack; v3 + listener per endpoint
_EP1 = i32(9092) + string("b2") + i16(0)
_EP2 = i32(9093) + string("b2") + i16(1)
_UM_BROKERS_V1 = i32(1) + i32(2) + i32(2) + _EP1 + _EP2
_UM_BROKERS_V2 = i32(2) + i32(2) + i32(2) + _EP1 + _EP2 + string("rack-a") + i32(3) + i32(0) + string(None)
_EP1_V3 = i32(9092) + string("b2") + string("PLAINTEXT") + i16(0)
_EP2_V3 = i32(9093) + string("b2") + string("SSL") + i16(1)
_UM_BROKERS_V3 = i32(1) + i32(2) + i32(2) + _EP1_V3 + _EP2_V3 + string("rack-a")
_UM_TOPICS_V5 = (
    i32(2)
    + string("events") + i32(2)
    + i32(4) + i32(7) + i32(2) + i32(5) + int32s([2, 3]) + i32(11) + int32s([2, 3, 1]) + int32s([1])
    + i32(5) + i32(7) + i32(3) + i32(1) + int32s([3]) + i32(12) + int32s([3, 2]) + int32s([])
    + string("empty") + i32(0)
)  # fmt: skip

_EP_V1 = [(9092, "b2", 0), (9093, "b2", 1)]
_EP_V3 = [(9092, "b2", "PLAINTEXT", 0), (9093, "b2", "SSL", 1)]

# (class, value in field order, bytes)
VECTORS: list[tuple[Any, tuple[Any, ...], bytes]] = [
    (
        REQUESTS[(ApiKey.LEADER_AND_ISR, 0)],
        (1, 7, [_STATE, _STATE2], _LEADERS),
        i32(1) + i32(7) + i32(2) + _STATE_BYTES + _STATE2_BYTES + _LEADERS_BYTES,
    ),
    (
        REQUESTS[(ApiKey.LEADER_AND_ISR, 1)],
        (1, 7, [(*_STATE, True), (*_STATE2, False)], _LEADERS),
        i32(1) + i32(7) + i32(2) + _STATE_BYTES + boolean(True) + _STATE2_BYTES + boolean(False) + _LEADERS_BYTES,
    ),
    (RESPONSES[(ApiKey.LEADER_AND_ISR, 0)], _LAI_RESP, _LAI_RESP_BYTES),
    (RESPONSES[(ApiKey.LEADER_AND_ISR, 1)], _LAI_RESP, _LAI_RESP_BYTES),
    (
        REQUESTS[(ApiKey.STOP_REPLICA, 0)],
        (1, 7, True, [("events", 4), ("events", 5)]),
        i32(1) + i32(7) + boolean(True) + i32(2) + string("events") + i32(4) + string("events") + i32(5),
    ),
    (
        RESPONSES[(ApiKey.STOP_REPLICA, 0)],
        (0, [("events", 4, 0), ("events", 5, STORAGE)]),
        i16(0) + i32(2) + string("events") + i32(4) + i16(0) + string("events") + i32(5) + i16(STORAGE),
    ),
    (
        REQUESTS[(ApiKey.UPDATE_METADATA, 0)],
        (1, 7, [_STATE, _STATE2], [(2, "b2", 9092), (3, "b3", 9093)]),
        _UM_HEAD + _UM_STATES_V0 + _UM_BROKERS_V0,
    ),
    (
        REQUESTS[(ApiKey.UPDATE_METADATA, 1)],
        (1, 7, [_STATE, _STATE2], [(2, _EP_V1)]),
        _UM_HEAD + _UM_STATES_V0 + _UM_BROKERS_V1,
    ),
    (
        REQUESTS[(ApiKey.UPDATE_METADATA, 2)],
        (1, 7, [_STATE, _STATE2], [(2, _EP_V1, "rack-a"), (3, [], None)]),
        _UM_HEAD + _UM_STATES_V0 + _UM_BROKERS_V2,
    ),
    (
        REQUESTS[(ApiKey.UPDATE_METADATA, 3)],
        (1, 7, [_STATE, _STATE2], [(2, _EP_V3, "rack-a")]),
        _UM_HEAD + _UM_STATES_V0 + _UM_BROKERS_V3,
    ),
    (
        REQUESTS[(ApiKey.UPDATE_METADATA, 4)],
        (1, 7, [(*_STATE, [1]), (*_STATE2, [])], [(2, _EP_V3, "rack-a")]),
        _UM_HEAD + _UM_STATES_V4 + _UM_BROKERS_V3,
    ),
    (
        REQUESTS[(ApiKey.UPDATE_METADATA, 5)],
        (
            1,
            7,
            2**40 + 3,
            [("events", [(4, 7, 2, 5, [2, 3], 11, [2, 3, 1], [1]), (5, 7, 3, 1, [3], 12, [3, 2], [])]), ("empty", [])],
            [(2, _EP_V3, "rack-a")],
        ),
        _UM_HEAD + i64(2**40 + 3) + _UM_TOPICS_V5 + _UM_BROKERS_V3,
    ),
    *[(RESPONSES[(ApiKey.UPDATE_METADATA, v)], (STALE_CONTROLLER,), i16(STALE_CONTROLLER)) for v in range(6)],
    (REQUESTS[(ApiKey.CONTROLLED_SHUTDOWN, 1)], (3,), i32(3)),
    (REQUESTS[(ApiKey.CONTROLLED_SHUTDOWN, 2)], (3, 2**33), i32(3) + i64(2**33)),
    *[
        (
            RESPONSES[(ApiKey.CONTROLLED_SHUTDOWN, v)],
            (0, [("events", 4), ("tópic", 0)]),
            i16(0) + i32(2) + string("events") + i32(4) + string("tópic") + i32(0),
        )
        for v in (1, 2)
    ],
]


# ConsumerGroupHeartbeat (68, KIP-848; kafka-python has no class for it): the hand-written
# bytes of tests/protocol/test_kip848_protocol.py, v0 and v1 (v1 adds the topic regex, null here).
_JOIN_FIELDS = {"group_id": "g1", "member_id": "", "member_epoch": 0, "rack_id": "rack-a", "rebalance_timeout_ms": 60000,
                "subscribed_topic_names": ["a", "b"], "server_assignor": "uniform", "topic_partitions": []}
_SPLIT = kip848.JOIN.index(kip848._cs("uniform"))
_ANSWER_FIELDS = {"member_id": "m-1", "member_epoch": 5, "heartbeat_interval_ms": 5000,
                  "assignment": ASSIGNMENT.build(topic_partitions=[{"topic_id": kip848.TID, "partitions": [1]}])}
VECTORS += [
    (ConsumerGroupHeartbeatRequest[0], tuple(ConsumerGroupHeartbeatRequest[0].build(**_JOIN_FIELDS)), kip848.JOIN),
    (ConsumerGroupHeartbeatRequest[1], tuple(ConsumerGroupHeartbeatRequest[1].build(**_JOIN_FIELDS)),
     kip848.JOIN[:_SPLIT] + kip848._cs(None) + kip848.JOIN[_SPLIT:]),
    *[(ConsumerGroupHeartbeatResponse[v], tuple(ConsumerGroupHeartbeatResponse[v].build(**_ANSWER_FIELDS)), kip848.ANSWER)
      for v in (0, 1)],
]


# ConsumerGroupDescribe (69): the hand-written bytes of tests/protocol/test_kip848_protocol.py.
_DESCRIBED = {"error_code": 0, "group_id": "g1", "group_state": "Stable", "group_epoch": 7, "assignment_epoch": 7, "assignor_name": "uniform",
              "members": [{"member_id": "m-1", "rack_id": "rack", "member_epoch": 7, "client_id": "cid", "client_host": "/h",
                           "subscribed_topic_names": ["t"],
                           "assignment": {"topic_partitions": [{"topic_id": kip848.TID, "topic_name": "t", "partitions": [0, 2]}]},
                           "target_assignment": {"topic_partitions": []}, "member_type": 1}]}
VECTORS += [
    *[(ConsumerGroupDescribeRequest[v], tuple(ConsumerGroupDescribeRequest[v].build(group_ids=["g1"], include_authorized_operations=True)),
       kip848.DESCRIBE) for v in (0, 1)],
    *[(ConsumerGroupDescribeResponse[v], tuple(ConsumerGroupDescribeResponse[v].build(throttle_time_ms=0, groups=[_DESCRIBED])),
       kip848._described(v)) for v in (0, 1)],
]


def plain(t: Type, x: Any) -> Any:
    """Namedtuples and tuples -> tuples, arrays -> lists, so decoded and written values compare."""
    if isinstance(t, NullableStruct):
        return None if x is None else plain(t.inner, x)
    if isinstance(t, Struct):
        return tuple(plain(ft, fx) for (_n, ft), fx in zip(t.fields, x, strict=True))
    if isinstance(t, Array):
        return None if x is None else [plain(t.item, e) for e in x]
    return x


def _id(vec: tuple[Any, tuple[Any, ...], bytes]) -> str:
    return vec[0].__name__


@pytest.mark.parametrize("vec", VECTORS, ids=_id)
def test_vector_both_ways(vec: tuple[Any, tuple[Any, ...], bytes]) -> None:
    cls, value, data = vec
    assert cls(*value).encode() == data
    got = cls.decode(data)
    assert type(got) is cls
    assert plain(cls.SCHEMA, got) == plain(cls.SCHEMA, value)


def test_vectors_cover_every_pair_without_a_kafka_python_peer() -> None:
    """Each registered request/response has a vector here or a class in kafka-python (checked
    by test_api_golden.py), and every vector's pair has no kafka-python class."""
    kp_modules = [importlib.import_module(f"kafka.protocol.{m}") for m in ("admin", "consumer", "metadata", "producer", "sasl")]

    def has_peer(k: int) -> bool:
        name = "".join(p.capitalize() for p in ApiKey(k).name.split("_"))
        return any(hasattr(m, name + "Request") for m in kp_modules)

    vectored = {(c.API_KEY, c.API_VERSION, issubclass(c, Response)) for c, _v, _b in VECTORS}
    for (k, v), req in REQUESTS.items():
        if has_peer(k):
            assert (k, v, False) not in vectored
            continue
        assert (k, v, False) in vectored, f"{req.__name__}: no kafka-python peer and no vector"
        assert (k, v, True) in vectored, f"{RESPONSES[(k, v)].__name__}: no kafka-python peer and no vector"


def test_leader_and_isr_defaults() -> None:
    """Kafka's defaults for fields left out: is_new false, arrays empty; UpdateMetadata v5's
    broker_epoch and ControlledShutdown v2's broker_epoch -1 (not known)."""
    state = REQUESTS[(ApiKey.LEADER_AND_ISR, 1)].SCHEMA.field("ungrouped_partition_states").item.values(topic="t")
    assert state.is_new is False and state.isr == () and state.leader_epoch == 0
    assert REQUESTS[(ApiKey.UPDATE_METADATA, 5)]().broker_epoch == -1
    assert REQUESTS[(ApiKey.CONTROLLED_SHUTDOWN, 2)](broker_id=1).broker_epoch == -1
    assert REQUESTS[(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3)]().replica_id == -2


def test_controlled_shutdown_v0_is_not_implemented() -> None:
    """v0's request header has no client_id, which our frame codec cannot express."""
    assert (ApiKey.CONTROLLED_SHUTDOWN, 0) not in REQUESTS
