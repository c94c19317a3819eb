"""The "hmb" sink: df.write.mode("append").format("hmb") and writeStream.format("hmb") against a real broker,
read back with the source. Checks columns (value, key, topic, partition, headers), producer
settings by Kafka name, at-least-once accounting (duplicates counted), and bad input: a row
without a value, a topic the broker refuses, a broker that is down, unknown options."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from hmbclient import FetchRequest, SimpleConsumer

pytestmark = pytest.mark.timeout(300)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read_back(spark: Any, broker: Any, topic: str) -> list[Any]:
    df = spark.read.format("hmb").option("metadata.broker.list", broker.bootstrap).option("topic", topic).load()
    return df.select("key", "value", "partition").collect()


def test_batch_write_and_read_back(spark: Any, broker: Any) -> None:
    topic = _topic("sink")
    rows = [(f"k{i % 7}", f"v{i}") for i in range(2000)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    (df.write.mode("append").format("hmb").option("metadata.broker.list", broker.bootstrap).option("topic", topic)
        .option("compression.codec", "lz4").option("batch.num.messages", "100").save())
    got = _read_back(spark, broker, topic)
    counts = Counter((r.key.decode(), r.value.decode()) for r in got)
    assert set(counts) == set(rows), "every row arrived"
    assert sum(counts.values()) - len(rows) == 0, "no duplicates without task retries"
    # the producer's partitioner: one key, one partition
    by_key: dict[str, set[int]] = {}
    for r in got:
        by_key.setdefault(r.key.decode(), set()).add(r.partition)
    assert all(len(parts) == 1 for parts in by_key.values())


def test_topic_partition_and_headers_columns(spark: Any, broker: Any) -> None:
    t1, t2 = _topic("cols-a"), _topic("cols-b")
    rows = [(t1 if i % 2 else t2, i % 4, b"v%d" % i, [("n", b"%d" % i)]) for i in range(40)]
    df = spark.createDataFrame(rows, "topic string, partition int, value binary, headers array<struct<key: string, value: binary>>")
    df.write.mode("append").format("hmb").option("metadata.broker.list", broker.bootstrap).save()
    c = SimpleConsumer(broker.host, broker.port)
    try:
        for topic, parity in ((t1, 1), (t2, 0)):
            for p in range(4):
                msgs = [mo.message for mo in c.fetch(FetchRequest(topic, p, 0, 1 << 20))]
                want = [i for i in range(40) if i % 2 == parity and i % 4 == p]
                assert sorted(int(m.value[1:]) for m in msgs) == want
                assert all(m.headers == (("n", m.value[1:]),) for m in msgs)
    finally:
        c.close()


def test_streaming_write_from_the_source(spark: Any, broker: Any, tmp_path: Any) -> None:
    src, dst = _topic("stream-in"), _topic("stream-out")
    spark.createDataFrame([(f"k{i}", f"m{i}") for i in range(300)], "key string, value string").write.mode("append").format("hmb").option(
        "metadata.broker.list", broker.bootstrap
    ).option("topic", src).save()
    stream = (
        spark.readStream.format("hmb").option("metadata.broker.list", broker.bootstrap).option("topic", src)
        .option("startingOffsets", "earliest").load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    )
    q = (stream.writeStream.format("hmb").option("metadata.broker.list", broker.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    got = Counter(r.value.decode() for r in _read_back(spark, broker, dst))
    assert set(got) == {f"M{i}" for i in range(300)}
    assert sum(got.values()) == 300


def _job_error(fn: Any) -> str:
    with pytest.raises(Exception) as info:
        fn()
    return str(info.value)


def test_bad_input_fails_the_job_and_names_the_cause(spark: Any, broker: Any) -> None:
    good = _topic("bad")

    def write(df: Any, **opts: str) -> None:
        w = df.write.mode("append").format("hmb").option("metadata.broker.list", opts.pop("brokers", broker.bootstrap))
        for k, v in opts.items():
            w = w.option(k.replace("_", "."), v)
        w.save()

    no_value = spark.createDataFrame([("k",)], "key string")
    assert "needs a 'value' column" in _job_error(lambda: write(no_value, topic=good))
    # One task, the bad row first: a sink cannot take back rows other tasks (or earlier rows)
    # already sent, so only this order makes "nothing reached the topic" a fact to check.
    null_value = spark.createDataFrame([(None, None), (None, "x")], "key string, value string").coalesce(1)
    msg = _job_error(lambda: write(null_value, topic=good))
    assert "value is null" in msg and " row " in msg and "partition " in msg
    refused = spark.createDataFrame([("bad/topic", "x")], "topic string, value string")
    msg = _job_error(lambda: write(refused))
    assert "bad/topic" in msg
    rows = spark.createDataFrame([("x",)], "value string")
    assert "unknown" in _job_error(lambda: write(rows, topic=good, no_such_setting="1")).lower()
    down = _job_error(lambda: write(rows, topic=good, brokers="127.0.0.1:1", **{"message_send_max_retries": "1"}))
    assert "127.0.0.1:1" in down or "reach" in down.lower()
    # nothing of the refused writes reached the good topic
    c = SimpleConsumer(broker.host, broker.port)
    try:
        md = c.fetch(FetchRequest(good, 0, 0, 1 << 16))
        assert list(md) == []
    except Exception as e:  # the topic was never created: nothing written either
        assert "UNKNOWN_TOPIC" in str(e) or "Unknown" in type(e).__name__
    finally:
        c.close()


def test_write_and_read_over_sasl_ssl(spark: Any, tmp_path: Any) -> None:
    """The security options reach the sink's producers, the source's planner on the driver and
    its readers in the executors: a broker with only a SASL_SSL listener, SCRAM-SHA-512."""
    from hmbclient.broker import EmbeddedBroker
    from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
    from hmbclient.testing.pki import make_pki

    pki = make_pki(str(tmp_path))
    creds = str(tmp_path / "credentials.json")
    FileCredentialStore(creds).put("spark", {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "spark-pw")})
    with EmbeddedBroker(listeners=["SASL_SSL://127.0.0.1:0"], ssl_certfile=pki.server_cert, ssl_keyfile=pki.server_key,
                        sasl_credentials_file=creds) as b:
        opts = {
            "metadata.broker.list": f"127.0.0.1:{b.broker.server.listeners[0].port}",
            "security.protocol": "SASL_SSL", "ssl.cafile": pki.ca, "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "spark", "sasl.password": "spark-pw",
        }
        topic = _topic("secure")
        rows = [(f"k{i % 5}", f"v{i}") for i in range(300)]
        spark.createDataFrame(rows, "key string, value string").repartition(2).write.mode("append").format("hmb") \
            .options(**opts).option("topic", topic).save()
        got = spark.read.format("hmb").options(**opts).option("topic", topic).load().select("key", "value").collect()
        assert sorted((r.key.decode(), r.value.decode()) for r in got) == sorted(rows)
        with pytest.raises(Exception, match="SaslAuthenticationFailed|authentication"):
            spark.read.format("hmb").options(**{**opts, "sasl.password": "wrong"}).option("topic", topic).load().collect()


def test_spark_own_streaming_options_are_accepted_and_typos_are_not() -> None:
    """Spark hands a named streaming query's queryName and its checkpointLocation to the writer
    among the options (lower-cased): both are Spark's own, not producer settings."""
    from hmbclient.errors import ConfigError
    from spark_integration.sink import parse_sink_options

    opts, _cfg = parse_sink_options({"metadata.broker.list": "127.0.0.1:9092", "topic": "t",
                                     "queryname": "q", "checkpointlocation": "/ckpt"})
    assert (opts.query_name, opts.checkpoint_location) == ("q", "/ckpt")
    with pytest.raises(ConfigError, match="querynam"):
        parse_sink_options({"metadata.broker.list": "127.0.0.1:9092", "querynam": "q"})


def test_a_failed_delivery_names_the_first_failed_row(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """send_rows queues rows without a future each (one delivery callback for all): a row the
    broker refuses after it was queued (over the broker's message.max.bytes) still fails the
    task, naming the first refused row in row order, for both row loops (value/key columns
    only, and with a partition column), across Arrow batches and checks."""
    import pyarrow as pa

    from hmbclient import Producer
    from hmbclient.broker import EmbeddedBroker
    from spark_integration import sink
    from spark_integration.sink import SinkError, parse_sink_options, send_rows

    monkeypatch.setattr(sink, "_CHECK_EVERY", 3)  # a check after each 3-row batch below
    big = "x" * 5000
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), num_partitions=2, message_max_bytes=3000) as b:
        opts, cfg = parse_sink_options({"metadata.broker.list": b.bootstrap, "topic": "big",
                                        "message.send.max.retries": "1"})

        def send(batches: list[Any]) -> str:
            producer = Producer(cfg)
            try:
                with pytest.raises(SinkError) as err:
                    send_rows(producer, opts, iter(batches))
            finally:
                producer.close()
            return str(err.value)

        # (R1): rows 0-2 acknowledged (checked), then rows 3-5 in one partition batch refused
        first = pa.RecordBatch.from_arrays([pa.array(["k"] * 3), pa.array(["a", "b", "c"])], names=["key", "value"])
        second = pa.RecordBatch.from_arrays([pa.array(["k"] * 3), pa.array(["d", big, "f"])], names=["key", "value"])
        msg = send([first, second])
        assert "3 row(s) not acknowledged; first: row 3 to 'big'" in msg and "MessageTooLarge" in msg, msg
        # (R2): only the rows to partition 1 are refused; the first of them is row 2
        rows = pa.RecordBatch.from_arrays(
            [pa.array([b"s", b"s", big.encode(), b"s", b"t"]), pa.array([0, 0, 1, 0, 1], pa.int32())],
            names=["value", "partition"])
        msg = send([rows])
        assert "2 row(s) not acknowledged; first: row 2 to 'big'" in msg, msg
