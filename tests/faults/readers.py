"""Readers during the fault runs: consumers that read while the faults happen, remembering
every record they were served, so that the run can judge afterwards that none of them read
a record the final log does not hold at that offset (a dirty read: a value served above the
high watermark of a leader that then lost it), and that committed offsets never moved back.

Kinds (:data:`READER_KINDS`):

* ``hmb-reader``: hmbclient's :class:`SimpleConsumer` on each partition's leader, as the
  metadata of whichever broker answers names it (so a stale, isolated leader is read too, as a
  client with old metadata would). It follows no group.
* ``hmb-reader-rc``: the same with ``isolation.level=read_committed``: besides the dirty-read
  check, the run's transaction judge (transactions.py, J5) fails it for any value of an aborted
  transaction it was served.
* ``hmb-group``: hmbclient's high-level consumer (``Consumer.create``, the group balanced by
  the brokers' coordinator), auto commit off; after every batch (or a quiet
  ``consumer.timeout.ms``) it commits (``commit_offsets``) and reads the group's committed
  offsets back through a second client (librdkafka's ``committed``, which keeps asking the
  coordinator it found first): judged as below.
* ``librdkafka-group``: confluent-kafka's Consumer in a group, auto commit off; after every
  batch it commits synchronously what it consumed, then reads the group's committed offsets
  back: at the end, one lower than the last successful commit is a problem ("moved back");
  during a fault, a lower one is a *stale commit read* (counted and reported: see
  ``_check_committed``).

Each reader is a daemon thread that only records; the run judges (``FaultRun._judge_readers``).
Seeing the same (partition, offset) with two different values is recorded at once as a problem.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import Any

from hmbclient import FetchRequest, SimpleConsumer
from hmbclient.errors import HmbError

__all__ = ["READER_KINDS", "make_reader"]

log = logging.getLogger("tests.faults")

READER_KINDS = ("hmb-reader", "hmb-reader-rc", "hmb-group", "librdkafka-group")


class Reader:
    kind = ""
    #: reads with isolation.level=read_committed (judged by transactions.py too)
    read_committed = False

    def __init__(self, index: int, cluster: Any, topic: str, partitions: int) -> None:
        self.name = f"{self.kind}#{index}"
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.seen: dict[tuple[int, int], bytes | None] = {}
        self.problems: list[str] = []
        #: committed offsets read back lower than committed, during a fault (see _check_committed)
        self.stale_commit_reads: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"faults-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _record(self, partition: int, offset: int, value: bytes | None) -> None:
        key = (partition, offset)
        if key in self.seen and self.seen[key] != value:
            self.problems.append(f"{self.topic}-{partition}@{offset} read as {self.seen[key]!r}, later as {value!r}")
        self.seen[key] = value

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as e:  # a reader must not die quietly
            self.problems.append(f"the reader died: {e!r}")
            log.exception("%s: reader died", self.name)

    def _run(self) -> None:
        raise NotImplementedError


class HmbReader(Reader):
    kind = "hmb-reader"

    def _run(self) -> None:
        positions = dict.fromkeys(range(self.partitions), 0)
        consumers: dict[int, SimpleConsumer] = {}
        leaders: dict[int, int] = {}
        try:
            while not self._stop.is_set():
                for p in range(self.partitions):
                    try:
                        if p not in leaders:
                            leader = self.cluster.leader(self.topic, p)
                            if leader is None or leader < 0:
                                continue
                            leaders[p] = leader
                        b = leaders[p]
                        if b not in consumers:
                            broker = self.cluster.broker(b)
                            consumers[b] = SimpleConsumer(
                                broker.host, broker.port, client_id=f"faults-{self.name}", socket_timeout_ms=5000,
                                isolation_level="read_committed" if self.read_committed else "read_uncommitted",
                            )
                        ms = consumers[b].fetch(FetchRequest(self.topic, p, positions[p], 1 << 18))
                        got = list(ms)
                    except (HmbError, OSError, KeyError):
                        b = leaders.pop(p, -1)
                        c = consumers.pop(b, None)
                        if c is not None:
                            c.close()
                        self._stop.wait(0.1)
                        continue
                    for mo in got:
                        self._record(p, mo.offset, mo.message.value)
                    # past markers and aborted records too (a set of only those yields nothing)
                    positions[p] = max(positions[p], ms.next_offset)
                self._stop.wait(0.05)
        finally:
            for c in consumers.values():
                c.close()


class LibrdkafkaGroupReader(Reader):
    kind = "librdkafka-group"

    def _run(self) -> None:
        import confluent_kafka

        group = f"faults-{uuid.uuid4().hex[:8]}"
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10_000, "client.id": f"faults-{self.name}",
            "logger": logging.getLogger("tests.faults.librdkafka"),
        })
        committed: dict[int, int] = {}  # the highest offset each partition was committed at
        consumed: dict[int, int] = {}
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None:
                        self._record(msg.partition(), msg.offset(), msg.value())
                        consumed[msg.partition()] = msg.offset() + 1
                pending = {p: o for p, o in consumed.items() if committed.get(p, -1) < o}
                if pending:
                    self._commit(consumer, pending, committed)
            _check_committed(self, consumer, committed, final=True)
        finally:
            consumer.close()

    def _commit(self, consumer: Any, offsets: dict[int, int], committed: dict[int, int]) -> None:
        import confluent_kafka

        tps = [confluent_kafka.TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        try:
            done = consumer.commit(offsets=tps, asynchronous=False)
        except confluent_kafka.KafkaException:
            return  # not committed (a coordinator moving): tried again with the next batch
        for tp in done or ():
            if tp.error is None:
                committed[tp.partition] = max(committed.get(tp.partition, -1), tp.offset)
        _check_committed(self, consumer, committed, final=False)


class HmbGroupReader(Reader):
    kind = "hmb-group"

    def _run(self) -> None:
        import confluent_kafka

        from hmbclient.consumer.connector import Consumer
        from hmbclient.errors import ConsumerTimeoutError

        group = f"faults-hmb-{uuid.uuid4().hex[:8]}"
        connector = Consumer.create({
            "bootstrap.servers": self.cluster.bootstrap, "group.id": group, "group.protocol": "broker",
            "auto.offset.reset": "smallest", "auto.commit.enable": False, "consumer.timeout.ms": 200,
            "client.id": f"faults-{self.name}",
        })
        checker = confluent_kafka.Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                                            "logger": logging.getLogger("tests.faults.librdkafka")})
        committed: dict[int, int] = {}
        handed: dict[int, int] = {}
        try:
            stream = connector.create_message_streams({self.topic: 1})[self.topic][0]
            it = iter(stream)
            while not self._stop.is_set():
                try:
                    for _ in range(500):
                        mm = next(it)
                        self._record(mm.partition, mm.offset, mm.message)
                        handed[mm.partition] = mm.offset + 1
                except ConsumerTimeoutError:
                    pass
                if not any(committed.get(p, -1) < o for p, o in handed.items()):
                    continue
                try:
                    connector.commit_offsets()
                except HmbError:
                    continue  # not committed (a coordinator moving): the next commit writes the same or later
                for p, o in handed.items():
                    committed[p] = max(committed.get(p, -1), o)
                _check_committed(self, checker, committed, final=False)
            _check_committed(self, checker, committed, final=True)
        finally:
            connector.shutdown()
            checker.close()


def _check_committed(reader: Reader, consumer: Any, committed: dict[int, int], *, final: bool) -> None:
    """The group's committed offsets, read back: none below what was committed successfully.

    Cases: read back lower at the end (every link healed, the run recovered) -> a problem (a
    commit was lost). Read back lower during a fault -> a *stale commit read*, counted and
    reported, not failed: the reading client may still ask a broker that was the group's
    coordinator before it was cut off from ZooKeeper and goes on answering OffsetFetch from
    its cache until it learns, on reconnecting, that its session is gone (ZooKeeper-mode Kafka
    has the same zombie window; the final read shows whether anything was lost)."""
    import confluent_kafka

    try:
        back = consumer.committed([confluent_kafka.TopicPartition(reader.topic, p) for p in committed], timeout=10)
    except confluent_kafka.KafkaException as e:
        if final:
            reader.problems.append(f"the committed offsets could not be read at the end: {e}")
        return
    for tp in back:
        if tp.error is None and tp.offset < committed[tp.partition]:
            text = (f"committed offset of {reader.topic}-{tp.partition} moved back: {tp.offset} read after "
                    f"{committed[tp.partition]} was committed{' (at the end)' if final else ''}")
            (reader.problems if final else reader.stale_commit_reads).append(text)


class HmbCommittedReader(HmbReader):
    kind = "hmb-reader-rc"
    read_committed = True


_READERS: dict[str, type[Reader]] = {r.kind: r for r in (HmbReader, HmbCommittedReader, HmbGroupReader, LibrdkafkaGroupReader)}


def make_reader(kind: str, index: int, cluster: Any, topic: str, partitions: int) -> Reader:
    """A reader of ``kind`` (see :data:`READER_KINDS`), not started."""
    return _READERS[kind](index, cluster, topic, partitions)
