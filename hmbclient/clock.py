"""The one clock helper: wall time and monotonic time under distinct names.

* :func:`wall_ms` — milliseconds since the Unix epoch. For timestamps that leave the process or
  outlive it: record timestamps, commit times, ZooKeeper registration JSON, retention by age.
  It can jump (NTP, an operator), so never measure a duration with it.
* :func:`monotonic_ms` — milliseconds of a clock that never goes backwards. For deadlines,
  timeouts, backoff and the purgatory's timers. Meaningless across processes and restarts.

Logic that depends on time takes a ``now_ms`` callable that defaults to one of these, so tests
inject their own clock instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wall_ms", "monotonic_ms", "Clock"]

Clock = Callable[[], int]


def wall_ms() -> int:
    """Milliseconds since the Unix epoch (wall clock)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds of the monotonic clock (for durations and deadlines only)."""
    return time.monotonic_ns() // 1_000_000
