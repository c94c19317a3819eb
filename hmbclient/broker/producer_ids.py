"""InitProducerId (api key 22) v0-1: producer ids for idempotent producers.

Why the broker serves it: kafka-python 3 (and other clients) enable idempotence by default
against any broker that looks >= 0.11, and treat a missing InitProducerId as fatal. The codec
schemas live in ``protocol.api.admin`` with the other APIs. Ids come from a
counter seeded with the start-up time, so ids do not repeat across restarts; sequence numbers
are stored as sent (no de-duplication). Transactional ids are refused: there is no transaction
coordinator.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

from hmbclient.clock import wall_ms
from hmbclient.errors import ErrorCode
from hmbclient.protocol import api

__all__ = ["INIT_PRODUCER_ID", "InitProducerIdRequest", "InitProducerIdResponse", "ProducerIdManager"]

log = logging.getLogger("hmbclient.broker.producer_ids")

INIT_PRODUCER_ID = int(api.ApiKey.INIT_PRODUCER_ID)

InitProducerIdRequest = api.InitProducerIdRequest
InitProducerIdResponse = api.InitProducerIdResponse


class ProducerIdManager:
    """Hands out producer ids (shared by the brokers of one cluster)."""

    def __init__(self) -> None:
        # Seeded from the clock so a restarted broker does not reissue an id in use.
        self._ids = itertools.count(wall_ms() & 0x0000FFFFFFFFFFFF)
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def handle_init_producer_id(self, header: Any, req: Any, channel: Any) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        if req.transactional_id is not None:
            log.info("InitProducerId with transactional id %r refused: no transactions", req.transactional_id)
            channel.send(resp_cls(0, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1))
            return
        channel.send(resp_cls(0, ErrorCode.NONE, self.next_id(), 0))
