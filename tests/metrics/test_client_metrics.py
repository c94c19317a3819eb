"""Producer metrics recorded by the real send engine against the embedded broker (counts are
exact; the latency and size figures are checked against what the test knows of them)."""

from __future__ import annotations

import math

import pytest

from hmbclient import Producer, ProducerData
from hmbclient.errors import MessageSizeTooLargeError


def test_async_producer_metrics_count_what_it_sent(hmb_broker) -> None:
    p = Producer(metadata_broker_list=hmb_broker.bootstrap, producer_type="async", client_id="metered",
                 request_required_acks=-1, batch_num_messages=50, queue_buffering_max_ms=5)
    try:
        before = p.metrics()["producer-metrics"]
        assert before["record-send-total"] == 0 and math.isnan(before["request-latency-avg"])
        for i in range(500):
            p.send(ProducerData("metrics-topic", None, f"value-{i:04d}".encode()))
        assert p.flush(30) == 0
        m = p.metrics()["producer-metrics"]
    finally:
        p.close()
    assert m["record-send-total"] == 500 and m["record-error-total"] == 0 and m["record-retry-total"] == 0
    assert m["record-send-rate"] > 0
    # at most 50 records per batch: at least 10 batches, each holding >= 10 bytes per record
    # every record's value is 10 bytes: a request's record bytes are at least 10 per record
    assert 0 < m["batch-size-avg"] <= m["batch-size-max"] and m["request-size-max"] >= 10 * m["records-per-request-avg"]
    assert 1 <= m["records-per-request-avg"] <= 500
    # the answers: Metadata, InitProducerId (idempotent by default with acks=-1), >= 1 Produce
    assert m["request-latency-max"] >= m["request-latency-avg"] >= 0 and m["response-total"] >= 3
    assert m["record-queue-time-max"] >= 0 and m["record-queue-size"] == 0 and m["requests-in-flight"] == 0


def test_records_the_broker_refuses_are_counted_as_errors(hmb_broker_factory) -> None:
    # a message over the broker's message.max.bytes is refused for good (not retriable)
    broker = hmb_broker_factory(port=0, message_max_bytes=2_000)
    p = Producer(metadata_broker_list=broker.bootstrap)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            p.send(ProducerData("metrics-too-big", None, [b"x" * 5_000, b"y" * 5_000]))
        m = p.metrics()["producer-metrics"]
    finally:
        p.close()
    assert m["record-error-total"] == 2 and m["record-send-total"] == 2 and m["record-retry-total"] == 0
