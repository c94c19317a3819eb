"""Spark batch: offset ranges become RDD partitions; commit the ranges back to the group.

Shows: OffsetRange, create_rdd (one RDD partition per range, read on the executors),
offset_ranges(rdd), latest offsets per partition, committing the until-offsets to the group's
ZooKeeper offsets so lag tools see the progress, and the "hmb" batch data source.
Run:   .venv/bin/python examples/spark_batch.py      (needs Java 17 and pyspark; local[2])
"""

import os
import sys

from _servers import cluster

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession  # noqa: E402

from hmbclient import Producer, ProducerData  # noqa: E402
from spark_integration import (  # noqa: E402
    OffsetRange,
    commit_offset_ranges,
    create_rdd,
    get_latest_offsets,
    offset_ranges,
    register,
)

with cluster(num_partitions=4) as (bootstrap, zk):
    producer = Producer(metadata_broker_list=bootstrap)
    for i in range(4000):
        producer.send(ProducerData("sales", key=f"store-{i % 7}".encode(), messages=[str(i % 100).encode()]))
    producer.close()

    spark = (SparkSession.builder.master("local[2]").appName("hmb-spark-batch")
             .config("spark.driver.host", "127.0.0.1").config("spark.ui.enabled", "false")
             .getOrCreate())
    sc = spark.sparkContext
    params = {"metadata.broker.list": bootstrap, "zookeeper.connect": zk, "group.id": "sales-report"}
    ends = get_latest_offsets(params, ["sales"])                 # {(topic, partition): latest}
    ranges = [OffsetRange(t, p, 0, end) for (t, p), end in sorted(ends.items())]
    rdd = create_rdd(sc, params, ranges)
    print("partitions:", rdd.getNumPartitions(), "ranges:", offset_ranges(rdd))
    totals = (rdd.map(lambda kv: (kv[0].decode(), int(kv[1])))
                 .reduceByKey(lambda a, b: a + b).collect())
    print("sum per store:", dict(sorted(totals)))
    committed = commit_offset_ranges(params, rdd)                # ZooKeeper, as 0.8 tools expect
    print("committed to ZooKeeper:", sum(committed.values()), "messages' worth of offsets")

    register(spark)
    df = (spark.read.format("hmb").option("metadata.broker.list", bootstrap)
          .option("topic", "sales").option("startingOffsets", "earliest").load())
    print("rows via the data source:", df.count())
    spark.stop()
