"""ApiVersions (18) v0-2, CreateTopics (19) v0-4, InitProducerId (22) v0-1 and the admin APIs
of Kafka's AdminClient: DeleteTopics (20) v0-3, DeleteRecords (21) v0-2 (v2 flexible, the
same fields), DescribeLogDirs (35) v1, CreatePartitions (37) v0-1, ElectLeaders (43) v0-1 and
OffsetDelete (47) v0.

ApiVersions: empty request; response error_code + [api_key min_version max_version], v1 adds
throttle_time_ms (v2 same). A broker answering a version it does not know replies in the v0
layout with UNSUPPORTED_VERSION (35) and its ranges, so the client can retry lower (KIP-511).
CreateTopics: v1 + validate_only in the request and error_message in the response;
v2 + throttle_time_ms; v3, v4 same.
InitProducerId: transactional_id + transaction_timeout_ms -> producer id and epoch. Idempotent
clients (kafka-python 3 by default) ask for it before producing; v1 is v0 re-versioned.
DeleteTopics: [name], timeout_ms -> [name, error_code]; v1+ throttle_time_ms first; v2, v3 same.
DeleteRecords: [topic [partition, offset (-1: the high watermark)]], timeout_ms -> [topic
[partition, low_watermark, error_code]]. DescribeLogDirs v1 (v0 is gone from Kafka 4 clients,
KIP-896): topics (null: all) -> [error_code, log_dir, [topic [partition, size, offset_lag,
is_future_key]]]. CreatePartitions: [topic, count, assignments (null: the broker chooses) of
the NEW partitions only], timeout_ms, validate_only -> [topic, error_code, error_message].
ElectLeaders: v1 adds election_type (0 preferred, 1 unclean) in front and a top-level
error_code; topic_partitions null means every partition. OffsetDelete: group_id, [topic
[partition]] -> error_code, [topic [partition, error_code]].
DescribeCluster (60) v0-1, flexible only (KIP-482 headers): include_cluster_authorized_operations
(v1 + endpoint_type, 1 = brokers) -> throttle_time_ms, error_code, error_message, (v1
endpoint_type), cluster_id, controller_id, [broker_id, host, port, rack],
cluster_authorized_operations.
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

_av_resp_v0 = [("error_code", Int16), ("api_keys", Array(("api_key", Int16), ("min_version", Int16), ("max_version", Int16), name="api_keys"))]
_av_resp_v1 = [*_av_resp_v0, ("throttle_time_ms", Int32)]

ApiVersionsRequest = {}
ApiVersionsResponse = {}
for _v, _rs in ((0, _av_resp_v0), (1, _av_resp_v1), (2, _av_resp_v1)):
    ApiVersionsRequest[_v], ApiVersionsResponse[_v] = define(ApiKey.API_VERSIONS, _v, [], _rs)

_ct_topic = Array(
    ("topic", String),
    ("num_partitions", Int32),
    ("replication_factor", Int16),
    ("assignments", Array(("partition", Int32), ("broker_ids", Array(Int32)), name="assignments")),
    ("configs", Array(("name", String), ("value", NullableString), name="configs")),
    name="topics",
)
_ct_v0: list[FieldSpec] = [("topics", _ct_topic), ("timeout_ms", Int32, 60000)]
_ct_v1 = [*_ct_v0, ("validate_only", Boolean)]
_ctr_v0: list[FieldSpec] = [("topics", Array(("topic", String), ("error_code", Int16), name="topics"))]
_ctr_v1: list[FieldSpec] = [("topics", Array(("topic", String), ("error_code", Int16), ("error_message", NullableString), name="topics"))]
_ctr_v2 = [("throttle_time_ms", Int32), *_ctr_v1]

CreateTopicsRequest = {}
CreateTopicsResponse = {}
for _v, _rq, _rs in ((0, _ct_v0, _ctr_v0), (1, _ct_v1, _ctr_v1), (2, _ct_v1, _ctr_v2), (3, _ct_v1, _ctr_v2), (4, _ct_v1, _ctr_v2)):
    CreateTopicsRequest[_v], CreateTopicsResponse[_v] = define(ApiKey.CREATE_TOPICS, _v, _rq, _rs)

_ip_req = [("transactional_id", NullableString), ("transaction_timeout_ms", Int32)]
_ip_resp = [("throttle_time_ms", Int32), ("error_code", Int16), ("producer_id", Int64, -1), ("producer_epoch", Int16)]

InitProducerIdRequest = {}
InitProducerIdResponse = {}
for _v in (0, 1):
    InitProducerIdRequest[_v], InitProducerIdResponse[_v] = define(ApiKey.INIT_PRODUCER_ID, _v, _ip_req, _ip_resp)

# InitProducerId v3 (KIP-360: the current producer id and epoch ask for an epoch bump), for an
# idempotent producer only. v2+ are flexible versions (KIP-482), which the codec does not speak
# yet, so this one layout is written with fixed types: the request header's and the body's
# empty tagged-field sections are one zero byte each, and a null compact string (the
# transactional id) is one zero byte; the response header v1 likewise ends in one zero byte.
# Not registered: nothing advertises or picks it; the producer sends it when the broker's
# probed range includes v3 (Tansu answers v0-1 without a producer id as an error; Kafka 2.5+
# bumps the epoch with it). A broker that sends tagged fields here fails the decode loudly.
InitProducerIdV3Request, InitProducerIdV3Response = define(
    ApiKey.INIT_PRODUCER_ID,
    3,
    [
        ("header_tagged_fields", Int8, 0),
        ("transactional_id_null", Int8, 0),
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64, -1),
        ("producer_epoch", Int16, -1),
        ("tagged_fields", Int8, 0),
    ],
    [
        ("header_tagged_fields", Int8, 0),
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64, -1),
        ("producer_epoch", Int16),
        ("tagged_fields", Int8, 0),
    ],
    register=False,
)

_dt_req: list[FieldSpec] = [("topic_names", Array(String)), ("timeout_ms", Int32)]
_dt_resp_v0: list[FieldSpec] = [("responses", Array(("name", String), ("error_code", Int16), name="responses"))]
_dt_resp_v1: list[FieldSpec] = [("throttle_time_ms", Int32), *_dt_resp_v0]

DeleteTopicsRequest = {}
DeleteTopicsResponse = {}
for _v, _rs in ((0, _dt_resp_v0), (1, _dt_resp_v1), (2, _dt_resp_v1), (3, _dt_resp_v1)):
    DeleteTopicsRequest[_v], DeleteTopicsResponse[_v] = define(ApiKey.DELETE_TOPICS, _v, _dt_req, _rs)

_dr_req: list[FieldSpec] = [
    ("topics", Array(("name", String), ("partitions", Array(("partition_index", Int32), ("offset", Int64), name="partitions")), name="topics")),
    ("timeout_ms", Int32),
]
_dr_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("topics", Array(("name", String), ("partitions", Array(
        ("partition_index", Int32), ("low_watermark", Int64), ("error_code", Int16), name="partitions")), name="topics")),
]
DeleteRecordsRequest = {}
DeleteRecordsResponse = {}
for _v in (0, 1, 2):
    DeleteRecordsRequest[_v], DeleteRecordsResponse[_v] = define(ApiKey.DELETE_RECORDS, _v, _dr_req, _dr_resp, flexible=_v >= 2)

_dld_req: list[FieldSpec] = [("topics", Array(("topic", String), ("partitions", Array(Int32)), name="topics", nullable=True))]
_dld_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("results", Array(("error_code", Int16), ("log_dir", String), ("topics", Array(
        ("name", String), ("partitions", Array(
            ("partition_index", Int32), ("partition_size", Int64), ("offset_lag", Int64), ("is_future_key", Boolean),
            name="partitions")), name="topics")), name="results")),
]
DescribeLogDirsRequest = {}
DescribeLogDirsResponse = {}
DescribeLogDirsRequest[1], DescribeLogDirsResponse[1] = define(ApiKey.DESCRIBE_LOG_DIRS, 1, _dld_req, _dld_resp)

_cp_req: list[FieldSpec] = [
    ("topics", Array(("name", String), ("count", Int32),
                     ("assignments", Array(("broker_ids", Array(Int32)), name="assignments", nullable=True)), name="topics")),
    ("timeout_ms", Int32),
    ("validate_only", Boolean),
]
_cp_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("results", Array(("name", String), ("error_code", Int16), ("error_message", NullableString), name="results")),
]
CreatePartitionsRequest = {}
CreatePartitionsResponse = {}
for _v in (0, 1):
    CreatePartitionsRequest[_v], CreatePartitionsResponse[_v] = define(ApiKey.CREATE_PARTITIONS, _v, _cp_req, _cp_resp)

_el_parts = ("topic_partitions", Array(("topic", String), ("partitions", Array(Int32)), name="topic_partitions", nullable=True))
_el_req_v0: list[FieldSpec] = [_el_parts, ("timeout_ms", Int32, 60000)]
_el_req_v1: list[FieldSpec] = [("election_type", Int8), _el_parts, ("timeout_ms", Int32, 60000)]
_el_results = ("replica_election_results", Array(("topic", String), ("partition_result", Array(
    ("partition_id", Int32), ("error_code", Int16), ("error_message", NullableString), name="partition_result")),
    name="replica_election_results"))
_el_resp_v0: list[FieldSpec] = [("throttle_time_ms", Int32), _el_results]
_el_resp_v1: list[FieldSpec] = [("throttle_time_ms", Int32), ("error_code", Int16), _el_results]
ElectLeadersRequest = {}
ElectLeadersResponse = {}
ElectLeadersRequest[0], ElectLeadersResponse[0] = define(ApiKey.ELECT_LEADERS, 0, _el_req_v0, _el_resp_v0)
ElectLeadersRequest[1], ElectLeadersResponse[1] = define(ApiKey.ELECT_LEADERS, 1, _el_req_v1, _el_resp_v1)

_od_req: list[FieldSpec] = [
    ("group_id", String),
    ("topics", Array(("name", String), ("partitions", Array(("partition_index", Int32), name="partitions")), name="topics")),
]
_od_resp: list[FieldSpec] = [
    ("error_code", Int16),
    ("throttle_time_ms", Int32),
    ("topics", Array(("name", String), ("partitions", Array(("partition_index", Int32), ("error_code", Int16), name="partitions")), name="topics")),
]
OffsetDeleteRequest = {}
OffsetDeleteResponse = {}
OffsetDeleteRequest[0], OffsetDeleteResponse[0] = define(ApiKey.OFFSET_DELETE, 0, _od_req, _od_resp)

_dc_brokers = ("brokers", Array(("broker_id", Int32), ("host", String), ("port", Int32), ("rack", NullableString), name="brokers"))
_dcl_req_v0: list[FieldSpec] = [("include_cluster_authorized_operations", Boolean)]
_dcl_req_v1: list[FieldSpec] = [*_dcl_req_v0, ("endpoint_type", Int8, 1)]
_dcl_resp_v0: list[FieldSpec] = [
    ("throttle_time_ms", Int32), ("error_code", Int16), ("error_message", NullableString), ("cluster_id", String),
    ("controller_id", Int32, -1), _dc_brokers, ("cluster_authorized_operations", Int32, -(2**31)),
]
_dcl_resp_v1: list[FieldSpec] = [
    ("throttle_time_ms", Int32), ("error_code", Int16), ("error_message", NullableString), ("endpoint_type", Int8, 1),
    ("cluster_id", String), ("controller_id", Int32, -1), _dc_brokers, ("cluster_authorized_operations", Int32, -(2**31)),
]
DescribeClusterRequest = {}
DescribeClusterResponse = {}
for _v, _rq, _rs in ((0, _dcl_req_v0, _dcl_resp_v0), (1, _dcl_req_v1, _dcl_resp_v1)):
    DescribeClusterRequest[_v], DescribeClusterResponse[_v] = define(ApiKey.DESCRIBE_CLUSTER, _v, _rq, _rs, flexible=True)
