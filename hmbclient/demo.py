"""``hmb demo`` (what ``make demo`` runs): the SDK end to end, checking the story it tells.

The story, on embedded servers (or on the servers given with ``--brokers`` and ``--zookeeper``):

1. Servers: a LocalZooKeeper and a 3-broker EmbeddedCluster in a temp dir.
2. The topic is created (12 partitions by default) and a ZooKeeper consumer group of two
   members, alpha and beta, settles on it.
3. The async batching Producer sends ``messages`` keyed messages at an even pace over
   ``seconds`` while the group consumes them as they arrive.
4. Once a third of the messages are produced, gamma joins: the group rebalances and gamma
   consumes its share of what follows.
5. Once two thirds are produced, alpha leaves: its partitions move to beta and gamma.
6. When every acknowledged message has been delivered, beta and gamma commit and leave.
7. Spark reads the topic back (one RDD partition per offset range, on local[2] executors, or
   on the executors of the Spark master given with ``--spark-master``), counts and sums it, and
   commits the ranges to a second group's ZooKeeper offsets.
8. The report; everything is shut down (no process is left behind).

Every step is checked. A failed check is a problem named after its step (``produce``,
``group``, ``delivery``, ``offsets``, ``spark``); the report lists them and ``hmb demo`` exits 1.
The checks: every message is acknowledged; at every moment the group settled, each partition
is owned by exactly one member; gamma consumes messages; alpha owns partitions when it leaves
and beta or gamma consume from each of them afterwards; every acknowledged message is delivered
to some member (at least once: a rebalance may redeliver); the committed offsets add up to the
messages produced; Spark counts every message and its sum of amounts is the expected one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["DEFAULT_MESSAGES", "DEFAULT_SECONDS", "DemoReport", "MemberReport", "run_demo"]

DEFAULT_MESSAGES = 100_000
#: How long production is spread over (the group's story happens meanwhile).
DEFAULT_SECONDS = 15.0
DEFAULT_PARTITIONS = 12
KEYS = 1000
#: Where the Spark step runs unless ``--spark-master`` says otherwise.
DEFAULT_SPARK_MASTER = "local[2]"
#: How long a group may take to settle after a join or a leave before that counts as a problem.
SETTLE_TIMEOUT_S = 30.0
#: How long the survivors may take to consume what is left once production ended.
CATCH_UP_TIMEOUT_S = 60.0
#: The producer sends what is due at this period (the pace, not a wait for a condition).
PACE_TICK_S = 0.02

#: The moments the group settles, in story order: the report's ownership columns.
AT_START, GAMMA_JOINED, ALPHA_LEFT = "at start", "gamma joined", "alpha left"
MOMENTS = (AT_START, GAMMA_JOINED, ALPHA_LEFT)


def _payload(i: int) -> bytes:
    """Message ``i``'s value: its id (to check delivery) and an amount (for Spark to sum)."""
    return b"%d:%d" % (i, i % 100)


def _message_id(value: bytes) -> int:
    return int(value.split(b":", 1)[0])


class _StoryBroken(Exception):
    """A step the rest of the story depends on failed; the message names the step."""


# --- the report ---------------------------------------------------------------------------------


@dataclass
class MemberReport:
    """What one group member did: ``owned`` maps each moment the group settled (``MOMENTS``)
    while it was a member to the partitions it owned then."""

    role: str
    messages: int = 0
    owned: dict[str, int] = field(default_factory=dict)


@dataclass
class DemoReport:
    topic: str = ""
    partitions: int = 0
    produce_seconds: float = 0.0
    produced: int = 0  # acknowledged by the brokers
    consumed_unique: int = 0
    consumed_total: int = 0  # deliveries, redeliveries after a rebalance included
    catch_up_seconds: float | None = None  # from the last send to the last message delivered
    members: dict[str, MemberReport] = field(default_factory=dict)
    alpha_left_owning: list[int] = field(default_factory=list)
    alpha_partitions_taken_by: dict[str, list[int]] = field(default_factory=dict)
    committed: int = 0
    spark_count: int | None = None
    spark_total: int | None = None
    spark_expected: int = 0
    spark_partitions: int = 0
    spark_seconds: float = 0.0
    spark_committed: int = 0
    spark_master: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, step: str, what: str) -> None:
        self.problems.append(f"{step}: {what}")

    def render(self) -> str:
        lines = ["", f"hmb demo report (topic {self.topic}, {self.partitions} partitions)"]
        lines += self._render_flow()
        lines += self._render_members()
        lines += self._render_spark()
        if self.ok:
            lines.append("  result: OK (every step of the story happened)")
        else:
            lines.append("  result: FAILED")
            lines += [f"    {p}" for p in self.problems]
        return "\n".join(lines) + "\n"

    def _render_flow(self) -> list[str]:
        caught_up = ("" if self.catch_up_seconds is None else
                     f"; the last one {self.catch_up_seconds:.2f} s after the last send")
        return [
            f"  produced  {self.produced:>9,} messages acknowledged, paced over {self.produce_seconds:.1f} s",
            f"  consumed  {self.consumed_unique:>9,} distinct messages ({self.consumed_total:,} deliveries,"
            f" {self.consumed_total - self.consumed_unique:,} redelivered after rebalances){caught_up}",
        ]

    def _render_members(self) -> list[str]:
        lines = [
            f"  {'group member':<42}{'messages':>10}   partitions owned once the group settled",
            f"  {'':<42}{'consumed':>10}   " + "".join(f"{m:>14}" for m in MOMENTS),
        ]
        for name, m in self.members.items():
            owned = "".join(f"{m.owned[t] if t in m.owned else '-':>14}" for t in MOMENTS)
            lines.append(f"    {name:<7}{m.role:<33}{m.messages:>10,}   {owned}")
        taken = ", ".join(f"{name} {len(ps)}" for name, ps in self.alpha_partitions_taken_by.items())
        moved = sum(len(ps) for ps in self.alpha_partitions_taken_by.values())
        lines.append(f"  alpha left owning {len(self.alpha_left_owning)} partitions;"
                     f" {moved} of them were consumed from afterwards by beta or gamma ({taken or 'none'})")
        lines.append(f"  offsets committed to ZooKeeper: {self.committed:,} (sum of next offsets)")
        return lines

    def _render_spark(self) -> list[str]:
        if self.spark_total is None:
            return ["  spark: skipped"]
        return [
            f"  spark: {self.spark_partitions} RDD partitions (one per offset range) on {self.spark_master}"
            f" in {self.spark_seconds:.2f} s:"
            f" {self.spark_count:,} messages, sum of amounts {self.spark_total:,} (expected {self.spark_expected:,});"
            f" ranges committed for group demo-spark: {self.spark_committed:,}"
        ]


# --- servers --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _servers(brokers: str | None, zookeeper: str | None, out: IO[str]) -> Iterator[tuple[str, str]]:
    if brokers and zookeeper:
        yield brokers, zookeeper
        return
    if brokers or zookeeper:
        raise ValueError("give both --brokers and --zookeeper, or neither (embedded servers)")
    from hmbclient.broker import EmbeddedCluster
    from hmbclient.testing import LocalZooKeeper

    with tempfile.TemporaryDirectory(prefix="hmb-demo-") as tmp:
        t0 = time.monotonic()
        with LocalZooKeeper(data_dir=os.path.join(tmp, "zookeeper")) as zk, EmbeddedCluster(
            brokers=3, zookeeper_connect=zk.connect, num_partitions=DEFAULT_PARTITIONS,
            log_dir=os.path.join(tmp, "logs"),
        ) as cluster:
            out.write(f"started ZooKeeper {zk.connect} and 3 brokers {cluster.bootstrap}"
                      f" in {time.monotonic() - t0:.1f} s\n")
            out.flush()
            yield cluster.bootstrap, zk.connect


# --- production -----------------------------------------------------------------------------------


class _PacedProducer:
    """Sends messages 0..n-1 (keyed ``user-<i % KEYS>``) at an even pace over ``seconds``,
    from a background thread, through one async batching Producer."""

    def __init__(self, producer: Any, topic: str, n: int, seconds: float,
                 on_sent: Callable[[int], None]) -> None:
        self._producer = producer
        self._topic = topic
        self._n = n
        self._seconds = max(seconds, 1e-3)
        self._on_sent = on_sent
        self._sent = 0
        self._done = False
        self._changed = threading.Condition()
        self._abort = threading.Event()
        self._futures: list[tuple[int, Future[Any]]] = []
        self.error: BaseException | None = None
        self.started_at = self.last_send_at = 0.0
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)

    def start(self) -> _PacedProducer:
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while self._sent < self._n and not self._abort.is_set():
                elapsed = time.monotonic() - self.started_at
                due = min(self._n, int(self._n * elapsed / self._seconds) + 1)
                if due > self._sent:
                    self._send(self._sent, due)
                    self.last_send_at = time.monotonic()
                    with self._changed:
                        sent, self._sent = self._sent, due
                        self._changed.notify_all()
                    self._on_sent(due - sent)
                self._abort.wait(PACE_TICK_S)
        except BaseException as e:  # reported by wait_sent/finish: the story stops there
            self.error = e
        finally:
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def _send(self, start: int, stop: int) -> None:
        from hmbclient import ProducerData

        # One ProducerData per key: the messages of a key share a partition.
        by_key: dict[bytes, list[int]] = {}
        for i in range(start, stop):
            by_key.setdefault(b"user-%d" % (i % KEYS), []).append(i)
        for key, ids in by_key.items():
            futures = self._producer.send(ProducerData(self._topic, key, [_payload(i) for i in ids]))
            self._futures.extend(zip(ids, futures, strict=True))

    def wait_sent(self, count: int, timeout: float) -> None:
        """Block until ``count`` messages are sent.

        Raises:
            _StoryBroken: production failed or stalled.
        """
        with self._changed:
            self._changed.wait_for(lambda: self._sent >= count or self._done, timeout)
            sent = self._sent
        if sent < count:
            raise _StoryBroken(f"produce: stopped after {sent:,} of {count:,} messages"
                               + (f" ({type(self.error).__name__}: {self.error})" if self.error else ""))

    def finish(self) -> tuple[set[int], int]:
        """Wait for the last send and every acknowledgement; returns (acknowledged ids, failures)."""
        self.wait_sent(self._n, timeout=self._seconds + 60)
        self._thread.join()
        self._producer.flush()
        acked: set[int] = set()
        for i, f in self._futures:
            if f.exception(timeout=60) is None:
                acked.add(i)
        return acked, len(self._futures) - len(acked)

    def abort(self) -> None:
        self._abort.set()
        self._thread.join(timeout=10)


# --- the consumer group ---------------------------------------------------------------------------


class _Deliveries:
    """Every message handed to any member, by message id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ids: set[int] = set()
        self.total = 0
        self.counts: dict[str, int] = {}
        # Once alpha has left: member -> partitions it consumed from since.
        self.after_alpha_left: dict[str, set[int]] = {}
        self._alpha_gone = False
        self._missing: set[int] | None = None
        self.complete = threading.Event()
        self.completed_at = 0.0

    def record(self, member: str, partition: int, value: bytes) -> None:
        i = _message_id(value)
        with self._lock:
            self.total += 1
            self.counts[member] = self.counts.get(member, 0) + 1
            self.ids.add(i)
            if self._alpha_gone:
                self.after_alpha_left.setdefault(member, set()).add(partition)
            if self._missing is not None:
                self._missing.discard(i)
                self._check_complete()

    def alpha_left(self) -> None:
        """From now on, record which partitions each (surviving) member consumes from."""
        with self._lock:
            self._alpha_gone = True

    def expect(self, ids: set[int]) -> None:
        """``complete`` is set once every one of ``ids`` has been delivered."""
        with self._lock:
            self._missing = ids - self.ids
            self._check_complete()

    def _check_complete(self) -> None:
        if not self._missing and not self.complete.is_set():
            self.completed_at = time.monotonic()
            self.complete.set()


class _Member:
    """One group member: a ConsumerConnector with one stream, drained by its own thread."""

    def __init__(self, name: str, props: dict[str, Any], topic: str, deliveries: _Deliveries) -> None:
        from hmbclient import Consumer

        self.name = name
        self._topic = topic
        self._deliveries = deliveries
        self.error: BaseException | None = None
        self.connector = Consumer.create(props)
        (self._stream,) = self.connector.create_message_streams({topic: 1})[topic]
        self._thread = threading.Thread(target=self._drain, name=f"demo-{name}", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        from hmbclient.errors import ConsumerTimeoutError

        try:
            while True:
                try:
                    for mam in self._stream:
                        self._deliveries.record(self.name, mam.partition, mam.message)
                    return  # the iteration ends for good when the connector shuts down
                except ConsumerTimeoutError:
                    continue  # idle for consumer.timeout.ms: production may still be paced
        except BaseException as e:  # reported as a group problem
            self.error = e

    def owned(self) -> list[int]:
        return sorted(p for (t, p) in self.connector.owned_partitions() if t == self._topic)

    def leave(self) -> None:
        """Commit what was handed out, release the partitions, leave the group."""
        self.connector.shutdown()
        self._thread.join(timeout=10)


class _Story:
    """Directs the group's story against the paced production and records it in the report."""

    def __init__(self, bootstrap: str, zk: str, topic: str, report: DemoReport, out: IO[str]) -> None:
        self.report = report
        self.topic = topic
        self.out = out
        self.deliveries = _Deliveries()
        self.members: dict[str, _Member] = {}
        self.group = f"demo-{uuid.uuid4().hex[:6]}"
        self.props: dict[str, Any] = {
            "zookeeper.connect": zk, "group.id": self.group,
            "auto.offset.reset": "smallest", "consumer.timeout.ms": 500,
            "auto.commit.interval.ms": 1000, "metadata.broker.list": bootstrap,
        }
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(f"[{time.monotonic() - self.t0:5.1f} s] {text}", file=self.out)

    def join(self, name: str, role: str) -> None:
        self.report.members[name] = MemberReport(role=role)
        self.members[name] = _Member(name, self.props, self.topic, self.deliveries)

    def settle(self, moment: str) -> None:
        """Wait until every member owns its share, then record who owns what at ``moment``."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        for name, m in self.members.items():
            if not m.connector.await_rebalance(timeout=max(0.0, deadline - time.monotonic())):
                self.report.problem("group", f"{name} did not settle within {SETTLE_TIMEOUT_S:g} s ({moment})")
        owned = {name: m.owned() for name, m in self.members.items()}
        for name, ps in owned.items():
            self.report.members[name].owned[moment] = len(ps)
        self.say(f"group settled ({moment}): " + ", ".join(f"{n} {len(ps)}" for n, ps in owned.items())
                 + " partitions")
        claimed = sorted(p for ps in owned.values() for p in ps)
        if claimed != list(range(self.report.partitions)):
            self.report.problem("group", f"{moment}: the members own partitions {claimed},"
                                f" not each of the {self.report.partitions} exactly once")

    def alpha_leaves(self, why: str) -> None:
        alpha = self.members.pop("alpha")
        self.report.alpha_left_owning = alpha.owned()
        self.say(f"{why}: alpha leaves, owning {len(self.report.alpha_left_owning)} partitions")
        alpha.leave()
        self.deliveries.alpha_left()
        if alpha.error is not None:
            self.report.problem("group", f"alpha's stream failed: {alpha.error!r}")

    def catch_up(self, acked: set[int], sends_ended_at: float) -> None:
        """Wait until every acknowledged message has been delivered (or the time is up)."""
        self.deliveries.expect(acked)
        if self.deliveries.complete.wait(CATCH_UP_TIMEOUT_S):
            self.report.catch_up_seconds = self.deliveries.completed_at - sends_ended_at
            self.say("every acknowledged message has been delivered")

    def close(self) -> None:
        """The survivors commit and leave (also after a broken story: no thread is left behind)."""
        for name, m in list(self.members.items()):
            with contextlib.suppress(Exception):
                m.connector.commit_offsets()
            m.leave()
            if m.error is not None:
                self.report.problem("group", f"{name}'s stream failed: {m.error!r}")
        self.members.clear()


def _open_producer(bootstrap: str) -> Any:
    from hmbclient import Producer

    return Producer(metadata_broker_list=bootstrap, producer_type="async", batch_num_messages=1000,
                    queue_buffering_max_ms=10, queue_buffering_max_messages=50_000,
                    compression_codec="lz4")


def _run_story(story: _Story, producer: Any, n: int, seconds: float) -> None:
    """Steps 2 to 6 of the module docstring: the group's story while production is paced."""
    from tqdm import tqdm

    story.join("alpha", "from the start, left at 2/3")
    story.join("beta", "from the start")
    story.settle(AT_START)
    with tqdm(total=n, unit="msg", desc="produce", file=story.out, disable=None) as bar:
        paced = _PacedProducer(producer, story.topic, n, seconds, bar.update).start()
        try:
            paced.wait_sent(n // 3, timeout=seconds + 60)
            story.say(f"{n // 3:,} messages produced: gamma joins")
            story.join("gamma", "joined at 1/3")
            story.settle(GAMMA_JOINED)
            paced.wait_sent(2 * n // 3, timeout=seconds + 60)
            story.alpha_leaves(f"{2 * n // 3:,} messages produced")
            story.settle(ALPHA_LEFT)
            acked, failed = paced.finish()
        finally:
            paced.abort()
    story.report.produce_seconds = paced.last_send_at - paced.started_at
    story.report.produced = len(acked)
    if failed:
        story.report.problem("produce", f"{failed:,} of {n:,} messages were not acknowledged")
    story.say(f"production ended: {len(acked):,} messages acknowledged")
    story.catch_up(acked, paced.last_send_at)
    missing = acked - story.deliveries.ids
    if missing:
        story.report.problem("delivery", f"{len(missing):,} acknowledged messages were delivered to no member"
                             f" (ids {sorted(missing)[:5]}...)")


def _check_group(report: DemoReport, deliveries: _Deliveries) -> None:
    """The group's part of the story: gamma consumed, alpha's partitions moved."""
    for name, m in report.members.items():
        m.messages = deliveries.counts.get(name, 0)
    if not deliveries.counts.get("gamma"):
        report.problem("group", "gamma joined but consumed no message")
    if not report.alpha_left_owning:
        report.problem("group", "alpha owned no partition when it left")
    for name, ps in sorted(deliveries.after_alpha_left.items()):
        taken = sorted(ps & set(report.alpha_left_owning))
        if taken:
            report.alpha_partitions_taken_by[name] = taken
    moved = {p for ps in report.alpha_partitions_taken_by.values() for p in ps}
    stayed = sorted(set(report.alpha_left_owning) - moved)
    if stayed:
        report.problem("group", f"alpha's partitions {stayed} were not consumed by beta or gamma after it left")


def _check_offsets(report: DemoReport, zk: str, bootstrap: str, group: str) -> None:
    """What the group committed (ZooKeeper offsets), read back as a 0.8 tool would."""
    from hmbclient.admin import describe_group

    info = describe_group(zk, group, brokers=bootstrap)
    report.committed = sum(r["committed"] or 0 for r in info["partitions"] if r["topic"] == report.topic)
    if report.committed != report.produced:
        report.problem("offsets", f"committed offsets sum to {report.committed:,}, not {report.produced:,}")


def _consume(bootstrap: str, zk: str, n: int, seconds: float, report: DemoReport, out: IO[str]) -> bool:
    """Create the topic, run the group's story, check it. Returns False when it broke off."""
    producer = _open_producer(bootstrap)
    story = _Story(bootstrap, zk, report.topic, report, out)
    told = True
    try:
        # Asking for the topic's partitions creates it: the group starts on a topic that exists.
        report.partitions = len(producer.partitions_for(report.topic))
        _run_story(story, producer, n, seconds)
    except _StoryBroken as e:
        report.problems.append(str(e))
        told = False
    finally:
        story.close()
        producer.close()
    report.consumed_unique = len(story.deliveries.ids)
    report.consumed_total = story.deliveries.total
    _check_group(report, story.deliveries)
    if told:
        _check_offsets(report, zk, bootstrap, story.group)
    return told


# --- Spark ----------------------------------------------------------------------------------------


def _on_loopback(master: str) -> bool:
    """Whether ``master`` is local mode or a cluster manager on this machine's loopback."""
    if master.startswith("local"):
        return True
    host = master.split("://", 1)[-1].split(",")[0].rsplit(":", 1)[0]
    return host in ("127.0.0.1", "localhost")


def _spark_session(master: str = DEFAULT_SPARK_MASTER, conf: Mapping[str, str] | None = None) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder_conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                    "spark.sql.shuffle.partitions": "4"}
    if _on_loopback(master):
        # Local mode, or a cluster on this machine: driver and executors meet on loopback.
        # A remote cluster's executors must reach the driver, so there Spark picks the address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder_conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    builder_conf.update(conf or {})
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("hmb-demo")
    for key, value in builder_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _spark(bootstrap: str, zk: str, report: DemoReport, master: str = DEFAULT_SPARK_MASTER,
           conf: Mapping[str, str] | None = None) -> None:
    """Step 7: count and sum the topic over offset-range RDD partitions; commit the ranges."""
    from spark_integration import OffsetRange, commit_offset_ranges, create_rdd, get_latest_offsets

    t0 = time.monotonic()
    spark = _spark_session(master, conf)
    report.spark_master = master
    try:
        params = {"metadata.broker.list": bootstrap, "zookeeper.connect": zk, "group.id": "demo-spark"}
        ends = get_latest_offsets(params, [report.topic])
        ranges = [OffsetRange(t, p, 0, end) for (t, p), end in sorted(ends.items())]
        rdd = create_rdd(spark.sparkContext, params, ranges)
        report.spark_partitions = rdd.getNumPartitions()
        count, total = (rdd.map(lambda kv: (1, int(kv[1].split(b":")[1])))
                        .fold((0, 0), lambda a, b: (a[0] + b[0], a[1] + b[1])))
        report.spark_count, report.spark_total = int(count), int(total)
        report.spark_committed = sum(commit_offset_ranges(params, rdd).values())
    finally:
        spark.stop()
    report.spark_seconds = time.monotonic() - t0


def _check_spark(report: DemoReport, n: int) -> None:
    # Every message was acknowledged when there is no produce problem; otherwise the expected
    # sum is unknown (a failed send may still have been written) and produce already failed.
    report.spark_expected = sum(i % 100 for i in range(n))
    if report.spark_count != report.produced:
        report.problem("spark", f"counted {report.spark_count:,} messages, not the {report.produced:,} produced")
    if report.spark_total != report.spark_expected:
        report.problem("spark", f"sum of amounts {report.spark_total:,} != expected {report.spark_expected:,}")
    if report.spark_partitions != report.partitions:
        report.problem("spark", f"used {report.spark_partitions} RDD partitions, not {report.partitions}")


# --- the whole job --------------------------------------------------------------------------------


def run_demo(brokers: str | None = None, zookeeper: str | None = None, messages: int = DEFAULT_MESSAGES,
             seconds: float = DEFAULT_SECONDS, spark: bool = True, out: IO[str] = sys.stdout,
             spark_master: str | None = None, spark_conf: Mapping[str, str] | None = None) -> DemoReport:
    """Run the demo and print its report to ``out``.

    ``spark_master`` runs the Spark step on that master (``spark://host:port``, ...) instead of
    local[2]; its executors must reach the brokers (the embedded ones listen on 127.0.0.1).
    ``spark_conf`` adds Spark settings (e.g. ``spark.executor.memory`` for small workers).

    Returns:
        The report; ``report.ok`` is False (and ``report.problems`` says which step failed)
        when any part of the story did not happen.
    """
    report = DemoReport(topic=f"demo-events-{uuid.uuid4().hex[:6]}")
    with _servers(brokers, zookeeper, out) as (bootstrap, zk):
        told = _consume(bootstrap, zk, messages, seconds, report, out)
        if spark and told:
            try:
                _spark(bootstrap, zk, report, spark_master or DEFAULT_SPARK_MASTER, spark_conf)
            except Exception as e:  # a report naming the step beats a traceback from deep in Spark
                report.problem("spark", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            else:
                _check_spark(report, messages)
    out.write(report.render())
    out.flush()
    return report
