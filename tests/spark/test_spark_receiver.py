"""create_stream: the receiver-style DStream on the ConsumerConnector, on real local Spark."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from spark_helpers import create_topic, produce
from waiting import wait_until

from encoders import StringDecoder
from spark_integration import create_stream, read_group_offsets

pytestmark = pytest.mark.timeout(180)


def test_receiver_stream_delivers_and_commits_group_offsets(
    sc: Any, broker: Any, zookeeper: Any
) -> None:
    from pyspark.streaming import StreamingContext

    topic = "rcv"
    create_topic(broker.bootstrap, topic, 4)
    first = produce(broker.bootstrap, topic, [(p, None, f"r1-{p}-{i}".encode())
                                              for i in range(10) for p in range(4)])
    ssc = StreamingContext(sc, 0.5)
    stream = create_stream(ssc, zookeeper.connect, "rcv-g", {topic: 2},
                           value_decoder=StringDecoder(),
                           kafka_params={"auto.offset.reset": "smallest",
                                         # the test broker does not register in ZooKeeper
                                         "metadata.broker.list": broker.bootstrap})
    got: list[str] = []
    lock = threading.Lock()

    def collect(rdd: Any) -> None:
        values = rdd.values().collect()
        with lock:
            got.extend(values)

    stream.foreachRDD(collect)
    ssc.start()
    try:
        wait_until(lambda: len(got) >= 40, 60, "the first 40 messages")
        second = produce(broker.bootstrap, topic, [(p, None, f"r2-{p}-{i}".encode())
                                                   for i in range(5) for p in range(4)])
        wait_until(lambda: len(got) >= 60, 30, "the next 20 messages")
    finally:
        ssc.stop(stopSparkContext=False, stopGraceFully=False)
        stream.receiver.stop()
    expected = sorted(v.decode() for _, _, _, v in first + second)
    assert sorted(got) == expected
    parts = [(topic, p) for p in range(4)]
    assert read_group_offsets(zookeeper.connect, "rcv-g", parts) == {tp: 15 for tp in parts}
