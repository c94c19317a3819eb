"""DescribeClientQuotas (48) v0 and AlterClientQuotas (49) v0 (non-flexible; KIP-546): the
client quotas (``producer_byte_rate``, ``consumer_byte_rate``) of user / client-id entities.

An entity is ``[(entity_type, entity_name)]`` with ``entity_type`` ``user`` or ``client-id`` and
a null ``entity_name`` for the default (``<default>`` in ZooKeeper). DescribeClientQuotas
filters by components ``(entity_type, match_type, match)``: match_type 0 exact name, 1 the
default entity, 2 any entity naming that type; ``strict`` leaves out entities naming other
types. Values are float64 rates.
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
           Array,
           Boolean,
           FieldSpec,
           Float64,
           Int8,
           Int16,
           Int32,
           NullableString,
           String,
)

__all__ = ["AlterClientQuotasRequest", "AlterClientQuotasResponse", "DescribeClientQuotasRequest",
           "DescribeClientQuotasResponse", "MATCH_ANY", "MATCH_DEFAULT", "MATCH_EXACT"]

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

_entity = Array(("entity_type", String), ("entity_name", NullableString), name="entity")

_dq_req: list[FieldSpec] = [
    ("components", Array(("entity_type", String), ("match_type", Int8), ("match", NullableString), name="components")),
    ("strict", Boolean),
]
_dq_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("error_code", Int16),
    ("error_message", NullableString),
    ("entries", Array(("entity", _entity), ("values", Array(("key", String), ("value", Float64), name="values")),
                      name="entries", nullable=True)),
]
_aq_req: list[FieldSpec] = [
    ("entries", Array(("entity", _entity), ("ops", Array(("key", String), ("value", Float64), ("remove", Boolean), name="ops")),
                      name="entries")),
    ("validate_only", Boolean),
]
_aq_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("entries", Array(("error_code", Int16), ("error_message", NullableString), ("entity", _entity), name="entries")),
]

DescribeClientQuotasRequest = {}
DescribeClientQuotasResponse = {}
DescribeClientQuotasRequest[0], DescribeClientQuotasResponse[0] = define(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, _dq_req, _dq_resp)
AlterClientQuotasRequest = {}
AlterClientQuotasResponse = {}
AlterClientQuotasRequest[0], AlterClientQuotasResponse[0] = define(ApiKey.ALTER_CLIENT_QUOTAS, 0, _aq_req, _aq_resp)
