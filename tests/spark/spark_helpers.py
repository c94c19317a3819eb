"""Helpers shared by the Spark tests (imported as ``spark_helpers``; not a test module)."""

from __future__ import annotations

from collections.abc import Sequence

#: (partition, offset, key, value) of one produced message.
Produced = tuple[int, int, bytes | None, bytes]


def create_topic(bootstrap: str, topic: str, partitions: int = 4) -> None:
    """Create ``topic`` with ``partitions`` partitions (kafka-python's admin client)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=15_000)
    finally:
        admin.close()


def produce(
    bootstrap: str, topic: str, messages: Sequence[tuple[int, bytes | None, bytes]]
) -> list[Produced]:
    """Send ``(partition, key, value)`` messages with an independent client (kafka-python).

    Returns:
        ``(partition, offset, key, value)`` per message, as acknowledged by the broker.
    """
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
    try:
        futures = [
            (p, k, v, producer.send(topic, key=k, value=v, partition=p)) for p, k, v in messages
        ]
        producer.flush(timeout=30)
        return [(p, f.get(timeout=30).offset, k, v) for p, k, v, f in futures]
    finally:
        producer.close(timeout=10)
