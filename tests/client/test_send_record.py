"""Producer.send_record: one message to an explicit partition, with record headers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient import FetchRequest, Producer, SimpleConsumer
from hmbclient.broker import EmbeddedBroker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(log_dir=str(tmp_path_factory.mktemp("send-record")), num_partitions=3) as b:
        yield b


def _read(b: EmbeddedBroker, topic: str, partition: int) -> list[Any]:
    c = SimpleConsumer(b.host, b.port)
    try:
        return [mo.message for mo in c.fetch(FetchRequest(topic, partition, 0, 1 << 20))]
    finally:
        c.close()


def test_explicit_partition_and_headers(broker: EmbeddedBroker) -> None:
    with Producer(metadata_broker_list=broker.bootstrap, producer_type="async", request_required_acks=1) as p:
        futures = [p.send_record("rec", b"v%d" % i, b"k", partition=i % 3, headers=[("n", b"%d" % i), ("empty", None)]) for i in range(9)]
        metas = [f.result(10) for f in futures]
    assert [m.partition for m in metas] == [i % 3 for i in range(9)]
    for part in range(3):
        msgs = _read(broker, "rec", part)
        assert [m.value for m in msgs] == [b"v%d" % i for i in range(9) if i % 3 == part]
        assert [m.headers for m in msgs] == [(("n", b"%d" % i), ("empty", None)) for i in range(9) if i % 3 == part]


def test_refusals(broker: EmbeddedBroker) -> None:
    with Producer(metadata_broker_list=broker.bootstrap, producer_type="async") as p:
        with pytest.raises(ValueError, match="partition 3 is out of range"):
            p.send_record("rec", b"x", partition=3)
        with pytest.raises(TypeError):
            p.send_record("rec", 12345)
    with Producer(metadata_broker_list=broker.bootstrap) as sync:
        with pytest.raises(TypeError, match="producer_type='async'"):
            sync.send_record("rec", b"x")
