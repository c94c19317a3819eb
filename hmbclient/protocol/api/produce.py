"""Produce (api key 0), versions 0-7 (non-flexible).

v0: acks, timeout, [topic [partition records]] -> [topic [partition error base_offset]]
v1: + throttle_time_ms in the response (same request)
v2: + log_append_time in the response partitions (request: records may be MessageSet v1)
v3: + transactional_id (nullable) first in the request; records must be RecordBatch v2
v4: same as v3 (KAFKA-5793: broker may return KAFKA_STORAGE_ERROR)
v5: + log_start_offset in the response partitions
v6: same as v5;  v7: same as v6 (ZStandard allowed)
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import Array, Int16, Int32, Int64, NullableString, Records, String

_KEY = ApiKey.PRODUCE

_topics_req = Array(("topic", String), ("partitions", Array(("partition", Int32), ("records", Records), name="partitions")), name="topics")
_req_v0 = [("acks", Int16), ("timeout_ms", Int32), ("topics", _topics_req)]
_req_v3 = [("transactional_id", NullableString), *_req_v0]

_resp_v0 = [("topics", Array(("topic", String), ("partitions", Array(("partition", Int32), ("error_code", Int16), ("base_offset", Int64), name="partitions")), name="topics"))]
_resp_v1 = [*_resp_v0, ("throttle_time_ms", Int32)]
_resp_v2 = [("topics", Array(("topic", String), ("partitions", Array(("partition", Int32), ("error_code", Int16), ("base_offset", Int64), ("log_append_time", Int64, -1), name="partitions")), name="topics")), ("throttle_time_ms", Int32)]
_resp_v5 = [("topics", Array(("topic", String), ("partitions", Array(("partition", Int32), ("error_code", Int16), ("base_offset", Int64), ("log_append_time", Int64, -1), ("log_start_offset", Int64, -1), name="partitions")), name="topics")), ("throttle_time_ms", Int32)]

ProduceRequest = {}
ProduceResponse = {}
for _v, _rq, _rs in (
    (0, _req_v0, _resp_v0),
    (1, _req_v0, _resp_v1),
    (2, _req_v0, _resp_v2),
    (3, _req_v3, _resp_v2),
    (4, _req_v3, _resp_v2),
    (5, _req_v3, _resp_v5),
    (6, _req_v3, _resp_v5),
    (7, _req_v3, _resp_v5),
):
    ProduceRequest[_v], ProduceResponse[_v] = define(_KEY, _v, _rq, _rs)
