"""Group offset APIs: OffsetCommit (8) v0-9, OffsetFetch (9) v0-9, FindCoordinator (10) v0-2
(GroupCoordinator in Kafka 0.8.2/0.9 is FindCoordinator v0).

OffsetCommit request: v0 group_id + [topic [partition offset metadata]] (offsets in ZooKeeper
on 0.8.1, in Kafka from 0.8.2); v1 + generation_id, member_id and a per-partition timestamp;
v2 drops the timestamp for a request-wide retention_time_ms (v3, v4 same); v5 drops retention;
v6 + committed_leader_epoch; v7 + group_instance_id. Response: v3 + throttle_time_ms.
OffsetFetch: v2 topics nullable (null = all) and a top-level error_code in the response;
v3 + throttle_time_ms; v5 + committed_leader_epoch per partition.
OffsetCommit v8 is v7 flexible; v9 the same fields, its ``generation_id`` being a consumer-protocol
member's epoch (KIP-848: Kafka 4 refuses older versions from such members; STALE_MEMBER_EPOCH).
OffsetFetch v6 is v5 flexible; v7 + require_stable; v8 asks for several groups at once
(``groups [group_id topics?]``, the answer ``groups [group_id topics error_code]``); v9 + the
asking member's ``member_id`` and ``member_epoch`` per group (checked for consumer-protocol
members). The client sends OffsetFetch up to v5 (``CLIENT_MAX``); the broker serves all.
FindCoordinator: v1 key + key_type (0 group, 1 transaction), response + throttle_time_ms and
error_message.
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
    Array,
    Boolean,
    FieldSpec,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
)


def _topics(*partition_fields: tuple, nullable: bool = False) -> Array:
    return Array(("topic", String), ("partitions", Array(*partition_fields, name="partitions")), nullable=nullable, name="topics")


# --- OffsetCommit ------------------------------------------------------------------------------
_oc_v0 = [("group_id", String), ("topics", _topics(("partition", Int32), ("offset", Int64), ("metadata", NullableString)))]
_oc_v1 = [("group_id", String), ("generation_id", Int32, -1), ("member_id", String), ("topics", _topics(("partition", Int32), ("offset", Int64), ("timestamp", Int64, -1), ("metadata", NullableString)))]
_oc_v2 = [("group_id", String), ("generation_id", Int32, -1), ("member_id", String), ("retention_time_ms", Int64, -1), ("topics", _topics(("partition", Int32), ("offset", Int64), ("metadata", NullableString)))]
_oc_v5 = [("group_id", String), ("generation_id", Int32, -1), ("member_id", String), ("topics", _topics(("partition", Int32), ("offset", Int64), ("metadata", NullableString)))]
_oc_v6 = [("group_id", String), ("generation_id", Int32, -1), ("member_id", String), ("topics", _topics(("partition", Int32), ("offset", Int64), ("committed_leader_epoch", Int32, -1), ("metadata", NullableString)))]
_oc_v7 = [("group_id", String), ("generation_id", Int32, -1), ("member_id", String), ("group_instance_id", NullableString), ("topics", _topics(("partition", Int32), ("offset", Int64), ("committed_leader_epoch", Int32, -1), ("metadata", NullableString)))]
_ocr_v0 = [("topics", _topics(("partition", Int32), ("error_code", Int16)))]
_ocr_v3 = [("throttle_time_ms", Int32), *_ocr_v0]

OffsetCommitRequest = {}
OffsetCommitResponse = {}
for _v, _rq, _rs in (
    (0, _oc_v0, _ocr_v0),
    (1, _oc_v1, _ocr_v0),
    (2, _oc_v2, _ocr_v0),
    (3, _oc_v2, _ocr_v3),
    (4, _oc_v2, _ocr_v3),
    (5, _oc_v5, _ocr_v3),
    (6, _oc_v6, _ocr_v3),
    (7, _oc_v7, _ocr_v3),
):
    OffsetCommitRequest[_v], OffsetCommitResponse[_v] = define(ApiKey.OFFSET_COMMIT, _v, _rq, _rs)
for _v in (8, 9):
    OffsetCommitRequest[_v], OffsetCommitResponse[_v] = define(ApiKey.OFFSET_COMMIT, _v, _oc_v7, _ocr_v3, flexible=True)

# --- OffsetFetch -------------------------------------------------------------------------------
_of_v0 = [("group_id", String), ("topics", Array(("topic", String), ("partitions", Array(Int32)), name="topics"))]
_of_v2 = [("group_id", String), ("topics", Array(("topic", String), ("partitions", Array(Int32)), nullable=True, name="topics"))]
_ofp_v0 = (("partition", Int32), ("offset", Int64), ("metadata", NullableString), ("error_code", Int16))
_ofp_v5 = (("partition", Int32), ("offset", Int64), ("committed_leader_epoch", Int32, -1), ("metadata", NullableString), ("error_code", Int16))
_ofr_v0 = [("topics", _topics(*_ofp_v0))]
_ofr_v2 = [("topics", _topics(*_ofp_v0)), ("error_code", Int16)]
_ofr_v3 = [("throttle_time_ms", Int32), ("topics", _topics(*_ofp_v0)), ("error_code", Int16)]
_ofr_v5 = [("throttle_time_ms", Int32), ("topics", _topics(*_ofp_v5)), ("error_code", Int16)]

OffsetFetchRequest = {}
OffsetFetchResponse = {}
for _v, _rq, _rs in (
    (0, _of_v0, _ofr_v0),
    (1, _of_v0, _ofr_v0),
    (2, _of_v2, _ofr_v2),
    (3, _of_v2, _ofr_v3),
    (4, _of_v2, _ofr_v3),
    (5, _of_v2, _ofr_v5),
):
    OffsetFetchRequest[_v], OffsetFetchResponse[_v] = define(ApiKey.OFFSET_FETCH, _v, _rq, _rs)
_of_v7 = [*_of_v2, ("require_stable", Boolean)]
_of_topics = Array(("topic", String), ("partitions", Array(Int32)), nullable=True, name="topics")
_of_v8 = [("groups", Array(("group_id", String), ("topics", _of_topics), name="groups")), ("require_stable", Boolean)]
_of_v9 = [
    ("groups", Array(("group_id", String), ("member_id", NullableString), ("member_epoch", Int32, -1), ("topics", _of_topics), name="groups")),
    ("require_stable", Boolean),
]
_ofr_v8 = [("throttle_time_ms", Int32), ("groups", Array(("group_id", String), ("topics", _topics(*_ofp_v5)), ("error_code", Int16), name="groups"))]
for _v, _rq, _rs in ((6, _of_v2, _ofr_v5), (7, _of_v7, _ofr_v5), (8, _of_v8, _ofr_v8), (9, _of_v9, _ofr_v8)):
    OffsetFetchRequest[_v], OffsetFetchResponse[_v] = define(ApiKey.OFFSET_FETCH, _v, _rq, _rs, flexible=True)

# --- FindCoordinator (GroupCoordinator v0) ---------------------------------------------------------
_fc_v0: list[FieldSpec] = [("group_id", String)]
_fc_v1 = [("key", String), ("key_type", Int8)]
_fcr_v0: list[FieldSpec] = [("error_code", Int16), ("node_id", Int32), ("host", String), ("port", Int32)]
_fcr_v1 = [("throttle_time_ms", Int32), ("error_code", Int16), ("error_message", NullableString), ("node_id", Int32), ("host", String), ("port", Int32)]

FindCoordinatorRequest = {}
FindCoordinatorResponse = {}
for _v, _rq, _rs in ((0, _fc_v0, _fcr_v0), (1, _fc_v1, _fcr_v1), (2, _fc_v1, _fcr_v1)):
    FindCoordinatorRequest[_v], FindCoordinatorResponse[_v] = define(ApiKey.FIND_COORDINATOR, _v, _rq, _rs)

GroupCoordinatorRequest = FindCoordinatorRequest[0]
GroupCoordinatorResponse = FindCoordinatorResponse[0]
