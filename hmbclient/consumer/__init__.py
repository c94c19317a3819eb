"""Consumers.

* :class:`SimpleConsumer` — the low-level, stateless consumer of one broker (Kafka 0.8's API),
  with :class:`FetchRequest`, ``LATEST_TIME`` / ``EARLIEST_TIME`` and the lazily decoded
  :class:`ByteBufferMessageSet` of :data:`MessageAndOffset` values (its ``segments()``, with
  ``UniformRun``, ``cut_segments``, ``expand_segments`` and ``last_offset``, serve columnar
  readers such as the Spark data source).
* :class:`Consumer` / :class:`ConsumerConnector` — the high-level consumer of groups balanced
  through ZooKeeper or the brokers' group coordinator (:mod:`.connector`, :mod:`.group`), with :class:`KafkaStream`, :class:`MessageAndMetadata` and the topic
  filters :class:`Whitelist` / :class:`Blacklist`; imported on first use (they load kazoo).
* :mod:`.poll_consumer` — the subscribe/poll consumer, ``hmbclient.Consumer`` (called with a
  config; its ``Consumer.create`` is the factory above), on the same fetchers, stream, group
  member and offset store.
* :class:`KafkaOffsetStorage` — a group's offsets in the broker's group coordinator
  (OffsetCommit / OffsetFetch), for tools that record progress without joining the group.
"""

from typing import Any

from hmbclient.consumer.message_set import (
    ByteBufferMessageSet,
    MessageAndOffset,
    UniformRun,
    cut_segments,
    expand_segments,
    last_offset,
)
from hmbclient.consumer.simple import EARLIEST_TIME, LATEST_TIME, FetchRequest, SimpleConsumer

__all__ = [
    "SimpleConsumer",
    "FetchRequest",
    "LATEST_TIME",
    "EARLIEST_TIME",
    "ByteBufferMessageSet",
    "MessageAndOffset",
    "UniformRun",
    "cut_segments",
    "expand_segments",
    "last_offset",
    "Consumer",
    "ConsumerConnector",
    "ConsumerRebalanceListener",
    "ConsumerEvent",
    "KafkaStream",
    "MessageAndMetadata",
    "TopicFilter",
    "Whitelist",
    "Blacklist",
    "KafkaOffsetStorage",
]

_HIGH_LEVEL = frozenset(__all__[__all__.index("Consumer") : -1])


def __getattr__(name: str) -> Any:
    if name == "KafkaOffsetStorage":
        from hmbclient.consumer import offsets

        return offsets.KafkaOffsetStorage
    if name in _HIGH_LEVEL:
        from hmbclient.consumer import connector

        return getattr(connector, name)
    raise AttributeError(f"module 'hmbclient.consumer' has no attribute {name!r}")
