"""Client throughput, side by side: hmbclient vs kafka-python, aiokafka and confluent-kafka.

    .venv/bin/python bench/clients.py                       # everything (a few minutes)
    .venv/bin/python bench/clients.py --brokers tansu --sizes 100 --rounds 3
    .venv/bin/python bench/clients.py --worker hmbclient produce HOST:PORT TOPIC 200000 100
                                                            # one measurement: a profiler target

Workloads: produce N messages of S bytes (null keys, one partition, acks=1, linger 5 ms, each
client's own batching) and time until every one is acknowledged (produce-batch: hmbclient sends
ProducerData of 1000 messages, Kafka 0.8's batch form; the peers, having no such call, the
same per-message calls as produce; not run unless asked; hmbclient-only variants, the peers
running their produce: produce-sync, the sync producer with ProducerData of 1000; produce-plain
and produce-idem, acks=-1 without and with enable.idempotence; produce-sync-plain/-idem); consume the same N messages
from offset 0 and time until the last one is in hand (each message's value is touched).
Brokers: Tansu (modern protocol, memory storage) and the embedded broker (in a subprocess).
``--codec gzip|snappy|lz4|zstd``: every client's producer compresses with that codec.

Every measurement runs in a fresh Python process; clients are interleaved round by round (the
order rotates) so drift hits everyone alike; the table shows medians and the ratios of
hmbclient to each peer. Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

# Run as a script, this directory comes first on sys.path, where a script named like a package
# (bench/ once held rebalance.py) would shadow the package hmbclient imports. The repository
# root stays reachable through the installed project (or PYTHONPATH).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]

CLIENTS = ["hmbclient", "kafka-python", "aiokafka", "confluent"]


# --------------------------------------------------------------------------- workers


# The compression codec of every client's producer (--codec; the parent hands it to the
# workers through the environment): none, gzip, snappy, lz4 or zstd.
_CODEC = os.environ.get("BENCH_CODEC", "none")


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def produce_hmbclient(bootstrap: str, topic: str, n: int, size: int) -> float:
    from hmbclient import Producer, ProducerData

    value = _payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, compression_codec=_CODEC)
    producer.partitions_for(topic)  # metadata outside the timed part, as the peers' warm-up does
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    producer.flush()
    elapsed = time.perf_counter() - t0
    assert last is not None and last[0].result().offset == n - 1, last[0].result()
    producer.close()
    return elapsed


def produce_batch_hmbclient(bootstrap: str, topic: str, n: int, size: int) -> float:
    """The Kafka 0.8 batch form: one ProducerData of 1000 messages per send (the peers have
    no such call: their produce-batch rows are their per-message produce)."""
    from hmbclient import Producer, ProducerData

    value = _payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, compression_codec=_CODEC)
    producer.partitions_for(topic)
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for start in range(0, n, 1000):
        last = send(ProducerData(topic, None, [value] * min(1000, n - start)))
    producer.flush()
    elapsed = time.perf_counter() - t0
    assert last is not None and last[-1].result().offset == n - 1, last[-1].result()
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
}


def produce_hmbclient_as(workload: str, bootstrap: str, topic: str, n: int, size: int) -> float:
    """One of HMB_PRODUCE_WORKLOADS: ``n`` messages in ProducerData of the workload's size."""
    from hmbclient import Producer, ProducerData

    producer_type, per_send, settings = HMB_PRODUCE_WORKLOADS[workload]
    value = _payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type=producer_type, queue_buffering_max_ms=5, compression_codec=_CODEC, **settings)
    producer.partitions_for(topic)
    # Warm up outside the timed part, plain and idempotent alike: one message to another topic
    # opens the connection to the leader and (idempotent) gets the producer id, one round trip
    # each that a run of ~0.1 s would otherwise count against the steady state.
    producer.send(ProducerData(f"{topic}-warm", None, [value]))
    producer.flush()
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for start in range(0, n, per_send):
        last = send(ProducerData(topic, None, [value] * min(per_send, n - start)))
    producer.flush()
    elapsed = time.perf_counter() - t0
    assert last is not None and last[-1].result().offset == n - 1, last[-1].result()
    producer.close()
    return elapsed


def produce_kafka_python(bootstrap: str, topic: str, n: int, size: int) -> float:
    from kafka import KafkaProducer

    value = _payload(size)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1, compression_type=_CODEC if _CODEC != "none" else None)
    producer.partitions_for(topic)
    t0 = time.perf_counter()
    send = producer.send
    future = None
    for _ in range(n):
        future = send(topic, value)
    producer.flush()
    elapsed = time.perf_counter() - t0
    assert future is not None and future.get().offset == n - 1
    producer.close()
    return elapsed


def produce_aiokafka(bootstrap: str, topic: str, n: int, size: int) -> float:
    from aiokafka import AIOKafkaProducer

    value = _payload(size)

    async def run() -> float:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1, compression_type=_CODEC if _CODEC != "none" else None)
        await producer.start()
        await producer.partitions_for(topic)
        t0 = time.perf_counter()
        send = producer.send
        future = None
        for _ in range(n):
            future = await send(topic, value)
        await producer.flush()
        elapsed = time.perf_counter() - t0
        assert future is not None and (await future).offset == n - 1
        await producer.stop()
        return elapsed

    return asyncio.run(run())


def produce_confluent(bootstrap: str, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer as CProducer

    value = _payload(size)
    producer = CProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "queue.buffering.max.messages": 1_000_000, "compression.type": _CODEC}
    )
    producer.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    produce = producer.produce
    for i in range(n):
        try:
            produce(topic, value)
        except BufferError:
            producer.poll(0.01)
            produce(topic, value)
        if i % 10000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - t0
    assert left == 0
    return elapsed


def consume_hmbclient(host: str, port: int, topic: str, n: int) -> float:
    from hmbclient import FetchRequest, SimpleConsumer

    consumer = SimpleConsumer(host, port, so_timeout_ms=30_000, buffer_size=-1)
    consumer.get_offsets_before(topic, 0, -2, 1)  # connect outside the timed part
    t0 = time.perf_counter()
    offset = 0
    got = 0
    total = 0
    fetch = consumer.fetch
    while got < n:
        for message in fetch(FetchRequest(topic, 0, offset, 1_048_576)):
            total += len(message.value)  # type: ignore[arg-type]
            got += 1
            offset = message.offset + 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == n, got
    return elapsed


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    t0 = time.perf_counter()
    got = 0
    total = 0
    while got < n:
        for records in consumer.poll(timeout_ms=1000, max_records=100_000).values():
            for record in records:
                total += len(record.value)
                got += 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    return elapsed


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> float:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        await consumer.start()
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        t0 = time.perf_counter()
        got = 0
        total = 0
        while got < n:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=100_000)).values():
                for record in records:
                    total += len(record.value)
                    got += 1
        elapsed = time.perf_counter() - t0
        await consumer.stop()
        return elapsed

    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition

    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s by default) once it holds
    # queued.min.messages (100,000) unconsumed: a fast broker fills that queue faster than the
    # loop drains it, and the second would be counted against confluent. 20 ms keeps it fed.
    consumer = CConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex, "enable.auto.commit": False,
                          "fetch.queue.backoff.ms": 20})
    consumer.assign([TopicPartition(topic, 0, 0)])
    t0 = time.perf_counter()
    got = 0
    total = 0
    while got < n:
        # Never ask for more than is left: librdkafka waits out the whole timeout for a batch
        # it cannot fill, which would add up to a second to the last call.
        for message in consumer.consume(num_messages=min(10_000, n - got), timeout=1.0):
            if message.error():
                continue
            total += len(message.value())  # type: ignore[arg-type]
            got += 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    return elapsed


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
    if workload == "produce-batch" and client == "hmbclient":
        elapsed = produce_batch_hmbclient(bootstrap, topic, n, int(size))
    elif workload in HMB_PRODUCE_WORKLOADS and client == "hmbclient":
        elapsed = produce_hmbclient_as(workload, bootstrap, topic, n, int(size))
    elif workload.startswith("produce"):
        elapsed = PRODUCERS[client](bootstrap, topic, n, int(size))
    else:
        host, port = bootstrap.rsplit(":", 1)
        if client == "hmbclient":
            elapsed = consume_hmbclient(host, int(port), topic, n)
        elif client == "kafka-python":
            elapsed = consume_kafka_python(bootstrap, topic, n)
        elif client == "aiokafka":
            elapsed = consume_aiokafka(bootstrap, topic, n)
        else:
            elapsed = consume_confluent(bootstrap, topic, n)
    print(json.dumps({"seconds": elapsed}))


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


def run_worker(client: str, workload: str, bootstrap: str, topic: str, n: int, size: int, timeout: float = 600) -> float | None:
    cmd = [sys.executable, __file__, "--worker", client, workload, bootstrap, topic, str(n), str(size)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {client} {workload}: timed out", file=sys.stderr)
        return None
    if out.returncode != 0:
        print(f"  {client} {workload} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


class Brokers:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self._stack: list[Any] = []
        self.bootstrap: dict[str, str] = {}

    def __enter__(self) -> Brokers:
        if "tansu" in self.names:
            from hmbclient.testing.tansu import LocalTansu

            tansu = LocalTansu().start()
            self._stack.append(tansu)
            self.bootstrap["tansu"] = tansu.bootstrap
        if "embedded" in self.names:
            from hmbclient.broker.process import BrokerProcess

            log_dir = tempfile.mkdtemp(prefix="bench-broker-")
            broker = BrokerProcess(log_dir=log_dir)
            broker.start()
            self._stack.append(broker)
            self.bootstrap["embedded"] = broker.bootstrap
        return self

    def __exit__(self, *exc: object) -> None:
        for server in reversed(self._stack):
            stop: Any = getattr(server, "terminate", None) or server.stop
            stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=6, metavar=("CLIENT", "WORKLOAD", "BOOTSTRAP", "TOPIC", "N", "SIZE"))
    parser.add_argument("--brokers", default="tansu,embedded")
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--workloads", default="produce,consume")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
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
    results: dict[tuple[str, str, int, str], list[float]] = {}
    with Brokers(args.brokers.split(",")) as brokers:
        for bname, bootstrap in brokers.bootstrap.items():
            for size in sizes:
                consume_topic = None
                if "consume" in workloads:
                    consume_topic = f"bench-c{size}-{uuid.uuid4().hex[:6]}"
                    create_topic(bootstrap, consume_topic)
                    if run_worker("confluent", "produce", bootstrap, consume_topic, args.n, size) is None:
                        run_worker("hmbclient", "produce", bootstrap, consume_topic, args.n, size)
                for rnd in range(args.rounds):
                    order = clients[rnd % len(clients) :] + clients[: rnd % len(clients)]
                    for workload in workloads:
                        for client in order:
                            if workload.startswith("produce"):
                                topic = f"bench-p{size}-{uuid.uuid4().hex[:8]}"
                                create_topic(bootstrap, topic)
                            else:
                                topic = consume_topic  # type: ignore[assignment]
                            elapsed = run_worker(client, workload, bootstrap, topic, args.n, size)
                            if elapsed is not None:
                                results.setdefault((bname, workload, size, client), []).append(elapsed)
                                rate = args.n / elapsed
                                print(f"[{bname} {workload} {size}B round {rnd + 1}] {client:13s} {rate:>11,.0f} msg/s  {rate * size / 1e6:7.1f} MB/s", flush=True)
    print()
    print(f"compression codec: {args.codec}")
    print(f"{'broker':9s} {'workload':8s} {'size':>5s} " + " ".join(f"{client:>13s}" for client in clients) + "   hmb/aiokafka  hmb/kafka-python  hmb/confluent")
    for bname in brokers.bootstrap:
        for workload in workloads:
            for size in sizes:
                medians = {
                    client: statistics.median(results[(bname, workload, size, client)])
                    for client in clients
                    if (bname, workload, size, client) in results
                }
                rates = {client: args.n / elapsed for client, elapsed in medians.items()}
                row = f"{bname:9s} {workload:8s} {size:>5d} " + " ".join(f"{rates.get(client, 0):>13,.0f}" for client in clients)

                def ratio(peer: str, rates: dict[str, float] = rates) -> str:
                    if "hmbclient" in rates and peer in rates:
                        return f"{rates['hmbclient'] / rates[peer]:.2f}x"
                    return "-"

                print(row + f"   {ratio('aiokafka'):>12s}  {ratio('kafka-python'):>16s}  {ratio('confluent'):>13s}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"|".join(map(str, key)): seconds for key, seconds in results.items()}, out, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
