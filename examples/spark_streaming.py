"""Spark Structured Streaming with the "hmb" data source and a checkpoint.

Shows: spark.readStream.format("hmb"), maxOffsetsPerTrigger, the availableNow trigger, and a
query restarted from its checkpoint continuing with no gap and no duplicate.
Run:   .venv/bin/python examples/spark_streaming.py  (needs Java 17 and pyspark; local[2])
"""

import os
import sys
import tempfile

from _servers import brokers

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from hmbclient import Producer, ProducerData  # noqa: E402
from spark_integration import register  # noqa: E402


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = Producer(metadata_broker_list=bootstrap)
    for i in range(start, start + count):
        producer.send(ProducerData("events", key=None, messages=[f"event {i}".encode()]))
    producer.close()


with brokers(num_partitions=2) as bootstrap, tempfile.TemporaryDirectory() as work:
    spark = (SparkSession.builder.master("local[2]").appName("hmb-streaming")
             .config("spark.driver.host", "127.0.0.1").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    register(spark)
    out, checkpoint = os.path.join(work, "out"), os.path.join(work, "checkpoint")

    def run_once() -> None:
        stream = (spark.readStream.format("hmb").option("metadata.broker.list", bootstrap)
                  .option("topic", "events").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "300").load())
        query = (stream.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
                 .writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()

    produce(bootstrap, 0, 1000)
    run_once()
    produce(bootstrap, 1000, 500)                  # more data while the query is down
    run_once()                                     # restarted from the checkpoint
    rows = spark.read.parquet(out)
    print("rows written:", rows.count(), "distinct values:", rows.select("value").distinct().count())
    spark.stop()
