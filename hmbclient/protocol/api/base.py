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

``build(**fields)`` is the version-agnostic constructor the client uses: it keeps the fields
this version has and drops the others (e.g. ``throttle_time_ms`` on v0), so one call site can
build any version. The plain constructor stays strict.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar

from hmbclient.protocol.types import FieldSpec, Struct

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
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42


class _Message:
    API_KEY: ClassVar[int]
    API_VERSION: ClassVar[int]
    SCHEMA: ClassVar[Struct]
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
        names = cls._fields
        return cls(**{k: v for k, v in fields.items() if k in names})


class Request(_Message):
    RESPONSE_TYPE: ClassVar[type[Response]]


class Response(_Message):
    pass


REQUESTS: dict[tuple[int, int], type[Request]] = {}
RESPONSES: dict[tuple[int, int], type[Response]] = {}


def define(
    api_key: int,
    version: int,
    request_fields: list[FieldSpec],
    response_fields: list[FieldSpec],
) -> tuple[type[Request], type[Response]]:
    """Create and register the request and response classes of one (API, version)."""
    api_name = "".join(p.capitalize() for p in ApiKey(api_key).name.split("_"))
    classes: list[type] = []
    for kind, base, fields in (("Request", Request, request_fields), ("Response", Response, response_fields)):
        name = f"{api_name}{kind}_v{version}"
        schema = Struct(name, fields)
        cls = type(
            name,
            (schema.values, base),
            {"__slots__": (), "API_KEY": int(api_key), "API_VERSION": version, "SCHEMA": schema},
        )
        schema.values = cls  # decoding builds instances of the API class itself
        classes.append(cls)
    req, resp = classes
    req.RESPONSE_TYPE = resp  # type: ignore[attr-defined]
    REQUESTS[(int(api_key), version)] = req
    RESPONSES[(int(api_key), version)] = resp
    return req, resp


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
