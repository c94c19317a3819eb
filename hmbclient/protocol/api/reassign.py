"""AlterPartitionReassignments (45) v0-1 and ListPartitionReassignments (46) v0, flexible
only (KIP-455; KIP-482 headers).

AlterPartitionReassignments: timeout_ms, (v1 allow_replication_factor_change, default true),
[topic [partition, replicas (null: cancel the partition's reassignment)]] -> throttle_time_ms,
(v1 allow_replication_factor_change), error_code, error_message, [topic [partition,
error_code, error_message]].
ListPartitionReassignments: timeout_ms, topics (null: every ongoing reassignment) [topic
[partition]] -> throttle_time_ms, error_code, error_message, [topic [partition, replicas,
adding_replicas, removing_replicas]] (only partitions being reassigned are listed).
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import Array, Boolean, FieldSpec, Int16, Int32, NullableString, String

__all__ = [
    "AlterPartitionReassignmentsRequest",
    "AlterPartitionReassignmentsResponse",
    "ListPartitionReassignmentsRequest",
    "ListPartitionReassignmentsResponse",
]

_apr_topics = ("topics", Array(("name", String), ("partitions", Array(
    ("partition_index", Int32), ("replicas", Array(Int32, nullable=True)), name="partitions")), name="topics"))
_apr_req_v0: list[FieldSpec] = [("timeout_ms", Int32, 60000), _apr_topics]
_apr_req_v1: list[FieldSpec] = [("timeout_ms", Int32, 60000), ("allow_replication_factor_change", Boolean, True), _apr_topics]
_apr_responses = ("responses", Array(("name", String), ("partitions", Array(
    ("partition_index", Int32), ("error_code", Int16), ("error_message", NullableString), name="partitions")), name="responses"))
_apr_resp_v0: list[FieldSpec] = [("throttle_time_ms", Int32), ("error_code", Int16), ("error_message", NullableString), _apr_responses]
_apr_resp_v1: list[FieldSpec] = [("throttle_time_ms", Int32), ("allow_replication_factor_change", Boolean, True), ("error_code", Int16),
                                 ("error_message", NullableString), _apr_responses]

AlterPartitionReassignmentsRequest = {}
AlterPartitionReassignmentsResponse = {}
for _v, _rq, _rs in ((0, _apr_req_v0, _apr_resp_v0), (1, _apr_req_v1, _apr_resp_v1)):
    AlterPartitionReassignmentsRequest[_v], AlterPartitionReassignmentsResponse[_v] = define(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, _v, _rq, _rs, flexible=True)

_lpr_req: list[FieldSpec] = [
    ("timeout_ms", Int32, 60000),
    ("topics", Array(("name", String), ("partition_indexes", Array(Int32)), name="topics", nullable=True)),
]
_lpr_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32), ("error_code", Int16), ("error_message", NullableString),
    ("topics", Array(("name", String), ("partitions", Array(
        ("partition_index", Int32), ("replicas", Array(Int32)), ("adding_replicas", Array(Int32)), ("removing_replicas", Array(Int32)),
        name="partitions")), name="topics")),
]
ListPartitionReassignmentsRequest = {}
ListPartitionReassignmentsResponse = {}
ListPartitionReassignmentsRequest[0], ListPartitionReassignmentsResponse[0] = define(
    ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, _lpr_req, _lpr_resp, flexible=True)
