"""Metadata (api key 3), versions 0-12 (v9+ flexible, KIP-482).

Request: v0 topics (empty = all); v1 topics nullable (null = all, empty = none);
v4 + allow_auto_topic_creation; v8 + include_cluster/topic_authorized_operations.
Response: v1 + broker rack, controller_id, topic is_internal; v2 + cluster_id;
v3 + throttle_time_ms; v5 + offline_replicas; v7 + leader_epoch;
v8 + topic_authorized_operations and cluster_authorized_operations.

Flexible versions (Kafka's MetadataRequest/MetadataResponse JSON): request topics are entries
``{topic}`` from v9 (Kafka's model since v0; on the non-flexible wire ``[{name}]`` equals
``[string]``, so v0-8 keep ``Array(String)``) and ``{topic_id, topic}`` from v10 (KIP-516:
asking by id, the name then null); v11 drops include_cluster_authorized_operations. Response
v10 + topic_id per topic (the zero Uuid for a topic asked by name that does not exist); v11
drops cluster_authorized_operations; v12 topic names are nullable (null for an unknown id).
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
    Array,
    Boolean,
    FieldSpec,
    Int16,
    Int32,
    NullableString,
    String,
    Uuid,
)

_KEY = ApiKey.METADATA

_req_v0 = [("topics", Array(String))]
_req_v1 = [("topics", Array(String, nullable=True))]
_req_v4 = [("topics", Array(String, nullable=True)), ("allow_auto_topic_creation", Boolean, True)]
_req_v8 = [*_req_v4, ("include_cluster_authorized_operations", Boolean), ("include_topic_authorized_operations", Boolean)]

_req_v9: list[FieldSpec] = [("topics", Array(("topic", String), name="topics", nullable=True)), *_req_v8[1:]]
_req_v10: list[FieldSpec] = [("topics", Array(("topic_id", Uuid), ("topic", NullableString), name="topics", nullable=True)), *_req_v8[1:]]
_req_v11: list[FieldSpec] = [_req_v10[0], _req_v8[1], _req_v8[3]]

_brokers_v0 = ("brokers", Array(("node_id", Int32), ("host", String), ("port", Int32), name="brokers"))
_brokers_v1 = ("brokers", Array(("node_id", Int32), ("host", String), ("port", Int32), ("rack", NullableString), name="brokers"))

_part_v0 = ("partitions", Array(("error_code", Int16), ("partition", Int32), ("leader", Int32), ("replicas", Array(Int32)), ("isr", Array(Int32)), name="partitions"))
_part_v5 = ("partitions", Array(("error_code", Int16), ("partition", Int32), ("leader", Int32), ("replicas", Array(Int32)), ("isr", Array(Int32)), ("offline_replicas", Array(Int32)), name="partitions"))
_part_v7 = ("partitions", Array(("error_code", Int16), ("partition", Int32), ("leader", Int32), ("leader_epoch", Int32, -1), ("replicas", Array(Int32)), ("isr", Array(Int32)), ("offline_replicas", Array(Int32)), name="partitions"))

_topics_v0 = ("topics", Array(("error_code", Int16), ("topic", String), _part_v0, name="topics"))
_topics_v1 = ("topics", Array(("error_code", Int16), ("topic", String), ("is_internal", Boolean), _part_v0, name="topics"))
_topics_v5 = ("topics", Array(("error_code", Int16), ("topic", String), ("is_internal", Boolean), _part_v5, name="topics"))
_topics_v7 = ("topics", Array(("error_code", Int16), ("topic", String), ("is_internal", Boolean), _part_v7, name="topics"))
_topics_v8 = ("topics", Array(("error_code", Int16), ("topic", String), ("is_internal", Boolean), _part_v7, ("topic_authorized_operations", Int32, -(2**31)), name="topics"))

_topics_v10 = ("topics", Array(("error_code", Int16), ("topic", String), ("topic_id", Uuid), ("is_internal", Boolean), _part_v7, ("topic_authorized_operations", Int32, -(2**31)), name="topics"))
_topics_v12 = ("topics", Array(("error_code", Int16), ("topic", NullableString), ("topic_id", Uuid), ("is_internal", Boolean), _part_v7, ("topic_authorized_operations", Int32, -(2**31)), name="topics"))

_resp_v0 = [_brokers_v0, _topics_v0]
_resp_v1 = [_brokers_v1, ("controller_id", Int32, -1), _topics_v1]
_resp_v2 = [_brokers_v1, ("cluster_id", NullableString), ("controller_id", Int32, -1), _topics_v1]
_resp_v3 = [("throttle_time_ms", Int32), *_resp_v2]
_resp_v5 = [("throttle_time_ms", Int32), _brokers_v1, ("cluster_id", NullableString), ("controller_id", Int32, -1), _topics_v5]
_resp_v7 = [("throttle_time_ms", Int32), _brokers_v1, ("cluster_id", NullableString), ("controller_id", Int32, -1), _topics_v7]
_resp_v8 = [("throttle_time_ms", Int32), _brokers_v1, ("cluster_id", NullableString), ("controller_id", Int32, -1), _topics_v8, ("cluster_authorized_operations", Int32, -(2**31))]

_resp_v10 = [*_resp_v8[:4], _topics_v10, _resp_v8[5]]
_resp_v11 = _resp_v10[:5]
_resp_v12 = [*_resp_v8[:4], _topics_v12]

MetadataRequest = {}
MetadataResponse = {}
for _v, _rq, _rs in (
    (0, _req_v0, _resp_v0),
    (1, _req_v1, _resp_v1),
    (2, _req_v1, _resp_v2),
    (3, _req_v1, _resp_v3),
    (4, _req_v4, _resp_v3),
    (5, _req_v4, _resp_v5),
    (6, _req_v4, _resp_v5),
    (7, _req_v4, _resp_v7),
    (8, _req_v8, _resp_v8),
):
    MetadataRequest[_v], MetadataResponse[_v] = define(_KEY, _v, _rq, _rs)
for _v, _rq, _rs in (
    (9, _req_v9, _resp_v8),
    (10, _req_v10, _resp_v10),
    (11, _req_v11, _resp_v11),
    (12, _req_v11, _resp_v12),
):
    MetadataRequest[_v], MetadataResponse[_v] = define(_KEY, _v, _rq, _rs, flexible=True)
