"""Transactional produce vs idempotent produce (issue 23's goal: transactional >= 0.9x).

    .venv/bin/python bench/txn_producer.py                          # embedded broker, 3 rounds
    .venv/bin/python bench/txn_producer.py --brokers embedded,kafka --n 200000 --size 100

Both runs use hmbclient's async producer with acks=-1 and idempotence, sending N messages of
S bytes with produce() to a fresh one-partition topic; the transactional one commits a
transaction every ``--txn-ms`` (100 ms) of sending (begin, produce until the interval is up,
commit_transaction, which flushes). Readiness as bench/clients.py: one warm-up message
acknowledged (for the transactional producer: init_transactions and one committed
transaction) before the clock starts; the clock stops when everything is acknowledged and the
last transaction committed. Checked, not timed: a read_committed reader counts exactly N + 1
records in the topic (the warm-up one and N), so a figure never rests on lost messages.
Each measurement runs in a fresh broker (bench/clients.py's ``fresh_broker``); the ratio is the
median of the per-round ratios. Not a test: nothing asserts a speed.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from _common import BenchError, loadavg, payload
from clients import create_topic, fresh_broker

from hmbclient import FetchRequest, Producer, SimpleConsumer
from hmbclient.config import parse_broker_list


def _count_committed(bootstrap: str, topic: str) -> int:
    host, port = parse_broker_list(bootstrap)[0]
    n = 0
    with SimpleConsumer(host, port, isolation_level="read_committed") as c, SimpleConsumer(host, port) as ru:
        deadline = time.monotonic() + 30  # the last commit's marker is written after EndTxn's answer
        while c.get_offsets_before(topic, 0, -1, 1) != ru.get_offsets_before(topic, 0, -1, 1):
            if time.monotonic() > deadline:
                raise BenchError(f"{topic}: the last stable offset never reached the end")
            time.sleep(0.05)
        offset = 0
        while True:
            ms = c.fetch(FetchRequest(topic, 0, offset, 4 << 20))
            n += len(ms)
            if ms.next_offset == offset:
                return n
            offset = ms.next_offset


def run(bootstrap: str, n: int, size: int, txn_ms: float | None) -> float:
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    value = payload(size)
    settings: dict[str, Any] = {"request_required_acks": -1, "enable_idempotence": True}
    if txn_ms is not None:
        settings["transactional_id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, **settings)
    try:
        if txn_ms is None:
            p.produce(topic, value)
            if p.flush(60):
                raise BenchError("warm-up message not acknowledged")
        else:
            p.init_transactions(60)
            p.begin_transaction()
            p.produce(topic, value)
            p.commit_transaction(60)
        produce = p.produce
        t0 = time.perf_counter()
        if txn_ms is None:
            for _ in range(n):
                produce(topic, value)
            left = p.flush(600)
        else:
            interval = txn_ms / 1000.0
            sent = 0
            while sent < n:
                p.begin_transaction()
                until = time.perf_counter() + interval
                while sent < n:
                    # in chunks of 1000 between clock reads: the loop's own cost per message
                    # as the idempotent run's plain loop (a counter and a test per message cost
                    # ~5% of a produce() call)
                    chunk = min(1000, n - sent)
                    for _ in range(chunk):
                        produce(topic, value)
                    sent += chunk
                    if time.perf_counter() >= until:
                        break
                p.commit_transaction(600)
            left = 0
        elapsed = time.perf_counter() - t0
        if left:
            raise BenchError(f"{left} messages unacknowledged")
    finally:
        p.close()
    got = _count_committed(bootstrap, topic)
    if got != n + 1:
        raise BenchError(f"{topic}: {got} committed records, expected {n + 1}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brokers", default="embedded")
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--txn-ms", type=float, default=100.0)
    args = ap.parse_args()
    print(f"load {loadavg()}; {args.n:,} messages of {args.size} B, transactions of {args.txn_ms:.0f} ms", flush=True)
    for bname in args.brokers.split(","):
        ratios = []
        rates: dict[str, list[float]] = {"idempotent": [], "transactional": []}
        for rnd in range(args.rounds):
            round_s = {}
            for kind, txn in (("idempotent", None), ("transactional", args.txn_ms)):
                with fresh_broker(bname) as bootstrap:
                    round_s[kind] = run(bootstrap, args.n, args.size, txn)
                rate = args.n / round_s[kind]
                rates[kind].append(rate)
                print(f"[{bname} round {rnd + 1}] {kind:13s} {rate:>10,.0f} msg/s", flush=True)
            ratios.append(round_s["idempotent"] / round_s["transactional"])
        print(f"{bname}: idempotent {statistics.median(rates['idempotent']):,.0f} msg/s, transactional "
              f"{statistics.median(rates['transactional']):,.0f} msg/s, transactional / idempotent "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); load {loadavg()}", flush=True)


if __name__ == "__main__":
    main()
