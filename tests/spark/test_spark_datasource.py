"""The "hmb" data source on real local Spark: batch offsets, streaming exactly-once, availableNow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import Produced, create_topic, produce

from spark_integration import read_group_offsets

pytestmark = pytest.mark.timeout(300)


def _messages(prefix: str, per_partition: int, partitions: int = 4) -> list[tuple[int, bytes, bytes]]:
    return [
        (p, f"k{i}".encode(), f"{prefix}-{p}-{i}".encode())
        for i in range(per_partition)
        for p in range(partitions)
    ]


def _keyed(topic: str, produced: list[Produced]) -> set[tuple[str, int, int, bytes]]:
    return {(topic, p, o, v) for p, o, _, v in produced}


@pytest.fixture(scope="module")
def batch_topic(broker: Any) -> list[Produced]:
    create_topic(broker.bootstrap, "ds-batch", 4)
    return produce(broker.bootstrap, "ds-batch", _messages("b", 50))


def _batch(spark: Any, broker: Any, **options: str) -> Any:
    reader = spark.read.format("hmb").option("metadata.broker.list", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_batch_earliest_to_latest(spark: Any, broker: Any, batch_topic: list[Produced]) -> None:
    df = _batch(spark, broker, topic="ds-batch")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    rows = df.collect()
    assert len(rows) == 200
    assert {(r.topic, r.partition, r.offset, bytes(r.value)) for r in rows} == _keyed(
        "ds-batch", batch_topic
    )
    assert all(r.timestamp is not None for r in rows)
    assert df.rdd.getNumPartitions() == 4  # one input partition per topic-partition range
    assert _batch(spark, broker, topic="ds-batch", startingOffsets="latest").count() == 0


def test_batch_json_offsets(spark: Any, broker: Any, batch_topic: list[Produced]) -> None:
    df = _batch(
        spark, broker, topics="ds-batch",
        startingOffsets=json.dumps({"ds-batch": {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({"ds-batch": {"0": 20, "2": 5, "3": -1}}),
    )
    got = {(r.partition, r.offset) for r in df.select("partition", "offset").collect()}
    expected = (
        {(0, o) for o in range(10, 20)} | {(1, o) for o in range(50)}
        | {(2, o) for o in range(5)} | {(3, o) for o in range(50)}
    )
    assert got == expected
    with pytest.raises(Exception, match=r"outside the available range \[0, 50\]"):
        _batch(spark, broker, topic="ds-batch",
               startingOffsets=json.dumps({"ds-batch": {"0": 51}})).collect()
    with pytest.raises(Exception, match="unknown SourceOptions key 'startingoffset'; did you mean"):
        _batch(spark, broker, topic="ds-batch", startingOffset="earliest").collect()


def _stream(spark: Any, broker: Any, **options: Any) -> Any:
    reader = spark.readStream.format("hmb").option("metadata.broker.list", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().select("topic", "partition", "offset", "value")


def _sink(df: Any, out: Path, checkpoint: Path) -> Any:
    return (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )


def _read_output(spark: Any, out: Path) -> list[tuple[str, int, int, bytes]]:
    rows = spark.read.parquet(str(out)).collect()
    return [(r.topic, r.partition, r.offset, bytes(r.value)) for r in rows]


def _batch_sizes(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def test_stream_limits_batches_and_restarts_exactly_once(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "ds-st.a", 4)
    produced = _keyed("ds-st.a", produce(broker.bootstrap, "ds-st.a", _messages("s1", 60)))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> list[int]:
        df = _stream(spark, broker, topicPattern=r"ds-st\..*", startingOffsets="earliest",
                     maxOffsetsPerTrigger=100)
        query = _sink(df, out, checkpoint).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        return _batch_sizes(query)

    sizes = run()
    assert sum(sizes) == 240 and len(sizes) >= 3 and max(sizes) <= 100, sizes

    # More data while stopped, plus a new topic matching the pattern (new partitions).
    produced |= _keyed("ds-st.a", produce(broker.bootstrap, "ds-st.a", _messages("s2", 25)))
    create_topic(broker.bootstrap, "ds-st.b", 2)
    produced |= _keyed("ds-st.b", produce(broker.bootstrap, "ds-st.b", _messages("s3", 10, 2)))
    sizes = run()
    assert sum(sizes) == 120 and max(sizes) <= 100, sizes

    rows = _read_output(spark, out)
    assert len(rows) == len(set(rows)), "a message was written twice"
    assert set(rows) == produced


def test_streaming_start_leaves_the_shared_environment_map_unchanged(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    """Every use of the registered source shares one java.util.HashMap of environment
    variables, which Spark's streaming source runner writes to, unsynchronized, when a query
    starts; its first writes used to add keys (a structural change), which two queries starting
    together could corrupt (tasks then failed with OptionalDataException; the eos streaming
    test's intermittent driver exit). register() puts those keys first: a starting query only
    replaces values."""
    from spark_integration import register

    register(spark)  # a fresh registration: a fresh map, as in a new driver
    env = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("hmb").dataSourceCls().envVars()
    before = {k: env.get(k) for k in env.keySet().toArray()}
    create_topic(broker.bootstrap, "ds-env", 1)
    produce(broker.bootstrap, "ds-env", _messages("e", 5, 1))
    queries = [_sink(_stream(spark, broker, topic="ds-env", startingOffsets="earliest"), tmp_path / f"out{i}",
                     tmp_path / f"ckpt{i}").trigger(availableNow=True).start() for i in range(2)]
    for q in queries:
        q.awaitTermination(120)
        assert q.exception() is None
    after = {k: env.get(k) for k in env.keySet().toArray()}
    assert set(after) == set(before), f"keys added by the streaming runner: {set(after) - set(before)}"
    assert env.size() == len(after)


def test_available_now_reads_up_to_start_and_commits_group_offsets(
    spark: Any, broker: Any, zookeeper: Any, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "ds-an", 4)
    produced = _keyed("ds-an", produce(broker.bootstrap, "ds-an", _messages("n1", 30)))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> list[int]:
        df = _stream(spark, broker, topic="ds-an", startingOffsets="earliest",
                     maxOffsetsPerTrigger=50, **{"zookeeper.connect": zookeeper.connect,
                                                 "group.id": "spark-an"})
        query = _sink(df, out, checkpoint).trigger(availableNow=True).start()
        assert query.awaitTermination(180), "availableNow query did not finish"
        assert query.exception() is None
        last_progress[:] = [query.lastProgress]
        return _batch_sizes(query)

    last_progress: list[Any] = []
    sizes = run()
    assert sizes == [50, 50, 20]
    assert json.loads(last_progress[0]["sources"][0]["latestOffset"]) == {
        "ds-an": {str(p): 30 for p in range(4)}
    }
    parts = [("ds-an", p) for p in range(4)]
    # Spark never calls commit(end) for the last availableNow batch; the group still sees it.
    assert read_group_offsets(zookeeper.connect, "spark-an", parts) == {tp: 30 for tp in parts}

    produced |= _keyed("ds-an", produce(broker.bootstrap, "ds-an", _messages("n2", 5)))
    assert run() == [20]
    rows = _read_output(spark, out)
    assert len(rows) == len(set(rows)) and set(rows) == produced
    assert read_group_offsets(zookeeper.connect, "spark-an", parts) == {tp: 35 for tp in parts}
