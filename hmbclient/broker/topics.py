"""Topic names and topic creation (auto-create on first use, CreateTopics).

A legal topic name is 1-249 characters of ``[a-zA-Z0-9._-]`` and is not ``.`` or ``..`` (Kafka's
rule). It is checked before anything else touches it, so an illegal name (``../x``, ``a/b``, an
empty or 250-character name) is an ErrorCode.INVALID_TOPIC_EXCEPTION error and never reaches the filesystem.
"""

from __future__ import annotations

import logging
import threading

from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.metadata import ClusterView
from hmbclient.errors import ErrorCode, InvalidTopicError

# The rule itself is shared with the client side (group subscriptions, Spark), which may not
# import the broker: it lives with the other names of the Kafka layout.
from rebalance.paths import MAX_TOPIC_NAME_LENGTH, TOPIC_NAME_RULE, is_valid_topic_name

__all__ = [
    "validate_topic_name",
    "is_valid_topic_name",
    "TopicManager",
    "MAX_TOPIC_NAME_LENGTH",
    "TOPIC_NAME_RULE",
]

log = logging.getLogger("hmbclient.broker.topics")


def validate_topic_name(name: object) -> None:
    """Raise InvalidTopicError unless ``name`` is a legal topic name (``is_valid_topic_name``)."""
    if not is_valid_topic_name(name):
        raise InvalidTopicError(f"illegal topic name {name!r}: use {TOPIC_NAME_RULE}")


class TopicManager:
    """Creates topics in the cluster view and their partition logs on disk.

    Args:
        view: the cluster metadata.
        logs: where partition logs live.
        num_partitions: partitions of an auto-created topic.
        auto_create: whether ``ensure`` creates unknown topics.
    """

    def __init__(self, view: ClusterView, logs: LogManager, num_partitions: int, auto_create: bool) -> None:
        self.view = view
        self.logs = logs
        self.num_partitions = num_partitions
        self.auto_create = auto_create
        self._lock = threading.Lock()

    def ensure(self, topic: str, *, allow_auto_create: bool = True) -> int:
        """Error code for using ``topic``: 0 if it exists (or was just auto-created), 17 for an
        illegal name, 3 when unknown and auto-creation is off."""
        if self.view.has_topic(topic):
            return ErrorCode.NONE
        if not is_valid_topic_name(topic):
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if not (self.auto_create and allow_auto_create):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        self.create(topic, self.num_partitions)
        return ErrorCode.NONE

    def create(self, topic: str, num_partitions: int, *, internal: bool = False) -> int:
        """Create a topic with ``num_partitions`` partitions; error code (36 if it exists)."""
        if not is_valid_topic_name(topic):
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if num_partitions < 1:
            return ErrorCode.INVALID_PARTITIONS
        with self._lock:
            if self.view.has_topic(topic):
                return ErrorCode.TOPIC_ALREADY_EXISTS
            # Logs first: a topic is visible in metadata only once its folders exist, so a
            # restart finds every topic a client was told about.
            for p in range(num_partitions):
                self.logs.get_or_create(topic, p)
            self.view.add_topic(topic, num_partitions, internal=internal)
        log.info("created topic %s with %d partitions", topic, num_partitions)
        return ErrorCode.NONE
