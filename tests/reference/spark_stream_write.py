"""Run in its own interpreter by test_spark_connector.py (one SparkContext per process): a
local[2] SparkSession with Spark's own Kafka connector and the "hmb" data source; the same
streaming input -- ``readStream.format("kafka")`` of one pre-filled source topic
(``trigger(availableNow=True)``, ``maxOffsetsPerTrigger`` so that it takes several
micro-batches), its key and value only -- written with ``writeStream.format("kafka")`` to one
topic and ``writeStream.format("hmb")`` to another, each query with its own checkpointLocation
in a temporary directory; prints JSON of each query's non-empty batch sizes. The test reads the
written topics back itself (Kafka's Java consumer).

Usage: python spark_stream_write.py BOOTSTRAP SOURCE_TOPIC KAFKA_TOPIC HMB_TOPIC MAX_PER_TRIGGER JAR[,JAR...]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def main() -> None:
    bootstrap, source, to_kafka, to_hmb, per_trigger, jars = sys.argv[1:7]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_integration import register

    spark = (
        SparkSession.builder.master("local[2]").appName("kafka-vs-hmb-stream-write")
        .config("spark.jars", jars)
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        with tempfile.TemporaryDirectory(prefix="spark-stream-write-") as tmp:
            writers = {
                "kafka": lambda w: w.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("topic", to_kafka),
                "hmb": lambda w: w.format("hmb").option("metadata.broker.list", bootstrap).option("topic", to_hmb),
            }
            out: dict[str, list[int]] = {}
            for name, configure in writers.items():
                df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", source).option("startingOffsets", "earliest")
                      .option("maxOffsetsPerTrigger", per_trigger).load().select("key", "value"))
                query = (configure(df.writeStream).option("checkpointLocation", os.path.join(tmp, name))
                         .queryName(f"write_{name}").outputMode("append").trigger(availableNow=True).start())
                query.awaitTermination(300)
                if query.isActive or query.exception() is not None:
                    raise RuntimeError(f"{name} stream did not finish: {query.exception()}")
                out[name] = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
        print("RESULT " + json.dumps(out))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
