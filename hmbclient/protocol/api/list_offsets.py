"""ListOffsets, called Offsets in Kafka 0.8 (api key 2), versions 0-5 (non-flexible).

v0: per partition (timestamp, max_num_offsets) -> a descending list ``old_style_offsets``
    (the 0.8 ``getOffsetsBefore``; timestamp -1 = latest, -2 = earliest).
v1: per partition timestamp -> one (timestamp, offset).
v2: + isolation_level in the request, + throttle_time_ms in the response; v3 = v2.
v4: + current_leader_epoch per request partition, + leader_epoch per response partition; v5 = v4.
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import Array, Int8, Int16, Int32, Int64, String

_KEY = ApiKey.LIST_OFFSETS

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


def _topics(*partition_fields: tuple) -> Array:
    return Array(("topic", String), ("partitions", Array(*partition_fields, name="partitions")), name="topics")


_req_v0 = [("replica_id", Int32, -1), ("topics", _topics(("partition", Int32), ("timestamp", Int64), ("max_num_offsets", Int32, 1)))]
_req_v1 = [("replica_id", Int32, -1), ("topics", _topics(("partition", Int32), ("timestamp", Int64)))]
_req_v2 = [("replica_id", Int32, -1), ("isolation_level", Int8), ("topics", _topics(("partition", Int32), ("timestamp", Int64)))]
_req_v4 = [("replica_id", Int32, -1), ("isolation_level", Int8), ("topics", _topics(("partition", Int32), ("current_leader_epoch", Int32, -1), ("timestamp", Int64)))]

_resp_v0 = [("topics", _topics(("partition", Int32), ("error_code", Int16), ("old_style_offsets", Array(Int64))))]
_resp_v1 = [("topics", _topics(("partition", Int32), ("error_code", Int16), ("timestamp", Int64, -1), ("offset", Int64, -1)))]
_resp_v2 = [("throttle_time_ms", Int32), ("topics", _topics(("partition", Int32), ("error_code", Int16), ("timestamp", Int64, -1), ("offset", Int64, -1)))]
_resp_v4 = [("throttle_time_ms", Int32), ("topics", _topics(("partition", Int32), ("error_code", Int16), ("timestamp", Int64, -1), ("offset", Int64, -1), ("leader_epoch", Int32, -1)))]

ListOffsetsRequest = {}
ListOffsetsResponse = {}
for _v, _rq, _rs in (
    (0, _req_v0, _resp_v0),
    (1, _req_v1, _resp_v1),
    (2, _req_v2, _resp_v2),
    (3, _req_v2, _resp_v2),
    (4, _req_v4, _resp_v4),
    (5, _req_v4, _resp_v4),
):
    ListOffsetsRequest[_v], ListOffsetsResponse[_v] = define(_KEY, _v, _rq, _rs)
