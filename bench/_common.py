"""What every bench script that times clients shares: the readiness rule and its helpers.

The rule (each script's docstring says how it applies it):

    Every client is connected to the partition leader before its clock starts: metadata,
    ApiVersions and the connection to the leader are behind it. A producer has had one
    message (the warm-up message, offset 0) acknowledged by the leader; a consumer has
    fetched from offset 0 and handed out the message at offset 0, which is not counted.
    The clock then times N messages: a producer's offsets 1..N, a consumer's offsets 1..N,
    so a topic filled for consumers holds N + 1 messages (end offset N + 1).

A consumer's warm-up fetch is an ordinary one (each client's own fetch size): whatever else
that first answer carried is in hand when the clock starts, for every client alike, and is
counted inside the timed part as the client hands it out. Nothing else a client does
before its clock (decoding, prefetching) is allowed for: that is its design.

Before a consume is timed the topic's end offset must be N + 1 (the high watermark of a Fetch
answer; waited for, bounded), and every producer run checks that its flush left
nothing queued and that the last offset acknowledged is N; any mismatch stops the run
(``BenchError``), never a quietly skewed figure.

Also here: the machine's load (``/proc/loadavg``), the payload every script sends, ratio
summaries (median, lowest and highest per-round ratio) and topic deletion (Tansu's memory
storage holds every topic until it is deleted). Importable from the bench scripts only
(they put this directory at the end of ``sys.path``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

FETCH_BYTES = 1_048_576  # the consumers' fetch size per partition (Kafka's default max.partition.fetch.bytes)
WARM_TIMEOUT_S = 60.0


class BenchError(RuntimeError):
    """A run whose figure would not mean what it says (data missing, messages still queued)."""


def loadavg() -> str:
    """The machine's load as ``/proc/loadavg`` puts it: 1, 5 and 15 minutes, runnable/total."""
    try:
        with open("/proc/loadavg") as f:
            fields = f.read().split()
        return " ".join(fields[:4])
    except OSError:
        import os

        return " ".join(f"{x:.2f}" for x in os.getloadavg())


def payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def ratio_summary(ours: Sequence[float], theirs: Sequence[float]) -> tuple[float, float, float] | None:
    """(median, lowest, highest) of the per-round ratios ours[r] / theirs[r] (rates, so higher is
    better for ``ours``); rounds one side lacks are left out. None when no round has both."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=False) if a and b]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def format_ratio(summary: tuple[float, float, float] | None) -> str:
    if summary is None:
        return "-"
    med, lo, hi = summary
    return f"{med:.2f}x ({lo:.2f}-{hi:.2f})"


# --------------------------------------------------------------------------- offsets, topics


def end_offset(bootstrap: str, topic: str, partition: int = 0, security: dict[str, Any] | None = None) -> int:
    """The partition's high watermark as its leader's Fetch answer states it (one small fetch
    at offset 0). Not ListOffsets: Tansu (memory storage) answers ListOffsets(latest) with the
    last record batch's base offset + 1 -- seen: 12,451 for a partition of 20,001 messages
    whose Fetch answers gave all 20,001 and a high watermark of 20,001."""
    from hmbclient import FetchRequest, SimpleConsumer
    from hmbclient.admin import topic_partitions

    host, port = topic_partitions(bootstrap, topic)[partition]
    consumer = SimpleConsumer(host, port, client_id="bench-check", **(security or {}))
    try:
        return int(consumer.fetch(FetchRequest(topic, partition, 0, 1024)).high_watermark)
    finally:
        consumer.close()


def require_end_offset(bootstrap: str, topic: str, expected: int, partition: int = 0, what: str = "",
                       security: dict[str, Any] | None = None, timeout_s: float = 60.0) -> float:
    """Wait until ``topic``-``partition`` ends at ``expected``; returns the seconds waited.

    Raises BenchError when it ends past ``expected`` or has not reached it in ``timeout_s``.
    The (bounded) wait is for high watermarks that trail the acknowledgement, as on a
    replicated partition written with acks=1."""
    t0 = time.monotonic()
    while True:
        got = end_offset(bootstrap, topic, partition, security)
        waited = time.monotonic() - t0
        if got == expected:
            return waited
        if got > expected or waited > timeout_s:
            raise BenchError(f"{topic}-{partition} ends at offset {got:,} after {waited:.1f} s, expected {expected:,}"
                             f"{' (' + what + ')' if what else ''}: the run would not time what it says")
        time.sleep(0.1)


def delete_topic(bootstrap: str, topic: str) -> bool:
    """DeleteTopics through kafka-python's admin client, best effort: Tansu frees the memory
    the topic held; the embedded broker has no DeleteTopics (its topics stay on disk until
    the broker's directory is removed). True when the broker deleted it."""
    from kafka.admin import KafkaAdminClient

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    except Exception:  # noqa: BLE001 - broker not reachable through kafka-python: leave the topic
        return False
    try:
        admin.delete_topics([topic], timeout_ms=30_000)
        return True
    except Exception:  # noqa: BLE001 - unsupported or refused: the topic stays, nothing else changes
        return False
    finally:
        admin.close()


# --------------------------------------------------------------------------- producers' warm-up


def _check_first_offset(client: str, offset: int) -> None:
    if offset != 0:
        raise BenchError(f"{client}: the warm-up message landed at offset {offset}, not 0 (the topic was not empty)")


def warm_hmbclient_producer(producer: Any, topic: str, value: bytes) -> None:
    """One message sent and acknowledged: metadata, ApiVersions and the leader connection done."""
    from hmbclient import ProducerData

    _check_first_offset("hmbclient", producer.send(ProducerData(topic, None, [value]))[0].result(WARM_TIMEOUT_S).offset)


def warm_kafka_python_producer(producer: Any, topic: str, value: bytes) -> None:
    _check_first_offset("kafka-python", producer.send(topic, value).get(timeout=WARM_TIMEOUT_S).offset)


async def warm_aiokafka_producer(producer: Any, topic: str, value: bytes) -> None:
    _check_first_offset("aiokafka", (await producer.send_and_wait(topic, value)).offset)


def warm_confluent_producer(producer: Any, topic: str, value: bytes, partition: int | None = None) -> None:
    """One message produced and its delivery report in: librdkafka is connected to the leader."""
    reports: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        reports.append((err, msg.offset() if err is None else None))

    if partition is None:
        producer.produce(topic, value, on_delivery=delivered)
    else:
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    left = producer.flush(WARM_TIMEOUT_S)
    if left or not reports or reports[0][0] is not None:
        raise BenchError(f"confluent: warm-up message not delivered ({left} queued, report {reports[:1]})")
    _check_first_offset("confluent", reports[0][1])


def confluent_flush(producer: Any, timeout_s: float) -> None:
    """flush() until nothing is queued; BenchError naming what is left after ``timeout_s``
    (a broker that ingests slowly, such as Tansu's memory store under load, can outlast
    a short flush: a run that went on would time a topic still filling)."""
    left = producer.flush(timeout_s)
    if left:
        raise BenchError(f"confluent: {left:,} messages still queued after flush({timeout_s:.0f})")


# --------------------------------------------------------------------------- consumers' warm-up


def _deadline_check(client: str, deadline: float) -> None:
    if time.monotonic() > deadline:
        raise BenchError(f"{client}: no message at offset 0 within {WARM_TIMEOUT_S:.0f} s")


def warm_hmbclient_consumer(consumer: Any, topic: str, partition: int = 0, max_bytes: int = FETCH_BYTES) -> Any:
    """Fetch from offset 0 until the message at offset 0 is handed out; returns the iterator
    over the rest of that first answer (to be counted inside the timed part)."""
    from hmbclient import FetchRequest

    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        it = iter(consumer.fetch(FetchRequest(topic, partition, 0, max_bytes)))
        first = next(it, None)
        if first is not None:
            break
        _deadline_check("hmbclient", deadline)
    _check_first_offset("hmbclient consumer", first.offset)
    return it


def warm_confluent_consumer(consumer: Any, topic: str, partition: int = 0) -> None:
    """assign() at offset 0 and consume until the message at offset 0 is handed out."""
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(topic, partition, 0)])
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        for message in consumer.consume(num_messages=1, timeout=1.0):
            if message.error():
                continue
            _check_first_offset("confluent consumer", message.offset())
            return
        _deadline_check("confluent", deadline)


def warm_kafka_python_consumer(consumer: Any, topic: str, partition: int = 0) -> None:
    from kafka import TopicPartition

    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        for records in consumer.poll(timeout_ms=1000, max_records=1).values():
            for record in records:
                _check_first_offset("kafka-python consumer", record.offset)
                return
        _deadline_check("kafka-python", deadline)


async def warm_aiokafka_consumer(consumer: Any, topic: str, partition: int = 0) -> None:
    from aiokafka import TopicPartition

    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        for records in (await consumer.getmany(timeout_ms=1000, max_records=1)).values():
            for record in records:
                _check_first_offset("aiokafka consumer", record.offset)
                return
        _deadline_check("aiokafka", deadline)


def warm_hmbclient_poll_consumer(consumer: Any, topic: str, partition: int = 0) -> None:
    """hmbclient's subscribe/poll Consumer (or the Consumer under an AIOConsumer): assign()
    with nothing committed (auto.offset.reset=earliest: offset 0) and poll one record at a
    time until the message at offset 0 is handed out."""
    consumer.assign([(topic, partition)])
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        for record in consumer.poll(1.0, max_records=1):
            _check_first_offset("hmbclient poll consumer", record.offset)
            return
        _deadline_check("hmbclient poll consumer", deadline)


async def warm_hmbclient_aio_consumer(consumer: Any, topic: str, partition: int = 0) -> None:
    """The same for AIOConsumer (assign and poll awaited)."""
    await consumer.assign([(topic, partition)])
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        for record in await consumer.poll(1.0, max_records=1):
            _check_first_offset("hmbclient aio consumer", record.offset)
            return
        _deadline_check("hmbclient aio consumer", deadline)


def warm_hmbclient_connector(stream: Any) -> None:
    """A ConsumerConnector's stream (the group joined, consumer.timeout.ms set): iterate until
    the message at offset 0 is handed out."""
    from hmbclient.errors import ConsumerTimeoutError

    deadline = time.monotonic() + WARM_TIMEOUT_S
    while True:
        try:
            first = next(stream)
        except ConsumerTimeoutError:
            _deadline_check("hmbclient connector", deadline)
            continue
        _check_first_offset("hmbclient connector", first.offset)
        return


# --------------------------------------------------------------------------- Apache Kafka as a target

# Apache Kafka as a bench broker runs with kafka-server-start.sh's own JVM settings (1 GiB heap,
# G1, the full JIT), not the small C1-only JVM hmbclient.testing.ApacheKafka uses in tests.
KAFKA_BENCH_JVM_OPTIONS = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                           "-XX:InitiatingHeapOccupancyPercent=35", "-Djava.net.preferIPv4Stack=true",
                           "-Djava.awt.headless=true")
