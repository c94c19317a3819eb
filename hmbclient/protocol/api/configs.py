"""DescribeConfigs (32) v1-v2, AlterConfigs (33) v0-1 and IncrementalAlterConfigs (44) v0
(non-flexible): the configs of topics and brokers.

Request: [resource_type int8, resource_name, configuration_keys (null: all)], include_synonyms.
Response: throttle_time_ms, [error_code, error_message, resource_type, resource_name,
[name, value (null: sensitive), read_only, config_source int8, is_sensitive,
[synonym name, value, source]]]. v2 is v1 re-versioned (throttling on quota violation).
v0 (``is_default`` instead of ``config_source``) is left out: Kafka 4 clients no longer send
it (KIP-896). Resource types: 2 topic, 4 broker. Config sources: 4 static broker config,
5 default config; 1 dynamic topic config, 2 dynamic broker config (this broker), 3 dynamic
default broker config (every broker, resource name "").

AlterConfigs: [resource_type, resource_name, [name, value]], validate_only -> throttle_time_ms,
[error_code, error_message, resource_type, resource_name]; the request replaces the whole set
of dynamic configs of each resource (v1 is v0 re-versioned). IncrementalAlterConfigs: the same
with a config_operation per entry (0 set, 1 delete, 2 append, 3 subtract).
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
    NullableString,
    String,
)

__all__ = ["DescribeConfigsRequest", "DescribeConfigsResponse", "AlterConfigsRequest", "AlterConfigsResponse",
           "IncrementalAlterConfigsRequest", "IncrementalAlterConfigsResponse", "RESOURCE_TOPIC", "RESOURCE_BROKER",
           "SOURCE_TOPIC", "SOURCE_DYNAMIC_BROKER", "SOURCE_DYNAMIC_DEFAULT_BROKER", "SOURCE_STATIC_BROKER",
           "SOURCE_DEFAULT", "OP_SET", "OP_DELETE", "OP_APPEND", "OP_SUBTRACT"]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_dc_req: list[FieldSpec] = [
    ("resources", Array(("resource_type", Int8), ("resource_name", String),
                        ("configuration_keys", Array(String, nullable=True)), name="resources")),
    ("include_synonyms", Boolean),
]
_dc_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("results", Array(
        ("error_code", Int16), ("error_message", NullableString), ("resource_type", Int8), ("resource_name", String),
        ("configs", Array(
            ("name", String), ("value", NullableString), ("read_only", Boolean), ("config_source", Int8, -1),
            ("is_sensitive", Boolean),
            ("synonyms", Array(("name", String), ("value", NullableString), ("source", Int8), name="synonyms")),
            name="configs")),
        name="results")),
]

DescribeConfigsRequest = {}
DescribeConfigsResponse = {}
for _v in (1, 2):
    DescribeConfigsRequest[_v], DescribeConfigsResponse[_v] = define(ApiKey.DESCRIBE_CONFIGS, _v, _dc_req, _dc_resp)

_ac_req: list[FieldSpec] = [
    ("resources", Array(("resource_type", Int8), ("resource_name", String),
                        ("configs", Array(("name", String), ("value", NullableString), name="configs")), name="resources")),
    ("validate_only", Boolean),
]
_ac_resp: list[FieldSpec] = [
    ("throttle_time_ms", Int32),
    ("responses", Array(("error_code", Int16), ("error_message", NullableString), ("resource_type", Int8),
                        ("resource_name", String), name="responses")),
]
AlterConfigsRequest = {}
AlterConfigsResponse = {}
for _v in (0, 1):
    AlterConfigsRequest[_v], AlterConfigsResponse[_v] = define(ApiKey.ALTER_CONFIGS, _v, _ac_req, _ac_resp)

_iac_req: list[FieldSpec] = [
    ("resources", Array(("resource_type", Int8), ("resource_name", String),
                        ("configs", Array(("name", String), ("config_operation", Int8), ("value", NullableString), name="configs")),
                        name="resources")),
    ("validate_only", Boolean),
]
IncrementalAlterConfigsRequest = {}
IncrementalAlterConfigsResponse = {}
IncrementalAlterConfigsRequest[0], IncrementalAlterConfigsResponse[0] = define(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, _iac_req, _ac_resp)
