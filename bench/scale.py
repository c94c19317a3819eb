"""Scale: cost per message as the run grows, client memory, and the broker with many partitions.

    .venv/bin/python bench/scale.py            # 10^4..10^6 messages, 1,000 partitions (~5-8 min)
    .venv/bin/python bench/scale.py --full     # also 10^7 messages (long)
    .venv/bin/python bench/scale.py --only 1   # just part 1 (or --only 2, --only 3)

Every broker is the embedded one in its own process (``BrokerProcess``), its log on local disk,
so no client shares its GIL or its memory.

1. Cost per message. For each size N, a fresh 1-partition topic; hmbclient's async Producer sends
   N messages of 100 B, one ``send(ProducerData(topic, None, [value]))`` per message, then
   flushes; then a SimpleConsumer fetch loop (1 MB fetches) reads them back from offset 0. Each
   run is a fresh Python process, so its peak RSS (``VmHWM``) is that run's alone; the baseline
   is the RSS once connected, before the first message, and "growth" is peak - baseline. Flat
   µs/message and flat growth across N is what scaling well means here.
2. Many partitions, many connections. 100 clients (confluent-kafka, one connection each, 50
   threads in each of two processes) produce TOTAL messages of 100 B (acks=1, linger 5 ms),
   then 100 consumers read them all back (assign, no group). On 1,000 partitions client i
   owns partitions i, i+100, ...; on 1 partition everyone produces to partition 0 and consumer
   i reads its own slice of offsets. Throughput is TOTAL / (last client done - start signal);
   the ratio is 1,000 partitions / 1 partition. The broker's open file descriptors
   (/proc/PID/fd, by kind) are counted before, at the peak during, and after the load.
3. Startup with data on disk. A broker with a tiny log.segment.bytes gets 1,000 partitions;
   each round appends one batch to every partition, which rolls one new segment per
   partition. At checkpoints (1, 5, 9, 10 segments per partition) the broker is killed
   (SIGKILL: an unclean shutdown, so the restart recovers) and the restart is timed until its
   ready line; then it is stopped cleanly (SIGTERM) and the restart timed again. The restarted
   broker's fds are counted each time.

The load average is printed at start and end: on a shared 2-core machine absolute figures
drift with it, ratios less. Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from typing import Any

# Run as a script, this directory comes first on sys.path, where a script named like a package
# would shadow the package hmbclient imports (see bench/clients.py).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
# Measure this checkout, whatever the venv's editable install points at; children inherit it.
_ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))

SIZE = 100
CONNECTIONS = 100
WORKER_PROCESSES = 2
PARTITIONS = 1000
CHECKPOINTS = (1, 5, 9, 10)
# One round is BATCH messages to every partition: about 1.2 kB as one record batch, which fits
# an empty 1,500-byte segment but not next to another batch, so every round rolls a segment.
BATCH = 10
TINY_SEGMENT_BYTES = 1500


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# --------------------------------------------------------------------------- part 1 workers


def produce_one_by_one(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    from hmbclient import Producer, ProducerData

    value = _payload(SIZE)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5)
    producer.partitions_for(topic)
    base = _status_kb("VmRSS")
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    producer.flush()
    elapsed = time.perf_counter() - t0
    assert last is not None and last[0].result().offset == n - 1, last[0].result()
    producer.close()
    return {"seconds": elapsed, "base_kb": base}


def fetch_loop(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    from hmbclient import FetchRequest, SimpleConsumer

    host, port = bootstrap.rsplit(":", 1)
    consumer = SimpleConsumer(host, int(port), so_timeout_ms=30_000, buffer_size=-1)
    consumer.get_offsets_before(topic, 0, -2, 1)
    base = _status_kb("VmRSS")
    t0 = time.perf_counter()
    offset = got = total = 0
    fetch = consumer.fetch
    while got < n:
        for message in fetch(FetchRequest(topic, 0, offset, 1_048_576)):
            total += len(message.value)  # type: ignore[arg-type]
            got += 1
            offset = message.offset + 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == n and total == n * SIZE, (got, total)
    return {"seconds": elapsed, "base_kb": base}


# --------------------------------------------------------------------------- part 2/3 workers


def _client_partitions(index: int, partitions: int) -> list[int]:
    return list(range(index, partitions, CONNECTIONS)) if partitions > 1 else [0]


def load_worker(mode: str, bootstrap: str, topic: str, partitions: int, total: int, first: int, count: int) -> dict[str, Any]:
    """``count`` confluent-kafka clients (indexes first..first+count-1) in threads; waits for
    "go" on stdin after they are all connected; returns the monotonic time the last finished."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    share = total // CONNECTIONS
    value = _payload(SIZE)
    ready = threading.Barrier(count + 1)
    go = threading.Event()
    errors: list[str] = []
    ends: list[float] = []

    def produce(index: int) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
        p.list_topics(topic, timeout=30)
        mine = _client_partitions(index, partitions)
        ready.wait()
        go.wait()
        for i in range(share):
            while True:
                try:
                    p.produce(topic, value, partition=mine[i % len(mine)])
                    break
                except BufferError:
                    p.poll(0.005)
            if i % 1000 == 0:
                p.poll(0)
        if p.flush(120):
            errors.append(f"producer {index}: messages left after flush")
        ends.append(time.monotonic())

    def consume(index: int) -> None:
        # librdkafka prefetches up to queued.min.messages (100,000) per partition: on 1 partition
        # every consumer would read far past its slice, and the broker would serve ~100x the
        # data. Bounding the prefetch to the slice keeps both layouts at the same bytes served,
        # and the per-partition fetch size is split so a Fetch carries up to 640 KiB in both.
        mine = _client_partitions(index, partitions)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-" + uuid.uuid4().hex,
                      "enable.auto.commit": False, "fetch.queue.backoff.ms": 20,
                      "queued.min.messages": share, "max.partition.fetch.bytes": 655_360 // len(mine)})
        c.list_topics(topic, timeout=30)
        ready.wait()
        go.wait()
        start = index * share if partitions == 1 else 0
        c.assign([TopicPartition(topic, p, start) for p in mine])
        got = 0
        while got < share:
            batch = c.consume(num_messages=min(1000, share - got), timeout=30)
            if not batch:
                errors.append(f"consumer {index} stalled at {got}/{share}")
                break
            for m in batch:
                if m.error():
                    errors.append(str(m.error()))
                    continue
                got += 1
        ends.append(time.monotonic())
        c.close()

    target = produce if mode == "produce" else consume
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(first, first + count)]
    for t in threads:
        t.start()
    ready.wait()
    print("ready", flush=True)
    sys.stdin.readline()
    go.set()
    for t in threads:
        t.join(300)
    return {"end": max(ends) if ends else None, "finished": len(ends), "errors": errors[:5]}


def round_worker(bootstrap: str, topic: str, partitions: int, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of BATCH messages to every partition, each round flushed on its own."""
    from confluent_kafka import Producer

    value = _payload(SIZE)
    failed = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1000, "message.timeout.ms": 60_000})
    p.list_topics(topic, timeout=30)
    for _ in range(rounds):
        for part in range(partitions):
            for _ in range(BATCH):
                p.produce(topic, value, partition=part, on_delivery=delivered)
        p.flush(120)
    return {"failed": failed}


def worker(argv: list[str]) -> None:
    kind, *rest = argv
    if kind == "produce1":
        out = produce_one_by_one(rest[0], rest[1], int(rest[2]))
    elif kind == "fetch1":
        out = fetch_loop(rest[0], rest[1], int(rest[2]))
    elif kind in ("produce", "consume"):
        out = load_worker(kind, rest[0], rest[1], *map(int, rest[2:6]))  # type: ignore[arg-type]
    elif kind == "rounds":
        out = round_worker(rest[0], rest[1], int(rest[2]), int(rest[3]))
    else:
        raise SystemExit(f"unknown worker {kind}")
    out["hwm_kb"] = _status_kb("VmHWM")
    out["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(out), flush=True)


def _run(kind: str, *args: Any, timeout: float = 3600) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"worker {kind} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- orchestration


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from hmbclient.net import Metadata, NetClient
    from hmbclient.protocol.api.base import ApiKey

    with NetClient(bootstrap) as c:
        c.call(
            c.bootstrap_ids[0],
            lambda v: v.build(ApiKey.CREATE_TOPICS, topics=[(topic, partitions, 1, [], [])], timeout_ms=60_000, validate_only=False),
        )
        Metadata(c).partitions_for(topic, 60_000)


def fds(pid: int) -> Counter[str]:
    """The process's open descriptors by kind: socket, .log, .index, pipe, other."""
    kinds: Counter[str] = Counter()
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            target = os.readlink(os.path.join(base, name))
        except OSError:
            continue
        if target.startswith("socket:"):
            kinds["socket"] += 1
        elif target.startswith(("pipe:", "anon_inode:")):
            kinds["pipe/anon"] += 1
        elif target.endswith(".log"):
            kinds[".log"] += 1
        elif target.endswith(".index"):
            kinds[".index"] += 1
        else:
            kinds["other"] += 1
    return kinds


def _fd_text(kinds: Counter[str]) -> str:
    parts = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return f"{sum(kinds.values()):6d} ({parts})"


def _peak_fds(pid: int, stop: threading.Event, peak: list[Counter[str]]) -> None:
    while not stop.wait(0.2):
        try:
            now = fds(pid)
        except OSError:
            return
        if sum(now.values()) > sum(peak[0].values()):
            peak[0] = now


def part1(bootstrap: str, sizes: list[int]) -> None:
    print(f"\n1. cost per message: hmbclient, {SIZE} B messages, 1 partition, one fresh process per run")
    print(f"{'workload':9s} {'messages':>11s} {'µs/msg':>8s} {'peak RSS MB':>12s} {'base MB':>8s} {'growth MB':>10s}")
    for n in sizes:
        topic = f"scale-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, 1)
        for kind, label in (("produce1", "produce"), ("fetch1", "fetch")):
            r = _run(kind, bootstrap, topic, n)
            peak = r["hwm_kb"] / 1024
            base = r["base_kb"] / 1024
            print(f"{label:9s} {n:11,d} {r['seconds'] / n * 1e6:8.2f} {peak:12.1f} {base:8.1f} {peak - base:10.1f}", flush=True)


def _load(bootstrap: str, pid: int, mode: str, topic: str, partitions: int, total: int) -> tuple[float, Counter[str], Counter[str], Counter[str]]:
    before = fds(pid)
    per = CONNECTIONS // WORKER_PROCESSES
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", mode, bootstrap, topic, str(partitions), str(total), str(i * per), str(per)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(WORKER_PROCESSES)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            ready, _, _ = select.select([p.stdout], [], [], 120)
            line = p.stdout.readline() if ready else ""
            if line.strip() != "ready":
                raise RuntimeError(f"{mode} worker not ready: {line!r} {p.stderr.read() if p.stderr else ''}")
        peak = [fds(pid)]
        stop = threading.Event()
        sampler = threading.Thread(target=_peak_fds, args=(pid, stop, peak), daemon=True)
        sampler.start()
        go = time.monotonic()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"{mode} worker failed:\n{out[-2000:]}\n{err[-2000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        stop.set()
        sampler.join()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    errs = [e for r in results for e in r["errors"]]
    if errs or sum(r["finished"] for r in results) != CONNECTIONS:
        raise RuntimeError(f"{mode} on {partitions} partition(s): {errs}")
    elapsed = max(r["end"] for r in results) - go
    time.sleep(1.0)  # closed clients' sockets leave the broker's table
    return total / elapsed, before, peak[0], fds(pid)


def part2(total: int) -> None:
    from hmbclient.broker import BrokerProcess

    print(f"\n2. {CONNECTIONS} confluent-kafka clients ({WORKER_PROCESSES} processes x {CONNECTIONS // WORKER_PROCESSES} threads), "
          f"{total:,} x {SIZE} B, acks=1: 1 partition vs {PARTITIONS:,}")
    rates: dict[tuple[str, int], float] = {}
    fd_rows: list[str] = []
    for partitions in (1, PARTITIONS):
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as d:
            broker = BrokerProcess(d, start_timeout_s=120)
            broker.start()
            try:
                assert broker.proc is not None
                pid = broker.proc.pid
                idle = fds(pid)
                topic = f"scale-{uuid.uuid4().hex[:8]}"
                t0 = time.perf_counter()
                create_topic(broker.bootstrap, topic, partitions)
                created = time.perf_counter() - t0
                fd_rows.append(f"  {partitions:5,d} partition(s): idle broker {_fd_text(idle)}")
                fd_rows.append(f"  {'':18s} topic created {_fd_text(fds(pid))}  (CreateTopics took {created:.2f} s)")
                for mode in ("produce", "consume"):
                    rate, before, peak, after = _load(broker.bootstrap, pid, mode, topic, partitions, total)
                    rates[(mode, partitions)] = rate
                    print(f"  {partitions:5,d} partition(s) {mode:8s} {rate:10,.0f} msg/s", flush=True)
                    fd_rows.append(f"  {'':18s} {mode:8s} before {_fd_text(before)}")
                    fd_rows.append(f"  {'':18s} {mode:8s} peak   {_fd_text(peak)}")
                    fd_rows.append(f"  {'':18s} {mode:8s} after  {_fd_text(after)}")
            finally:
                broker.terminate()
    print(f"{'workload':9s} {'1 partition':>14s} {f'{PARTITIONS:,} partitions':>17s} {'ratio':>7s}")
    for mode in ("produce", "consume"):
        one, many = rates[(mode, 1)], rates[(mode, PARTITIONS)]
        print(f"{mode:9s} {one:10,.0f} m/s {many:13,.0f} m/s {many / one:7.2f}")
    print("broker open file descriptors:")
    for row in fd_rows:
        print(row)


def _segments(log_dir: str, topic: str) -> list[int]:
    counts = []
    for entry in os.listdir(log_dir):
        if entry.startswith(topic + "-"):
            counts.append(sum(1 for f in os.listdir(os.path.join(log_dir, entry)) if f.endswith(".log")))
    return counts


def part3() -> None:
    from hmbclient.broker import BrokerProcess

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"\n3. startup with {PARTITIONS:,} partitions on disk (log.segment.bytes={TINY_SEGMENT_BYTES}, "
          f"one segment per round; RLIMIT_NOFILE soft {soft}, hard {hard})")
    print(f"{'segments/partition':>18s} {'segments':>9s} {'shutdown':>9s} {'start s':>8s}  broker fds after start")
    with tempfile.TemporaryDirectory(prefix="bench-scale-start-") as d:
        broker = BrokerProcess(d, start_timeout_s=600, log_segment_bytes=TINY_SEGMENT_BYTES, log_index_interval_bytes=TINY_SEGMENT_BYTES // 2)
        broker.start()
        topic = f"scale-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        done = 0
        try:
            for target in CHECKPOINTS:
                assert broker.proc is not None
                stop, peak = threading.Event(), [Counter[str]()]
                sampler = threading.Thread(target=_peak_fds, args=(broker.proc.pid, stop, peak), daemon=True)
                sampler.start()
                try:
                    r = _run("rounds", broker.bootstrap, topic, PARTITIONS, target - done, timeout=600)
                    note = f"  ({r['failed']:,} messages not delivered while building)" if r["failed"] else ""
                except RuntimeError as e:
                    note = f"  (building failed: {str(e).strip().splitlines()[-1][:200]})"
                finally:
                    stop.set()
                    sampler.join()
                print(f"{target:18d} {'':9s} {'building':>9s} {'':8s}  {_fd_text(peak[0])}  (peak while appending)", flush=True)
                done = target
                failed = False
                for how in ("unclean", "clean"):
                    if how == "unclean":
                        broker.kill()
                    else:
                        broker.terminate(timeout_s=60)
                    counts = _segments(d, topic)
                    t0 = time.perf_counter()
                    try:
                        broker.start()
                    except Exception as e:  # the point is to report how it fails, not to stop
                        lines = [line for line in str(e).splitlines() if line.strip()]
                        why = next((line for line in reversed(lines) if "cannot start" in line), lines[-1] if lines else "")
                        print(f"{target:18d} {sum(counts):9,d} {how:>9s} {'failed':>8s}  after {time.perf_counter() - t0:.1f} s:{note}")
                        print(f"{'':20s}{why[why.find('hmb broker'):][:240]}")
                        failed = True
                        break
                    started = time.perf_counter() - t0
                    assert broker.proc is not None
                    spread = f"min {min(counts)} max {max(counts)}" if counts else "none"
                    print(f"{target:18d} {sum(counts):9,d} {how:>9s} {started:8.2f}  {_fd_text(fds(broker.proc.pid))}  [per partition {spread}]{note}", flush=True)
                if failed:
                    break
        finally:
            broker.terminate(timeout_s=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="part 1 also at 10^7 messages")
    parser.add_argument("--total", type=int, default=2_000_000, help="messages in part 2 (a multiple of 1,000)")
    parser.add_argument("--only", type=int, choices=(1, 2, 3), help="run one part only")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    started = time.perf_counter()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    if args.only in (None, 1):
        from hmbclient.broker import BrokerProcess

        sizes = [10**4, 10**5, 10**6] + ([10**7] if args.full else [])
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as d, BrokerProcess(d, start_timeout_s=120) as broker:
            part1(broker.bootstrap, sizes)
    if args.only in (None, 2):
        part2(args.total)
    if args.only in (None, 3):
        part3()
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
