"""Purgatory: a generic holding pen for delayed operations (KAFKA-1583's design).

A ``DelayedOperation`` has a tiny contract:

* ``try_complete()`` checks its completion condition and, if met, calls ``force_complete()`` and
  returns what that returned;
* ``on_complete()`` does the work (reads the data, sends the response); it runs exactly once,
  whichever of try_complete / expiry / shutdown gets there first;
* ``on_expire()`` runs after ``on_complete`` when the op completed because its delay ran out;
* ``force_complete()`` is the one gate: only the first caller wins (a lock-guarded flag).
  It runs under the op's check lock, the one ``try_complete`` runs under, so a completion by
  expiry or shutdown waits for a check in progress on another thread and the check after it
  sees the op completed: ``on_complete`` answers from one consistent state, never a blend of the
  expiry's and a half-done check's (a DelayedProduce answering some partitions NONE and the rest
  REQUEST_TIMED_OUT although one append had satisfied them all), and no losing check rewrites
  the statuses after the answer went out.

The ``Purgatory`` is generic: ``try_complete_else_watch(op, keys)`` checks, watches the op under
every key, then checks again; ``check_and_complete(key)`` re-checks the ops watching one key
(called after an append to that partition, a leadership change, ...); the expiry timer
completes ops whose deadline passed. Time is injected (``now_ms``) so tests drive the clock with
``advance_clock`` instead of sleeping; ``start()`` adds a reaper thread for real use.

Invariants: an op is completed at most once; a completed op is never re-checked; completed ops
are purged from the watch lists (lazily, when check_and_complete meets them, and in bulk when
many have piled up).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from hmbclient.clock import monotonic_ms

__all__ = ["DelayedOperation", "Purgatory"]

log = logging.getLogger("hmbclient.broker.purgatory")


class DelayedOperation:
    """Base class of a delayed operation.

    Args:
        delay_ms: how long the op may wait before it is completed by expiry.
        lock: the lock ``try_complete`` runs under (default: one of the op's own). Ops that
            check state guarded by a lock their callers already hold pass that lock (Kafka's
            group coordinator passes the group lock), so the two locks cannot be taken in
            opposite orders by two threads.
    """

    def __init__(self, delay_ms: int, lock: threading.RLock | None = None) -> None:
        self.delay_ms = max(0, int(delay_ms))
        self.deadline_ms = 0
        self._completed = False
        self._expired = False
        # Serialises try_complete calls of one op (several appends may re-check it at once) and
        # the completion by expiry or shutdown with them (see force_complete).
        # Blocking, not try-lock-and-skip: a skipped check could be the one that follows the
        # append the holder's check did not see yet, and that wake-up would be lost.
        self._checking = lock if lock is not None else threading.RLock()

    @property
    def is_completed(self) -> bool:
        return self._completed

    @property
    def is_expired(self) -> bool:
        return self._expired

    def force_complete(self) -> bool:
        """Complete the op now. Returns True for the one caller that completed it."""
        return self._complete_once(expired=False)

    def _complete_once(self, expired: bool) -> bool:
        # Under the check lock (re-entered when try_complete calls force_complete): an expiry
        # waits for a check in progress on another thread, whose statuses on_complete reads.
        with self._checking:
            if self._completed:
                return False
            self._completed = True
            self._expired = expired
            try:
                self.on_complete()
            except Exception:  # a failing callback must not kill the caller's thread
                log.exception("%r: on_complete failed", self)
        return True

    def try_complete(self) -> bool:  # pragma: no cover - interface
        """Check the completion condition; if met, ``return self.force_complete()``."""
        raise NotImplementedError

    def on_complete(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def on_expire(self) -> None:
        """Hook run after on_complete when the delay ran out (metrics, logging)."""

    def maybe_try_complete(self) -> bool:
        if self._completed:
            return False
        with self._checking:
            if self._completed:
                return False
            return self.try_complete()

    def _expire(self) -> bool:
        if not self._complete_once(expired=True):
            return False
        try:
            self.on_expire()
        except Exception:
            log.exception("%r: on_expire failed", self)
        return True


Op = TypeVar("Op", bound=DelayedOperation)


class Purgatory(Generic[Op]):
    """Watch lists keyed by anything hashable (a topic-partition) plus an expiry timer.

    Args:
        name: for logs.
        now_ms: the clock (milliseconds); inject a fake one in tests.
        purge_interval: bulk-purge completed ops from watch lists after this many completions.
    """

    def __init__(self, name: str, now_ms: Callable[[], int] = monotonic_ms, purge_interval: int = 1000) -> None:
        self.name = name
        self._now_ms = now_ms
        self._purge_interval = purge_interval
        self._watchers: dict[Hashable, list[Op]] = {}
        self._lock = threading.Lock()
        self._timer: list[tuple[int, int, Op]] = []
        self._seq = itertools.count()
        self._timer_cv = threading.Condition(threading.Lock())
        self._completed_since_purge = 0
        self._reaper: threading.Thread | None = None
        self._running = False

    # -- the two entry points ---------------------------------------------------------------
    def try_complete_else_watch(self, op: Op, keys: list[Hashable]) -> bool:
        """Complete ``op`` now if it can be, else watch it under every key and start its timer.

        Returns:
            True if the op completed during this call (by this caller).
        """
        if op.maybe_try_complete():
            return True
        for key in keys:
            if op.is_completed:
                return False
            self._watch(key, op)
        # Check again after watching. Between the first check and the watches, an append may
        # have made the op completable and called check_and_complete(key) while the op was not
        # yet on that key's list; that wake-up is lost, and without this second check the op
        # would sit until it expires. (Checking only after watching is not enough either: the
        # first check spares the watch lists and the timer for ops that can answer at once.)
        if op.maybe_try_complete():
            return True
        if not op.is_completed:
            self._schedule(op)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Re-check the ops watching ``key``; returns how many this call completed."""
        # Every append asks, and mostly nobody watches: look before taking the lock. Racing a
        # watcher being added is safe: ``try_complete_else_watch`` checks again after watching,
        # and the caller changed the state it checks before calling here.
        if not self._watchers.get(key):
            return 0
        with self._lock:
            ops = self._watchers.get(key)
            if not ops:
                return 0
            ops = list(ops)
        done = 0
        for op in ops:
            if not op.is_completed and op.maybe_try_complete():
                done += 1
        with self._lock:
            current = self._watchers.get(key)
            if current is not None:
                live = [o for o in current if not o.is_completed]
                if live:
                    self._watchers[key] = live
                else:
                    del self._watchers[key]
        if done:
            self._note_completions(done)
        return done

    # -- bookkeeping ------------------------------------------------------------------------
    def _watch(self, key: Hashable, op: Op) -> None:
        with self._lock:
            self._watchers.setdefault(key, []).append(op)

    def _schedule(self, op: Op) -> None:
        op.deadline_ms = self._now_ms() + op.delay_ms
        with self._timer_cv:
            heapq.heappush(self._timer, (op.deadline_ms, next(self._seq), op))
            if self._timer[0][2] is op:
                self._timer_cv.notify()

    def _note_completions(self, n: int) -> None:
        self._completed_since_purge += n
        if self._completed_since_purge >= self._purge_interval:
            self._completed_since_purge = 0
            self.purge_completed()

    def purge_completed(self) -> int:
        """Drop completed ops from every watch list; returns how many entries were dropped."""
        dropped = 0
        with self._lock:
            for key in list(self._watchers):
                ops = self._watchers[key]
                live = [o for o in ops if not o.is_completed]
                dropped += len(ops) - len(live)
                if live:
                    self._watchers[key] = live
                else:
                    del self._watchers[key]
        with self._timer_cv:
            before = len(self._timer)
            self._timer = [t for t in self._timer if not t[2].is_completed]
            heapq.heapify(self._timer)
            dropped += before - len(self._timer)
        return dropped

    def advance_clock(self, now_ms: int | None = None) -> int:
        """Expire every op whose deadline is <= now; returns how many this call expired."""
        now = self._now_ms() if now_ms is None else now_ms
        due: list[Op] = []
        with self._timer_cv:
            while self._timer and self._timer[0][0] <= now:
                due.append(heapq.heappop(self._timer)[2])
        n = 0
        for op in due:
            if not op.is_completed and op._expire():
                n += 1
        if n:
            self._note_completions(n)
        return n

    def watched(self) -> int:
        """Watch-list entries (an op watching k keys counts k times; completed ones until purged)."""
        with self._lock:
            return sum(len(v) for v in self._watchers.values())

    def delayed(self) -> int:
        """Ops still waiting on the timer (not completed)."""
        with self._timer_cv:
            return sum(1 for t in self._timer if not t[2].is_completed)

    # -- reaper thread ----------------------------------------------------------------------
    def start(self) -> None:
        """Run the expiry timer on a daemon thread (uses the injected clock)."""
        if self._reaper is not None:
            return
        self._running = True
        self._reaper = threading.Thread(target=self._reap, name=f"purgatory-{self.name}", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        while self._running:
            with self._timer_cv:
                if self._timer:
                    wait = (self._timer[0][0] - self._now_ms()) / 1000.0
                else:
                    wait = 0.2
                if wait > 0:
                    self._timer_cv.wait(min(wait, 0.2))
            if not self._running:
                break
            try:
                self.advance_clock()
            except Exception:
                log.exception("purgatory %s: expiry failed", self.name)

    def shutdown(self, complete_pending: bool = True) -> None:
        """Stop the reaper; with ``complete_pending``, force-complete every waiting op."""
        self._running = False
        with self._timer_cv:
            self._timer_cv.notify_all()
            pending = [t[2] for t in self._timer]
            self._timer = []
        if self._reaper is not None:
            self._reaper.join(timeout=5)
            self._reaper = None
        if complete_pending:
            for op in pending:
                op.force_complete()
        with self._lock:
            self._watchers.clear()
