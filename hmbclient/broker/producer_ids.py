"""InitProducerId (api key 22) v0-1: producer ids for idempotent producers.

Why the broker serves it: kafka-python 3 (and other clients) enable idempotence by default
against any broker that looks >= 0.11, and treat a missing InitProducerId as fatal. The codec
package does not define this API yet, so its two non-flexible versions are registered here the
way ``protocol.api.base.define`` does it (the schemas are Kafka's; move them to
``protocol.api`` when the codec grows them, and this module will use those). Ids come from a
counter seeded with the start-up time, so ids do not repeat across restarts; sequence numbers
are stored as sent (no de-duplication). Transactional ids are refused: there is no transaction
coordinator.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any

from hmbclient.protocol.api.base import REQUESTS, RESPONSES, Request, Response
from hmbclient.protocol.types import Int16, Int32, Int64, NullableString, Struct

__all__ = ["INIT_PRODUCER_ID", "InitProducerIdRequest", "InitProducerIdResponse", "ProducerIdManager"]

log = logging.getLogger("hmbclient.broker.producer_ids")

INIT_PRODUCER_ID = 22
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

_REQ = [("transactional_id", NullableString), ("transaction_timeout_ms", Int32)]
_RESP = [("throttle_time_ms", Int32), ("error_code", Int16), ("producer_id", Int64), ("producer_epoch", Int16)]


def _define(version: int) -> tuple[Any, Any]:
    if (INIT_PRODUCER_ID, version) in REQUESTS:
        req = REQUESTS[(INIT_PRODUCER_ID, version)]
        return req, req.RESPONSE_TYPE
    classes = []
    for kind, base, fields in (("Request", Request, _REQ), ("Response", Response, _RESP)):
        name = f"InitProducerId{kind}_v{version}"
        schema = Struct(name, fields)
        cls = type(name, (schema.values, base), {"__slots__": (), "API_KEY": INIT_PRODUCER_ID, "API_VERSION": version, "SCHEMA": schema})
        schema.values = cls
        classes.append(cls)
    req, resp = classes
    req.RESPONSE_TYPE = resp
    REQUESTS[(INIT_PRODUCER_ID, version)] = req
    RESPONSES[(INIT_PRODUCER_ID, version)] = resp
    return req, resp


InitProducerIdRequest: dict[int, Any] = {}
InitProducerIdResponse: dict[int, Any] = {}
for _v in (0, 1):
    InitProducerIdRequest[_v], InitProducerIdResponse[_v] = _define(_v)


class ProducerIdManager:
    """Hands out producer ids (shared by the brokers of one cluster)."""

    def __init__(self) -> None:
        # Seeded from the clock so a restarted broker does not reissue an id in use.
        self._ids = itertools.count(int(time.time() * 1000) & 0x0000FFFFFFFFFFFF)
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def handle_init_producer_id(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        if req.transactional_id is not None:
            log.info("InitProducerId with transactional id %r refused: no transactions", req.transactional_id)
            channel.send(resp_cls(0, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1))
            return
        channel.send(resp_cls(0, 0, self.next_id(), 0))
