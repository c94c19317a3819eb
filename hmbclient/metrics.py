"""Metrics as Kafka names them: sensors recording values, stats over a sliding window.

Contract
--------
* A :class:`Metrics` registry holds metrics under ``(group, name)`` — Kafka's metric group
  (``producer-metrics``, ``consumer-fetch-manager-metrics``, ``kafka.server``...) and name
  (``record-send-rate``, ``request-latency-avg``, ``BytesInPerSec``...).
* :meth:`Metrics.sensor` gives a :class:`Sensor`; ``sensor.add(group, name, stat)`` attaches a
  stat and ``sensor.record(value)`` feeds every stat of the sensor at once (Kafka's Sensor), so
  a hot path pays one call and one lock per event, not one per metric.
* :meth:`Metrics.gauge` registers a value read only when asked (queue sizes, ISR counts).
* :meth:`Metrics.snapshot` answers ``{group: {name: value}}`` (kafka-python's ``metrics()``
  shape); :func:`prometheus_text` renders snapshots in Prometheus' text format 0.0.4.
* A metric may carry tags of its own besides the registry's (Kafka's per-topic metrics, e.g.
  ``BytesInPerSec`` with ``topic=orders``): the snapshot names it ``name{topic=orders}``;
  Prometheus gets them as labels.
* Each metric has a *kind*: ``counter`` for the cumulative stats (``Total``, ``Count``: they
  never go down) and ``gauge`` for everything else (sampled stats and gauges).
  :meth:`Metrics.samples` gives it, so exporters (:mod:`hmbclient.metrics_exporters`) type the
  metric as Prometheus/OpenTelemetry expect.

Stats (Kafka's semantics)
-------------------------
* ``Avg``, ``Max``, ``Min``, ``Rate`` and ``WindowedCount`` are *sampled*: ``num_samples``
  samples (default 2) of ``sample_window_ms`` (default 30 000 ms) — Kafka's
  ``metrics.num.samples`` and ``metrics.sample.window.ms``. A record goes to the newest sample,
  a new sample starts when the newest is a window old, and samples older than
  ``num_samples * window`` no longer count. With no live sample ``Avg``/``Max``/``Min`` answer
  NaN, as Kafka does.
* ``Rate`` is the sum of the live samples over the elapsed time since the oldest one started,
  that time being at least ``(num_samples - 1) * window`` (Kafka's ``Rate.windowSize``: a young
  sensor's rate is not inflated by a tiny denominator); per second.
* ``Total`` and ``Count`` are cumulative since creation (Kafka's ``CumulativeSum``/
  ``CumulativeCount``, the ``-total`` metrics).

Invariants: a stat never raises from ``record`` (a metric must not break the path it
measures); the clock is :func:`hmbclient.clock.monotonic_ms` unless a test injects one;
``record`` and ``snapshot`` may run on different threads (one lock per sensor).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, NamedTuple

from hmbclient.clock import Clock, monotonic_ms

__all__ = [
    "Avg",
    "Count",
    "Max",
    "Metrics",
    "MetricSample",
    "Min",
    "Rate",
    "Sensor",
    "Stat",
    "Total",
    "WindowedCount",
    "prometheus_label",
    "prometheus_name",
    "prometheus_text",
]

NUM_SAMPLES = 2
SAMPLE_WINDOW_MS = 30_000

Kind = Literal["counter", "gauge"]


class MetricSample(NamedTuple):
    """One metric's value now, as :meth:`Metrics.samples` answers it."""

    group: str
    name: str
    #: the registry's tags and the metric's own together
    tags: dict[str, str]
    value: float
    description: str
    #: ``counter`` (cumulative: ``Total``, ``Count``) or ``gauge``
    kind: Kind


class Stat:
    """One statistic of a sensor: ``record`` a value, ``measure`` the current figure."""

    def record(self, value: float, now_ms: int) -> None:
        raise NotImplementedError

    def measure(self, now_ms: int) -> float:
        raise NotImplementedError


class Total(Stat):
    """The sum of every value recorded (Kafka's CumulativeSum: the ``-total`` metrics)."""

    def __init__(self) -> None:
        self.total = 0.0

    def record(self, value: float, now_ms: int) -> None:
        self.total += value

    def measure(self, now_ms: int) -> float:
        return self.total


class Count(Stat):
    """How many values were recorded (Kafka's CumulativeCount)."""

    def __init__(self) -> None:
        self.count = 0

    def record(self, value: float, now_ms: int) -> None:
        self.count += 1

    def measure(self, now_ms: int) -> float:
        return float(self.count)


class _Sampled(Stat):
    """Kafka's SampledStat: ``num_samples`` samples of ``window_ms`` each; see the module doc."""

    def __init__(self, num_samples: int = NUM_SAMPLES, window_ms: int = SAMPLE_WINDOW_MS) -> None:
        if num_samples < 1 or window_ms < 1:
            raise ValueError(f"a sampled stat needs num_samples >= 1 and window_ms >= 1, not {num_samples}, {window_ms}")
        self.num_samples = num_samples
        self.window_ms = window_ms
        #: [start_ms, value, count] per sample, oldest first
        self.samples: list[list[float]] = []

    def _initial(self) -> float:
        return 0.0

    def _update(self, sample: list[float], value: float) -> None:
        sample[1] += value

    def record(self, value: float, now_ms: int) -> None:
        samples = self.samples
        if not samples or now_ms - samples[-1][0] >= self.window_ms:
            samples.append([now_ms, self._initial(), 0])
            if len(samples) > self.num_samples:
                del samples[0]
        sample = samples[-1]
        self._update(sample, value)
        sample[2] += 1

    def _live(self, now_ms: int) -> list[list[float]]:
        horizon = now_ms - self.num_samples * self.window_ms
        self.samples = [s for s in self.samples if s[0] > horizon]
        return self.samples


class WindowedCount(_Sampled):
    """How many values were recorded in the live samples."""

    def measure(self, now_ms: int) -> float:
        return float(sum(s[2] for s in self._live(now_ms)))


class Avg(_Sampled):
    """The mean of the values in the live samples (NaN with none)."""

    def measure(self, now_ms: int) -> float:
        live = self._live(now_ms)
        n = sum(s[2] for s in live)
        return sum(s[1] for s in live) / n if n else math.nan


class Max(_Sampled):
    """The largest value in the live samples (NaN with none)."""

    def _initial(self) -> float:
        return -math.inf

    def _update(self, sample: list[float], value: float) -> None:
        if value > sample[1]:
            sample[1] = value

    def measure(self, now_ms: int) -> float:
        live = [s[1] for s in self._live(now_ms) if s[2]]
        return max(live) if live else math.nan


class Min(_Sampled):
    """The smallest value in the live samples (NaN with none)."""

    def _initial(self) -> float:
        return math.inf

    def _update(self, sample: list[float], value: float) -> None:
        if value < sample[1]:
            sample[1] = value

    def measure(self, now_ms: int) -> float:
        live = [s[1] for s in self._live(now_ms) if s[2]]
        return min(live) if live else math.nan


class Rate(_Sampled):
    """Per second: the sum of the live samples over the time they span (see the module doc).

    ``count=True`` counts events instead of summing values (Kafka's ``Rate(new WindowedCount())``,
    e.g. ``request-rate``)."""

    def __init__(self, num_samples: int = NUM_SAMPLES, window_ms: int = SAMPLE_WINDOW_MS, *, count: bool = False) -> None:
        super().__init__(num_samples, window_ms)
        self.count = count

    def measure(self, now_ms: int) -> float:
        live = self._live(now_ms)
        if not live:
            return 0.0
        total = sum(s[2] for s in live) if self.count else sum(s[1] for s in live)
        elapsed = max(now_ms - live[0][0], (self.num_samples - 1) * self.window_ms, 1)
        return total * 1000.0 / elapsed


class Sensor:
    """A named point that records values into its stats (Kafka's Sensor)."""

    def __init__(self, registry: Metrics, name: str) -> None:
        self.name = name
        self._registry = registry
        self._stats: list[Stat] = []
        self._lock = threading.Lock()

    def add(self, group: str, name: str, stat: Stat, description: str = "", tags: Mapping[str, str] | None = None) -> Sensor:
        """Attach ``stat`` as metric ``(group, name, tags)``; returns the sensor (chainable).

        Args:
            group: Kafka's metric group, e.g. ``producer-metrics``.
            name: the metric name, e.g. ``record-send-rate``.
            stat: a fresh stat instance (not shared with another sensor).
            description: one line for ``metrics()`` readers and Prometheus' HELP.
            tags: the metric's own tags (e.g. ``{"topic": "orders"}``).

        Raises:
            ValueError: ``(group, name, tags)`` is already registered.
        """
        kind: Kind = "counter" if isinstance(stat, Total | Count) else "gauge"
        self._registry._register(group, name, description, lambda now: self._measure(stat, now), tags, kind)
        with self._lock:
            self._stats.append(stat)
        return self

    def record(self, value: float = 1.0, now_ms: int | None = None) -> None:
        """Feed ``value`` to every stat of the sensor (never raises)."""
        now = self._registry.now_ms() if now_ms is None else now_ms
        with self._lock:
            for stat in self._stats:
                stat.record(value, now)

    def _measure(self, stat: Stat, now_ms: int) -> float:
        with self._lock:
            return stat.measure(now_ms)


class Metrics:
    """A registry of metrics (one per client or broker).

    Args:
        now_ms: the clock (monotonic milliseconds); tests pass their own.
        num_samples: samples per sampled stat (Kafka's ``metrics.num.samples``).
        sample_window_ms: the length of one sample (Kafka's ``metrics.sample.window.ms``).
        tags: labels every metric of this registry carries (e.g. ``client-id``).
    """

    def __init__(
        self,
        now_ms: Clock = monotonic_ms,
        *,
        num_samples: int = NUM_SAMPLES,
        sample_window_ms: int = SAMPLE_WINDOW_MS,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self.now_ms = now_ms
        self.num_samples = num_samples
        self.sample_window_ms = sample_window_ms
        self.tags = dict(tags or {})
        self._lock = threading.Lock()
        self._sensors: dict[str, Sensor] = {}
        #: (group, name, tags) -> (description, read(now_ms), kind)
        self._metrics: dict[tuple[str, str, _Tags], tuple[str, Callable[[int], float], Kind]] = {}

    def sensor(self, name: str) -> Sensor:
        """The sensor called ``name``, created on first use."""
        with self._lock:
            s = self._sensors.get(name)
            if s is None:
                s = self._sensors[name] = Sensor(self, name)
            return s

    def gauge(self, group: str, name: str, read: Callable[[], float], description: str = "") -> None:
        """Register a value read when a snapshot is taken.

        Args:
            group: the metric group.
            name: the metric name.
            read: returns the current value; an exception reads as NaN.
            description: one line of help.

        Raises:
            ValueError: ``(group, name)`` is already registered.
        """
        self._register(group, name, description, lambda now: float(read()))

    # Kafka's stat families, named as Kafka names their metrics
    def rate(self, name: str, group: str, metric: str, description: str = "", tags: Mapping[str, str] | None = None) -> Sensor:
        """A sensor with ``<metric>-rate`` (per second) and ``<metric>-total``."""
        return (self.sensor(name)
                .add(group, f"{metric}-rate", Rate(self.num_samples, self.sample_window_ms), description, tags)
                .add(group, f"{metric}-total", Total(), description, tags))

    def avg_max(self, name: str, group: str, metric: str, description: str = "") -> Sensor:
        """A sensor with ``<metric>-avg`` and ``<metric>-max`` over the window."""
        return (self.sensor(name)
                .add(group, f"{metric}-avg", Avg(self.num_samples, self.sample_window_ms), description)
                .add(group, f"{metric}-max", Max(self.num_samples, self.sample_window_ms), description))

    def _register(self, group: str, name: str, description: str, read: Callable[[int], float],
                  tags: Mapping[str, str] | None = None, kind: Kind = "gauge") -> None:
        key = (group, name, tuple(sorted((tags or {}).items())))
        with self._lock:
            if key in self._metrics:
                raise ValueError(f"metric {group}/{_tagged(name, key[2])} is already registered")
            self._metrics[key] = (description, read, kind)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Every metric's current value: ``{group: {name: value}}``."""
        now = self.now_ms()
        with self._lock:
            items = list(self._metrics.items())
        out: dict[str, dict[str, float]] = {}
        for (group, name, tags), (_, read, _) in items:
            out.setdefault(group, {})[_tagged(name, tags)] = _read(read, now)
        return out

    def samples(self, group: str | None = None, name: str | None = None) -> list[MetricSample]:
        """Every metric now (or those of one ``group`` / ``name``), with its tags and kind.

        Args:
            group: only this metric group (None: every group).
            name: only metrics of this name, each of its tag sets (None: every name).

        Returns:
            One :class:`MetricSample` per metric; its ``tags`` are the registry's and the
            metric's own together (what :func:`prometheus_text` labels).
        """
        now = self.now_ms()
        with self._lock:
            items = [(k, v) for k, v in self._metrics.items()
                     if (group is None or k[0] == group) and (name is None or k[1] == name)]
        return [MetricSample(g, n, {**self.tags, **dict(t)}, _read(read, now), d, kind)
                for (g, n, t), (d, read, kind) in items]

    def names(self) -> list[tuple[str, str, str, Kind]]:
        """Every metric's ``(group, name, description, kind)`` once (tag sets folded), without
        reading any value: what an exporter declares its instruments from."""
        with self._lock:
            seen: dict[tuple[str, str], tuple[str, Kind]] = {}
            for (g, n, _), (d, _, kind) in self._metrics.items():
                seen.setdefault((g, n), (d, kind))
        return [(g, n, d, kind) for (g, n), (d, kind) in seen.items()]


_Tags = tuple[tuple[str, str], ...]


def _tagged(name: str, tags: _Tags) -> str:
    return name if not tags else name + "{" + ",".join(f"{k}={v}" for k, v in tags) + "}"


def _read(read: Callable[[int], float], now: int) -> float:
    try:
        return read(now)
    except Exception:  # a gauge whose object is closing: report, never raise
        return math.nan


def _prom_name(group: str, name: str) -> str:
    raw = f"{group}_{name}"
    return "".join(c if c.isalnum() or c == "_" else "_" for c in raw).strip("_")


def prometheus_name(group: str, name: str, prefix: str = "hmb") -> str:
    """The Prometheus name of metric ``(group, name)``: ``<prefix>_<group>_<name>``, every
    character but letters, digits and ``_`` as ``_`` (``producer-metrics`` /
    ``record-send-rate`` is ``hmb_producer_metrics_record_send_rate``).

    Args:
        group: the metric group.
        name: the metric name.
        prefix: the namespace put first (empty: none).

    Returns:
        The name, the same for :func:`prometheus_text` and the ``prometheus_client`` exporter.
    """
    base = _prom_name(group, name)
    return f"{prefix}_{base}" if prefix else base


def prometheus_label(key: str) -> str:
    """A tag key as a Prometheus label name (``client-id`` is ``client_id``).

    Args:
        key: the tag's key.

    Returns:
        The key, every character but letters, digits and ``_`` as ``_``.
    """
    return "".join(c if c.isalnum() or c == "_" else "_" for c in key)


def _prom_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _prom_labels(tags: Mapping[str, str]) -> str:
    if not tags:
        return ""
    esc = (str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for v in tags.values())
    names = (prometheus_label(k) for k in tags)
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, esc, strict=True)) + "}"


def prometheus_text(registries: Iterable[Metrics], prefix: str = "hmb") -> str:
    """Prometheus text exposition (format 0.0.4) of the registries' snapshots: one family per
    metric, named by :func:`prometheus_name`, the tags as labels; a ``counter`` whose name ends
    in ``_total`` is typed ``counter``, anything else ``gauge``."""
    families: dict[str, tuple[str, str, list[str]]] = {}
    for reg in registries:
        for group, name, tags, value, desc, kind in reg.samples():
            pname = prometheus_name(group, name, prefix)
            if pname not in families:
                help_text = (desc or f"{group} {name}").replace("\\", "\\\\").replace("\n", " ")
                typ = "counter" if kind == "counter" and pname.endswith("_total") else "gauge"
                families[pname] = (help_text, typ, [])
            families[pname][2].append(f"{pname}{_prom_labels(tags)} {_prom_value(value)}")
    lines: list[str] = []
    for pname in sorted(families):  # a family's samples together, as the format requires
        help_text, typ, samples = families[pname]
        lines += [f"# HELP {pname} {help_text}", f"# TYPE {pname} {typ}", *samples]
    return "\n".join(lines) + "\n"

