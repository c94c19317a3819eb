"""The metric exporters with the real libraries: a producer and a consumer of ours against an
embedded broker, their metrics (and the broker's) served by ``prometheus_client``'s own HTTP
server and scraped over a socket, and read by OpenTelemetry's SDK through its
``InMemoryMetricReader``; the values are the ones the clients counted. Without the libraries,
nothing of hmbclient imports them and the exporter modules name the extra to install."""

from __future__ import annotations

import math
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from hmbclient import Consumer, Producer, ProducerData
from hmbclient.broker import EmbeddedBroker
from hmbclient.metrics import Metrics
from hmbclient.metrics_exporters.otel import MetricsBridge, instrument_name
from hmbclient.metrics_exporters.prometheus import MetricsCollector, register

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "exported"
SENT = 300


class Traffic:
    """The broker, a producer that sent SENT records and a consumer that read them back."""

    def __init__(self, broker: EmbeddedBroker, producer: Producer, consumer: Consumer, consumed: int) -> None:
        self.broker, self.producer, self.consumer, self.consumed = broker, producer, consumer, consumed


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("exp"))) as broker:
        producer = Producer(metadata_broker_list=broker.bootstrap, client_id="exp-producer", request_required_acks=1)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "exp-consumer",
                             "auto.offset.reset": "earliest", "fetch.max.wait.ms": 50})
        try:
            for i in range(0, SENT, 100):
                producer.send(ProducerData(TOPIC, None, [b"v-%03d" % j for j in range(i, i + 100)]))
            consumer.assign([(TOPIC, 0)])
            got: list[Any] = []
            wait_until(lambda: got.extend(consumer.poll(0.2)) or len(got) >= SENT, timeout_s=30, what="records read back")
            yield Traffic(broker, producer, consumer, len(got))
        finally:
            consumer.close()
            producer.close()


def _scrape(port: int) -> dict[str, Any]:
    """GET /metrics of the prometheus_client server, parsed by prometheus_client's own parser:
    {family name: family}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    for s in families[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no {sample}{labels} in {family}")


def test_prometheus_client_serves_the_clients_and_the_brokers_metrics(traffic: Traffic) -> None:
    registry = CollectorRegistry()
    collector = register(traffic.producer, traffic.consumer, traffic.broker, registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        fams = _scrape(server.server_port)
        # producer: a counter family (name without _total) and a gauge, labelled with client_id
        sent = fams["hmb_producer_metrics_record_send"]
        assert sent.type == "counter"
        assert _value(fams, "hmb_producer_metrics_record_send", "hmb_producer_metrics_record_send_total",
                      client_id="exp-producer") == SENT
        assert fams["hmb_producer_metrics_record_send_rate"].type == "gauge"
        assert _value(fams, "hmb_producer_metrics_record_send_rate", "hmb_producer_metrics_record_send_rate",
                      client_id="exp-producer") > 0
        # consumer: what it consumed
        consumed = _value(fams, "hmb_consumer_fetch_manager_metrics_records_consumed",
                          "hmb_consumer_fetch_manager_metrics_records_consumed_total", client_id="exp-consumer")
        assert consumed == traffic.consumed == traffic.consumer.metrics()["consumer-fetch-manager-metrics"]["records-consumed-total"]
        # broker: per-topic metrics with the topic label, the same names as its own endpoint's
        msgs = "hmb_kafka_server_BrokerTopicMetrics_MessagesInPerSec"
        assert _value(fams, msgs, msgs + "_total", broker="0", topic=TOPIC) == SENT
        assert _value(fams, "hmb_producer_metrics_record_error", "hmb_producer_metrics_record_error_total") == 0
        # an average with nothing recorded is NaN, as Kafka's (no commit happened)
        assert math.isnan(_value(fams, "hmb_consumer_coordinator_metrics_commit_latency_avg",
                                 "hmb_consumer_coordinator_metrics_commit_latency_avg"))

        # a source removed is gone from the next scrape; unregistered, nothing of ours is served
        collector.remove(traffic.producer)
        fams = _scrape(server.server_port)
        assert "hmb_producer_metrics_record_send" not in fams and "hmb_consumer_fetch_manager_metrics_records_consumed" in fams
        registry.unregister(collector)
        assert not [n for n in _scrape(server.server_port) if n.startswith("hmb_")]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _points(reader: InMemoryMetricReader) -> dict[str, tuple[Any, list[Any]]]:
    """{instrument name: (its data, its data points)} of one collection (None: no point at all)."""
    data = reader.get_metrics_data()
    if data is None:
        return {}
    return {m.name: (m.data, list(m.data.data_points))
            for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def _point(points: dict[str, tuple[Any, list[Any]]], name: str, **attrs: str) -> Any:
    for p in points[name][1]:
        if all(p.attributes.get(k) == v for k, v in attrs.items()):
            return p
    raise AssertionError(f"no {name}{attrs}")


def test_opentelemetry_reader_reads_the_same_values(traffic: Traffic) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        bridge = MetricsBridge(traffic.producer, traffic.consumer, meter_provider=provider)
        points = _points(reader)
        send_total = instrument_name("producer-metrics", "record-send-total")
        assert send_total == "hmb.producer-metrics.record-send-total"
        data, _ = points[send_total]
        assert isinstance(data, Sum) and data.is_monotonic
        assert _point(points, send_total, **{"client-id": "exp-producer"}).value == SENT
        rate = instrument_name("producer-metrics", "record-send-rate")
        assert isinstance(points[rate][0], Gauge) and _point(points, rate, **{"client-id": "exp-producer"}).value > 0
        consumed = instrument_name("consumer-fetch-manager-metrics", "records-consumed-total")
        assert _point(points, consumed, **{"client-id": "exp-consumer"}).value == traffic.consumed == SENT
        # NaN (an average with nothing recorded: no commit happened) is left out, not exported
        commit_avg = instrument_name("consumer-coordinator-metrics", "commit-latency-avg")
        assert commit_avg in bridge.instruments and points.get(commit_avg, (None, []))[1] == []

        # the broker's names come with add(); a metric's new tag set (per topic) is a point
        assert bridge.refresh() == []
        bridge.add(traffic.broker)
        msgs = instrument_name("kafka.server.BrokerTopicMetrics", "MessagesInPerSec-total")
        assert msgs in bridge.instruments
        assert _point(_points(reader), msgs, topic=TOPIC, broker="0").value == SENT

        bridge.close()
        assert _points(reader) == {}
    finally:
        provider.shutdown()


def test_a_registry_is_a_source_and_anything_else_is_refused() -> None:
    reg = Metrics(tags={"client-id": "raw"})
    reg.rate("events", "app-metrics", "events").record(4)
    registry = CollectorRegistry()
    register(reg, registry=registry)
    assert registry.get_sample_value("hmb_app_metrics_events_total", {"client_id": "raw"}) == 4
    with pytest.raises(TypeError, match="not a metrics source"):
        MetricsCollector(object())
    with pytest.raises(TypeError, match="not a metrics source"):
        MetricsBridge("producer", meter_provider=MeterProvider())


def test_hmbclient_imports_neither_library_and_the_exporters_name_their_extra() -> None:
    code = """
import sys
import hmbclient, hmbclient.metrics, hmbclient.broker, hmbclient.aio, hmbclient.metrics_exporters
from hmbclient import Producer, Consumer
loaded = [m for m in sys.modules if m.split('.')[0] in ('prometheus_client', 'opentelemetry')]
assert not loaded, loaded
sys.modules['prometheus_client'] = None      # as if not installed
sys.modules['opentelemetry'] = None
for mod, extra in (('prometheus', 'prometheus'), ('otel', 'otel')):
    try:
        __import__('hmbclient.metrics_exporters.' + mod)
    except ModuleNotFoundError as e:  # an ImportError naming the missing module, as Python's
        assert f"pip install 'hmbclient[{extra}]'" in str(e), str(e)
        assert e.name.split('.')[0] in ('prometheus_client', 'opentelemetry'), e.name
    else:
        raise AssertionError(mod + ' imported without its library')
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
