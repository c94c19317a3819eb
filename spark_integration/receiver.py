"""A receiver-style DStream on the high-level ConsumerConnector (Spark's old ``createStream``).

**Prefer the ``"hmb"`` data source** (:mod:`spark_integration.datasource`): DStreams are
deprecated in Spark, and this stream gives the old receiver's guarantees only.

::

    from pyspark.streaming import StreamingContext
    from spark_integration import create_stream
    ssc = StreamingContext(sc, 1)
    stream = create_stream(ssc, "127.0.0.1:2181", "billing", {"events": 2})
    stream.map(lambda kv: kv[1]).pprint()
    ssc.start(); ...; ssc.stop(stopSparkContext=False); stream.receiver.stop()

How it works: PySpark cannot define JVM receivers, so the "receiver" is an
``hmbclient.ConsumerConnector`` in the driver process. It joins the ZooKeeper group with
``n`` KafkaStreams per topic; its fetcher threads keep prefetching in the background into
bounded chunk queues (``queued.max.message.chunks``), which is the receiving. At each batch
interval Spark asks for the batch's RDD; the stream then takes what the KafkaStreams hold
(up to ``max_messages_per_batch``, waiting at most ``poll_timeout_ms`` per stream once empty),
turns it into an RDD of ``(key, value)`` and commits the handed-out offsets to the group.

Guarantees (the same as Spark's 0.8 receiver without a write-ahead log): offsets are
committed when a batch's data has been taken, before Spark has processed it, so a driver
crash between the two loses that batch (at most once); the group's ZooKeeper offsets, owners
and rebalancing are the ConsumerConnector's. The connector starts with the first batch and is
shut down by :meth:`HmbReceiver.stop` (or at interpreter exit). DStream checkpointing is not
supported (the receiver lives in the driver and cannot be pickled).
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Mapping
from typing import Any

from hmbclient.errors import ConfigError, ConsumerTimeoutError

__all__ = ["HmbReceiver", "create_stream"]

log = logging.getLogger("hmbclient.spark")


class HmbReceiver:
    """The driver-side receiver behind :func:`create_stream` (a ConsumerConnector).

    Args:
        sc: The SparkContext the batch RDDs belong to.
        consumer_config: ConsumerConfig properties (dotted names), including
            ``zookeeper.connect`` and ``group.id``.
        topics: ``{topic: number of KafkaStreams}``.
        key_decoder: an ``encoders`` Decoder for keys (default: bytes).
        value_decoder: an ``encoders`` Decoder for values (default: bytes).
        max_messages_per_batch: Most messages one batch takes.
        poll_timeout_ms: How long a batch waits on an empty KafkaStream.
    """

    def __init__(
        self,
        sc: Any,
        consumer_config: Mapping[str, Any],
        topics: Mapping[str, int],
        key_decoder: Any = None,
        value_decoder: Any = None,
        max_messages_per_batch: int = 100_000,
        poll_timeout_ms: int = 100,
    ) -> None:
        if not topics or any(int(n) < 1 for n in topics.values()):
            raise ConfigError(f"topics must map topic names to stream counts >= 1, got {topics!r}")
        if max_messages_per_batch < 1 or poll_timeout_ms < 1:
            raise ConfigError("max_messages_per_batch and poll_timeout_ms must be >= 1")
        self.sc = sc
        self.topics = dict(topics)
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder
        self.max_messages_per_batch = max_messages_per_batch
        # Offsets are committed per batch by us; the connector's own periodic commit would
        # otherwise commit messages a batch has not taken yet.
        self.config = {
            **dict(consumer_config),
            "auto.commit.enable": False,
            "consumer.timeout.ms": poll_timeout_ms,
        }
        from hmbclient import Consumer

        # Validate now (ConfigError at create_stream time), connect at the first batch.
        self._connector = Consumer.create(self.config)
        self._streams: list[Any] | None = None
        self._failed: Exception | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self.batches = 0
        self.messages = 0
        atexit.register(self.stop)

    def _start(self) -> list[Any]:
        if self._failed is not None:
            # A connector cannot subscribe twice: keep failing every batch with the cause.
            raise self._failed
        if self._streams is None:
            try:
                by_topic = self._connector.create_message_streams(
                    self.topics, key_decoder=self.key_decoder, value_decoder=self.value_decoder
                )
            except Exception as exc:
                self._failed = exc
                raise
            self._streams = [s for topic in sorted(by_topic) for s in by_topic[topic]]
            log.info("receiver joined group %s for %s", self.config.get("group.id"), self.topics)
        return self._streams

    def take(self) -> list[tuple[Any, Any]]:
        """Take up to ``max_messages_per_batch`` messages and commit their offsets.

        Returns:
            ``(key, value)`` pairs, each stream's messages in order.
        """
        with self._lock:
            if self._stopped:
                return []
            out: list[tuple[Any, Any]] = []
            budget = self.max_messages_per_batch
            for stream in self._start():
                while len(out) < budget:
                    try:
                        message = next(stream)
                    except (ConsumerTimeoutError, StopIteration):
                        break
                    out.append((message.key, message.message))
            if out:
                self._connector.commit_offsets()
            self.batches += 1
            self.messages += len(out)
            return out

    def batch_rdd(self, _time: Any, _tick: Any) -> Any:
        """The RDD of one batch (called by Spark on the driver at each batch interval)."""
        data = self.take()
        slices = max(1, min(self.sc.defaultParallelism, len(data) // 10_000 + 1))
        return self.sc.parallelize(data, slices)

    def stop(self) -> None:
        """Leave the group (final commit of what was taken) and close the connector."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            self._connector.shutdown()
        finally:
            atexit.unregister(self.stop)


def create_stream(
    ssc: Any,
    zookeeper_connect: str,
    group_id: str,
    topics: Mapping[str, int],
    key_decoder: Any = None,
    value_decoder: Any = None,
    kafka_params: Mapping[str, Any] | None = None,
    max_messages_per_batch: int = 100_000,
) -> Any:
    """A DStream of ``(key, value)`` fed by a ZooKeeper consumer group (receiver style).

    Prefer ``spark.readStream.format("hmb")``: it reads exactly once from checkpointed offsets;
    this stream is at most once on driver failure (see the module docstring).

    Args:
        ssc: The StreamingContext.
        zookeeper_connect: ``"host:port[,host:port][/chroot]"``.
        group_id: The consumer group.
        topics: ``{topic: number of KafkaStreams}`` (consumer threads, as in Kafka 0.8).
        key_decoder: an ``encoders`` Decoder for keys (default: raw bytes).
        value_decoder: an ``encoders`` Decoder for values (default: raw bytes).
        kafka_params: More ConsumerConfig properties (e.g. ``auto.offset.reset``).
        max_messages_per_batch: Most messages one batch takes.

    Returns:
        The DStream; its ``.receiver`` attribute is the :class:`HmbReceiver` (call
        ``.receiver.stop()`` after ``ssc.stop()``).

    Raises:
        ConfigError: Bad topics or consumer properties.
    """
    config = {**dict(kafka_params or {}), "zookeeper.connect": zookeeper_connect,
              "group.id": group_id}
    receiver = HmbReceiver(
        ssc.sparkContext, config, topics, key_decoder, value_decoder, max_messages_per_batch
    )
    # A tick per batch interval (the default RDD of an empty queue), transformed on the driver
    # into the batch's data.
    ticks = ssc.queueStream([], oneAtATime=True, default=[0])
    # (PySpark inspects co_argcount, which a bound method's ``self`` would spoil.)
    stream = ticks.transform(lambda time, tick: receiver.batch_rdd(time, tick))
    stream.receiver = receiver
    return stream
