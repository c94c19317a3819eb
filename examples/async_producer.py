"""Async batching producer: queue.time / batch.size, delivery futures and callbacks.

Shows: producer_type="async", batching by batch_num_messages and queue_buffering_max_ms,
gzip compression, per-message futures resolving to RecordMetadata, a CallbackHandler seeing
each stage of the pipeline, flush() and close().
Run:   .venv/bin/python examples/async_producer.py
"""

import threading
from collections import Counter

from _servers import brokers

from encoders import StringEncoder
from hmbclient import Producer, ProducerData
from hmbclient.producer import CallbackHandler


class CountingCallbacks(CallbackHandler):
    """Counts what passes each stage; called from the producer's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered: Counter[int] = Counter()
        self.errors = 0
        self.batches = 0

    def after_batching(self, batch) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            self.batches += 1

    def on_delivery(self, batch) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            self.delivered[batch.partition] += batch.count

    def on_error(self, batch, error) -> None:  # type: ignore[no-untyped-def]
        with self.lock:
            self.errors += batch.count


with brokers(num_partitions=4) as bootstrap:
    callbacks = CountingCallbacks()
    producer = Producer(
        metadata_broker_list=bootstrap,
        producer_type="async",
        serializer=StringEncoder(),
        key_serializer=StringEncoder(),
        compression_codec="gzip",
        batch_num_messages=500,          # alias: batch.size (a message count, as in Kafka 0.7)
        queue_buffering_max_ms=20,       # alias: queue.time
        callback_handler=callbacks,
    )
    futures = []
    for i in range(10_000):
        futures += producer.send(ProducerData("clicks", key=f"user-{i % 50}", messages=[f"click {i}"]))
    producer.flush()
    last = futures[-1].result(timeout=30)
    print(f"last message: partition {last.partition} offset {last.offset}")
    producer.close()
    print(f"{callbacks.batches} batches;", "delivered per partition:",
          dict(sorted(callbacks.delivered.items())), "errors:", callbacks.errors)
