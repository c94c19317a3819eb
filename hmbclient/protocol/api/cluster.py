"""Inter-broker APIs, as a ZooKeeper-era controller and its brokers speak them (non-flexible
versions only): LeaderAndIsr (4) v0-1, StopReplica (5) v0, UpdateMetadata (6) v0-5,
ControlledShutdown (7) v1-2, OffsetForLeaderEpoch (23) v0-3.

The controller (the broker holding /controller) sends LeaderAndIsr to the replicas of the
partitions whose leader or ISR changed, UpdateMetadata to every live broker, StopReplica to
replicas that must stop fetching (and delete the log if ``delete_partitions``); a broker going
down cleanly asks for ControlledShutdown and is answered with the partitions it still leads.
Followers ask the leader OffsetForLeaderEpoch to find where to truncate (KIP-101). Every
request carries ``controller_epoch`` so a broker can refuse a stale controller
(STALE_CONTROLLER_EPOCH).

LeaderAndIsr: v0 controller_id, controller_epoch, ungrouped_partition_states [topic, partition,
controller_epoch, leader, leader_epoch, isr, zk_version, replicas], live_leaders [broker_id,
host_name, port]; v1 + is_new per partition. Response: error_code, partition_errors [topic,
partition, error_code] (v1 only adds KAFKA_STORAGE_ERROR as a possible code).
StopReplica v0: controller_id, controller_epoch, delete_partitions, ungrouped_partitions
[topic, partition]. Response: error_code, partition_errors [topic, partition, error_code].
UpdateMetadata: v0 controller_id, controller_epoch, ungrouped_partition_states (as in
LeaderAndIsr v0), live_brokers [id, host, port] (one plaintext endpoint per broker); v1 a broker
has endpoints [port, host, security_protocol]; v2 + rack; v3 + endpoint listener name; v4 +
offline_replicas per partition; v5 + broker_epoch and partitions grouped by topic
(topic_states [topic, partition_states]). Response (all versions): error_code.
ControlledShutdown v1: broker_id; v2 + broker_epoch. Response: error_code,
remaining_partitions [topic, partition]. v0 is left out: its request header has no client_id
(a non-standard header our frame codec does not parse), and Kafka 0.9+ clients never send it.
OffsetForLeaderEpoch: request topics [topic, partitions [partition, leader_epoch]], v2 +
current_leader_epoch (fencing), v3 + replica_id first (-2: a debugging client, -1 a consumer, a
broker id for a follower). Response topics [topic, partitions [error_code, partition,
end_offset]], v1 + leader_epoch, v2 + throttle_time_ms; v3 same as v2.

Names follow Kafka's JSON message schemas except ``topic``/``partition`` (Kafka: TopicName,
PartitionIndex), as everywhere in this package, ``zk_version`` (the partition state znode's
version, which Kafka's later LeaderAndIsr schema calls PartitionEpoch) and UpdateMetadata v0's
``host``/``port`` (Kafka: V0Host, V0Port).
"""

from __future__ import annotations

from hmbclient.protocol.api.base import ApiKey, define
from hmbclient.protocol.types import (
    Array,
    Boolean,
    FieldSpec,
    Int16,
    Int32,
    Int64,
    NullableString,
    String,
)

# --- LeaderAndIsr ------------------------------------------------------------------------------
# The partition state shared by LeaderAndIsr and UpdateMetadata (v0-4: with the topic name).
_state_v0: list[FieldSpec] = [
    ("topic", String),
    ("partition", Int32),
    ("controller_epoch", Int32),
    ("leader", Int32),
    ("leader_epoch", Int32),
    ("isr", Array(Int32)),
    ("zk_version", Int32),
    ("replicas", Array(Int32)),
]
_lai_live_leaders = ("live_leaders", Array(("broker_id", Int32), ("host_name", String), ("port", Int32), name="live_leaders"))
_lai_v0 = [
    ("controller_id", Int32),
    ("controller_epoch", Int32),
    ("ungrouped_partition_states", Array(*_state_v0, name="ungrouped_partition_states")),
    _lai_live_leaders,
]
_lai_v1 = [
    ("controller_id", Int32),
    ("controller_epoch", Int32),
    ("ungrouped_partition_states", Array(*_state_v0, ("is_new", Boolean), name="ungrouped_partition_states")),
    _lai_live_leaders,
]
_lair_v0: list[FieldSpec] = [
    ("error_code", Int16),
    ("partition_errors", Array(("topic", String), ("partition", Int32), ("error_code", Int16), name="partition_errors")),
]

LeaderAndIsrRequest = {}
LeaderAndIsrResponse = {}
for _v, _rq, _rs in ((0, _lai_v0, _lair_v0), (1, _lai_v1, _lair_v0)):
    LeaderAndIsrRequest[_v], LeaderAndIsrResponse[_v] = define(ApiKey.LEADER_AND_ISR, _v, _rq, _rs)

# --- StopReplica -------------------------------------------------------------------------------
_sr_v0: list[FieldSpec] = [
    ("controller_id", Int32),
    ("controller_epoch", Int32),
    ("delete_partitions", Boolean),
    ("ungrouped_partitions", Array(("topic", String), ("partition", Int32), name="ungrouped_partitions")),
]
_srr_v0: list[FieldSpec] = [
    ("error_code", Int16),
    ("partition_errors", Array(("topic", String), ("partition", Int32), ("error_code", Int16), name="partition_errors")),
]

StopReplicaRequest = {}
StopReplicaResponse = {}
StopReplicaRequest[0], StopReplicaResponse[0] = define(ApiKey.STOP_REPLICA, 0, _sr_v0, _srr_v0)

# --- UpdateMetadata ----------------------------------------------------------------------------
_um_states_v0 = ("ungrouped_partition_states", Array(*_state_v0, name="ungrouped_partition_states"))
_um_states_v4 = ("ungrouped_partition_states", Array(*_state_v0, ("offline_replicas", Array(Int32)), name="ungrouped_partition_states"))
_um_topic_states_v5 = (
    "topic_states",
    Array(
        ("topic", String),
        ("partition_states", Array(*_state_v0[1:], ("offline_replicas", Array(Int32)), name="partition_states")),
        name="topic_states",
    ),
)
#: UpdateMetadata v1+ endpoint ``security_protocol``: Kafka's SecurityProtocol ids.
SECURITY_PROTOCOL_IDS: dict[str, int] = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
SECURITY_PROTOCOL_NAMES: dict[int, str] = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}

_ep_v1 = ("endpoints", Array(("port", Int32), ("host", String), ("security_protocol", Int16), name="endpoints"))
_ep_v3 = ("endpoints", Array(("port", Int32), ("host", String), ("listener", String), ("security_protocol", Int16), name="endpoints"))
_um_brokers_v0 = ("live_brokers", Array(("id", Int32), ("host", String), ("port", Int32), name="live_brokers"))
_um_brokers_v1 = ("live_brokers", Array(("id", Int32), _ep_v1, name="live_brokers"))
_um_brokers_v2 = ("live_brokers", Array(("id", Int32), _ep_v1, ("rack", NullableString), name="live_brokers"))
_um_brokers_v3 = ("live_brokers", Array(("id", Int32), _ep_v3, ("rack", NullableString), name="live_brokers"))

_um_v0: list[FieldSpec] = [("controller_id", Int32), ("controller_epoch", Int32), _um_states_v0, _um_brokers_v0]
_um_v1: list[FieldSpec] = [("controller_id", Int32), ("controller_epoch", Int32), _um_states_v0, _um_brokers_v1]
_um_v2: list[FieldSpec] = [("controller_id", Int32), ("controller_epoch", Int32), _um_states_v0, _um_brokers_v2]
_um_v3: list[FieldSpec] = [("controller_id", Int32), ("controller_epoch", Int32), _um_states_v0, _um_brokers_v3]
_um_v4: list[FieldSpec] = [("controller_id", Int32), ("controller_epoch", Int32), _um_states_v4, _um_brokers_v3]
_um_v5: list[FieldSpec] = [("controller_id", Int32), ("controller_epoch", Int32), ("broker_epoch", Int64, -1), _um_topic_states_v5, _um_brokers_v3]
_umr_v0: list[FieldSpec] = [("error_code", Int16)]

UpdateMetadataRequest = {}
UpdateMetadataResponse = {}
for _v, _rq in ((0, _um_v0), (1, _um_v1), (2, _um_v2), (3, _um_v3), (4, _um_v4), (5, _um_v5)):
    UpdateMetadataRequest[_v], UpdateMetadataResponse[_v] = define(ApiKey.UPDATE_METADATA, _v, _rq, _umr_v0)

# --- ControlledShutdown (v0 has a non-standard header: not implemented) ---------------------------
_cs_v1: list[FieldSpec] = [("broker_id", Int32)]
_cs_v2 = [*_cs_v1, ("broker_epoch", Int64, -1)]
_csr_v1: list[FieldSpec] = [
    ("error_code", Int16),
    ("remaining_partitions", Array(("topic", String), ("partition", Int32), name="remaining_partitions")),
]

ControlledShutdownRequest = {}
ControlledShutdownResponse = {}
for _v, _rq in ((1, _cs_v1), (2, _cs_v2)):
    ControlledShutdownRequest[_v], ControlledShutdownResponse[_v] = define(ApiKey.CONTROLLED_SHUTDOWN, _v, _rq, _csr_v1)

# --- OffsetForLeaderEpoch ----------------------------------------------------------------------
_ofle_topics_v0 = ("topics", Array(("topic", String), ("partitions", Array(("partition", Int32), ("leader_epoch", Int32), name="partitions")), name="topics"))
_ofle_topics_v2 = (
    "topics",
    Array(
        ("topic", String),
        ("partitions", Array(("partition", Int32), ("current_leader_epoch", Int32, -1), ("leader_epoch", Int32), name="partitions")),
        name="topics",
    ),
)
_ofle_v0: list[FieldSpec] = [_ofle_topics_v0]
_ofle_v2: list[FieldSpec] = [_ofle_topics_v2]
_ofle_v3: list[FieldSpec] = [("replica_id", Int32, -2), _ofle_topics_v2]

_ofler_part_v0 = ("partitions", Array(("error_code", Int16), ("partition", Int32), ("end_offset", Int64, -1), name="partitions"))
_ofler_part_v1 = ("partitions", Array(("error_code", Int16), ("partition", Int32), ("leader_epoch", Int32, -1), ("end_offset", Int64, -1), name="partitions"))
_ofler_v0: list[FieldSpec] = [("topics", Array(("topic", String), _ofler_part_v0, name="topics"))]
_ofler_v1: list[FieldSpec] = [("topics", Array(("topic", String), _ofler_part_v1, name="topics"))]
_ofler_v2 = [("throttle_time_ms", Int32), *_ofler_v1]

OffsetForLeaderEpochRequest = {}
OffsetForLeaderEpochResponse = {}
for _v, _rq, _rs in ((0, _ofle_v0, _ofler_v0), (1, _ofle_v0, _ofler_v1), (2, _ofle_v2, _ofler_v2), (3, _ofle_v3, _ofler_v2)):
    OffsetForLeaderEpochRequest[_v], OffsetForLeaderEpochResponse[_v] = define(ApiKey.OFFSET_FOR_LEADER_EPOCH, _v, _rq, _rs)
