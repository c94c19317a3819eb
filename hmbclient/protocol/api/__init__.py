"""Every (API, version) hmbclient implements, registered in ``base.REQUESTS``/``RESPONSES``."""

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
from hmbclient.protocol.api.produce import ProduceRequest, ProduceResponse

__all__ = [
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
]
