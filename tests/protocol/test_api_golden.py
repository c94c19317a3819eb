"""Golden bytes: every (API, version) we implement against kafka-python 3.0.12, an independent
implementation driven by Kafka's own JSON message schemas.

kafka-python has no inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown): those pairs are listed in ``NO_PEER`` and checked against byte vectors
written by hand from Kafka's JSON schemas in test_api_vectors.py.

For each pair and both directions (request and response) we check:

* the schema shape: our field list, in wire order, maps one-to-one onto kafka-python's untagged
  fields for that version (names through ``NAMES`` where they differ), with the same primitive
  type and the same nullability;
* ours -> kafka-python: bytes we encode decode in kafka-python to the same values, field by field;
* kafka-python -> ours: bytes kafka-python encodes decode in ours to the same values;
* the bytes are identical, and so are whole frames (size + request/response header + body).

kafka-python is a test-only peer; the package never imports it. A missing or wrong schema fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kafka.protocol.admin as kp_admin
import kafka.protocol.consumer as kp_consumer
import kafka.protocol.metadata as kp_metadata
import kafka.protocol.producer as kp_producer
import kafka.protocol.sasl as kp_sasl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader as KpRequestHeader
from kafka.record.memory_records import MemoryRecordsBuilder

from hmbclient.protocol.api import REQUESTS, RESPONSES, ApiKey
from hmbclient.protocol.frame import NEED_DATA, ClientConnection, ServerConnection, encode_request
from hmbclient.protocol.types import (
    Array,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableBytes,
    NullableString,
    Records,
    String,
    Struct,
    Type,
)

# --- the peer and the name map ----------------------------------------------------------------

KP: dict[int, tuple[Any, Any]] = {
    ApiKey.PRODUCE: (kp_producer.ProduceRequest, kp_producer.ProduceResponse),
    ApiKey.FETCH: (kp_consumer.FetchRequest, kp_consumer.FetchResponse),
    ApiKey.LIST_OFFSETS: (kp_consumer.ListOffsetsRequest, kp_consumer.ListOffsetsResponse),
    ApiKey.METADATA: (kp_metadata.MetadataRequest, kp_metadata.MetadataResponse),
    ApiKey.OFFSET_COMMIT: (kp_consumer.OffsetCommitRequest, kp_consumer.OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (kp_consumer.OffsetFetchRequest, kp_consumer.OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: (kp_metadata.FindCoordinatorRequest, kp_metadata.FindCoordinatorResponse),
    ApiKey.API_VERSIONS: (kp_metadata.ApiVersionsRequest, kp_metadata.ApiVersionsResponse),
    ApiKey.CREATE_TOPICS: (kp_admin.CreateTopicsRequest, kp_admin.CreateTopicsResponse),
    ApiKey.DESCRIBE_CONFIGS: (kp_admin.DescribeConfigsRequest, kp_admin.DescribeConfigsResponse),
    ApiKey.INIT_PRODUCER_ID: (kp_producer.InitProducerIdRequest, kp_producer.InitProducerIdResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (kp_consumer.OffsetForLeaderEpochRequest, kp_consumer.OffsetForLeaderEpochResponse),
    ApiKey.JOIN_GROUP: (kp_consumer.JoinGroupRequest, kp_consumer.JoinGroupResponse),
    ApiKey.HEARTBEAT: (kp_consumer.HeartbeatRequest, kp_consumer.HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (kp_consumer.LeaveGroupRequest, kp_consumer.LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (kp_consumer.SyncGroupRequest, kp_consumer.SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (kp_admin.DescribeGroupsRequest, kp_admin.DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (kp_admin.ListGroupsRequest, kp_admin.ListGroupsResponse),
    ApiKey.DELETE_GROUPS: (kp_admin.DeleteGroupsRequest, kp_admin.DeleteGroupsResponse),
    ApiKey.SASL_HANDSHAKE: (kp_sasl.SaslHandshakeRequest, kp_sasl.SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (kp_sasl.SaslAuthenticateRequest, kp_sasl.SaslAuthenticateResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (kp_producer.AddPartitionsToTxnRequest, kp_producer.AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (kp_producer.AddOffsetsToTxnRequest, kp_producer.AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (kp_producer.EndTxnRequest, kp_producer.EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (kp_producer.WriteTxnMarkersRequest, kp_producer.WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (kp_producer.TxnOffsetCommitRequest, kp_producer.TxnOffsetCommitResponse),
    ApiKey.DELETE_TOPICS: (kp_admin.DeleteTopicsRequest, kp_admin.DeleteTopicsResponse),
    ApiKey.DELETE_RECORDS: (kp_admin.DeleteRecordsRequest, kp_admin.DeleteRecordsResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (kp_admin.DescribeLogDirsRequest, kp_admin.DescribeLogDirsResponse),
    ApiKey.CREATE_PARTITIONS: (kp_admin.CreatePartitionsRequest, kp_admin.CreatePartitionsResponse),
    ApiKey.ELECT_LEADERS: (kp_admin.ElectLeadersRequest, kp_admin.ElectLeadersResponse),
    ApiKey.OFFSET_DELETE: (kp_consumer.OffsetDeleteRequest, kp_consumer.OffsetDeleteResponse),
    ApiKey.ALTER_CONFIGS: (kp_admin.AlterConfigsRequest, kp_admin.AlterConfigsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (kp_admin.IncrementalAlterConfigsRequest, kp_admin.IncrementalAlterConfigsResponse),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (kp_admin.DescribeClientQuotasRequest, kp_admin.DescribeClientQuotasResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: (kp_admin.AlterClientQuotasRequest, kp_admin.AlterClientQuotasResponse),
}

# No peer in kafka-python (it has no inter-broker APIs); checked by hand-made vectors in
# test_api_vectors.py, which asserts it covers exactly these.
NO_PEER: frozenset[tuple[int, int]] = frozenset(
    [(ApiKey.LEADER_AND_ISR, v) for v in (0, 1)]
    + [(ApiKey.STOP_REPLICA, 0)]
    + [(ApiKey.UPDATE_METADATA, v) for v in range(6)]
    + [(ApiKey.CONTROLLED_SHUTDOWN, v) for v in (1, 2)]
)

# (api_key, "request"|"response") -> {our dotted field path: kafka-python field name}.
# Only the names that differ are listed; everything else must match exactly.
_TOPIC_PART = {"topics.topic": "name", "topics.partitions.partition": "partition_index"}
NAMES: dict[tuple[int, str], dict[str, str]] = {
    (ApiKey.PRODUCE, "request"): {
        "topics": "topic_data",
        "topics.topic": "name",
        "topics.partitions": "partition_data",
        "topics.partitions.partition": "index",
    },
    (ApiKey.PRODUCE, "response"): {
        "topics": "responses",
        "topics.topic": "name",
        "topics.partitions": "partition_responses",
        "topics.partitions.partition": "index",
        "topics.partitions.log_append_time": "log_append_time_ms",
    },
    (ApiKey.FETCH, "request"): {},
    (ApiKey.FETCH, "response"): {"topics": "responses", "topics.partitions.partition": "partition_index"},
    (ApiKey.LIST_OFFSETS, "request"): _TOPIC_PART,
    (ApiKey.LIST_OFFSETS, "response"): _TOPIC_PART,
    # Kafka models Metadata v0-v9 request topics as [{name}]: wire-identical to our [string].
    (ApiKey.METADATA, "request"): {},
    (ApiKey.METADATA, "response"): {
        "topics.topic": "name",
        "topics.partitions.partition": "partition_index",
        "topics.partitions.leader": "leader_id",
        "topics.partitions.replicas": "replica_nodes",
        "topics.partitions.isr": "isr_nodes",
        "topics.topic_authorized_operations": "authorized_operations",
        "cluster_authorized_operations": "authorized_operations",
    },
    (ApiKey.OFFSET_COMMIT, "request"): {
        **_TOPIC_PART,
        "generation_id": "generation_id_or_member_epoch",
        "topics.partitions.offset": "committed_offset",
        "topics.partitions.timestamp": "commit_timestamp",
        "topics.partitions.metadata": "committed_metadata",
    },
    (ApiKey.OFFSET_COMMIT, "response"): _TOPIC_PART,
    (ApiKey.OFFSET_FETCH, "request"): {"topics.topic": "name", "topics.partitions": "partition_indexes"},
    (ApiKey.OFFSET_FETCH, "response"): {**_TOPIC_PART, "topics.partitions.offset": "committed_offset"},
    (ApiKey.FIND_COORDINATOR, "request"): {"group_id": "key"},  # v0 (GroupCoordinator)
    (ApiKey.FIND_COORDINATOR, "response"): {},
    (ApiKey.API_VERSIONS, "request"): {},
    (ApiKey.API_VERSIONS, "response"): {},
    (ApiKey.CREATE_TOPICS, "request"): {
        "topics.topic": "name",
        "topics.assignments.partition": "partition_index",
    },
    (ApiKey.CREATE_TOPICS, "response"): {"topics.topic": "name"},
    (ApiKey.INIT_PRODUCER_ID, "request"): {},
    (ApiKey.INIT_PRODUCER_ID, "response"): {},
    (ApiKey.DESCRIBE_CONFIGS, "request"): {},
    (ApiKey.DESCRIBE_CONFIGS, "response"): {},
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, "request"): {},
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, "response"): {},
    (ApiKey.JOIN_GROUP, "request"): {},
    (ApiKey.JOIN_GROUP, "response"): {},
    (ApiKey.HEARTBEAT, "request"): {},
    (ApiKey.HEARTBEAT, "response"): {},
    (ApiKey.LEAVE_GROUP, "request"): {},
    (ApiKey.LEAVE_GROUP, "response"): {},
    (ApiKey.SYNC_GROUP, "request"): {},
    (ApiKey.SYNC_GROUP, "response"): {},
    (ApiKey.DESCRIBE_GROUPS, "request"): {},
    (ApiKey.DESCRIBE_GROUPS, "response"): {},
    (ApiKey.LIST_GROUPS, "request"): {},
    (ApiKey.LIST_GROUPS, "response"): {},
    (ApiKey.DELETE_GROUPS, "request"): {},
    (ApiKey.DELETE_GROUPS, "response"): {},
    (ApiKey.SASL_HANDSHAKE, "request"): {},
    (ApiKey.SASL_HANDSHAKE, "response"): {},
    (ApiKey.SASL_AUTHENTICATE, "request"): {},
    (ApiKey.SASL_AUTHENTICATE, "response"): {},
    (ApiKey.ADD_PARTITIONS_TO_TXN, "request"): {
        "transactional_id": "v3_and_below_transactional_id",
        "producer_id": "v3_and_below_producer_id",
        "producer_epoch": "v3_and_below_producer_epoch",
        "topics": "v3_and_below_topics",
        "topics.topic": "name",
    },
    (ApiKey.ADD_PARTITIONS_TO_TXN, "response"): {
        "results": "results_by_topic_v3_and_below",
        "results.topic": "name",
        "results.results": "results_by_partition",
        "results.results.partition": "partition_index",
        "results.results.error_code": "partition_error_code",
    },
    (ApiKey.ADD_OFFSETS_TO_TXN, "request"): {},
    (ApiKey.ADD_OFFSETS_TO_TXN, "response"): {},
    (ApiKey.END_TXN, "request"): {},
    (ApiKey.END_TXN, "response"): {},
    (ApiKey.WRITE_TXN_MARKERS, "request"): {"markers.topics.topic": "name", "markers.topics.partitions": "partition_indexes"},
    (ApiKey.WRITE_TXN_MARKERS, "response"): {"markers.topics.topic": "name", "markers.topics.partitions.partition": "partition_index"},
    (ApiKey.TXN_OFFSET_COMMIT, "request"): {
        **_TOPIC_PART,
        "topics.partitions.offset": "committed_offset",
        "topics.partitions.metadata": "committed_metadata",
    },
    (ApiKey.TXN_OFFSET_COMMIT, "response"): _TOPIC_PART,
    (ApiKey.DELETE_TOPICS, "request"): {},
    (ApiKey.DELETE_TOPICS, "response"): {},
    (ApiKey.DELETE_RECORDS, "request"): {},
    (ApiKey.DELETE_RECORDS, "response"): {},
    (ApiKey.DESCRIBE_LOG_DIRS, "request"): {},
    (ApiKey.DESCRIBE_LOG_DIRS, "response"): {},
    (ApiKey.CREATE_PARTITIONS, "request"): {},
    (ApiKey.CREATE_PARTITIONS, "response"): {},
    (ApiKey.ELECT_LEADERS, "request"): {},
    (ApiKey.ELECT_LEADERS, "response"): {},
    (ApiKey.OFFSET_DELETE, "request"): {},
    (ApiKey.OFFSET_DELETE, "response"): {},
    (ApiKey.DESCRIBE_CLIENT_QUOTAS, "request"): {},
    (ApiKey.DESCRIBE_CLIENT_QUOTAS, "response"): {},
    (ApiKey.ALTER_CLIENT_QUOTAS, "request"): {},
    (ApiKey.ALTER_CLIENT_QUOTAS, "response"): {},
    (ApiKey.ALTER_CONFIGS, "request"): {},
    (ApiKey.ALTER_CONFIGS, "response"): {},
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, "request"): {},
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, "response"): {},
}

# our primitive type -> kafka-python type_str
_KP_TYPE: dict[int, tuple[str, ...]] = {
    id(Int8): ("int8",),
    id(Int16): ("int16",),
    id(Int32): ("int32", "bitfield"),
    id(Int64): ("int64",),
    id(Float64): ("float64",),
    id(Boolean): ("bool",),
    id(String): ("string",),
    id(NullableString): ("string",),
    id(Bytes): ("bytes",),
    id(NullableBytes): ("bytes",),
    id(Records): ("records", "bytes"),
}

# Flexible pairs are body codecs here; tests/protocol/test_txn_protocol.py (DescribeTransactions,
# ListTransactions) and test_kip848_protocol.py (Metadata v9-12, ConsumerGroupHeartbeat) check
# their bytes.
FLEXIBLE: frozenset[tuple[int, int]] = frozenset(p for p, c in REQUESTS.items() if c.FLEXIBLE)
PAIRS = sorted(p for p in REQUESTS if p not in NO_PEER and p not in FLEXIBLE)
CASES = [(k, v, kind) for (k, v) in PAIRS for kind in ("request", "response")]


def _ids(case: tuple[int, int, str]) -> str:
    k, v, kind = case
    return f"{ApiKey(k).name}-v{v}-{kind}"


def _ours(k: int, v: int, kind: str) -> Any:
    return REQUESTS[(k, v)] if kind == "request" else RESPONSES[(k, v)]


def _kp(k: int, v: int, kind: str) -> Any:
    return KP[k][0 if kind == "request" else 1][v]


def _nullable(t: Type) -> bool:
    return bool(getattr(t, "nullable", False))


# --- converting values between the two trees --------------------------------------------------


def _bits(x: int) -> set[int] | None:
    bits = {i for i in range(32) if (x >> i) & 1}
    return None if bits == {31} else bits


def _unbits(bits: set[int] | None) -> int:
    n = sum(1 << b for b in ({31} if bits is None else bits))
    return n - (1 << 32) if n >= 1 << 31 else n


def _walk(struct: Struct, kp_fields: list[Any], v: int, names: dict[str, str], path: str) -> Iterator[tuple[str, Type, Any, str]]:
    """Pair our fields with kafka-python's, asserting names and count."""
    ours = [n for n, _ in struct.fields]
    theirs = [f.name for f in kp_fields]
    mapped = [names.get(f"{path}{n}", n) for n in ours]
    assert mapped == theirs, f"{path or 'top'}: our fields {ours} (as {mapped}) != kafka-python {theirs}"
    for (name, t), f in zip(struct.fields, kp_fields, strict=True):
        yield name, t, f, f"{path}{name}"


def to_kp(struct: Struct, kp_fields: list[Any], value: Any, v: int, names: dict[str, str], path: str = "") -> dict[str, Any]:
    """Our value -> kwargs for the kafka-python data class."""
    out: dict[str, Any] = {}
    for (_name, t, f, p), x in zip(_walk(struct, kp_fields, v, names, path), value, strict=True):
        out[f.name] = _to_kp_value(t, f, x, v, names, p)
    return out


def _to_kp_value(t: Type, f: Any, x: Any, v: int, names: dict[str, str], p: str) -> Any:
    if isinstance(t, Array):
        if x is None:
            return None
        if isinstance(t.item, Struct):
            sub = f.untagged_fields(v)
            return [f.data_class(**to_kp(t.item, sub, e, v, names, p + ".")) for e in x]
        if f.is_struct_array():
            (only,) = f.untagged_fields(v)
            return [f.data_class(**{only.name: e}) for e in x]
        return list(x)
    if isinstance(t, Struct):
        return f.data_class(**to_kp(t, f.untagged_fields(v), x, v, names, p + "."))
    if f.type_str == "bitfield":
        return _bits(x)
    if isinstance(x, memoryview):
        return bytes(x)
    return x


def from_kp(struct: Struct, kp_fields: list[Any], obj: Any, v: int, names: dict[str, str], path: str = "") -> Any:
    """A kafka-python data object -> our namedtuple value."""
    vals = [_from_kp_value(t, f, getattr(obj, f.name), v, names, p) for _n, t, f, p in _walk(struct, kp_fields, v, names, path)]
    return struct.values(*vals)


def _from_kp_value(t: Type, f: Any, x: Any, v: int, names: dict[str, str], p: str) -> Any:
    if isinstance(t, Array):
        if x is None:
            return None
        if isinstance(t.item, Struct):
            sub = f.untagged_fields(v)
            return [from_kp(t.item, sub, e, v, names, p + ".") for e in x]
        if f.is_struct_array():
            (only,) = f.untagged_fields(v)
            return [getattr(e, only.name) for e in x]
        return list(x)
    if isinstance(t, Struct):
        return from_kp(t, f.untagged_fields(v), x, v, names, p + ".")
    if f.type_str == "bitfield":
        return _unbits(x)
    if isinstance(x, memoryview | bytearray):
        return bytes(x)
    return x


def plain(t: Type, x: Any) -> Any:
    """A comparable form: namedtuples -> tuples, views -> bytes, arrays -> lists."""
    if isinstance(t, Struct):
        return tuple(plain(ft, fx) for (_n, ft), fx in zip(t.fields, x, strict=True))
    if isinstance(t, Array):
        return None if x is None else [plain(t.item, e) for e in x]
    if isinstance(x, memoryview | bytearray):
        return bytes(x)
    return x


# --- representative values ---------------------------------------------------------------------

_INTS = {
    id(Int8): [1, -128, 127, 0, -1],
    id(Int16): [3, -32768, 32767, -1, 0],
    id(Int32): [7, 2**31 - 1, -(2**31), -1, 0, 65536],
    id(Int64): [2**63 - 1, -(2**63), 1_234_567_890_123, -1, 0],
}
_STRINGS = ["events", "tópic-ünïcode-✓", "", "x" * 300, "a.b_c-9"]


def _record_sets() -> list[bytes]:
    sets = []
    for magic in (0, 1, 2):
        b = MemoryRecordsBuilder(magic, 0, 1 << 20)
        b.append(1_700_000_000_000, b"key", b"value")
        b.append(1_700_000_000_001, None, b"v" * 100)
        b.close()
        sets.append(bytes(b.buffer()))
    return sets


_RECORDS = _record_sets()


class Sample:
    """Deterministic values from our schema tree. ``variant``:
    rich   - several elements per array, non-null values, int extremes, real record sets;
    sparse - one element per top-level array, nested arrays empty, nullable things null;
    empty  - every top-level array empty (or null when nullable)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.i = 0

    def _next(self, seq: list[Any]) -> Any:
        self.i += 1
        return seq[self.i % len(seq)]

    def value(self, t: Type, depth: int = 0) -> Any:
        if isinstance(t, Struct):
            return t.values(*[self.value(ft, depth) for _n, ft in t.fields])
        if isinstance(t, Array):
            if self.variant == "empty" and depth == 0:
                return None if t.nullable else []
            if self.variant == "sparse":
                if t.nullable:
                    return None
                n = 1 if depth == 0 else 0
            else:
                n = 3 if depth == 0 else 2
            return [self.value(t.item, depth + 1) for _ in range(n)]
        if id(t) in _INTS:
            return self._next(_INTS[id(t)])
        if t is Boolean:
            return self._next([True, False])
        if t is Float64:
            return self._next([0.0, 1048576.0, 2.5, -1.0])
        if t in (String, NullableString):
            if t is NullableString and self.variant != "rich":
                return None
            return self._next(_STRINGS)
        if t is Records:
            if self.variant == "sparse":
                return None
            if self.variant == "empty":
                return b""
            return self._next(_RECORDS)
        if t in (Bytes, NullableBytes):
            return b"" if self.variant != "rich" else self._next([b"\x00\xff", b"payload"])
        raise AssertionError(f"no sample for {t!r}")


def sample(k: int, v: int, kind: str, variant: str) -> Any:
    cls = _ours(k, v, kind)
    value = Sample(variant).value(cls.SCHEMA)
    if k == ApiKey.API_VERSIONS and kind == "response" and v > 0:
        # kafka-python decodes any non-zero ApiVersions error as the v0 layout (its KIP-511
        # fallback), so only error_code 0 is comparable in v1+.
        value = value._replace(error_code=0)
    return value


# --- the tests ---------------------------------------------------------------------------------


def test_every_pair_has_a_peer_version() -> None:
    """Every pair we implement is registered, and every one but ``NO_PEER`` has a non-flexible
    kafka-python version (so the parametrisation below covers it)."""
    want = {
        ApiKey.PRODUCE: range(0, 8),
        ApiKey.FETCH: range(0, 11),
        ApiKey.LIST_OFFSETS: range(0, 6),
        ApiKey.METADATA: range(0, 13),
        ApiKey.OFFSET_COMMIT: range(0, 10),
        ApiKey.OFFSET_FETCH: range(0, 10),
        ApiKey.FIND_COORDINATOR: range(0, 3),
        ApiKey.API_VERSIONS: range(0, 3),
        ApiKey.CREATE_TOPICS: range(0, 5),
        ApiKey.INIT_PRODUCER_ID: range(0, 2),
        ApiKey.LEADER_AND_ISR: range(0, 2),
        ApiKey.STOP_REPLICA: range(0, 1),
        ApiKey.UPDATE_METADATA: range(0, 6),
        ApiKey.CONTROLLED_SHUTDOWN: range(1, 3),  # v0's request header has no client_id
        ApiKey.OFFSET_FOR_LEADER_EPOCH: range(0, 4),
        ApiKey.JOIN_GROUP: range(0, 6),
        ApiKey.HEARTBEAT: range(0, 4),
        ApiKey.LEAVE_GROUP: range(0, 4),
        ApiKey.SYNC_GROUP: range(0, 4),
        ApiKey.DESCRIBE_GROUPS: range(0, 5),
        ApiKey.LIST_GROUPS: range(0, 3),
        ApiKey.DELETE_GROUPS: range(0, 2),
        ApiKey.DESCRIBE_CONFIGS: range(1, 3),  # v0 (is_default) left out: Kafka 4 clients no longer send it
        ApiKey.SASL_HANDSHAKE: range(0, 2),
        ApiKey.SASL_AUTHENTICATE: range(0, 2),
        ApiKey.ADD_PARTITIONS_TO_TXN: range(0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: range(0, 3),
        ApiKey.END_TXN: range(0, 3),
        ApiKey.WRITE_TXN_MARKERS: range(0, 1),
        ApiKey.TXN_OFFSET_COMMIT: range(0, 3),
        ApiKey.DESCRIBE_TRANSACTIONS: range(0, 1),
        ApiKey.LIST_TRANSACTIONS: range(0, 2),
        ApiKey.DELETE_TOPICS: range(0, 4),
        ApiKey.DELETE_RECORDS: range(0, 3),
        ApiKey.DESCRIBE_LOG_DIRS: range(1, 2),  # v0 is gone from Kafka 4 clients (KIP-896)
        ApiKey.CREATE_PARTITIONS: range(0, 2),
        ApiKey.ELECT_LEADERS: range(0, 2),
        ApiKey.OFFSET_DELETE: range(0, 1),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: range(0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: range(0, 1),
        ApiKey.ALTER_CONFIGS: range(0, 2),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: range(0, 1),
        ApiKey.DESCRIBE_CLUSTER: range(0, 2),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: range(0, 2),
        ApiKey.CONSUMER_GROUP_DESCRIBE: range(0, 2),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: range(0, 2),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: range(0, 1),
    }
    expected = {(int(k), v) for k, vs in want.items() for v in vs}
    assert set(REQUESTS) == expected
    assert set(RESPONSES) == expected
    assert NO_PEER <= expected
    assert {k for k, _v in NO_PEER}.isdisjoint(KP)
    assert FLEXIBLE == {(ApiKey.DESCRIBE_TRANSACTIONS, 0), (ApiKey.LIST_TRANSACTIONS, 0), (ApiKey.LIST_TRANSACTIONS, 1),
                        (ApiKey.DESCRIBE_CLUSTER, 0), (ApiKey.DESCRIBE_CLUSTER, 1),  # DescribeCluster: tests/broker/test_admin_topics.py
                        (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0), (ApiKey.CONSUMER_GROUP_HEARTBEAT, 1),
                        (ApiKey.CONSUMER_GROUP_DESCRIBE, 0), (ApiKey.CONSUMER_GROUP_DESCRIBE, 1),
                        (ApiKey.DELETE_RECORDS, 2),  # DeleteRecords v2: tests/broker/test_delete_records.py (kafka-python's bytes)
                        # reassignment: tests/protocol/test_frame_flexible.py against kafka-python
                        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0), (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1),
                        (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0)} | {
        (ApiKey.METADATA, v) for v in range(9, 13)
    } | {(ApiKey.OFFSET_COMMIT, 8), (ApiKey.OFFSET_COMMIT, 9)} | {(ApiKey.OFFSET_FETCH, v) for v in range(6, 10)}
    for k, v in expected - NO_PEER - FLEXIBLE:
        for kind in ("request", "response"):
            assert not _kp(k, v, kind).flexible_version_q(v), "only the flexible-only APIs are flexible"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_schema_shape(case: tuple[int, int, str]) -> None:
    """Same fields, order, primitive types and nullability as Kafka's JSON schema."""
    k, v, kind = case
    names = NAMES[(k, kind)]

    def check(struct: Struct, kp_fields: list[Any], path: str) -> None:
        for _n, t, f, p in _walk(struct, kp_fields, v, names, path):
            if isinstance(t, Array):
                assert f.is_array(), p
                assert t.nullable == f.nullable_for_version_q(v), f"{p}: nullable {t.nullable}"
                if isinstance(t.item, Struct):
                    assert f.is_struct_array(), p
                    check(t.item, f.untagged_fields(v), p + ".")
                elif f.is_struct_array():
                    (only,) = f.untagged_fields(v)
                    assert only.type_str in _KP_TYPE[id(t.item)], p
                else:
                    assert f.array_of.type_str in _KP_TYPE[id(t.item)], f"{p}: {t.item!r} vs {f.array_of.type_str}"
            elif isinstance(t, Struct):
                assert f.is_struct(), p
                check(t, f.untagged_fields(v), p + ".")
            else:
                assert f.type_str in _KP_TYPE[id(t)], f"{p}: {t!r} vs {f.type_str}"
                if t in (String, NullableString, Bytes, NullableBytes):
                    assert _nullable(t) == f.nullable_for_version_q(v), f"{p}: nullable {_nullable(t)}"
                elif t is Records:
                    # Records is always nullable in both (null record sets appear in errors).
                    assert f.nullable_for_version_q(v), p

    check(_ours(k, v, kind).SCHEMA, _kp(k, v, kind)._struct.untagged_fields(v), "")


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_field_defaults_match_kafka(case: tuple[int, int, str]) -> None:
    """A field left out of the constructor gets Kafka's default (replica_id -1, leader epochs -1,
    max_bytes 2^31-1, allow_auto_topic_creation true, ...). One deliberate difference: nullable
    strings, arrays and record sets default to None (absent) where Kafka's default is empty."""
    k, v, kind = case
    names = NAMES[(k, kind)]

    def check(struct: Struct, kp_fields: list[Any], path: str) -> None:
        for i, (_n, t, f, p) in enumerate(_walk(struct, kp_fields, v, names, path)):
            ours, theirs = struct.defaults[i], f.default
            if isinstance(t, Array):
                if isinstance(t.item, Struct):
                    check(t.item, f.untagged_fields(v), p + ".")
                ours = None if ours is None else list(ours)
            if f.type_str == "bitfield":
                theirs = _unbits(theirs) if theirs is not None else -(2**31)
            if ours is None and _nullable(t) and theirs in ("", b"", []):
                continue
            assert ours == theirs, f"{p}: default {ours!r}, Kafka's {theirs!r}"
            assert struct.values._field_defaults[struct.names[i]] == struct.defaults[i]

    check(_ours(k, v, kind).SCHEMA, _kp(k, v, kind)._struct.untagged_fields(v), "")


def _cross_check(k: int, v: int, kind: str, value: Any) -> None:
    ours = _ours(k, v, kind)
    kp = _kp(k, v, kind)
    names = NAMES[(k, kind)]
    kp_fields = kp._struct.untagged_fields(v)
    want = plain(ours.SCHEMA, value)

    # ours -> kafka-python
    data = ours(*value).encode()
    theirs = kp.decode(data)
    assert plain(ours.SCHEMA, from_kp(ours.SCHEMA, kp_fields, theirs, v, names)) == want

    # kafka-python -> ours
    kp_obj = kp(**to_kp(ours.SCHEMA, kp_fields, value, v, names))
    kp_data = kp_obj.encode()
    assert plain(ours.SCHEMA, ours.decode(kp_data)) == want
    assert isinstance(ours.decode(kp_data), ours)

    # the bytes themselves
    assert data == kp_data


@pytest.mark.parametrize("variant", ["rich", "sparse", "empty"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_golden_both_ways(case: tuple[int, int, str], variant: str) -> None:
    k, v, kind = case
    _cross_check(k, v, kind, sample(k, v, kind, variant))


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{ApiKey(p[0]).name}-v{p[1]}")
def test_request_frame_matches_peer(pair: tuple[int, int]) -> None:
    """Whole request frames (size, header v1, body) are byte-identical, and our server side
    parses kafka-python's frame back into the same header and request."""
    k, v = pair
    value = sample(k, v, "request", "rich")
    req = REQUESTS[pair](*value)
    kp_cls = _kp(k, v, "request")
    kp_req = kp_cls(**to_kp(req.SCHEMA, kp_cls._struct.untagged_fields(v), value, v, NAMES[(k, "request")]))
    for cid, client_id in ((0, "hmbclient"), (2**31 - 1, None), (12345, "clïent-✓"), (-1, "")):
        ours = b"".join(encode_request(req, cid, client_id))
        kp_req.with_header(correlation_id=cid, client_id=client_id)
        theirs = kp_req.encode(header=True, framed=True)
        assert ours == theirs, (cid, client_id)

        server = ServerConnection()
        server.receive_data(theirs)
        ev = server.next_request()
        assert (ev.header.api_key, ev.header.api_version, ev.header.correlation_id, ev.header.client_id) == (k, v, cid, client_id)
        assert plain(req.SCHEMA, ev.request) == plain(req.SCHEMA, value)


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{ApiKey(p[0]).name}-v{p[1]}")
def test_response_frame_matches_peer(pair: tuple[int, int]) -> None:
    """Whole response frames (size, correlation id, body) match; our client decodes kafka-python's."""
    k, v = pair
    value = sample(k, v, "response", "rich")
    resp_cls = RESPONSES[pair]
    resp = resp_cls(*value)
    kp_cls = _kp(k, v, "response")
    kp_resp = kp_cls(**to_kp(resp_cls.SCHEMA, kp_cls._struct.untagged_fields(v), value, v, NAMES[(k, "response")]))
    kp_resp.with_header(correlation_id=77)
    theirs = kp_resp.encode(header=True, framed=True)
    assert b"".join(ServerConnection.encode_response(77, resp)) == theirs

    client = ClientConnection(client_id="golden")
    client.send_request(REQUESTS[pair](*sample(k, v, "request", "sparse")), correlation_id=77)
    assert client.next_response() is NEED_DATA
    client.receive_data(theirs)
    cid, got = client.next_response()
    assert cid == 77 and isinstance(got, resp_cls)
    assert plain(resp_cls.SCHEMA, got) == plain(resp_cls.SCHEMA, value)


@pytest.mark.parametrize(
    "api_key,version,cid,client_id",
    [(0, 0, 0, "x"), (3, 8, 2**31 - 1, None), (18, 2, 9, "librdkafka"), (1, 10, -(2**31), ""), (19, 4, 5, "ñ" * 200)],
)
def test_request_header_matches_peer(api_key: int, version: int, cid: int, client_id: str | None) -> None:
    """Our request header (api_key, api_version, correlation_id, client_id) is kafka-python's
    header v1, and the size prefix counts header + body."""
    req = REQUESTS[(api_key, version)](*sample(api_key, version, "request", "empty"))
    frame = b"".join(encode_request(req, cid, client_id))
    hdr = KpRequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=cid, client_id=client_id).encode(flexible=False)
    assert frame[4 : 4 + len(hdr)] == hdr
    assert frame[4 + len(hdr) :] == req.encode()
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4


# --- property-based cross-check: random values from our tree, both ways -----------------------


def _strategy(t: Type) -> st.SearchStrategy[Any]:
    if isinstance(t, Struct):
        return st.tuples(*[_strategy(ft) for _n, ft in t.fields]).map(lambda vals, t=t: t.values(*vals))
    if isinstance(t, Array):
        s = st.lists(_strategy(t.item), max_size=3)
        return st.one_of(st.none(), s) if t.nullable else s
    bounds = {id(Int8): 7, id(Int16): 15, id(Int32): 31, id(Int64): 63}
    if id(t) in bounds:
        b = bounds[id(t)]
        return st.integers(-(2**b), 2**b - 1)
    if t is Boolean:
        return st.booleans()
    if t is Float64:
        return st.floats(allow_nan=False)
    if t in (String, NullableString):
        s = st.text(max_size=20)
        return st.one_of(st.none(), s) if t is NullableString else s
    if t in (Bytes, NullableBytes, Records):
        s = st.binary(max_size=40)
        return st.one_of(st.none(), s) if t is not Bytes else s
    raise AssertionError(t)


@pytest.mark.parametrize("case", CASES, ids=_ids)
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_golden_random_values(case: tuple[int, int, str], data: st.DataObject) -> None:
    k, v, kind = case
    value = data.draw(_strategy(_ours(k, v, kind).SCHEMA))
    if k == ApiKey.API_VERSIONS and kind == "response" and v > 0:
        value = value._replace(error_code=0)
    _cross_check(k, v, kind, value)
