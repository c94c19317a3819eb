"""The broker's metrics under Kafka's MBean names, and the Prometheus endpoint that serves them.

Groups are Kafka's ``domain.type`` and names its ``name`` (``kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions`` is ``kafka.server.ReplicaManager`` / ``UnderReplicatedPartitions``).
Kafka's ``...PerSec`` meters are rates per second over the registry's window (Kafka shows a
one-minute EWMA; ours is the windowed rate of :mod:`hmbclient.metrics`), each with a ``-total``
beside it; Kafka's histograms (``RequestQueueTimeMs``, ``TotalTimeMs``) are ``-avg``/``-max``.

Recorded (one call per request or per partition append, never per record):

* ``kafka.server.BrokerTopicMetrics``: ``MessagesInPerSec``, ``BytesInPerSec`` (client appends
  to a leader), ``BytesOutPerSec`` (record bytes answered to consumers),
  ``ReplicationBytesOutPerSec`` (to followers), ``TotalProduceRequestsPerSec``,
  ``TotalFetchRequestsPerSec``, ``FailedProduceRequestsPerSec``; the first three also per topic
  (tag ``topic``, as Kafka's), created when a topic first sees traffic;
* ``kafka.server.ReplicaManager``: ``IsrShrinksPerSec``, ``IsrExpandsPerSec`` and the gauges
  ``UnderReplicatedPartitions``, ``PartitionCount``, ``LeaderCount``;
* ``kafka.network.RequestChannel``: ``RequestQueueTimeMs`` (a request waiting for a handler
  thread; 0 when the network thread served it at once) and ``TotalTimeMs`` (decoded to answered),
  ``RequestsPerSec``;
* ``kafka.server.DelayedOperationPurgatory``: ``PurgatorySize.Produce`` / ``.Fetch`` gauges;
* ``kafka.controller.KafkaController``: ``ActiveControllerCount`` gauge;
* ``kafka.server.ClientQuotaManager``: ``Produce-throttle-time-avg``/``-max`` and
  ``Fetch-throttle-time-avg``/``-max`` (ms, over the answers to clients with a quota, 0 included; Kafka's
  ``kafka.server:type=Produce|Fetch`` ``throttle-time``, here summed over users and client ids).

:class:`MetricsEndpoint` serves ``GET /metrics`` (Prometheus text format 0.0.4) on its own
thread (``metrics.port``; 0 picks a free port); any other path answers 404.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hmbclient.metrics import Metrics, Sensor, prometheus_text

__all__ = ["BrokerMetrics", "MetricsEndpoint"]

log = logging.getLogger("hmbclient.broker.metrics")

TOPICS = "kafka.server.BrokerTopicMetrics"
REPLICAS = "kafka.server.ReplicaManager"
REQUESTS = "kafka.network.RequestChannel"
PURGATORY = "kafka.server.DelayedOperationPurgatory"
CONTROLLER = "kafka.controller.KafkaController"
QUOTAS = "kafka.server.ClientQuotaManager"

_PRODUCE, _FETCH = 0, 1


class BrokerMetrics:
    """The broker's sensors; ``registry`` is what ``Broker.metrics()`` and the endpoint read."""

    def __init__(self, registry: Metrics) -> None:
        self.registry = registry
        r = registry
        self._messages_in = r.rate("messages-in", TOPICS, "MessagesInPerSec", "records appended by clients to leaders")
        self._bytes_in = r.rate("bytes-in", TOPICS, "BytesInPerSec", "record bytes appended by clients to leaders")
        self._bytes_out = r.rate("bytes-out", TOPICS, "BytesOutPerSec", "record bytes answered to consumers")
        self._produce_throttle = r.avg_max("produce-throttle", QUOTAS, "Produce-throttle-time", "ms a Produce answer was throttled by a client quota")
        self._fetch_throttle = r.avg_max("fetch-throttle", QUOTAS, "Fetch-throttle-time", "ms a Fetch answer was throttled by a client quota")
        self._repl_out = r.rate("replication-bytes-out", TOPICS, "ReplicationBytesOutPerSec", "record bytes answered to followers")
        self._produce_reqs = r.rate("produce-requests", TOPICS, "TotalProduceRequestsPerSec", "Produce requests")
        self._fetch_reqs = r.rate("fetch-requests", TOPICS, "TotalFetchRequestsPerSec", "Fetch requests (consumers and followers)")
        self._failed_produce = r.rate("failed-produce", TOPICS, "FailedProduceRequestsPerSec", "partition appends refused")
        self._shrinks = r.rate("isr-shrinks", REPLICAS, "IsrShrinksPerSec", "ISR shrinks written")
        self._expands = r.rate("isr-expands", REPLICAS, "IsrExpandsPerSec", "ISR expansions written")
        self._queue_time = r.avg_max("request-queue-time", REQUESTS, "RequestQueueTimeMs", "ms a request waited for a handler thread")
        self._total_time = r.avg_max("request-total-time", REQUESTS, "TotalTimeMs", "ms from a request decoded to its answer queued")
        self._requests = r.rate("requests", REQUESTS, "RequestsPerSec", "requests decoded")
        #: topic -> (messages in, bytes in, bytes out) sensors
        self._per_topic: dict[str, tuple[Sensor, Sensor, Sensor]] = {}
        self._lock = threading.Lock()

    def _topic(self, topic: str) -> tuple[Sensor, Sensor, Sensor]:
        sensors = self._per_topic.get(topic)
        if sensors is None:
            with self._lock:
                sensors = self._per_topic.get(topic)
                if sensors is None:
                    r, tags = self.registry, {"topic": topic}
                    sensors = self._per_topic[topic] = (
                        r.rate(f"messages-in:{topic}", TOPICS, "MessagesInPerSec", "records appended by clients to leaders", tags),
                        r.rate(f"bytes-in:{topic}", TOPICS, "BytesInPerSec", "record bytes appended by clients to leaders", tags),
                        r.rate(f"bytes-out:{topic}", TOPICS, "BytesOutPerSec", "record bytes answered to consumers", tags),
                    )
        return sensors

    # -- gauges (read on demand) -------------------------------------------------------------------
    def watch_replicas(self, under_replicated: Callable[[], int], partitions: Callable[[], int], leaders: Callable[[], int]) -> None:
        self.registry.gauge(REPLICAS, "UnderReplicatedPartitions", under_replicated, "led partitions whose ISR is smaller than their replicas")
        self.registry.gauge(REPLICAS, "PartitionCount", partitions, "partitions hosted")
        self.registry.gauge(REPLICAS, "LeaderCount", leaders, "partitions led")

    def watch_purgatories(self, produce: Callable[[], int], fetch: Callable[[], int]) -> None:
        self.registry.gauge(PURGATORY, "PurgatorySize.Produce", produce, "Produce requests waiting for acks=-1")
        self.registry.gauge(PURGATORY, "PurgatorySize.Fetch", fetch, "Fetch requests waiting for data")

    def watch_controller(self, active: Callable[[], bool]) -> None:
        self.registry.gauge(CONTROLLER, "ActiveControllerCount", lambda: 1.0 if active() else 0.0, "1 on the active controller")

    # -- recording ---------------------------------------------------------------------------------
    def appended(self, topic: str, records: int, nbytes: int) -> None:
        self._messages_in.record(records)
        self._bytes_in.record(nbytes)
        messages, bytes_in, _ = self._topic(topic)
        messages.record(records)
        bytes_in.record(nbytes)

    def throttled(self, fetch: bool, ms: int) -> None:
        """A Produce (or Fetch) answer throttled ``ms`` by a client quota."""
        (self._fetch_throttle if fetch else self._produce_throttle).record(ms)

    def append_failed(self) -> None:
        self._failed_produce.record(1)

    def fetched(self, per_topic: dict[str, int], replica: bool) -> None:
        """Record bytes answered to a fetch: ``{topic: bytes}``."""
        if replica:
            self._repl_out.record(sum(per_topic.values()))
            return
        self._bytes_out.record(sum(per_topic.values()))
        for topic, nbytes in per_topic.items():
            self._topic(topic)[2].record(nbytes)

    def isr_changed(self, old: int, new: int) -> None:
        if new < old:
            self._shrinks.record(1)
        elif new > old:
            self._expands.record(1)

    def request(self, api_key: int, queue_ms: float) -> None:
        """A request is being handled, after ``queue_ms`` in the handler queue."""
        self._requests.record(1)
        self._queue_time.record(queue_ms)
        if api_key == _PRODUCE:
            self._produce_reqs.record(1)
        elif api_key == _FETCH:
            self._fetch_reqs.record(1)

    def answered(self, total_ms: float) -> None:
        self._total_time.record(total_ms)


class MetricsEndpoint:
    """``GET /metrics`` in Prometheus text format on ``host:port`` (its own daemon thread).

    Args:
        registries: returns the registries to render (read at each scrape).
        host: the address to listen on.
        port: the port (0: any free one; see :attr:`port`).
    """

    def __init__(self, registries: Callable[[], list[Metrics]], host: str, port: int) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                body = prometheus_text(outer._registries()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args: Any) -> None:
                log.debug("metrics endpoint: " + fmt, *args)

        self._registries = registries
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"metrics-{self.port}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
