"""Spark's own Kafka connector (``format("kafka")``, org.apache.spark:spark-sql-kafka-0-10)
and our ``format("hmb")`` on the same Apache Kafka 4.x broker and data, batch: each writes the
same rows to a topic of three partitions, each reads both topics, and both readers return the
same rows (topic, partition, offset, key, value) for each topic, which are the rows written.
Streaming: readStream with each format over one topic (availableNow, several micro-batches)
into a memory sink returns the same rows (spark_stream_compare.py). Streaming write: one
streaming read written with writeStream.format("kafka") and writeStream.format("hmb") to two
topics, each read back by Kafka's Java consumer, holds the same rows (spark_stream_write.py).

Version note: pyspark here is 4.3.0, whose connector Maven Central does not serve; the
connector is 4.2.0 (peers/spark-kafka/pom.xml), the newest it serves, and works unchanged.

The Spark job runs in its own interpreter (spark_compare.py): one SparkContext per process,
and the suite's other Spark tests hold theirs with other jars.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hmbclient import Producer, ProducerData, admin
from hmbclient.testing.apache_kafka import spark_kafka_connector_jars

from .helpers import java_read_all, unique

ROWS = 600


def test_kafka_and_hmb_formats_agree_on_the_same_broker(kafka4):
    prefix = unique("spark")
    for writer in ("kafka", "hmb"):
        admin.create_topic(kafka4.bootstrap, f"{prefix}-by-{writer}", 3, 1)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("spark_compare.py")), kafka4.bootstrap, prefix, str(ROWS),
         ",".join(spark_kafka_connector_jars())],
        capture_output=True, text=True, timeout=600,
    )
    result = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and result, done.stderr[-4000:]
    out = json.loads(result[len("RESULT "):])
    expected = sorted((f"k{i % 17}", f"row {i}") for i in range(ROWS))
    for writer in ("kafka", "hmb"):
        by_kafka, by_hmb = out[writer]["kafka"], out[writer]["hmb"]
        assert by_kafka == by_hmb, f"the two readers differ on the topic {writer} wrote"
        assert sorted((k, v) for _t, _p, _o, k, v in by_kafka) == expected, writer
        partitions = {p for _t, p, _o, _k, _v in by_kafka}
        assert partitions == {0, 1, 2}, (writer, partitions)
        # Offsets in each partition are dense from 0: nothing skipped, nothing doubled.
        for p in partitions:
            assert sorted(o for _t, q, o, _k, _v in by_kafka if q == p) == list(range(
                sum(1 for row in by_kafka if row[1] == p)))


STREAM_ROWS = 900
PER_TRIGGER = 200


def test_kafka_and_hmb_streaming_reads_agree(kafka4):
    """Streaming: readStream.format("kafka") and readStream.format("hmb") over the same topic of
    three partitions (written by hmbclient, keyed), trigger availableNow with
    maxOffsetsPerTrigger so each takes several micro-batches, into a memory sink: the same rows,
    which are the rows written, each once."""
    topic = unique("sparkstream")
    admin.create_topic(kafka4.bootstrap, topic, 3, 1)
    with Producer(metadata_broker_list=kafka4.bootstrap, request_required_acks=-1) as producer:
        for f in [f for i in range(STREAM_ROWS)
                  for f in producer.send(ProducerData(topic, f"k{i % 13}".encode(), [f"srow {i}".encode()]))]:
            f.result(timeout=60)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("spark_stream_compare.py")), kafka4.bootstrap, topic,
         str(PER_TRIGGER), ",".join(spark_kafka_connector_jars())],
        capture_output=True, text=True, timeout=600,
    )
    result = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and result, done.stderr[-4000:]
    out = json.loads(result[len("RESULT "):])
    by_kafka, by_hmb = out["kafka"]["rows"], out["hmb"]["rows"]
    assert by_kafka == by_hmb, "the two streaming readers differ"
    assert sorted((k, v) for _t, _p, _o, k, v in by_kafka) == sorted(
        (f"k{i % 13}", f"srow {i}") for i in range(STREAM_ROWS))
    assert {p for _t, p, _o, _k, _v in by_kafka} == {0, 1, 2}
    for name in ("kafka", "hmb"):
        batches = out[name]["batches"]
        assert sum(batches) == STREAM_ROWS and len(batches) >= 3 and max(batches) <= PER_TRIGGER, (name, batches)


WRITE_ROWS = 900


def test_kafka_and_hmb_streaming_writes_agree(kafka4):
    """Streaming write: one keyed source topic of three partitions (written by hmbclient), read
    as a stream (availableNow, several micro-batches) and written with
    writeStream.format("kafka") to one topic and writeStream.format("hmb") to another, each of
    three partitions: read back by Kafka's Java consumer, each holds exactly the source's
    (key, value) rows, each once; each key lies in one partition, in the source's order there,
    and the partition offsets are dense from 0."""
    source, to_kafka, to_hmb = (unique(f"sparkw-{name}") for name in ("src", "kafka", "hmb"))
    for topic in (source, to_kafka, to_hmb):
        admin.create_topic(kafka4.bootstrap, topic, 3, 1)
    rows = [(f"k{i % 13}".encode(), f"wrow {i}".encode()) for i in range(WRITE_ROWS)]
    with Producer(metadata_broker_list=kafka4.bootstrap, request_required_acks=-1) as producer:
        for f in [f for k, v in rows for f in producer.send(ProducerData(source, k, [v]))]:
            f.result(timeout=60)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("spark_stream_write.py")), kafka4.bootstrap, source,
         to_kafka, to_hmb, str(PER_TRIGGER), ",".join(spark_kafka_connector_jars())],
        capture_output=True, text=True, timeout=600,
    )
    result = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert done.returncode == 0 and result, done.stderr[-4000:]
    batches = json.loads(result[len("RESULT "):])
    for name in ("kafka", "hmb"):
        assert sum(batches[name]) == WRITE_ROWS and len(batches[name]) >= 3, (name, batches[name])
        assert max(batches[name]) <= PER_TRIGGER, (name, batches[name])
    # The source's own per-key order, as Kafka's Java consumer reads it back.
    source_rows = java_read_all(kafka4.bootstrap, source, WRITE_ROWS)
    assert sorted((k, v) for _t, _p, _o, k, v in source_rows) == sorted(rows)
    by_key: dict[bytes, list[bytes]] = {}
    for _t, _p, _o, k, v in sorted(source_rows, key=lambda r: (r[1], r[2])):
        by_key.setdefault(k, []).append(v)
    for name, topic in (("kafka", to_kafka), ("hmb", to_hmb)):
        written = java_read_all(kafka4.bootstrap, topic, WRITE_ROWS)
        assert sorted((k, v) for _t, _p, _o, k, v in written) == sorted(rows), name
        for p in {p for _t, p, _o, _k, _v in written}:
            offsets = sorted(o for _t, q, o, _k, _v in written if q == p)
            assert offsets == list(range(len(offsets))), (name, p)
        for key, values in by_key.items():
            mine = sorted((p, o, v) for _t, p, o, k, v in written if k == key)
            assert len({p for p, _o, _v in mine}) == 1, (name, key, "spread over partitions")
            assert [v for _p, _o, v in mine] == values, (name, key, "out of the source's order")
