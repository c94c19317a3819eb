"""Throughput over TLS and SASL_SSL against plaintext, for hmbclient and confluent-kafka.

    .venv/bin/python bench/security.py                      # everything, 5 rounds (10-20 minutes)
    .venv/bin/python bench/security.py --scale 0.1 --rounds 2   # a quick look
    .venv/bin/python bench/security.py --rounds 1 --clients hmbclient --workloads produce
    .venv/bin/python bench/security.py --worker '{"client": ...}'   # one measurement

One embedded broker (``python -m hmbclient.broker`` in a child process) with three listeners on
127.0.0.1: PLAINTEXT, SSL (server certificate only) and SASL_SSL with SCRAM-SHA-512. The CA,
the broker's certificate (for 127.0.0.1 and localhost) and the SCRAM credentials are made at
run time in a temporary directory that is removed at the end; the broker is stopped by its pid.

Workloads, per client and listener: produce N messages of S bytes (1,000,000 x 100 B and
1,000,000 x 1,000 B by default; null keys, one partition, acks=1, linger 5 ms) with hmbclient's
async Producer or confluent-kafka's Producer and time until every one is acknowledged; consume N
messages (hmbclient's SimpleConsumer, confluent-kafka's Consumer) and time until the last one is
in hand. Every consumer of one size reads the same topic, filled once per round over PLAINTEXT,
so only the transport differs between listeners.

Readiness rule (bench/_common.py), the same for both clients and every listener: each client is
connected to the partition leader over its listener -- TLS handshake and SASL exchange included
-- before its clock starts. A producer first has one warm-up message (offset 0) acknowledged and
times offsets 1..N; a consumer first hands out the message at offset 0 (not counted) and times
offsets 1..N, so a consume topic holds N + 1 messages. Checked, or the run stops: the consume
topic ends at N + 1 before a consume is timed; every producer's flush left nothing queued, its
last offset is N and its topic ends at N + 1. The time from creating a consumer to its first
message (connections, handshakes, librdkafka's coordinator lookup) is printed per run, outside
the figure.

confluent-kafka's consumer needs a group.id, and librdkafka looks up the group coordinator on
assign() and again about every second. The embedded broker answers FindCoordinator (as
Metadata) with its address on the listener asked, so no lookup sends librdkafka to another
port; should a fetch still stall, each run prints its longest wait for a batch, runs with a
wait over STALL_S are counted as stalled, and the confluent consume rows are shown again over
the runs without a stall.

Each round starts a fresh broker (new process, new data directory, removed after the round:
the embedded broker has no DeleteTopics, and a round writes about 7 x N x S bytes per size).
Every measurement runs in a fresh Python process; rounds interleave listeners and clients (the
order rotates each round) so drift hits everyone alike. The table shows medians in msg/s and,
per client, the ratios SSL/PLAINTEXT and SASL_SSL/PLAINTEXT (1.00x: security costs nothing;
below 1: slower): the median of the per-round ratios with the lowest and highest beside it. The
machine's load (/proc/loadavg) is printed at the start, every round and the end. Not a test:
nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

# Run as a script, this directory comes first on sys.path, where a script named like a package
# would shadow the package hmbclient imports; the repository root stays reachable through the
# installed project (or PYTHONPATH).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE] + [_HERE]  # last: bench/_common.py

from _common import (  # noqa: E402
    FETCH_BYTES,
    BenchError,
    confluent_flush,
    format_ratio,
    loadavg,
    payload,
    ratio_summary,
    require_end_offset,
    warm_confluent_consumer,
    warm_confluent_producer,
    warm_hmbclient_consumer,
    warm_hmbclient_producer,
)

CLIENTS = ["hmbclient", "confluent"]
LISTENERS = ["PLAINTEXT", "SSL", "SASL_SSL"]
SIZES = {100: 1_000_000, 1000: 1_000_000}  # message size in bytes -> messages per measurement
USER = "bench"
PASSWORD = "bench-secret-pw"  # a throwaway credential of a broker that lives for one run
MECHANISM = "SCRAM-SHA-512"
# A wait this long for one batch of a consumer whose data is all on the broker is a stall, not
# throughput (at the slowest rates seen here a 10,000-message batch takes about 100 ms).
STALL_S = 0.3
FLUSH_TIMEOUT_S = 600.0


# --------------------------------------------------------------------------- security settings


def security_for(protocol: str, ca: str) -> dict[str, str]:
    """The client-side settings for a listener, in hmbclient's names."""
    sec: dict[str, str] = {"security_protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        sec["ssl_cafile"] = ca
    if protocol.startswith("SASL_"):
        sec.update(sasl_mechanism=MECHANISM, sasl_username=USER, sasl_password=PASSWORD)
    return sec


def confluent_security(sec: dict[str, Any]) -> dict[str, str]:
    """hmbclient's security settings as librdkafka properties."""
    names = {"security_protocol": "security.protocol", "ssl_cafile": "ssl.ca.location", "sasl_mechanism": "sasl.mechanism",
             "sasl_username": "sasl.username", "sasl_password": "sasl.password"}
    return {names[k]: v for k, v in sec.items()}


# --------------------------------------------------------------------------- workers


def produce_hmbclient(bootstrap: str, topic: str, n: int, size: int, sec: dict[str, Any]) -> float:
    from hmbclient import Producer, ProducerData

    value = payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, **sec)
    warm_hmbclient_producer(producer, topic, value)  # leader connected, handshakes done
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    producer.flush(FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert last is not None, "nothing sent"
    offset = last[0].result(60).offset  # raises if the last send failed
    assert offset == n, offset
    producer.close()
    return elapsed


def produce_confluent(bootstrap: str, topic: str, n: int, size: int, sec: dict[str, Any]) -> float:
    from confluent_kafka import Producer as CProducer

    value = payload(size)
    failed: list[Any] = []
    last: list[int] = []
    producer = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                          "queue.buffering.max.messages": 1_000_000, **confluent_security(sec)})
    warm_confluent_producer(producer, topic, value)  # leader connected, handshakes done
    t0 = time.perf_counter()
    produce = producer.produce

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            last[:] = [msg.offset()]

    for i in range(n):
        try:
            produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            produce(topic, value, on_delivery=on_delivery)
        if i % 10000 == 0:
            producer.poll(0)
    confluent_flush(producer, FLUSH_TIMEOUT_S)
    elapsed = time.perf_counter() - t0
    assert not failed and last == [n], (failed[:3], last)
    return elapsed


def consume_hmbclient(bootstrap: str, topic: str, n: int, sec: dict[str, Any]) -> tuple[float, float, float]:
    """Returns (seconds for offsets 1..n, seconds from creating the consumer to the message at
    offset 0, the longest wait for one fetch after it)."""
    from hmbclient import FetchRequest, SimpleConsumer

    host, port = bootstrap.rsplit(":", 1)
    t_create = time.perf_counter()
    consumer = SimpleConsumer(host, int(port), so_timeout_ms=30_000, buffer_size=-1, **sec)
    rest = warm_hmbclient_consumer(consumer, topic, 0, FETCH_BYTES)
    t0 = before = time.perf_counter()
    offset = 1
    got = 0
    total = 0
    longest = 0.0
    for message in rest:
        total += len(message.value)  # type: ignore[arg-type]
        got += 1
        offset = message.offset + 1
    fetch = consumer.fetch
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
    return elapsed, t0 - t_create, longest


def consume_confluent(bootstrap: str, topic: str, n: int, sec: dict[str, Any]) -> tuple[float, float, float]:
    """Returns (seconds for offsets 1..n, seconds from creating the consumer to the message at
    offset 0, the longest wait for one batch after it)."""
    from confluent_kafka import Consumer as CConsumer

    # fetch.queue.backoff.ms: see bench/clients.py (librdkafka's 1 s pause once its queue is full)
    t_create = time.perf_counter()
    consumer = CConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                          "enable.auto.commit": False, "fetch.queue.backoff.ms": 20, **confluent_security(sec)})
    warm_confluent_consumer(consumer, topic)
    t0 = before = time.perf_counter()
    deadline = time.monotonic() + 300
    got = 0
    total = 0
    last = 0
    longest = 0.0
    while got < n:
        assert time.monotonic() < deadline, f"only {got} of {n} messages"
        # Never ask for more than is left: consume() waits out its timeout for a short batch.
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
    return elapsed, t0 - t_create, longest


def worker(spec: dict[str, Any]) -> None:
    """One measurement, described by a JSON object; prints ``{"seconds": ...}``."""
    client, workload = spec["client"], spec["workload"]
    bootstrap, topic, n, size, sec = spec["bootstrap"], spec["topic"], spec["n"], spec["size"], spec["security"]
    first = longest = None
    if workload == "produce":
        fn = produce_hmbclient if client == "hmbclient" else produce_confluent
        elapsed = fn(bootstrap, topic, n, size, sec)
    else:
        consume = consume_hmbclient if client == "hmbclient" else consume_confluent
        elapsed, first, longest = consume(bootstrap, topic, n, sec)
    print(json.dumps({"seconds": elapsed, "first_s": first, "longest_wait_s": longest}))


def run_worker(spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run one measurement in a fresh process: its ``{"seconds", "first_s", "longest_wait_s"}``;
    BenchError if it fails (a missing run would leave a ratio on fewer rounds than it says)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    label = f"{spec['client']} {spec['workload']} {spec['size']}B over {spec['security']['security_protocol']}"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{label}: timed out after {timeout:.0f} s") from e
    if out.returncode != 0:
        raise BenchError(f"{label} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --------------------------------------------------------------------------- certificates, broker


class SecureBroker:
    """``python -m hmbclient.broker`` with PLAINTEXT, SSL and SASL_SSL listeners on ephemeral
    ports of 127.0.0.1; ``bootstrap[protocol]`` once started. Stopped by pid (SIGTERM, then
    SIGKILL after 10 s)."""

    def __init__(self, workdir: str) -> None:
        from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
        from hmbclient.testing.pki import make_pki

        self.workdir = workdir
        self.pki = make_pki(workdir)  # the tests' certificates
        self.creds = os.path.join(workdir, "credentials.json")
        FileCredentialStore(self.creds).put(USER, {MECHANISM: make_credential(MECHANISM, PASSWORD)})
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap: dict[str, str] = {}

    def start(self, data_dir: str, timeout_s: float = 30.0) -> SecureBroker:
        """Start on ``data_dir`` (the caller removes it after stop())."""
        from hmbclient.broker.runner import READY_PREFIX
        from hmbclient.children import preexec_for_current_thread

        log_path = os.path.join(self.workdir, "broker.out")
        self.bootstrap = {}
        cmd = [sys.executable, "-m", "hmbclient.broker", "--host", "127.0.0.1", "--port", "0",
               "--log-dir", data_dir]
        for protocol in LISTENERS:
            cmd += ["--listener", f"{protocol}://127.0.0.1:0"]
        cmd += ["--set", f"ssl.certfile={self.pki.server_cert}", "--set", f"ssl.keyfile={self.pki.server_key}",
                "--set", f"sasl.credentials.file={self.creds}"]
        # Output to a file, not a pipe nobody drains: a chatty broker must never block on stdout.
        with open(log_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         preexec_fn=preexec_for_current_thread())  # no orphan if we are killed
        deadline = time.monotonic() + timeout_s
        while True:
            with open(log_path, errors="replace") as f:
                ready = [line for line in f if line.startswith(READY_PREFIX) and " listeners=" in line]
            if ready:
                for item in ready[0].split(" listeners=", 1)[1].split()[0].split(","):
                    protocol, address = item.split("://", 1)
                    self.bootstrap[protocol] = address
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(log_path, errors="replace") as f:
                    raise RuntimeError(f"broker did not start:\n{f.read()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def create_topic(bootstrap: str, topic: str) -> None:
    """One partition, replication 1, over the PLAINTEXT listener."""
    from hmbclient.net import Metadata, NetClient
    from hmbclient.protocol.api.base import ApiKey

    with NetClient(bootstrap) as c:
        c.call(
            c.bootstrap_ids[0],
            lambda v: v.build(ApiKey.CREATE_TOPICS, topics=[(topic, 1, 1, [], [])], timeout_ms=10_000, validate_only=False),
        )
        Metadata(c).partitions_for(topic, 10_000)


# --------------------------------------------------------------------------- orchestration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", metavar="JSON", help="run one measurement (internal)")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--listeners", default=",".join(LISTENERS))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help=f"message sizes, of {sorted(SIZES)}")
    parser.add_argument("--workloads", default="produce,consume")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every message count (0.1: a quick look)")
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    clients, listeners = args.clients.split(","), args.listeners.split(",")
    sizes, workloads = [int(s) for s in args.sizes.split(",")], args.workloads.split(",")
    counts = {size: max(1, int(SIZES[size] * args.scale)) for size in sizes}
    results: Results = {}
    smooth: Results = {}  # confluent consume runs without a stall
    stalled: dict[tuple[str, int, str, str], int] = {}
    workdir = tempfile.mkdtemp(prefix="bench-security-")
    broker = SecureBroker(workdir)
    started = time.monotonic()
    load_start = loadavg()
    print(f"load at start: {load_start} ({os.cpu_count()} cores)", flush=True)
    failure: BenchError | None = None
    try:
        for rnd in range(args.rounds):
            data_dir = tempfile.mkdtemp(prefix="data-", dir=workdir)
            broker.start(data_dir)
            try:
                run_round(broker, rnd, args, clients, listeners, sizes, workloads, counts, results, smooth, stalled)
            finally:
                broker.stop()
                shutil.rmtree(data_dir, ignore_errors=True)
    except BenchError as e:
        failure = e
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    load_end = loadavg()
    print(f"\n{args.rounds} rounds in {time.monotonic() - started:.0f} s; medians in msg/s; ratios: median of the per-round"
          f" ratios (lowest-highest) (SASL_SSL: {MECHANISM}; TLS: ECDSA P-256 certificate, the ssl modules' default ciphers)")
    table(results, clients, workloads, sizes, listeners, counts)
    if stalled:
        print(f"\nconfluent consume runs with a batch wait over {STALL_S * 1000:.0f} ms (the FindCoordinator stall in the"
              " module docstring): " + ", ".join(f"{k[3]} {k[1]}B {v}/{len(results[k])}" for k, v in sorted(stalled.items())))
        print("the same rows over the runs without one:")
        table(smooth, ["confluent"], ["consume"], sizes, listeners, counts)
    print(f"load at start: {load_start}; at end: {load_end} ({os.cpu_count()} cores)")
    if failure is not None:
        raise SystemExit(f"\nRUN STOPPED: {failure}")


Results = dict[tuple[str, int, str, str], dict[int, float]]  # (workload, size, client, listener) -> round -> seconds


def run_round(broker: SecureBroker, rnd: int, args: argparse.Namespace, clients: list[str], listeners: list[str], sizes: list[int],
              workloads: list[str], counts: dict[int, int], results: Results, smooth: Results,
              stalled: dict[tuple[str, int, str, str], int]) -> None:
    plain = broker.bootstrap["PLAINTEXT"]
    print(f"[round {rnd + 1}] broker pid {broker.proc.pid if broker.proc else '?'}: "
          + ", ".join(f"{p} {a}" for p, a in broker.bootstrap.items()) + f"; load {loadavg()}", flush=True)
    plain_sec = security_for("PLAINTEXT", broker.pki.ca)
    consume_topics: dict[int, str] = {}
    if "consume" in workloads:
        for size in sizes:
            topic = consume_topics[size] = f"sec-c{size}-{uuid.uuid4().hex[:6]}"
            create_topic(plain, topic)
            run_worker({"client": "confluent", "workload": "produce", "bootstrap": plain, "topic": topic, "n": counts[size],
                        "size": size, "security": plain_sec})
            require_end_offset(plain, topic, counts[size] + 1, what="consume topic filled")
    c_order = clients[rnd % len(clients):] + clients[: rnd % len(clients)]
    l_order = listeners[rnd % len(listeners):] + listeners[: rnd % len(listeners)]
    for size in sizes:
        n = counts[size]
        for workload in workloads:
            for listener in l_order:
                for client in c_order:
                    if workload == "produce":
                        topic = f"sec-p{size}-{uuid.uuid4().hex[:8]}"
                        create_topic(plain, topic)
                    else:
                        topic = consume_topics[size]
                        require_end_offset(plain, topic, n + 1, what="before timing the consume")
                    spec = {"client": client, "workload": workload, "bootstrap": broker.bootstrap[listener], "topic": topic,
                            "n": n, "size": size, "security": security_for(listener, broker.pki.ca)}
                    result = run_worker(spec)
                    if workload == "produce":
                        require_end_offset(plain, topic, n + 1, what=f"after {client}'s produce over {listener}")
                    key = (workload, size, client, listener)
                    results.setdefault(key, {})[rnd] = result["seconds"]
                    wait = result["longest_wait_s"]
                    note = ""
                    if wait is not None:
                        note = f"  first message {result['first_s'] * 1000:,.0f} ms, longest batch wait {wait * 1000:,.0f} ms"
                        if client == "confluent" and wait > STALL_S:
                            note += " (stalled)"
                            stalled[key] = stalled.get(key, 0) + 1
                        else:
                            smooth.setdefault(key, {})[rnd] = result["seconds"]
                    rate = n / result["seconds"]
                    print(f"[round {rnd + 1} {workload} {size}B {listener:9s}] {client:9s} {rate:>10,.0f} msg/s"
                          f" {rate * size / 1e6:6.1f} MB/s{note}", flush=True)


def table(results: Results, clients: list[str], workloads: list[str], sizes: list[int], listeners: list[str],
          counts: dict[int, int]) -> None:
    """Median msg/s per listener and each secure listener's ratio to PLAINTEXT (per-round ratios:
    median, lowest-highest)."""
    print(f"{'client':9s} {'workload':8s} {'size':>5s} " + " ".join(f"{lst:>10s}" for lst in listeners)
          + "  " + "  ".join(f"{lst + '/PT':>22s}" for lst in listeners if lst != "PLAINTEXT"))
    for client in clients:
        for workload in workloads:
            for size in sizes:
                rates = {lst: {r: counts[size] / s for r, s in results[(workload, size, client, lst)].items()}
                         for lst in listeners if results.get((workload, size, client, lst))}
                if not rates:
                    continue
                row = f"{client:9s} {workload:8s} {size:>5d} " + " ".join(
                    f"{statistics.median(rates[lst].values()) if lst in rates else 0:>10,.0f}" for lst in listeners)
                for lst in listeners:
                    if lst == "PLAINTEXT":
                        continue
                    ours, base = rates.get(lst, {}), rates.get("PLAINTEXT", {})
                    common = sorted(set(ours) & set(base))
                    row += f"  {format_ratio(ratio_summary([ours[r] for r in common], [base[r] for r in common])):>22s}"
                print(row)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
