"""Transactional produce vs idempotent produce on the embedded broker (issue 23's goal: >= 0.9x),
same client (confluent-kafka), one broker process.

    .venv/bin/python bench/transactions.py            # 200,000 x 1000 B, 3 rounds
    .venv/bin/python bench/transactions.py --quick    # 20,000 messages, 1 round

A round produces N messages of SIZE bytes to a fresh 1-partition topic twice: idempotent
(``enable.idempotence=true``), and transactional with a commit every ``--txn-ms`` (100 ms: a new
transaction begins right after each commit), timed until ``flush`` returns (idempotent) or the
last ``commit_transaction`` returns (transactional). Both producers are warmed up (one message
delivered, or one committed transaction) before the clock starts. Checked, or the run stops:
the idempotent topic ends at N + 1; the transactional topic's last stable offset equals its end
(nothing left open) and holds N + 1 data records plus one marker per transaction. Figures are
medians in MB/s (payload bytes / 1e6 / s); the ratio is the median of the per-round ratios with
the lowest and highest beside it. The machine's load is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (  # noqa: E402
    BenchError,
    confluent_flush,
    format_ratio,
    loadavg,
    payload,
    ratio_summary,
    warm_confluent_producer,
)

from hmbclient.broker.process import BrokerProcess  # noqa: E402


def _idempotent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    warm_confluent_producer(p, topic, value, partition=0)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    confluent_flush(p, 300)
    return time.perf_counter() - start


def _transactional(bootstrap: str, topic: str, n: int, value: bytes, txn_ms: int) -> tuple[float, int]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value, partition=0)
    p.commit_transaction(30)  # the warm-up transaction
    txns = 0
    start = time.perf_counter()
    p.begin_transaction()
    deadline = start + txn_ms / 1000
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        if time.perf_counter() >= deadline:
            p.commit_transaction(60)
            txns += 1
            p.begin_transaction()
            deadline = time.perf_counter() + txn_ms / 1000
    p.commit_transaction(60)
    txns += 1
    return time.perf_counter() - start, txns


def _offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(high watermark, last stable offset) of partition 0."""
    from hmbclient.net import NetClient
    from hmbclient.protocol.api.base import ApiKey

    client = NetClient(bootstrap)
    try:
        out = []
        for level in (0, 1):
            r = client.call(client.least_loaded_node(), lambda v, level=level: v.build(ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=level,
                            topics=[(topic, [{"partition": 0, "timestamp": -1, "current_leader_epoch": -1}])]), api_key=ApiKey.LIST_OFFSETS)
            out.append(int(r.topics[0].partitions[0].offset))
        return out[0], out[1]
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--txn-ms", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="20,000 messages, 1 round")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.rounds = 20_000, 1
    n, value = args.messages, payload(args.size)
    print(f"load {loadavg()}; {n:,} x {args.size} B, {args.rounds} round(s), transactions of {args.txn_ms} ms")
    idem: list[float] = []
    txn: list[float] = []
    mb = n * args.size / 1e6
    with tempfile.TemporaryDirectory() as d, BrokerProcess(d, num_partitions=1) as bp:
        for r in range(args.rounds):
            t_idem = _idempotent(bp.bootstrap, f"idem-{r}", n, value)
            hw, _ = _offsets(bp.bootstrap, f"idem-{r}")
            if hw != n + 1:
                raise BenchError(f"idempotent topic ends at {hw}, expected {n + 1}")
            t_txn, count = _transactional(bp.bootstrap, f"txn-{r}", n, value, args.txn_ms)
            hw, lso = _offsets(bp.bootstrap, f"txn-{r}")
            if lso != hw or hw != n + 1 + count + 1:
                raise BenchError(f"transactional topic: end {hw}, LSO {lso}, expected {n + 1 + count + 1} (data + markers)")
            idem.append(mb / t_idem)
            txn.append(mb / t_txn)
            print(f"round {r + 1}: idempotent {idem[-1]:.1f} MB/s, transactional {txn[-1]:.1f} MB/s ({count} transactions); load {loadavg()}")
    summary: Any = ratio_summary(txn, idem)
    print(f"median: idempotent {statistics.median(idem):.1f} MB/s, transactional {statistics.median(txn):.1f} MB/s, "
          f"transactional / idempotent {format_ratio(summary)} (goal >= 0.9)")
    print(f"load {loadavg()}")


if __name__ == "__main__":
    main()
