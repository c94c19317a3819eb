"""Every (API, version) hmbclient implements, registered in ``base.REQUESTS``/``RESPONSES``.

Legacy set (HMB / Kafka 0.8-0.10): Produce v0-2, Fetch v0-3, ListOffsets v0-1, Metadata v0-1,
OffsetCommit v0-2, OffsetFetch v0-1, FindCoordinator (GroupCoordinator) v0, ApiVersions v0-1.
Modern set (Kafka 2.1 - 4.x, Tansu; non-flexible versions only): Produce v3-7, Fetch v4-10,
ListOffsets v1-5, Metadata v1-8, OffsetCommit v2-7, OffsetFetch v1-5, FindCoordinator v0-2.
CreateTopics v0-4 for admin/test use; InitProducerId v0-1 for idempotent clients;
DescribeConfigs v1-2, AlterConfigs v0-1, IncrementalAlterConfigs v0 (:mod:`.configs`) for admin
tools; DeleteTopics v0-3, DeleteRecords v0-2, DescribeLogDirs v1, CreatePartitions v0-1,
ElectLeaders v0-1, OffsetDelete v0 and DescribeCluster v0-1 (flexible) in :mod:`.admin`;
AlterPartitionReassignments v0-1 and ListPartitionReassignments v0 (flexible) in :mod:`.reassign`.
Inter-broker (:mod:`.cluster`): LeaderAndIsr v0-1, StopReplica v0, UpdateMetadata v0-5,
ControlledShutdown v1-2, OffsetForLeaderEpoch v0-3.
Group membership (:mod:`.group`): JoinGroup v0-5, Heartbeat v0-3, LeaveGroup v0-3, SyncGroup
v0-3, DescribeGroups v0-4, ListGroups v0-2, DeleteGroups v0-1; the "consumer" embedded
protocol inside them (:mod:`.consumer_protocol`, not an API: no key, not registered).
SASL (:mod:`.sasl`): SaslHandshake v0-1, SaslAuthenticate v0-1.
Transactions (:mod:`.txn`): AddPartitionsToTxn v0-2, AddOffsetsToTxn v0-2, EndTxn v0-2,
WriteTxnMarkers v0, TxnOffsetCommit v0-2; DescribeTransactions v0 and ListTransactions v0-1
(flexible: request header v2 / response header v1, see :mod:`hmbclient.protocol.frame`).
Each module maps version -> class, e.g. ``FetchRequest[4]``.
"""

from hmbclient.protocol.api import (
    quotas as quotas,  # registers DescribeClientQuotas / AlterClientQuotas
)
from hmbclient.protocol.api import (
    reassign as reassign,  # registers AlterPartitionReassignments / ListPartitionReassignments
)
from hmbclient.protocol.api.admin import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from hmbclient.protocol.api.base import (
    REQUESTS,
    RESPONSES,
    ApiKey,
    Request,
    Response,
    request_class,
    response_class,
    supported_versions,
)
from hmbclient.protocol.api.cluster import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from hmbclient.protocol.api.configs import DescribeConfigsRequest, DescribeConfigsResponse
from hmbclient.protocol.api.consumer_group import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from hmbclient.protocol.api.consumer_protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
    decode_member_assignment,
    decode_member_metadata,
)
from hmbclient.protocol.api.fetch import FetchRequest, FetchResponse
from hmbclient.protocol.api.group import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from hmbclient.protocol.api.list_offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from hmbclient.protocol.api.metadata import MetadataRequest, MetadataResponse
from hmbclient.protocol.api.offsets import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupCoordinatorRequest,
    GroupCoordinatorResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from hmbclient.protocol.api.produce import ProduceRequest, ProduceResponse
from hmbclient.protocol.api.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from hmbclient.protocol.api.txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)

__all__ = [
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "REQUESTS",
    "RESPONSES",
    "ApiKey",
    "Request",
    "Response",
    "request_class",
    "response_class",
    "supported_versions",
    "ProduceRequest",
    "ProduceResponse",
    "FetchRequest",
    "FetchResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "LATEST_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "GroupCoordinatorRequest",
    "GroupCoordinatorResponse",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "LeaderAndIsrRequest",
    "LeaderAndIsrResponse",
    "StopReplicaRequest",
    "StopReplicaResponse",
    "UpdateMetadataRequest",
    "UpdateMetadataResponse",
    "ControlledShutdownRequest",
    "ControlledShutdownResponse",
    "OffsetForLeaderEpochRequest",
    "OffsetForLeaderEpochResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "ConsumerProtocolMemberMetadata",
    "ConsumerProtocolMemberAssignment",
    "decode_member_metadata",
    "decode_member_assignment",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "EndTxnRequest",
    "EndTxnResponse",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersResponse",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
]
