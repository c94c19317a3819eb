"""One error tree for the whole SDK.

    HmbError
    ├── ProtocolError          malformed bytes (local: we produced/would produce them;
    │   └── RemoteProtocolError     remote: a peer sent them; decided at the inbound boundary)
    ├── BrokerError            one subclass per Kafka error code: errno, retriable, invalid_metadata
    ├── ConfigError            unknown or invalid configuration keys / values
    ├── ConsumerTimeoutError   a KafkaStream saw no message within consumer_timeout_ms
    ├── CoordinationError      ZooKeeper trouble in the consumer group machinery
    ├── StorageError           the embedded broker's log (bad segment, failed recovery)
    ├── ConnectionError_       cannot reach / lost a broker (KafkaConnectionError)
    └── UnsupportedByBroker    the broker (or its dialect) cannot serve this API

A request that gets no answer in time raises ``RequestTimedOutError``: the class of Kafka error
7 (REQUEST_TIMED_OUT), raised locally too with a message naming the API and the broker, so one
``except`` covers a broker-side and a client-side timeout.

``for_code(errno)`` maps any int16 error code to a class; unknown codes map to a generated
subclass of :class:`UnknownBrokerError`, so callers can always ``raise for_code(c)(...)``.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "HmbError",
    "ProtocolError",
    "RemoteProtocolError",
    "CorruptRecordError",
    "BrokerError",
    "UnknownBrokerError",
    "ConfigError",
    "ConsumerTimeoutError",
    "CoordinationError",
    "StorageError",
    "KafkaConnectionError",
    "UnsupportedByBroker",
    "ProducerClosedError",
    "IllegalStateError",
    "ConsumerClosedError",
    "QueueFullError",
    "UnresolvedSequenceError",
    "TransactionStateError",
    "TransactionAbortableError",
    "TransactionTimedOutError",
    "TransactionFatalError",
    "for_code",
    "raise_for_code",
    "ERRORS_BY_CODE",
    "ErrorCode",
]


class HmbError(Exception):
    """Root of every error hmbclient raises on purpose."""

    retriable = False
    invalid_metadata = False


class ProtocolError(HmbError):
    """Bytes that do not follow the Kafka wire protocol (or a frame over the size limit)."""


class RemoteProtocolError(ProtocolError):
    """A peer sent malformed bytes (the inbound boundary re-raises ProtocolError as this)."""


class CorruptRecordError(ProtocolError):
    """A message/record batch whose CRC does not match or whose layout is inconsistent."""


class ConfigError(HmbError, ValueError):
    """An unknown configuration key, or a value of the wrong type or range."""


class ConsumerTimeoutError(HmbError):
    """A KafkaStream had no message for consumer_timeout_ms."""


class CoordinationError(HmbError):
    """ZooKeeper coordination failed (registration, ownership claims, offsets)."""


class StorageError(HmbError):
    """The embedded broker's log is damaged or cannot be used."""


class KafkaConnectionError(HmbError):
    """A broker could not be reached, or the connection was lost."""

    retriable = True
    invalid_metadata = True


class UnsupportedByBroker(HmbError):
    """The broker, or the dialect chosen for it, cannot serve this API."""


class ProducerClosedError(HmbError):
    """send() after close()."""


class IllegalStateError(HmbError):
    """The call does not fit the client's state: e.g. poll() with neither a subscription nor
    an assignment, subscribe() after assign(), commit() without a group.id."""


class ConsumerClosedError(IllegalStateError):
    """A Consumer's method called after close()."""


class UnresolvedSequenceError(HmbError):
    """An idempotent producer could not tell whether the broker stored this batch (an answer
    was lost, then the producer had to take a new producer id/epoch), so it did not send it
    again: under the new identity the broker could not recognise a copy it already holds.
    The batch's messages are in the log once or not at all; never twice."""


class TransactionStateError(HmbError):
    """A transactional call in a state that does not allow it (``begin_transaction()`` twice,
    ``send()`` outside a transaction, ``commit_transaction()`` before ``init_transactions()``,
    any transactional call on a producer without ``transactional.id``). Nothing was done; the
    producer's state is unchanged. (Java raises IllegalStateException here.)"""


class TransactionAbortableError(HmbError):
    """The current transaction cannot commit (a batch or an offset commit of it failed, see
    ``__cause__``): call ``abort_transaction()``, then begin a new one. Nothing of the
    transaction becomes visible to ``read_committed`` readers."""


class TransactionFatalError(HmbError):
    """The transactional producer cannot go on (see ``__cause__``: an authorization failure, a
    broker that cannot do transactions, an epoch the coordinator no longer accepts): close it.
    A fenced producer raises :class:`ProducerFencedError` (Kafka error 90) instead."""


class TransactionTimedOutError(TransactionFatalError):
    """The transaction was open longer than ``transaction.timeout.ms``; the coordinator aborted
    it and fenced this producer's epoch (its data is never visible to ``read_committed``
    readers). Close the producer; a new one with the same transactional id goes on (hmbclient
    cannot re-initialise in place without risking fencing a newer instance: that takes
    InitProducerId v3+ with the current epoch, KIP-588)."""


class QueueFullError(HmbError, BufferError):
    """The async producer's bounded queue stayed full past queue_enqueue_timeout_ms (also a
    BufferError, what confluent-kafka's produce() raises on a full queue)."""

    retriable = True


class BrokerError(HmbError):
    """An error code returned by a broker. Subclasses set errno/retriable/invalid_metadata."""

    errno: int = -1
    message: str = "UNKNOWN"
    description: str = ""

    def __str__(self) -> str:
        base = f"[Error {self.errno}] {self.message}"
        extra = super().__str__()
        return f"{base}: {extra}" if extra else base


class UnknownBrokerError(BrokerError):
    """An error code this version of hmbclient has no name for."""


class ErrorCode(IntEnum):
    """Every Kafka error code by its protocol name: the one table of codes (the broker answers
    with these, the client maps them to classes with :func:`for_code`)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_FOR_PARTITION = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119


# (code, retriable, invalid_metadata, description)
_TABLE: tuple[tuple[ErrorCode, bool, bool, str], ...] = (
    (ErrorCode.UNKNOWN_SERVER_ERROR, False, False, "The server experienced an unexpected error."),
    (ErrorCode.OFFSET_OUT_OF_RANGE, False, False, "The requested offset is not within the range of offsets maintained by the server."),
    (ErrorCode.CORRUPT_MESSAGE, True, False, "The message contents does not match the message CRC or the message is otherwise corrupt."),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True, True, "This server does not host this topic-partition."),
    (ErrorCode.INVALID_FETCH_SIZE, False, False, "The requested fetch size is invalid."),
    (ErrorCode.LEADER_NOT_AVAILABLE, True, True, "There is no leader for this topic-partition."),
    (ErrorCode.NOT_LEADER_FOR_PARTITION, True, True, "This server is not the leader for that topic-partition."),
    (ErrorCode.REQUEST_TIMED_OUT, True, False, "The request timed out."),
    (ErrorCode.BROKER_NOT_AVAILABLE, False, False, "The broker is not available."),
    (ErrorCode.REPLICA_NOT_AVAILABLE, True, True, "The replica is not available for the requested topic-partition."),
    (ErrorCode.MESSAGE_TOO_LARGE, False, False, "The request included a message larger than the max message size the server will accept."),
    (ErrorCode.STALE_CONTROLLER_EPOCH, False, False, "The controller moved to another broker."),
    (ErrorCode.OFFSET_METADATA_TOO_LARGE, False, False, "The metadata field of the offset request was too large."),
    (ErrorCode.NETWORK_EXCEPTION, True, True, "The server disconnected before a response was received."),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True, False, "The coordinator is loading and hence can't process requests."),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, True, False, "The coordinator is not available."),
    (ErrorCode.NOT_COORDINATOR, True, False, "This is not the correct coordinator."),
    (ErrorCode.INVALID_TOPIC_EXCEPTION, False, False, "The request attempted to perform an operation on an invalid topic."),
    (ErrorCode.RECORD_LIST_TOO_LARGE, False, False, "The request included message batch larger than the configured segment size on the server."),
    (ErrorCode.NOT_ENOUGH_REPLICAS, True, False, "Messages are rejected since there are fewer in-sync replicas than required."),
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True, False, "Messages are written to the log, but to fewer in-sync replicas than required."),
    (ErrorCode.INVALID_REQUIRED_ACKS, False, False, "Produce request specified an invalid value for required acks."),
    (ErrorCode.ILLEGAL_GENERATION, False, False, "Specified group generation id is not valid."),
    (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, False, False, "The group member's supported protocols are incompatible with those of existing members."),
    (ErrorCode.INVALID_GROUP_ID, False, False, "The configured groupId is invalid."),
    (ErrorCode.UNKNOWN_MEMBER_ID, False, False, "The coordinator is not aware of this member."),
    (ErrorCode.INVALID_SESSION_TIMEOUT, False, False, "The session timeout is not within the range allowed by the broker."),
    (ErrorCode.REBALANCE_IN_PROGRESS, False, False, "The group is rebalancing, so a rejoin is needed."),
    (ErrorCode.INVALID_COMMIT_OFFSET_SIZE, False, False, "The committing offset data size is not valid."),
    (ErrorCode.TOPIC_AUTHORIZATION_FAILED, False, False, "Topic authorization failed."),
    (ErrorCode.GROUP_AUTHORIZATION_FAILED, False, False, "Group authorization failed."),
    (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, False, False, "Cluster authorization failed."),
    (ErrorCode.INVALID_TIMESTAMP, False, False, "The timestamp of the message is out of acceptable range."),
    (ErrorCode.UNSUPPORTED_SASL_MECHANISM, False, False, "The broker does not support the requested SASL mechanism."),
    (ErrorCode.ILLEGAL_SASL_STATE, False, False, "Request is not valid given the current SASL state."),
    (ErrorCode.UNSUPPORTED_VERSION, False, False, "The version of API is not supported."),
    (ErrorCode.TOPIC_ALREADY_EXISTS, False, False, "Topic with this name already exists."),
    (ErrorCode.INVALID_PARTITIONS, False, False, "Number of partitions is below 1."),
    (ErrorCode.INVALID_REPLICATION_FACTOR, False, False, "Replication factor is below 1 or larger than the number of available brokers."),
    (ErrorCode.INVALID_REPLICA_ASSIGNMENT, False, False, "Replica assignment is invalid."),
    (ErrorCode.INVALID_CONFIG, False, False, "Configuration is invalid."),
    (ErrorCode.NOT_CONTROLLER, True, False, "This is not the correct controller for this cluster."),
    (ErrorCode.INVALID_REQUEST, False, False, "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker."),
    (ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, False, False, "The message format version on the broker does not support the request."),
    (ErrorCode.POLICY_VIOLATION, False, False, "Request parameters do not satisfy the configured policy."),
    (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False, False, "The broker received an out of order sequence number."),
    (ErrorCode.DUPLICATE_SEQUENCE_NUMBER, False, False, "The broker received a duplicate sequence number."),
    (ErrorCode.INVALID_PRODUCER_EPOCH, False, False, "Producer attempted to produce with an old epoch."),
    (ErrorCode.INVALID_TXN_STATE, False, False, "The producer attempted a transactional operation in an invalid state."),
    (ErrorCode.INVALID_PRODUCER_ID_MAPPING, False, False, "The producer attempted to use a producer id which is not currently assigned to its transactional id."),
    (ErrorCode.INVALID_TRANSACTION_TIMEOUT, False, False, "The transaction timeout is larger than the maximum value allowed by the broker."),
    (ErrorCode.CONCURRENT_TRANSACTIONS, True, False, "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing."),
    (ErrorCode.TRANSACTION_COORDINATOR_FENCED, False, False, "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator."),
    (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, False, False, "Transactional Id authorization failed."),
    (ErrorCode.SECURITY_DISABLED, False, False, "Security features are disabled."),
    (ErrorCode.OPERATION_NOT_ATTEMPTED, False, False, "The broker did not attempt to execute this operation."),
    (ErrorCode.KAFKA_STORAGE_ERROR, True, True, "Disk error when trying to access log file on the disk."),
    (ErrorCode.LOG_DIR_NOT_FOUND, False, False, "The user-specified log directory is not found in the broker config."),
    (ErrorCode.SASL_AUTHENTICATION_FAILED, False, False, "SASL Authentication failed."),
    (ErrorCode.UNKNOWN_PRODUCER_ID, False, False, "This exception is raised by the broker if it could not locate the producer metadata."),
    (ErrorCode.REASSIGNMENT_IN_PROGRESS, False, False, "A partition reassignment is in progress."),
    (ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, False, False, "Delegation Token feature is not enabled."),
    (ErrorCode.DELEGATION_TOKEN_NOT_FOUND, False, False, "Delegation Token is not found on server."),
    (ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, False, False, "Specified Principal is not valid Owner/Renewer."),
    (ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, False, False, "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels."),
    (ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, False, False, "Delegation Token authorization failed."),
    (ErrorCode.DELEGATION_TOKEN_EXPIRED, False, False, "Delegation Token is expired."),
    (ErrorCode.INVALID_PRINCIPAL_TYPE, False, False, "Supplied principalType is not supported."),
    (ErrorCode.NON_EMPTY_GROUP, False, False, "The group is not empty."),
    (ErrorCode.GROUP_ID_NOT_FOUND, False, False, "The group id does not exist."),
    (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, True, False, "The fetch session ID was not found."),
    (ErrorCode.INVALID_FETCH_SESSION_EPOCH, True, False, "The fetch session epoch is invalid."),
    (ErrorCode.LISTENER_NOT_FOUND, True, True, "There is no listener on the leader broker that matches the listener on which metadata request was processed."),
    (ErrorCode.TOPIC_DELETION_DISABLED, False, False, "Topic deletion is disabled."),
    (ErrorCode.FENCED_LEADER_EPOCH, True, True, "The leader epoch in the request is older than the epoch on the broker."),
    (ErrorCode.UNKNOWN_LEADER_EPOCH, True, True, "The leader epoch in the request is newer than the epoch on the broker."),
    (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, False, False, "The requesting client does not support the compression type of given partition."),
    (ErrorCode.STALE_BROKER_EPOCH, False, False, "Broker epoch has changed."),
    (ErrorCode.OFFSET_NOT_AVAILABLE, True, True, "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing."),
    (ErrorCode.MEMBER_ID_REQUIRED, False, False, "The group member needs to have a valid member id before actually entering a consumer group."),
    (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, True, True, "The preferred leader was not available."),
    (ErrorCode.GROUP_MAX_SIZE_REACHED, False, False, "The consumer group has reached its max size."),
    (ErrorCode.FENCED_INSTANCE_ID, False, False, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."),
    (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, True, True, "Eligible topic partition leaders are not available."),
    (ErrorCode.ELECTION_NOT_NEEDED, True, True, "Leader election not needed for topic partition."),
    (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, False, False, "No partition reassignment is in progress."),
    (ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, False, False, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (ErrorCode.INVALID_RECORD, False, False, "This record has failed the validation on broker and hence will be rejected."),
    (ErrorCode.UNSTABLE_OFFSET_COMMIT, True, False, "There are unstable offsets that need to be cleared."),
    (ErrorCode.THROTTLING_QUOTA_EXCEEDED, True, False, "The throttling quota has been exceeded."),
    (ErrorCode.PRODUCER_FENCED, False, False, "There is a newer producer with the same transactionalId which fences the current one."),
    (ErrorCode.RESOURCE_NOT_FOUND, False, False, "A request illegally referred to a resource that does not exist."),
    (ErrorCode.DUPLICATE_RESOURCE, False, False, "A request illegally referred to the same resource twice."),
    (ErrorCode.UNACCEPTABLE_CREDENTIAL, False, False, "Requested credential would not meet criteria for acceptability."),
    (ErrorCode.INCONSISTENT_VOTER_SET, False, False, "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters."),
    (ErrorCode.INVALID_UPDATE_VERSION, False, False, "The given update version was invalid."),
    (ErrorCode.FEATURE_UPDATE_FAILED, False, False, "Unable to update finalized features due to an unexpected server error."),
    (ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE, False, False, "Request principal deserialization failed during forwarding."),
    (ErrorCode.SNAPSHOT_NOT_FOUND, False, False, "Requested snapshot was not found."),
    (ErrorCode.POSITION_OUT_OF_RANGE, False, False, "Requested position is not greater than or equal to zero, and less than the size of the snapshot."),
    (ErrorCode.UNKNOWN_TOPIC_ID, True, True, "This server does not host this topic ID."),
    (ErrorCode.DUPLICATE_BROKER_REGISTRATION, False, False, "This broker ID is already in use."),
    (ErrorCode.BROKER_ID_NOT_REGISTERED, False, False, "The given broker ID was not registered."),
    (ErrorCode.INCONSISTENT_TOPIC_ID, True, True, "The log's topic ID did not match the topic ID in the request."),
    (ErrorCode.INCONSISTENT_CLUSTER_ID, False, False, "The clusterId in the request does not match that found on the server."),
    (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, False, False, "The transactionalId could not be found."),
    (ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, True, False, "The fetch session encountered inconsistent topic ID usage."),
    (ErrorCode.INELIGIBLE_REPLICA, False, False, "The new ISR contains at least one ineligible replica."),
    (ErrorCode.NEW_LEADER_ELECTED, False, False, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    (ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE, False, False, "The requested offset is moved to tiered storage."),
    (ErrorCode.FENCED_MEMBER_EPOCH, False, False, "The member epoch is fenced by the group coordinator."),
    (ErrorCode.UNRELEASED_INSTANCE_ID, False, False, "The instance ID is still used by another member in the consumer group."),
    (ErrorCode.UNSUPPORTED_ASSIGNOR, False, False, "The assignor or its version range is not supported by the consumer group."),
    (ErrorCode.STALE_MEMBER_EPOCH, False, False, "The member epoch is stale."),
    (ErrorCode.MISMATCHED_ENDPOINT_TYPE, False, False, "The request was sent to an endpoint of the wrong type."),
    (ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, False, False, "This endpoint type is not supported yet."),
    (ErrorCode.UNKNOWN_CONTROLLER_ID, False, False, "This controller ID is not known."),
    (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, False, False, "Client sent a push telemetry request with an invalid or outdated subscription ID."),
    (ErrorCode.TELEMETRY_TOO_LARGE, False, False, "Client sent a push telemetry request larger than the maximum size the broker will accept."),
    (ErrorCode.INVALID_REGISTRATION, False, False, "The controller has considered the broker registration to be invalid."),
)


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) + "Error"


ERRORS_BY_CODE: dict[int, type[BrokerError]] = {}

for _code, _retriable, _invalid, _desc in _TABLE:
    _name = _code.name
    _cls = type(
        _class_name(_name),
        (BrokerError,),
        {
            "errno": int(_code),
            "message": _name,
            "description": _desc,
            "retriable": _retriable,
            "invalid_metadata": _invalid,
            "__module__": __name__,
            "__doc__": f"Kafka error {_code} {_name}: {_desc}",
        },
    )
    ERRORS_BY_CODE[int(_code)] = _cls
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)

# Common aliases under the names the Kafka 0.8 client and kafka-python users know.
OffsetOutOfRangeError = ERRORS_BY_CODE[1]
CorruptMessageError = ERRORS_BY_CODE[2]
UnknownTopicOrPartitionError = ERRORS_BY_CODE[3]
LeaderNotAvailableError = ERRORS_BY_CODE[5]
RequestTimedOutError = ERRORS_BY_CODE[7]
NotLeaderForPartitionError = ERRORS_BY_CODE[6]
MessageSizeTooLargeError = ERRORS_BY_CODE[10]
MessageSizeTooLarge = MessageSizeTooLargeError
CoordinatorLoadInProgressError = ERRORS_BY_CODE[14]
OffsetsLoadInProgressError = CoordinatorLoadInProgressError
NotCoordinatorError = ERRORS_BY_CODE[16]
InvalidTopicError = ERRORS_BY_CODE[17]
UnsupportedVersionError = ERRORS_BY_CODE[35]
UnknownServerError = ERRORS_BY_CODE[-1]
#: A newer producer with the same transactional.id took over (fatal: close this producer).
ProducerFencedError = ERRORS_BY_CODE[90]
InvalidProducerEpochError = ERRORS_BY_CODE[47]
__all__ += [
    "OffsetOutOfRangeError",
    "CorruptMessageError",
    "UnknownTopicOrPartitionError",
    "LeaderNotAvailableError",
    "RequestTimedOutError",
    "NotLeaderForPartitionError",
    "MessageSizeTooLargeError",
    "MessageSizeTooLarge",
    "CoordinatorLoadInProgressError",
    "OffsetsLoadInProgressError",
    "NotCoordinatorError",
    "InvalidTopicError",
    "UnsupportedVersionError",
    "UnknownServerError",
    "ProducerFencedError",
    "InvalidProducerEpochError",
]

__all__ = list(dict.fromkeys(__all__))  # aliases repeat some generated names

_UNKNOWN_CACHE: dict[int, type[BrokerError]] = {}


def for_code(errno: int) -> type[BrokerError]:
    """Return the BrokerError subclass for a wire error code (0 is not an error: ValueError).

    Unknown codes get a (cached) subclass of UnknownBrokerError carrying that errno, so
    ``except BrokerError`` and ``err.errno`` work for codes newer than this table.
    """
    cls = ERRORS_BY_CODE.get(errno)
    if cls is not None:
        return cls
    if errno == 0:
        raise ValueError("error code 0 means no error")
    cls = _UNKNOWN_CACHE.get(errno)
    if cls is None:
        cls = type(
            f"UnknownError{errno}",
            (UnknownBrokerError,),
            {"errno": errno, "message": f"UNKNOWN_CODE_{errno}", "__module__": __name__},
        )
        _UNKNOWN_CACHE[errno] = cls
    return cls


def raise_for_code(errno: int, detail: str = "") -> None:
    """Raise the BrokerError for ``errno`` unless it is 0."""
    if errno:
        raise for_code(errno)(detail)
