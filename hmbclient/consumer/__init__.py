"""Consumers.

* :class:`SimpleConsumer` — the low-level, stateless consumer of one broker (seed 003, 5.1),
  with :class:`FetchRequest`, ``LATEST_TIME`` / ``EARLIEST_TIME`` and the lazily decoded
  :class:`ByteBufferMessageSet` of :data:`MessageAndOffset` values.

The high-level ConsumerConnector (ZooKeeper groups) is added here by its own module.
"""

from hmbclient.consumer.message_set import ByteBufferMessageSet, MessageAndOffset
from hmbclient.consumer.simple import EARLIEST_TIME, LATEST_TIME, FetchRequest, SimpleConsumer

__all__ = [
    "SimpleConsumer",
    "FetchRequest",
    "LATEST_TIME",
    "EARLIEST_TIME",
    "ByteBufferMessageSet",
    "MessageAndOffset",
]
