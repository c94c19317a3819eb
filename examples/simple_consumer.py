"""SimpleConsumer: stateless reads of chosen partitions at chosen offsets.

Shows: get_offsets_before with EARLIEST_TIME / LATEST_TIME, fetch, multifetch over several
partitions in one request, resuming from mo.next_offset.
Run:   .venv/bin/python examples/simple_consumer.py
"""

from _servers import brokers

from hmbclient import (
    EARLIEST_TIME,
    LATEST_TIME,
    FetchRequest,
    Producer,
    ProducerData,
    SimpleConsumer,
)
from hmbclient.config import parse_broker_list

with brokers(num_partitions=2) as bootstrap:
    producer = Producer(metadata_broker_list=bootstrap, partitioner="partitioners.RoundRobinPartitioner")
    for i in range(100):
        producer.send(ProducerData("readings", key=None, messages=[f"reading {i}".encode()]))
    producer.close()

    host, port = parse_broker_list(bootstrap)[0]
    consumer = SimpleConsumer(host, port, client_id="example")
    for p in (0, 1):
        earliest = consumer.get_offsets_before("readings", p, EARLIEST_TIME, max_num_offsets=1)[0]
        latest = consumer.get_offsets_before("readings", p, LATEST_TIME, max_num_offsets=1)[0]
        print(f"partition {p}: offsets {earliest}..{latest}")

    positions = {0: 0, 1: 0}
    total = 0
    while True:
        sets = consumer.multifetch([FetchRequest("readings", p, positions[p], 4096) for p in (0, 1)])
        got = 0
        for p, message_set in zip((0, 1), sets, strict=True):
            for mo in message_set:
                positions[p] = mo.next_offset
                got += 1
        if not got:
            break
        total += got
    print(f"read {total} messages; next offsets {positions}")
    consumer.close()
