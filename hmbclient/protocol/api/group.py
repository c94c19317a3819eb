"""Group membership APIs (the classic group protocol, Kafka 0.9+; non-flexible versions only):
JoinGroup (11) v0-5, Heartbeat (12) v0-3, LeaveGroup (13) v0-3, SyncGroup (14) v0-3,
DescribeGroups (15) v0-4, ListGroups (16) v0-2, DeleteGroups (42) v0-1.

A member finds the coordinator (FindCoordinator), joins (JoinGroup: the coordinator answers
every member with the generation and the chosen protocol, and the leader also with every
member's metadata), the leader computes the assignment and hands it in with SyncGroup, every
member gets its own share back, then heartbeats within the session timeout until a rebalance
(REBALANCE_IN_PROGRESS) or LeaveGroup. ``metadata`` and ``assignment`` are opaque bytes here;
for ``protocol_type`` "consumer" they are :mod:`hmbclient.protocol.api.consumer_protocol`.

JoinGroup request: v0 group_id, session_timeout_ms, member_id, protocol_type, protocols
[name, metadata]; v1 + rebalance_timeout_ms (v0 rebalances within the session timeout);
v2-v3 same; v4 same (the coordinator may answer MEMBER_ID_REQUIRED); v5 + group_instance_id
(static membership, KIP-345). Response: v0 error_code, generation_id, protocol_name, leader,
member_id, members [member_id, metadata]; v2 + throttle_time_ms; v5 + group_instance_id per
member.
Heartbeat: group_id, generation_id, member_id; v3 + group_instance_id. Response error_code, v1
+ throttle_time_ms.
LeaveGroup: v0 group_id, member_id; v3 group_id, members [member_id, group_instance_id] (a
batch of members leave at once). Response error_code, v1 + throttle_time_ms, v3 + members
[member_id, group_instance_id, error_code].
SyncGroup: group_id, generation_id, member_id, assignments [member_id, assignment] (empty from
followers); v3 + group_instance_id. Response error_code, assignment; v1 + throttle_time_ms.
DescribeGroups: groups [group_id]; v3 + include_authorized_operations. Response groups
[error_code, group_id, group_state, protocol_type, protocol_data, members [member_id, client_id,
client_host, member_metadata, member_assignment]]; v1 + throttle_time_ms; v3 +
authorized_operations per group; v4 + group_instance_id per member.
ListGroups: empty request. Response error_code, groups [group_id, protocol_type]; v1 +
throttle_time_ms.
DeleteGroups: groups_names [group_id]. Response throttle_time_ms, results [group_id,
error_code]; v1 same as v0.

Names are Kafka's JSON message schema names.
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
    Array,
    Boolean,
    Bytes,
    FieldSpec,
    Int16,
    Int32,
    NullableString,
    String,
)

# Kafka's default for "authorized operations not asked for" (INT32_MIN).
_NO_AUTHORIZED_OPERATIONS = -(2**31)

# --- JoinGroup ---------------------------------------------------------------------------------
_protocols = ("protocols", Array(("name", String), ("metadata", Bytes), name="protocols"))
_jg_v0: list[FieldSpec] = [("group_id", String), ("session_timeout_ms", Int32), ("member_id", String), ("protocol_type", String), _protocols]
_jg_v1: list[FieldSpec] = [
    ("group_id", String),
    ("session_timeout_ms", Int32),
    ("rebalance_timeout_ms", Int32, -1),
    ("member_id", String),
    ("protocol_type", String),
    _protocols,
]
_jg_v5: list[FieldSpec] = [
    ("group_id", String),
    ("session_timeout_ms", Int32),
    ("rebalance_timeout_ms", Int32, -1),
    ("member_id", String),
    ("group_instance_id", NullableString),
    ("protocol_type", String),
    _protocols,
]
_jgr_v0: list[FieldSpec] = [
    ("error_code", Int16),
    ("generation_id", Int32, -1),
    ("protocol_name", String),
    ("leader", String),
    ("member_id", String),
    ("members", Array(("member_id", String), ("metadata", Bytes), name="members")),
]
_jgr_v2 = [("throttle_time_ms", Int32), *_jgr_v0]
_jgr_v5: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("error_code", Int16),
    ("generation_id", Int32, -1),
    ("protocol_name", String),
    ("leader", String),
    ("member_id", String),
    ("members", Array(("member_id", String), ("group_instance_id", NullableString), ("metadata", Bytes), name="members")),
]

JoinGroupRequest = {}
JoinGroupResponse = {}
for _v, _rq, _rs in (
    (0, _jg_v0, _jgr_v0),
    (1, _jg_v1, _jgr_v0),
    (2, _jg_v1, _jgr_v2),
    (3, _jg_v1, _jgr_v2),
    (4, _jg_v1, _jgr_v2),
    (5, _jg_v5, _jgr_v5),
):
    JoinGroupRequest[_v], JoinGroupResponse[_v] = define(ApiKey.JOIN_GROUP, _v, _rq, _rs)

# --- Heartbeat ---------------------------------------------------------------------------------
_hb_v0: list[FieldSpec] = [("group_id", String), ("generation_id", Int32), ("member_id", String)]
_hb_v3 = [*_hb_v0, ("group_instance_id", NullableString)]
_hbr_v0: list[FieldSpec] = [("error_code", Int16)]
_hbr_v1 = [("throttle_time_ms", Int32), *_hbr_v0]

HeartbeatRequest = {}
HeartbeatResponse = {}
for _v, _rq, _rs in ((0, _hb_v0, _hbr_v0), (1, _hb_v0, _hbr_v1), (2, _hb_v0, _hbr_v1), (3, _hb_v3, _hbr_v1)):
    HeartbeatRequest[_v], HeartbeatResponse[_v] = define(ApiKey.HEARTBEAT, _v, _rq, _rs)

# --- LeaveGroup --------------------------------------------------------------------------------
_lg_v0: list[FieldSpec] = [("group_id", String), ("member_id", String)]
_lg_v3: list[FieldSpec] = [
    ("group_id", String),
    ("members", Array(("member_id", String), ("group_instance_id", NullableString), name="members")),
]
_lgr_v0: list[FieldSpec] = [("error_code", Int16)]
_lgr_v1 = [("throttle_time_ms", Int32), *_lgr_v0]
_lgr_v3 = [
    *_lgr_v1,
    ("members", Array(("member_id", String), ("group_instance_id", NullableString), ("error_code", Int16), name="members")),
]

LeaveGroupRequest = {}
LeaveGroupResponse = {}
for _v, _rq, _rs in ((0, _lg_v0, _lgr_v0), (1, _lg_v0, _lgr_v1), (2, _lg_v0, _lgr_v1), (3, _lg_v3, _lgr_v3)):
    LeaveGroupRequest[_v], LeaveGroupResponse[_v] = define(ApiKey.LEAVE_GROUP, _v, _rq, _rs)

# --- SyncGroup ---------------------------------------------------------------------------------
_assignments = ("assignments", Array(("member_id", String), ("assignment", Bytes), name="assignments"))
_sg_v0: list[FieldSpec] = [("group_id", String), ("generation_id", Int32), ("member_id", String), _assignments]
_sg_v3: list[FieldSpec] = [
    ("group_id", String),
    ("generation_id", Int32),
    ("member_id", String),
    ("group_instance_id", NullableString),
    _assignments,
]
_sgr_v0: list[FieldSpec] = [("error_code", Int16), ("assignment", Bytes)]
_sgr_v1 = [("throttle_time_ms", Int32), *_sgr_v0]

SyncGroupRequest = {}
SyncGroupResponse = {}
for _v, _rq, _rs in ((0, _sg_v0, _sgr_v0), (1, _sg_v0, _sgr_v1), (2, _sg_v0, _sgr_v1), (3, _sg_v3, _sgr_v1)):
    SyncGroupRequest[_v], SyncGroupResponse[_v] = define(ApiKey.SYNC_GROUP, _v, _rq, _rs)

# --- DescribeGroups ----------------------------------------------------------------------------
_dg_v0: list[FieldSpec] = [("groups", Array(String))]
_dg_v3 = [*_dg_v0, ("include_authorized_operations", Boolean)]

_dg_member_v0: list[FieldSpec] = [
    ("member_id", String),
    ("client_id", String),
    ("client_host", String),
    ("member_metadata", Bytes),
    ("member_assignment", Bytes),
]
_dg_member_v4 = [_dg_member_v0[0], ("group_instance_id", NullableString), *_dg_member_v0[1:]]
_dg_group_v0: list[FieldSpec] = [
    ("error_code", Int16),
    ("group_id", String),
    ("group_state", String),
    ("protocol_type", String),
    ("protocol_data", String),
    ("members", Array(*_dg_member_v0, name="members")),
]
_dg_group_v3 = [*_dg_group_v0, ("authorized_operations", Int32, _NO_AUTHORIZED_OPERATIONS)]
_dg_group_v4 = [*_dg_group_v0[:-1], ("members", Array(*_dg_member_v4, name="members")), _dg_group_v3[-1]]
_dgr_v0: list[FieldSpec] = [("groups", Array(*_dg_group_v0, name="groups"))]
_dgr_v1 = [("throttle_time_ms", Int32), *_dgr_v0]
_dgr_v3: list[FieldSpec] = [("throttle_time_ms", Int32), ("groups", Array(*_dg_group_v3, name="groups"))]
_dgr_v4: list[FieldSpec] = [("throttle_time_ms", Int32), ("groups", Array(*_dg_group_v4, name="groups"))]

DescribeGroupsRequest = {}
DescribeGroupsResponse = {}
for _v, _rq, _rs in ((0, _dg_v0, _dgr_v0), (1, _dg_v0, _dgr_v1), (2, _dg_v0, _dgr_v1), (3, _dg_v3, _dgr_v3), (4, _dg_v3, _dgr_v4)):
    DescribeGroupsRequest[_v], DescribeGroupsResponse[_v] = define(ApiKey.DESCRIBE_GROUPS, _v, _rq, _rs)

# --- ListGroups --------------------------------------------------------------------------------
_lsr_v0: list[FieldSpec] = [("error_code", Int16), ("groups", Array(("group_id", String), ("protocol_type", String), name="groups"))]
_lsr_v1 = [("throttle_time_ms", Int32), *_lsr_v0]

ListGroupsRequest = {}
ListGroupsResponse = {}
for _v, _rs in ((0, _lsr_v0), (1, _lsr_v1), (2, _lsr_v1)):
    ListGroupsRequest[_v], ListGroupsResponse[_v] = define(ApiKey.LIST_GROUPS, _v, [], _rs)

# --- DeleteGroups ------------------------------------------------------------------------------
_dlg_v0: list[FieldSpec] = [("groups_names", Array(String))]
_dlgr_v0: list[FieldSpec] = [("throttle_time_ms", Int32), ("results", Array(("group_id", String), ("error_code", Int16), name="results"))]

DeleteGroupsRequest = {}
DeleteGroupsResponse = {}
for _v in (0, 1):
    DeleteGroupsRequest[_v], DeleteGroupsResponse[_v] = define(ApiKey.DELETE_GROUPS, _v, _dlg_v0, _dlgr_v0)
