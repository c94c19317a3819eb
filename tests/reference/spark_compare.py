"""Run in its own interpreter by test_spark_connector.py (one SparkContext per process: the
suite's other Spark tests hold theirs): a local[2] SparkSession with Spark's own Kafka
connector on its classpath and the "hmb" data source registered; writes the same rows with
format("kafka") and format("hmb"), reads both topics with both formats, prints JSON of what
each read returned.

Usage: python spark_compare.py BOOTSTRAP TOPIC_PREFIX ROWS JAR[,JAR...]
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    bootstrap, prefix, rows, jars = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_integration import register

    spark = (
        SparkSession.builder.master("local[2]").appName("kafka-vs-hmb")
        .config("spark.jars", jars)
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m").config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        df = spark.createDataFrame(
            [(f"k{i % 17}".encode(), f"row {i}".encode()) for i in range(rows)], "key binary, value binary"
        ).repartition(2)
        written = {"kafka": f"{prefix}-by-kafka", "hmb": f"{prefix}-by-hmb"}
        df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", written["kafka"]).save()
        df.write.format("hmb").mode("append").option("metadata.broker.list", bootstrap).option("topic", written["hmb"]) \
            .option("request.required.acks", "-1").save()
        out: dict[str, dict[str, list]] = {}
        for writer, topic in written.items():
            out[writer] = {}
            by_kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                        .option("subscribe", topic).option("startingOffsets", "earliest")
                        .option("endingOffsets", "latest").load())
            by_hmb = (spark.read.format("hmb").option("metadata.broker.list", bootstrap)
                      .option("topic", topic).option("startingOffsets", "earliest").load())
            for reader, frame in (("kafka", by_kafka), ("hmb", by_hmb)):
                out[writer][reader] = sorted(
                    (r.topic, r.partition, r.offset, bytes(r.key).decode(), bytes(r.value).decode())
                    for r in frame.select("topic", "partition", "offset", "key", "value").collect()
                )
        print("RESULT " + json.dumps(out))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
