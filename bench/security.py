"""Throughput over TLS and SASL_SSL against plaintext, for hmbclient and confluent-kafka.

    .venv/bin/python bench/security.py                      # everything, 5 rounds (1-2 minutes)
    .venv/bin/python bench/security.py --rounds 1 --clients hmbclient --workloads produce
    .venv/bin/python bench/security.py --worker '{"client": ...}'   # one measurement

One embedded broker (``python -m hmbclient.broker`` in a child process) with three listeners on
127.0.0.1: PLAINTEXT, SSL (server certificate only) and SASL_SSL with SCRAM-SHA-512. The CA,
the broker's certificate (for 127.0.0.1 and localhost) and the SCRAM credentials are made at
run time in a temporary directory that is removed at the end; the broker is stopped by its pid.

Workloads, per client and listener: produce N messages of S bytes (100,000 x 100 B and
20,000 x 1,000 B; null keys, one partition, acks=1, linger 5 ms) with hmbclient's async
Producer or confluent-kafka's Producer and time until every one is acknowledged; consume them
back from offset 0 (hmbclient's SimpleConsumer, confluent-kafka's Consumer) and time until the
last one is in hand. Every consumer of one size reads the same topic, filled once over
PLAINTEXT, so only the transport differs between listeners. The timed part starts after each
client has fetched metadata over its listener, so the first TLS handshake and SASL exchange of
the bootstrap connection are outside it; connections a client opens later (to the partition
leader) are inside it, as they are in real use.

confluent-kafka's consumer needs a group.id, and librdkafka looks up the group coordinator on
assign() and again about every second. The embedded broker answers FindCoordinator (as
Metadata) with its address on the listener asked, so no lookup sends librdkafka to another
port; should a fetch still stall, each run prints its longest wait for a batch, runs with a
wait over STALL_S are counted as stalled, and the confluent consume rows are shown again over
the runs without a stall. The confluent consume clock starts at the first message (the time to
it is printed per run).

Every measurement runs in a fresh Python process; rounds interleave listeners and clients (the
order rotates each round) so drift hits everyone alike. The table shows medians in msg/s and,
per client, the ratios SSL/PLAINTEXT and SASL_SSL/PLAINTEXT (1.00x: security costs nothing;
below 1: slower). Not a test: nothing here asserts a speed.
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
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]

CLIENTS = ["hmbclient", "confluent"]
LISTENERS = ["PLAINTEXT", "SSL", "SASL_SSL"]
SIZES = {100: 100_000, 1000: 20_000}  # message size in bytes -> messages per measurement
USER = "bench"
PASSWORD = "bench-secret-pw"  # a throwaway credential of a broker that lives for one run
MECHANISM = "SCRAM-SHA-512"
# A wait this long for one batch of a consumer whose data is all on the broker is a stall, not
# throughput (at the slowest rates seen here a 10,000-message batch takes about 100 ms).
STALL_S = 0.3


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


def _payload(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def produce_hmbclient(bootstrap: str, topic: str, n: int, size: int, sec: dict[str, Any]) -> float:
    from hmbclient import Producer, ProducerData

    value = _payload(size)
    producer = Producer(metadata_broker_list=bootstrap, producer_type="async", queue_buffering_max_ms=5, **sec)
    producer.partitions_for(topic)  # metadata (and the bootstrap handshake) outside the timed part
    t0 = time.perf_counter()
    send = producer.send
    last: Any = None
    for _ in range(n):
        last = send(ProducerData(topic, None, [value]))
    producer.flush()
    elapsed = time.perf_counter() - t0
    assert last is not None, "nothing sent"
    last[0].result(30)  # raises if the last send failed
    producer.close()
    return elapsed


def produce_confluent(bootstrap: str, topic: str, n: int, size: int, sec: dict[str, Any]) -> float:
    from confluent_kafka import Producer as CProducer

    value = _payload(size)
    failed: list[Any] = []
    producer = CProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                          "queue.buffering.max.messages": 1_000_000, **confluent_security(sec)})
    producer.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    produce = producer.produce

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    for i in range(n):
        try:
            produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            produce(topic, value, on_delivery=on_delivery)
        if i % 10000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    elapsed = time.perf_counter() - t0
    assert left == 0 and not failed, (left, failed[:3])
    return elapsed


def consume_hmbclient(bootstrap: str, topic: str, n: int, sec: dict[str, Any]) -> float:
    from hmbclient import FetchRequest, SimpleConsumer

    host, port = bootstrap.rsplit(":", 1)
    consumer = SimpleConsumer(host, int(port), so_timeout_ms=30_000, buffer_size=-1, **sec)
    consumer.get_offsets_before(topic, 0, -2, 1)  # connect (and handshake) outside the timed part
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


def consume_confluent(bootstrap: str, topic: str, n: int, sec: dict[str, Any]) -> tuple[float, float, float]:
    """Returns (seconds for n messages at the rate after the first one, seconds to the first
    message after assign(), the longest wait for one batch after it)."""
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition

    # fetch.queue.backoff.ms: see bench/clients.py (librdkafka's 1 s pause once its queue is full)
    consumer = CConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                          "enable.auto.commit": False, "fetch.queue.backoff.ms": 20, **confluent_security(sec)})
    consumer.list_topics(topic, timeout=10)
    t_assign = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + 120
    got = 0
    total = 0
    # The clock starts at the first message: the coordinator lookup on assign() stalls the
    # first fetch on a TLS listener every time (module docstring); it is reported apart.
    while got == 0:
        assert time.monotonic() < deadline, "no message"
        for message in consumer.consume(num_messages=1, timeout=1.0):
            if not message.error():
                total += len(message.value())  # type: ignore[arg-type]
                got += 1
    t0 = before = time.perf_counter()
    longest = 0.0
    while got < n:
        assert time.monotonic() < deadline, f"only {got} of {n} messages"
        # Never ask for more than is left: consume() waits out its timeout for a short batch.
        for message in consumer.consume(num_messages=min(10_000, n - got), timeout=1.0):
            if message.error():
                continue
            total += len(message.value())  # type: ignore[arg-type]
            got += 1
        now = time.perf_counter()
        longest, before = max(longest, now - before), now
    elapsed = time.perf_counter() - t0
    consumer.close()
    return elapsed * n / max(1, n - 1), t0 - t_assign, longest


def worker(spec: dict[str, Any]) -> None:
    """One measurement, described by a JSON object; prints ``{"seconds": ...}``."""
    client, workload = spec["client"], spec["workload"]
    bootstrap, topic, n, size, sec = spec["bootstrap"], spec["topic"], spec["n"], spec["size"], spec["security"]
    first = longest = None
    if workload == "produce":
        fn = produce_hmbclient if client == "hmbclient" else produce_confluent
        elapsed = fn(bootstrap, topic, n, size, sec)
    elif client == "hmbclient":
        elapsed = consume_hmbclient(bootstrap, topic, n, sec)
    else:
        elapsed, first, longest = consume_confluent(bootstrap, topic, n, sec)
    print(json.dumps({"seconds": elapsed, "first_s": first, "longest_wait_s": longest}))


def run_worker(spec: dict[str, Any], timeout: float = 300) -> dict[str, Any] | None:
    """Run one measurement in a fresh process: its ``{"seconds", "first_s", "longest_wait_s"}``, or None."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    label = f"{spec['client']} {spec['workload']} {spec['size']}B over {spec['security']['security_protocol']}"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {label}: timed out", file=sys.stderr)
        return None
    if out.returncode != 0:
        print(f"  {label} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return None
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

    def start(self, timeout_s: float = 30.0) -> SecureBroker:
        from hmbclient.broker.runner import READY_PREFIX
        from hmbclient.children import preexec_for_current_thread

        log_path = os.path.join(self.workdir, "broker.out")
        cmd = [sys.executable, "-m", "hmbclient.broker", "--host", "127.0.0.1", "--port", "0",
               "--log-dir", os.path.join(self.workdir, "data")]
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
    results: dict[tuple[str, int, str, str], list[float]] = {}
    smooth: dict[tuple[str, int, str, str], list[float]] = {}  # confluent consume runs without a stall
    stalled: dict[tuple[str, int, str, str], int] = {}
    workdir = tempfile.mkdtemp(prefix="bench-security-")
    broker = SecureBroker(workdir)
    started = time.monotonic()
    try:
        broker.start()
        plain = broker.bootstrap["PLAINTEXT"]
        print(f"broker pid {broker.proc.pid if broker.proc else '?'}: " + ", ".join(f"{p} {a}" for p, a in broker.bootstrap.items()), flush=True)
        consume_topics: dict[int, str] = {}
        if "consume" in workloads:
            for size in sizes:
                topic = consume_topics[size] = f"sec-c{size}-{uuid.uuid4().hex[:6]}"
                create_topic(plain, topic)
                spec = {"client": "confluent", "workload": "produce", "bootstrap": plain, "topic": topic, "n": counts[size],
                        "size": size, "security": security_for("PLAINTEXT", broker.pki.ca)}
                if run_worker(spec) is None and run_worker({**spec, "client": "hmbclient"}) is None:
                    raise RuntimeError(f"could not fill {topic}")
        for rnd in range(args.rounds):
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
                            spec = {"client": client, "workload": workload, "bootstrap": broker.bootstrap[listener], "topic": topic,
                                    "n": n, "size": size, "security": security_for(listener, broker.pki.ca)}
                            result = run_worker(spec)
                            if result is None:
                                continue
                            key = (workload, size, client, listener)
                            results.setdefault(key, []).append(result["seconds"])
                            wait = result["longest_wait_s"]
                            note = ""
                            if wait is not None:
                                note = f"  first message {result['first_s'] * 1000:,.0f} ms, longest batch wait {wait * 1000:,.0f} ms"
                                if wait > STALL_S:
                                    note += " (stalled)"
                                    stalled[key] = stalled.get(key, 0) + 1
                                else:
                                    smooth.setdefault(key, []).append(result["seconds"])
                            rate = n / result["seconds"]
                            print(f"[round {rnd + 1} {workload} {size}B {listener:9s}] {client:9s} {rate:>10,.0f} msg/s"
                                  f" {rate * size / 1e6:6.1f} MB/s{note}", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n{args.rounds} rounds in {time.monotonic() - started:.0f} s; medians in msg/s "
          f"(SASL_SSL: {MECHANISM}; TLS: ECDSA P-256 certificate, the ssl modules' default ciphers)")
    table(results, clients, workloads, sizes, listeners, counts)
    if stalled:
        print(f"\nconfluent consume runs with a batch wait over {STALL_S * 1000:.0f} ms (the FindCoordinator stall in the"
              " module docstring): " + ", ".join(f"{k[3]} {k[1]}B {v}/{len(results[k])}" for k, v in sorted(stalled.items())))
        print("the same rows over the runs without one:")
        table(smooth, ["confluent"], ["consume"], sizes, listeners, counts)


def table(results: dict[tuple[str, int, str, str], list[float]], clients: list[str], workloads: list[str], sizes: list[int],
          listeners: list[str], counts: dict[int, int]) -> None:
    """Median msg/s per listener and each secure listener's ratio to PLAINTEXT."""
    print(f"{'client':9s} {'workload':8s} {'size':>5s} " + " ".join(f"{lst:>10s}" for lst in listeners)
          + "  " + "  ".join(f"{lst + '/PT':>12s}" for lst in listeners if lst != "PLAINTEXT"))
    for client in clients:
        for workload in workloads:
            for size in sizes:
                rates = {lst: counts[size] / statistics.median(results[(workload, size, client, lst)])
                         for lst in listeners if results.get((workload, size, client, lst))}
                row = f"{client:9s} {workload:8s} {size:>5d} " + " ".join(f"{rates.get(lst, 0):>10,.0f}" for lst in listeners)
                for lst in listeners:
                    if lst == "PLAINTEXT":
                        continue
                    ratio = f"{rates[lst] / rates['PLAINTEXT']:.2f}x" if lst in rates and "PLAINTEXT" in rates else "-"
                    row += f"  {ratio:>12s}"
                print(row)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
