"""Quickstart: produce three keyed messages and read them back.

Shows: Producer (sync) with String encoders, SimpleConsumer.fetch, MessageAndOffset fields.
Run:   .venv/bin/python examples/quickstart.py
       (HMB_BROKERS=host:port uses an existing broker; otherwise an embedded one is started)
"""

from _servers import brokers

from encoders import StringEncoder
from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.config import parse_broker_list

with brokers(num_partitions=1) as bootstrap:
    producer = Producer(metadata_broker_list=bootstrap, serializer=StringEncoder(),
                        key_serializer=StringEncoder())
    futures = producer.send(ProducerData("quickstart", key="user-1", messages=["a", "b", "c"]))
    offsets = [f.result(timeout=10).offset for f in futures]
    print("produced at offsets", offsets)
    producer.close()

    host, port = parse_broker_list(bootstrap)[0]
    consumer = SimpleConsumer(host, port)
    for mo in consumer.fetch(FetchRequest("quickstart", partition=0, offset=offsets[0], max_size=1 << 20)):
        print(mo.offset, mo.message.key, mo.message.value)
    consumer.close()
