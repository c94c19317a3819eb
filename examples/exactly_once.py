"""Exactly once: consume, transform, produce, with the input offsets in the output's transaction.

Shows: a read_committed SimpleConsumer (an aborted transaction in the input is never seen), a
transactional Producer (transactional.id, init_transactions, begin/commit_transaction) that
writes each batch's output together with the group's next input offsets
(send_offsets_to_transaction): output and progress become visible together or not at all.
The first incarnation of the auditor "crashes" with a transaction open; the second takes the
transactional id over (init_transactions aborts what the first left open), resumes from the
group's committed offsets, and the output, read back read_committed, holds every input record
exactly once.
Run:   .venv/bin/python examples/exactly_once.py
       (HMB_BROKERS=host:port uses a running `hmb broker` or Apache Kafka; otherwise an
       embedded broker is started)
"""

import time
import uuid

from _servers import brokers

from hmbclient import LATEST_TIME, FetchRequest, Producer, ProducerData, SimpleConsumer, admin
from hmbclient.config import parse_broker_list
from hmbclient.consumer.offsets import KafkaOffsetStorage
from hmbclient.net.client import NetClient

RUN = uuid.uuid4().hex[:6]  # fresh names, so that runs against a long-lived broker do not mix
SRC, DST, GROUP, TID = f"payments-{RUN}", f"payments-audited-{RUN}", f"auditor-{RUN}", f"auditor-{RUN}-0"
PARTITIONS = (0, 1)
N = 600
PER_TRANSACTION = 50  # input records per transaction (a fetch may bring more)


def transform(value: bytes) -> bytes:
    return value.upper() + b" (audited)"


def auditor(bootstrap: str, crash_after: int | None = None) -> int:
    """One incarnation: resume at the group's committed offsets, then per batch read, transform,
    write and commit the offsets in one transaction. With ``crash_after``, the batch after that
    many commits is left open, as a crash leaves it. Returns the number of commits."""
    host, port = parse_broker_list(bootstrap)[0]
    consumer = SimpleConsumer(host, port, isolation_level="read_committed")
    client = NetClient([(host, port)])
    committed = KafkaOffsetStorage(client, GROUP).fetch([(SRC, p) for p in PARTITIONS])
    positions = {p: committed[(SRC, p)] or 0 for p in PARTITIONS}
    producer = Producer(bootstrap_servers=bootstrap, transactional_id=TID, acks="all", producer_type="async")
    producer.init_transactions()  # fences an older incarnation and aborts its open transaction
    commits = 0
    try:
        while True:
            sets = consumer.multifetch([FetchRequest(SRC, p, positions[p], 1024) for p in PARTITIONS])
            if all(ms.next_offset == positions[p] for p, ms in zip(PARTITIONS, sets, strict=True)):
                return commits  # caught up
            producer.begin_transaction()
            room = PER_TRANSACTION
            for p, ms in zip(PARTITIONS, sets, strict=True):
                records = ms.messages()
                taken = records[:room]
                for mo in taken:
                    producer.produce(DST, transform(mo.message.value), key=mo.message.key)
                room -= len(taken)
                # next to read: after the last record taken, or past the whole set (markers and
                # aborted records included) when all of it was taken
                if len(taken) == len(records):
                    positions[p] = ms.next_offset
                elif taken:
                    positions[p] = taken[-1].next_offset
            if commits == crash_after:
                print(f"incarnation 1: crashed after {commits} commits, a transaction open", flush=True)
                return commits  # close() below sends what is queued; nothing commits it
            producer.send_offsets_to_transaction({(SRC, p): off for p, off in positions.items()}, GROUP)
            producer.commit_transaction()
            commits += 1
    finally:
        producer.close()
        consumer.close()
        client.close()


def read_all(bootstrap: str, topic: str, isolation_level: str) -> list[bytes]:
    host, port = parse_broker_list(bootstrap)[0]
    out: list[bytes] = []
    with SimpleConsumer(host, port, isolation_level=isolation_level) as consumer, SimpleConsumer(host, port) as ru:
        for p in PARTITIONS:
            # commit_transaction() returns once the commit is decided; the coordinator writes
            # the markers right after: until then read_committed readers stop before them
            while consumer.get_offsets_before(topic, p, LATEST_TIME, 1) != ru.get_offsets_before(topic, p, LATEST_TIME, 1):
                time.sleep(0.05)
            offset = 0
            while True:
                ms = consumer.fetch(FetchRequest(topic, p, offset, 65536))
                out += [bytes(mo.message.value) for mo in ms]
                if ms.next_offset == offset:
                    break
                offset = ms.next_offset
    return out


with brokers(num_partitions=len(PARTITIONS)) as bootstrap:
    for topic in (SRC, DST):
        admin.create_topic(bootstrap, topic, len(PARTITIONS), 1)
    # The input: N payments, and an upstream transaction that was aborted (never to be read).
    plain = Producer(bootstrap_servers=bootstrap, acks="all", producer_type="async", batch_num_messages=25)
    for i in range(N):
        plain.produce(SRC, f"payment {i}".encode(), key=f"account-{i % 7}".encode())
    plain.close()
    upstream = Producer(bootstrap_servers=bootstrap, transactional_id=f"upstream-{RUN}", acks="all")
    upstream.init_transactions()
    upstream.begin_transaction()
    upstream.send([ProducerData(SRC, None, [b"void payment"]) for _ in range(20)])
    upstream.abort_transaction()
    upstream.close()

    auditor(bootstrap, crash_after=4)
    second = auditor(bootstrap)
    print(f"incarnation 2: took over, resumed and committed {second} transactions")

    out = read_all(bootstrap, DST, "read_committed")
    expected = sorted(transform(f"payment {i}".encode()) for i in range(N))
    print(f"read_committed output: {len(out)} records, {len(set(out))} distinct")
    print("every input record exactly once:", sorted(out) == expected)
    raw = read_all(bootstrap, DST, "read_uncommitted")
    print(f"read_uncommitted output: {len(raw)} records (the crashed transaction's are in the log, aborted)")
