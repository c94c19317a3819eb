"""hmbclient's idempotent producer (``enable.idempotence``, acks=-1) against Apache Kafka 4.x.

* Straight: sync and async, keyed values over 3 partitions; Kafka's own Java consumer reads
  every value back exactly once and in send order per partition, and the producer really ran
  idempotent (it holds a producer id Kafka's InitProducerId gave it).
* Lost answers: hmbclient.testing.FaultProxy in front of the Kafka node closes the link instead
  of passing on every 3rd Produce answer (Kafka stored the batch, the producer never heard and
  retries it). Kafka de-duplicates by (producer id, epoch, sequence): 0 duplicates, 0 lost,
  per-partition order kept. The proxy must really have dropped answers and must have kept the
  client on itself (Metadata rewritten), else the check proves nothing; the same run without
  idempotence is the control that stores duplicates.

What hmbclient negotiates with Kafka 4.x here (seen through the proxy when this was written):
ApiVersions v0, Metadata v8 (rewritten by the proxy), InitProducerId v3 (flexible: passed
unchanged, the proxy only reads its correlation id), Produce v7 -- none of them among the
versions KIP-896 removed, so the idempotent path needed no fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient import Producer, ProducerData, admin
from hmbclient.testing import FaultProxy, drop_every

from .helpers import java_read_all, unique

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 3
N = 1200


def _send(bootstrap: str, topic: str, ptype: str, idempotence: bool, **extra: Any) -> tuple[dict[int, list[bytes]], Any]:
    """N keyed values over PARTITIONS partitions; returns what was sent to each partition in
    send order (every future must succeed) and the producer's identity."""
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    with Producer(metadata_broker_list=bootstrap, producer_type=ptype, request_required_acks=-1,
                  enable_idempotence=idempotence, batch_num_messages=40, **extra) as p:
        assert p.idempotent is idempotence
        futures: list[tuple[bytes, Any]] = []
        if ptype == "sync":
            for start in range(0, N, 40):
                key = b"key-%d" % (start // 40 % 7)
                vals = [b"%s:%05d" % (key, i) for i in range(start, start + 40)]
                futures += zip(vals, p.send(ProducerData(topic, key, vals)), strict=True)
        else:
            for i in range(N):
                key = b"key-%d" % (i % 7)
                value = b"%s:%05d" % (key, i)
                futures.append((value, p.send(ProducerData(topic, key, [value]))[0]))
            p.flush()
        for value, f in futures:
            sent[f.result(60).partition].append(value)
        identity = p.producer_identity
    return sent, identity


def _stored(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes | None]]:
    records = java_read_all(bootstrap, topic, count)
    return {p: [r[4] for r in records if r[1] == p] for p in range(PARTITIONS)}


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_idempotent_producer_every_value_once_in_order(kafka4, ptype):
    topic = unique(f"idem-{ptype}")
    admin.create_topic(kafka4.bootstrap, topic, PARTITIONS, 1)
    sent, identity = _send(kafka4.bootstrap, topic, ptype, True)
    assert identity is not None and identity[0] >= 0 and identity[1] >= 0, identity
    assert sum(map(len, sent.values())) == N
    stored = _stored(kafka4.bootstrap, topic, N)
    for p in range(PARTITIONS):
        assert stored[p] == sent[p], f"partition {p}: {len(stored[p])} stored, {len(sent[p])} sent"


@pytest.fixture
def proxy(kafka4) -> Iterator[FaultProxy]:
    with FaultProxy(kafka4.bootstrap, drop=drop_every(3)) as fp:
        yield fp


_LOSSY = {"message_send_max_retries": 50, "retry_backoff_ms": 20, "batch_max_bytes": 1_500,
          "queue_buffering_max_ms": 2, "request_timeout_ms": 5_000}


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_lost_produce_answers_no_duplicates_no_loss(kafka4, proxy, ptype):
    topic = unique(f"idemproxy-{ptype}")
    admin.create_topic(kafka4.bootstrap, topic, PARTITIONS, 1)
    sent, _ = _send(proxy.bootstrap, topic, ptype, True, **_LOSSY)
    stats = proxy.stats()
    assert proxy.failure is None
    assert stats["dropped"] >= 3, stats  # answers really were lost...
    assert stats["passed"] >= N // 40, stats  # ...and the producer stayed on the proxy
    assert sum(map(len, sent.values())) == N
    stored = _stored(kafka4.bootstrap, topic, N)
    for p in range(PARTITIONS):
        dups = len(stored[p]) - len(set(stored[p]))
        lost = set(sent[p]) - set(stored[p])
        assert (dups, len(lost)) == (0, 0), f"partition {p}: {dups} duplicates, {len(lost)} lost"
        assert stored[p] == sent[p], f"partition {p}: order"


def test_control_without_idempotence_the_proxy_makes_duplicates(kafka4, proxy):
    topic = unique("idemcontrol")
    admin.create_topic(kafka4.bootstrap, topic, PARTITIONS, 1)
    sent, _ = _send(proxy.bootstrap, topic, "async", False, **_LOSSY)
    assert proxy.stats()["dropped"] >= 1
    records = java_read_all(kafka4.bootstrap, topic, N)
    stored = [r[4] for r in records]
    assert len(stored) > N, "no duplicates: the proxy lost no answers"
    assert set(stored) == {v for vs in sent.values() for v in vs}
