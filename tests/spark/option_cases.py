"""The option cases shared by the Spark option tests (imported as ``option_cases``; not a test
module): each case names a Spark option and checks what it does through
``spark.read.format("hmb")``, on whatever session it is given -- the local[2] one
(test_spark_options.py runs :data:`BATCH`) or the standalone cluster, where tasks read in
executor JVMs of their own (test_spark_cluster.py runs :data:`EXECUTOR`: the options that act
in the tasks, not only in planning on the driver).

Data of the :data:`BATCH` cases (:func:`fill_option_topic`): one topic of 4 partitions x 20
messages, message i of every partition stamped ``BASE + i * 1000`` ms (CreateTime), the even
ones with a header.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from spark_helpers import create_topic
from waiting import wait_until

TOPIC = "opt-a"
BASE = 1_700_000_000_000
PER = 20


def produce_stamped(bootstrap: str, topic: str, partitions: int, per: int, stamped: bool = True,
             batch_size: int = 16384) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                             batch_size=batch_size)
    try:
        for i in range(per):
            for p in range(partitions):
                producer.send(
                    topic, key=f"k{i}".encode(), value=f"{topic}-{p}-{i}".encode(), partition=p,
                    timestamp_ms=BASE + i * 1000 if stamped else None,
                    headers=[("h", f"v{i}".encode())] if i % 2 == 0 else None,
                )
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


_filled: set[str] = set()


def fill_option_topic(bootstrap: str) -> str:
    """Create and fill :data:`TOPIC` (the :data:`BATCH` cases' data) on the broker at
    ``bootstrap``, once per broker however many modules ask; returns its name."""
    if bootstrap not in _filled:
        create_topic(bootstrap, TOPIC, 4)
        produce_stamped(bootstrap, TOPIC, 4, PER)
        _filled.add(bootstrap)
    return TOPIC


def fill_transactions(bootstrap: str, topic: str) -> None:
    """Three transactions of 3 records each to partition 0 of ``topic``, the second aborted:
    offsets c1 0-2, marker 3, a 4-6, marker 7, c2 8-10, marker 11; returns once the last
    marker is written (the latest read_committed offset is 12)."""
    from hmbclient import LATEST_TIME, Producer, ProducerData, SimpleConsumer

    p = Producer(metadata_broker_list=bootstrap, transactional_id=f"spark-{topic}",
                 request_required_acks=-1)
    try:
        p.init_transactions(10)
        for name, commit in (("c1", True), ("a", False), ("c2", True)):
            p.begin_transaction()
            p.send(ProducerData(topic, None, [f"{name}-{i}".encode() for i in range(3)]))
            if commit:
                p.commit_transaction(10)
            else:
                p.abort_transaction(10)
    finally:
        p.close()
    host, port = bootstrap.rsplit(":", 1)
    # EndTxn is answered before the coordinator writes the markers: wait for the last one
    with SimpleConsumer(host, int(port), isolation_level="read_committed") as rc:
        wait_until(lambda: rc.get_offsets_before(topic, 0, LATEST_TIME, 1)[0] == 12, 10,
                   "the last transaction marker")


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_source(spark: Any, broker: Any, **options: Any) -> Any:
    reader = spark.read.format("hmb").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _offsets(df: Any) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}


def _every(lo: int, hi: int, parts: range | list[int] = range(4)) -> set[tuple[int, int]]:
    return {(p, o) for p in parts for o in range(lo, hi)}


def _headers(spark: Any, broker: Any) -> None:
    rows = read_source(spark, broker, subscribe=TOPIC, includeHeaders="true").collect()
    assert len(rows) == 4 * PER
    for r in rows:
        want = [("h", f"v{r.offset}".encode())] if r.offset % 2 == 0 else None
        got = [(h.key, bytes(h.value)) for h in r.headers] if r.headers is not None else None
        assert got == want, r
    assert "headers" not in read_source(spark, broker, subscribe=TOPIC).columns


def _timestamp_type(spark: Any, broker: Any) -> None:
    rows = read_source(spark, broker, subscribe=TOPIC).select("timestamp", "timestampType", "offset").collect()
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    assert {int(r.timestamp.timestamp() * 1000) - r.offset * 1000 for r in rows} == {BASE}


def _starting_ending_timestamp(spark: Any, broker: Any) -> None:
    df = read_source(spark, broker, subscribe=TOPIC, startingTimestamp=BASE + 5000 - 1,
               endingTimestamp=BASE + 15000)
    assert _offsets(df) == _every(5, 15)


def _by_timestamp_json(spark: Any, broker: Any) -> None:
    start = {TOPIC: {"0": BASE, "1": BASE + 3000, "2": BASE + 19_000, "3": BASE + 7500}}
    end = {TOPIC: {"0": BASE + 2000, "1": BASE + 99_000, "2": BASE + 99_000, "3": BASE + 9000}}
    df = read_source(spark, broker, subscribe=TOPIC, startingOffsetsByTimestamp=json.dumps(start),
               endingOffsetsByTimestamp=json.dumps(end))
    assert _offsets(df) == (_every(0, 2, [0]) | _every(3, PER, [1]) | _every(19, PER, [2])
                            | _every(8, 9, [3]))


def _strategy(spark: Any, broker: Any) -> None:
    late = BASE + 10 * PER * 1000
    with pytest.raises(Exception, match="no offset at or after the timestamp in opt-a-0"):
        read_source(spark, broker, subscribe=TOPIC, startingTimestamp=late).collect()
    df = read_source(spark, broker, subscribe=TOPIC, startingTimestamp=late,
               startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0


def _assign(spark: Any, broker: Any) -> None:
    df = read_source(spark, broker, assign=json.dumps({TOPIC: [1, 3]}))
    assert _offsets(df) == _every(0, PER, [1, 3])
    with pytest.raises(Exception, match="assign names partitions that do not exist: opt-a-7"):
        read_source(spark, broker, assign=json.dumps({TOPIC: [7]})).collect()


def _min_partitions(spark: Any, broker: Any) -> None:
    plain = read_source(spark, broker, subscribePattern="opt-a")
    df = read_source(spark, broker, subscribePattern="opt-a", minPartitions=10)
    assert plain.rdd.getNumPartitions() == 4
    assert df.rdd.getNumPartitions() >= 10
    assert sorted(_offsets(df)) == sorted(_every(0, PER))
    assert df.count() == 4 * PER  # each offset once across the pieces


def _max_records(spark: Any, broker: Any) -> None:
    df = read_source(spark, broker, subscribe=TOPIC, maxRecordsPerPartition=6)
    assert df.rdd.getNumPartitions() == 4 * 4  # 20 offsets per partition in pieces of <= 6
    assert df.count() == 4 * PER and _offsets(df) == _every(0, PER)


def _read_committed(spark: Any, broker: Any) -> None:
    topic = _unique("opt-txn")
    create_topic(broker.bootstrap, topic, 1)
    fill_transactions(broker.bootstrap, topic)

    def values(**options: Any) -> list[bytes]:
        rows = read_source(spark, broker, topic=topic, **options).select("offset", "value").collect()
        return [bytes(r.value) for r in sorted(rows)]

    def written(*names: str) -> list[bytes]:
        return [f"{n}-{i}".encode() for n in names for i in range(3)]

    assert values() == written("c1", "a", "c2")  # read_uncommitted: past the trailing marker
    assert values(**{"kafka.isolation.level": "read_committed"}) == written("c1", "c2")


def earliest_offset(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def _data_loss_after_planning(spark: Any, broker: Any) -> None:
    """Retention deletes the start of planned ranges before the tasks read them (``broker``
    keeps ~2 KiB per partition): failOnDataLoss=true fails the task naming the range; false
    reads what the log still holds of it, from the earliest offset on, each offset once."""
    bootstrap = broker.bootstrap
    topic = _unique("opt-loss-exec")
    create_topic(bootstrap, topic, 1)
    # Batches of at most 300 bytes: a batch larger than a segment is refused.
    produce_stamped(bootstrap, topic, 1, 60, stamped=False, batch_size=300)
    planned_from = earliest_offset(bootstrap, topic)
    rdds = {}
    for fail in ("true", "false"):
        df = read_source(spark, broker, topic=topic, failOnDataLoss=fail)
        rdds[fail] = df.rdd  # planned here: the ranges [planned_from, 60) are fixed
        assert rdds[fail].getNumPartitions() == 1
    produce_stamped(bootstrap, topic, 1, 12, stamped=False, batch_size=300)
    earliest = wait_until(lambda: (e := earliest_offset(bootstrap, topic)) > planned_from and e,
                          timeout_s=30, what="retention to delete planned offsets")
    with pytest.raises(Exception, match=rf"offset range {topic}-0 \[{planned_from}, 60\)"):
        rdds["true"].collect()
    offsets = sorted(r.offset for r in rdds["false"].collect())
    assert offsets and offsets == list(range(offsets[0], 60)), offsets
    assert offsets[0] >= earliest > planned_from


#: (Spark option, what it does) for batch reads.
BATCH: list[tuple[str, Callable[[Any, Any], None]]] = [
    ("includeHeaders", _headers),
    ("timestampType column", _timestamp_type),
    ("startingTimestamp / endingTimestamp", _starting_ending_timestamp),
    ("startingOffsetsByTimestamp / endingOffsetsByTimestamp", _by_timestamp_json),
    ("startingOffsetsByTimestampStrategy", _strategy),
    ("assign", _assign),
    ("minPartitions", _min_partitions),
    ("maxRecordsPerPartition", _max_records),
]


#: Options that act in the tasks (on executors), not only in planning on the driver: (name,
#: case, the broker fixture it reads from). Run on the standalone cluster.
EXECUTOR: list[tuple[str, Callable[[Any, Any], None], str]] = [
    *((name, case, "broker") for name, case in BATCH if name in {
        "includeHeaders", "timestampType column", "minPartitions", "maxRecordsPerPartition",
        "startingOffsetsByTimestamp / endingOffsetsByTimestamp",
    }),
    ("isolation.level read_committed", _read_committed, "broker"),
    ("failOnDataLoss after planning", _data_loss_after_planning, "small_segments"),
]
