"""Broker throughput: the embedded broker vs Tansu, same client (confluent-kafka), one run.

    .venv/bin/python bench/broker.py            # 200,000 x 1000 B, 3 rounds, ~1-2 minutes
    .venv/bin/python bench/broker.py --quick    # 50,000 messages, 1 round

Each broker runs in its own process (ours: ``python -m hmbclient.broker`` through BrokerProcess,
with its log on the local disk; Tansu: ``tansu broker --storage-engine memory://tansu/``), and
each client run is a fresh process, so neither side shares a GIL with the client. A round, per
broker: create a 1-partition topic, produce N messages of SIZE bytes (confluent-kafka defaults,
no compression, acks=all as librdkafka defaults) and time until ``flush`` returns; then consume
them all from offset 0 with an assigned consumer and time until the last one arrives. Rounds
alternate brokers; figures are medians in MB/s (payload bytes / 1e6 / s), and the ratio column
is ours / Tansu (goals: produce >= 1.0, fetch >= 2.0), with the lowest and highest per-round
ratio beside it (round r of ours against round r of Tansu, run back to back). Each round also
produces the same messages to each broker with ``enable.idempotence=true`` and, plain, with
``max.in.flight=5`` (the limit idempotence imposes on librdkafka), each to a fresh topic: the
idempotent / plain ratios are printed below the table, ours and Tansu's. Against plain at the
same in-flight limit the ratio is as close as this client gets to the broker's own cost of
de-duplication (goal >= 0.95); Tansu's ratio shows what librdkafka's idempotent mode costs
whatever the broker. Absolute figures
drift between runs; the load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _client(mode: str, bootstrap: str, topic: str, n: int, size: int) -> dict[str, Any]:
    """Runs inside the client process: one produce or consume pass, returns the timings."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    if mode == "create":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        fut = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic]
        fut.result(30)
        return {}
    if mode in ("produce", "produce-idem", "produce-inflight5"):
        payload = os.urandom(size)
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": mode == "produce-idem"}
        if mode == "produce-inflight5":
            conf["max.in.flight"] = 5
        p = Producer(conf)
        p.list_topics(topic, timeout=10)  # metadata first: time the data path only
        t0 = time.perf_counter()
        for i in range(n):
            while True:
                try:
                    p.produce(topic, payload, partition=0)
                    break
                except BufferError:
                    p.poll(0.001)
            if i % 10_000 == 0:
                p.poll(0)
        left = p.flush(120)
        elapsed = time.perf_counter() - t0
        if left:
            raise SystemExit(f"{left} messages not delivered")
        return {"seconds": elapsed}
    if mode == "consume":
        # fetch.queue.backoff.ms: librdkafka stops fetching for 1 s (its default) whenever its
        # local queue is full, i.e. whenever the broker is faster than this loop drains it; that
        # pause would measure the client's flow control, not the broker. Same setting for both.
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False, "fetch.queue.backoff.ms": 20})
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        nbytes = 0
        t0 = time.perf_counter()
        while got < n:
            batch = c.consume(num_messages=min(10_000, n - got), timeout=10)
            if not batch:
                raise SystemExit(f"consumer stalled at {got}/{n}")
            for m in batch:
                if m.error():
                    raise SystemExit(str(m.error()))
                nbytes += len(m.value())
            got += len(batch)
        elapsed = time.perf_counter() - t0
        c.close()
        return {"seconds": elapsed, "bytes": nbytes}
    raise SystemExit(f"unknown mode {mode}")


def _run_client(mode: str, bootstrap: str, topic: str, n: int, size: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--client", mode, "--bootstrap", bootstrap, "--topic", topic, "--n", str(n), "--size", str(size)],
        capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"client {mode} against {bootstrap} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a broker setting for our broker (BrokerConfig snake_case name)")
    ap.add_argument("--client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--topic", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        print(json.dumps(_client(args.client, args.bootstrap, args.topic, args.n, args.size)))
        return
    if args.quick:
        args.n, args.rounds = 50_000, 1

    from hmbclient.broker import BrokerProcess
    from hmbclient.testing.tansu import LocalTansu

    mb = args.n * args.size / 1e6
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)", flush=True)
    results: dict[str, dict[str, list[float]]] = {"hmb": {"produce": [], "fetch": [], "produce-idem": [], "produce-inflight5": []}, "tansu": {"produce": [], "fetch": [], "produce-idem": [], "produce-inflight5": []}}
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as d, LocalTansu() as tansu:
        settings: dict[str, Any] = {}
        for item in args.set:
            k, _, v = item.partition("=")
            settings[k] = v
        ours = BrokerProcess(d, **settings)
        ours.start()
        try:
            targets = {"hmb": ours.bootstrap, "tansu": tansu.bootstrap}
            for r in range(args.rounds):
                for name in (("hmb", "tansu") if r % 2 == 0 else ("tansu", "hmb")):
                    bootstrap = targets[name]
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    _run_client("create", bootstrap, topic, 0, args.size)
                    time.sleep(0.2)
                    prod = _run_client("produce", bootstrap, topic, args.n, args.size)
                    cons = _run_client("consume", bootstrap, topic, args.n, args.size)
                    results[name]["produce"].append(mb / prod["seconds"])
                    results[name]["fetch"].append(mb / cons["seconds"])
                    print(f"round {r + 1} {name:5s}: produce {mb / prod['seconds']:7.1f} MB/s   fetch {mb / cons['seconds']:7.1f} MB/s", flush=True)
                    for extra in ("produce-idem", "produce-inflight5"):
                        topic = f"bench-{extra}-{uuid.uuid4().hex[:8]}"
                        _run_client("create", bootstrap, topic, 0, args.size)
                        time.sleep(0.2)
                        got = _run_client(extra, bootstrap, topic, args.n, args.size)
                        results[name][extra].append(mb / got["seconds"])
                        print(f"round {r + 1} {name:5s}: {extra} {mb / got['seconds']:7.1f} MB/s", flush=True)
        finally:
            ours.terminate()
    print()
    print(f"{args.n:,} messages x {args.size} B, confluent-kafka client, medians of {args.rounds} round(s)")
    print(f"{'workload':10s} {'hmb MB/s':>10s} {'tansu MB/s':>11s} {'ratio':>7s} {'per round':>12s}  goal")
    for work, target in (("produce", 1.0), ("fetch", 2.0)):
        ours_mb = statistics.median(results["hmb"][work])
        theirs = statistics.median(results["tansu"][work])
        rounds = [a / b for a, b in zip(results["hmb"][work], results["tansu"][work], strict=True)]
        spread = f"{min(rounds):.2f}-{max(rounds):.2f}"
        print(f"{work:10s} {ours_mb:10.1f} {theirs:11.1f} {ours_mb / theirs:7.2f} {spread:>12s}  >= {target}")
    for name in ("hmb", "tansu"):
        got = results[name]
        for base, what in (("produce-inflight5", "plain with max.in.flight=5"), ("produce", "plain, client defaults")):
            per = [a / b for a, b in zip(got["produce-idem"], got[base], strict=True)]
            print(f"{name:5s} idempotent / {what}: {statistics.median(got['produce-idem']) / statistics.median(got[base]):.2f} "
                  f"(per round {min(per):.2f}-{max(per):.2f}){'  goal >= 0.95' if name == 'hmb' and base != 'produce' else ''}")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
