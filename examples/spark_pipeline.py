"""Spark read -> transform -> write: counts per user in event-time windows, topic to topic.

Shows: spark.readStream.format("hmb") on a topic of JSON events, parsing them, counting per
user in 5-minute event-time windows with a watermark, and writeStream.format("hmb") into
another topic (key = the user, value = a JSON count), with a checkpoint. The query is stopped,
more events are produced while it is down, and it restarts from its checkpoint: every event is
counted once in the final counts, none is lost.
Run:   .venv/bin/python examples/spark_pipeline.py [--master spark://HOST:PORT]
       (needs Java 17 and pyspark; local[2] by default; an embedded broker unless HMB_BROKERS
       names one)

Why an event-time window with a watermark (and not counts per micro-batch): the counts belong
to when the events happened, not to when Spark happened to read them, so they are the same
whether the query ran once or was stopped and restarted; the watermark (the latest event time
seen minus 1 hour) lets Spark drop a window's state once no more events can arrive for it, so
the state stays bounded. Events older than the watermark would be dropped, uncounted: here
every event is well inside it. The output mode is "update": each micro-batch writes the new
running count of every window it touched. The streaming form of the sink,
``writeStream.format("hmb")``, takes append mode only (Spark's Python data source API offers
no update mode), and append mode would hold each window back until the watermark passes its
end; so each micro-batch's updates go through ``foreachBatch`` to the same sink's batch form,
``df.write.format("hmb")``. The checkpoint still holds the offsets and the window state.

Reading the output: the sink is at-least-once, so a micro-batch replayed after a restart (its
output written, its commit not yet in the checkpoint) writes its counts again. A window's count
only grows, so the final count of a window is the largest (which is also the latest) value
written for that (user, window); taking it is immune to duplicates. Summed over windows, it is
the number of events per user. The end of this script checks exactly that.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from _servers import brokers

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from hmbclient import Producer, ProducerData  # noqa: E402
from spark_integration import get_latest_offsets, register  # noqa: E402

EVENTS, COUNTS = "user-events", "user-counts"
USERS = [f"user-{u}" for u in range(7)]
BASE = datetime(2026, 1, 1, tzinfo=UTC)


def produce(bootstrap: str, start: int, count: int) -> Counter:
    """Events start..start+count-1, one second apart in event time; returns events per user."""
    producer = Producer(metadata_broker_list=bootstrap, request_required_acks=1)
    sent: Counter = Counter()
    try:
        for i in range(start, start + count):
            user = USERS[(i * 3) % len(USERS)]
            # Every 10th event is 2 minutes late (out of order), still inside the watermark.
            at = BASE + timedelta(seconds=i - (120 if i % 10 == 0 else 0))
            event = {"user": user, "ts": at.isoformat(), "amount": i % 100}
            producer.send(ProducerData(EVENTS, key=user.encode(), messages=[json.dumps(event).encode()]))
            sent[user] += 1
    finally:
        producer.close()
    return sent


def start_query(spark: SparkSession, bootstrap: str, checkpoint: str):
    events = (spark.readStream.format("hmb").option("metadata.broker.list", bootstrap)
              .option("topic", EVENTS).option("startingOffsets", "earliest").load())
    parsed = (events.select(F.from_json(F.col("value").cast("string"),
                                        "user string, ts timestamp, amount int").alias("e"))
              .select("e.*"))
    counts = (parsed.withWatermark("ts", "1 hour")
              .groupBy(F.window("ts", "5 minutes"), "user").count())
    out = counts.select(
        F.col("user").alias("key"),
        F.to_json(F.struct("user", F.col("window.start").alias("window_start"),
                           F.col("window.end").alias("window_end"), "count")).alias("value"))

    def write_batch(batch, batch_id: int) -> None:
        # The "hmb" sink's batch writer, once per micro-batch (see the docstring for why).
        (batch.write.mode("append").format("hmb").option("metadata.broker.list", bootstrap)
         .option("topic", COUNTS).save())

    return (out.writeStream.outputMode("update").foreachBatch(write_batch)
            .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())


def wait_caught_up(query, bootstrap: str, timeout: float = 180.0) -> None:
    """Block until a finished micro-batch read up to the events topic's current end."""
    target = {p: end for (_, p), end in get_latest_offsets({"metadata.broker.list": bootstrap},
                                                            [EVENTS]).items()}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for progress in query.recentProgress:
            end = progress["sources"][0]["endOffset"] if progress["sources"] else None
            end = json.loads(end) if isinstance(end, str) else end
            if end and {int(p): o for p, o in end.get(EVENTS, {}).items()} == target:
                return
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        time.sleep(0.5)
    raise TimeoutError(f"the query did not reach {target} in {timeout:g} s")


def final_counts(spark: SparkSession, bootstrap: str) -> tuple[Counter, int]:
    """Events per user from the output topic: the largest count of each (user, window), summed.
    Returns those and the number of output records that were exact duplicates."""
    records = [json.loads(r.value) for r in
               spark.read.format("hmb").option("metadata.broker.list", bootstrap)
               .option("topic", COUNTS).load().selectExpr("CAST(value AS STRING) AS value").collect()]
    latest: dict[tuple[str, str], int] = {}
    for r in records:
        k = (r["user"], r["window_start"])
        latest[k] = max(latest.get(k, 0), r["count"])
    per_user: Counter = Counter()
    for (user, _), n in latest.items():
        per_user[user] += n
    duplicates = len(records) - len({json.dumps(r, sort_keys=True) for r in records})
    return per_user, duplicates


def main() -> None:
    ap = argparse.ArgumentParser(description="counts per user in event-time windows, topic to topic")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    args = ap.parse_args()
    with brokers(num_partitions=3) as bootstrap, tempfile.TemporaryDirectory() as work:
        spark = (SparkSession.builder.master(args.master).appName("hmb-pipeline")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("WARN")
        register(spark)
        checkpoint = os.path.join(work, "checkpoint")

        sent = produce(bootstrap, 0, 1200)
        query = start_query(spark, bootstrap, checkpoint)
        sent += produce(bootstrap, 1200, 300)            # while it runs
        wait_caught_up(query, bootstrap)
        query.stop()
        print("query stopped after", sum(sent.values()), "events")

        sent += produce(bootstrap, 1500, 500)            # while the query is down
        query = start_query(spark, bootstrap, checkpoint)  # the same checkpoint: it resumes
        wait_caught_up(query, bootstrap)
        query.stop()

        counted, duplicates = final_counts(spark, bootstrap)
        print("events per user:", dict(sorted(sent.items())))
        print("counted per user:", dict(sorted(counted.items())))
        print("duplicate output records:", duplicates)
        print("every event counted:", counted == sent)
        spark.stop()
        if counted != sent:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
