"""DescribeConfigs (32) v1-v2 (non-flexible): the configs of topics and brokers.

Request: [resource_type int8, resource_name, configuration_keys (null: all)], include_synonyms.
Response: throttle_time_ms, [error_code, error_message, resource_type, resource_name,
[name, value (null: sensitive), read_only, config_source int8, is_sensitive,
[synonym name, value, source]]]. v2 is v1 re-versioned (throttling on quota violation).
v0 (``is_default`` instead of ``config_source``) is left out: Kafka 4 clients no longer send
it (KIP-896). Resource types: 2 topic, 4 broker. Config sources: 4 static broker config,
5 default config.
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

__all__ = ["DescribeConfigsRequest", "DescribeConfigsResponse", "RESOURCE_TOPIC", "RESOURCE_BROKER",
           "SOURCE_STATIC_BROKER", "SOURCE_DEFAULT"]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

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
