"""Replication throttling (KIP-73), as Kafka's ``ReplicationQuotaManager``: the traffic of chosen
replicas (a reassignment's moving ones) is held to a byte rate, on the leader and on the follower.

Contract
--------
* Which replicas: the topic configs ``leader.replication.throttled.replicas`` (the leader side
  throttles what it sends for these (partition, follower) pairs) and
  ``follower.replication.throttled.replicas`` (the follower side throttles what it fetches for
  these (partition, itself) pairs). A value is ``*`` (every replica of the topic), empty (none)
  or ``partition:broker`` pairs separated by commas (Kafka's format, whitespace allowed);
  anything else is refused (:func:`parse_throttled_replicas`, ValueError).
* How fast: the broker dynamic configs ``leader.replication.throttled.rate`` /
  ``follower.replication.throttled.rate`` (bytes/s, None or absent: unlimited), one budget per
  side per broker, shared by all its throttled replicas.
* Only replicas outside the ISR are throttled (case IN_SYNC): a follower in the ISR is never
  held back (it would drop out and shrink the ISR), as in Kafka's ``shouldLeaderThrottle`` /
  ``shouldFollowerThrottle``.
* The measure is the windowed rate of :class:`hmbclient.metrics.Rate` over
  ``replication.quota.window.num`` samples of ``replication.quota.window.size.seconds``.
  While the measured rate is above the bound (case EXCEEDED) a throttled partition gets
  nothing: the leader answers it empty, the follower leaves it out of its fetch. Below the
  bound (case ALLOWANCE) a leader's answer for it is capped to one second's worth of the bound
  (at least one whole batch, so a batch larger than that still moves), and every byte sent or
  fetched for a throttled replica is recorded.

Pure apart from the rate windows (one lock); the caller hands in the clock and the configs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from hmbclient.metrics import Rate

__all__ = [
    "ALL",
    "LEADER_RATE",
    "FOLLOWER_RATE",
    "LEADER_REPLICAS",
    "FOLLOWER_REPLICAS",
    "ReplicationQuota",
    "ReplicationThrottles",
    "Throttled",
    "parse_throttled_replicas",
    "is_throttled",
]

LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"

ALL = "*"
#: ``*`` (every replica) or the throttled ``(partition, broker)`` pairs
Throttled = str | frozenset[tuple[int, int]]


@functools.lru_cache(maxsize=1024)
def parse_throttled_replicas(text: str) -> Throttled:
    """A ``*.replication.throttled.replicas`` value.

    Raises:
        ValueError: not ``*``, empty, or ``partition:broker`` pairs of non-negative integers.
    """
    text = text.strip()
    if text == ALL:
        return ALL
    pairs: set[tuple[int, int]] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        p, sep, b = item.partition(":")
        if not sep or not p.strip().isdigit() or not b.strip().isdigit():
            raise ValueError(f"{item!r} is not partition:broker (the list is '*' or partition:broker pairs separated by commas)")
        pairs.add((int(p), int(b)))
    return frozenset(pairs)


def is_throttled(spec: str | None, partition: int, broker: int) -> bool:
    """Whether ``(partition, broker)`` is named by a throttled-replicas value (None: no config;
    a value that does not parse throttles nothing)."""
    if not spec:
        return False
    try:
        found = parse_throttled_replicas(spec)
    except ValueError:
        return False
    return found == ALL or (isinstance(found, frozenset) and (partition, broker) in found)


class ReplicationQuota:
    """One side's byte budget on one broker (see the module doc).

    Args:
        num_samples: ``replication.quota.window.num``.
        window_ms: ``replication.quota.window.size.seconds`` in ms.
    """

    def __init__(self, num_samples: int = 11, window_ms: int = 1000) -> None:
        self._rate = Rate(num_samples, window_ms)
        self._lock = threading.Lock()

    def record(self, nbytes: int, now_ms: int) -> None:
        """Count bytes sent or fetched for throttled replicas."""
        if nbytes > 0:
            with self._lock:
                self._rate.record(float(nbytes), now_ms)

    def rate(self, now_ms: int) -> float:
        """The measured byte rate."""
        with self._lock:
            return self._rate.measure(now_ms)

    def allowance(self, bound: float | None, now_ms: int) -> int | None:
        """Bytes a throttled replica may get now: None unlimited (no bound), 0 while the rate is
        above ``bound`` (case EXCEEDED), else one second's worth of the bound (case ALLOWANCE)."""
        if bound is None:
            return None
        if self.rate(now_ms) > bound:
            return 0
        return max(1, int(bound))


class ReplicationThrottles:
    """Both sides' budgets of one broker, with the config lookups handed in.

    Args:
        rates: ``() -> (leader bytes/s, follower bytes/s)``, None for unlimited (the broker's
            effective dynamic config).
        replicas: ``topic -> (leader.replication.throttled.replicas,
            follower.replication.throttled.replicas)`` values (None: not set).
        now_ms: the clock.
        num_samples: ``replication.quota.window.num``.
        window_ms: ``replication.quota.window.size.seconds`` in ms.
    """

    def __init__(self, rates: Callable[[], tuple[int | None, int | None]], replicas: Callable[[str], tuple[str | None, str | None]],
                 now_ms: Callable[[], int], num_samples: int = 11, window_ms: int = 1000) -> None:
        self._rates = rates
        self._replicas = replicas
        self._now_ms = now_ms
        self.leader = ReplicationQuota(num_samples, window_ms)
        self.follower = ReplicationQuota(num_samples, window_ms)

    def leader_allowance(self, topic: str, partition: int, follower: int, in_sync: bool) -> int | None:
        """Bytes the leader may send ``follower`` for the partition now (None: not throttled)."""
        if in_sync:  # case IN_SYNC
            return None
        bound = self._rates()[0]
        if bound is None or not is_throttled(self._replicas(topic)[0], partition, follower):
            return None
        return self.leader.allowance(bound, self._now_ms())

    def leader_sent(self, nbytes: int) -> None:
        self.leader.record(nbytes, self._now_ms())

    def follower_allowance(self, topic: str, partition: int, me: int, in_sync: bool) -> int | None:
        """Bytes this follower may fetch for the partition now (None: not throttled)."""
        if in_sync:  # case IN_SYNC
            return None
        bound = self._rates()[1]
        if bound is None or not is_throttled(self._replicas(topic)[1], partition, me):
            return None
        return self.follower.allowance(bound, self._now_ms())

    def follower_fetched(self, nbytes: int) -> None:
        self.follower.record(nbytes, self._now_ms())
