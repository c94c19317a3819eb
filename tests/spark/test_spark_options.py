"""Spark's Kafka source option table, walked option by option against the "hmb" source.

Each row of ``option_cases.BATCH`` names a Spark option (or Spark's spelling of one) and
checks what it does on a real embedded broker through ``spark.read.format("hmb")`` on the
shared local SparkSession (the executor-side ones run on the standalone cluster too:
test_spark_cluster.py); the streaming options get their own tests (a query each); :data:`BAD`
gives each option a bad value and checks the error names the option, as Spark's do. Data: one
topic of 4 partitions x 20 messages, message i of every partition stamped
``BASE + i * 1000`` ms (CreateTime), the even ones with a header.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from option_cases import (
    BATCH,
    PER,
    TOPIC,
    earliest_offset,
    fill_option_topic,
    produce_stamped,
    read_source,
)
from spark_helpers import create_topic
from waiting import wait_until

from hmbclient.errors import ConfigError
from spark_integration.datasource import source_metrics
from spark_integration.options import parse_options

pytestmark = pytest.mark.timeout(300)

@pytest.fixture(scope="module")
def topic(broker: Any) -> str:
    return fill_option_topic(broker.bootstrap)


@pytest.mark.parametrize("check", [c for _, c in BATCH], ids=[n for n, _ in BATCH])
def test_batch_option(spark: Any, broker: Any, topic: str, check: Callable[[Any, Any], None]) -> None:
    check(spark, broker)


#: (options, streaming, the option the error must name): a bad value of each.
BAD: list[tuple[dict[str, Any], bool, str]] = [
    ({"minPartitions": "0"}, False, "minPartitions"),
    ({"maxRecordsPerPartition": "-1"}, False, "maxRecordsPerPartition"),
    ({"includeHeaders": "sometimes"}, False, "includeHeaders"),
    ({"failOnDataLoss": "perhaps"}, True, "failOnDataLoss"),
    ({"startingTimestamp": "yesterday"}, False, "startingTimestamp"),
    ({"startingTimestamp": "-5"}, False, "startingTimestamp"),
    ({"startingOffsetsByTimestamp": '{"t": {"0": "x"}}'}, False, "startingOffsetsByTimestamp"),
    ({"endingOffsetsByTimestamp": "[1]"}, False, "endingOffsetsByTimestamp"),
    ({"startingOffsetsByTimestampStrategy": "first"}, False, "startingOffsetsByTimestampStrategy"),
    ({"endingTimestamp": "1"}, True, "endingTimestamp"),
    ({"minOffsetsPerTrigger": "0"}, True, "minOffsetsPerTrigger"),
    ({"minOffsetsPerTrigger": "5"}, False, "minOffsetsPerTrigger"),
    ({"maxTriggerDelay": "soon"}, True, "maxTriggerDelay"),
    ({"maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({"groupIdPrefix": "a/b"}, True, "groupIdPrefix"),
    ({"kafka.group.id": "g"}, False, "group.id"),
    ({"commitOffsetsToBroker": "often"}, True, "commitOffsetsToBroker"),
    ({"kafka.max.poll.records": "5"}, True, "kafka.max.poll.records"),
]


@pytest.mark.parametrize(("extra", "streaming", "option"), BAD, ids=[o for _, _, o in BAD])
def test_bad_value_names_the_option(extra: dict[str, Any], streaming: bool, option: str) -> None:
    with pytest.raises(ConfigError, match=option):
        parse_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", **extra},
                      streaming=streaming)


def test_bad_assign_through_spark(spark: Any, broker: Any) -> None:
    for value in ('["opt-a"]', '{"opt-a": [-1]}', '{"opt-a": []}'):
        with pytest.raises(Exception, match="assign"):
            spark.read.format("hmb").option("kafka.bootstrap.servers", broker.bootstrap) \
                .option("assign", value).load().collect()


# -- streaming ---------------------------------------------------------------------------------


def _stream(spark: Any, bootstrap: str, **options: Any) -> Any:
    reader = spark.readStream.format("hmb").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().select("topic", "partition", "offset", "value")


def _to_parquet(df: Any, out: Path) -> Any:
    return (df.writeStream.format("parquet").option("path", str(out / "data"))
            .option("checkpointLocation", str(out / "checkpoint")))


def _run_available_now(df: Any, out: Path) -> Any:
    query = _to_parquet(df, out).trigger(availableNow=True).start()
    assert query.awaitTermination(120), "availableNow query did not finish"
    return query


def test_stream_offsets_behind_latest_from_progress(spark: Any, broker: Any, topic: str,
                                                    tmp_path: Path) -> None:
    """maxOffsetsPerTrigger=8 over 4 x 20: after each batch every partition is 2 offsets
    further, so the first progress shows 18 behind on each partition, the last 0."""
    df = _stream(spark, broker.bootstrap, subscribe=TOPIC, startingOffsets="earliest",
                 maxOffsetsPerTrigger=8)
    query = _to_parquet(df, tmp_path).start()
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    assert [p["numInputRows"] for p in progress] == [8] * 10
    first, last = (source_metrics(p["sources"][0]) for p in (progress[0], progress[-1]))
    assert first == {"minOffsetsBehindLatest": "18", "maxOffsetsBehindLatest": "18",
                     "avgOffsetsBehindLatest": "18.0"}
    assert last["maxOffsetsBehindLatest"] == "0"


def test_stream_min_offsets_per_trigger_waits_for_max_trigger_delay(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    """10 offsets < minOffsetsPerTrigger=1000: no batch until maxTriggerDelay=3s has passed
    since the query started, then one batch with all 10."""
    from datetime import datetime

    create_topic(broker.bootstrap, "opt-min", 1)
    produce_stamped(broker.bootstrap, "opt-min", 1, 10)
    df = _stream(spark, broker.bootstrap, topic="opt-min", startingOffsets="earliest",
                 minOffsetsPerTrigger=1000, maxTriggerDelay="3s")
    started = datetime.now().astimezone()
    query = _to_parquet(df, tmp_path).trigger(processingTime="200 milliseconds").start()
    try:
        batch = wait_until(
            lambda: [p for p in query.recentProgress if p["numInputRows"] > 0],
            timeout_s=60, what="the delayed batch",
        )[0]
        ran_at = datetime.fromisoformat(batch["timestamp"].replace("Z", "+00:00"))
    finally:
        query.stop()
    assert batch["numInputRows"] == 10
    assert (ran_at - started).total_seconds() >= 2.5, (started, ran_at)


def _group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        got = admin.list_group_offsets({group: None}).get(group, {})
        return {(tp.topic, tp.partition): meta.offset for tp, meta in got.items()}
    finally:
        admin.close()


def _groups(bootstrap: str) -> list[str]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        return [g["group_id"] if isinstance(g, dict) else g[0] for g in admin.list_groups()]
    finally:
        admin.close()


def test_stream_progress_committed_to_the_broker_group(spark: Any, broker: Any, topic: str,
                                                       tmp_path: Path) -> None:
    """kafka.group.id: Kafka's own admin client (kafka-python) sees the processed offsets in
    the broker's group; commitOffsetsToBroker=false writes none; groupIdPrefix makes a group."""
    done = {(TOPIC, p): PER for p in range(4)}
    _run_available_now(_stream(spark, broker.bootstrap, subscribe=TOPIC, startingOffsets="earliest",
                               maxOffsetsPerTrigger=30, **{"kafka.group.id": "opt-group"}),
                       tmp_path / "a")
    assert _group_offsets(broker.bootstrap, "opt-group") == done
    # What `hmb groups opt-group` prints: committed offsets and lag 0 on every partition.
    from hmbclient.consumer.group_admin import describe_broker_group

    rows = describe_broker_group(broker.bootstrap, "opt-group")["partitions"]
    assert [(r["partition"], r["committed"], r["lag"]) for r in rows] == [
        (p, PER, 0) for p in range(4)
    ]
    _run_available_now(_stream(spark, broker.bootstrap, subscribe=TOPIC, startingOffsets="earliest",
                               groupIdPrefix="opt-prefixed"), tmp_path / "b")
    prefixed = [g for g in _groups(broker.bootstrap) if g.startswith("opt-prefixed-")]
    assert len(prefixed) == 1 and _group_offsets(broker.bootstrap, prefixed[0]) == done
    _run_available_now(_stream(spark, broker.bootstrap, subscribe=TOPIC, startingOffsets="earliest",
                               commitOffsetsToBroker="false", **{"kafka.group.id": "opt-none"}),
                       tmp_path / "c")
    assert "opt-none" not in _groups(broker.bootstrap)


def test_stream_fail_on_data_loss(spark: Any, small_segments: Any, tmp_path: Path) -> None:
    """Retention deletes offsets a stopped query had not read. failOnDataLoss=true (default):
    the query fails naming topic, partition and the lost offsets; false: it goes on from the
    earliest offset and writes exactly what the log still holds."""
    bootstrap = small_segments.bootstrap
    create_topic(bootstrap, "opt-loss", 1)
    # Batches of at most 300 bytes: a batch larger than a segment is refused.
    produce_stamped(bootstrap, "opt-loss", 1, 5, stamped=False, batch_size=300)
    out = tmp_path / "q"
    _run_available_now(_stream(spark, bootstrap, topic="opt-loss", startingOffsets="earliest"), out)
    produce_stamped(bootstrap, "opt-loss", 1, 200, stamped=False, batch_size=300)
    earliest = wait_until(lambda: (e := earliest_offset(bootstrap, "opt-loss")) > 5 and e,
                          timeout_s=30, what="retention to delete offsets 5 and up")

    query = _to_parquet(_stream(spark, bootstrap, topic="opt-loss"), out) \
        .trigger(availableNow=True).start()
    with pytest.raises(Exception, match=r"data loss: opt-loss-0: offsets \[5, \d+\)"):
        query.awaitTermination(120)

    query = _to_parquet(_stream(spark, bootstrap, topic="opt-loss", failOnDataLoss="false"), out) \
        .trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    assert query.exception() is None
    rows = spark.read.parquet(str(out / "data")).select("offset").collect()
    offsets = sorted(r.offset for r in rows)
    assert offsets[:5] == [0, 1, 2, 3, 4]
    # Everything from the earliest offset the query found (>= the one seen above) to the end.
    resumed = offsets[5]
    assert resumed >= earliest and offsets[5:] == list(range(resumed, 205))


def test_stream_update_output_mode(spark: Any, broker: Any, tmp_path: Path) -> None:
    """Spark refuses update mode for any Python data source sink; write_stream_update appends
    each micro-batch's changed rows (running counts per key) to the topic."""
    from spark_integration.sink import write_stream_update

    create_topic(broker.bootstrap, "opt-upd-in", 1)
    create_topic(broker.bootstrap, "opt-upd-out", 1)
    produce_stamped(broker.bootstrap, "opt-upd-in", 1, 6, stamped=False)
    counts = (_stream(spark, broker.bootstrap, topic="opt-upd-in", startingOffsets="earliest")
              .selectExpr("CAST(offset % 2 AS STRING) AS key").groupBy("key").count()
              .selectExpr("key", "CAST(count AS STRING) AS value"))
    with pytest.raises(Exception, match="(?i)update"):
        (counts.writeStream.outputMode("update").format("hmb")
         .option("metadata.broker.list", broker.bootstrap).option("topic", "opt-upd-out")
         .option("checkpointLocation", str(tmp_path / "refused")).start().processAllAvailable())
    query = (write_stream_update(counts, {"metadata.broker.list": broker.bootstrap,
                                          "topic": "opt-upd-out"})
             .option("checkpointLocation", str(tmp_path / "ok")).trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    got = {(bytes(r.key), bytes(r.value))
           for r in read_source(spark, broker, topic="opt-upd-out").collect()}
    assert got == {(b"0", b"3"), (b"1", b"3")}
