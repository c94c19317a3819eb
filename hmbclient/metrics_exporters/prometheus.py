"""hmbclient's metrics for ``prometheus_client`` (the ``prometheus`` extra).

    from prometheus_client import CollectorRegistry, start_http_server
    from hmbclient.metrics_exporters.prometheus import register

    registry = CollectorRegistry()
    collector = register(producer, consumer, registry=registry)
    start_http_server(8000, addr="127.0.0.1", registry=registry)   # GET /metrics
    ...
    registry.unregister(collector)

Contract
--------
* :class:`MetricsCollector` is a ``prometheus_client`` collector: each ``collect()`` reads the
  sources' registries (see :mod:`hmbclient.metrics_exporters`) and yields one family per metric
  name, ``hmb_<group>_<name>`` (:func:`hmbclient.metrics.prometheus_name`:
  ``hmb_producer_metrics_record_send_rate``, the broker's endpoint's names), with the tags as
  labels (``client_id``, ``topic``, ``broker``).
* Case (counter): a cumulative metric named ``..._total`` is a counter family (the text shows
  ``# TYPE hmb_producer_metrics_record_send_total counter``); case (gauge): everything else.
* Case (several sources): samples of one name from several registries go into one family, told
  apart by their labels; give each client its own ``client.id`` (two series with the same
  labels would be duplicates to a Prometheus server).
* ``describe()`` answers nothing, so registering reads no value and never fails on a name
  (metrics such as the broker's per-topic ones appear later).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from hmbclient.metrics import prometheus_label, prometheus_name
from hmbclient.metrics_exporters import MetricsSources, missing_extra

try:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
except ImportError as exc:  # pragma: no cover - the extra's own message
    raise missing_extra(__name__, "prometheus_client", "prometheus", exc.name) from exc

__all__ = ["MetricsCollector", "register"]


class MetricsCollector(MetricsSources, Collector):
    """A ``prometheus_client`` collector of hmbclient metrics; ``add`` / ``remove`` change its
    sources from the next scrape on.

    Args:
        *sources: registries or clients/brokers (anything with ``metrics_registry``).
        prefix: the namespace of every name (``hmb``; empty: none).

    Raises:
        TypeError: a source is not a metrics source.
    """

    def __init__(self, *sources: Any, prefix: str = "hmb") -> None:
        MetricsSources.__init__(self, sources)
        self.prefix = prefix

    def describe(self) -> Iterable[Metric]:
        """Nothing: the names are known only when collected (see the module doc)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One family per metric name of the sources' registries, read now."""
        families: dict[str, Metric] = {}
        for registry in self.registries():
            for s in registry.samples():
                name = prometheus_name(s.group, s.name, self.prefix)
                family = families.get(name)
                if family is None:
                    counter = s.kind == "counter" and name.endswith("_total")  # case (counter)
                    help_text = s.description or f"{s.group} {s.name}"
                    family = families[name] = (Metric(name[: -len("_total")], help_text, "counter") if counter
                                               else Metric(name, help_text, "gauge"))
                labels = {prometheus_label(k): str(v) for k, v in s.tags.items()}
                family.add_sample(name, labels, s.value)
        yield from families.values()


def register(*sources: Any, registry: CollectorRegistry = REGISTRY, prefix: str = "hmb") -> MetricsCollector:
    """Register a :class:`MetricsCollector` of ``sources`` into ``registry``.

    Args:
        *sources: registries or clients/brokers (anything with ``metrics_registry``).
        registry: the ``CollectorRegistry`` (default: prometheus_client's global one, which
            ``start_http_server`` serves by default).
        prefix: the namespace of every name.

    Returns:
        The collector (``registry.unregister(collector)`` stops the export).

    Raises:
        TypeError: a source is not a metrics source.
    """
    collector = MetricsCollector(*sources, prefix=prefix)
    registry.register(collector)
    return collector
