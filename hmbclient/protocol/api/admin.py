"""ApiVersions (18) v0-2, CreateTopics (19) v0-4 and InitProducerId (22) v0-1 (all non-flexible).

ApiVersions: empty request; response error_code + [api_key min_version max_version], v1 adds
throttle_time_ms (v2 same). A broker answering a version it does not know replies in the v0
layout with UNSUPPORTED_VERSION (35) and its ranges, so the client can retry lower (KIP-511).
CreateTopics: v1 + validate_only in the request and error_message in the response;
v2 + throttle_time_ms; v3, v4 same.
InitProducerId: transactional_id + transaction_timeout_ms -> producer id and epoch. Idempotent
clients (kafka-python 3 by default) ask for it before producing; v1 is v0 re-versioned.
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
