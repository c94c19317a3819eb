"""Client throughput, side by side: hmbclient vs kafka-python, aiokafka and confluent-kafka.

    .venv/bin/python bench/clients.py                       # everything (an hour or more)
    .venv/bin/python bench/clients.py --brokers tansu --sizes 100 --clients hmbclient,confluent
    .venv/bin/python bench/clients.py --n 100000 --rounds 2 # a quick look (set-up noise shows)
    .venv/bin/python bench/clients.py --worker hmbclient produce HOST:PORT TOPIC 1000000 100
                                                            # one measurement: a profiler target

Readiness rule (bench/_common.py), the same for every client: each client is connected to the
partition leader before its clock starts. A producer first has one warm-up message (offset 0)
acknowledged -- metadata, ApiVersions and the leader connection are behind it -- and the clock
times the next N messages (offsets 1..N) until every one is acknowledged. A consumer assigned
at offset 0 first hands out the message at offset 0, which is not counted; the clock then times
offsets 1..N. Whatever else that first fetch answer carried is in hand for every client alike.

Workloads: produce N messages of S bytes (null keys, one partition, acks=1, linger 5 ms, each
client's own batching; produce-batch: hmbclient sends ProducerData of 1000 messages, Kafka 0.8's
batch form, against the peers' per-message produce of the same round, which have no such call;
not run unless asked; hmbclient-only variants, the peers running their produce: produce-sync,
the sync producer with ProducerData of 1000; produce-plain and produce-idem, acks=-1 without and
with enable.idempotence; produce-sync-plain/-idem; produce-metrics-on/-off: the async producer
with its metrics and with its sensors detached; produce-api: hmbclient's confluent-style
produce()/poll()/flush(), no future per message); consume N messages from a topic filled with
N + 1 (each value touched; hmbclient's row is the SimpleConsumer); hmbclient-only consume
variants, the peers running their consume: consume-poll (the subscribe/poll ``Consumer``,
assign()ed, poll of up to 10,000), consume-aio (``hmbclient.aio.AIOConsumer``, awaited polls in
asyncio.run), consume-connector (the 0.8 ConsumerConnector, group.protocol=broker, one stream).
Checks that stop the run (BenchError) rather than print a skewed figure: every producer's flush
left nothing queued and its last acknowledged offset is N; every topic a run wrote or a consumer
reads ends at offset N + 1, checked before the consume is timed.

Brokers: Tansu (modern protocol, memory storage), the embedded broker (in a subprocess) and, with
``--brokers kafka``, Apache Kafka 4.x itself (hmbclient.testing.ApacheKafka: one KRaft node from
the jars ``make peers`` fetched, run with kafka-server-start.sh's JVM settings; its JIT warms up
during the round's fill, which every client's run comes after). Each
round starts each broker afresh (a new process and log directory), fills the consume topic, and
runs every client in a rotating order, consume then produce; produce topics are deleted after
their check where the broker can (Tansu: its memory then holds the consume topic and one produce
topic at a time; the embedded broker has no DeleteTopics and writes N x S per run to its fresh
directory). Defaults: N = 1,000,000 for both brokers and both sizes (Tansu held 1,000,000 x
1000 B, about 1 GB of memory, and ingested it in 8 s when measured), 5 rounds.
``--codec gzip|snappy|lz4|zstd``: every client's producer compresses with that codec.

Every measurement runs in a fresh Python process; a consume run's line shows its longest wait
for one batch, marked "stalled" past STALL_S (the run still counts: the spread shows it). The
table shows median msg/s per client and,
per peer, hmbclient's ratio: the median of the per-round ratios (round r of hmbclient against
round r of the peer) with the lowest and highest beside it. The machine's load (/proc/loadavg)
is printed at the start, at every round and at the end: on a shared machine ratios to
confluent-kafka move with it, librdkafka's threads running beside ours. Not a test: nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

# Run as a script, this directory comes first on sys.path, where a script named like a package
# (bench/ once held rebalance.py) would shadow the package hmbclient imports. The repository
# root stays reachable through the installed project (or PYTHONPATH); this directory goes last,
# for bench/_common.py.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE] + [_HERE]

from _common import (  # noqa: E402
    FETCH_BYTES,
    KAFKA_BENCH_JVM_OPTIONS,
    BenchError,
    confluent_flush,
    delete_topic,
    format_ratio,
    loadavg,
    payload,
    ratio_summary,
    require_end_offset,
    warm_aiokafka_consumer,
    warm_aiokafka_producer,
    warm_confluent_consumer,
    warm_confluent_producer,
    warm_hmbclient_aio_consumer,
    warm_hmbclient_connector,
    warm_hmbclient_consumer,
    warm_hmbclient_poll_consumer,
    warm_hmbclient_producer,
    warm_kafka_python_consumer,
    warm_kafka_python_producer,
)

CLIENTS = ["hmbclient", "kafka-python", "aiokafka", "confluent"]
FLUSH_TIMEOUT_S = 600.0  # generous: a slow ingest must fail by its queue count, not by a short wait
# A consumer waiting this long for one batch of data that is all on the broker has stalled (a
# broker answering empty fetches, a client backing off): marked in its run's line, still counted.
STALL_S = 1.0


# --------------------------------------------------------------------------- workers


# The compression codec of every client's producer (--codec; the parent hands it to the
# workers through the environment): none, gzip, snappy, lz4 or zstd.
_CODEC = os.environ.get("BENCH_CODEC", "none")


def produce_hmbclient(bootstrap: str, topic: str, n: int, size: int) -> float:
    from hmbclient import Producer, ProducerData

    value = payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, compression_codec=_CODEC)
    warm_hmbclient_producer(producer, topic, value)
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    producer.flush(FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert last is not None and last[0].result(60).offset == n, last[0].result(60)
    producer.close()
    return elapsed


def produce_batch_hmbclient(bootstrap: str, topic: str, n: int, size: int) -> float:
    """The Kafka 0.8 batch form: one ProducerData of 1000 messages per send (the peers have
    no such call: their produce-batch rows are their per-message produce)."""
    from hmbclient import Producer, ProducerData

    value = payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, compression_codec=_CODEC)
    warm_hmbclient_producer(producer, topic, value)
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for start in range(0, n, 1000):
        last = send(ProducerData(topic, None, [value] * min(1000, n - start)))
    producer.flush(FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert last is not None and last[-1].result(60).offset == n, last[-1].result(60)
    producer.close()
    return elapsed


# hmbclient-only produce workloads (the peers run their plain produce under these names):
# workload -> (producer_type, messages per ProducerData, extra settings). "-sync": the sync
# producer; "-plain" / "-idem": acks=-1 without / with enable.idempotence, to compare the two
# on the same run (issue 21's goal: idem >= 0.95x plain).
HMB_PRODUCE_WORKLOADS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "produce-sync": ("sync", 1000, {}),
    "produce-plain": ("async", 1, {"request_required_acks": -1, "enable_idempotence": False}),
    "produce-idem": ("async", 1, {"request_required_acks": -1, "enable_idempotence": True}),
    "produce-sync-plain": ("sync", 1000, {"request_required_acks": -1, "enable_idempotence": False}),
    "produce-sync-idem": ("sync", 1000, {"request_required_acks": -1, "enable_idempotence": True}),
    # the cost of the producer's metrics (issue 27's goal: <= 3%): the same async producer with
    # its sensors, and with them detached before the first message
    "produce-metrics-on": ("async", 1, {}),
    "produce-metrics-off": ("async", 1, {}),
}


def _detach_metrics(producer: Any) -> None:
    """Bench only: take the producer's sensors out of its send path (engine and connections)
    before any connection opens, to measure what recording costs."""
    producer._dispatcher.metrics = None
    producer._client._conn_kwargs["latency_sensor"] = None


def produce_hmbclient_as(workload: str, bootstrap: str, topic: str, n: int, size: int) -> float:
    """One of HMB_PRODUCE_WORKLOADS: ``n`` messages in ProducerData of the workload's size."""
    from hmbclient import Producer, ProducerData

    producer_type, per_send, settings = HMB_PRODUCE_WORKLOADS[workload]
    value = payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type=producer_type, queue_buffering_max_ms=5, compression_codec=_CODEC, **settings)
    if workload == "produce-metrics-off":
        _detach_metrics(producer)
    # The readiness rule, plain and idempotent alike: the warm-up message (offset 0) also gets
    # the idempotent producer its id before the clock starts.
    warm_hmbclient_producer(producer, topic, value)
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for start in range(0, n, per_send):
        last = send(ProducerData(topic, None, [value] * min(per_send, n - start)))
    producer.flush(FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert last is not None and last[-1].result(60).offset == n, last[-1].result(60)
    producer.close()
    return elapsed


def produce_api_hmbclient(bootstrap: str, topic: str, n: int, size: int) -> float:
    """The produce-api workload: only ``produce()`` / ``poll()`` / ``flush()``, as
    produce_confluent drives librdkafka (a delivery callback on the last message, poll(0)
    every 10,000); the peers run their produce under this name."""
    from hmbclient import Producer

    value = payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, compression_codec=_CODEC)
    warm: list[Any] = []
    # The readiness rule: the warm-up message (offset 0) acknowledged before the clock starts.
    producer.produce(topic, value, on_delivery=lambda err, r: warm.append((err, r.offset)))
    if producer.flush(60) or warm != [(None, 0)]:
        raise BenchError(f"hmbclient produce-api: the warm-up message was not acknowledged at offset 0: {warm}")
    last: list[Any] = []
    t0 = time.perf_counter()
    produce = producer.produce
    poll = producer.poll
    for i in range(n - 1):
        produce(topic, value)
        if i % 10000 == 0:
            poll(0)
    produce(topic, value, on_delivery=lambda err, r: last.append((err, r.offset)))
    left = producer.flush(FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    if left or last != [(None, n)]:
        raise BenchError(f"hmbclient produce-api: {left} messages left after flush, last report {last}")
    producer.close()
    return elapsed


def produce_kafka_python(bootstrap: str, topic: str, n: int, size: int) -> float:
    from kafka import KafkaProducer

    value = payload(size)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1, compression_type=_CODEC if _CODEC != "none" else None)
    warm_kafka_python_producer(producer, topic, value)
    t0 = time.perf_counter()
    send = producer.send
    future = None
    for _ in range(n):
        future = send(topic, value)
    producer.flush(FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert future is not None and future.get(60).offset == n
    producer.close()
    return elapsed


def produce_aiokafka(bootstrap: str, topic: str, n: int, size: int) -> float:
    from aiokafka import AIOKafkaProducer

    value = payload(size)

    async def run() -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1, compression_type=_CODEC if _CODEC != "none" else None)
        await producer.start()
        await warm_aiokafka_producer(producer, topic, value)
        t0 = time.perf_counter()
        send = producer.send
        future = None
        for _ in range(n):
            future = await send(topic, value)
        await asyncio.wait_for(producer.flush(), FLUSH_TIMEOUT_S)
        elapsed = time.perf_counter() - t0
        assert future is not None and (await future).offset == n
        await producer.stop()
        return elapsed

    return asyncio.run(run())


def produce_confluent(bootstrap: str, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer as CProducer

    value = payload(size)
    last: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:  # the last message's report only
        last.append((err, msg.offset()))

    producer = CProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "queue.buffering.max.messages": 1_000_000, "compression.type": _CODEC}
    )
    warm_confluent_producer(producer, topic, value)
    t0 = time.perf_counter()
    produce = producer.produce
    for i in range(n - 1):
        try:
            produce(topic, value)
        except BufferError:
            producer.poll(0.01)
            produce(topic, value)
        if i % 10000 == 0:
            producer.poll(0)
    while True:
        try:
            produce(topic, value, on_delivery=delivered)
            break
        except BufferError:
            producer.poll(0.01)
    confluent_flush(producer, FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert last and last[0][0] is None and last[0][1] == n, last
    return elapsed


def consume_hmbclient(host: str, port: int, topic: str, n: int) -> tuple[float, float]:
    from hmbclient import FetchRequest, SimpleConsumer

    consumer = SimpleConsumer(host, port, so_timeout_ms=30_000, buffer_size=-1)
    rest = warm_hmbclient_consumer(consumer, topic, 0, FETCH_BYTES)
    t0 = time.perf_counter()
    offset = 1
    got = 0
    total = 0
    for message in rest:
        total += len(message.value)  # type: ignore[arg-type]
        got += 1
        offset = message.offset + 1
    fetch = consumer.fetch
    before = t0
    longest = 0.0
    while got < n:
        for message in fetch(FetchRequest(topic, 0, offset, FETCH_BYTES)):
            total += len(message.value)  # type: ignore[arg-type]
            got += 1
            offset = message.offset + 1
        now = time.perf_counter()
        longest, before = max(longest, now - before), now
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == n and offset == n + 1, (got, offset)
    return elapsed, longest


def consume_poll_hmbclient(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """consume-poll: the subscribe/poll Consumer, assign()ed (no group), as the peers run."""
    from hmbclient import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    warm_hmbclient_poll_consumer(consumer, topic)
    t0 = time.perf_counter()
    got = 0
    total = 0
    last = 0
    before = t0
    longest = 0.0
    poll = consumer.poll
    while got < n:
        records = poll(1.0, 10_000)
        for record in records:
            total += len(record.value)
        if records:
            got += len(records)
            last = records[-1].offset
        now = time.perf_counter()
        longest, before = max(longest, now - before), now
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == n and last == n, (got, last)
    return elapsed, longest


def consume_aio_hmbclient(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """consume-aio: AIOConsumer.poll awaited in asyncio.run."""
    from hmbclient.aio import AIOConsumer

    async def run() -> tuple[float, float]:
        consumer = AIOConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        await warm_hmbclient_aio_consumer(consumer, topic)
        t0 = time.perf_counter()
        got = 0
        total = 0
        last = 0
        before = t0
        longest = 0.0
        while got < n:
            records = await consumer.poll(1.0, 10_000)
            for record in records:
                total += len(record.value)
            if records:
                got += len(records)
                last = records[-1].offset
            now = time.perf_counter()
            longest, before = max(longest, now - before), now
        elapsed = time.perf_counter() - t0
        await consumer.close()
        assert got == n and last == n, (got, last)
        return elapsed, longest

    return asyncio.run(run())


def consume_connector_hmbclient(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """consume-connector: the 0.8 ConsumerConnector (group.protocol=broker, one stream); its
    longest wait is between two checkpoints 1000 messages apart."""
    from hmbclient import Consumer

    connector = Consumer.create({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                                 "auto.offset.reset": "smallest", "auto.commit.enable": False, "consumer.timeout.ms": 1000})
    stream = connector.create_message_streams({topic: 1})[topic][0]
    warm_hmbclient_connector(stream)
    t0 = time.perf_counter()
    got = 0
    total = 0
    last = 0
    before = t0
    longest = 0.0
    while got < n:
        message = next(stream)
        total += len(message.message)
        got += 1
        last = message.offset
        if got % 1000 == 0:
            now = time.perf_counter()
            longest, before = max(longest, now - before), now
    elapsed = time.perf_counter() - t0
    connector.shutdown()
    assert got == n and last == n, (got, last)
    return elapsed, longest


#: hmbclient-only consume workloads; the peers run their consume under these names (in a run
#: that also has "consume", their consume row of the round stands for them).
HMB_CONSUME_WORKLOADS = {
    "consume-poll": consume_poll_hmbclient,
    "consume-aio": consume_aio_hmbclient,
    "consume-connector": consume_connector_hmbclient,
}


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    warm_kafka_python_consumer(consumer, topic)
    t0 = time.perf_counter()
    got = 0
    total = 0
    last = 0
    before = t0
    longest = 0.0
    while got < n:
        for records in consumer.poll(timeout_ms=1000, max_records=100_000).values():
            for record in records:
                total += len(record.value)
                got += 1
            last = records[-1].offset
        now = time.perf_counter()
        longest, before = max(longest, now - before), now
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == n and last == n, (got, last)
    return elapsed, longest


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer

    async def run() -> tuple[float, float]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        await consumer.start()
        await warm_aiokafka_consumer(consumer, topic)
        t0 = time.perf_counter()
        got = 0
        total = 0
        last = 0
        before = t0
        longest = 0.0
        while got < n:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=100_000)).values():
                for record in records:
                    total += len(record.value)
                    got += 1
                last = records[-1].offset
            now = time.perf_counter()
            longest, before = max(longest, now - before), now
        elapsed = time.perf_counter() - t0
        await consumer.stop()
        assert got == n and last == n, (got, last)
        return elapsed, longest

    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from confluent_kafka import Consumer as CConsumer

    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s by default) once it holds
    # queued.min.messages (100,000) unconsumed: a fast broker fills that queue faster than the
    # loop drains it, and the second would be counted against confluent. 20 ms keeps it fed.
    consumer = CConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex, "enable.auto.commit": False,
                          "fetch.queue.backoff.ms": 20})
    warm_confluent_consumer(consumer, topic)
    t0 = time.perf_counter()
    got = 0
    total = 0
    last = 0
    before = t0
    longest = 0.0
    while got < n:
        # Never ask for more than is left: librdkafka waits out the whole timeout for a batch
        # it cannot fill, which would add up to a second to the last call.
        for message in consumer.consume(num_messages=min(10_000, n - got), timeout=1.0):
            if message.error():
                continue
            total += len(message.value())  # type: ignore[arg-type]
            got += 1
            last = message.offset()
        now = time.perf_counter()
        longest, before = max(longest, now - before), now
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == n and last == n, (got, last)
    return elapsed, longest


PRODUCERS = {
    "hmbclient": produce_hmbclient,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
    "confluent": produce_confluent,
}


def worker(argv: list[str]) -> None:
    """One measurement (``--worker CLIENT WORKLOAD BOOTSTRAP TOPIC N SIZE``); prints its seconds."""
    client, workload, bootstrap, topic, count, size = argv
    n = int(count)
    longest = None
    if workload == "produce-batch" and client == "hmbclient":
        elapsed = produce_batch_hmbclient(bootstrap, topic, n, int(size))
    elif workload == "produce-api" and client == "hmbclient":
        elapsed = produce_api_hmbclient(bootstrap, topic, n, int(size))
    elif workload in HMB_PRODUCE_WORKLOADS and client == "hmbclient":
        elapsed = produce_hmbclient_as(workload, bootstrap, topic, n, int(size))
    elif workload.startswith("produce"):
        elapsed = PRODUCERS[client](bootstrap, topic, n, int(size))
    elif workload in HMB_CONSUME_WORKLOADS and client == "hmbclient":
        elapsed, longest = HMB_CONSUME_WORKLOADS[workload](bootstrap, topic, n)
    else:
        host, port = bootstrap.rsplit(":", 1)
        if client == "hmbclient":
            elapsed, longest = consume_hmbclient(host, int(port), topic, n)
        elif client == "kafka-python":
            elapsed, longest = consume_kafka_python(bootstrap, topic, n)
        elif client == "aiokafka":
            elapsed, longest = consume_aiokafka(bootstrap, topic, n)
        else:
            elapsed, longest = consume_confluent(bootstrap, topic, n)
    print(json.dumps({"seconds": elapsed, "longest_wait_s": longest}))


# --------------------------------------------------------------------------- orchestration


def create_topic(bootstrap: str, topic: str) -> None:
    from hmbclient.net import Metadata, NetClient
    from hmbclient.protocol.api.base import ApiKey

    with NetClient(bootstrap) as c:
        c.call(
            c.bootstrap_ids[0],
            lambda v: v.build(ApiKey.CREATE_TOPICS, topics=[(topic, 1, 1, [], [])], timeout_ms=10_000, validate_only=False),
        )
        Metadata(c).partitions_for(topic, 10_000)


def run_worker(client: str, workload: str, bootstrap: str, topic: str, n: int, size: int, timeout: float = 1800) -> dict[str, Any]:
    """One measurement in a fresh process: ``{"seconds", "longest_wait_s"}`` (the longest wait
    for one fetch/poll of a consumer, None for producers); BenchError if it fails or times out
    (a missing row would leave a ratio resting on fewer rounds than it says)."""
    cmd = [sys.executable, __file__, "--worker", client, workload, bootstrap, topic, str(n), str(size)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{client} {workload} {size} B: timed out after {timeout:.0f} s") from e
    if out.returncode != 0:
        raise BenchError(f"{client} {workload} {size} B failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@contextlib.contextmanager
def fresh_broker(name: str) -> Iterator[str]:
    """A new broker process (and, for ours, a new log directory removed afterwards); yields its
    bootstrap address."""
    if name == "tansu":
        from hmbclient.testing.tansu import LocalTansu

        with LocalTansu() as tansu:
            yield tansu.bootstrap
        return
    if name == "kafka":
        from hmbclient.testing import ApacheKafka

        with ApacheKafka(jvm_options=KAFKA_BENCH_JVM_OPTIONS) as kafka:
            yield kafka.bootstrap
        return
    if name != "embedded":
        raise SystemExit(f"unknown broker {name!r} (tansu, kafka, embedded)")
    from hmbclient.broker.process import BrokerProcess

    log_dir = tempfile.mkdtemp(prefix="bench-broker-")
    broker = BrokerProcess(log_dir=log_dir)
    try:
        broker.start()
        yield broker.bootstrap
    finally:
        broker.terminate()
        shutil.rmtree(log_dir, ignore_errors=True)


def fill(bootstrap: str, n: int, size: int) -> str:
    """A fresh topic holding exactly N + 1 messages (the warm-up message and N), written by
    confluent-kafka's produce worker (hmbclient's on a second fresh topic should that fail)."""
    for client in ("confluent", "hmbclient"):
        topic = f"bench-c{size}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic)
        try:
            run_worker(client, "produce", bootstrap, topic, n, size)
        except BenchError as e:
            print(f"  filling {topic} with {client} failed: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
            delete_topic(bootstrap, topic)
            continue
        waited = require_end_offset(bootstrap, topic, n + 1, what=f"filled by {client}")
        print(f"  filled {topic}: {n + 1:,} messages (end offset reached {waited:.1f} s after the last ack)", flush=True)
        return topic
    raise BenchError(f"could not fill a topic with {n + 1:,} messages of {size} B")


Results = dict[tuple[str, str, int, str], dict[int, float]]  # (broker, workload, size, client) -> round -> seconds


def run_round(bname: str, size: int, rnd: int, args: argparse.Namespace, clients: list[str], workloads: list[str],
              results: Results) -> None:
    n = args.n
    order = clients[rnd % len(clients):] + clients[: rnd % len(clients)]
    with fresh_broker(bname) as bootstrap:
        print(f"[{bname} {size}B round {rnd + 1}] broker {bootstrap}, load {loadavg()}", flush=True)
        consume_topic = fill(bootstrap, n, size) if any(w.startswith("consume") for w in workloads) else None
        for workload in sorted(workloads, key=lambda w: not w.startswith("consume")):  # consume first: the filled topic alone
            for client in order:
                if workload == "produce-batch" and client != "hmbclient" and "produce" in workloads:
                    continue  # the peers' produce-batch row is their produce of this round
                if workload in HMB_CONSUME_WORKLOADS and client != "hmbclient" and "consume" in workloads:
                    continue  # the peers' row is their consume of this round
                if workload.startswith("produce"):
                    topic = f"bench-p{size}-{uuid.uuid4().hex[:8]}"
                    create_topic(bootstrap, topic)
                else:
                    assert consume_topic is not None
                    topic = consume_topic
                    require_end_offset(bootstrap, topic, n + 1, what="before timing the consume")
                result = run_worker(client, workload, bootstrap, topic, n, size)
                elapsed = result["seconds"]
                if workload.startswith("produce"):
                    waited = require_end_offset(bootstrap, topic, n + 1, what=f"after {client}'s {workload}")
                    if waited > 0.5:
                        print(f"  ({topic}: end offset reached {waited:.1f} s after {client}'s last ack)", flush=True)
                    delete_topic(bootstrap, topic)
                results.setdefault((bname, workload, size, client), {})[rnd] = elapsed
                rate = n / elapsed
                wait = result.get("longest_wait_s")
                note = "" if wait is None else f"  longest wait for a batch {wait * 1000:,.0f} ms" + (" (stalled)" if wait > STALL_S else "")
                print(f"[{bname} {workload} {size}B round {rnd + 1}] {client:13s} {rate:>11,.0f} msg/s  {rate * size / 1e6:7.1f} MB/s{note}",
                      flush=True)
    if "produce-batch" in workloads and "produce" in workloads:
        for client in clients:
            if client != "hmbclient" and rnd in results.get((bname, "produce", size, client), {}):
                results.setdefault((bname, "produce-batch", size, client), {})[rnd] = results[(bname, "produce", size, client)][rnd]
    if "consume" in workloads:
        for workload in set(workloads) & set(HMB_CONSUME_WORKLOADS):
            for client in clients:
                if client != "hmbclient" and rnd in results.get((bname, "consume", size, client), {}):
                    results.setdefault((bname, workload, size, client), {})[rnd] = results[(bname, "consume", size, client)][rnd]


def table(results: Results, args: argparse.Namespace, brokers: list[str], sizes: list[int], workloads: list[str],
          clients: list[str]) -> None:
    peers = [c for c in clients if c != "hmbclient"]
    print(f"\n{args.n:,} messages per run, compression codec: {args.codec}; medians of the rounds in msg/s;"
          " hmbclient / peer: median of the per-round ratios (lowest-highest)")
    print(f"{'broker':9s} {'workload':17s} {'size':>5s} {'n':>3s} " + " ".join(f"{client:>13s}" for client in clients)
          + "".join(f"  {'hmb/' + peer:>22s}" for peer in peers))
    for bname in brokers:
        for workload in workloads:
            for size in sizes:
                per_round = {client: results.get((bname, workload, size, client), {}) for client in clients}
                if not any(per_round.values()):
                    continue
                rates = {client: {r: args.n / s for r, s in rounds.items()} for client, rounds in per_round.items()}
                medians = {client: statistics.median(rs.values()) for client, rs in rates.items() if rs}
                rounds = max(len(rs) for rs in rates.values())
                row = f"{bname:9s} {workload:17s} {size:>5d} {rounds:>3d} " + " ".join(f"{medians.get(client, 0):>13,.0f}" for client in clients)
                for peer in peers:
                    ours, theirs = rates.get("hmbclient", {}), rates.get(peer, {})
                    common = sorted(set(ours) & set(theirs))
                    summary = ratio_summary([ours[r] for r in common], [theirs[r] for r in common])
                    row += f"  {format_ratio(summary):>22s}"
                print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=6, metavar=("CLIENT", "WORKLOAD", "BOOTSTRAP", "TOPIC", "N", "SIZE"))
    parser.add_argument("--brokers", default="tansu,kafka,embedded", help="of tansu, kafka (Apache Kafka 4.x), embedded")
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--workloads", default="produce,consume",
                        help="of produce, consume, produce-batch, produce-api, produce-sync[-plain|-idem], produce-plain, "
                        "produce-idem, consume-poll, consume-aio, consume-connector")
    parser.add_argument("--n", type=int, default=1_000_000, help="messages timed per run (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--codec", default="none", help="producers compress with this codec (none, gzip, snappy, lz4, zstd)")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    os.environ["BENCH_CODEC"] = args.codec
    clients = args.clients.split(",")
    sizes = [int(size) for size in args.sizes.split(",")]
    workloads = args.workloads.split(",")
    brokers = args.brokers.split(",")
    results: Results = {}
    load_start = loadavg()
    print(f"load at start: {load_start} ({os.cpu_count()} cores)", flush=True)
    failure: BenchError | None = None
    try:
        for bname in brokers:
            for size in sizes:
                for rnd in range(args.rounds):
                    run_round(bname, size, rnd, args, clients, workloads, results)
    except BenchError as e:
        failure = e
    load_end = loadavg()
    table(results, args, brokers, sizes, workloads, clients)
    print(f"load at start: {load_start}; at end: {load_end} ({os.cpu_count()} cores)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"load_start": load_start, "load_end": load_end, "n": args.n, "codec": args.codec,
                       "seconds": {"|".join(map(str, key)): rounds for key, rounds in results.items()}}, out, indent=1)
    if failure is not None:
        raise SystemExit(f"\nRUN STOPPED: {failure}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
