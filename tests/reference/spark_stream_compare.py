"""Run in its own interpreter by test_spark_connector.py (one SparkContext per process): a
local[2] SparkSession with Spark's own Kafka connector and the "hmb" data source; a streaming
read of one topic with each format (``trigger(availableNow=True)``, ``maxOffsetsPerTrigger`` so
that it takes several micro-batches) into a memory sink; prints JSON of the rows each query
wrote and its non-empty batch sizes.

Usage: python spark_stream_compare.py BOOTSTRAP TOPIC MAX_PER_TRIGGER JAR[,JAR...]
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    bootstrap, topic, per_trigger, jars = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_integration import register

    spark = (
        SparkSession.builder.master("local[2]").appName("kafka-vs-hmb-stream")
        .config("spark.jars", jars)
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        readers = {
            "kafka": spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic),
            "hmb": spark.readStream.format("hmb").option("metadata.broker.list", bootstrap).option("topic", topic),
        }
        out: dict[str, dict[str, list]] = {}
        for name, reader in readers.items():
            df = (reader.option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_trigger).load()
                  .selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v"))
            query = (df.writeStream.format("memory").queryName(f"stream_{name}").outputMode("append")
                     .trigger(availableNow=True).start())
            query.awaitTermination(300)
            if query.isActive or query.exception() is not None:
                raise RuntimeError(f"{name} stream did not finish: {query.exception()}")
            rows = spark.sql(f"SELECT topic, partition, offset, k, v FROM stream_{name}").collect()
            out[name] = {
                "rows": sorted((r.topic, r.partition, r.offset, r.k, r.v) for r in rows),
                "batches": [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0],
            }
        print("RESULT " + json.dumps(out))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
