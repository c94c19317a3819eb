"""Topic names, topic creation (auto-create on first use, CreateTopics), deletion
(DeleteTopics) and partition additions (CreatePartitions).

A legal topic name is 1-249 characters of ``[a-zA-Z0-9._-]`` and is not ``.`` or ``..`` (Kafka's
rule). It is checked before anything else touches it, so an illegal name (``../x``, ``a/b``, an
empty or 250-character name) is an INVALID_TOPIC error and never reaches the filesystem.

Topic ids (KIP-516): :meth:`TopicManager.topic_id` / :meth:`TopicManager.topic_name` answer
from the coordination store (the id is written with the topic; see ``controller/store.py``),
remembered once known: a name keeps its id while the topic exists.

Creating a topic, as in Kafka 0.8.2, only writes its replica assignment to the coordination
store (``/brokers/topics/<t>``, Kafka's round-robin-with-shift over the live brokers); the
controller notices, elects the first leaders, sends LeaderAndIsr to the replicas (which create
their logs) and UpdateMetadata to every broker. A request that created a topic, or that names
one this broker's metadata does not show with leaders yet, waits for it in the purgatory
(:meth:`TopicManager.when_ready`) instead of blocking a network thread.

Deleting a topic, as in Kafka's ZooKeeper mode, only marks it (``/admin/delete_topics/<t>``);
the controller deletes it once its replicas are live. Adding partitions rewrites the
assignment with the new partitions appended (conditional on the partition count read, so
two concurrent additions cannot both win); the controller starts them. Requests wait in the
same purgatory for the metadata to show the outcome (:meth:`TopicManager.when`).

Labelled cases of :meth:`TopicManager.add_partitions` (the validation itself is the pure
``decisions.grown_assignment``):

* (a) unknown topic, or an illegal name: UNKNOWN_TOPIC_OR_PARTITION;
* (b) topic marked for deletion: INVALID_TOPIC_EXCEPTION ("queued for deletion", as Kafka);
  an internal topic (``__consumer_offsets``, ``__transaction_state``): INVALID_REQUEST, since
  its partition count decides which partition holds each group / transactional id;
* (c) count not above the current count, bad assignment: INVALID_PARTITIONS /
  INVALID_REPLICA_ASSIGNMENT / INVALID_REPLICATION_FACTOR with Kafka's message;
* (d) validate_only: NONE, nothing written;
* (e) the count changed meanwhile (another addition won): INVALID_PARTITIONS, try again.
"""

from __future__ import annotations

import logging
import threading
import uuid
import zlib
from collections.abc import Callable, Iterable

from hmbclient.broker.controller import decisions
from hmbclient.broker.controller.store import CoordinationStore
from hmbclient.broker.metadata import MetadataCache, is_internal_topic
from hmbclient.broker.purgatory import DelayedOperation, Purgatory
from hmbclient.broker.topic_configs import TopicConfigStore
from hmbclient.errors import BrokerError, CoordinationError, ErrorCode, InvalidTopicError

# The rule itself is shared with the client side (group subscriptions, Spark), which may not
# import the broker: it lives with the other names of the Kafka layout.
from hmbclient.zkpaths import MAX_TOPIC_NAME_LENGTH, TOPIC_NAME_RULE, is_valid_topic_name

#: The most partitions one topic may be created with (Kafka's KRaft controller likewise bounds
#: the records of one operation at 10,000).
MAX_PARTITIONS_PER_TOPIC = 10_000

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


class DelayedTopics(DelayedOperation):
    """Waits until every named topic is known with a live leader for each partition (or the
    timeout), then calls ``then`` once."""

    def __init__(self, timeout_ms: int, topics: list[str], metadata: MetadataCache, then: Callable[[], None]) -> None:
        super().__init__(timeout_ms)
        self.topics = topics
        self.metadata = metadata
        self.then = then

    def try_complete(self) -> bool:
        if all(self.metadata.is_ready(t) for t in self.topics):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.then()


class DelayedCondition(DelayedOperation):
    """Waits until ``condition()`` holds (checked when one of its topics changes), or the
    timeout, then calls ``then`` once."""

    def __init__(self, timeout_ms: int, condition: Callable[[], bool], then: Callable[[], None]) -> None:
        super().__init__(timeout_ms)
        self.condition = condition
        self.then = then

    def try_complete(self) -> bool:
        if self.condition():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.then()


class TopicManager:
    """Creates topics (through the coordination store) and waits for them to be served.

    Args:
        metadata: this broker's metadata cache.
        store: where assignments are written.
        num_partitions: partitions of an auto-created topic.
        replication_factor: replicas of an auto-created topic (``default.replication.factor``).
        auto_create: whether ``ensure`` creates unknown topics.
        purgatory: where requests wait for new topics (None: a private one).
    """

    def __init__(
        self,
        metadata: MetadataCache,
        store: CoordinationStore,
        num_partitions: int,
        replication_factor: int,
        auto_create: bool,
        purgatory: Purgatory[DelayedOperation] | None = None,
    ) -> None:
        self.metadata = metadata
        self.store = store
        self.num_partitions = num_partitions
        self.replication_factor = replication_factor
        self.auto_create = auto_create
        self.purgatory: Purgatory[DelayedOperation] = purgatory or Purgatory("topics")
        self._lock = threading.Lock()
        #: where CreateTopics configs are stored (``broker.topic_configs``); None: not stored
        self.config_store: TopicConfigStore | None = None
        metadata.add_listener(self._on_metadata)
        self._ids: dict[str, uuid.UUID] = {}

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (KIP-516); None when there is no such topic or the store cannot be
        read now (asked again next time)."""
        tid = self._ids.get(topic)
        if tid is None:
            try:
                tid = self.store.topic_id(topic)
            except CoordinationError as e:
                log.warning("topic id of %s unknown for now: %s", topic, e)
                return None
            if tid is not None:
                self._ids[topic] = tid
        return tid

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the served topic with this id (None: none)."""
        for name in self.metadata.topics():
            if self.topic_id(name) == topic_id:
                return name
        return None

    def _on_metadata(self, event: str, arg: object) -> None:
        if event == "topic":
            self.purgatory.check_and_complete(("topic", arg))
        elif event == "brokers":
            for t in self.metadata.topics():
                self.purgatory.check_and_complete(("topic", t))

    def ensure(self, topic: str, *, allow_auto_create: bool = True) -> int:
        """Error code for using ``topic``: 0 if it exists (or was just auto-created: it may not
        be served yet, see ``when_ready``), INVALID_TOPIC for an illegal name,
        UNKNOWN_TOPIC_OR_PARTITION when unknown and auto-creation is off."""
        if self.metadata.has_topic(topic):
            return ErrorCode.NONE
        if not is_valid_topic_name(topic):
            return ErrorCode.INVALID_TOPIC_EXCEPTION
        if self.store.assignment(topic) is not None:
            return ErrorCode.NONE  # created, the controller has not announced it yet
        if not (self.auto_create and allow_auto_create):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        code = self.create(topic, self.num_partitions, self.replication_factor)
        return ErrorCode.NONE if code == ErrorCode.TOPIC_ALREADY_EXISTS else code

    def create(self, topic: str, num_partitions: int, replication_factor: int | None = None, *, assignment: dict[int, list[int]] | None = None, validate_only: bool = False, configs: dict[str, str] | None = None) -> int:
        """Create a topic; error code (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
        INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_TOPIC)."""
        return self.create_with_message(topic, num_partitions, replication_factor, assignment=assignment, validate_only=validate_only, configs=configs)[0]

    def create_with_message(self, topic: str, num_partitions: int, replication_factor: int | None = None, *, assignment: dict[int, list[int]] | None = None, validate_only: bool = False, configs: dict[str, str] | None = None) -> tuple[int, str | None]:
        """``create`` plus a message saying why a refused topic was refused. ``configs``
        (validated overrides, see ``log.overrides``) are stored in ``config_store`` before the
        assignment, so the replicas creating the logs find them."""
        if not is_valid_topic_name(topic):
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name: use {TOPIC_NAME_RULE}"
        rf = self.replication_factor if replication_factor is None or replication_factor == -1 else replication_factor
        live = sorted(self.store.live_brokers())
        try:
            if assignment:
                replicas = decisions.validate_assignment(assignment, live)
            else:
                if num_partitions < 1:
                    return ErrorCode.INVALID_PARTITIONS, "number of partitions must be at least 1"
                if num_partitions > MAX_PARTITIONS_PER_TOPIC:
                    # Refused before the assignment is computed: 2^31-1 partitions would hold a
                    # request thread (and the controller) for good.
                    return ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}"
                replicas = decisions.assign_replicas(live, num_partitions, rf, start_index=_start(topic, len(live)), next_replica_shift=_start(topic[::-1], len(live)))
        except BrokerError as e:
            return e.errno, str(e)
        with self._lock:
            if self.metadata.has_topic(topic) or self.store.assignment(topic) is not None:
                return ErrorCode.TOPIC_ALREADY_EXISTS, "topic already exists"
            if validate_only:
                return ErrorCode.NONE, None
            if configs and self.config_store is not None:
                self.config_store.set(topic, configs)
            if not self.store.create_topic(topic, replicas):
                return ErrorCode.TOPIC_ALREADY_EXISTS, "topic already exists"
        log.info("created topic %s: %d partitions, replicas %s", topic, len(replicas), replicas)
        return ErrorCode.NONE, None

    def when_ready(self, topics: Iterable[str], timeout_ms: int, then: Callable[[], None]) -> None:
        """Call ``then`` once every topic is served (leaders known), or after ``timeout_ms``;
        at once if they already are."""
        names = sorted(set(topics))
        op = DelayedTopics(timeout_ms, names, self.metadata, then)
        self.purgatory.try_complete_else_watch(op, [("topic", t) for t in names])


    def when(self, topics: Iterable[str], condition: Callable[[], bool], timeout_ms: int, then: Callable[[], None]) -> None:
        """Call ``then`` once ``condition()`` holds (checked whenever the metadata of one of
        ``topics`` changes), or after ``timeout_ms``; at once if it already holds."""
        op = DelayedCondition(timeout_ms, condition, then)
        self.purgatory.try_complete_else_watch(op, [("topic", t) for t in sorted(set(topics))])

    def marked_for_deletion(self, topic: str) -> bool:
        """The topic is marked for deletion and not deleted yet."""
        return topic in self.store.topics_to_delete()

    def delete(self, topic: str) -> tuple[int, str | None]:
        """Mark a topic for deletion: NONE, or UNKNOWN_TOPIC_OR_PARTITION (unknown, or an
        illegal name, which never reaches the store)."""
        if not is_valid_topic_name(topic) or self.store.assignment(topic) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
        self.store.mark_topic_for_deletion(topic)
        log.info("topic %s marked for deletion", topic)
        return ErrorCode.NONE, None

    def add_partitions(self, topic: str, count: int, assignment: list[list[int]] | None, *, validate_only: bool = False) -> tuple[int, str | None]:
        """Grow a topic to ``count`` partitions (cases (a)-(e) above)."""
        if is_internal_topic(topic):  # (b)
            return ErrorCode.INVALID_REQUEST, f"The partitions of internal topic '{topic}' cannot be changed."
        current = self.store.assignment(topic) if is_valid_topic_name(topic) else None
        if current is None:  # (a)
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic}' does not exist."
        if self.marked_for_deletion(topic):  # (b)
            return ErrorCode.INVALID_TOPIC_EXCEPTION, f"The topic '{topic}' is queued for deletion."

        if count > MAX_PARTITIONS_PER_TOPIC:
            return ErrorCode.INVALID_PARTITIONS, f"number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}"
        live = sorted(self.store.live_brokers())
        first = current[0][0] if current and current[0] else 0
        start = live.index(first) if first in live else 0
        try:
            grown = decisions.grown_assignment(current, count, live, assignment, start_index=start)
        except BrokerError as e:  # (c)
            return e.errno, Exception.__str__(e)
        if validate_only:  # (d)
            return ErrorCode.NONE, None
        if not self.store.add_partitions(topic, grown, len(current)):  # (e)
            return ErrorCode.INVALID_PARTITIONS, f"The partitions of topic '{topic}' changed meanwhile; try again."
        log.info("topic %s grows from %d to %d partitions: %s", topic, len(current), count, grown[len(current):])
        return ErrorCode.NONE, None


def _start(topic: str, n: int) -> int:
    # Kafka picks the first broker at random; a stable hash of the name spreads topics as well
    # and makes a topic's layout repeatable across runs.
    return zlib.crc32(topic.encode()) % max(1, n)
