"""hmbclient's metrics as OpenTelemetry observable instruments (the ``otel`` extra).

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from hmbclient.metrics_exporters.otel import MetricsBridge

    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter)])
    bridge = MetricsBridge(producer, consumer, meter_provider=provider)
    ...
    bridge.close()

Contract
--------
* :class:`MetricsBridge` declares, on a ``Meter`` of the given ``MeterProvider`` (default: the
  global one), one observable instrument per metric name of its sources' registries:
  ``<prefix>.<group>.<name>`` lowered (``hmb.producer-metrics.record-send-rate``,
  ``hmb.kafka.server.brokertopicmetrics.bytesinpersec-total``: OpenTelemetry's names are
  case-insensitive and its SDK lowers them), the tags as attributes
  (``client-id``, ``topic``, ``broker``), the description as the instrument's.
* Case (counter): a cumulative metric (``Total``/``Count``) is an ``ObservableCounter`` (its value
  the running total, as OpenTelemetry's asynchronous counters report); case (gauge): the rest is
  an ``ObservableGauge``.
* Values are read in the instrument's callback, i.e. only when a reader collects; a NaN (an
  average with nothing recorded yet, a lag not known) is left out of that collection.
* Case (new names): OpenTelemetry cannot declare an instrument while a reader collects, so
  names that appear after the bridge was made (a broker started later, a source added) are
  declared by :meth:`MetricsBridge.refresh` (``add`` calls it). The same name's new tag sets
  (the broker's per-topic metrics) need nothing: they are attributes of the one instrument.
* Only ``opentelemetry-api`` is imported here; the ``MeterProvider`` and readers are the
  application's (``opentelemetry-sdk``, installed by the extra too).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from hmbclient.metrics_exporters import MetricsSources, missing_extra

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
except ImportError as exc:  # pragma: no cover - the extra's own message
    raise missing_extra(__name__, "opentelemetry-api", "otel", exc.name) from exc

__all__ = ["MetricsBridge", "instrument_name"]


def instrument_name(group: str, name: str, prefix: str = "hmb") -> str:
    """The OpenTelemetry instrument name of metric ``(group, name)``.

    Args:
        group: the metric group (``producer-metrics``).
        name: the metric name (``record-send-rate``).
        prefix: the namespace put first (empty: none).

    Returns:
        ``<prefix>.<group>.<name>`` in lower case (OpenTelemetry's names are case-insensitive
        and its SDK exports them lowered: ``BytesInPerSec-total`` is ``bytesinpersec-total``),
        any character it refuses in a name (it allows letters, digits, ``_``, ``.``, ``-`` and
        ``/``) as ``_``.
    """
    raw = ".".join(p for p in (prefix, group, name) if p)
    return "".join(c if c.isascii() and (c.isalnum() or c in "_.-/") else "_" for c in raw).lower()


class MetricsBridge(MetricsSources):
    """Observable instruments that read hmbclient metrics when an OpenTelemetry reader collects.

    Args:
        *sources: registries or clients/brokers (anything with ``metrics_registry``).
        meter_provider: the provider (None: OpenTelemetry's global one).
        prefix: the namespace of every instrument name.
        meter_name: the name of the ``Meter`` (the instrumentation scope).

    Raises:
        TypeError: a source is not a metrics source.
    """

    def __init__(self, *sources: Any, meter_provider: MeterProvider | None = None, prefix: str = "hmb",
                 meter_name: str = "hmbclient") -> None:
        super().__init__(sources)
        provider = meter_provider if meter_provider is not None else otel_metrics.get_meter_provider()
        self.meter: Meter = provider.get_meter(meter_name)
        self.prefix = prefix
        self._lock = threading.Lock()
        self._declared: dict[str, Any] = {}
        self._closed = False
        self.refresh()

    @property
    def instruments(self) -> list[str]:
        """The names of the instruments declared so far."""
        with self._lock:
            return sorted(self._declared)

    def add(self, source: Any) -> None:
        """Export one more source and declare its metric names (:meth:`refresh`).

        Args:
            source: a registry or a client/broker.

        Raises:
            TypeError: ``source`` is not a metrics source.
        """
        super().add(source)
        self.refresh()

    def refresh(self) -> list[str]:
        """Declare an instrument for each metric name of the sources not declared yet.

        Returns:
            The names declared by this call.
        """
        new: list[str] = []
        with self._lock:
            for registry in self.registries():
                for group, name, description, kind in registry.names():
                    iname = instrument_name(group, name, self.prefix)
                    if iname in self._declared:
                        continue
                    callbacks = [self._observe(group, name)]
                    if kind == "counter":  # case (counter)
                        inst: Any = self.meter.create_observable_counter(iname, callbacks, description=description)
                    else:  # case (gauge)
                        inst = self.meter.create_observable_gauge(iname, callbacks, description=description)
                    self._declared[iname] = inst
                    new.append(iname)
        return new

    def close(self) -> None:
        """Stop observing: the instruments report nothing from now on (OpenTelemetry's API has no
        way to remove an instrument)."""
        self._closed = True

    def _observe(self, group: str, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if self._closed:
                return []
            return [Observation(s.value, dict(s.tags))
                    for registry in self.registries()
                    for s in registry.samples(group, name)
                    if not math.isnan(s.value)]

        return observe
