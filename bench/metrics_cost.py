"""What the producer's metrics cost: process CPU per message with the sensors and with them
detached, same producer, same broker, alternating order, in one run.

    .venv/bin/python bench/metrics_cost.py [--n 200000] [--rounds 6] [--size 100]

Wall-clock throughput (``bench/clients.py --workloads produce-metrics-on,produce-metrics-off``)
measures the same thing but swings by 20% and more when the machine is shared; the CPU time of
the producing process (its caller, sender and I/O threads; the broker runs in another process)
does not depend on what else runs. Each round times both modes on fresh topics after the
readiness rule's warm-up message. Prints the per-round CPU seconds, the medians and the
overhead (goal <= 3%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.append(os.path.dirname(os.path.abspath(__file__)))

from _common import loadavg, payload, warm_hmbclient_producer  # noqa: E402
from clients import _detach_metrics  # noqa: E402

from hmbclient import Producer, ProducerData  # noqa: E402


def run_once(bootstrap: str, topic: str, n: int, size: int, metrics: bool) -> float:
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5)
    try:
        if not metrics:
            _detach_metrics(producer)
        value = payload(size)
        warm_hmbclient_producer(producer, topic, value)
        c0 = time.process_time()
        send = producer.send
        for _ in range(n):
            send(ProducerData(topic, None, value))
        left = producer.flush(300)
        cpu = time.process_time() - c0
        if left:
            raise SystemExit(f"{left} messages left unacknowledged")
        return cpu
    finally:
        producer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    broker = subprocess.Popen([sys.executable, "-m", "hmbclient.cli", "broker", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    print(f"load at start: {loadavg()} ({os.cpu_count()} cores)")
    cpu: dict[bool, list[float]] = {True: [], False: []}
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline()  # "hmb broker <id> listening on <host>:<port> log.dir=..."
        bootstrap = line.split(" listening on ", 1)[1].split()[0]
        for rnd in range(args.rounds):
            for on in ((True, False) if rnd % 2 == 0 else (False, True)):
                seconds = run_once(bootstrap, f"cost-{'on' if on else 'off'}-{rnd}", args.n, args.size, on)
                cpu[on].append(seconds)
                print(f"round {rnd + 1} metrics {'on ' if on else 'off'}: {seconds:.3f} s CPU, "
                      f"{seconds / args.n * 1e9:,.0f} ns/msg", flush=True)
    finally:
        broker.terminate()
        broker.wait(30)
    on, off = statistics.median(cpu[True]), statistics.median(cpu[False])
    print(f"median CPU: on {on:.3f} s, off {off:.3f} s; overhead {100 * (on / off - 1):+.1f}% (goal <= 3%)")
    print(f"load at end: {loadavg()}")


if __name__ == "__main__":
    main()
