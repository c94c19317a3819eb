"""Exporters of hmbclient's metrics to monitoring libraries, installed as extras.

* :mod:`hmbclient.metrics_exporters.prometheus` (``pip install 'hmbclient[prometheus]'``): a
  ``prometheus_client`` collector; register it into a ``CollectorRegistry`` and
  ``prometheus_client.start_http_server`` (or any of its exposition helpers) serves our metrics.
* :mod:`hmbclient.metrics_exporters.otel` (``pip install 'hmbclient[otel]'``): OpenTelemetry
  observable instruments read by whatever ``MetricReader`` the application's ``MeterProvider``
  has (periodic OTLP export, Prometheus, in-memory).

Contract
--------
* A *source* is a :class:`hmbclient.metrics.Metrics` registry or anything with a
  ``metrics_registry`` attribute: ``Producer``, ``Consumer``, ``ConsumerConnector``,
  ``AIOConsumer`` (``AIOProducer.producer`` for the asyncio producer), ``Broker`` and
  ``EmbeddedBroker``. The registry is looked up at each collection, so a broker not started yet
  (``None``) exports nothing and a restarted ``EmbeddedBroker`` exports its new registry.
* Names keep Kafka's: metric group and name (``producer-metrics`` / ``record-send-rate``), tags
  as labels or attributes (``client-id``, ``topic``, ``broker``). Prometheus gets the names of
  the broker's own endpoint (:func:`hmbclient.metrics.prometheus_name`); OpenTelemetry gets
  ``<prefix>.<group>.<name>`` with Kafka's spelling lowered (OTel names allow ``-`` and ``.``
  and are case-insensitive).
* Cumulative metrics (the ``-total`` ones: ``Total``/``Count`` stats) are counters, the rest
  gauges (:attr:`hmbclient.metrics.MetricSample.kind`).
* The optional libraries are imported only by these two modules (tests/test_architecture.py
  checks it); importing one without its library raises ImportError naming the extra. Nothing
  else of hmbclient imports them, so a client that does not export pays nothing: values are
  computed only when a scrape or a reader asks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from hmbclient.metrics import Metrics

__all__ = ["MetricsSources", "missing_extra", "registries_of"]


def registries_of(sources: Iterable[Any]) -> list[Metrics]:
    """The registries of ``sources`` now (see the module doc); sources without one yet skipped.

    Args:
        sources: registries, or objects with a ``metrics_registry`` attribute.

    Returns:
        The registries, in the order of ``sources``.

    Raises:
        TypeError: a source is neither a registry nor has ``metrics_registry``.
    """
    out: list[Metrics] = []
    for source in sources:
        reg = source if isinstance(source, Metrics) else getattr(source, "metrics_registry", _NONE)
        if reg is _NONE or (reg is not None and not isinstance(reg, Metrics)):
            raise TypeError(f"{type(source).__name__} is not a metrics source: pass a Producer, a consumer, "
                            "a Broker/EmbeddedBroker or an hmbclient.metrics.Metrics registry")
        if reg is not None:
            out.append(reg)
    return out


class MetricsSources:
    """The sources an exporter reads, changed while collections run (each change swaps in a
    new tuple under a lock, so a collection reads one whole list and no change is lost).

    Args:
        sources: registries or clients/brokers (anything with ``metrics_registry``).

    Raises:
        TypeError: a source is not a metrics source (checked now, not at the first collection).
    """

    def __init__(self, sources: Iterable[Any]) -> None:
        sources = tuple(sources)
        registries_of(sources)
        self._sources = sources
        self._sources_lock = threading.Lock()

    def add(self, source: Any) -> None:
        """Export one more source from the next collection on.

        Args:
            source: a registry or a client/broker.

        Raises:
            TypeError: ``source`` is not a metrics source.
        """
        registries_of([source])
        with self._sources_lock:
            self._sources = (*self._sources, source)

    def remove(self, source: Any) -> None:
        """Stop exporting ``source`` (a closed client, say).

        Args:
            source: a source given before.

        Raises:
            ValueError: ``source`` was not exported.
        """
        with self._sources_lock:
            sources = list(self._sources)
            sources.remove(source)
            self._sources = tuple(sources)

    def registries(self) -> list[Metrics]:
        """The sources' registries now (see :func:`registries_of`)."""
        return registries_of(self._sources)


def missing_extra(module: str, library: str, extra: str, missing: str | None) -> ModuleNotFoundError:
    """The error an exporter raises when its library is not installed.

    Args:
        module: the exporter module.
        library: the distribution it needs.
        extra: hmbclient's extra that installs it.
        missing: the module Python did not find (the original error's ``name``).

    Returns:
        A ModuleNotFoundError (an ImportError) naming ``missing`` as its ``name`` and saying
        what to install.
    """
    return ModuleNotFoundError(f"{module} needs {library}, which is not installed: pip install 'hmbclient[{extra}]'",
                               name=missing)


_NONE: Any = object()
