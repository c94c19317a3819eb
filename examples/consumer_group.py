"""Consumer group balanced through ZooKeeper: streams, a whitelist filter, offset commits.

Shows: Consumer.create with 0.8 property names, create_message_streams with two streams,
create_message_streams_by_filter(Whitelist), consumer.timeout.ms ending iteration,
commit_offsets, and two members sharing the partitions.
Run:   .venv/bin/python examples/consumer_group.py
       (HMB_BROKERS and HMB_ZOOKEEPER use existing servers; otherwise ZooKeeper and three
       embedded brokers are started)
"""

import threading

from _servers import cluster

from encoders import StringDecoder
from hmbclient import Consumer, ConsumerTimeoutError, Producer, ProducerData, Whitelist

with cluster(num_partitions=4) as (bootstrap, zk):
    producer = Producer(metadata_broker_list=bootstrap)
    for i in range(1000):
        producer.send(ProducerData("orders", key=f"k{i}".encode(), messages=[f"order {i}".encode()]))
        producer.send(ProducerData("orders.eu", key=f"k{i}".encode(), messages=[f"eu order {i}".encode()]))
    producer.close()

    def member(name: str, counts: dict[str, int]) -> None:
        connector = Consumer.create({"zookeeper.connect": zk, "group.id": "order-audit",
                                     "auto.offset.reset": "smallest", "consumer.timeout.ms": 3000})
        streams = connector.create_message_streams({"orders": 2}, value_decoder=StringDecoder())
        lock = threading.Lock()

        def drain(stream) -> None:  # type: ignore[no-untyped-def]
            try:
                for _ in stream:
                    with lock:
                        counts[name] += 1
            except ConsumerTimeoutError:
                pass

        threads = [threading.Thread(target=drain, args=(s,)) for s in streams["orders"]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        connector.commit_offsets()
        connector.shutdown()

    counts = {"a": 0, "b": 0}
    members = [threading.Thread(target=member, args=(n, counts)) for n in counts]
    for m in members:
        m.start()
    for m in members:
        m.join()
    print("orders consumed per member:", counts, "total:", sum(counts.values()))

    connector = Consumer.create({"zookeeper.connect": zk, "group.id": "all-orders",
                                 "auto.offset.reset": "smallest", "consumer.timeout.ms": 3000})
    (stream,) = connector.create_message_streams_by_filter(Whitelist(r"orders(\..*)?"), num_streams=1)
    topics: dict[str, int] = {}
    try:
        for mam in stream:
            topics[mam.topic] = topics.get(mam.topic, 0) + 1
    except ConsumerTimeoutError:
        pass
    connector.commit_offsets()
    connector.shutdown()
    print("whitelist consumed:", dict(sorted(topics.items())))
