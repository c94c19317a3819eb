"""The subscribe/poll consumer (``from hmbclient import Consumer``): today's Kafka consumer API
on the ConsumerConnector's engine.

Usage::

    with Consumer({"bootstrap.servers": "h:9092", "group.id": "billing",
                   "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe(["events"])
        for record in consumer.poll(1.0):
            handle(record.value)

``Consumer.create(config)`` still returns the Kafka 0.8 ``ConsumerConnector`` (the factory
of :mod:`.connector`), so code written for the 0.8 API keeps working unchanged.

One engine
----------
Nothing here fetches or talks to the coordinator on its own: the consumer is the
:class:`~rebalance.rebalancer.OwnershipListener` of a :class:`.group.BrokerGroupMember` (the
member's own thread runs JoinGroup/SyncGroup and heartbeats, between polls too), its owned
partitions are fetched by a :class:`.fetcher.FetcherManager` (one thread per leader broker)
into one :class:`.stream.KafkaStream`, and ``poll`` takes a batch out of that stream
(:meth:`~.stream.KafkaStream.take`). Commits and committed offsets go through
:class:`.offsets.KafkaOffsetStorage` with the member's generation.

Contract and cases
------------------
* (position) A partition's position is the next offset ``poll`` hands out; it moves under the
  stream's lock, so after a revocation not one more record of it is handed out (the stream's
  invariant). ``commit()`` without offsets commits the positions of the assigned partitions.
* (replace) ``seek``, ``pause`` and ``resume`` never touch a fetcher's in-flight request:
  they retire the partition's :class:`~.stream.PartitionTopicInfo` (``stream.revoke``: a chunk
  still in flight for it is refused) and, unless paused, hand a fresh one at the new position
  to the fetchers. A paused partition is not fetched; resume continues at its position.
* (auto commit) ``enable.auto.commit``: ``poll`` commits the positions once
  ``auto.commit.interval.ms`` has passed since the last commit; a rebalance commits them before
  the partitions are released (the member's commit-before-revoke); ``close`` commits them.
  Without it nothing is committed but by ``commit()``.
* (callbacks) ``on_assign(consumer, partitions)`` after the partitions are owned and before
  they are fetched; ``on_revoke(consumer, partitions)`` after hand-out stopped and (auto commit)
  their positions were committed, while ``commit()``/``position()`` still see them;
  ``on_lost(consumer, partitions)`` instead of ``on_revoke`` when they were taken away
  without a commit (the coordinator dropped us, or ``max.poll.interval.ms`` ran out). They
  run on the group member's thread, not inside ``poll`` as in Java: keep them short.
* (poll timeout) When no ``poll`` began for ``max.poll.interval.ms`` the member leaves the
  group as Java's does (partitions lost, LeaveGroup, so the others rebalance at once); the next
  ``poll`` joins again.
* (manual) ``assign(partitions)`` takes partitions without a group; with a ``group.id`` their
  committed offsets are used and ``commit()`` works (as a group without members).
* (errors) Unknown config keys: ConfigError. Any call after ``close``: ConsumerClosedError.
  ``poll`` with nothing subscribed or assigned, ``subscribe`` after ``assign`` (and the
  reverse), ``commit``/``committed`` without ``group.id``, ``seek``/``position``/``pause`` of
  a partition not assigned: IllegalStateError.

Threads: the caller's (poll, seek, commit...), the group member's, the fetchers', the I/O
threads of the two NetClients (fetching and the coordinator, so a JoinGroup never holds up a
fetch), one watchdog (``max.poll.interval.ms``) and, only once ``commit(asynchronous=True)``
is used, one commit thread (commits stay in call order). The assignment (``_ptis``) changes
under ``_lock``, copy-on-write, so ``poll`` reads it without the lock.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from hmbclient.clock import monotonic_ms
from hmbclient.consumer.config import PollConsumerConfig
from hmbclient.errors import (
    ConfigError,
    ConsumerClosedError,
    ErrorCode,
    HmbError,
    IllegalStateError,
    UnsupportedByBroker,
    for_code,
)
from hmbclient.metrics import Metrics
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.security import Security
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from hmbclient.zkpaths import make_consumer_id
from rebalance.filters import Whitelist
from rebalance.rebalancer import Subscription

from .fetcher import FetcherManager
from .group import BrokerGroupMember
from .group_consumer import ConsumerProtocolMember
from .metrics import ConsumerMetrics
from .offsets import KafkaOffsetStorage
from .stream import KafkaStream, PartitionTopicInfo

if TYPE_CHECKING:  # pragma: no cover
    from .connector import ConsumerConnector

__all__ = ["Consumer", "ConsumerRecord", "TopicPartition", "OffsetAndTimestamp"]

log = logging.getLogger("hmbclient.consumer.poll")

#: Kafka's timestamp types (``ConsumerRecord.timestamp_type``).
NO_TIMESTAMP_TYPE, CREATE_TIME = -1, 0

_new_record = tuple.__new__


class TopicPartition(NamedTuple):
    """A topic and a partition number (any ``(topic, partition)`` tuple is accepted too)."""

    topic: str
    partition: int


class ConsumerRecord(NamedTuple):
    """One record as :meth:`Consumer.poll` hands it out: ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``timestamp_type``, ``key``, ``value``, ``headers``, ``leader_epoch``.

    Read it by name. As a tuple it is the decoded record's fields followed by where it came
    from (``offset, timestamp, key, value, headers, topic, partition``): without deserializers
    the decoder builds them directly (``decode_records(..., tail=...)``), else ``poll`` does,
    one by one.
    ``timestamp_type`` is 0 (CreateTime) when the record has a timestamp and -1 when it has
    none (magic 0); a LogAppendTime topic's records carry the broker's time under type 0 (the
    decoded batch does not keep the type). ``leader_epoch`` is None (the fetcher does not keep
    it). ``headers`` is a tuple of ``(str, bytes | None)``.
    """

    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    topic: str
    partition: int

    @property
    def timestamp_type(self) -> int:
        """0 (CreateTime) when the record has a timestamp, -1 when it has none."""
        return CREATE_TIME if self.timestamp >= 0 else NO_TIMESTAMP_TYPE

    @property
    def leader_epoch(self) -> int | None:
        """The leader epoch of the batch: None (not kept by the fetcher)."""
        return None


class OffsetAndTimestamp(NamedTuple):
    """What :meth:`Consumer.offsets_for_times` finds: the first offset at or after a time."""

    offset: int
    timestamp: int


Partitions = Iterable[tuple[str, int]]
RebalanceCallback = Callable[["Consumer", list[TopicPartition]], None]
CommitCallback = Callable[[BaseException | None, dict[TopicPartition, int]], None]


def _tp(value: Any) -> TopicPartition:
    try:
        topic, partition = value
    except (TypeError, ValueError):
        raise ConfigError(f"expected a (topic, partition) pair, got {value!r}") from None
    if not isinstance(topic, str) or not topic or not isinstance(partition, int) or partition < 0:
        raise ConfigError(f"expected a (topic, partition) pair, got {value!r}")
    return TopicPartition(topic, partition)


class Consumer:
    """A Kafka consumer in today's shape: ``subscribe``/``assign``, ``poll``, ``commit``.

    See the module docstring for the contract. Not thread-safe (as Java's), except
    ``close()``, which may be called from any thread and ends a waiting ``poll``.

    Args:
        config: a PollConsumerConfig or a mapping of Kafka property names
            (``{"bootstrap.servers": ..., "group.id": ...}``); or None and keyword settings.
        **settings: further settings (any spelling); they override ``config``.

    Raises:
        ConfigError: unknown keys, bad values, or a setting this build cannot honour.
    """

    @staticmethod
    def create(config: Any = None, /, **kwargs: Any) -> ConsumerConnector:
        """Kafka 0.8's factory: a ``ConsumerConnector`` (see :mod:`hmbclient.consumer.connector`).

        Args:
            config: a ConsumerConfig or a mapping of 0.8 property names.
            **kwargs: ``rebalance_listener=``, ``status_listener=`` and settings.

        Returns:
            The ConsumerConnector.
        """
        from hmbclient.consumer.connector import Consumer as ConnectorFactory

        return ConnectorFactory.create(config, **kwargs)

    def __init__(self, config: PollConsumerConfig | Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        if isinstance(config, PollConsumerConfig):
            cfg = config.replace(**settings) if settings else config
        elif config is None:
            cfg = PollConsumerConfig.from_properties(settings)
        elif isinstance(config, Mapping):
            cfg = PollConsumerConfig.from_properties(config, **settings)
        else:
            raise ConfigError(f"Consumer expects a PollConsumerConfig or a mapping, not {type(config).__name__}")
        from .assignors import GROUP_ASSIGNORS

        if cfg.group_protocol == "classic" and cfg.partition_assignment_strategy not in GROUP_ASSIGNORS:
            raise ConfigError(
                f"partition.assignment.strategy must be one of {sorted(GROUP_ASSIGNORS)}, "
                f"got {cfg.partition_assignment_strategy!r}"
            )
        fetcher_extra: dict[str, Any] = {}
        if cfg.isolation_level != "read_uncommitted":
            fetcher_extra["isolation_level"] = 1  # the fetcher's read_committed
        self.config = cfg
        self._key_decode = cfg.key_deserializer.from_message if cfg.key_deserializer is not None else None
        self._value_decode = cfg.value_deserializer.from_message if cfg.value_deserializer is not None else None
        self._lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._closed = False
        security = Security.from_config(cfg)
        self._client = NetClient(
            list(cfg.bootstrap_servers),
            client_id=cfg.client_id,
            api_version=cfg.api_version,
            request_timeout_ms=cfg.request_timeout_ms,
            receive_buffer_bytes=cfg.receive_buffer_bytes if cfg.receive_buffer_bytes > 0 else None,
            security=security,
            name=f"hmb-consumer-io-{cfg.client_id}",
        )
        self._metadata = Metadata(self._client, allow_auto_topic_creation=False)
        # Without deserializers the fetchers decode straight into ConsumerRecords.
        self._stream = KafkaStream(
            "poll",
            queued_max_chunks=cfg.queued_max_message_chunks,
            record_class=ConsumerRecord if self._key_decode is None and self._value_decode is None else None,
        )
        self._metrics = ConsumerMetrics(Metrics(tags={"client-id": cfg.client_id or ""}))
        # paused partitions keep their info (and lag) too
        self._metrics.watch_lag(lambda: [(pti.high_watermark, pti.consumed) for pti in self._ptis.values()])
        self._fetchers = FetcherManager(
            self._client,
            self._metadata,
            fetch_max_bytes=cfg.max_partition_fetch_bytes,
            min_bytes=cfg.fetch_min_bytes,
            max_wait_ms=cfg.fetch_max_wait_ms,
            auto_offset_reset="smallest" if cfg.auto_offset_reset == "earliest" else "largest",
            refresh_leader_backoff_ms=max(cfg.retry_backoff_ms, 50),
            request_timeout_ms=cfg.request_timeout_ms,
            metrics=self._metrics,
            **fetcher_extra,
        )
        # The coordinator's own client and the offsets on it (only with a group.id).
        self._group_client: NetClient | None = None
        self._storage: KafkaOffsetStorage | None = None
        if cfg.group_id is not None:
            self._group_client = NetClient(
                list(cfg.bootstrap_servers),
                client_id=cfg.client_id,
                api_version=cfg.api_version,
                request_timeout_ms=cfg.request_timeout_ms,
                security=security,
                name=f"hmb-group-io-{cfg.group_id}",
            )
            self._storage = KafkaOffsetStorage(
                self._group_client, cfg.group_id, backoff_ms=cfg.retry_backoff_ms, timeout_ms=cfg.request_timeout_ms
            )
        self.consumer_id = make_consumer_id(cfg.group_id or cfg.client_id)
        self._member: BrokerGroupMember | ConsumerProtocolMember | None = None
        self._subscription: Subscription | None = None
        self._manual = False
        # tp -> its PartitionTopicInfo (copy-on-write under _lock); paused ones keep theirs
        # (revoked, not fetched) so their position survives.
        self._ptis: dict[TopicPartition, PartitionTopicInfo] = {}
        self._paused: set[TopicPartition] = set()
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._last_commit = time.monotonic()
        self._last_poll = time.monotonic()
        self._in_poll = False
        self._rejoin = False  # left the group for max.poll.interval.ms: the next poll joins
        self._watchdog_stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._committer: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ subscription

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join ``group.id`` for these topics (a list), or every topic a regex matches, now
        and later (a ``re.Pattern``, or a string starting with ``^`` as in confluent-kafka).
        A further call replaces the subscription (the group rebalances).

        Args:
            topics: topic names, or a pattern.
            on_assign: ``fn(consumer, partitions)`` once partitions are ours.
            on_revoke: ``fn(consumer, partitions)`` before they go (committed first with auto commit).
            on_lost: ``fn(consumer, partitions)`` when they went without a commit.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: no group.id, or partitions were assign()ed.
            ConfigError: no topics, or a bad pattern.
            CoordinationError: no group coordinator answered.
        """
        self._check_open()
        if self.config.group_id is None:
            raise IllegalStateError("subscribe() needs a group.id; use assign() without a group")
        if self._manual:
            raise IllegalStateError("subscribe() after assign(): call unsubscribe() first")
        subscription = self._subscription_for(topics)
        with self._lock:
            self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
            self._subscription = subscription
            member = self._member
            if member is not None:
                member.subscription = subscription
                member.trigger("subscription changed")
                return
            self._rejoin = False
            try:
                self._join()
            except BaseException:
                self._subscription = None  # as before the call: the caller may fix the cause and retry
                raise

    def _subscription_for(self, topics: Any) -> Subscription:
        try:
            if isinstance(topics, re.Pattern) or (isinstance(topics, str) and topics.startswith("^")):
                pattern = topics.pattern if isinstance(topics, re.Pattern) else topics
                re.compile(pattern)
                return Subscription(topic_filter=Whitelist(pattern), num_streams=1)
            names = [topics] if isinstance(topics, str) else list(topics)
            if not names or not all(isinstance(t, str) and t for t in names):
                raise ConfigError(f"subscribe() needs topic names or a pattern, got {topics!r}")
            return Subscription(topic_counts={t: 1 for t in names})
        except (re.error, ValueError, TypeError) as exc:
            raise ConfigError(f"bad subscription {topics!r}: {exc}") from None

    def _join(self) -> None:
        # A new member of the group (first subscribe, or the next poll after a poll timeout).
        cfg = self.config
        assert self._group_client is not None and self._storage is not None and self._subscription is not None
        # What both kinds of member take alike (one engine: same listener, fetchers, stream
        # and offset storage).
        common: dict[str, Any] = dict(
            client=self._group_client,
            offsets=self._storage,
            group=cfg.group_id,
            consumer_id=self.consumer_id,
            subscription=self._subscription,
            listener=self,
            metadata_partitions=self._metadata_partitions,
            rebalance_timeout_ms=cfg.max_poll_interval_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            exclude_internal_topics=cfg.exclude_internal_topics,
            status=self._member_status,
        )
        if cfg.group_instance_id is not None:
            common["group_instance_id"] = cfg.group_instance_id
        member: BrokerGroupMember | ConsumerProtocolMember
        if cfg.group_protocol == "consumer":
            # Kafka 4's protocol (KIP-848): the coordinator assigns.
            member = ConsumerProtocolMember(
                remote_assignor=cfg.group_remote_assignor,
                # (the session is the coordinator's, unknown here: partitions count as lost after
                # its default group.consumer.session.timeout.ms without an answered heartbeat)
                session_timeout_ms=45_000,
                **common,
            )
        else:
            member = BrokerGroupMember(
                assignor=cfg.partition_assignment_strategy or "range",
                session_timeout_ms=cfg.session_timeout_ms or 45_000,  # (set by the config for classic)
                heartbeat_interval_ms=cfg.heartbeat_interval_ms or 3_000,
                **common,
            )
        self._storage.generation = member.commit_generation
        self._member = member
        self._last_poll = time.monotonic()
        try:
            member.start()
        except BaseException:
            self._member = None
            member.close(release=False)
            raise
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch_polls, name=f"hmb-poll-watchdog-{cfg.group_id}", daemon=True)
            self._watchdog.start()

    def assign(self, partitions: Partitions) -> None:
        """Take exactly these partitions, without group membership (replaces the previous
        assignment). They start at their committed offset (with a group.id) or at
        ``auto.offset.reset``.

        Args:
            partitions: ``(topic, partition)`` pairs.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: the consumer is subscribe()d.
            ConfigError: not (topic, partition) pairs.
        """
        self._check_open()
        wanted = [_tp(p) for p in partitions]
        if self._subscription is not None:
            raise IllegalStateError("assign() after subscribe(): call unsubscribe() first")
        with self._lock:
            gone = [tp for tp in self._ptis if tp not in wanted]
            positions = self._drop(gone)
            if gone and self.config.enable_auto_commit and self._storage is not None:
                # As Java's assign(): the old assignment's positions are committed first.
                todo = {tp: o for tp, o in positions.items() if o is not None}
                try:
                    self._commit_now(todo)
                except HmbError as exc:
                    log.warning("%s: commit of the previous assignment failed: %s", self.consumer_id, exc)
            new = [tp for tp in wanted if tp not in self._ptis]
            self._manual = bool(wanted)
            self._take(new)

    def unsubscribe(self) -> None:
        """Leave the group (committing first with auto commit) or drop the assignment.

        Raises:
            ConsumerClosedError: after close().
        """
        self._check_open()
        with self._lock:
            member, self._member = self._member, None
            self._subscription = None
            self._rejoin = False
        if member is not None:
            member.close(release=True)
        with self._lock:
            self._drop(list(self._ptis))
            self._manual = False
            if self._storage is not None:
                self._storage.generation = None  # commits after this are a memberless group's

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned now (by the group or by assign()), paused ones included."""
        return set(self._ptis)

    # ------------------------------------------------------------------ poll

    def poll(self, timeout: float | None = None, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records of the assigned partitions, at most ``max_records`` (``max.poll.records``).

        Returns as soon as records are there; waits up to ``timeout`` seconds (None: until
        records come) otherwise. Auto commit and the group's rejoin after a poll timeout happen
        here.

        Args:
            timeout: seconds to wait for the first record.
            max_records: most records returned (default ``max.poll.records``).

        Returns:
            The records, in offset order per partition; empty on timeout or close.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: nothing subscribed or assigned.
            HmbError: a partition cannot be fetched (a record larger than
                ``max.partition.fetch.bytes``, a corrupt batch, no authorization...).
        """
        self._check_open()
        if self._subscription is None and not self._manual:
            raise IllegalStateError("poll() needs subscribe() or assign() first")
        now = time.monotonic()
        self._last_poll = now
        fatal = getattr(self._member, "fatal_error", None)
        if fatal is not None:
            # The group member stopped for good (e.g. another process took our group.instance.id).
            raise fatal
        if self._rejoin:
            with self._lock:
                if self._rejoin and self._member is None and self._subscription is not None:
                    self._rejoin = False
                    self._join()
        cfg = self.config
        if cfg.enable_auto_commit and self._storage is not None and now - self._last_commit >= cfg.auto_commit_interval_ms / 1000:
            self._auto_commit()
        self._in_poll = True
        try:
            batches = self._stream.take(max_records or cfg.max_poll_records, timeout)
        finally:
            self._in_poll = False
            self._last_poll = time.monotonic()
        return self._records(batches)

    def _poll_ready(self, max_records: int | None = None) -> list[ConsumerRecord] | None:
        """(hmbclient.aio) ``poll(0)`` when it cannot block: what is queued now, or None when
        this poll has I/O to do first (an auto commit due, a rejoin) and must run in a thread.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: nothing subscribed or assigned.
        """
        self._check_open()
        if self._subscription is None and not self._manual:
            raise IllegalStateError("poll() needs subscribe() or assign() first")
        now = time.monotonic()
        cfg = self.config
        if self._rejoin or (
            cfg.enable_auto_commit and self._storage is not None and now - self._last_commit >= cfg.auto_commit_interval_ms / 1000
        ):
            return None
        self._last_poll = now
        return self._records(self._stream.take(max_records or cfg.max_poll_records, 0))

    def _records(self, batches: list[tuple[PartitionTopicInfo, list[Any]]]) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        key_decode, value_decode = self._key_decode, self._value_decode
        new, cls = _new_record, ConsumerRecord
        if key_decode is None and value_decode is None:
            # ConsumerRecords already: the fetcher decoded them so (KafkaStream.record_class)
            if len(batches) == 1:
                return batches[0][1]  # a list of its own (take copies out of the chunk)
            for _, records in batches:
                out.extend(records)
            return out
        for pti, records in batches:
            topic, partition = pti.topic, pti.partition
            for r in records:
                key = r[2] if key_decode is None else key_decode(r[2])
                value = r[3] if value_decode is None else value_decode(r[3])
                out.append(new(cls, (r[0], r[1], key, value, r[4], topic, partition)))
        return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one, polling as needed, until close()."""
        while not self._closed:
            try:
                batch = self.poll(0.5)
            except ConsumerClosedError:
                return
            yield from batch

    # ------------------------------------------------------------------ positions

    def position(self, partition: tuple[str, int]) -> int:
        """The offset the next record handed out of ``partition`` will have.

        Args:
            partition: an assigned ``(topic, partition)``.

        Returns:
            The offset (looked up now, as ``auto.offset.reset`` says, when not known yet).

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: the partition is not assigned.
        """
        self._check_open()
        tp = _tp(partition)
        pti = self._assigned(tp)
        if pti.consumed is not None:
            return pti.consumed
        offset = self._list_offsets({tp: LATEST_TIMESTAMP if self.config.auto_offset_reset == "latest" else EARLIEST_TIMESTAMP})[tp]
        assert offset is not None
        self.seek(tp, offset[0])
        return offset[0]

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Hand out ``partition`` from ``offset`` on (the next poll; fetched data is dropped).

        Args:
            partition: an assigned ``(topic, partition)``.
            offset: the next offset to hand out (>= 0).

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: the partition is not assigned.
            ConfigError: a negative offset.
        """
        self._check_open()
        tp = _tp(partition)
        if not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"seek() needs an offset >= 0, got {offset!r}")
        with self._lock:
            old = self._assigned(tp)
            self._replace(tp, old, offset)

    def seek_to_beginning(self, partitions: Partitions | None = None) -> None:
        """Seek to the earliest offset of these partitions (default: every assigned one).

        Args:
            partitions: assigned ``(topic, partition)`` pairs.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: a partition is not assigned.
        """
        self._seek_to(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, partitions: Partitions | None = None) -> None:
        """Seek to the end (the next offset to be written) of these partitions.

        Args:
            partitions: assigned ``(topic, partition)`` pairs (default: every assigned one).

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: a partition is not assigned.
        """
        self._seek_to(partitions, LATEST_TIMESTAMP)

    def _seek_to(self, partitions: Partitions | None, timestamp: int) -> None:
        self._check_open()
        tps = list(self._ptis) if partitions is None else [_tp(p) for p in partitions]
        for tp in tps:
            self._assigned(tp)
        for tp, found in self._list_offsets(dict.fromkeys(tps, timestamp)).items():
            if found is not None:
                self.seek(tp, found[0])

    def pause(self, partitions: Partitions) -> None:
        """Stop fetching and handing out these partitions (they stay assigned).

        Args:
            partitions: assigned ``(topic, partition)`` pairs.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: a partition is not assigned.
        """
        self._check_open()
        with self._lock:
            for tp in [_tp(p) for p in partitions]:
                pti = self._assigned(tp)
                if tp in self._paused:
                    continue
                self._fetchers.remove([tp])
                pti.stream.revoke(pti)  # hand-out stops; pti.consumed keeps the position
                self._paused.add(tp)

    def resume(self, partitions: Partitions) -> None:
        """Fetch and hand out paused partitions again, from their position.

        Args:
            partitions: assigned ``(topic, partition)`` pairs.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: a partition is not assigned.
        """
        self._check_open()
        with self._lock:
            for tp in [_tp(p) for p in partitions]:
                pti = self._assigned(tp)
                if tp not in self._paused:
                    continue
                self._paused.discard(tp)
                self._replace(tp, pti, pti.consumed)

    def paused(self) -> set[TopicPartition]:
        """The partitions paused now."""
        return set(self._paused)

    def _assigned(self, tp: TopicPartition) -> PartitionTopicInfo:
        pti = self._ptis.get(tp)
        if pti is None:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer")
        return pti

    def _replace(self, tp: TopicPartition, old: PartitionTopicInfo, offset: int | None) -> None:
        # Case (replace): retire the old info (in-flight chunks refused), fetch a fresh one.
        if not old.revoked:
            self._fetchers.remove([tp])
            old.stream.revoke(old)
        pti = PartitionTopicInfo(tp.topic, tp.partition, self._stream, old.thread_id, offset)
        pti.committed = old.committed
        if tp in self._paused:
            pti.revoked = True
        self._ptis = {**self._ptis, tp: pti}
        if not pti.revoked:
            self._fetchers.add([pti])

    def _take(self, tps: list[TopicPartition]) -> None:
        # Own these partitions: committed offsets (group) or auto.offset.reset (None).
        offsets: Mapping[tuple[str, int], int | None] = self._storage.fetch(tps) if self._storage is not None and tps else {}
        ptis = {tp: PartitionTopicInfo(tp.topic, tp.partition, self._stream, self.consumer_id, offsets.get(tp)) for tp in tps}
        self._ptis = {**self._ptis, **ptis}
        self._fetchers.add(ptis.values())

    def _drop(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        # Stop handing out and fetching; return the final positions.
        if not tps:
            return {}
        self._fetchers.remove(tps)
        positions = {}
        remaining = dict(self._ptis)
        for tp in tps:
            pti = remaining.pop(tp, None)
            self._paused.discard(tp)
            if pti is not None:
                positions[tp] = pti.consumed if pti.revoked else pti.stream.revoke(pti)
        self._ptis = remaining
        return positions

    # ------------------------------------------------------------------ offsets

    def commit(
        self,
        offsets: Mapping[tuple[str, int], int] | None = None,
        asynchronous: bool = False,
        callback: CommitCallback | None = None,
    ) -> Future[dict[TopicPartition, int]] | None:
        """Commit offsets (the next offset to read, per partition) to the group coordinator.

        Args:
            offsets: ``{(topic, partition): offset}``; None commits the position of every
                assigned partition.
            asynchronous: return at once; the commit runs on the consumer's one commit thread
                (commits stay in call order).
            callback: ``fn(error or None, offsets)`` once the commit is done.

        Returns:
            None (synchronous), or a Future of the committed offsets.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: no group.id.
            ConfigError: bad offsets.
            HmbError: (synchronous) the coordinator refused the commit, e.g.
                IllegalGenerationError after the group rebalanced without us.
        """
        self._check_open()
        todo = self._commit_offsets(offsets)
        if not asynchronous:
            try:
                self._commit_now(todo)
            except BaseException as exc:
                if callback is not None:
                    callback(exc, todo)
                raise
            if callback is not None:
                callback(None, todo)
            return None
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hmb-commit")

        def run() -> dict[TopicPartition, int]:
            try:
                self._commit_now(todo)
            except BaseException as exc:
                if callback is not None:
                    callback(exc, todo)
                raise
            if callback is not None:
                callback(None, todo)
            return todo

        return self._committer.submit(run)

    def _commit_offsets(self, offsets: Mapping[tuple[str, int], int] | None) -> dict[TopicPartition, int]:
        if self._storage is None:
            raise IllegalStateError("commit() needs a group.id")
        if offsets is None:
            return {tp: pti.consumed for tp, pti in self._ptis.items() if pti.consumed is not None}
        if not isinstance(offsets, Mapping):
            raise ConfigError(f"commit(offsets=) takes {{(topic, partition): offset}}, got {type(offsets).__name__}")
        out = {}
        for tp, offset in offsets.items():
            if not isinstance(offset, int) or offset < 0:
                raise ConfigError(f"commit: offset of {tp!r} must be an int >= 0, got {offset!r}")
            out[_tp(tp)] = offset
        return out

    def _commit_now(self, offsets: dict[TopicPartition, int]) -> None:
        assert self._storage is not None
        if not offsets:
            return
        plain = {(tp[0], tp[1]): offset for tp, offset in offsets.items()}
        with self._commit_lock:
            started = monotonic_ms()
            self._storage.commit(plain)
            self._metrics.committed(monotonic_ms() - started)
        for tp, offset in offsets.items():
            pti = self._ptis.get(tp)
            if pti is not None:
                pti.committed = offset

    def _member_status(self, kind: str, fields: Mapping[str, Any]) -> None:
        # (group member thread) a status event: completed rebalances feed the metrics.
        if kind == "rebalance_completed":
            self._metrics.rebalanced(float(fields.get("seconds", 0.0)) * 1000.0)

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind :meth:`metrics` (tag ``client-id``): what the exporters of
        :mod:`hmbclient.metrics_exporters` read."""
        return self._metrics.registry

    def metrics(self) -> dict[str, dict[str, float]]:
        """The consumer's metrics under Kafka's names: ``{"consumer-fetch-manager-metrics":
        {name: value}, "consumer-coordinator-metrics": {...}}`` (see
        :mod:`hmbclient.consumer.metrics`); the same shape as ``Producer.metrics()``.

        Returns:
            ``{group: {name: value}}``.
        """
        return self._metrics.snapshot()

    def _auto_commit(self) -> None:
        # Case (auto commit): positions that moved since their last commit.
        self._last_commit = time.monotonic()
        todo = {tp: pti.consumed for tp, pti in self._ptis.items() if pti.consumed is not None and pti.consumed != pti.committed}
        try:
            self._commit_now(todo)
        except HmbError as exc:
            log.warning("%s: auto commit failed: %s", self.consumer_id, exc)

    def committed(self, partitions: Partitions, timeout: float | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offsets of these partitions (None: nothing committed).

        Args:
            partitions: ``(topic, partition)`` pairs.
            timeout: unused; the request timeout bounds the call (kept for confluent-kafka's signature).

        Returns:
            ``{TopicPartition: offset or None}``.

        Raises:
            ConsumerClosedError: after close().
            IllegalStateError: no group.id.
        """
        self._check_open()
        if self._storage is None:
            raise IllegalStateError("committed() needs a group.id")
        tps = [_tp(p) for p in partitions]
        return {TopicPartition(*tp): offset for tp, offset in self._storage.fetch(tps).items()}

    def beginning_offsets(self, partitions: Partitions) -> dict[TopicPartition, int]:
        """The earliest offset of each partition (assigned or not).

        Args:
            partitions: ``(topic, partition)`` pairs.

        Returns:
            ``{TopicPartition: offset}``.

        Raises:
            ConsumerClosedError: after close().
            HmbError: a partition's leader refused (unknown topic...).
        """
        self._check_open()
        found = self._list_offsets(dict.fromkeys((_tp(p) for p in partitions), EARLIEST_TIMESTAMP))
        return {tp: v[0] for tp, v in found.items() if v is not None}

    def end_offsets(self, partitions: Partitions) -> dict[TopicPartition, int]:
        """The end (next offset to be written) of each partition.

        Args:
            partitions: ``(topic, partition)`` pairs.

        Returns:
            ``{TopicPartition: offset}``.

        Raises:
            ConsumerClosedError: after close().
            HmbError: a partition's leader refused (unknown topic...).
        """
        self._check_open()
        found = self._list_offsets(dict.fromkeys((_tp(p) for p in partitions), LATEST_TIMESTAMP))
        return {tp: v[0] for tp, v in found.items() if v is not None}

    def offsets_for_times(self, timestamps: Mapping[tuple[str, int], int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset whose timestamp is at or after the given time, per partition.

        Args:
            timestamps: ``{(topic, partition): milliseconds since the epoch}``.

        Returns:
            ``{TopicPartition: OffsetAndTimestamp}``, None where no record is that recent.

        Raises:
            ConsumerClosedError: after close().
            ConfigError: a negative timestamp.
            HmbError: a partition's leader refused.
        """
        self._check_open()
        asked = {}
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or ts < 0:
                raise ConfigError(f"offsets_for_times: timestamp of {tp!r} must be an int >= 0, got {ts!r}")
            asked[_tp(tp)] = ts
        return {tp: None if v is None else OffsetAndTimestamp(*v) for tp, v in self._list_offsets(asked).items()}

    def _list_offsets(self, asked: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int] | None]:
        """ListOffsets (v1+) to each partition's leader: ``{tp: (offset, timestamp) or None}``."""
        if not asked:
            return {}
        timeout = self.config.request_timeout_ms
        topics = sorted({tp.topic for tp in asked})
        if self._metadata.needs_refresh(topics) or any(self._metadata.leader(*tp) is None for tp in asked):
            self._metadata.refresh(topics, timeout_ms=timeout)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in asked:
            leader = self._metadata.leader(*tp)
            if leader is None:
                raise for_code(ErrorCode.LEADER_NOT_AVAILABLE)(f"ListOffsets: no leader known for {tp.topic}-{tp.partition}")
            by_leader.setdefault(leader, []).append(tp)
        out: dict[TopicPartition, tuple[int, int] | None] = {}
        level = 1 if self.config.isolation_level == "read_committed" else 0
        for leader, tps in by_leader.items():
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(
                    {"partition": tp.partition, "timestamp": asked[tp], "max_num_offsets": 1, "current_leader_epoch": -1}
                )

            def build(versions: BrokerVersions, by_topic: dict[str, list[dict[str, Any]]] = by_topic) -> Any:
                if versions.version(ApiKey.LIST_OFFSETS) < 1:
                    raise UnsupportedByBroker("ListOffsets v1 (offsets by time) is not served by this broker")
                return versions.build(
                    ApiKey.LIST_OFFSETS,
                    replica_id=-1,
                    isolation_level=level,
                    topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                )

            resp = self._client.call(leader, build, timeout_ms=timeout, api_key=ApiKey.LIST_OFFSETS)
            for topic in resp.topics:
                for answer in topic.partitions:
                    tp = TopicPartition(topic.topic, answer.partition)
                    if answer.error_code:
                        raise for_code(answer.error_code)(f"ListOffsets {tp.topic}-{tp.partition}")
                    out[tp] = None if answer.offset < 0 else (int(answer.offset), int(answer.timestamp))
        return out

    # ------------------------------------------------------------------ the group member's listener

    def on_assign(self, partitions: Mapping[tuple[str, int], str]) -> None:
        """(group member) Our share of the new generation: fetch it from its committed offsets."""
        tps = sorted(TopicPartition(*tp) for tp in partitions)
        with self._lock:
            self._take([tp for tp in tps if tp not in self._ptis])  # only what is new (cooperative: the increment)
        if self._on_assign is not None:
            try:
                self._on_assign(self, tps)
            except Exception:  # noqa: BLE001 - user code must not break the rebalance
                log.exception("on_assign raised")

    def on_revoke(self, partitions: Mapping[tuple[str, int], str], commit: bool) -> None:
        """(group member) Partitions go: stop hand-out, commit (auto commit), tell the user."""
        tps = sorted(TopicPartition(*tp) for tp in partitions)
        with self._lock:
            for tp in tps:
                pti = self._ptis.get(tp)
                if pti is not None and not pti.revoked:
                    self._fetchers.remove([tp])
                    pti.stream.revoke(pti)
            if commit and self.config.enable_auto_commit:
                todo = {tp: self._ptis[tp].consumed for tp in tps if tp in self._ptis}
                todo = {tp: o for tp, o in todo.items() if o is not None and o != self._ptis[tp].committed}
                try:
                    self._commit_now(todo)  # type: ignore[arg-type]
                except HmbError as exc:
                    log.warning("%s: commit before revoking failed: %s", self.consumer_id, exc)
            callback = self._on_revoke if commit else self._on_lost
            if callback is not None:
                try:
                    callback(self, tps)
                except Exception:  # noqa: BLE001
                    log.exception("%s raised", "on_revoke" if commit else "on_lost")
            self._drop(tps)

    def on_pause(self) -> None:
        """(listener protocol) Unused in broker-coordinated groups."""

    def on_resume(self) -> None:
        """(listener protocol) Unused in broker-coordinated groups."""

    def on_brokers_changed(self, brokers: Any) -> None:
        """(listener protocol) Unused in broker-coordinated groups."""

    def _metadata_partitions(self, topics: list[str] | None) -> Mapping[str, list[int]]:
        view = self._metadata.refresh(topics, timeout_ms=self.config.request_timeout_ms)
        return {
            name: sorted(info.partitions)
            for name, info in view.topics.items()
            if (topics is None or name in topics) and info.partitions and not info.error_code
        }

    def _watch_polls(self) -> None:
        # Case (poll timeout): leave the group when no poll began within max.poll.interval.ms.
        limit = self.config.max_poll_interval_ms / 1000
        while not self._watchdog_stop.wait(min(1.0, limit / 10)):
            member = self._member
            if member is None or self._in_poll or time.monotonic() - self._last_poll < limit:
                continue
            with self._lock:
                if self._member is not member or self._closed:
                    continue
                log.warning(
                    "%s: no poll() for max.poll.interval.ms (%d ms): leaving group %s; the next poll joins again",
                    self.consumer_id, self.config.max_poll_interval_ms, self.config.group_id,
                )
                self._member = None
                self._rejoin = True
            member.close(release=False)

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Leave the group (committing first with auto commit), stop fetching, close the
        connections; a poll waiting in another thread returns empty. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            member, self._member = self._member, None
        self._watchdog_stop.set()
        self._stream.close()
        try:
            if member is not None:
                member.close(release=True)
            elif self._manual and self.config.enable_auto_commit and self._storage is not None:
                try:
                    self._auto_commit()
                except HmbError as exc:
                    log.warning("%s: final commit failed: %s", self.consumer_id, exc)
        finally:
            if self._committer is not None:
                self._committer.shutdown(wait=True)
            self._fetchers.close()
            self._client.close()
            if self._group_client is not None:
                self._group_client.close()
            if self._watchdog is not None and self._watchdog is not threading.current_thread():
                self._watchdog.join(5)

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the Consumer is closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def member_id(self) -> str | None:
        """This member's id in the group (None when not a member)."""
        member = self._member
        return member.member_id if member is not None else None

    @property
    def generation(self) -> int:
        """The group generation this member's assignment belongs to (-1: none)."""
        member = self._member
        return member.generation_id if member is not None else -1

    def __repr__(self) -> str:
        return f"Consumer(group={self.config.group_id!r}, assigned={len(self._ptis)}, closed={self._closed})"

