"""Client throughput, side by side: hmbclient vs kafka-python, aiokafka and confluent-kafka.

    .venv/bin/python bench/clients.py                       # everything (a few minutes)
    .venv/bin/python bench/clients.py --brokers tansu --sizes 100 --rounds 3
    .venv/bin/python bench/clients.py --profile produce --size 100   # py-spy/pyinstrument target

Workloads: produce N messages of S bytes (null keys, one partition, acks=1, linger 5 ms, each
client's own batching) and time until every one is acknowledged; consume the same N messages
from offset 0 and time until the last one is in hand (each message's value is touched).
Brokers: Tansu (modern protocol, memory storage) and the embedded broker (in a subprocess).

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

CLIENTS = ["hmbclient", "kafka-python", "aiokafka", "confluent"]


# --------------------------------------------------------------------------- workers


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def produce_hmbclient(bootstrap: str, topic: str, n: int, size: int) -> float:
    from hmbclient import Producer, ProducerData

    value = _payload(size)
    p = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5)
    p.partitions_for(topic)  # metadata outside the timed part, as the peers' warm-up does
    t0 = time.perf_counter()
    send = p.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    p.flush()
    dt = time.perf_counter() - t0
    assert last is not None and last[0].result().offset == n - 1, last[0].result()
    p.close()
    return dt


def produce_kafka_python(bootstrap: str, topic: str, n: int, size: int) -> float:
    from kafka import KafkaProducer

    value = _payload(size)
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    p.partitions_for(topic)
    t0 = time.perf_counter()
    send = p.send
    f = None
    for _ in range(n):
        f = send(topic, value)
    p.flush()
    dt = time.perf_counter() - t0
    assert f is not None and f.get().offset == n - 1
    p.close()
    return dt


def produce_aiokafka(bootstrap: str, topic: str, n: int, size: int) -> float:
    from aiokafka import AIOKafkaProducer

    value = _payload(size)

    async def run() -> float:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
        await p.start()
        await p.partitions_for(topic)
        t0 = time.perf_counter()
        send = p.send
        fut = None
        for _ in range(n):
            fut = await send(topic, value)
        await p.flush()
        dt = time.perf_counter() - t0
        assert fut is not None and (await fut).offset == n - 1
        await p.stop()
        return dt

    return asyncio.run(run())


def produce_confluent(bootstrap: str, topic: str, n: int, size: int) -> float:
    from confluent_kafka import Producer as CProducer

    value = _payload(size)
    p = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1, "queue.buffering.max.messages": 1_000_000})
    p.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    produce = p.produce
    for i in range(n):
        try:
            produce(topic, value)
        except BufferError:
            p.poll(0.01)
            produce(topic, value)
        if i % 10000 == 0:
            p.poll(0)
    left = p.flush(60)
    dt = time.perf_counter() - t0
    assert left == 0
    return dt


def consume_hmbclient(host: str, port: int, topic: str, n: int) -> float:
    from hmbclient import FetchRequest, SimpleConsumer

    c = SimpleConsumer(host, port, so_timeout_ms=30_000, buffer_size=-1)
    c.get_offsets_before(topic, 0, -2, 1)  # connect outside the timed part
    t0 = time.perf_counter()
    offset = 0
    got = 0
    total = 0
    fetch = c.fetch
    while got < n:
        for mo in fetch(FetchRequest(topic, 0, offset, 1_048_576)):
            total += len(mo.value)  # type: ignore[arg-type]
            got += 1
            offset = mo.offset + 1
    dt = time.perf_counter() - t0
    c.close()
    assert got == n, got
    return dt


def consume_kafka_python(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    t0 = time.perf_counter()
    got = 0
    total = 0
    while got < n:
        for recs in c.poll(timeout_ms=1000, max_records=100_000).values():
            for r in recs:
                total += len(r.value)
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    return dt


def consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> float:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        t0 = time.perf_counter()
        got = 0
        total = 0
        while got < n:
            for recs in (await c.getmany(timeout_ms=1000, max_records=100_000)).values():
                for r in recs:
                    total += len(r.value)
                    got += 1
        dt = time.perf_counter() - t0
        await c.stop()
        return dt

    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition

    c = CConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    t0 = time.perf_counter()
    got = 0
    total = 0
    while got < n:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error():
                continue
            total += len(m.value())  # type: ignore[arg-type]
            got += 1
    dt = time.perf_counter() - t0
    c.close()
    return dt


PRODUCERS = {
    "hmbclient": produce_hmbclient,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
    "confluent": produce_confluent,
}


def worker(args: argparse.Namespace) -> None:
    if args.workload == "produce":
        dt = PRODUCERS[args.client](args.bootstrap, args.topic, args.n, args.size)
    else:
        host, port = args.bootstrap.rsplit(":", 1)
        if args.client == "hmbclient":
            dt = consume_hmbclient(host, int(port), args.topic, args.n)
        elif args.client == "kafka-python":
            dt = consume_kafka_python(args.bootstrap, args.topic, args.n)
        elif args.client == "aiokafka":
            dt = consume_aiokafka(args.bootstrap, args.topic, args.n)
        else:
            dt = consume_confluent(args.bootstrap, args.topic, args.n)
    print(json.dumps({"seconds": dt}))


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

            t = LocalTansu().start()
            self._stack.append(t)
            self.bootstrap["tansu"] = t.bootstrap
        if "embedded" in self.names:
            from hmbclient.broker.process import BrokerProcess

            d = tempfile.mkdtemp(prefix="bench-broker-")
            bp = BrokerProcess(log_dir=d)
            bp.start()
            self._stack.append(bp)
            self.bootstrap["embedded"] = bp.bootstrap
        return self

    def __exit__(self, *exc: object) -> None:
        for s in reversed(self._stack):
            stop: Any = getattr(s, "terminate", None) or s.stop
            stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=6, metavar=("CLIENT", "WORKLOAD", "BOOTSTRAP", "TOPIC", "N", "SIZE"))
    ap.add_argument("--brokers", default="tansu,embedded")
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--workloads", default="produce,consume")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the raw results here")
    a = ap.parse_args()
    if a.worker:
        c, w, b, t, n, s = a.worker
        worker(argparse.Namespace(client=c, workload=w, bootstrap=b, topic=t, n=int(n), size=int(s)))
        return
    clients = a.clients.split(",")
    sizes = [int(s) for s in a.sizes.split(",")]
    workloads = a.workloads.split(",")
    results: dict[tuple[str, str, int, str], list[float]] = {}
    with Brokers(a.brokers.split(",")) as brokers:
        for bname, bootstrap in brokers.bootstrap.items():
            for size in sizes:
                consume_topic = None
                if "consume" in workloads:
                    consume_topic = f"bench-c{size}-{uuid.uuid4().hex[:6]}"
                    create_topic(bootstrap, consume_topic)
                    if run_worker("confluent", "produce", bootstrap, consume_topic, a.n, size) is None:
                        run_worker("hmbclient", "produce", bootstrap, consume_topic, a.n, size)
                for rnd in range(a.rounds):
                    order = clients[rnd % len(clients) :] + clients[: rnd % len(clients)]
                    for w in workloads:
                        for client in order:
                            if w == "produce":
                                topic = f"bench-p{size}-{uuid.uuid4().hex[:8]}"
                                create_topic(bootstrap, topic)
                            else:
                                topic = consume_topic  # type: ignore[assignment]
                            dt = run_worker(client, w, bootstrap, topic, a.n, size)
                            if dt is not None:
                                results.setdefault((bname, w, size, client), []).append(dt)
                                rate = a.n / dt
                                print(f"[{bname} {w} {size}B round {rnd + 1}] {client:13s} {rate:>11,.0f} msg/s  {rate * size / 1e6:7.1f} MB/s", flush=True)
    print()
    print(f"{'broker':9s} {'workload':8s} {'size':>5s} " + " ".join(f"{c:>13s}" for c in clients) + "   hmb/aiokafka  hmb/kafka-python  hmb/confluent")
    for bname in brokers.bootstrap:
        for w in workloads:
            for size in sizes:
                med = {c: statistics.median(results[(bname, w, size, c)]) for c in clients if (bname, w, size, c) in results}
                rates = {c: a.n / dt for c, dt in med.items()}
                row = f"{bname:9s} {w:8s} {size:>5d} " + " ".join(f"{rates.get(c, 0):>13,.0f}" for c in clients)

                def ratio(peer: str, rates: dict[str, float] = rates) -> str:
                    if "hmbclient" in rates and peer in rates:
                        return f"{rates['hmbclient'] / rates[peer]:.2f}x"
                    return "-"

                print(row + f"   {ratio('aiokafka'):>12s}  {ratio('kafka-python'):>16s}  {ratio('confluent'):>13s}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"|".join(map(str, k)): v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
