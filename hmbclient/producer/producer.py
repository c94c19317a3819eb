"""Producer: the one front for sync and async sending (Kafka 0.8's producer API and configs).

    producer = Producer(metadata_broker_list="127.0.0.1:9092", producer_type="async")
    futures = producer.send(ProducerData("events", key=b"user-1", messages=[b"a", b"b"]))
    futures[0].result(timeout=5)        # RecordMetadata(topic, partition, offset)
    producer.flush(); producer.close()

``send`` serializes (``serializer`` / ``key_serializer``), checks sizes, picks one partition per
ProducerData (``partitioner``; a one-partition topic skips it) and then:

* sync: builds one batch per ProducerData, one unit per partition, one Produce request per
  leader, waits; retriable failures refresh metadata and retry (tenacity policy,
  ``message_send_max_retries`` / ``retry_backoff_ms``). Returns completed futures, or raises
  the first error after completing every future (no message is left unaccounted for).
* async: appends to the partition's open batch in the :class:`RecordAccumulator` under one
  short lock and returns lazily built futures; the :class:`SenderThread` does the rest.
  A full queue blocks / fails per ``queue_enqueue_timeout_ms`` (QueueFullError).
* with an ``event_handler``: hands ProducerData to it instead (see callbacks.py).

Errors raised by ``send`` itself (nothing was queued for the failing ProducerData): ConfigError,
TypeError (a value that is not bytes and no serializer), MessageSizeTooLargeError (over
``message_max_bytes``), UnsupportedByBroker (a keyed message to HMB, which never answers one),
QueueFullError, ProducerClosedError, and metadata errors for an unknown/unreachable topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from hmbclient.config import ProducerConfig
from hmbclient.errors import (
    HmbError,
    MessageSizeTooLargeError,
    ProducerClosedError,
    RequestTimedOutError,
    UnsupportedByBroker,
)
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata
from hmbclient.net.retry import retry_policy
from hmbclient.producer.accumulator import PartitionQueue, RecordAccumulator, TopicState, Unit
from hmbclient.producer.callbacks import overridden_hooks
from hmbclient.producer.data import ProducerBatch, ProducerData, RecordMetadata, SendFutures
from hmbclient.producer.sender import Dispatcher, SenderThread, call_hook
from hmbclient.protocol.records import NONE, codec_from_name
from partitioners import DefaultPartitioner

__all__ = ["Producer"]

log = logging.getLogger("hmbclient.producer")

# Bytes a message adds beyond key and value in a v2 batch (attributes, varints, headers count);
# only used to size batches, so an estimate.
_RECORD_OVERHEAD = 12
# RecordBatch v2 header (61 bytes) plus the offset/size prefix, rounded up.
_BATCH_OVERHEAD = 100


def _mono_ms() -> float:
    return time.monotonic() * 1000.0


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
        self.config = cfg = config
        self._client = NetClient(
            cfg.metadata_broker_list,
            client_id=cfg.client_id,
            api_version=cfg.api_version,
            max_in_flight_requests_per_connection=cfg.max_in_flight_requests_per_connection,
            request_timeout_ms=cfg.request_timeout_ms,
            connect_timeout_ms=cfg.request_timeout_ms,
            reconnect_backoff_ms=min(50, max(1, cfg.retry_backoff_ms)),
            reconnect_backoff_max_ms=max(1000, cfg.retry_backoff_ms),
            send_buffer_bytes=cfg.send_buffer_bytes if cfg.send_buffer_bytes > 0 else None,
            name="hmbclient-io-producer",
        )
        dialect = self._client.dialect
        self._allows_keys = dialect.allows_keys
        self._dialect_label = dialect.broker_label
        refresh = cfg.topic_metadata_refresh_interval_ms
        self._metadata = Metadata(
            self._client,
            max_age_ms=refresh if refresh >= 0 else -1,
            retry_backoff_ms=cfg.retry_backoff_ms,
        )
        ser = cfg.serializer
        kser = cfg.key_serializer if cfg.key_serializer is not None else ser
        self._enc = ser.to_message if ser is not None else None
        self._kenc = kser.to_message if kser is not None else None
        self._partitioner = cfg.partitioner if cfg.partitioner is not None else DefaultPartitioner()
        self._codec = codec_from_name(cfg.compression_codec)
        self._compressed_topics = frozenset(cfg.compressed_topics)
        self._max_msg = cfg.message_max_bytes
        self._hooks = overridden_hooks(cfg.callback_handler)
        # No serializers and no per-send hook: send() may take its inlined path.
        self._plain = self._enc is None and self._kenc is None and "after_enqueue" not in self._hooks
        self._policy = retry_policy(max_retries=cfg.message_send_max_retries, backoff_ms=cfg.retry_backoff_ms)
        self._dispatcher = Dispatcher(
            self._client,
            self._metadata,
            acks=cfg.request_required_acks,
            request_timeout_ms=cfg.request_timeout_ms,
            codec_for=self._codec_for,
            hooks=self._hooks,
        )
        self._closed = False
        self._fast_async = cfg.producer_type == "async" and cfg.event_handler is None
        self._batch_last = cfg.batch_num_messages - 1  # index at which a batch is full
        self._sync_cap = max(1, min(cfg.batch_max_bytes, cfg.message_max_bytes - _BATCH_OVERHEAD))
        self._async = cfg.producer_type == "async"
        self._event_handler = cfg.event_handler
        self._topic_lock = threading.Lock()
        self._events: _EventPipeline | None = None
        self._acc: RecordAccumulator | None = None
        self._sender: SenderThread | None = None
        self._topics: dict[str, TopicState]
        if self._event_handler is not None:
            self._topics = {}
            if self._async:
                self._events = _EventPipeline(self._event_handler, cfg)
        elif self._async:
            # A v2 batch is one "message" to the broker's message.max.bytes: batches, and the
            # units the sender merges them into, stay under message_max_bytes with room for
            # the batch header.
            cap = self._sync_cap
            acc = RecordAccumulator(
                batch_num_messages=cfg.batch_num_messages,
                batch_max_bytes=cap,
                linger_ms=cfg.queue_buffering_max_ms,
                max_messages=cfg.queue_buffering_max_messages,
                enqueue_timeout_ms=cfg.queue_enqueue_timeout_ms,
                max_request_bytes=cap,
            )
            self._acc = acc
            self._topics = acc.topics
            self._sender = SenderThread(
                acc,
                self._dispatcher,
                self._metadata,
                self._policy,
                max_retries=cfg.message_send_max_retries,
                retry_backoff_ms=cfg.retry_backoff_ms,
                refresh_topics=self._grow_topics,
            )
            self._sender.start()
        else:
            self._topics = {}

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
        """Receive broker status events (BrokerEvent: broker_connected / _disconnected / _unavailable)."""
        self._client.add_listener(listener)

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

    def _topic(self, topic: str) -> TopicState:
        ts = self._topics.get(topic)
        if ts is not None:
            return ts
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, not {topic!r}")
        parts = self._metadata.partitions_for(topic, self.config.request_timeout_ms)
        lock = self._acc.lock if self._acc is not None else self._topic_lock
        with lock:
            ts = self._topics.get(topic)
            if ts is None:
                ts = TopicState(topic, max(parts) + 1 if parts else 1)
                self._topics[topic] = ts
        return ts

    def _grow_topics(self) -> None:
        """After a metadata refresh: give topics that gained partitions their new states."""
        view = self._metadata.view
        lock = self._acc.lock if self._acc is not None else self._topic_lock
        with lock:
            for name, ts in self._topics.items():
                info = view.topics.get(name)
                if info is None or not info.partitions:
                    continue
                n = max(info.partitions) + 1
                if n > len(ts.parts):
                    ts.parts.extend(PartitionQueue(name, p) for p in range(len(ts.parts), n))

    def _prepare(self, pd: Any) -> tuple[TopicState, int, Any, list[Any], int]:
        """Serialize and check one ProducerData: (topic state, partition, key bytes, values, bytes)."""
        if pd.__class__ is not ProducerData:
            if not isinstance(pd, ProducerData):
                raise TypeError(f"send() takes ProducerData or a list of them, not {type(pd).__name__}")
        topic, key, msgs = pd
        if msgs.__class__ is not list:
            msgs = list(msgs) if isinstance(msgs, tuple) else [msgs]
        enc = self._enc
        values = [enc(m) for m in msgs] if enc is not None else msgs
        if key is None:
            kb = None
            klen = 0
        else:
            kb = self._kenc(key) if self._kenc is not None else key
            if kb.__class__ is not bytes:
                if not isinstance(kb, (bytes, bytearray, memoryview)):
                    raise _bad_value(kb, "key")
                kb = bytes(kb)
            if not self._allows_keys:
                raise UnsupportedByBroker(
                    f"{self._dialect_label} cannot take a message with a non-null key (it never answers "
                    "such a request); send with key=None. Nothing was sent."
                )
            klen = len(kb)
        maxb = self._max_msg
        nbytes = 0
        for v in values:
            if v.__class__ is bytes:
                ln = len(v)
            elif v is None:
                ln = 0
            elif isinstance(v, (bytearray, memoryview)):
                ln = len(v)
            else:
                raise _bad_value(v, "value")
            if ln + klen > maxb:
                raise MessageSizeTooLargeError(
                    f"a message of {ln + klen} bytes (key + value) to {topic!r} is over "
                    f"message_max_bytes={maxb}; nothing was sent"
                )
            nbytes += ln
        nbytes += len(values) * (klen + _RECORD_OVERHEAD)
        ts = self._topics.get(topic)
        if ts is None:
            ts = self._topic(topic)
        n = len(ts.parts)
        if n == 1:
            p = 0
        else:
            p = self._partitioner.partition(kb, n)
            if not 0 <= p < n:
                raise ValueError(f"partitioner returned {p} for {n} partitions of {topic!r}")
        return ts, p, kb, values, nbytes

    # -- sending ---------------------------------------------------------------------------

    def send(self, data: ProducerData | Sequence[ProducerData]) -> SendFutures:
        """Send one ProducerData or a list of them.

        Returns:
            One future per message, in order (``futures[i].result()`` -> RecordMetadata).
            In sync mode they are already complete.

        Raises:
            See the module docstring; in sync mode also the send's final error.
        """
        if self._closed:
            raise ProducerClosedError("send() after close()")
        if data.__class__ is ProducerData and self._fast_async:
            # The hot path: one raw-bytes message, known topic, no hooks. Everything _prepare
            # and _append do, inlined, with the same checks; anything else takes the general
            # path below.
            topic, key, msgs = data
            ts = self._topics.get(topic)
            if (
                ts is not None
                and msgs.__class__ is list
                and len(msgs) == 1
                and self._plain
                and (key is None or key.__class__ is bytes)
            ):
                v = msgs[0]
                if v.__class__ is bytes:
                    nb = len(v) + _RECORD_OVERHEAD
                    if key is not None:
                        if not self._allows_keys:
                            self._prepare(data)  # raises the dialect's clear error
                        nb += len(key)
                    if nb - _RECORD_OVERHEAD <= self._max_msg:
                        parts = ts.parts
                        n = len(parts)
                        if n == 1:
                            ps = parts[0]
                        else:
                            pi = self._partitioner.partition(key, n)
                            if not 0 <= pi < n:
                                raise ValueError(f"partitioner returned {pi} for {n} partitions of {topic!r}")
                            ps = parts[pi]
                        acc = self._acc
                        with acc.lock:  # type: ignore[union-attr]
                            if acc.queued >= acc.max_messages:  # type: ignore[union-attr]
                                acc.wait_for_space(1)  # type: ignore[union-attr]
                                if self._closed:
                                    raise ProducerClosedError("producer closed while send() waited for queue space")
                            b = ps.open
                            if b is None or (b.nbytes + nb > self._sync_cap and b.items):
                                if b is not None:
                                    acc.close_batch(ps)  # type: ignore[union-attr]
                                b = acc.open_batch(ps)  # type: ignore[union-attr]
                            items = b.items
                            start = len(items)
                            items.append((key, v, None))
                            b.nbytes += nb
                            acc.queued += 1  # type: ignore[union-attr]
                            if start >= self._batch_last or b.nbytes >= self._sync_cap:
                                acc.close_batch(ps)  # type: ignore[union-attr]
                        return SendFutures.one(b, start)
            seg = self._append(data)
            return SendFutures(seg, seg[0][2] if seg else 0)
        pds: Sequence[Any] = (data,) if isinstance(data, ProducerData) else data
        if not isinstance(pds, (list, tuple)):
            raise TypeError(f"send() takes ProducerData or a list of them, not {type(data).__name__}")
        if self._event_handler is not None:
            return self._send_events(pds)
        if self._acc is None:
            return self._send_sync(pds)
        segments: list[tuple[ProducerBatch, int, int]] = []
        for pd in pds:
            segments.extend(self._append(pd))
        return SendFutures(segments)

    def _append(self, pd: Any) -> list[tuple[ProducerBatch, int, int]]:
        ts, p, kb, values, nbytes = self._prepare(pd)
        n = len(values)
        if not n:
            return []
        acc = self._acc
        assert acc is not None
        if nbytes > acc.batch_max_bytes and n > 1:
            return self._append_split(pd, ts, p, kb, values)
        ps = ts.parts[p]
        with acc.lock:
            if acc.queued and acc.queued + n > acc.max_messages:
                try:
                    acc.wait_for_space(n)
                except HmbError:
                    if "after_enqueue" in self._hooks:
                        call_hook(self._hooks, "after_enqueue", pd, False)
                    raise
            if self._closed:
                raise ProducerClosedError("producer closed while send() waited for queue space")
            b = ps.open
            if b is not None and b.items and b.nbytes + nbytes > acc.batch_max_bytes:
                acc.close_batch(ps)  # keep every batch under the cap
                b = None
            if b is None:
                b = acc.open_batch(ps)
            items = b.items
            start = len(items)
            if n == 1:
                items.append((kb, values[0], None))
            else:
                items.extend([(kb, v, None) for v in values])
            b.nbytes += nbytes
            acc.queued += n
            if start + n >= acc.batch_num_messages or b.nbytes >= acc.batch_max_bytes:
                acc.close_batch(ps)
        if "after_enqueue" in self._hooks:
            call_hook(self._hooks, "after_enqueue", pd, True)
        return [(b, start, n)]

    def _append_split(self, pd: Any, ts: TopicState, p: int, kb: Any, values: list[Any]) -> list[tuple[ProducerBatch, int, int]]:
        """A ProducerData larger than one batch: several consecutive batches, in order."""
        acc = self._acc
        assert acc is not None
        out: list[tuple[ProducerBatch, int, int]] = []
        ps = ts.parts[p]
        for chunk, size in _chunks(values, kb, acc.batch_max_bytes):
            n = len(chunk)
            with acc.lock:
                if acc.queued and acc.queued + n > acc.max_messages:
                    acc.wait_for_space(n)
                acc.close_batch(ps)  # each chunk is a batch of its own, in order
                b = acc.open_batch(ps)
                b.items.extend([(kb, v, None) for v in chunk])
                b.nbytes = size
                acc.queued += n
                acc.close_batch(ps)
            out.append((b, 0, n))
        if "after_enqueue" in self._hooks:
            call_hook(self._hooks, "after_enqueue", pd, True)
        return out

    def _send_sync(self, pds: Sequence[Any]) -> SendFutures:
        cap = self._sync_cap
        # Per partition, units of at most ``cap`` bytes; unit k of every partition goes in
        # wave k, and waves go one after another, so a partition's messages stay in order.
        per_part: dict[tuple[str, int], list[Unit]] = {}
        segments: list[tuple[ProducerBatch, int, int]] = []
        now = int(time.time() * 1000)
        for pd in pds:
            ts, p, kb, values, _ = self._prepare(pd)
            for chunk, size in _chunks(values, kb, cap):
                b = ProducerBatch(ts.name, p, now)
                b.items = [(kb, v, None) for v in chunk]
                b.nbytes = size
                units = per_part.setdefault((ts.name, p), [])
                if not units or sum(x.nbytes for x in units[-1].batches) + size > cap:
                    units.append(Unit(ts.name, p, [], None))
                units[-1].batches.append(b)
                units[-1].count += len(chunk)
                segments.append((b, 0, len(chunk)))
        first_error: BaseException | None = None
        failed_parts: dict[tuple[str, int], BaseException] = {}
        wave = 0
        while True:
            pending = [us[wave] for us in per_part.values() if len(us) > wave]
            if not pending:
                break
            wave += 1
            for u in list(pending):
                err = failed_parts.get((u.topic, u.partition))
                if err is not None:  # an earlier part of this partition failed: keep order
                    self._dispatcher.fail(u, err)
                    pending.remove(u)
            try:
                for attempt in self._policy.copy():
                    with attempt:
                        if pending and attempt.retry_state.attempt_number > 1:
                            self._refresh_for(pending)
                        failed = self._sync_round(pending)
                        pending = []
                        retry_err: BaseException | None = None
                        for u, err in failed:
                            if getattr(err, "retriable", False):
                                pending.append(u)
                                retry_err = retry_err or err
                                if getattr(err, "invalid_metadata", False):
                                    self._metadata.invalidate(u.topic)
                            else:
                                self._dispatcher.fail(u, err)
                                failed_parts[(u.topic, u.partition)] = err
                                first_error = first_error or err
                        if retry_err is not None:
                            raise retry_err
            except BaseException as e:
                for u in pending:
                    self._dispatcher.fail(u, e)
                    failed_parts[(u.topic, u.partition)] = e
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return SendFutures(segments)

    def _refresh_for(self, units: list[Unit]) -> None:
        try:
            self._metadata.refresh({u.topic for u in units}, timeout_ms=self.config.request_timeout_ms)
            self._grow_topics()
        except HmbError as e:
            log.info("metadata refresh before retry failed: %s", e)

    def _sync_round(self, units: list[Unit]) -> list[tuple[Unit, BaseException]]:
        d = self._dispatcher
        by_node, orphans = d.group_by_leader(units)
        from hmbclient.errors import LeaderNotAvailableError

        failed: list[tuple[Unit, BaseException]] = [
            (u, LeaderNotAvailableError(f"{u.topic}-{u.partition}: no known leader")) for u in orphans
        ]
        for u in orphans:
            self._metadata.invalidate(u.topic)
        sent = []
        for node, nunits in by_node.items():
            try:
                sent.append((nunits, d.send(node, nunits)))
            except HmbError as e:
                d.forget_node(node)
                failed.extend((u, e) for u in nunits)
        wait_s = (self.config.request_timeout_ms + 2_000) / 1000.0 + 1.0
        for nunits, fut in sent:
            try:
                resp, exc = fut.result(timeout=wait_s), None
            except HmbError as e:
                resp, exc = None, e
            except TimeoutError:
                resp, exc = None, RequestTimedOutError("Produce: no answer (client I/O thread stalled?)")
            failed.extend(d.apply(nunits, resp, exc))
        return failed

    def _send_events(self, pds: Sequence[Any]) -> SendFutures:
        segments: list[tuple[ProducerBatch, int, int]] = []
        entries = []
        for pd in pds:
            if not isinstance(pd, ProducerData):
                raise TypeError(f"send() takes ProducerData or a list of them, not {type(pd).__name__}")
            msgs = pd.messages if isinstance(pd.messages, list | tuple) else [pd.messages]
            b = ProducerBatch(pd.topic, -1, int(time.time() * 1000))
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

    # -- lifecycle -------------------------------------------------------------------------

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged or failed.

        Raises:
            RequestTimedOutError: not done within ``timeout_s``.
        """
        if self._events is not None:
            self._events.flush(timeout_s)
            return
        acc = self._acc
        if acc is None:
            return
        deadline = None if timeout_s is None else _mono_ms() + timeout_s * 1000.0
        with acc.lock:
            acc.flushing += 1
            try:
                acc.work.notify()
                while acc.queued:
                    if self._sender is not None and not self._sender.is_alive():
                        break
                    if deadline is None:
                        acc.space.wait(1.0)
                    else:
                        left = deadline - _mono_ms()
                        if left <= 0:
                            raise RequestTimedOutError(
                                f"flush: {acc.queued} messages still unacknowledged after {timeout_s} s"
                            )
                        acc.space.wait(min(left / 1000.0, 1.0))
            finally:
                acc.flushing -= 1

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender, close connections. Idempotent.

        With ``timeout_s``, messages still unsent after it fail with ProducerClosedError.
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._events is not None:
                self._events.close(timeout_s)
            elif self._acc is not None and self._sender is not None:
                acc = self._acc
                try:
                    self.flush(timeout_s)
                except RequestTimedOutError:
                    log.warning("close: giving up on unacknowledged messages after %s s", timeout_s)
                with acc.lock:
                    acc.closing = True
                    if acc.queued:
                        acc.closing_hard = True
                    acc.work.notify_all()
                    acc.space.notify_all()
                self._sender.join(5.0 if timeout_s is not None else None)
                if self._sender.is_alive() or acc.queued:
                    self._sender._abort(ProducerClosedError("producer closed before these messages were acknowledged"))
            if self._event_handler is not None and hasattr(self._event_handler, "close"):
                try:
                    self._event_handler.close()
                except Exception:
                    log.exception("event_handler.close failed")
            call_hook(self._hooks, "close")
        finally:
            self._client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunks(values: list[Any], kb: Any, cap: int) -> list[tuple[list[Any], int]]:
    """Split one ProducerData's values into runs of at most ``cap`` estimated bytes."""
    klen = len(kb) if kb is not None else 0
    out: list[tuple[list[Any], int]] = []
    chunk: list[Any] = []
    size = 0
    for v in values:
        ln = (len(v) if v is not None else 0) + klen + _RECORD_OVERHEAD
        if chunk and size + ln > cap:
            out.append((chunk, size))
            chunk, size = [], 0
        chunk.append(v)
        size += ln
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
        from hmbclient.errors import QueueFullError

        n = sum(len(b.items) for _, b in entries)
        with self.cond:
            t = self.enqueue_timeout_ms
            deadline = None if t < 0 else _mono_ms() + t
            while self.queued and self.queued + n > self.max_messages:
                if t == 0 or (deadline is not None and _mono_ms() >= deadline):
                    raise QueueFullError(f"event queue full ({self.queued} of {self.max_messages} messages)")
                self.cond.wait(None if deadline is None else max(0.0, (deadline - _mono_ms()) / 1000.0))
            self.queue.extend(entries)
            self.queued += n
            self.cond.notify_all()

    @staticmethod
    def deliver(handler: Any, entries: list[tuple[Any, ProducerBatch]]) -> None:
        try:
            res = handler.handle([pd for pd, _ in entries])
        except BaseException as e:
            for _, b in entries:
                b.fail(e)
            return
        metas = list(res) if res is not None else []
        i = 0
        for _, b in entries:
            n = len(b.items)
            md = metas[i] if i < len(metas) and isinstance(metas[i], RecordMetadata) else None
            if md is not None:
                b.partition = md.partition
            b.complete(md.offset if md is not None else None)
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
                    count += len(e[1].items)
            self.deliver(self.handler, take)
            with self.cond:
                self.queued -= count
                self.cond.notify_all()

    def flush(self, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else _mono_ms() + timeout_s * 1000.0
        with self.cond:
            while self.queued:
                left = None if deadline is None else (deadline - _mono_ms()) / 1000.0
                if left is not None and left <= 0:
                    raise RequestTimedOutError(f"flush: {self.queued} messages still with the event handler")
                self.cond.wait(left if left is not None else 1.0)

    def close(self, timeout_s: float | None) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join(timeout_s)

