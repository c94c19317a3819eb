"""Jepsen-style fault runs against a replicated cluster of broker processes, checked the way
Kafka's own system tests check replication: no acknowledged message may be lost.

One run (:class:`FaultRun`):

* A cluster of 3 brokers, each a ``python -m hmbclient.broker`` child process (so a fault is a
  real signal to a real process), replication factor 3, ``min.insync.replicas`` 2, unclean
  leader election off, a short ZooKeeper session (:data:`SESSION_TIMEOUT_MS`) and
  ``replica.lag.time.max.ms`` (:data:`REPLICA_LAG_TIME_MAX_MS`); one topic of several
  partitions.
* Producers with acks=-1 (all in-sync replicas) write sequential integers, each from its
  own range, and record exactly which values their client reported acknowledged (and where:
  partition and offset): hmbclient's Producer async and sync (with ``enable.idempotence``, so
  judged as idempotent too), kafka-python's KafkaProducer
  (idempotence off, retries on) and librdkafka through confluent-kafka's Producer
  (idempotence off, ``on_delivery``); and the idempotent ones (:data:`IDEMPOTENT_KINDS`):
  kafka-python and librdkafka with ``enable.idempotence``. kcat is not used: its delivery report names the
  partition and offset of a delivered message but not the message, and a failed delivery
  only by its error, so which values were acknowledged cannot be told from its output.
* Faults, one after another, chosen and aimed by a seed (:data:`FAULT_KINDS`): SIGKILL of a
  partition's leader or of the controller, SIGSTOP of a follower past
  ``replica.lag.time.max.ms`` but within the session (the ISR shrinks, then it returns),
  SIGSTOP past the session timeout (ZooKeeper expires the session, the controller moves the
  broker's leaderships away, the broker comes back and registers again), and SIGKILL of every
  broker followed by a restart of all; and a combination: a follower paused until it leaves a
  partition's ISR, then that partition's leader killed (the new leader must be the
  one replica still in the ISR, and it may take writes only once the other catches up again,
  min.insync.replicas being 2). Each fault ends by waiting for its effect (ZooKeeper
  deregistration, a new leader or controller, the ISR shrink), then for the recovery: every
  broker registered and seen, every ISR back to 3 replicas, every producer acknowledged again.
  Nothing sleeps a fixed time: even a pause lasts until its effect is seen (within a bound).
* Validation at the end, with the producers stopped: every partition is read from its leader;
  every acknowledged value must be there (zero lost), and the acknowledged position
  (partition, offset) must hold that value (a retry may have written an older copy elsewhere:
  that copy does not excuse losing the acknowledged one). Duplicates can only come from client
  retries (each value is sent once): for a producer with idempotence off they are counted, not
  failed; for an idempotent producer any duplicate fails the run. Order is judged per producer
  and partition: the values one producer sent to a partition must be stored in the order they
  were sent (each producer sends increasing numbers); an idempotent producer that is stored out
  of order fails the run, the others' reorderings (possible with several requests in flight and
  retries) are counted. A value nobody sent is a
  failure. The replicas of every partition must hold identical logs (read from their
  segment files: diverging logs are the failure leader epochs exist to prevent). For a lost
  value, the brokers' log directories are searched to tell a loss from a missed read.

* Readers (optional, :mod:`.readers`): consumers reading while the faults happen; every record
  one was served must be in the final log at that offset (else a dirty read: a value served
  above the high watermark of a leader that then lost it), and group commits read back must
  never be lower than what was committed. Subclasses bring other clusters and faults
  (``partitions.PartitionRun``: network namespaces; ``disk.DiskRun``: a disk that fills).
* The fault table (``RunResult.rows``, printed by conftest.py): per fault and client, the
  values acknowledged (or read), lost, duplicated and read dirty, counted under the fault
  during which they were sent (or read), and that fault's recovery time.

Invariants of the harness itself: every wait is bounded and names what it waited for; every
broker is stopped by its own process (the cluster's ``stop``), and children die with the test
process (``PR_SET_PDEATHSIG``); everything listens on 127.0.0.1.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedCluster
from hmbclient.errors import HmbError
from hmbclient.protocol.records import iter_records
from rebalance import paths

__all__ = [
    "FAULT_KINDS",
    "IDEMPOTENT_KINDS",
    "PRODUCER_KINDS",
    "FaultRun",
    "RunResult",
    "fault_sequence",
]

log = logging.getLogger("tests.faults")

TOPIC = "faults"
PARTITIONS = 4
BROKERS = 3
#: Short enough that a crashed broker is declared dead within seconds; long enough that a
#: pause of a few seconds (the ISR-shrink fault) stays well inside it: the ZooKeeper client
#: pings after about a third of the session of silence, so a pause of up to ~60% of the session
#: cannot expire it.
SESSION_TIMEOUT_MS = 6000
#: The ISR-shrink fault needs this plus the leader's check interval (half of it) well under
#: the session.
REPLICA_LAG_TIME_MAX_MS = 1000
#: Every run's cluster: replication 3, min.insync.replicas 2, no unclean election.
CLUSTER_SETTINGS: dict[str, Any] = dict(
    num_partitions=PARTITIONS, replication_factor=BROKERS, min_insync_replicas=2,
    unclean_leader_election_enable=False, zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS,
    replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS, offsets_topic_num_partitions=1,
)

FAULT_KINDS = (
    "kill_leader", "kill_controller", "pause_follower", "pause_past_session", "restart_all",
    "shrink_then_kill_leader",
)
PRODUCER_KINDS = ("hmb-async", "hmb-sync", "kafka-python", "librdkafka", "kafka-python-idem", "librdkafka-idem")
#: Producers with idempotence on: a duplicate or a reordering of theirs fails the run.
IDEMPOTENT_KINDS = ("hmb-async", "hmb-sync", "kafka-python-idem", "librdkafka-idem")

#: Values each producer must get acknowledged (of values sent after the recovery) before the
#: next fault: the cluster is serving again, for every client.
PROGRESS_ACKS = 20
RECOVERY_TIMEOUT_S = 90.0


def fault_sequence(seed: int, count: int, kinds_from: Sequence[str] = FAULT_KINDS) -> list[str]:
    """``count`` fault kinds (of ``kinds_from``) drawn by ``seed``: every kind once before any repeats."""
    rng = random.Random(f"sequence-{seed}")
    out: list[str] = []
    while len(out) < count:
        kinds = list(kinds_from)
        rng.shuffle(kinds)
        out.extend(kinds)
    return out[:count]


def _wait(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``check`` until it is true; returns the seconds it took.

    Raises:
        TimeoutError: not true within ``timeout_s`` (naming ``what``).
    """
    start = time.monotonic()
    deadline = start + timeout_s
    pause = 0.01
    while True:
        try:
            if check():
                return time.monotonic() - start
        except (HmbError, OSError, KazooException):
            pass  # a broker on its way down or up, a ZooKeeper hiccup: ask again
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


# -- producers ------------------------------------------------------------------------------


class AckLog:
    """What one producer sent and what its client reported: values ``base + i`` for
    ``i < sent``; each one acknowledged (with its partition and offset), failed, or still
    unresolved."""

    def __init__(self, name: str, base: int) -> None:
        self.name = name
        self.base = base
        self.sent = 0
        self.acked: dict[int, tuple[int, int]] = {}
        self.failed: dict[int, str] = {}
        self._lock = threading.Lock()

    def next_value(self) -> int:
        with self._lock:
            value = self.base + self.sent
            self.sent += 1
            return value

    def on_ack(self, value: int, partition: int, offset: int) -> None:
        with self._lock:
            self.acked[value] = (partition, offset)

    def on_error(self, value: int, error: object) -> None:
        with self._lock:
            self.failed[value] = str(error)[:200]

    @property
    def outstanding(self) -> int:
        with self._lock:
            return self.sent - len(self.acked) - len(self.failed)

    def acked_since(self, first_index: int) -> int:
        """How many values with index >= ``first_index`` were acknowledged."""
        low = self.base + first_index
        with self._lock:
            return sum(1 for v in self.acked if v >= low)

    def owns(self, value: int) -> bool:
        return self.base <= value < self.base + self.sent


def encode_value(value: int) -> bytes:
    """A value as the producers send it: ten ASCII digits (every producer's range fits)."""
    return b"%010d" % value


class ProducerWorker:
    """A thread that sends values at a steady rate through one client and records the acks.

    At most ``max_outstanding`` values are unresolved at once (a cluster that is down fills no
    unbounded queue). Subclasses open the client and send one value (or a few).
    """

    kind = ""
    #: Values handed to the client per send call.
    chunk = 1
    #: The client runs with idempotence on (duplicates and reorderings fail the run).
    idempotent = False

    def __init__(self, index: int, bootstrap: str, topic: str, *, rate: float = 100.0, max_outstanding: int = 500) -> None:
        self.name = self.kind
        self.log = AckLog(self.name, (index + 1) * 1_000_000_000)
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.max_outstanding = max_outstanding
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"faults-{self.kind}", daemon=True)

    # what a client does
    def _open(self) -> None:
        raise NotImplementedError

    def _send(self, values: list[int]) -> None:
        raise NotImplementedError

    def _poll(self) -> None:
        """Serve the client's callbacks (librdkafka runs them only in poll)."""

    def _close(self, timeout_s: float) -> None:
        raise NotImplementedError

    # the loop
    def start(self) -> None:
        self._open()
        self._thread.start()

    def _run(self) -> None:
        interval = self.chunk / self.rate
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                self._poll()
                if self.log.outstanding >= self.max_outstanding:
                    self._stop.wait(0.01)
                    continue
                now = time.monotonic()
                if now < next_at:
                    self._stop.wait(next_at - now)
                    continue
                next_at = max(next_at + interval, now - 1.0)
                self._send([self.log.next_value() for _ in range(self.chunk)])
        except BaseException as e:  # reported by the run: a producer must not die quietly
            self.error = e
            log.exception("%s: worker died", self.name)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop sending (unresolved values may still be acknowledged until :meth:`close`)."""
        self._stop.set()
        self._thread.join(timeout=60)

    def close(self, timeout_s: float = 30.0) -> None:
        """Wait up to ``timeout_s`` for the unresolved values, then close the client."""
        self._close(timeout_s)


class HmbAsyncWorker(ProducerWorker):
    kind = "hmb-async"
    idempotent = True

    def _open(self) -> None:
        self.producer = Producer(
            metadata_broker_list=self.bootstrap, producer_type="async", request_required_acks=-1, enable_idempotence=True,
            message_send_max_retries=40, retry_backoff_ms=250, request_timeout_ms=10_000,
            client_id="faults-hmb-async",
        )

    def _send(self, values: list[int]) -> None:
        futures = self.producer.send(ProducerData(self.topic, None, [encode_value(v) for v in values]))
        for value, future in zip(values, futures, strict=True):
            future.add_done_callback(functools.partial(self._done, value))

    def _done(self, value: int, future: Any) -> None:
        error = future.exception()
        if error is not None:
            self.log.on_error(value, error)
        else:
            meta = future.result()
            self.log.on_ack(value, meta.partition, -1 if meta.offset is None else meta.offset)

    def _close(self, timeout_s: float) -> None:
        self.producer.close(timeout_s)


class HmbSyncWorker(ProducerWorker):
    """Blocking sends of a few values at a time: all acknowledged when ``send`` returns, none
    known to be when it raises (the error does not say which of them got through)."""

    kind = "hmb-sync"
    idempotent = True
    chunk = 5

    def _open(self) -> None:
        self.producer = Producer(
            metadata_broker_list=self.bootstrap, producer_type="sync", request_required_acks=-1, enable_idempotence=True,
            message_send_max_retries=40, retry_backoff_ms=250, request_timeout_ms=10_000,
            client_id="faults-hmb-sync",
        )

    def _send(self, values: list[int]) -> None:
        try:
            futures = self.producer.send(ProducerData(self.topic, None, [encode_value(v) for v in values]))
        except HmbError as e:
            for v in values:
                self.log.on_error(v, e)
            return
        for value, future in zip(values, futures, strict=True):
            meta = future.result(timeout=0)
            self.log.on_ack(value, meta.partition, -1 if meta.offset is None else meta.offset)

    def _close(self, timeout_s: float) -> None:
        self.producer.close(timeout_s)


class KafkaPythonWorker(ProducerWorker):
    kind = "kafka-python"

    def _open(self) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","), acks="all", enable_idempotence=False,
            retries=2_147_483_647, retry_backoff_ms=250, request_timeout_ms=10_000,
            delivery_timeout_ms=60_000, linger_ms=5, client_id="faults-kafka-python",
        )

    def _send(self, values: list[int]) -> None:
        for value in values:
            future = self.producer.send(self.topic, value=encode_value(value))
            future.add_callback(lambda meta, v=value: self.log.on_ack(v, meta.partition, -1 if meta.offset is None else meta.offset))
            future.add_errback(lambda e, v=value: self.log.on_error(v, repr(e)))

    def _close(self, timeout_s: float) -> None:
        try:
            self.producer.flush(timeout=timeout_s)
        finally:
            self.producer.close(timeout=5)


class KafkaPythonIdempotentWorker(KafkaPythonWorker):
    kind = "kafka-python-idem"
    idempotent = True

    def _open(self) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","), acks="all", enable_idempotence=True,
            retries=2_147_483_647, retry_backoff_ms=250, request_timeout_ms=10_000,
            delivery_timeout_ms=60_000, linger_ms=5, client_id="faults-kafka-python-idem",
        )


class LibrdkafkaWorker(ProducerWorker):
    kind = "librdkafka"

    def _open(self) -> None:
        import confluent_kafka

        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": self.idempotent,
            "retries": 2_147_483_647, "retry.backoff.ms": 250, "request.timeout.ms": 10_000,
            "message.timeout.ms": 60_000, "linger.ms": 5, "client.id": "faults-librdkafka",
            "logger": logging.getLogger("tests.faults.librdkafka"),
        })

    def _send(self, values: list[int]) -> None:
        for value in values:
            while True:
                try:
                    self.producer.produce(self.topic, value=encode_value(value), on_delivery=functools.partial(self._done, value))
                    break
                except BufferError:
                    self.producer.poll(0.05)

    def _done(self, value: int, err: Any, msg: Any) -> None:
        if err is not None:
            self.log.on_error(value, err)
        else:
            self.log.on_ack(value, msg.partition(), msg.offset())

    def _poll(self) -> None:
        self.producer.poll(0)

    def _close(self, timeout_s: float) -> None:
        self.producer.flush(timeout_s)


class LibrdkafkaIdempotentWorker(LibrdkafkaWorker):
    kind = "librdkafka-idem"
    idempotent = True


_WORKERS: dict[str, type[ProducerWorker]] = {
    w.kind: w
    for w in (HmbAsyncWorker, HmbSyncWorker, KafkaPythonWorker, LibrdkafkaWorker, KafkaPythonIdempotentWorker, LibrdkafkaIdempotentWorker)
}


# -- results --------------------------------------------------------------------------------


@dataclass
class FaultRecord:
    kind: str
    detail: str = ""
    fault_s: float = 0.0
    recovery_s: float = 0.0
    problem: str | None = None
    #: per producer: values it had sent when the fault began; per reader: records it had read
    sent_before: dict[str, int] = field(default_factory=dict)
    read_before: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        text = f"{self.kind}({self.detail}; {self.fault_s:.1f}+{self.recovery_s:.1f} s)"
        return text if self.problem is None else f"{text} FAILED: {self.problem}"


@dataclass
class RunResult:
    seed: int
    faults: list[FaultRecord] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    #: per producer: values stored before a value it sent earlier (same partition)
    reordered: dict[str, int] = field(default_factory=dict)
    #: the producers that ran with idempotence on
    idempotent: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: per producer: acknowledged values not found
    lost_by: Counter[str] = field(default_factory=Counter)
    #: per reader: records read, and those read that the final log does not hold there
    reads: dict[str, int] = field(default_factory=dict)
    dirty_reads: dict[str, int] = field(default_factory=dict)
    #: per reader: committed offsets read back lower during a fault (a zombie coordinator)
    stale_commit_reads: dict[str, int] = field(default_factory=dict)
    #: findings that do not fail the run
    notes: list[str] = field(default_factory=list)
    #: the rows of the fault table (see ``rows``), filled by the validation
    table: list[tuple[str, str, int, int, int, int, float]] = field(default_factory=list)
    seconds: float = 0.0
    report_path: str = ""

    def rows(self) -> list[tuple[str, str, int, int, int, int, float]]:
        """Table rows: (fault kind, client, acked or read, lost, duplicates, dirty reads,
        recovery in seconds), one per fault and client, each value counted under the fault during
        which (or during whose recovery) it was sent or read ("before faults" for the first);
        without per-fault figures, one row per client for the run's kinds together."""
        if self.table:
            return self.table
        kinds = "+".join(dict.fromkeys(f.kind for f in self.faults)) or "none"
        recover = max((f.recovery_s for f in self.faults), default=0.0)
        out = [(kinds, name, self.acked.get(name, 0), self.lost_by.get(name, 0), self.duplicates.get(name, 0), 0, recover)
               for name in self.sent]
        out += [(kinds, name, n, 0, 0, self.dirty_reads.get(name, 0), recover) for name, n in self.reads.items()]
        return out

    @property
    def survived(self) -> int:
        return sum(1 for f in self.faults if f.problem is None)

    def summary(self) -> str:
        """One line: faults survived, acked, lost, duplicates, seconds."""
        dups = sum(self.duplicates.values())
        per = ", ".join(f"{k} {v}" for k, v in self.duplicates.items() if v)
        idem_dups = sum(self.duplicates.get(k, 0) for k in self.idempotent)
        reordered = sum(self.reordered.values())
        per_order = ", ".join(f"{k} {v}" for k, v in self.reordered.items() if v)
        idem = f", idempotent [{' '.join(self.idempotent)}] duplicates={idem_dups}" if self.idempotent else ""
        return (
            f"fault run seed={self.seed}: {self.survived}/{len(self.faults)} faults survived "
            f"[{' '.join(f.kind for f in self.faults)}], acked={sum(self.acked.values())} "
            f"(of {sum(self.sent.values())} sent, {sum(self.failed.values())} failed), lost={len(self.lost)}, "
            f"misplaced={len(self.misplaced)}, duplicates={dups}{f' ({per})' if per else ''}{idem}, "
            f"reordered={reordered}{f' ({per_order})' if per_order else ''}, "
            f"read={sum(self.reads.values())} dirty={sum(self.dirty_reads.values())}, "
            f"stale commit reads={sum(self.stale_commit_reads.values())}, "
            f"problems={len(self.problems)}, {self.seconds:.1f} s"
        )

    def details(self) -> str:
        lines = [self.summary(), "faults:"] + [f"  {f}" for f in self.faults]
        for name in self.sent:
            lines.append(f"  {name}{' (idempotent)' if name in self.idempotent else ''}: sent {self.sent[name]}, "
                         f"acked {self.acked.get(name, 0)}, failed {self.failed.get(name, 0)}, "
                         f"duplicates {self.duplicates.get(name, 0)}, reordered {self.reordered.get(name, 0)}")
        for title, items in (("problems", self.problems), ("lost", self.lost), ("misplaced", self.misplaced), ("notes", self.notes)):
            if items:
                lines.append(f"{title} ({len(items)}):")
                lines += [f"  {x}" for x in items[:50]]
                if len(items) > 50:
                    lines.append(f"  ... {len(items) - 50} more")
        if self.report_path:
            lines.append(f"full report: {self.report_path}")
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.misplaced or self.problems) and self.survived == len(self.faults)

    def check(self) -> None:
        """Raises AssertionError (with the details) unless the run kept every acknowledged value
        and every check passed."""
        assert self.ok, self.details()


# -- the run --------------------------------------------------------------------------------


class FaultRun:
    """One seeded run: a cluster, producers (and readers), ``faults`` one after another, then
    validation.

    Args:
        zookeeper_connect: a ZooKeeper ("host:port"); the run uses its own chroot.
        log_dir: where the brokers keep their data (kept after the run for inspection) and the
            run writes ``report.txt``.
        seed: chooses the fault sequence (when ``faults`` is a count) and every target.
        faults: a count, or the kinds in order (names from :data:`FAULT_KINDS`).
        producers: kinds from :data:`PRODUCER_KINDS`.
        rate: values per second per producer.
        readers: kinds from :data:`READER_KINDS`, reading while the faults happen.
    """

    #: the fault kinds this run knows (each a method ``_<kind>``)
    fault_kinds: Sequence[str] = FAULT_KINDS

    def __init__(
        self,
        zookeeper_connect: str,
        log_dir: str | os.PathLike[str],
        seed: int,
        faults: int | Sequence[str],
        *,
        producers: Sequence[str] = PRODUCER_KINDS,
        rate: float = 100.0,
        readers: Sequence[str] = (),
    ) -> None:
        self.kinds = fault_sequence(seed, faults, self.fault_kinds) if isinstance(faults, int) else list(faults)
        unknown = [k for k in self.kinds if k not in self.fault_kinds]
        if unknown:
            raise ValueError(f"unknown faults {unknown}; known: {self.fault_kinds}")
        self.zookeeper_connect = zookeeper_connect
        self.log_dir = Path(log_dir)
        self.seed = seed
        self.rng = random.Random(seed)
        self.producer_kinds = list(producers)
        self.rate = rate
        self.session_s = SESSION_TIMEOUT_MS / 1000.0
        self.result = RunResult(seed)
        self.workers: list[ProducerWorker] = []
        self.reader_kinds = list(readers)
        self.readers: list[Any] = []
        self.events: list[str] = []
        self.broker_output: dict[int, list[str]] = {i: [] for i in range(BROKERS)}
        self._t0 = time.monotonic()

    # -- plumbing ---------------------------------------------------------------------------
    def _event(self, text: str) -> None:
        line = f"{time.monotonic() - self._t0:7.2f} s  {text}"
        self.events.append(line)
        log.info("seed %d: %s", self.seed, text)

    def _save_output(self, broker_id: int, why: str) -> None:
        """Keep a broker process's last output lines (a restart starts a new process)."""
        try:
            b = self.cluster.broker(broker_id)
        except KeyError:  # never started
            return
        lines = list(getattr(b, "output", ()))
        self.broker_output[broker_id].append(f"--- broker {broker_id}: {why} at {time.monotonic() - self._t0:.2f} s")
        self.broker_output[broker_id].extend(lines)
        b.output.clear()

    def _state(self, partition: int) -> paths.PartitionState:
        return paths.decode_partition_state(self.zk.get(paths.partition_state_path(TOPIC, partition))[0])

    def _registered(self, broker_id: int) -> bool:
        return self.zk.exists(paths.broker_path(broker_id)) is not None

    def _controller(self) -> int:
        if self.zk.exists(paths.CONTROLLER_PATH) is None:
            return -1
        return paths.decode_controller(self.zk.get(paths.CONTROLLER_PATH)[0]).broker_id

    def _deregistered(self, broker_id: int) -> float:
        """Wait until ZooKeeper has dropped the broker's registration (its session expired)."""
        return _wait(f"broker {broker_id}'s registration to expire", lambda: not self._registered(broker_id), 3 * self.session_s + 10)

    def _led_by(self, broker_id: int) -> list[int]:
        return [p for p in range(PARTITIONS) if self._state(p).leader == broker_id]

    def _leaderships_moved(self, broker_id: int, partitions: Sequence[int]) -> float:
        """Wait until the controller has given each partition a leader other than ``broker_id``."""
        return _wait(
            f"new leaders (not broker {broker_id}) for partitions {list(partitions)}",
            lambda: all(self._state(p).leader not in (-1, broker_id) for p in partitions),
            RECOVERY_TIMEOUT_S,
        )

    # -- faults -----------------------------------------------------------------------------
    def _kill_leader(self, f: FaultRecord) -> None:
        p = self.rng.randrange(PARTITIONS)
        victim = self._state(p).leader
        moved = self._led_by(victim)
        f.detail = f"partition {p}: broker {victim}"
        self._event(f"SIGKILL broker {victim}, leader of {TOPIC}-{p} (and of {moved})")
        self._save_output(victim, "killed")
        self.cluster.kill(victim)
        self._deregistered(victim)
        self._leaderships_moved(victim, moved)
        self._event(f"broker {victim} deregistered, partitions {moved} have new leaders; restarting it")
        self.cluster.restart(victim, timeout_s=RECOVERY_TIMEOUT_S)

    def _kill_controller(self, f: FaultRecord) -> None:
        victim = self._controller()
        moved = self._led_by(victim)
        f.detail = f"broker {victim}"
        self._event(f"SIGKILL broker {victim}, the controller (leader of {moved})")
        self._save_output(victim, "killed")
        self.cluster.kill(victim)
        self._deregistered(victim)
        _wait(f"a controller other than broker {victim}", lambda: self._controller() not in (-1, victim), RECOVERY_TIMEOUT_S)
        self._leaderships_moved(victim, moved)
        self._event(f"broker {self._controller()} is the controller now; restarting broker {victim}")
        self.cluster.restart(victim, timeout_s=RECOVERY_TIMEOUT_S)

    def _pause_follower(self, f: FaultRecord) -> None:
        p = self.rng.randrange(PARTITIONS)
        state = self._state(p)
        victim = self.rng.choice([r for r in state.isr if r != state.leader])
        followed = [q for q in range(PARTITIONS) if victim in self._state(q).isr and self._state(q).leader != victim]
        f.detail = f"partition {p}: follower {victim}"
        # Resume well inside the session (the ZooKeeper client may have been silent for up to a
        # third of it when the pause starts), whether or not the shrink was seen by then.
        bound = 0.6 * self.session_s
        self._event(f"SIGSTOP broker {victim}, follower of {TOPIC}-{p} (and of {followed})")
        self.cluster.pause(victim)
        try:
            took = _wait(
                f"broker {victim} out of the ISR of partitions {followed}",
                lambda: all(victim not in self._state(q).isr for q in followed),
                bound,
            )
            self._event(f"ISR shrank after {took:.2f} s (replica.lag.time.max.ms {REPLICA_LAG_TIME_MAX_MS})")
        except TimeoutError as e:
            f.problem = f"{e} (pause of {bound:.1f} s, replica.lag.time.max.ms {REPLICA_LAG_TIME_MAX_MS})"
        finally:
            self.cluster.resume(victim)
            self._event(f"SIGCONT broker {victim}")
        if not self._registered(victim):
            f.problem = (f.problem or "") + f" broker {victim}'s session expired during a pause shorter than the session"

    def _shrink_then_kill_leader(self, f: FaultRecord) -> None:
        p = self.rng.randrange(PARTITIONS)
        state = self._state(p)
        leader = state.leader
        follower = self.rng.choice([r for r in state.isr if r != leader])
        f.detail = f"partition {p}: follower {follower} out, leader {leader} killed"
        bound = 0.6 * self.session_s
        self._event(f"SIGSTOP broker {follower}, follower of {TOPIC}-{p}")
        self.cluster.pause(follower)
        try:
            took = _wait(f"broker {follower} out of the ISR of {TOPIC}-{p}", lambda: follower not in self._state(p).isr, bound)
            isr = self._state(p).isr
            moved = self._led_by(leader)
            self._event(f"ISR of {TOPIC}-{p} is {list(isr)} after {took:.2f} s; SIGKILL its leader {leader} (leader of {moved})")
            self._save_output(leader, "killed")
            self.cluster.kill(leader)
        finally:
            # Thawed at once (well inside its session): it finds its leader gone and must
            # follow whoever the controller picks, outside the ISR until it catches up.
            self.cluster.resume(follower)
            self._event(f"SIGCONT broker {follower}")
        self._deregistered(leader)
        self._leaderships_moved(leader, moved)
        survivors = [r for r in isr if r != leader]
        new_leader = self._state(p).leader
        if new_leader not in survivors:
            f.problem = (f"{TOPIC}-{p}: broker {new_leader} was elected, but only {survivors} were in the ISR "
                         f"{list(isr)} when leader {leader} died (an unclean election)")
        self._event(f"{TOPIC}-{p} led by {new_leader} (ISR when the leader died: {list(isr)}); restarting broker {leader}")
        self.cluster.restart(leader, timeout_s=RECOVERY_TIMEOUT_S)

    def _pause_past_session(self, f: FaultRecord) -> None:
        victim = self.rng.randrange(BROKERS)
        moved = self._led_by(victim)
        was_controller = self._controller() == victim
        f.detail = f"broker {victim}{' (controller)' if was_controller else ''}"
        self._event(f"SIGSTOP broker {victim} past the session{' (the controller)' if was_controller else ''}, leader of {moved}")
        self.cluster.pause(victim)
        try:
            self._deregistered(victim)
            if was_controller:
                _wait(f"a controller other than broker {victim}", lambda: self._controller() not in (-1, victim), RECOVERY_TIMEOUT_S)
            self._leaderships_moved(victim, moved)
            self._event(f"broker {victim}'s session expired, partitions {moved} have new leaders")
        finally:
            self.cluster.resume(victim)
            self._event(f"SIGCONT broker {victim}")
        _wait(f"broker {victim} to register again", lambda: self._registered(victim), RECOVERY_TIMEOUT_S)

    def _restart_all(self, f: FaultRecord) -> None:
        kill_order = self.rng.sample(range(BROKERS), BROKERS)
        start_order = self.rng.sample(range(BROKERS), BROKERS)
        f.detail = f"killed {kill_order}, started {start_order}"
        self._event(f"SIGKILL every broker ({kill_order})")
        for b in kill_order:
            self._save_output(b, "killed")
            self.cluster.kill(b)
        for b in kill_order:
            self._deregistered(b)
        self._event(f"every broker deregistered; starting {start_order}")
        for b in start_order:
            self.cluster.restart(b, timeout_s=RECOVERY_TIMEOUT_S)

    # -- recovery ---------------------------------------------------------------------------
    def _recover(self) -> float:
        """Wait until the cluster is whole (every broker seen, every ISR of 3) and every producer
        has values sent after that point acknowledged. Returns the seconds it took."""
        start = time.monotonic()
        self.cluster.await_brokers(timeout_s=RECOVERY_TIMEOUT_S)
        self.cluster.await_isr(TOPIC, timeout_s=RECOVERY_TIMEOUT_S, size=BROKERS)
        self._await_progress("after the recovery")
        return time.monotonic() - start

    def _last_chance_recovery(self) -> None:
        """After a failed fault: thaw and start every broker and wait once more, recording
        (not raising) what does not come back."""
        try:
            for b in range(BROKERS):
                broker = self.cluster.broker(b)
                if broker.running and broker.paused:
                    self.cluster.resume(b)
                elif not broker.running:
                    self.cluster.restart(b, timeout_s=RECOVERY_TIMEOUT_S)
            self._recover()
        except (TimeoutError, HmbError, AssertionError) as e:
            self.result.problems.append(f"the cluster did not recover: {type(e).__name__}: {e}")

    def _await_progress(self, when: str) -> None:
        marks = {w.name: w.log.sent for w in self.workers}

        def check() -> bool:
            for w in self.workers:
                if w.error is not None:
                    raise AssertionError(f"producer {w.name} died: {w.error!r}")
            return all(w.log.acked_since(marks[w.name]) >= PROGRESS_ACKS for w in self.workers)

        _wait(f"every producer to get {PROGRESS_ACKS} values sent {when} acknowledged", check, RECOVERY_TIMEOUT_S)

    # -- validation -------------------------------------------------------------------------
    def _read_partition(self, partition: int) -> list[tuple[int, bytes | None]]:
        leader = self.cluster.leader(TOPIC, partition)
        assert leader is not None and leader >= 0, f"{TOPIC}-{partition} has no leader"
        b = self.cluster.broker(leader)
        consumer = SimpleConsumer(b.host, b.port, client_id="faults-validation")
        out: list[tuple[int, bytes | None]] = []
        try:
            offset = 0
            while True:
                ms = consumer.fetch(FetchRequest(TOPIC, partition, offset, 1 << 20))
                out.extend((mo.offset, mo.message.value) for mo in ms)
                if ms.next_offset <= offset:  # nothing more (a set of markers only still moves on)
                    return out
                offset = ms.next_offset
        finally:
            consumer.close()

    def _judge_order(self, read: dict[int, list[tuple[int, bytes | None]]]) -> None:
        """Per producer and partition, the values it sent must be stored in send order (its
        numbers increase). A value read again after a later one (a duplicate) counts too."""
        r = self.result
        for w in self.workers:
            bad = 0
            first: str | None = None
            for p, records in read.items():
                last = -1
                for offset, data in records:
                    try:
                        number = int(data or b"")
                    except ValueError:
                        continue
                    if not w.log.owns(number):
                        continue
                    if number <= last:
                        bad += 1
                        first = first or f"{TOPIC}-{p}@{offset}: value {number} stored after {last}"
                    last = max(last, number)
            r.reordered[w.name] = bad
            if bad and w.idempotent:
                r.problems.append(f"{w.name} (idempotent): {bad} value(s) stored out of send order, first {first}")

    def _fill_table(self, marks: dict[str, dict[str, list[int]]]) -> None:
        """One row per fault and client: its values (reads) since the fault began, up to the
        next fault (see ``RunResult.rows``)."""
        faults = self.result.faults
        readers = {reader.name for reader in self.readers}
        for name, m in marks.items():
            reader = name in readers
            starts = [(f.read_before if reader else f.sent_before).get(name, 0) for f in faults]
            windows = [("before faults", 0, starts[0] if starts else 1 << 62, 0.0)]
            windows += [(f.kind, a, b, f.recovery_s) for f, a, b in zip(faults, starts, [*starts[1:], 1 << 62][:len(starts)], strict=True)]
            for kind, low, high, recover in windows:
                def count(xs: list[int], lo: int = low, hi: int = high) -> int:
                    return sum(1 for x in xs if lo <= x < hi)

                self.result.table.append((kind, name, count(m["ok"]), count(m["lost"]), count(m["dup"]), count(m.get("dirty", [])), recover))

    def _judge_readers(self, at: dict[tuple[int, int], bytes | None]) -> None:
        """No reader may have seen a record the final log does not hold at that offset (a read
        above the high watermark of a leader that later lost it: a dirty read)."""
        r = self.result
        for reader in self.readers:
            dirty = [(p, o, v) for (p, o), v in reader.seen.items() if at.get((p, o), b"<absent>") != v]
            r.reads[reader.name] = len(reader.seen)
            r.dirty_reads[reader.name] = len(dirty)
            if dirty:
                p, o, v = min(dirty)
                r.problems.append(f"{reader.name}: {len(dirty)} dirty read(s), first {TOPIC}-{p}@{o} = {v!r}, "
                                  f"the log holds {at.get((p, o))!r}")
            r.problems.extend(f"{reader.name}: {x}" for x in reader.problems)
            stale = getattr(reader, "stale_commit_reads", [])
            if stale:
                r.stale_commit_reads[reader.name] = len(stale)
                r.notes.append(f"{reader.name}: {len(stale)} stale commit read(s) during faults, first: {stale[0]}")

    def _disk(self, broker_id: int, partition: int) -> list[tuple[int, bytes | None]]:
        """The records of one replica, read from its segment files."""
        d = Path(self.cluster.broker_log_dir(broker_id)) / f"{TOPIC}-{partition}"
        out: list[tuple[int, bytes | None]] = []
        for seg in sorted(d.glob("*.log")):
            try:
                out.extend((r.offset, r.value) for r in iter_records(seg.read_bytes()))
            except HmbError as e:
                out.append((-1, f"<unreadable {seg.name}: {e}>".encode()))
        return out

    def _replicas_agree(self) -> None:
        """Every replica of every partition holds the same records (after the followers caught
        up with the leader: the producers are stopped)."""
        for p in range(PARTITIONS):
            logs: dict[int, list[tuple[int, bytes | None]]] = {}
            try:
                _wait(f"the replicas of {TOPIC}-{p} to hold as many records", functools.partial(self._replica_logs, p, logs), 30)
            except TimeoutError:
                pass  # compared below, with the lengths in the message
            reference = logs[0]
            for b in range(1, BROKERS):
                other = logs[b]
                if other == reference:
                    continue
                at = next((i for i, (x, y) in enumerate(zip(reference, other, strict=False)) if x != y), min(len(reference), len(other)))
                self.result.problems.append(
                    f"replicas of {TOPIC}-{p} diverge: broker 0 has {len(reference)} records, broker {b} "
                    f"{len(other)}; first difference at record #{at}: "
                    f"{reference[at] if at < len(reference) else None} vs {other[at] if at < len(other) else None}"
                )

    def _replica_logs(self, partition: int, logs: dict[int, list[tuple[int, bytes | None]]]) -> bool:
        """Read every replica of ``partition`` into ``logs``; true if they are equally long."""
        logs.clear()
        logs.update({b: self._disk(b, partition) for b in range(BROKERS)})
        return len({len(v) for v in logs.values()}) == 1

    def _where_on_disk(self, wanted: set[bytes]) -> dict[bytes, list[tuple[int, int, int]]]:
        """For each value, every (broker, partition, offset) whose segment files hold it."""
        found: dict[bytes, list[tuple[int, int, int]]] = {v: [] for v in wanted}
        for b in range(BROKERS):
            for p in range(PARTITIONS):
                for offset, value in self._disk(b, p):
                    if value in found:
                        found[value].append((b, p, offset))
        return found

    def _validate(self) -> None:
        r = self.result
        read = {p: self._read_partition(p) for p in range(PARTITIONS)}
        at: dict[tuple[int, int], bytes | None] = {}
        counts: Counter[bytes | None] = Counter()
        for p, records in read.items():
            previous = -1
            for offset, data in records:
                if offset <= previous:
                    r.problems.append(f"{TOPIC}-{p}: offset {offset} read after {previous}")
                previous = offset
                at[(p, offset)] = data
                counts[data] += 1
        # Values nobody sent.
        for read_value in counts:
            try:
                number = int(read_value or b"")
            except ValueError:
                number = -1
            if not any(w.log.owns(number) for w in self.workers):
                r.problems.append(f"read a value no producer sent: {read_value!r}")
        self._judge_order(read)
        lost: dict[bytes, str] = {}
        #: per client: the send (or read) positions of its acked, lost, duplicated (dirty) values
        marks: dict[str, dict[str, list[int]]] = {}
        for w in self.workers:
            dups = 0
            m = marks[w.name] = {"ok": [v - w.log.base for v in w.log.acked], "lost": [], "dup": []}
            for value, (p, offset) in sorted(w.log.acked.items()):
                data = encode_value(value)
                n = counts.get(data, 0)
                if n == 0:
                    lost[data] = f"{w.name} value {value} acked at {TOPIC}-{p}@{offset}"
                    m["lost"].append(value - w.log.base)
                elif offset >= 0 and at.get((p, offset)) != data:
                    r.misplaced.append(
                        f"{w.name} value {value} acked at {TOPIC}-{p}@{offset}, which holds "
                        f"{at.get((p, offset))!r} (the value is read {n} time(s) elsewhere)"
                    )
            for number in range(w.log.base, w.log.base + w.log.sent):
                n = counts.get(encode_value(number), 0)
                if n > 1:
                    dups += n - 1
                    m["dup"] += [number - w.log.base] * (n - 1)
            r.duplicates[w.name] = dups
            if w.idempotent and dups:
                r.problems.append(f"{w.name} (idempotent) stored {dups} duplicate(s)")
        if lost:
            where = self._where_on_disk(set(lost))
            leaders = {p: self.cluster.leader(TOPIC, p) for p in range(PARTITIONS)}
            for data, what in sorted(lost.items()):
                places = where[data]
                text = ", ".join(f"broker {b} {TOPIC}-{p}@{o}" for b, p, o in places)
                if not places:
                    verdict = "on no broker's disk: LOST"
                elif any(leaders[p] == b for b, p, _ in places):
                    verdict = f"on the leader's disk ({text}): a missed read"
                else:
                    verdict = f"only on followers' disks ({text}): lost from the leader"
                r.lost.append(f"{what}: {verdict}")
                r.lost_by[what.split(" value ", 1)[0]] += 1
        for reader in self.readers:
            order = {key: i for i, key in enumerate(reader.seen)}
            marks[reader.name] = {"ok": list(order.values()), "lost": [], "dup": [],
                                  "dirty": [order[k] for k, v in reader.seen.items() if at.get(k, b"<absent>") != v]}
        self._judge_readers(at)
        from .transactions import judge_transactions

        txn_marks, rc_bad = judge_transactions(self)
        marks.update(txn_marks)  # the transactional producers' rows: as read_committed reads them
        for reader in self.readers:
            if rc_bad.get(reader.name):
                order = {key: i for i, key in enumerate(reader.seen)}
                marks[reader.name]["dirty"] += [order[k] for k in rc_bad[reader.name]]
        self._fill_table(marks)
        self._replicas_agree()
        for p in range(PARTITIONS):
            meta = self.cluster.partition(TOPIC, p)
            if meta is None or len(meta.isr) != BROKERS:
                r.problems.append(f"{TOPIC}-{p}: ISR at the end is {None if meta is None else list(meta.isr)}, not all {BROKERS}")

    # -- the whole run ----------------------------------------------------------------------
    def run(self) -> RunResult:
        """Run the faults and validate; never raises for what it checks (see
        :meth:`RunResult.check`), only for a harness that cannot go on (a timeout, a broker
        that does not start), after writing what it has to ``report.txt``."""
        self._t0 = time.monotonic()
        chroot = f"{self.zookeeper_connect}/faults-{self.seed}-{uuid.uuid4().hex[:8]}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = self._make_cluster(chroot)
        self.zk = KazooClient(hosts=chroot)
        try:
            with self.cluster:
                self.zk.start(timeout=15)
                self.cluster.create_topic(TOPIC, PARTITIONS, BROKERS)
                self.cluster.await_isr(TOPIC, timeout_s=RECOVERY_TIMEOUT_S)
                self._event(f"cluster {self.cluster.bootstrap} up; faults {self.kinds}")
                self._run_producers_and_faults()
                try:
                    self._validate()
                except (TimeoutError, HmbError, AssertionError, OSError) as e:
                    self.result.problems.append(f"validation could not finish: {type(e).__name__}: {e}")
        finally:
            try:
                for b in range(BROKERS):  # the processes' last words, shutdown included
                    self._save_output(b, "end of run")
                for w in self.workers:  # after an error midway: do not leave clients running
                    if w.alive:
                        w.stop()
                        w.close(5.0)
                for reader in self.readers:
                    reader.stop()
            finally:
                # whatever failed above: a client left started here reconnects to the run's
                # (stopped) ZooKeeper for the rest of the test process
                self.zk.stop()
                self.zk.close()
            self.result.seconds = time.monotonic() - self._t0
            self._write_report()
        return self.result

    def _make_cluster(self, chroot: str) -> EmbeddedCluster:
        """The cluster of the run (not started), on ZooKeeper ``chroot``."""
        return EmbeddedCluster(
            brokers=BROKERS, zookeeper_connect=chroot, log_dir=str(self.log_dir / "cluster"), processes=True,
            **CLUSTER_SETTINGS,
        )

    def _run_producers_and_faults(self) -> None:
        from .readers import make_reader
        from .transactions import TXN_WORKERS

        kinds: dict[str, type[ProducerWorker]] = {**_WORKERS, **TXN_WORKERS}
        self.workers = [kinds[k](i, self.cluster.bootstrap, TOPIC, rate=self.rate) for i, k in enumerate(self.producer_kinds)]
        for w in self.workers:
            getattr(w, "seed", lambda _: None)(self.seed)
        for w in self.workers:
            w.start()
        self.readers = [make_reader(k, i, self.cluster, TOPIC, PARTITIONS) for i, k in enumerate(self.reader_kinds)]
        for reader in self.readers:
            reader.start()
        try:
            self._await_progress("at the start")
            for kind in self.kinds:
                f = FaultRecord(kind, sent_before={w.name: w.log.sent for w in self.workers},
                                read_before={reader.name: len(reader.seen) for reader in self.readers})
                self.result.faults.append(f)
                start = time.monotonic()
                try:
                    getattr(self, f"_{kind}")(f)
                    f.fault_s = time.monotonic() - start
                    f.recovery_s = self._recover()
                except (TimeoutError, HmbError, AssertionError) as e:
                    # The fault or the recovery did not finish: no more faults, but validate
                    # what was acknowledged so far, on whatever can be brought back.
                    f.fault_s = f.fault_s or time.monotonic() - start
                    f.problem = f"{type(e).__name__}: {e}"
                    self._event(f"{f}")
                    self._last_chance_recovery()
                    break
                self._event(f"{f}")
            # _recover ended with every producer acknowledged for values sent after the last
            # fault: the cluster serves again. Stop sending, then let the clients finish.
            self._event("stopping producers")
        finally:
            for w in self.workers:
                w.stop()
            for reader in self.readers:
                reader.stop()
            for w in self.workers:
                try:
                    w.close(30.0)
                except Exception as e:  # a client that cannot close still reported its acks
                    self.result.problems.append(f"{w.name}: close failed: {e!r}")
        self.result.idempotent = [w.name for w in self.workers if w.idempotent]
        for w in self.workers:
            self.result.sent[w.name] = w.log.sent
            self.result.acked[w.name] = len(w.log.acked)
            self.result.failed[w.name] = len(w.log.failed)
            if w.error is not None:
                self.result.problems.append(f"{w.name}: the worker died: {w.error!r}")
            unresolved = w.log.outstanding
            if unresolved:
                self._event(f"{w.name}: {unresolved} values unresolved at close (not counted as acked)")

    def _write_report(self) -> None:
        path = self.log_dir / "report.txt"
        lines = [self.result.details(), "", "events:"] + self.events
        for w in self.workers:
            errors = Counter(w.log.failed.values())
            if errors:
                lines.append(f"{w.name} failures: " + "; ".join(f"{n}x {e}" for e, n in errors.most_common(5)))
        for b, out in self.broker_output.items():
            lines += ["", f"broker {b} output:"] + out[-400:]
        path.write_text("\n".join(lines) + "\n")
        self.result.report_path = str(path)

