"""Fetch (api key 1), versions 0-10 (non-flexible).

Request changes: v3 + max_bytes; v4 + isolation_level; v5 + log_start_offset per partition;
v7 + session_id/session_epoch and forgotten_topics_data (incremental fetch sessions, KIP-227);
v9 + current_leader_epoch per partition. v1, v2, v6, v8, v10 repeat the previous request.
Response changes: v1 + throttle_time_ms; v4 + last_stable_offset and aborted_transactions;
v5 + log_start_offset; v7 + top-level error_code and session_id.
``records`` decodes as a zero-copy memoryview (MessageSet v0/v1 or RecordBatch v2 bytes).
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import Array, Int8, Int16, Int32, Int64, Records, String

_KEY = ApiKey.FETCH


def _topics(*partition_fields: tuple) -> Array:
    return Array(("topic", String), ("partitions", Array(*partition_fields, name="partitions")), name="topics")


_p_v0 = (("partition", Int32), ("fetch_offset", Int64), ("partition_max_bytes", Int32))
_p_v5 = (("partition", Int32), ("fetch_offset", Int64), ("log_start_offset", Int64, -1), ("partition_max_bytes", Int32))
_p_v9 = (("partition", Int32), ("current_leader_epoch", Int32, -1), ("fetch_offset", Int64), ("log_start_offset", Int64, -1), ("partition_max_bytes", Int32))
_forgotten = ("forgotten_topics_data", Array(("topic", String), ("partitions", Array(Int32)), name="forgotten"))

_req_v0 = [("replica_id", Int32, -1), ("max_wait_ms", Int32), ("min_bytes", Int32), ("topics", _topics(*_p_v0))]
_req_v3 = [("replica_id", Int32, -1), ("max_wait_ms", Int32), ("min_bytes", Int32), ("max_bytes", Int32, 0x7FFFFFFF), ("topics", _topics(*_p_v0))]
_req_v4 = [("replica_id", Int32, -1), ("max_wait_ms", Int32), ("min_bytes", Int32), ("max_bytes", Int32, 0x7FFFFFFF), ("isolation_level", Int8), ("topics", _topics(*_p_v0))]
_req_v5 = [("replica_id", Int32, -1), ("max_wait_ms", Int32), ("min_bytes", Int32), ("max_bytes", Int32, 0x7FFFFFFF), ("isolation_level", Int8), ("topics", _topics(*_p_v5))]
_req_v7 = [("replica_id", Int32, -1), ("max_wait_ms", Int32), ("min_bytes", Int32), ("max_bytes", Int32, 0x7FFFFFFF), ("isolation_level", Int8), ("session_id", Int32), ("session_epoch", Int32, -1), ("topics", _topics(*_p_v5)), _forgotten]
_req_v9 = [("replica_id", Int32, -1), ("max_wait_ms", Int32), ("min_bytes", Int32), ("max_bytes", Int32, 0x7FFFFFFF), ("isolation_level", Int8), ("session_id", Int32), ("session_epoch", Int32, -1), ("topics", _topics(*_p_v9)), _forgotten]

_aborted = ("aborted_transactions", Array(("producer_id", Int64), ("first_offset", Int64), nullable=True, name="aborted"))
_rp_v0 = (("partition", Int32), ("error_code", Int16), ("high_watermark", Int64), ("records", Records))
_rp_v4 = (("partition", Int32), ("error_code", Int16), ("high_watermark", Int64), ("last_stable_offset", Int64, -1), _aborted, ("records", Records))
_rp_v5 = (("partition", Int32), ("error_code", Int16), ("high_watermark", Int64), ("last_stable_offset", Int64, -1), ("log_start_offset", Int64, -1), _aborted, ("records", Records))

_resp_v0 = [("topics", _topics(*_rp_v0))]
_resp_v1 = [("throttle_time_ms", Int32), ("topics", _topics(*_rp_v0))]
_resp_v4 = [("throttle_time_ms", Int32), ("topics", _topics(*_rp_v4))]
_resp_v5 = [("throttle_time_ms", Int32), ("topics", _topics(*_rp_v5))]
_resp_v7 = [("throttle_time_ms", Int32), ("error_code", Int16), ("session_id", Int32), ("topics", _topics(*_rp_v5))]

FetchRequest = {}
FetchResponse = {}
for _v, _rq, _rs in (
    (0, _req_v0, _resp_v0),
    (1, _req_v0, _resp_v1),
    (2, _req_v0, _resp_v1),
    (3, _req_v3, _resp_v1),
    (4, _req_v4, _resp_v4),
    (5, _req_v5, _resp_v5),
    (6, _req_v5, _resp_v5),
    (7, _req_v7, _resp_v7),
    (8, _req_v7, _resp_v7),
    (9, _req_v9, _resp_v7),
    (10, _req_v9, _resp_v7),
):
    FetchRequest[_v], FetchResponse[_v] = define(_KEY, _v, _rq, _rs)
