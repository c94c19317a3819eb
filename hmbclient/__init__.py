"""hmbclient: a pure-Python SDK for brokers that speak the Kafka wire protocol.

Public names (``__all__`` below) are imported lazily, so ``import hmbclient`` stays cheap and a
component's dependencies load only when it is used::

    from hmbclient import Producer, ProducerData, SimpleConsumer, FetchRequest

To add a public name, add one line to ``_LAZY`` (name -> module) and to ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # producer
    "Producer": "hmbclient.producer",
    "ProducerData": "hmbclient.producer",
    "RecordMetadata": "hmbclient.producer",
    "CallbackHandler": "hmbclient.producer",
    "EventHandler": "hmbclient.producer",
    # low-level consumer
    "SimpleConsumer": "hmbclient.consumer.simple",
    "FetchRequest": "hmbclient.consumer.simple",
    "LATEST_TIME": "hmbclient.consumer.simple",
    "EARLIEST_TIME": "hmbclient.consumer.simple",
    "MessageAndOffset": "hmbclient.consumer.message_set",
    "ByteBufferMessageSet": "hmbclient.consumer.message_set",
    # configs
    "ProducerConfig": "hmbclient.config",
    "SimpleConsumerConfig": "hmbclient.config",
    # status events
    "BrokerEvent": "hmbclient.net.client",
    # subscribe/poll consumer (its Consumer.create is the 0.8 factory of ConsumerConnector)
    "Consumer": "hmbclient.consumer.poll_consumer",
    "ConsumerRecord": "hmbclient.consumer.poll_consumer",
    "TopicPartition": "hmbclient.consumer.poll_consumer",
    "PollConsumerConfig": "hmbclient.config",
    # high-level consumer (ZooKeeper groups)
    "ConsumerConnector": "hmbclient.consumer.connector",
    "KafkaStream": "hmbclient.consumer.connector",
    "MessageAndMetadata": "hmbclient.consumer.connector",
    "ConsumerConfig": "hmbclient.config",
    "Whitelist": "rebalance.filters",
    "Blacklist": "rebalance.filters",
    "TopicFilter": "rebalance.filters",
    # errors users catch most
    "HmbError": "hmbclient.errors",
    "ConsumerTimeoutError": "hmbclient.errors",
    "ConfigError": "hmbclient.errors",
}

__all__ = [
    "errors",
    "__version__",
    "Producer",
    "ProducerData",
    "RecordMetadata",
    "CallbackHandler",
    "EventHandler",
    "SimpleConsumer",
    "FetchRequest",
    "LATEST_TIME",
    "EARLIEST_TIME",
    "MessageAndOffset",
    "ByteBufferMessageSet",
    "ProducerConfig",
    "SimpleConsumerConfig",
    "BrokerEvent",
    "Consumer",
    "ConsumerRecord",
    "TopicPartition",
    "PollConsumerConfig",
    "ConsumerConnector",
    "KafkaStream",
    "MessageAndMetadata",
    "ConsumerConfig",
    "Whitelist",
    "Blacklist",
    "TopicFilter",
    "HmbError",
    "ConsumerTimeoutError",
    "ConfigError",
]

if TYPE_CHECKING:  # pragma: no cover
    from hmbclient import errors
    from hmbclient.config import (
        ConsumerConfig,
        PollConsumerConfig,
        ProducerConfig,
        SimpleConsumerConfig,
    )
    from hmbclient.consumer.connector import (
        ConsumerConnector,
        KafkaStream,
        MessageAndMetadata,
    )
    from hmbclient.consumer.message_set import ByteBufferMessageSet, MessageAndOffset
    from hmbclient.consumer.poll_consumer import Consumer, ConsumerRecord, TopicPartition
    from hmbclient.consumer.simple import EARLIEST_TIME, LATEST_TIME, FetchRequest, SimpleConsumer
    from hmbclient.errors import ConfigError, ConsumerTimeoutError, HmbError
    from hmbclient.net.client import BrokerEvent
    from hmbclient.producer import (
        CallbackHandler,
        EventHandler,
        Producer,
        ProducerData,
        RecordMetadata,
    )
    from rebalance.filters import Blacklist, TopicFilter, Whitelist


def __getattr__(name: str) -> Any:
    if name == "errors":
        return importlib.import_module("hmbclient.errors")
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'hmbclient' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
