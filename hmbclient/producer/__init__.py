"""The producer: :class:`Producer` (sync and async), :class:`ProducerData` in,
:class:`RecordMetadata` out, :class:`CallbackHandler` hooks and the :class:`EventHandler` seam;
:class:`ProducerEvent` tells an idempotent producer's listeners about its producer id.
"""

from hmbclient.producer.callbacks import CallbackHandler, EventHandler
from hmbclient.producer.data import (
    BatchOutcome,
    DeliveryReport,
    ProducerBatch,
    ProducerData,
    RecordFuture,
    RecordMetadata,
    SendFutures,
)
from hmbclient.producer.idempotence import ProducerEvent
from hmbclient.producer.producer import Producer

__all__ = [
    "Producer",
    "ProducerData",
    "RecordMetadata",
    "RecordFuture",
    "SendFutures",
    "ProducerBatch",
    "CallbackHandler",
    "EventHandler",
    "ProducerEvent",
    "DeliveryReport",
    "BatchOutcome",
]
