"""The producer's metrics, under Kafka's group and names (``producer-metrics``).

Recorded by the send engine (one call per Produce request or per batch, never per message):

* ``record-send-rate`` / ``record-send-total``: records sent in Produce requests (a retried
  record counts again, as in Kafka);
* ``record-retry-rate`` / ``-total`` and ``record-error-rate`` / ``-total``: records put back
  for a retry, and records whose delivery failed for good;
* ``batch-size-avg`` / ``-max``: bytes of one partition's record set in a request;
* ``records-per-request-avg``, ``request-size-avg`` / ``-max`` (record bytes of a request);
* ``record-queue-time-avg`` / ``-max``: ms from a batch's creation to its first send;
* ``request-latency-avg`` / ``-max`` and ``response-rate`` from the network client;
* gauges: ``record-queue-size`` (messages waiting in the accumulator) and ``requests-in-flight``.
"""

from __future__ import annotations

from collections.abc import Callable

from hmbclient.metrics import Avg, Max, Metrics

__all__ = ["GROUP", "ProducerMetrics"]

GROUP = "producer-metrics"


class ProducerMetrics:
    """The producer's sensors in one registry (``registry``, shared with its NetClient)."""

    def __init__(self, registry: Metrics) -> None:
        self.registry = registry
        n, w = registry.num_samples, registry.sample_window_ms
        self._send = registry.rate("record-send", GROUP, "record-send", "records sent in Produce requests")
        self._retry = registry.rate("record-retry", GROUP, "record-retry", "records put back for a retry")
        self._error = registry.rate("record-error", GROUP, "record-error", "records whose delivery failed")
        self._batch = registry.avg_max("batch-size", GROUP, "batch-size", "bytes of one partition's records in a request")
        self._request = registry.avg_max("request-size", GROUP, "request-size", "record bytes of one Produce request")
        self._per_request = registry.sensor("records-per-request").add(
            GROUP, "records-per-request-avg", Avg(n, w), "records in one Produce request"
        )
        self._queue_time = registry.sensor("record-queue-time").add(
            GROUP, "record-queue-time-avg", Avg(n, w), "ms from a batch's creation to its first send"
        ).add(GROUP, "record-queue-time-max", Max(n, w), "ms from a batch's creation to its first send")

    def watch(self, queued: Callable[[], float], in_flight: Callable[[], float]) -> None:
        """Register the gauges (the accumulator's queued messages, requests in flight)."""
        self.registry.gauge(GROUP, "record-queue-size", queued, "messages waiting to be sent")
        self.registry.gauge(GROUP, "requests-in-flight", in_flight, "Produce requests awaiting their answer")

    def request(self, records: int, batch_bytes: list[int], queue_ms: list[float]) -> None:
        """One Produce request: its record count, each partition's record-set size, and the
        queue time of each batch sent for the first time."""
        self._send.record(records)
        self._per_request.record(records)
        total = 0
        for b in batch_bytes:
            self._batch.record(b)
            total += b
        self._request.record(total)
        for q in queue_ms:
            self._queue_time.record(q)

    def retried(self, records: int) -> None:
        self._retry.record(records)

    def failed(self, records: int) -> None:
        self._error.record(records)
