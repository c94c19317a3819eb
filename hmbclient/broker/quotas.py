"""Client quotas (KIP-13 client-id, KIP-55 user, KIP-219 throttling): who is limited, to what
rate, and for how long a client over its quota is throttled. Pure: no sockets, no ZooKeeper;
the caller hands in the bytes, the clock and the configured quotas.

Contract
--------
* A quota is a byte rate per second (``producer_byte_rate`` for Produce, ``consumer_byte_rate``
  for Fetch) attached to an *entity*: ``(user, client_id)`` where either part may be a name,
  ``<default>`` or absent. :class:`QuotaConfigs` holds the configured entities (Kafka's
  ``/config/users/<user>/clients/<client-id>``, ``/config/users/<user>``,
  ``/config/clients/<client-id>`` and their ``<default>`` forms) plus the static default
  (``quota.producer.default`` / ``quota.consumer.default``, Kafka 0.8-0.10).
* :func:`resolve` picks the quota of a request's ``(user, client_id)`` by KIP-55's precedence,
  most specific first (case RESOLVE):

  1. ``/config/users/<user>/clients/<client-id>``
  2. ``/config/users/<user>/clients/<default>``
  3. ``/config/users/<user>``
  4. ``/config/users/<default>/clients/<client-id>``
  5. ``/config/users/<default>/clients/<default>``
  6. ``/config/users/<default>``
  7. ``/config/clients/<client-id>``
  8. ``/config/clients/<default>``
  9. the static default (none: unlimited).

  It answers the bound and the *sensor key*: the parts of the matched entity with the request's
  own names filled in (``<default>`` of client ids gives each client id its own window; a user
  quota is shared by all client ids of that user), ``""`` for a part the entity does not name
  (Kafka's quota metric tags).
* :class:`QuotaManager` keeps one sampled byte-rate window per sensor key (``quota.window.num``
  samples of ``quota.window.size.seconds``: :class:`hmbclient.metrics.Rate`'s semantics, the
  same as Kafka's ``Rate``: a young window counts as ``(num - 1) * size`` long).
  ``record(user, client_id, nbytes, now_ms)`` adds the bytes, then answers the throttle time
  (case THROTTLE): 0 when the observed rate is within the bound, else Kafka's
  ``ClientQuotaManager`` formula ``(observed - bound) / bound * window_ms`` where ``window_ms``
  is the span the rate was measured over, capped at ``num * size`` (case CAP).
* Unlimited (no quota resolves) records nothing and answers 0 (case UNLIMITED): an
  unquota'd client pays one dict lookup.
* Windows are not kept forever (case EXPIRE): when a new key would make more than a bound of
  them (1024, then twice the live ones), the windows with no live sample are dropped -- a
  client id seen once costs nothing after ``num * size`` (Kafka expires idle quota sensors).
* Changing the configs (:meth:`QuotaManager.update`) applies to the next request; windows of
  keys whose quota changed keep their samples (Kafka keeps the sensor and changes its bound).

Thread safety: ``record`` and ``update`` may run on any thread (one lock).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from hmbclient.metrics import Rate

__all__ = [
    "CONSUMER",
    "DEFAULT",
    "PRODUCER",
    "QUOTA_KEYS",
    "QuotaConfigs",
    "QuotaManager",
    "resolve",
    "throttle_time_ms",
    "user_of",
]

DEFAULT = "<default>"
PRODUCER = "producer_byte_rate"
CONSUMER = "consumer_byte_rate"
QUOTA_KEYS = (PRODUCER, CONSUMER)

#: ``(user, client_id)``: a name, ``<default>``, or None (the entity does not name that part)
Entity = tuple[str | None, str | None]


def user_of(principal: str | None) -> str:
    """The quota user of a session principal (``User:alice`` -> ``alice``; none: ANONYMOUS)."""
    if not principal:
        return "ANONYMOUS"
    kind, sep, name = principal.partition(":")
    return name if sep and kind == "User" else principal


@dataclass
class QuotaConfigs:
    """The configured quotas: entity -> {``producer_byte_rate``/``consumer_byte_rate``: bytes/s},
    and the static defaults (None: unlimited)."""

    entities: dict[Entity, dict[str, float]] = field(default_factory=dict)
    producer_default: float | None = None
    consumer_default: float | None = None

    def static(self, kind: str) -> float | None:
        return self.producer_default if kind == PRODUCER else self.consumer_default


def resolve(configs: QuotaConfigs, kind: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
    """The bound and sensor key of ``(user, client_id)`` for ``kind`` (None: unlimited)."""
    ents = configs.entities
    # case RESOLVE: KIP-55's order, most specific first
    order: tuple[tuple[Entity, tuple[str, str]], ...] = (
        ((user, client_id), (user, client_id)),
        ((user, DEFAULT), (user, client_id)),
        ((user, None), (user, "")),
        ((DEFAULT, client_id), (user, client_id)),
        ((DEFAULT, DEFAULT), (user, client_id)),
        ((DEFAULT, None), (user, "")),
        ((None, client_id), ("", client_id)),
        ((None, DEFAULT), ("", client_id)),
    )
    for entity, key in order:
        quota = ents.get(entity)
        if quota is not None and kind in quota:
            return quota[kind], key
    static = configs.static(kind)
    if static is not None:
        return static, ("", client_id)
    return None


def throttle_time_ms(observed: float, bound: float, window_ms: float, max_ms: float) -> int:
    """Kafka's ClientQuotaManager throttle time: 0 within the bound, else
    ``(observed - bound) / bound * window_ms``, at most ``max_ms``."""
    if observed <= bound:
        return 0
    if bound <= 0:
        return int(max_ms)  # case CAP: a zero quota blocks for the longest throttle
    return int(min((observed - bound) / bound * window_ms, max_ms))  # case THROTTLE / CAP


def parse_quota_config(config: Mapping[str, object]) -> dict[str, float]:
    """Kafka's quota JSON ``config`` map (string values) -> the two rates.

    Raises:
        ValueError: an unknown key or a value that is not a non-negative number.
    """
    out: dict[str, float] = {}
    for k, v in config.items():
        if k not in QUOTA_KEYS:
            raise ValueError(f"unknown quota config {k!r}: expected one of {', '.join(QUOTA_KEYS)}")
        try:
            rate = float(str(v))
        except ValueError:
            raise ValueError(f"quota {k}={v!r} is not a number") from None
        if not rate >= 0 or rate == float("inf"):
            raise ValueError(f"quota {k}={v!r} must be a finite number >= 0")
        out[k] = rate
    return out


class QuotaManager:
    """Byte-rate windows per sensor key and the throttle decision (see the module doc).

    Args:
        configs: the quotas in force.
        num_samples: ``quota.window.num`` (Kafka's default 11).
        window_ms: ``quota.window.size.seconds`` in ms (Kafka's default 1000).
    """

    def __init__(self, configs: QuotaConfigs | None = None, num_samples: int = 11, window_ms: int = 1000) -> None:
        self.configs = configs or QuotaConfigs()
        self.num_samples = num_samples
        self.window_ms = window_ms
        self.max_throttle_ms = num_samples * window_ms
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._purge_at = 1024
        self._lock = threading.Lock()

    def _purge(self, now_ms: int) -> None:
        """Forget the windows with no live sample (case EXPIRE; lock held)."""
        horizon = now_ms - self.num_samples * self.window_ms
        self._rates = {k: r for k, r in self._rates.items() if r.samples and r.samples[-1][0] > horizon}
        self._purge_at = max(1024, 2 * len(self._rates))

    def update(self, configs: QuotaConfigs) -> None:
        """Put ``configs`` in force from the next request on."""
        with self._lock:
            self.configs = configs

    def enabled(self) -> bool:
        c = self.configs
        return bool(c.entities) or c.producer_default is not None or c.consumer_default is not None

    def record(self, kind: str, user: str, client_id: str, nbytes: int, now_ms: int) -> int:
        """Record ``nbytes`` of ``kind`` for ``(user, client_id)``; answer the throttle time."""
        with self._lock:
            found = resolve(self.configs, kind, user, client_id)
            if found is None:
                return 0  # case UNLIMITED
            bound, key = found
            rkey = (kind, *key)
            rate = self._rates.get(rkey)
            if rate is None:
                if len(self._rates) >= self._purge_at:
                    self._purge(now_ms)
                rate = self._rates[rkey] = Rate(self.num_samples, self.window_ms)
            rate.record(float(nbytes), now_ms)
            observed = rate.measure(now_ms)
            live = rate.samples
            span = max(now_ms - live[0][0], (self.num_samples - 1) * self.window_ms, 1) if live else self.window_ms
            return throttle_time_ms(observed, bound, span, self.max_throttle_ms)

    def rate(self, kind: str, user: str, client_id: str, now_ms: int) -> float:
        """The observed byte rate of the window ``(user, client_id)`` falls in (0: none)."""
        with self._lock:
            found = resolve(self.configs, kind, user, client_id)
            if found is None:
                return 0.0
            r = self._rates.get((kind, *found[1]))
            return r.measure(now_ms) if r is not None else 0.0
