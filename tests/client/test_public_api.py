"""The public names of this wave as users call them (property-name keywords, Java/librdkafka
method names), end to end on the embedded broker: an idempotent produce() with a delivery
callback, a transaction with offsets sent in it, the subscribe/poll Consumer with
read_committed, static membership and cooperative-sticky, and the data stores."""

from __future__ import annotations

import time

from hmbclient import Consumer, Producer, ProducerData
from hmbclient.broker import EmbeddedBroker
from hmbclient.store import CloneStore, MasterStore


def test_the_waves_public_names_end_to_end(tmp_path) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), group_initial_rebalance_delay_ms=0) as b:
        boot = b.bootstrap
        p = Producer(**{"metadata.broker.list": boot, "enable.idempotence": True, "request.required.acks": -1})
        t = Producer(**{"metadata.broker.list": boot, "transactional.id": "orders-1"})  # acks implied: all
        c = Consumer(**{"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                        "isolation.level": "read_committed", "group.instance.id": "a",
                        "partition.assignment.strategy": "cooperative-sticky"})
        try:
            delivered: list[object] = []
            p.produce("api-out", b"value", key=b"k", on_delivery=lambda err, msg: delivered.append((err, msg)))
            p.poll(0)
            assert p.flush(10) == 0 and len(delivered) == 1 and delivered[0][0] is None
            assert t.config.request_required_acks == -1
            t.init_transactions()
            t.begin_transaction()
            t.send(ProducerData("api-txn", messages=[b"x"]))
            t.send_offsets_to_transaction({("api-out", 0): 1}, "g")
            t.commit_transaction()
            t.begin_transaction()
            t.send(ProducerData("api-txn", messages=[b"aborted"]))
            t.abort_transaction()
            events: list[str] = []
            c.subscribe(["api-txn"], on_assign=lambda *a: events.append("assign"),
                        on_revoke=lambda *a: events.append("revoke"), on_lost=lambda *a: events.append("lost"))
            records: list = []
            deadline = time.monotonic() + 20
            while not records and time.monotonic() < deadline:
                records = c.poll(timeout=1.0)
            assert [(r.topic, r.partition, r.offset, r.value) for r in records] == [("api-txn", 0, 0, b"x")]
            # the offsets sent in the committed transaction are the group's
            assert events == ["assign"] and c.committed([("api-out", 0)]) == {("api-out", 0): 1}
            c.commit()
        finally:
            c.close()
            p.close()
            t.close()
        m = MasterStore("api", **{"bootstrap.servers": boot})
        clone = CloneStore("api", **{"bootstrap.servers": boot})
        try:
            clone.put("k", 1)
            clone.await_idle(10)
            assert m.get("k") == 1
        finally:
            clone.close()
            m.close()
