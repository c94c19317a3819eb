"""The "consumer" embedded protocol: what consumers put in JoinGroup's opaque ``metadata`` and
SyncGroup's opaque ``assignment`` when ``protocol_type`` is "consumer".

Both start with their own int16 ``version`` (not the JoinGroup/SyncGroup version), then:

* ConsumerProtocolMemberMetadata (Kafka: ConsumerProtocolSubscription), one per member and
  assignor in JoinGroup: v0 topics [string], user_data (nullable bytes, the assignor's own);
  v1 + owned_partitions [topic, partitions [int32]] (cooperative rebalancing, KIP-429); v2 +
  generation_id int32 (default -1: the generation the owned partitions are from, KIP-792);
  v3 + rack_id (nullable string, KIP-881).
* ConsumerProtocolMemberAssignment (Kafka: ConsumerProtocolAssignment), from the leader to each
  member in SyncGroup: assigned_partitions [topic, partitions [int32]], user_data; v1 is v0
  re-versioned.

Compatibility rule (Kafka's): a newer version only appends fields, so
:func:`decode_member_metadata` and :func:`decode_member_assignment` read bytes of a version
above the highest we know with the highest we know and ignore what follows; the value keeps the
version the member wrote. An empty byte string (a follower's empty assignment) or a negative
version is a :class:`ProtocolError` (SyncGroup answers an error with an empty assignment: look at
its error_code first).

    meta = ConsumerProtocolMemberMetadata[1](topics=["events"], owned_partitions=[("events", [0, 1])])
    JoinGroupRequest[5](..., protocol_type=PROTOCOL_TYPE, protocols=[("range", meta.encode())])
    decode_member_assignment(sync_response.assignment).assigned_partitions
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from hmbclient.errors import ProtocolError
from hmbclient.protocol.types import (
    Array,
    FieldSpec,
    Int16,
    Int32,
    NullableBytes,
    NullableString,
    String,
    Struct,
)

__all__ = [
    "PROTOCOL_TYPE",
    "ConsumerProtocolMessage",
    "ConsumerProtocolMemberMetadata",
    "ConsumerProtocolMemberAssignment",
    "decode_member_metadata",
    "decode_member_assignment",
]

#: JoinGroup ``protocol_type`` of consumer groups.
PROTOCOL_TYPE = "consumer"


class ConsumerProtocolMessage:
    """Base of the embedded message classes: a namedtuple of the schema's fields (``version``
    first, defaulting to the class's ``VERSION``) with ``encode``/``decode`` as API classes
    have."""

    VERSION: ClassVar[int]
    SCHEMA: ClassVar[Struct]
    _fields: ClassVar[tuple[str, ...]]

    if TYPE_CHECKING:

        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

        def _replace(self, **kwargs: Any) -> Any: ...

        def _asdict(self) -> dict[str, Any]: ...

    def encode(self) -> bytes:
        out: list[Any] = []
        self.SCHEMA.write(out, self)
        return b"".join(out)

    @classmethod
    def decode(cls, buf: Any, pos: int = 0, *, exact: bool = True) -> Any:
        return cls.SCHEMA.decode(buf, pos, exact=exact)


def _define(name: str, version: int, fields: list[FieldSpec]) -> type[ConsumerProtocolMessage]:
    cls_name = f"{name}_v{version}"
    schema = Struct(cls_name, [("version", Int16, version), *fields])
    cls = type(cls_name, (schema.values, ConsumerProtocolMessage), {"__slots__": (), "VERSION": version, "SCHEMA": schema})
    schema.values = cls  # decoding builds instances of this class
    return cls


def _topic_partitions(name: str) -> FieldSpec:
    return (name, Array(("topic", String), ("partitions", Array(Int32)), name=name))


_meta_v0: list[FieldSpec] = [("topics", Array(String)), ("user_data", NullableBytes)]
_meta_v1 = [*_meta_v0, _topic_partitions("owned_partitions")]
_meta_v2: list[FieldSpec] = [*_meta_v1, ("generation_id", Int32, -1)]
_meta_v3: list[FieldSpec] = [*_meta_v2, ("rack_id", NullableString)]
_assign_v0: list[FieldSpec] = [_topic_partitions("assigned_partitions"), ("user_data", NullableBytes)]

ConsumerProtocolMemberMetadata: dict[int, type[ConsumerProtocolMessage]] = {
    0: _define("ConsumerProtocolMemberMetadata", 0, _meta_v0),
    1: _define("ConsumerProtocolMemberMetadata", 1, _meta_v1),
    2: _define("ConsumerProtocolMemberMetadata", 2, _meta_v2),
    3: _define("ConsumerProtocolMemberMetadata", 3, _meta_v3),
}
ConsumerProtocolMemberAssignment: dict[int, type[ConsumerProtocolMessage]] = {
    0: _define("ConsumerProtocolMemberAssignment", 0, _assign_v0),
    1: _define("ConsumerProtocolMemberAssignment", 1, _assign_v0),
}


def _decode(classes: dict[int, type[ConsumerProtocolMessage]], what: str, buf: Any) -> Any:
    if len(buf) < 2:
        raise ProtocolError(f"{what}: {len(buf)} bytes, too short for a version")
    version = int.from_bytes(bytes(buf[:2]), "big", signed=True)
    if version < 0:
        raise ProtocolError(f"{what}: invalid version {version}")
    top = max(classes)
    # A newer member's fields past the ones we know are ignored (Kafka only appends fields).
    return classes[min(version, top)].decode(buf, exact=version <= top)


def decode_member_metadata(buf: Any) -> Any:
    """A member's subscription from JoinGroup ``metadata``, whatever its version.

    Raises:
        ProtocolError: malformed bytes.
    """
    return _decode(ConsumerProtocolMemberMetadata, "ConsumerProtocolMemberMetadata", buf)


def decode_member_assignment(buf: Any) -> Any:
    """A member's assignment from SyncGroup ``assignment``, whatever its version.

    Raises:
        ProtocolError: malformed or empty bytes.
    """
    return _decode(ConsumerProtocolMemberAssignment, "ConsumerProtocolMemberAssignment", buf)
