"""The consumers' metrics, under Kafka's groups and names.

``consumer-fetch-manager-metrics`` (recorded by the fetcher once per Fetch answer, never per
record; the same for :class:`hmbclient.Consumer`, :class:`hmbclient.aio.AIOConsumer` and the
0.8 ``ConsumerConnector``):

* ``records-consumed-rate`` / ``-total``: records decoded and queued for hand-out (a record is
  counted once however it is handed out; records of a partition retired before they were
  handed out were counted, as Java counts what a fetch returned);
* ``bytes-consumed-rate`` / ``-total``: record bytes of those answers;
* ``fetch-latency-avg`` / ``-max``: ms from sending a Fetch to its answer;
* ``fetch-rate`` / ``fetch-total``: Fetch answers received;
* ``records-per-request-avg``: records queued from one Fetch answer;
* ``records-lag-max``: a gauge, read when asked: the largest ``high watermark - position``
  over the partitions owned now (the high watermark from the last Fetch answer, the position
  the next offset handed out), so it says what is left unread. NaN while none is known.

``consumer-coordinator-metrics`` (only with a group; recorded once per rebalance or commit):

* ``rebalance-latency-avg`` / ``-max`` (ms from the first JoinGroup of a rebalance to the
  assignment) and ``rebalance-total``;
* ``commit-latency-avg`` / ``-max`` (ms of an OffsetCommit round, retries included) and
  ``commit-total``.

Consumers expose them with ``metrics()``: ``{group: {name: value}}``, as ``Producer.metrics()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from hmbclient.metrics import Avg, Count, Metrics, Rate

__all__ = ["FETCH_GROUP", "COORDINATOR_GROUP", "ConsumerMetrics"]

FETCH_GROUP = "consumer-fetch-manager-metrics"
COORDINATOR_GROUP = "consumer-coordinator-metrics"


class ConsumerMetrics:
    """A consumer's sensors in one registry (``registry``)."""

    def __init__(self, registry: Metrics) -> None:
        self.registry = registry
        n, w = registry.num_samples, registry.sample_window_ms
        g = FETCH_GROUP
        self._records = registry.rate("records-consumed", g, "records-consumed", "records queued for hand-out")
        self._bytes = registry.rate("bytes-consumed", g, "bytes-consumed", "record bytes of Fetch answers")
        self._fetch = (
            registry.avg_max("fetch-latency", g, "fetch-latency", "ms from sending a Fetch to its answer")
            .add(g, "fetch-rate", Rate(n, w, count=True), "Fetch answers per second")
            .add(g, "fetch-total", Count(), "Fetch answers")
        )
        self._per_request = registry.sensor("records-per-request").add(
            g, "records-per-request-avg", Avg(n, w), "records queued from one Fetch answer"
        )
        c = COORDINATOR_GROUP
        self._rebalance = registry.avg_max("rebalance-latency", c, "rebalance-latency", "ms of one rebalance").add(
            c, "rebalance-total", Count(), "rebalances completed"
        )
        self._commit = registry.avg_max("commit-latency", c, "commit-latency", "ms of one offset commit").add(
            c, "commit-total", Count(), "offset commits"
        )

    def watch_lag(self, owned: Callable[[], Iterable[tuple[int, int | None]]]) -> None:
        """Register ``records-lag-max``: ``owned()`` gives ``(high watermark, position)`` of each
        partition owned now."""

        def lag_max() -> float:
            lags = [hw - pos for hw, pos in owned() if hw >= 0 and pos is not None]
            return float(max(lags)) if lags else float("nan")

        self.registry.gauge(FETCH_GROUP, "records-lag-max", lag_max, "largest high watermark - position now")

    def fetch(self, latency_ms: float, records: int, nbytes: int) -> None:
        """One Fetch answer: its latency, the records queued from it and their bytes."""
        self._fetch.record(latency_ms)
        self._per_request.record(records)
        if records:
            self._records.record(records)
        if nbytes:
            self._bytes.record(nbytes)

    def rebalanced(self, latency_ms: float) -> None:
        """One completed rebalance and how long it took."""
        self._rebalance.record(latency_ms)

    def committed(self, latency_ms: float) -> None:
        """One offset commit and how long it took."""
        self._commit.record(latency_ms)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Every metric now: ``{group: {name: value}}``."""
        return self.registry.snapshot()
