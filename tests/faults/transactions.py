"""Transactional producers and ``read_committed`` readers in the fault runs (KIP-98, issue 23):
0 committed lost, 0 aborted visible, 0 duplicates, whatever the faults.

Producers (:data:`TXN_KINDS`), each a :class:`~.harness.ProducerWorker` whose one "send" is
one whole transaction of :attr:`TxnWorker.chunk` sequential values, each to a partition drawn
by the run's seed: hmbclient's transactional Producer (``hmb-txn``), librdkafka through
confluent-kafka (``librdkafka-txn``) and kafka-python (``kafka-python-txn``, its
``KafkaProducer(transactional_id=...)``). A seeded choice aborts about one transaction in
:data:`ABORT_ONE_IN` on purpose. Every transaction gets one outcome (:class:`TxnLog`):

* (O1) *committed*: ``commit_transaction()`` returned (a commit that timed out and was
  resumed by calling it again, as the client APIs say, counts once it returned);
* (O2) *aborted*: commit was never called (abort on purpose, or a send failed before it);
  whatever abort_transaction() then says, nothing of it may become visible (the next
  ``init_transactions`` or the coordinator's timeout aborts what is left open);
* (O3) *unknown*: commit was called and raised (timed out for good, fenced, abortable, fatal):
  the transaction may resolve either way, but as a unit.

A producer that gets an error from which its API offers no way on (fenced, fatal, a commit or
abort that keeps failing) is closed and replaced by a new instance with the same
``transactional.id`` whose ``init_transactions()`` fences the old one and completes or aborts
what it left open, as an application would. Values of a transaction that could not even begin
(no instance could be initialised while the cluster was down) were never sent: aborted.

The judge (:func:`judge_transactions`, called by ``FaultRun._validate`` once the producers are
stopped and closed; closing initialises a fresh instance, so nothing of the ids is left open):
every partition read with ``read_committed`` from its leader up to its last stable offset,
which must reach the high watermark (J0: no transaction left dangling);

* (J1) every committed value is read exactly once (lost / duplicates);
* (J2) no aborted value is read (aborted visible);
* (J3) each unknown transaction is read completely or not at all (atomicity);
* (J4) per producer and partition, its values are read in increasing order;
* (J5) a ``read_committed`` reader during the faults (``hmb-reader-rc`` of readers.py) saw no
  aborted value, and nothing of an unknown transaction that the final read shows aborted.

The rows of the fault table for these producers read: committed values, committed lost,
duplicates, and (in the "dirty reads" column) aborted values visible.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hmbclient import FetchRequest, Producer, SimpleConsumer
from hmbclient.errors import HmbError
from rebalance import paths

from .harness import (
    CLUSTER_SETTINGS,
    FAULT_KINDS,
    PARTITIONS,
    RECOVERY_TIMEOUT_S,
    TOPIC,
    FaultRecord,
    FaultRun,
    ProducerWorker,
    _wait,
    encode_value,
)

__all__ = ["ABORT_ONE_IN", "TXN_KINDS", "TXN_WORKERS", "TxnFaultRun", "TxnLog", "judge_transactions", "read_committed"]

log = logging.getLogger("tests.faults")

#: About one transaction in this many is aborted on purpose (a seeded choice).
ABORT_ONE_IN = 5
#: Seconds a commit or abort may take before it counts as timed out (then resumed once).
END_TIMEOUT_S = 15.0
#: Seconds init_transactions() may take for a new instance (the cluster may be down).
INIT_TIMEOUT_S = 20.0
TRANSACTION_TIMEOUT_MS = 30_000
TXN_TOPIC = "__transaction_state"

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"


@dataclass
class Txn:
    values: list[tuple[int, int]]  # (value, partition), in send order
    outcome: str = ""
    error: str = ""


@dataclass
class TxnLog:
    """Every transaction of one producer, each value in exactly one of them."""

    txns: list[Txn] = field(default_factory=list)
    by_value: dict[int, int] = field(default_factory=dict)  # value -> index in txns
    replaced: int = 0  # instances replaced (fenced, fatal, stuck)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, txn: Txn) -> None:
        with self.lock:
            for v, _ in txn.values:
                self.by_value[v] = len(self.txns)
            self.txns.append(txn)

    def outcome_of(self, value: int) -> str | None:
        i = self.by_value.get(value)
        return None if i is None else self.txns[i].outcome

    def counts(self) -> Counter[str]:
        return Counter(t.outcome for t in self.txns)


class TxnWorker(ProducerWorker):
    """One transaction per ``_send``: begin, send the values, then commit (or abort on purpose),
    recording the outcome; the values' AckLog entries follow (committed: acked at offset -1,
    the offset being unknown to some clients; otherwise failed with the outcome), so the
    harness's progress waits and loss checks see committed values as acknowledged."""

    chunk = 4
    idempotent = True  # each value is sent once, by an idempotent (transactional) producer

    def __init__(self, index: int, bootstrap: str, topic: str, **kw: Any) -> None:
        super().__init__(index, bootstrap, topic, **kw)
        self.txn_log = TxnLog()
        self.transactional_id = f"faults-{self.kind}-{index}"
        self.rng = random.Random(f"txn-{index}-{kw.get('rate')}")
        self.producer: Any = None
        #: the current transaction's send results, where the client gives them
        self.sends: list[Any] = []
        #: transactions whose sends failed although the client would have committed them
        self.send_failures = 0

    def seed(self, seed: int) -> None:
        self.rng = random.Random(f"txn-{seed}-{self.transactional_id}")

    # what a client does (subclasses)
    def _new(self) -> Any:
        raise NotImplementedError

    def _init(self, p: Any) -> None:
        p.init_transactions(INIT_TIMEOUT_S)

    def _produce(self, value: int, partition: int) -> None:
        raise NotImplementedError

    def _before_commit(self) -> None:
        """What the application must check before it commits (nothing, where the client's
        commit fails when a send of the transaction failed, as Java's and librdkafka's do)."""

    def _commit(self) -> None:
        self.producer.commit_transaction(END_TIMEOUT_S)

    def _abort(self) -> None:
        self.producer.abort_transaction(END_TIMEOUT_S)

    def _drop(self, p: Any) -> None:
        """Close an instance that is given up (its in-flight work is abandoned)."""
        raise NotImplementedError

    # the transaction
    def _open(self) -> None:
        self._replace(first=True)

    def _replace(self, first: bool = False) -> bool:
        """A fresh instance with the same transactional.id, initialised; False if that did not
        work now (the next transaction tries again)."""
        if self.producer is not None:
            try:
                self._drop(self.producer)
            except Exception:  # noqa: BLE001 - a broken client that will not close is dropped anyway
                log.debug("%s: closing the old instance failed", self.name, exc_info=True)
            self.producer = None
            self.txn_log.replaced += 1
        p = self._new()
        try:
            self._init(p)
        except Exception as e:  # noqa: BLE001 - the cluster may be down: tried again later
            log.info("%s: init_transactions failed: %r", self.name, e)
            try:
                self._drop(p)
            except Exception:  # noqa: BLE001
                pass
            if first:
                raise
            return False
        self.producer = p
        return True

    def _send(self, values: list[int]) -> None:
        txn = Txn([(v, self.rng.randrange(PARTITIONS)) for v in values])
        abort = self.rng.randrange(ABORT_ONE_IN) == 0
        if self.producer is None and not self._replace():
            self._settle(txn, ABORTED, "not sent: no initialised instance")
            self._stop.wait(0.5)
            return
        commit_called = False
        try:
            self.producer.begin_transaction()
            self.sends = []
            for v, p in txn.values:
                self._produce(v, p)
            if abort:
                self._finish_abort(txn, "aborted on purpose")
                return
            self._before_commit()
            commit_called = True
            self._finish_commit(txn)
        except Exception as e:  # noqa: BLE001 - any client error is an outcome to record
            if commit_called:
                self._settle(txn, UNKNOWN, f"commit failed: {e!r}")
            else:
                self._finish_abort(txn, f"send failed: {e!r}")

    def _finish_commit(self, txn: Txn) -> None:
        """(O1)/(O3): commit; a timed-out commit is resumed once (both APIs allow it)."""
        try:
            self._commit()
        except Exception as first:  # noqa: BLE001
            if self._retriable(first):
                try:
                    self._commit()
                    self._settle(txn, COMMITTED)
                    return
                except Exception as e:  # noqa: BLE001
                    first = e
            self._settle(txn, UNKNOWN, f"commit failed: {first!r}")
            if self._abortable(first):
                try:
                    self._abort()
                    return
                except Exception:  # noqa: BLE001
                    pass
            self._replace()
            return
        self._settle(txn, COMMITTED)

    def _finish_abort(self, txn: Txn, why: str) -> None:
        """(O2): commit was never called; abort, or replace the instance if abort fails."""
        self._settle(txn, ABORTED, why)
        try:
            self._abort()
        except Exception as e:  # noqa: BLE001
            if self._retriable(e):
                try:
                    self._abort()
                    return
                except Exception:  # noqa: BLE001
                    pass
            self._replace()

    def _retriable(self, e: BaseException) -> bool:
        return False

    def _abortable(self, e: BaseException) -> bool:
        return False

    def _settle(self, txn: Txn, outcome: str, error: str = "") -> None:
        txn.outcome = outcome
        txn.error = error[:200]
        self.txn_log.add(txn)
        for v, p in txn.values:
            if outcome == COMMITTED:
                self.log.on_ack(v, p, -1)
            else:
                self.log.on_error(v, f"{outcome}: {error}")

    def _close(self, timeout_s: float) -> None:
        self.txn_log.replaced -= self.producer is not None  # not a replacement, the last init
        # A fresh instance's init_transactions completes or aborts whatever an earlier one left
        # open, so the final read_committed read is not held back by a dangling transaction.
        deadline = time.monotonic() + timeout_s
        while not self._replace() and time.monotonic() < deadline:
            time.sleep(0.5)
        if self.producer is not None:
            self._drop(self.producer)
            self.producer = None


class HmbTxnWorker(TxnWorker):
    kind = "hmb-txn"

    def _new(self) -> Any:
        return Producer(
            metadata_broker_list=self.bootstrap, producer_type="async", request_required_acks=-1,
            transactional_id=self.transactional_id, transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            message_send_max_retries=40, retry_backoff_ms=250, request_timeout_ms=10_000, client_id=f"faults-{self.kind}",
        )

    def _produce(self, value: int, partition: int) -> None:
        self.producer.send_record(self.topic, encode_value(value), partition=partition)

    def _retriable(self, e: BaseException) -> bool:
        from hmbclient.errors import RequestTimedOutError

        return isinstance(e, RequestTimedOutError)

    def _abortable(self, e: BaseException) -> bool:
        from hmbclient.errors import TransactionAbortableError

        return isinstance(e, TransactionAbortableError)

    def _drop(self, p: Any) -> None:
        p.close(1.0)


class LibrdkafkaTxnWorker(TxnWorker):
    kind = "librdkafka-txn"

    def _new(self) -> Any:
        import confluent_kafka

        return confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, "acks": "all", "linger.ms": 5,
            "retry.backoff.ms": 250, "request.timeout.ms": 10_000, "message.timeout.ms": 25_000,
            "client.id": f"faults-{self.kind}", "logger": logging.getLogger("tests.faults.librdkafka"),
        })

    def _produce(self, value: int, partition: int) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value=encode_value(value), partition=partition)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _err(self, e: BaseException) -> Any:
        return e.args[0] if e.args and hasattr(e.args[0], "retriable") else None

    def _retriable(self, e: BaseException) -> bool:
        err = self._err(e)
        return err is not None and err.retriable()

    def _abortable(self, e: BaseException) -> bool:
        err = self._err(e)
        return err is not None and err.txn_requires_abort()

    def _drop(self, p: Any) -> None:
        p.purge()
        p.flush(1.0)


class KafkaPythonTxnWorker(TxnWorker):
    kind = "kafka-python-txn"

    def _new(self) -> Any:
        from kafka import KafkaProducer

        return KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","), transactional_id=self.transactional_id,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, acks="all", retry_backoff_ms=250,
            request_timeout_ms=10_000, delivery_timeout_ms=25_000, linger_ms=5, max_block_ms=INIT_TIMEOUT_S * 1000,
            client_id=f"faults-{self.kind}",
        )

    def _init(self, p: Any) -> None:
        p.init_transactions()

    def _produce(self, value: int, partition: int) -> None:
        self.sends.append(self.producer.send(self.topic, value=encode_value(value), partition=partition))

    def _before_commit(self) -> None:
        """kafka-python's commit_transaction() commits even when a batch of the transaction
        failed with a retriable error it could not retry (its Sender._dispatch_error: "just
        fail the batch without any state transition"; Java and librdkafka make the
        transaction abortable), so its values are missing from a committed transaction. The
        application's way around: flush, and abort unless every send succeeded."""
        self.producer.flush(timeout=END_TIMEOUT_S)
        failed = [f.exception for f in self.sends if not f.is_done or f.failed()]
        if failed:
            self.send_failures += 1
            raise RuntimeError(f"{len(failed)} send(s) of the transaction failed or are unresolved: {failed[0]!r}")

    # commit_transaction()/abort_transaction() wait without a bound (result.wait()): the
    # same steps, with a bounded wait; a timed-out one is resumed by waiting on it again.
    _pending: Any = None

    def _end(self, begin: str) -> None:
        if self._pending is None:
            self._pending = getattr(self.producer._transaction_manager, begin)()
            self.producer._sender.wakeup()
        pending = self._pending
        try:
            done = pending.wait(timeout_ms=END_TIMEOUT_S * 1000)
        except Exception:
            self._pending = None
            raise
        if not done:
            raise TimeoutError(f"{begin} not done in {END_TIMEOUT_S:.0f} s")
        self._pending = None

    def _commit(self) -> None:
        self._end("begin_commit")

    def _abort(self) -> None:
        self._end("begin_abort")

    def _retriable(self, e: BaseException) -> bool:
        return isinstance(e, TimeoutError)

    def _drop(self, p: Any) -> None:
        self._pending = None
        p.close(timeout=1)


TXN_KINDS = ("hmb-txn", "librdkafka-txn", "kafka-python-txn")
TXN_WORKERS: dict[str, type[TxnWorker]] = {w.kind: w for w in (HmbTxnWorker, LibrdkafkaTxnWorker, KafkaPythonTxnWorker)}


# -- the judge -------------------------------------------------------------------------------


def read_committed(run: FaultRun, partition: int) -> list[tuple[int, bytes | None]]:
    """``partition`` read with read_committed from its leader, up to its last stable offset,
    which must have reached the high watermark (J0; waited for, bounded).

    Raises:
        TimeoutError: the last stable offset stayed below the high watermark (a transaction
            left dangling).
    """
    out: list[tuple[int, bytes | None]] = []

    def attempt() -> bool:
        out.clear()
        leader = run.cluster.leader(TOPIC, partition)
        assert leader is not None and leader >= 0, f"{TOPIC}-{partition} has no leader"
        b = run.cluster.broker(leader)
        consumer = SimpleConsumer(b.host, b.port, client_id="faults-validation-rc", isolation_level="read_committed")
        try:
            offset = 0
            while True:
                ms = consumer.fetch(FetchRequest(TOPIC, partition, offset, 1 << 20))
                out.extend((mo.offset, mo.message.value) for mo in ms)
                nxt = ms.next_offset
                if nxt <= offset:
                    return ms.last_stable_offset >= 0 and ms.last_stable_offset == ms.high_watermark
                offset = nxt
        finally:
            consumer.close()

    _wait(f"{TOPIC}-{partition}: the last stable offset to reach the high watermark (read_committed)", attempt, 60)
    return out


def judge_transactions(run: FaultRun) -> tuple[dict[str, dict[str, list[int]]], dict[str, list[tuple[int, int]]]]:
    """(J0)-(J5) for the run's transactional producers and read_committed readers; problems into
    ``run.result.problems``, figures into ``run.result.notes``, aborted values a read_committed
    reader saw added to its ``run.result.dirty_reads``. Returns the table marks per producer
    (send positions of committed ("ok"), committed lost, duplicated and aborted visible
    ("dirty") values) and per read_committed reader the (partition, offset) it read of
    aborted transactions."""
    r = run.result
    workers = [w for w in run.workers if isinstance(w, TxnWorker)]
    marks: dict[str, dict[str, list[int]]] = {}
    rc_bad: dict[str, list[tuple[int, int]]] = {}
    if not workers:
        return marks, rc_bad
    try:
        read = {p: read_committed(run, p) for p in range(PARTITIONS)}
    except (TimeoutError, HmbError, AssertionError, OSError) as e:
        r.problems.append(f"read_committed validation could not finish: {type(e).__name__}: {e}")
        return marks, rc_bad
    where: dict[int, list[tuple[int, int]]] = {}  # value -> [(partition, offset)]
    for p, records in read.items():
        for offset, data in records:
            try:
                where.setdefault(int(data or b""), []).append((p, offset))
            except ValueError:
                r.problems.append(f"read_committed {TOPIC}-{p}@{offset}: a value no producer sent: {data!r}")
    for w in workers:
        tl = w.txn_log
        base = w.log.base
        m = marks[w.name] = {"ok": [], "lost": [], "dup": [], "dirty": []}
        lost, dups, visible, torn = [], 0, [], []
        for t in tl.txns:
            seen = [len(where.get(v, ())) for v, _ in t.values]
            for (v, p), n in zip(t.values, seen, strict=True):
                if n > 1:
                    dups += n - 1
                    m["dup"] += [v - base] * (n - 1)
                if n and where[v][0][0] != p:
                    r.problems.append(f"{w.name}: value {v} sent to {TOPIC}-{p}, read in {TOPIC}-{where[v][0][0]}")
            if t.outcome == COMMITTED:  # (J1)
                m["ok"] += [v - base for v, _ in t.values]
                for (v, _), n in zip(t.values, seen, strict=True):
                    if n == 0:
                        lost.append(v)
                        m["lost"].append(v - base)
            elif t.outcome == ABORTED:  # (J2)
                for (v, _), n in zip(t.values, seen, strict=True):
                    if n:
                        visible.append(v)
                        m["dirty"].append(v - base)
            elif any(seen) and not all(seen):  # (J3)
                torn.append(f"{[v for v, _ in t.values]} read {seen} ({t.error})")
        # (J4) per partition, this producer's values in increasing order
        disorder = 0
        for records in read.values():
            last = -1
            for _, data in records:
                try:
                    v = int(data or b"")
                except ValueError:
                    continue
                if w.log.owns(v):
                    disorder += v <= last
                    last = max(last, v)
        c = tl.counts()
        r.notes.append(f"{w.name}: {len(tl.txns)} transactions: {c[COMMITTED]} committed, {c[ABORTED]} aborted, "
                       f"{c[UNKNOWN]} unknown ({sum(1 for t in tl.txns if t.outcome == UNKNOWN and all(where.get(v) for v, _ in t.values))} "
                       f"of them visible); {tl.replaced} instance(s) replaced"
                       + (f"; {w.send_failures} aborted for a failed send the client would have committed" if w.send_failures else ""))
        if lost:
            r.problems.append(f"{w.name}: {len(lost)} committed value(s) not read with read_committed, first {lost[:5]}")
        if dups:
            r.problems.append(f"{w.name}: {dups} duplicate(s) read with read_committed")
        if visible:
            r.problems.append(f"{w.name}: {len(visible)} aborted value(s) visible to read_committed, first {visible[:5]}")
        if torn:
            r.problems.append(f"{w.name}: {len(torn)} unknown transaction(s) partly visible, first {torn[0]}")
        if disorder:
            r.problems.append(f"{w.name}: {disorder} value(s) read_committed out of send order")
    # (J5) read_committed readers during the faults
    for reader in run.readers:
        if not getattr(reader, "read_committed", False):
            continue
        bad: list[str] = []
        keys = rc_bad[reader.name] = []
        for (p, o), data in reader.seen.items():
            try:
                v = int(data or b"")
            except ValueError:
                continue
            for w in workers:
                if w.log.owns(v):
                    outcome = w.txn_log.outcome_of(v)
                    if outcome == ABORTED or (outcome == UNKNOWN and not where.get(v)):
                        bad.append(f"{TOPIC}-{p}@{o} = {v} ({w.name}, {outcome})")
                        keys.append((p, o))
        r.dirty_reads[reader.name] = r.dirty_reads.get(reader.name, 0) + len(bad)
        if bad:
            r.problems.append(f"{reader.name} (read_committed): {len(bad)} value(s) of aborted transactions read, first {bad[0]}")
    return marks, rc_bad


# -- a fault of their own --------------------------------------------------------------------


class TxnFaultRun(FaultRun):
    """A :class:`~.harness.FaultRun` that knows one more fault: ``kill_txn_coordinator``, a
    SIGKILL of the leader of the ``__transaction_state`` partition that coordinates one of the
    run's transactional ids (drawn by the seed); it ends when that partition and every
    partition the broker led have new leaders, then the broker is restarted. Transactions in
    flight then meet a coordinator that moves (its state reloaded from the replicated log)."""

    fault_kinds = (*FAULT_KINDS, "kill_txn_coordinator")

    def _kill_txn_coordinator(self, f: FaultRecord) -> None:
        from hmbclient.broker.config import BrokerConfig
        from hmbclient.broker.transaction.log import partition_for

        ids = sorted(w.transactional_id for w in self.workers if isinstance(w, TxnWorker))
        assert ids, "kill_txn_coordinator needs a transactional producer"
        tid = self.rng.choice(ids)
        n = int(CLUSTER_SETTINGS.get("transaction_state_log_num_partitions", BrokerConfig().transaction_state_log_num_partitions))
        tp = partition_for(tid, n)

        def leader() -> int:
            data = self.zk.get(paths.partition_state_path(TXN_TOPIC, tp))[0]
            return paths.decode_partition_state(data).leader

        victim = leader()
        moved = self._led_by(victim)
        f.detail = f"{tid}: {TXN_TOPIC}-{tp} on broker {victim}"
        self._event(f"SIGKILL broker {victim}, transaction coordinator of {tid!r} ({TXN_TOPIC}-{tp}; leader of {moved})")
        self._save_output(victim, "killed")
        self.cluster.kill(victim)
        self._deregistered(victim)
        _wait(f"a new leader of {TXN_TOPIC}-{tp}", lambda: leader() not in (-1, victim), RECOVERY_TIMEOUT_S)
        self._leaderships_moved(victim, moved)
        self._event(f"{TXN_TOPIC}-{tp} led by broker {leader()}; restarting broker {victim}")
        self.cluster.restart(victim, timeout_s=RECOVERY_TIMEOUT_S)

    def _await_progress(self, when: str) -> None:
        """As the harness's; when it times out, the events first get each transactional id as
        its coordinator describes it (state, epoch, partitions): a transaction stuck in
        Prepare* (markers not all written) shows there."""
        try:
            super()._await_progress(when)
        except (TimeoutError, AssertionError):
            self._describe_transactions()
            raise

    def _describe_transactions(self) -> None:
        from hmbclient.admin import describe_transactions

        for w in self.workers:
            if not isinstance(w, TxnWorker):
                continue
            try:
                (info,) = describe_transactions(self.cluster.bootstrap, [w.transactional_id], timeout_ms=5000)
                self._event(f"{w.name}: {info}; {w.log.acked_since(0)} committed, {w.txn_log.counts()}")
            except Exception as e:  # noqa: BLE001 - a diagnostic: never the reason a run fails
                self._event(f"{w.name}: {w.transactional_id} could not be described: {e!r}")
