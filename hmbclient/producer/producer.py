"""Producer: the one front for sync and async sending (Kafka 0.8's producer API and configs).

    producer = Producer(metadata_broker_list="127.0.0.1:9092", producer_type="async")
    futures = producer.send(ProducerData("events", key=b"user-1", messages=[b"a", b"b"]))
    futures[0].result(timeout=5)        # RecordMetadata(topic, partition, offset)
    producer.flush(); producer.close()

``send`` serializes (``serializer`` / ``key_serializer``; skipped for a ProducerData that is
already a list of raw bytes with a null or bytes key), and then every message takes one path,
``_queue``, holding the one definition of each check: the dialect's key rule, value types and
sizes, the topic; one partition per ProducerData (``partitioner``; a one-partition topic skips
it); then the partition's open batch, through the accumulator's one entry point
(``RecordAccumulator.append``). One exception, for speed: an async send of a ProducerData
holding one ``bytes`` message with a null or ``bytes`` key, to a topic already known, is
inlined in ``send`` and needs only the type and size checks and the partition; the rest is
``append``'s, and tests/client/test_producer_fast_path.py holds it to ``_queue``'s behaviour.
A transactional producer takes it only while a transaction is open (T2: the transaction
manager switches it on and off with its state), so the check stays out of the message loop.
From there both modes use the one :class:`SendEngine` (sender.py: drain, group by leader,
send, apply the answers, retry or fail):

* sync: an accumulator with no linger and no message bound; ``send`` queues, then drives the
  engine in the caller's thread until its batches are complete (one caller drives at a time;
  it completes whatever else is in flight on the way). Returns completed futures, or raises
  the first error after completing every future (no message is left unaccounted for).
* async: the producer's :class:`RecordAccumulator`, under one short lock; returns lazily built
  futures and the :class:`SenderThread` runs the engine. A full queue blocks / fails per
  ``queue_enqueue_timeout_ms`` (QueueFullError).
* with an ``event_handler``: hands ProducerData to it instead (see callbacks.py).

``produce(topic, value, key=, partition=, headers=, timestamp=, on_delivery=)`` is the same
path for one message in confluent-kafka's shape: no future and no ProducerData; it returns
nothing, and ``on_delivery(err, DeliveryReport)`` is called once per message from ``poll()`` /
``flush()`` / ``close()`` in the caller's thread (``err`` None or the hmbclient.errors error).
Its checks are ``_queue``'s (key rule, type, size, partition), then ``RecordAccumulator.append``
(which keeps the callback in the batch and hands the completed batch to ``poll``). Decisions:

* a full queue (async) behaves as ``send``: per ``queue_enqueue_timeout_ms`` (-1 blocks until
  there is room, 0 raises at once, >0 raises after that long); the error, QueueFullError, is
  also a ``BufferError`` so confluent-kafka code that catches BufferError keeps working.
* sync producer: ``produce`` only queues; ``poll`` / ``flush`` drive the engine in the
  caller's thread (``poll(0)`` sends what is queued and serves what is already answered,
  without waiting). Once ``queue_buffering_max_messages`` are queued, ``produce`` drives the
  engine itself until there is room (no background thread could free it).
* ``flush(timeout)`` returns the number of messages still unacknowledged (0: all done), as
  confluent-kafka does, and serves every waiting callback; ``close()`` serves the callbacks
  of everything it completed or failed (ProducerClosedError) before it returns.
* a callback that raises: the batch's other callbacks still run, then ``poll`` raises the
  first such exception (no report is lost or served twice).
* delivery reports are not bounded by ``queue_buffering_max_messages``: call ``poll()``.

``produce_batch(topic, values, keys, on_delivery)`` is ``produce`` for many messages to one
topic: (P1) every message's checks (types, key rule, ``message_max_bytes``) before anything
is queued, so a refused call queues nothing; (P2) the partitioner asked once per message (the
default one: once per distinct non-null key, being a pure function of it), in order, grouping
the messages per partition; (P3) one ``RecordAccumulator.append`` per group (per-message keys
and sizes; the group is admitted whole and rolls over across batches). It returns a
:class:`BatchOutcome` (per batch entered, which of the call's messages are in it): without
``on_delivery`` no report is made, and ``outcome.failed()`` after a flush names the failed
messages by index, so a caller that only needs failures pays nothing per acknowledged message. A
public method rather than a sink-private one: any caller with columns of rows (the Spark sink,
bulk loaders) gains the same, and it keeps every check in the producer.

Errors raised by ``send`` itself (nothing was queued for the failing ProducerData): ConfigError,
TypeError (a value that is not bytes and no serializer), MessageSizeTooLargeError (over
``message_max_bytes``), UnsupportedByBroker (a keyed message to HMB, which never answers one),
QueueFullError, ProducerClosedError, and metadata errors for an unknown/unreachable topic. (A
ProducerData larger than one batch is queued in consecutive batches: a QueueFullError on a
later one leaves the earlier ones queued, and their futures complete as usual.)
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.errors import (
    HmbError,
    MessageSizeTooLargeError,
    ProducerClosedError,
    QueueFullError,
    RequestTimedOutError,
    TransactionStateError,
    UnsupportedByBroker,
)
from hmbclient.metrics import Metrics
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.retry import retry_policy
from hmbclient.net.security import Security
from hmbclient.producer.accumulator import PartitionQueue, RecordAccumulator, TopicState
from hmbclient.producer.callbacks import overridden_hooks
from hmbclient.producer.config import ProducerConfig
from hmbclient.producer.data import (
    BatchOutcome,
    DeliveryReport,
    ProducerBatch,
    ProducerData,
    RecordFuture,
    RecordMetadata,
    SendFutures,
)
from hmbclient.producer.idempotence import IdempotenceState
from hmbclient.producer.metrics import GROUP as PRODUCER_METRICS
from hmbclient.producer.metrics import ProducerMetrics
from hmbclient.producer.sender import Dispatcher, SendEngine, SenderThread, call_hook
from hmbclient.producer.transaction import FATAL, RETRY, TransactionManager, TxnState, classify
from hmbclient.protocol.records import NONE, codec_from_name
from partitioners import DefaultPartitioner

__all__ = ["Producer"]

_new_report = tuple.__new__

log = logging.getLogger("hmbclient.producer")


# Bytes a message adds beyond key and value in a v2 batch (attributes, varints, headers count);
# only used to size batches, so an estimate.
_RECORD_OVERHEAD = 12
# RecordBatch v2 header (61 bytes) plus the offset/size prefix, rounded up.
_BATCH_OVERHEAD = 100


def _open_client(cfg: ProducerConfig, metrics: Metrics | None = None) -> NetClient:
    """The producer's NetClient (its I/O thread starts; connections open on first use)."""
    return NetClient(
        cfg.metadata_broker_list,
        client_id=cfg.client_id,
        api_version=cfg.api_version,
        max_in_flight_requests_per_connection=cfg.max_in_flight_requests_per_connection,
        request_timeout_ms=cfg.request_timeout_ms,
        connect_timeout_ms=cfg.request_timeout_ms,
        reconnect_backoff_ms=min(50, max(1, cfg.retry_backoff_ms)),
        reconnect_backoff_max_ms=max(1000, cfg.retry_backoff_ms),
        send_buffer_bytes=cfg.send_buffer_bytes if cfg.send_buffer_bytes > 0 else None,
        security=Security.from_config(cfg),
        name="hmbclient-io-producer",
        metrics=metrics,
        metric_group=PRODUCER_METRICS,
    )


def _bad_value(v: Any, what: str) -> TypeError:
    return TypeError(
        f"message {what} must be bytes, bytearray, memoryview or None, not {type(v).__name__}; "
        f"set {'key_serializer' if what == 'key' else 'serializer'} (e.g. encoders.StringEncoder())"
    )


class Producer:
    """Sends ProducerData to brokers; ``producer_type`` "sync" (default) or "async"."""

    def __init__(self, config: ProducerConfig | None = None, /, **settings: Any) -> None:
        """Create a producer (connections open on first use).

        Args:
            config: a ProducerConfig; or give its fields as keyword arguments, in any spelling
                (``metadata_broker_list`` / ``bootstrap_servers``, ``queue_time``, ...).

        Raises:
            ConfigError: unknown keys or bad values.
        """
        if config is None:
            config = ProducerConfig(**settings)
        elif settings:
            config = config.replace(**settings)
        self.config = config
        self._closed = False
        self._listeners: list[Any] = []
        self._metrics = Metrics(tags={"client-id": config.client_id or ""})
        self._client = _open_client(config, self._metrics)
        refresh = config.topic_metadata_refresh_interval_ms
        self._metadata = Metadata(
            self._client,
            max_age_ms=refresh if refresh >= 0 else -1,
            retry_backoff_ms=config.retry_backoff_ms,
        )
        self._init_message_rules(config)
        self._hooks = overridden_hooks(config.callback_handler)
        self._policy = retry_policy(max_retries=config.message_send_max_retries, backoff_ms=config.retry_backoff_ms)
        self._dispatcher = Dispatcher(
            self._client,
            self._metadata,
            acks=config.request_required_acks,
            request_timeout_ms=config.request_timeout_ms,
            codec_for=self._codec_for,
            hooks=self._hooks,
        )
        self._dispatcher.metrics = ProducerMetrics(self._metrics)
        self._init_pipeline(config)
        acc, engine = self._acc, getattr(self, "_engine", None)
        self._dispatcher.metrics.watch(lambda: acc.queued if acc is not None else 0,
                                       lambda: engine.in_flight if engine is not None else 0)

    def _init_message_rules(self, cfg: ProducerConfig) -> None:
        """How ``send`` turns and checks messages: serializers, the dialect's key rule, the size
        limits, the partitioner and the compression codec."""
        value_serializer = cfg.serializer
        key_serializer = cfg.key_serializer if cfg.key_serializer is not None else value_serializer
        self._encode_value = value_serializer.to_message if value_serializer is not None else None
        self._encode_key = key_serializer.to_message if key_serializer is not None else None
        dialect = self._client.dialect
        self._allows_keys = dialect.allows_keys
        self._dialect_label = dialect.broker_label
        self._message_max_bytes = cfg.message_max_bytes
        # A v2 batch is one "message" to the broker's message.max.bytes: batches, and the units
        # the sender merges them into, stay under message_max_bytes with room for the header.
        self._batch_cap = max(1, min(cfg.batch_max_bytes, cfg.message_max_bytes - _BATCH_OVERHEAD))
        self._partitioner = cfg.partitioner if cfg.partitioner is not None else DefaultPartitioner()
        self._codec = codec_from_name(cfg.compression_codec)
        self._compressed_topics = frozenset(cfg.compressed_topics)

    def _init_pipeline(self, cfg: ProducerConfig) -> None:
        """What ``send`` hands messages to: the event handler (sync, or async through its own
        queue and thread), the accumulator and its sender thread (async), or nothing (sync
        sends batch in a private accumulator and send in the caller's thread)."""
        self._async = cfg.producer_type == "async"
        self._event_handler = cfg.event_handler
        self._txn = TransactionManager(cfg.transactional_id, cfg.transaction_timeout_ms) if cfg.transactional_id else None
        self._events: _EventPipeline | None = None
        self._acc: RecordAccumulator | None = None
        self._sender: SenderThread | None = None
        if self._event_handler is not None:
            if self._async:
                self._events = _EventPipeline(self._event_handler, cfg)
        else:
            # Sync sends batch in an accumulator of their own kind (no linger, no message
            # bound: a send's batches are sent at once) and drive the same engine in the
            # caller's thread; async sends go to the sender thread.
            self._acc = RecordAccumulator(
                batch_num_messages=cfg.batch_num_messages if self._async else sys.maxsize,
                batch_max_bytes=self._batch_cap,
                linger_ms=cfg.queue_buffering_max_ms if self._async else 0,
                max_messages=cfg.queue_buffering_max_messages if self._async else sys.maxsize,
                enqueue_timeout_ms=cfg.queue_enqueue_timeout_ms if self._async else -1,
                max_request_bytes=self._batch_cap,
            )
            self._engine = SendEngine(
                self._acc,
                self._dispatcher,
                self._metadata,
                self._policy,
                max_retries=cfg.message_send_max_retries,
                retry_backoff_ms=cfg.retry_backoff_ms,
                refresh_topics=self._grow_topics,
                idempotence=IdempotenceState(explicit=cfg.enable_idempotence is True or self._txn is not None) if cfg.idempotence else None,
                emit=self._emit,
                transaction=self._txn,
            )
            if self._async:
                self._sender = SenderThread(self._engine)
                self._sender.start()
            self._drive = threading.Lock()  # one sync caller drives the engine at a time
        # The accumulator when send() may skip _convert: no serializer (messages are taken as
        # they are) and no after_enqueue hook to call; else None. Cleared by close().
        self._direct_ok = (
            self._async and self._encode_value is None and self._encode_key is None and "after_enqueue" not in self._hooks
        )
        self._direct_acc = self._acc if self._direct_ok and self._txn is None else None
        if self._txn is not None:
            # (T2) a transactional producer's inlined path is on only while a transaction is
            # open (the manager calls back on every state change): no state check per message.
            self._txn.on_state = self._txn_state

    def _txn_state(self, state: TxnState) -> None:
        # (T2) see __init__; never on again after close().
        self._direct_acc = self._acc if state is TxnState.IN_TRANSACTION and self._direct_ok and not self._closed else None

    @classmethod
    def from_properties(cls, props: dict[str, Any], /, **overrides: Any) -> Producer:
        """Build from Kafka 0.8 dotted property names (``{"metadata.broker.list": ..., "queue.time": 5}``)."""
        return cls(ProducerConfig.from_properties(props, **overrides))

    # -- introspection ---------------------------------------------------------------------

    @property
    def client(self) -> NetClient:
        return self._client

    @property
    def metadata(self) -> Metadata:
        return self._metadata

    def add_listener(self, listener: Any) -> None:
        """Receive status events: BrokerEvent (broker_connected / _disconnected /
        _unavailable, on the I/O thread) and, from an idempotent producer, ProducerEvent
        (producer_id_assigned / producer_id_renewed / batches_unresolved / idempotence_off,
        on the thread that sends). Listeners must not block."""
        self._client.add_listener(listener)
        self._listeners.append(listener)

    def _emit(self, event: Any) -> None:
        for listener in list(self._listeners):
            listener(event)

    @property
    def idempotent(self) -> bool:
        """Whether sends carry producer id, epoch and sequences (enable.idempotence)."""
        engine = getattr(self, "_engine", None)
        return engine is not None and engine.idem is not None

    @property
    def producer_identity(self) -> tuple[int, int] | None:
        """(producer id, epoch) of an idempotent producer once the broker gave one, else None."""
        engine = getattr(self, "_engine", None)
        idem = engine.idem if engine is not None else None
        if idem is None or idem.producer_id < 0:
            return None
        return idem.producer_id, idem.epoch

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        """The partition ids of ``topic`` (fetching metadata if needed)."""
        return self._metadata.partitions_for(topic, self.config.request_timeout_ms)

    # -- helpers ---------------------------------------------------------------------------

    def _codec_for(self, topic: str) -> int:
        if self._codec == NONE:
            return NONE
        if self._compressed_topics and topic not in self._compressed_topics:
            return NONE
        return self._codec

    def _topic_state(self, acc: RecordAccumulator, topic: str) -> TopicState:
        """The partition queues of a topic new to ``acc`` (fetching its metadata)."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        parts = self._metadata.partitions_for(topic, self.config.request_timeout_ms)
        return acc.add_topic(topic, max(parts) + 1 if parts else 1)

    def _grow_topics(self) -> None:
        """After a metadata refresh: give topics that gained partitions their new queues."""
        acc = self._acc
        if acc is None:
            return
        view = self._metadata.view
        acc.grow_topics(
            {name: max(info.partitions) + 1 for name, info in view.topics.items() if info.partitions and name in acc.topics}
        )

    # -- the way of every message: _convert, then _queue -------------------------------------

    def _convert(self, pd: Any) -> tuple[str, bytes | None, list[Any]]:
        """Serialize one ProducerData: (topic, key bytes or None, values as a list).

        Raises:
            TypeError: not a ProducerData, or a key that is not bytes-like after serializing.
        """
        if pd.__class__ is not ProducerData:
            if not isinstance(pd, ProducerData):
                raise TypeError(f"send() takes ProducerData or a list of them, not {type(pd).__name__}")
        topic, key, messages = pd
        if messages.__class__ is not list:
            messages = list(messages) if isinstance(messages, tuple) else [messages]
        encode_value = self._encode_value
        values = [encode_value(m) for m in messages] if encode_value is not None else messages
        if key is not None:
            if self._encode_key is not None:
                key = self._encode_key(key)
            if key.__class__ is not bytes:
                if not isinstance(key, (bytes, bytearray, memoryview)):
                    raise _bad_value(key, "key")
                key = bytes(key)
        return topic, key, values

    def _partitioned(self, ts: TopicState, key: bytes | None, topic: str) -> PartitionQueue:
        """The partition queue the partitioner picks for ``key`` among ``ts.parts`` (a topic of
        more than one partition; with one, ``ts.sole`` is the queue and it is not asked). The
        inlined hot paths of ``send`` and ``produce`` repeat it: a call costs them ~5%.

        Raises:
            ValueError: the partitioner answered a partition the topic does not have.
        """
        count = len(ts.parts)
        p = self._partitioner.partition(key, count)
        if not 0 <= p < count:
            raise ValueError(f"partitioner returned {p} for {count} partitions of {topic!r}")
        return ts.parts[p]

    def _queue(
        self,
        acc: RecordAccumulator,
        topic: str,
        key: bytes | None,
        values: list[Any],
        queue: PartitionQueue | None = None,
        headers: Any = None,
    ) -> SendFutures:
        """Check converted messages, pick their partition and add them to its open batch in
        ``acc``: the one definition of every check a message passes, sync or async (a sync
        send batches in a private accumulator). Returns the messages' futures.

        In order: the dialect's key rule; each value's type and size; the topic (its metadata
        fetched on first use); the partitioner's choice, unless ``queue`` is given (the later
        chunks of a ProducerData too large for one batch, which go in consecutive batches of
        one partition); then, under the accumulator's lock, room in the queue (waiting per
        queue_enqueue_timeout_ms), a producer not closed meanwhile, and the batch: rolled over
        when the messages do not fit, closed once full.

        Kept whole: this is the per-message hot path, and the checks and the append as two
        calls measured ~5% slower per send (send() alone, and end to end with the sender).

        Raises:
            UnsupportedByBroker: a key for a broker that takes none (HMB).
            TypeError: a value that is not bytes-like or None; a topic that is not a str.
            MessageSizeTooLargeError: key + value over ``message_max_bytes``.
            ValueError: the partitioner answered out of range.
            QueueFullError, ProducerClosedError; metadata errors for an unknown topic.
        """
        if key is None:
            key_len = 0
        elif self._allows_keys:
            key_len = len(key)
        else:
            raise UnsupportedByBroker(
                f"{self._dialect_label} cannot take a message with a non-null key (it never answers "
                "such a request); send with key=None. Nothing was sent."
            )
        n = len(values)
        nbytes = n * (key_len + _RECORD_OVERHEAD)  # the batch size estimate
        for value in values:
            if value.__class__ is bytes:
                value_len = len(value)
            elif value is None:
                value_len = 0
            elif isinstance(value, (bytearray, memoryview)):
                value_len = len(value)
            else:
                raise _bad_value(value, "value")
            if value_len + key_len > self._message_max_bytes:
                raise MessageSizeTooLargeError(
                    f"a message of {value_len + key_len} bytes (key + value) to {topic!r} is over "
                    f"message_max_bytes={self._message_max_bytes}; nothing was sent"
                )
            nbytes += value_len
        if queue is None:
            ts = acc.topics.get(topic)
            if ts is None:
                ts = self._topic_state(acc, topic)
            queue = ts.sole  # one partition: nothing to choose, the partitioner is not asked
            if queue is None:
                queue = self._partitioned(ts, key, topic)
        if n != 1:
            if not n:
                return SendFutures([], 0)
            if nbytes > acc.batch_max_bytes:
                return self._queue_in_chunks(acc, topic, key, values, queue)
        return acc.append(queue, values, key, nbytes, headers)

    def _queue_in_chunks(
        self, acc: RecordAccumulator, topic: str, key: bytes | None, values: list[Any], queue: PartitionQueue
    ) -> SendFutures:
        """A ProducerData larger than one batch: consecutive batches of one partition, in order."""
        segments: list[tuple[ProducerBatch, int, int]] = []
        for chunk, _ in _chunks(values, key, acc.batch_max_bytes):
            segments.extend(self._queue(acc, topic, key, chunk, queue).segments)
        return SendFutures(segments, len(values))

    # -- sending ---------------------------------------------------------------------------

    def send(self, data: ProducerData | Sequence[ProducerData]) -> SendFutures:
        """Send one ProducerData or a list of them.

        Returns:
            One future per message, in order (``futures[i].result()`` -> RecordMetadata).
            In sync mode they are already complete.

        Raises:
            HmbError: see the module docstring; in sync mode also the send's final error.
        """
        acc = self._direct_acc
        if acc is not None and data.__class__ is ProducerData:
            # The hot paths: a ProducerData already in the form _convert returns (a list, a
            # null or bytes key; no serializer) skips _convert and nothing else.
            topic, key, values = data
            if key is None and values.__class__ is list and len(values) == 1:
                value = values[0]
                ts = acc.topics.get(topic)
                if ts is not None and value.__class__ is bytes and len(value) <= self._message_max_bytes:
                    # The commonest send, inlined: one bytes message with a null key to a
                    # topic the accumulator knows, its only checks (type, size) passed.
                    # The partition, the queue bound, the closed check and the batch
                    # roll-over and close are _queue's, step for step.
                    queue = ts.sole
                    if queue is None:
                        count = len(ts.parts)
                        p = self._partitioner.partition(None, count)
                        if not 0 <= p < count:
                            raise ValueError(f"partitioner returned {p} for {count} partitions of {topic!r}")
                        queue = ts.parts[p]
                    return acc.append(queue, values, None, len(value) + _RECORD_OVERHEAD)
            elif key.__class__ is bytes and values.__class__ is list and len(values) == 1 and self._allows_keys:
                value = values[0]
                ts = acc.topics.get(topic)
                if ts is not None and value.__class__ is bytes and len(value) + len(key) <= self._message_max_bytes:
                    # One bytes message with a bytes key: the same, through the partitioner.
                    queue = ts.sole
                    if queue is None:
                        count = len(ts.parts)
                        p = self._partitioner.partition(key, count)
                        if not 0 <= p < count:
                            raise ValueError(f"partitioner returned {p} for {count} partitions of {topic!r}")
                        queue = ts.parts[p]
                    return acc.append(queue, values, key, len(value) + len(key) + _RECORD_OVERHEAD)
            if values.__class__ is list and (key is None or key.__class__ is bytes):
                return self._queue(acc, topic, key, values)
        if self._closed:
            raise ProducerClosedError("send() after close()")
        if self._txn is not None:
            self._txn.check_send()
        pds: Sequence[Any] = (data,) if isinstance(data, ProducerData) else data
        if not isinstance(pds, (list, tuple)):
            raise TypeError(f"send() takes ProducerData or a list of them, not {type(data).__name__}")
        if self._event_handler is not None:
            return self._send_events(pds)
        if not self._async:
            return self._send_sync(pds)
        assert self._acc is not None
        segments: list[tuple[ProducerBatch, int, int]] = []
        for pd in pds:
            segments.extend(self._append(self._acc, pd))
        return SendFutures(segments)

    def send_record(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordFuture:
        """Send one message the way Kafka's ``ProducerRecord`` names it: to an explicit
        ``partition`` (None: the partitioner picks, as ``send``), with record ``headers``
        (``(name, bytes or None)`` pairs; they need RecordBatch v2, i.e. a broker of Kafka 0.11
        or later). Async producers only; the same checks as ``send``.

        Returns:
            The message's future (-> RecordMetadata).

        Raises:
            TypeError: a sync producer (use ``send``), or a bad key/value type.
            ValueError: ``partition`` out of range for the topic.
            HmbError: see ``send`` for the rest.
        """
        acc = self._acc
        if acc is None or not self._async:
            raise TypeError("send_record() needs producer_type='async'; a sync producer sends ProducerData with send()")
        if self._closed:
            raise ProducerClosedError("send_record() after close()")
        if self._txn is not None:
            self._txn.check_send()
        topic, key, values = self._convert(ProducerData(topic, key, [value]))
        queue = None
        if partition is not None:
            ts = acc.topics.get(topic) or self._topic_state(acc, topic)
            if not 0 <= partition < len(ts.parts):
                raise ValueError(f"partition {partition} is out of range: {topic!r} has {len(ts.parts)} partitions")
            queue = ts.parts[partition]
        return self._queue(acc, topic, key, values, queue, tuple(headers) if headers else None)[0]

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Any = None,
        timestamp: int | None = None,
        on_delivery: Any = None,
    ) -> None:
        """Queue one message, confluent-kafka style: nothing is returned; ``on_delivery(err,
        report)`` runs once from ``poll`` / ``flush`` / ``close`` (see the module docstring).

        Args:
            topic: the topic (its metadata is fetched on first use).
            value: bytes-like or None, or anything the producer's serializer takes.
            key: bytes-like or None, or anything the producer's key serializer takes.
            partition: an explicit partition (None or -1: the partitioner picks).
            headers: ``[(name, bytes | str | None), ...]`` or a dict (Kafka 0.11+ brokers).
            timestamp: the record's timestamp in ms (None: now).
            on_delivery: ``callable(err, DeliveryReport)``.

        Raises:
            TypeError: a value, key or header of a type that cannot be sent; nothing was queued.
            ValueError: a bad argument (e.g. a partition out of range); nothing was queued.
            MessageSizeTooLargeError: the message exceeds the batch limit; nothing was queued.
            UnsupportedByBroker: a key for a broker that takes none (HMB).
            QueueFullError: the queue stayed full (also a ``BufferError``); nothing was queued.
            ProducerClosedError: the producer is closed; nothing was queued.
        """
        acc = self._direct_acc
        if (
            acc is not None
            and value.__class__ is bytes
            and partition is None
            and headers is None
            and timestamp is None
            and (on_delivery is None or callable(on_delivery))
        ):
            # The commonest produce (async, no serializer, a bytes value with a null or bytes
            # key, to a topic the accumulator knows), its checks inlined: the general path's
            # below, step for step.
            ts = acc.topics.get(topic)
            if ts is not None and (key is None or (key.__class__ is bytes and self._allows_keys)):
                size = len(value) if key is None else len(value) + len(key)
                if size <= self._message_max_bytes:
                    queue = ts.sole
                    if queue is None:
                        count = len(ts.parts)
                        p = self._partitioner.partition(key, count)
                        if not 0 <= p < count:
                            raise ValueError(f"partitioner returned {p} for {count} partitions of {topic!r}")
                        queue = ts.parts[p]
                    acc.append(queue, [value], key, size + _RECORD_OVERHEAD, None, None, on_delivery, False)
                    return
        acc = self._acc
        if acc is None:
            raise TypeError("produce() is not available with an event_handler; use send()")
        if self._closed:
            raise ProducerClosedError("produce() after close()")
        if self._txn is not None:
            self._txn.check_send()
        if self._encode_value is not None:
            value = self._encode_value(value)
        if value.__class__ is bytes:
            size = len(value)
        elif value is None:
            size = 0
        elif isinstance(value, (bytearray, memoryview)):
            size = len(value)
        else:
            raise _bad_value(value, "value")
        if key is not None:
            if self._encode_key is not None:
                key = self._encode_key(key)
            if key.__class__ is not bytes:
                if not isinstance(key, (bytes, bytearray, memoryview)):
                    raise _bad_value(key, "key")
                key = bytes(key)
            if not self._allows_keys:
                raise UnsupportedByBroker(
                    f"{self._dialect_label} cannot take a message with a non-null key (it never answers "
                    "such a request); produce with key=None. Nothing was sent."
                )
            size += len(key)
        if size > self._message_max_bytes:
            raise MessageSizeTooLargeError(
                f"a message of {size} bytes (key + value) to {topic!r} is over "
                f"message_max_bytes={self._message_max_bytes}; nothing was sent"
            )
        ts = acc.topics.get(topic)
        if ts is None:
            ts = self._topic_state(acc, topic)
        if partition is None or partition == -1:  # -1: confluent-kafka's "unassigned"
            queue = ts.sole
            if queue is None:
                queue = self._partitioned(ts, key, topic)
        else:
            if partition.__class__ is not int or not 0 <= partition < len(ts.parts):
                raise ValueError(f"partition {partition!r} is out of range: {topic!r} has {len(ts.parts)} partitions")
            queue = ts.parts[partition]
        if headers is not None:
            headers = _headers(headers)
        if timestamp is not None and (timestamp.__class__ is not int or timestamp < 0):
            raise ValueError(f"timestamp must be a non-negative int of milliseconds, not {timestamp!r}")
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable, not {type(on_delivery).__name__}")
        if not self._async and acc.queued >= self.config.queue_buffering_max_messages:
            # Sync: nothing sends in the background; make room by sending in this thread.
            bound = self.config.queue_buffering_max_messages
            self._drive_sync(lambda: acc.queued < bound, None)
        acc.append(queue, [value], key, size + _RECORD_OVERHEAD, headers, timestamp, on_delivery, False)

    def produce_batch(
        self,
        topic: str,
        values: list[Any],
        keys: list[Any] | None = None,
        on_delivery: Any = None,
    ) -> BatchOutcome:
        """Queue many messages to one topic at once: ``produce(topic, values[i], keys[i],
        on_delivery=on_delivery)`` for every ``i``, in order, at a fraction of the cost.

        The same checks as ``produce`` for every message, all made before anything is queued:
        a bad type, a key for a broker that takes none, or a message over ``message_max_bytes``
        refuses the whole call with nothing queued (the error names the message's index). Each
        message goes to the partition ``produce`` would choose (the partitioner asked once per
        message, in order), and each partition's messages enter its queue with one accumulator
        call (one lock, one queue admission; a group may fill several batches). Per-partition
        order is the order of ``values``. ``on_delivery(err, report)`` is called once per
        message, as for ``produce``.

        Without ``on_delivery`` no report is made at all: the returned :class:`BatchOutcome`
        says, once ``flush()`` returned, which messages were not acknowledged
        (``outcome.failed()``: their indices and errors), at no cost per acknowledged message.

        Args:
            topic: the topic (its metadata is fetched on first use).
            values: the messages' values (bytes-like or None, or what the serializer takes).
            keys: the messages' keys, aligned with ``values`` (None: every key is null).
            on_delivery: ``callable(err, DeliveryReport)``, for every message.

        Returns:
            The messages' :class:`BatchOutcome` (which batch each went to; their failures).

        Raises:
            TypeError: a value or key of a type that cannot be sent; nothing was queued.
            ValueError: ``keys`` not aligned with ``values``; nothing was queued.
            MessageSizeTooLargeError: a message exceeds the limit; nothing was queued.
            UnsupportedByBroker: a key for a broker that takes none (HMB); nothing was queued.
            QueueFullError: the queue stayed full (also a ``BufferError``); the partitions
                already appended stay queued (their reports come as usual).
            ProducerClosedError: the producer is closed; nothing was queued.
        """
        acc = self._acc
        if acc is None:
            raise TypeError("produce_batch() is not available with an event_handler; use send()")
        if self._closed:
            raise ProducerClosedError("produce_batch() after close()")
        if self._txn is not None:
            self._txn.check_send()
        if on_delivery is not None and not callable(on_delivery):
            raise TypeError(f"on_delivery must be callable, not {type(on_delivery).__name__}")
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"produce_batch(): {len(keys)} keys for {n} values")
        if not n:
            return BatchOutcome([], 0)
        # (P1) every message's checks first: nothing is queued for a refused call.
        encode_value = self._encode_value
        encode_key = self._encode_key
        if encode_value is not None:
            values = [encode_value(v) for v in values]
        if keys is not None and encode_key is not None:
            keys = [None if k is None else encode_key(k) for k in keys]
        limit = self._message_max_bytes
        sizes: list[int] = []
        add_size = sizes.append
        if keys is None:
            for i, v in enumerate(values):
                if v.__class__ is bytes or isinstance(v, (bytearray, memoryview)):
                    size = len(v)
                elif v is None:
                    size = 0
                else:
                    raise TypeError(f"message {i}: {_bad_value(v, 'value')}")
                if size > limit:
                    raise MessageSizeTooLargeError(
                        f"message {i}: {size} bytes (key + value) to {topic!r} is over "
                        f"message_max_bytes={limit}; nothing was sent"
                    )
                add_size(size + _RECORD_OVERHEAD)
        else:
            fixed: list[Any] | None = None
            for i, v in enumerate(values):
                if v.__class__ is bytes or isinstance(v, (bytearray, memoryview)):
                    size = len(v)
                elif v is None:
                    size = 0
                else:
                    raise TypeError(f"message {i}: {_bad_value(v, 'value')}")
                k = keys[i]
                if k is not None:
                    if k.__class__ is not bytes:
                        if not isinstance(k, (bytearray, memoryview)):
                            raise TypeError(f"message {i}: {_bad_value(k, 'key')}")
                        if fixed is None:
                            fixed = list(keys)
                        fixed[i] = bytes(k)
                    if not self._allows_keys:
                        raise UnsupportedByBroker(
                            f"{self._dialect_label} cannot take a message with a non-null key (it never answers "
                            f"such a request); message {i} has one. Nothing was sent."
                        )
                    size += len(k)
                if size > limit:
                    raise MessageSizeTooLargeError(
                        f"message {i}: {size} bytes (key + value) to {topic!r} is over "
                        f"message_max_bytes={limit}; nothing was sent"
                    )
                add_size(size + _RECORD_OVERHEAD)
            if fixed is not None:
                keys = fixed
        ts = acc.topics.get(topic)
        if ts is None:
            ts = self._topic_state(acc, topic)
        # (P2) group per partition, in order: the partition produce() would choose.
        queue = ts.sole
        groups: list[tuple[PartitionQueue, list[Any], list[Any] | None, list[int], list[int] | None]]
        if queue is not None:
            groups = [(queue, values, keys, sizes, None)]
        else:
            parts = ts.parts
            count = len(parts)
            partition = self._partitioner.partition
            idx: dict[int, list[int]] = {}
            if keys is None:
                for i in range(n):
                    p = partition(None, count)
                    g = idx.get(p)
                    if g is None:
                        idx[p] = [i]
                    else:
                        g.append(i)
            else:
                # The default partitioner is a pure function of a non-null key: asked once per
                # distinct key of the call (rows often share few keys). Any other: per message.
                memo = self._partitioner.__class__ is DefaultPartitioner
                known: dict[Any, int] = {}
                for i, k in enumerate(keys):
                    p = known.get(k)
                    if p is None:
                        p = partition(k, count)
                        if memo and k is not None:
                            known[k] = p
                    g = idx.get(p)
                    if g is None:
                        idx[p] = [i]
                    else:
                        g.append(i)
            for p in idx:
                if p.__class__ is not int or not 0 <= p < count:
                    raise ValueError(f"partitioner returned {p} for {count} partitions of {topic!r}")
            groups = [
                (
                    parts[p],
                    [values[i] for i in ix],
                    None if keys is None else [keys[i] for i in ix],
                    [sizes[i] for i in ix],
                    ix,
                )
                for p, ix in idx.items()
            ]
        # (P3) one accumulator call per partition.
        bound = self.config.queue_buffering_max_messages
        segments: list[tuple[ProducerBatch, list[int] | None, int, int]] = []
        for queue, vs, ks, ss, ix in groups:
            if not self._async and acc.queued >= bound:
                # Sync: nothing sends in the background; make room by sending in this thread.
                self._drive_sync(lambda: acc.queued < bound, None)
            for batch, lo, hi in acc.append_group(queue, vs, [None] * len(vs) if ks is None else ks, ss, on_delivery):
                segments.append((batch, ix, lo, hi))
        return BatchOutcome(segments, n)

    def poll(self, timeout: float | None = None) -> int:
        """Serve delivery callbacks in this thread; returns how many were served.

        Waits up to ``timeout`` seconds (None: until one is served or nothing is left to
        report; 0: not at all) for a first one. A sync producer sends what is queued here.

        Raises:
            Exception: the first exception a callback raised (after the rest of its batch
                was served).
        """
        served = self._serve()
        if served or self._acc is None:
            return served
        acc = self._acc
        reports = acc.reports
        deadline = None if timeout is None else monotonic_ms() + max(0.0, timeout) * 1000.0
        if not self._async:
            self._drive_sync(lambda: bool(reports.done) or not acc.queued, deadline)
            return self._serve()
        while not reports.done and acc.queued:
            if deadline is None:
                reports.wait(0.1)
            else:
                left = deadline - monotonic_ms()
                if left <= 0:
                    break
                reports.wait(min(left / 1000.0, 0.1))
        return self._serve()

    def _drive_sync(self, until: Any, deadline_ms: float | None) -> None:
        """Sync producer: run the engine in this thread until ``until()`` or ``deadline_ms``
        passed (checked only after a first round, so that what is queued is sent)."""
        first = [True]

        def done() -> bool:
            if until():
                return True
            if first[0]:
                first[0] = False
                return False
            return deadline_ms is not None and monotonic_ms() >= deadline_ms

        with self._drive:
            self._engine.run(done, deadline_ms)

    def _serve(self) -> int:
        """Call the callbacks of every completed batch waiting in the report queue."""
        acc = self._acc
        if acc is None:
            return 0
        done = acc.reports.done
        served = 0
        raised: BaseException | None = None
        while done:
            try:
                b = done.popleft()
            except IndexError:  # another thread polled it
                break
            cbs = b.cbs
            assert cbs is not None
            err = b.future.exception()
            base = None if err is not None else b.base_offset
            topic = b.topic
            partition = b.partition
            values = b.values
            keys = b.keys
            headers = b.headers
            created = b.created_ms
            for i, cb in enumerate(cbs):
                if cb is None:
                    continue
                report = _new_report(
                    DeliveryReport,
                    (
                        topic,
                        partition,
                        None if base is None else base + i,
                        None if keys is None else keys[i],
                        values[i],
                        None if headers is None else headers[i],
                        created,
                    ),
                )
                served += 1
                try:
                    cb(err, report)
                except Exception as e:
                    if raised is None:
                        raised = e
            if raised is not None:
                raise raised
        return served

    def _append(self, acc: RecordAccumulator, pd: Any) -> list[tuple[ProducerBatch, int, int]]:
        """Queue one ProducerData (async mode), telling ``after_enqueue``: its segments."""
        topic, key, values = self._convert(pd)
        try:
            futures = self._queue(acc, topic, key, values)
        except QueueFullError:
            if "after_enqueue" in self._hooks:
                call_hook(self._hooks, "after_enqueue", pd, False)
            raise
        if "after_enqueue" in self._hooks:
            call_hook(self._hooks, "after_enqueue", pd, True)
        return futures.segments

    def _send_sync(self, pds: Sequence[Any]) -> SendFutures:
        """Queue ``pds`` in the sync accumulator and drive the engine in the caller's thread
        until their batches are complete; raises the first error once every future is."""
        acc = self._acc
        assert acc is not None
        segments: list[tuple[ProducerBatch, int, int]] = []
        for pd in pds:
            segments.extend(self._queue(acc, *self._convert(pd)).segments)
        pending = list({id(b): b for b, _, _ in reversed(segments)}.values())

        def done() -> bool:
            while pending and pending[-1].future.done():
                pending.pop()
            return not pending

        with self._drive:
            self._engine.run(done)
        for b, _, _ in segments:
            exc = b.future.exception()
            if exc is not None:
                raise exc
        return SendFutures(segments)

    def _send_events(self, pds: Sequence[Any]) -> SendFutures:
        segments: list[tuple[ProducerBatch, int, int]] = []
        entries = []
        for pd in pds:
            if not isinstance(pd, ProducerData):
                raise TypeError(f"send() takes ProducerData or a list of them, not {type(pd).__name__}")
            msgs = pd.messages if isinstance(pd.messages, list | tuple) else [pd.messages]
            b = ProducerBatch(pd.topic, -1, wall_ms())
            b.items = [(pd.key, m, None) for m in msgs]
            segments.append((b, 0, len(msgs)))
            entries.append((pd, b))
        if self._events is not None:
            self._events.put(entries)
        else:
            _EventPipeline.deliver(self._event_handler, entries)
            for _, b in entries:
                exc = b.future.exception()
                if exc is not None:
                    raise exc
        return SendFutures(segments)

    @property
    def metrics_registry(self) -> Metrics:
        """The registry behind :meth:`metrics` (tag ``client-id``): what the exporters of
        :mod:`hmbclient.metrics_exporters` read."""
        return self._metrics

    def metrics(self) -> dict[str, dict[str, float]]:
        """The producer's metrics under Kafka's names: ``{"producer-metrics": {name: value}}``
        (``record-send-rate``, ``request-latency-avg``, ``batch-size-avg``... listed in
        :mod:`hmbclient.producer.metrics`). Rates are per second over Kafka's window (2 samples
        of 30 s); an average with nothing recorded yet is NaN.

        Returns:
            A fresh snapshot (safe to keep; later records do not change it).
        """
        return self._metrics.snapshot()

    # -- transactions (KIP-98; the state machine and its cases: transaction.py) -------------

    def _transaction(self) -> TransactionManager:
        txn = self._txn
        if txn is None:
            raise TransactionStateError("this producer has no 'transactional.id'; transactions need one (see ProducerConfig)")
        if self._closed:
            raise ProducerClosedError("transactional call after close()")
        return txn

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        return None if timeout is None else monotonic_ms() + max(0.0, timeout) * 1000.0

    @property
    def transaction_state(self) -> str | None:
        """The transaction state ("Uninitialized", "Ready", "InTransaction", "Committing",
        "Aborting", "AbortableError", "FatalError"); None without ``transactional.id``."""
        return self._txn.state.value if self._txn is not None else None

    def init_transactions(self, timeout: float | None = 60.0) -> None:
        """Register ``transactional.id`` with its coordinator and take it over: every older
        producer with the id is fenced and its open transaction aborted. Call once, first.

        Args:
            timeout: seconds to keep retrying (coordinator not yet available, a previous
                transaction still completing); None: no limit. After a timeout, call again.

        Raises:
            TransactionStateError: called twice, or on a producer without transactional.id.
            ProducerFencedError / TransactionFatalError-like BrokerError: refused for good
                (e.g. TRANSACTIONAL_ID_AUTHORIZATION_FAILED); the producer is unusable.
            RequestTimedOutError: the coordinator did not answer in time (call again).
        """
        txn = self._transaction()
        txn.transition("init")
        try:
            self._engine.txn_init(self._deadline(timeout))
        except HmbError as e:
            if classify(e) == FATAL:
                txn.fatal(e)
            raise
        txn.transition("initialized")

    def begin_transaction(self) -> None:
        """Start a transaction: what is sent from now until commit or abort is one unit.

        Raises:
            TransactionStateError: not initialised, or a transaction is already open.
        """
        self._transaction().transition("begin")

    def send_offsets_to_transaction(self, offsets: Any, group: Any, timeout: float | None = 60.0) -> None:
        """Commit a consumer group's offsets as part of the transaction: the group sees them
        only if the transaction commits (consume-transform-produce exactly once).

        Args:
            offsets: the *next* offsets to consume: ``{(topic, partition): offset}`` (values may
                also be ``(offset, metadata)`` or objects with ``.offset``/``.metadata``; keys
                objects with ``.topic``/``.partition``), or a list of objects with ``.topic``,
                ``.partition`` and ``.offset`` (confluent-kafka's TopicPartition).
            group: the group id, or an object with ``group_id`` (Java's and
                confluent-kafka's ConsumerGroupMetadata; hmbclient sends TxnOffsetCommit v0-2,
                which carries no member or generation).
            timeout: seconds to keep retrying retriable answers; None: no limit.

        Raises:
            TransactionStateError: no transaction is open.
            TypeError / ValueError: offsets or group of the wrong shape; nothing was sent.
            ProducerFencedError: fenced (fatal). Other BrokerErrors make the transaction
                abortable (abort_transaction() next).
        """
        txn = self._transaction()
        txn.require(TxnState.IN_TRANSACTION, "send_offsets_to_transaction()")
        group_id = _group_id(group)
        parsed = _txn_offsets(offsets)
        if not parsed:
            return
        try:
            self._engine.txn_add_offsets(group_id, parsed, self._deadline(timeout))
        except HmbError as e:
            if classify(e) == RETRY:
                raise  # the deadline passed; nothing changed
            err = txn.failed(e)
            if err is e:
                raise
            raise err from e

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit: every message sent in the transaction and the offsets sent with
        it become visible to ``read_committed`` readers at once.

        Args:
            timeout: seconds for the flush and the commit; None: no limit. A commit that timed
                out is finished by calling commit_transaction() again.

        Raises:
            TransactionStateError: no transaction is open.
            TransactionAbortableError: a message or offset commit of it failed; call
                abort_transaction().
            ProducerFencedError / TransactionTimedOutError: fatal; close the producer.
            RequestTimedOutError: not done within ``timeout`` (call again).
        """
        self._end_transaction(True, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: messages not yet sent are dropped (their futures and
        callbacks fail), the sent ones are never visible to ``read_committed`` readers, and
        offsets sent with it are not committed.

        Args:
            timeout: seconds for the abort; None: no limit (call again after a timeout).

        Raises:
            TransactionStateError: no transaction is open (or the producer hit a fatal error).
            ProducerFencedError: fatal; close the producer.
            RequestTimedOutError: not done within ``timeout`` (call again).
        """
        self._end_transaction(False, timeout)

    def _end_transaction(self, committing: bool, timeout: float | None) -> None:
        txn = self._transaction()
        if committing:
            txn.raise_for_end(True)  # (T4) an abortable transaction cannot commit
        recover = not committing and txn.error is not None and txn.state is not TxnState.FATAL_ERROR
        txn.transition("commit" if committing else "abort")
        deadline = self._deadline(timeout)
        # (T6) every batch of the transaction acknowledged (or, aborting, dropped) first
        left = self.flush(None if deadline is None else max(0.0, deadline - monotonic_ms()) / 1000.0)
        what = "commit_transaction()" if committing else "abort_transaction()"
        if left:
            raise RequestTimedOutError(f"{what}: {left} messages not acknowledged within {timeout} s; call {what} again")
        txn.raise_for_end(committing)
        try:
            if txn.started:
                self._engine.txn_end(committing, deadline)
            if recover:
                # A failed batch may have left the broker's sequences and ours apart: a new
                # epoch (InitProducerId with the id, the transaction being complete) resets them.
                self._engine.txn_init(deadline)
        except HmbError as e:
            if classify(e) == RETRY:
                raise  # the deadline passed; state kept, the call can be repeated
            err = txn.failed(e)
            if err is e:
                raise
            raise err from e
        txn.transition("completed")

    # -- lifecycle -------------------------------------------------------------------------

    def flush(self, timeout: float | None = None, *, timeout_s: float | None = None) -> int:
        """Send everything queued now, wait until it is acknowledged or failed (at most
        ``timeout`` seconds; None: no limit) and serve the delivery callbacks.

        Returns:
            How many messages are still unacknowledged (0: everything is done), as
            confluent-kafka's ``flush``.

        Raises:
            RequestTimedOutError: with an event_handler, not done within ``timeout``.
        """
        if timeout is None:
            timeout = timeout_s
        if self._events is not None:
            self._events.flush(timeout)
            return 0
        acc = self._acc
        if acc is None:
            return 0
        deadline = None if timeout is None else monotonic_ms() + timeout * 1000.0
        sender = self._sender
        if sender is None:  # sync: send() returned complete; produce() left its messages here
            if acc.queued:
                self._drive_sync(lambda: not acc.queued, deadline)
        elif not acc.wait_until_empty(deadline, sender.is_alive):
            log.debug("flush: %d messages still unacknowledged after %s s", acc.queued, timeout)
        self._serve()
        return acc.queued

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender, close connections. Idempotent.

        With ``timeout_s``, messages still unsent after it fail with ProducerClosedError.
        """
        if self._closed:
            return
        self._closed = True
        self._direct_acc = None
        if self._acc is not None:
            self._acc.close()
        try:
            if self._events is not None:
                self._events.close(timeout_s)
            elif self._acc is not None and self._sender is not None:
                acc = self._acc
                if self._flush_quietly(timeout_s):
                    log.warning("close: giving up on unacknowledged messages after %s s", timeout_s)
                acc.stop()
                self._sender.join(5.0 if timeout_s is not None else None)
                if self._sender.is_alive() or acc.queued:
                    self._engine.abort(ProducerClosedError("producer closed before these messages were acknowledged"))
                self._serve_at_close()
            elif self._acc is not None:
                # sync: what produce() left queued is sent now, or failed after timeout_s
                if self._flush_quietly(timeout_s):
                    log.warning("close: giving up on unacknowledged messages after %s s", timeout_s)
                    self._engine.abort(ProducerClosedError("producer closed before these messages were acknowledged"))
                self._serve_at_close()
            if self._event_handler is not None and hasattr(self._event_handler, "close"):
                try:
                    self._event_handler.close()
                except Exception:
                    log.exception("event_handler.close failed")
            call_hook(self._hooks, "close")
        finally:
            self._client.close()

    def _flush_quietly(self, timeout_s: float | None) -> int:
        """flush() for close(): callback errors are logged (close goes on). Returns how many
        messages are still unacknowledged."""
        try:
            return self.flush(timeout_s)
        except Exception:
            log.exception("close: a delivery callback raised")
            return self._acc.queued if self._acc is not None else 0

    def _serve_at_close(self) -> None:
        """Serve every callback still waiting (the producer is closing: errors are logged)."""
        acc = self._acc
        while acc is not None and acc.reports.done:
            try:
                self._serve()
            except Exception:
                log.exception("close: a delivery callback raised")

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _headers(headers: Any) -> tuple[tuple[str, bytes | None], ...] | None:
    """produce()'s headers as the accumulator keeps them: ``(name, bytes or None)`` pairs
    (str values are UTF-8 encoded; a dict gives its items)."""
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(f"headers must be (name, value) pairs or a dict, not {item!r}") from None
        if not isinstance(name, str):
            raise TypeError(f"a header name must be a str, not {type(name).__name__}")
        if isinstance(value, str):
            value = value.encode()
        elif value is not None and not isinstance(value, bytes):
            if not isinstance(value, (bytearray, memoryview)):
                raise TypeError(f"header {name!r}: value must be bytes, str or None, not {type(value).__name__}")
            value = bytes(value)
        out.append((name, value))
    return tuple(out) or None


def _group_id(group: Any) -> str:
    """send_offsets_to_transaction's group: an id, or an object carrying one."""
    if isinstance(group, str):
        gid: Any = group
    else:
        gid = getattr(group, "group_id", None)
        if gid is None:
            gid = getattr(group, "group", None)
    if not isinstance(gid, str) or not gid:
        raise TypeError(f"group must be a group id (non-empty str) or an object with group_id, not {group!r}")
    return gid


def _txn_offsets(offsets: Any) -> dict[tuple[str, int], tuple[int, str | None]]:
    """send_offsets_to_transaction's offsets as ``{(topic, partition): (offset, metadata)}``."""
    items: list[tuple[Any, Any]]
    if isinstance(offsets, dict):
        items = list(offsets.items())
    elif isinstance(offsets, (list, tuple)):
        items = [(o, o) for o in offsets]
    else:
        raise TypeError(f"offsets must be a dict or a list of TopicPartition-like objects, not {type(offsets).__name__}")
    out: dict[tuple[str, int], tuple[int, str | None]] = {}
    for key, value in items:
        if isinstance(key, tuple) and len(key) == 2:
            topic, partition = key
        else:
            topic, partition = getattr(key, "topic", None), getattr(key, "partition", None)
        offset: Any
        metadata: Any
        if isinstance(value, int) and not isinstance(value, bool):
            offset, metadata = value, None
        elif isinstance(value, tuple) and len(value) == 2:
            offset, metadata = value
        else:
            offset, metadata = getattr(value, "offset", None), getattr(value, "metadata", None)
        if not isinstance(topic, str) or not topic or not isinstance(partition, int) or partition < 0:
            raise TypeError(f"offsets: {key!r} is not a (topic, partition)")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"offsets: {topic}-{partition}: offset must be an int >= 0 (the next to consume), not {offset!r}")
        if metadata is not None and not isinstance(metadata, str):
            raise TypeError(f"offsets: {topic}-{partition}: metadata must be a str or None, not {type(metadata).__name__}")
        out[(topic, partition)] = (offset, metadata)
    return out


def _chunks(values: list[Any], key: bytes | None, cap: int) -> list[tuple[list[Any], int]]:
    """Split one ProducerData's values into runs of at most ``cap`` estimated bytes."""
    key_len = len(key) if key is not None else 0
    out: list[tuple[list[Any], int]] = []
    chunk: list[Any] = []
    size = 0
    for value in values:
        message_bytes = (len(value) if value is not None else 0) + key_len + _RECORD_OVERHEAD
        if chunk and size + message_bytes > cap:
            out.append((chunk, size))
            chunk, size = [], 0
        chunk.append(value)
        size += message_bytes
    if chunk:
        out.append((chunk, size))
    return out


class _EventPipeline:
    """Async path with a custom event_handler: a bounded queue of ProducerData and a thread
    handing them to ``handler.handle`` in groups of up to batch_num_messages messages."""

    def __init__(self, handler: Any, cfg: ProducerConfig) -> None:
        self.handler = handler
        self.batch = cfg.batch_num_messages
        self.linger_s = cfg.queue_buffering_max_ms / 1000.0
        self.max_messages = cfg.queue_buffering_max_messages
        self.enqueue_timeout_ms = cfg.queue_enqueue_timeout_ms
        self.queue: deque[tuple[Any, ProducerBatch]] = deque()
        self.queued = 0
        self.cond = threading.Condition()
        self.closing = False
        self.thread = threading.Thread(target=self._run, name="hmbclient-producer-events", daemon=True)
        self.thread.start()

    def put(self, entries: list[tuple[Any, ProducerBatch]]) -> None:
        n = sum(len(b.values) for _, b in entries)
        with self.cond:
            t = self.enqueue_timeout_ms
            deadline = None if t < 0 else monotonic_ms() + t
            while self.queued and self.queued + n > self.max_messages:
                if t == 0 or (deadline is not None and monotonic_ms() >= deadline):
                    raise QueueFullError(f"event queue full ({self.queued} of {self.max_messages} messages)")
                self.cond.wait(None if deadline is None else max(0.0, (deadline - monotonic_ms()) / 1000.0))
            self.queue.extend(entries)
            self.queued += n
            self.cond.notify_all()

    @staticmethod
    def deliver(handler: Any, entries: list[tuple[Any, ProducerBatch]]) -> None:
        try:
            result = handler.handle([pd for pd, _ in entries])
        except BaseException as e:
            for _, batch in entries:
                batch.fail(e)
            return
        metas = list(result) if result is not None else []
        i = 0
        for _, batch in entries:
            n = len(batch.values)
            meta = metas[i] if i < len(metas) and isinstance(metas[i], RecordMetadata) else None
            if meta is not None:
                batch.partition = meta.partition
            batch.complete(meta.offset if meta is not None else None)
            i += n

    def _run(self) -> None:
        while True:
            with self.cond:
                if not self.queue:
                    if self.closing:
                        return
                    self.cond.wait()
                    continue
                if len(self.queue) < self.batch and not self.closing:
                    self.cond.wait(self.linger_s)
                take: list[tuple[Any, ProducerBatch]] = []
                count = 0
                while self.queue and count < self.batch:
                    e = self.queue.popleft()
                    take.append(e)
                    count += len(e[1].values)
            self.deliver(self.handler, take)
            with self.cond:
                self.queued -= count
                self.cond.notify_all()

    def flush(self, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else monotonic_ms() + timeout_s * 1000.0
        with self.cond:
            while self.queued:
                left = None if deadline is None else (deadline - monotonic_ms()) / 1000.0
                if left is not None and left <= 0:
                    raise RequestTimedOutError(f"flush: {self.queued} messages still with the event handler")
                self.cond.wait(left if left is not None else 1.0)

    def close(self, timeout_s: float | None) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join(timeout_s)

