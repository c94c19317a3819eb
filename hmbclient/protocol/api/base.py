"""Request/Response base classes and the (api_key, api_version) registry.

One class per (API, version), as in kafka-python's protocol package: each class is a namedtuple
of its schema's fields with class attributes ``API_KEY``, ``API_VERSION``, ``SCHEMA`` and, for
requests, ``RESPONSE_TYPE``. A new version reuses the previous field list where nothing changed.

    req = MetadataRequest[1](topics=["events"])
    data = req.encode()                          # body only; frame.py adds size + header
    resp = req.RESPONSE_TYPE.decode(body_bytes)  # -> MetadataResponse_v1 namedtuple

Fields left out take Kafka's defaults from its JSON message schemas (``replica_id`` -1, leader
epochs -1, ``max_bytes`` 2^31-1, ``allow_auto_topic_creation`` true, ``timeout_ms`` 60000 for
CreateTopics, ...); nullable strings, arrays and record sets default to None, other strings to
"", arrays to (), numbers to 0.

Building a message at a version is done one way, by the schema (``Struct.build`` in
``protocol.types``): ``build(**fields)`` is the version-agnostic constructor every caller
uses (the client through ``BrokerVersions.build``, the broker on its response classes): it keeps
the fields this version has and drops the others (e.g. ``throttle_time_ms`` on v0), nested
entries may be dicts fitted the same way, so one call site can build any version. ``nested(*path)``
is the struct of a nested entry (``"topics", "partitions"``), whose ``build`` and ``row`` (a
cached positional builder for hot loops) make entries of this version. The plain constructor
stays strict.

Flexible versions (KIP-482): ``define(..., flexible=True)`` turns the field lists into their
compact form and gives every struct its tagged-field section (``request_tagged`` /
``response_tagged`` name top-level tagged fields); the classes say ``FLEXIBLE = True`` so the
frame layer can pick the request header v2 / response header v1. Callers build them as any
other version; the frame layer writes and reads the flexible headers for them.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar

from hmbclient.protocol.types import FieldSpec, Struct
from hmbclient.protocol.types import flexible as _flexible

__all__ = [
    "ApiKey",
    "Request",
    "Response",
    "define",
    "REQUESTS",
    "RESPONSES",
    "request_class",
    "response_class",
    "supported_versions",
]


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_CLUSTER = 60
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


class _Message:
    API_KEY: ClassVar[int]
    API_VERSION: ClassVar[int]
    SCHEMA: ClassVar[Struct]
    #: a flexible version (KIP-482): compact types, tagged fields, the newer headers
    FLEXIBLE: ClassVar[bool] = False
    _fields: ClassVar[tuple[str, ...]]

    if TYPE_CHECKING:
        # At run time every class is a namedtuple of its schema's fields: constructors take
        # those fields (positionally or by name) and each field is an attribute.
        def __init__(self, *args: Any, **kwargs: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

        def _replace(self, **kwargs: Any) -> Any: ...

        def _asdict(self) -> dict[str, Any]: ...

    def encode_parts(self) -> list[Any]:
        out: list[Any] = []
        self.SCHEMA.write(out, self)
        return out

    def encode(self) -> bytes:
        return b"".join(self.encode_parts())

    @classmethod
    def decode(cls, buf: Any, pos: int = 0, *, exact: bool = True) -> Any:
        return cls.SCHEMA.decode(buf, pos, exact=exact)

    @classmethod
    def build(cls, **fields: Any) -> Any:
        """This version of the message from a superset of its fields (see the module docstring)."""
        return cls.SCHEMA.build(**fields)

    @classmethod
    def nested(cls, *path: str) -> Struct:
        """The struct of a nested entry of this version, e.g. ``nested("topics", "partitions")``;
        its ``build(**fields)`` and ``row(*names)`` make entries. KeyError if there is none."""
        return cls.SCHEMA.nested(*path)


class Request(_Message):
    RESPONSE_TYPE: ClassVar[type[Response]]


class Response(_Message):
    pass


REQUESTS: dict[tuple[int, int], type[Request]] = {}
RESPONSES: dict[tuple[int, int], type[Response]] = {}
# Layouts defined with ``register=False``: one partial shape of a version the codec does not
# speak in general, sent only when a caller asks for it by class (see admin.py's
# InitProducerIdV3Request); never advertised or picked by version choice.
PARTIAL_REQUESTS: dict[tuple[int, int], type[Request]] = {}


def define(
    api_key: int,
    version: int,
    request_fields: list[FieldSpec],
    response_fields: list[FieldSpec],
    *,
    flexible: bool = False,
    request_tagged: list[tuple[Any, ...]] | None = None,
    response_tagged: list[tuple[Any, ...]] | None = None,
    register: bool = True,
) -> tuple[type[Request], type[Response]]:
    """Create and register the request and response classes of one (API, version)
    (``register=False``: not registered, so not advertised or picked by version choice).

    With ``flexible`` the field lists are written in their plain form and made compact here
    (``protocol.types.flexible``); ``*_tagged`` are the top-level tagged fields,
    ``(tag, name, type[, default])``."""
    api_name = "".join(p.capitalize() for p in ApiKey(api_key).name.split("_"))
    classes: list[type] = []
    for kind, base, fields, tagged in (
        ("Request", Request, request_fields, request_tagged or []),
        ("Response", Response, response_fields, response_tagged or []),
    ):
        name = f"{api_name}{kind}_v{version}"
        if flexible:
            schema = Struct(name, _flexible(fields), tagged=_flexible_tags(tagged), flexible=True)
        elif tagged:
            raise TypeError(f"{name}: tagged fields need a flexible version")
        else:
            schema = Struct(name, fields)
        cls = type(
            name,
            (schema.values, base),
            {
                "__slots__": (),
                "API_KEY": int(api_key),
                "API_VERSION": version,
                "SCHEMA": schema,
                "FLEXIBLE": flexible,
                # _Message.build, bound to the schema once (one call less on every build)
                "build": staticmethod(schema.build),
            },
        )
        schema.values = cls  # decoding builds instances of the API class itself
        classes.append(cls)
    req, resp = classes
    req.RESPONSE_TYPE = resp  # type: ignore[attr-defined]
    if register:
        REQUESTS[(int(api_key), version)] = req
        RESPONSES[(int(api_key), version)] = resp
    else:
        PARTIAL_REQUESTS[(int(api_key), version)] = req
    return req, resp


def _flexible_tags(tagged: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    # A tagged field's own type is compact too: (tag, name, type[, default]).
    return [(spec[0], *_flexible([spec[1:]])[0]) for spec in tagged]


def request_class(api_key: int, version: int) -> type[Request]:
    """The request class for (api_key, version); KeyError if we do not implement it."""
    return REQUESTS[(api_key, version)]


def response_class(api_key: int, version: int) -> type[Response]:
    return RESPONSES[(api_key, version)]


def supported_versions(api_key: int) -> tuple[int, int]:
    """(min, max) version implemented for an API key; KeyError if none."""
    vs = [v for (k, v) in REQUESTS if k == api_key]
    if not vs:
        raise KeyError(api_key)
    return min(vs), max(vs)
