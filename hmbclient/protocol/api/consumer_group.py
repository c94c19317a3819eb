"""Kafka 4's consumer group protocol (KIP-848): ConsumerGroupHeartbeat (api key 68) v0-1,
flexible only (Kafka's ConsumerGroupHeartbeatRequest/Response JSON).

One request does what JoinGroup, SyncGroup and Heartbeat did: a member joins with
``member_epoch`` 0, heartbeats with the epoch it was last given, leaves with -1 (a static
member leaving for a restart: -2). The fields that did not change since the last heartbeat
are sent null (-1 for ``rebalance_timeout_ms``). Partitions travel by topic id (a Uuid,
KIP-516), never by name:

    request:  group_id, member_id, member_epoch, instance_id?, rack_id?, rebalance_timeout_ms,
              subscribed_topic_names?, server_assignor?, topic_partitions? [topic_id partitions]
    response: throttle_time_ms, error_code, error_message?, member_id?, member_epoch,
              heartbeat_interval_ms, assignment? {topic_partitions [topic_id partitions]}

``assignment`` is a nullable struct (a value of :data:`ASSIGNMENT`, or a dict written as one):
on the wire an int8 marker (-1 null, 1 present) before
the struct (:class:`NullableStruct`); null means "unchanged since the last answer".
v1 adds ``subscribed_topic_regex`` (nullable string) after ``subscribed_topic_names`` (the
version librdkafka 2.16 and Kafka 4's Java consumer send); the response is unchanged.

ConsumerGroupDescribe (api key 69) v0-1, flexible only (Kafka's ConsumerGroupDescribe JSON)::

    request:  group_ids [string], include_authorized_operations
    response: throttle_time_ms, groups [error_code, error_message?, group_id, group_state,
              group_epoch, assignment_epoch, assignor_name, members [member_id, instance_id?,
              rack_id?, member_epoch, client_id, client_host, subscribed_topic_names,
              subscribed_topic_regex?, assignment, target_assignment, member_type (v1+)],
              authorized_operations]
    assignment: topic_partitions [topic_id, topic_name, partitions [int32]]
"""

from __future__ import annotations

from typing import Any

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
    Array,
    Boolean,
    FieldSpec,
    Int8,
    Int16,
    Int32,
    NullableString,
    String,
    Struct,
    Type,
    Uuid,
    flexible_struct,
)

__all__ = [
    "ASSIGNMENT",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "NullableStruct",
]


class NullableStruct(Type):
    """A struct that may be null: an int8 marker (-1 null, 1 present) then the struct, as
    Kafka's generated code writes a ``nullableVersions`` struct field. ``build`` takes a dict."""

    min_size = 1
    default = None

    def __init__(self, inner: Struct) -> None:
        self.inner = inner

    def build(self, **fields: Any) -> Any:
        return self.inner.build(**fields)

    def write(self, out: list[Any], value: Any) -> None:
        if value is None:
            out.append(b"\xff")
            return
        out.append(b"\x01")
        self.inner.write(out, self.inner.build(**value) if isinstance(value, dict) else value)

    def read(self, buf: Any, pos: int) -> tuple[Any, int]:
        if pos >= len(buf):
            raise ProtocolError(f"{self.inner.name}: no null marker left")
        marker = buf[pos]
        if marker == 0xFF:
            return None, pos + 1
        if marker != 1:
            raise ProtocolError(f"{self.inner.name}: null marker {marker} is neither -1 nor 1")
        return self.inner.read(buf, pos + 1)

    def __repr__(self) -> str:
        return f"Nullable({self.inner!r})"


_topic_partitions = Array(("topic_id", Uuid), ("partitions", Array(Int32)), name="topic_partitions")

_req: list[FieldSpec] = [
    ("group_id", String),
    ("member_id", String),
    ("member_epoch", Int32),
    ("instance_id", NullableString),
    ("rack_id", NullableString),
    ("rebalance_timeout_ms", Int32, -1),
    ("subscribed_topic_names", Array(String, nullable=True)),
    ("server_assignor", NullableString),
    ("topic_partitions", Array(("topic_id", Uuid), ("partitions", Array(Int32)), name="topic_partitions", nullable=True)),
]

#: the response's assignment struct (flexible: compact arrays, its own tagged section)
ASSIGNMENT = flexible_struct(Struct("assignment", [("topic_partitions", _topic_partitions)]))

_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("error_code", Int16),
    ("error_message", NullableString),
    ("member_id", NullableString),
    ("member_epoch", Int32),
    ("heartbeat_interval_ms", Int32),
    ("assignment", NullableStruct(ASSIGNMENT)),
]

ConsumerGroupHeartbeatRequest = {}
ConsumerGroupHeartbeatResponse = {}
_req_v1: list[FieldSpec] = [*_req[:7], ("subscribed_topic_regex", NullableString), *_req[7:]]
ConsumerGroupHeartbeatRequest[0], ConsumerGroupHeartbeatResponse[0] = define(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, _req, _resp, flexible=True)
ConsumerGroupHeartbeatRequest[1], ConsumerGroupHeartbeatResponse[1] = define(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, _req_v1, _resp, flexible=True)

# --- ConsumerGroupDescribe (69) ------------------------------------------------------------------
_described_tps = Array(("topic_id", Uuid), ("topic_name", String), ("partitions", Array(Int32)), name="topic_partitions")
_cgd_member: list[FieldSpec] = [
    ("member_id", String),
    ("instance_id", NullableString),
    ("rack_id", NullableString),
    ("member_epoch", Int32),
    ("client_id", String),
    ("client_host", String),
    ("subscribed_topic_names", Array(String)),
    ("subscribed_topic_regex", NullableString),
    ("assignment", Struct("assignment", [("topic_partitions", _described_tps)])),
    ("target_assignment", Struct("target_assignment", [("topic_partitions", _described_tps)])),
]


def _cgd_resp(member: list[FieldSpec]) -> list[FieldSpec]:
    return [
        ("throttle_time_ms", Int32),
        ("groups", Array(
            ("error_code", Int16),
            ("error_message", NullableString),
            ("group_id", String),
            ("group_state", String),
            ("group_epoch", Int32),
            ("assignment_epoch", Int32),
            ("assignor_name", String),
            ("members", Array(*member, name="members")),
            ("authorized_operations", Int32, -(2**31)),
            name="groups",
        )),
    ]


_cgd_req: list[FieldSpec] = [("group_ids", Array(String)), ("include_authorized_operations", Boolean)]
ConsumerGroupDescribeRequest = {}
ConsumerGroupDescribeResponse = {}
ConsumerGroupDescribeRequest[0], ConsumerGroupDescribeResponse[0] = define(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, _cgd_req, _cgd_resp(_cgd_member), flexible=True)
ConsumerGroupDescribeRequest[1], ConsumerGroupDescribeResponse[1] = define(
    ApiKey.CONSUMER_GROUP_DESCRIBE, 1, _cgd_req, _cgd_resp([*_cgd_member, ("member_type", Int8, -1)]), flexible=True
)
