"""The generic purgatory with an injected clock: exactly-once completion, watch keys, expiry,
the check-watch-check race, and many ops under concurrent completion."""

from __future__ import annotations

import threading

from hmbclient.broker.purgatory import DelayedOperation, Purgatory


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class CounterOp(DelayedOperation):
    """Completes when the shared counter reaches ``target``."""

    def __init__(self, delay_ms: int, state: dict[str, int], target: int, on_check: object = None) -> None:
        super().__init__(delay_ms)
        self.state = state
        self.target = target
        self.completions = 0
        self.expirations = 0
        self.on_check = on_check

    def try_complete(self) -> bool:
        done = self.state["n"] >= self.target
        if callable(self.on_check):
            self.on_check()  # runs after the condition was read: the place a race bites
        if done:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expire(self) -> None:
        self.expirations += 1


def test_completes_at_once_without_watching() -> None:
    clock = Clock()
    p: Purgatory[CounterOp] = Purgatory("t", clock)
    op = CounterOp(100, {"n": 5}, 1)
    assert p.try_complete_else_watch(op, ["a"]) is True
    assert op.completions == 1 and p.watched() == 0 and p.delayed() == 0


def test_check_and_complete_by_key_and_exactly_once() -> None:
    clock = Clock()
    state = {"n": 0}
    p: Purgatory[CounterOp] = Purgatory("t", clock)
    op = CounterOp(100, state, 1)
    other = CounterOp(100, state, 99)
    assert p.try_complete_else_watch(op, ["a", "b"]) is False
    assert p.try_complete_else_watch(other, ["b"]) is False
    assert p.watched() == 3 and p.delayed() == 2
    assert p.check_and_complete("a") == 0  # nothing changed yet
    state["n"] = 1
    assert p.check_and_complete("zzz") == 0  # nobody watches that key
    assert p.check_and_complete("a") == 1
    assert p.check_and_complete("b") == 0  # already done: not completed twice
    assert op.completions == 1 and op.is_completed and not op.is_expired
    clock.now += 1_000
    assert p.advance_clock() == 1  # only `other` expires
    assert op.expirations == 0 and other.expirations == 1 and other.completions == 1
    assert p.delayed() == 0


def test_expiry_follows_the_injected_clock() -> None:
    clock = Clock()
    p: Purgatory[CounterOp] = Purgatory("t", clock)
    ops = [CounterOp(d, {"n": 0}, 1) for d in (50, 100, 150)]
    for op in ops:
        p.try_complete_else_watch(op, ["k"])
    assert p.advance_clock(clock.now + 49) == 0
    assert p.advance_clock(clock.now + 100) == 2
    assert [o.expirations for o in ops] == [1, 1, 0]
    assert p.advance_clock(clock.now + 150) == 1
    assert all(o.completions == 1 for o in ops)
    # completed ops are purged from the watch list by the next check of their key
    p.check_and_complete("k")
    assert p.watched() == 0


def test_second_check_closes_the_race_with_an_append() -> None:
    """An append lands after the first check and calls check_and_complete before the op is
    watched; only the check after watching completes it (without it the op would expire)."""
    clock = Clock()
    state = {"n": 0}
    p: Purgatory[CounterOp] = Purgatory("t", clock)
    calls = {"n": 0}

    def first_check_races() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            # the first try_complete sees n=0; then the "append" happens and wakes key "a",
            # which nobody watches yet
            state["n"] = 1
            assert p.check_and_complete("a") == 0

    op = CounterOp(10_000, state, 1)
    op.on_check = first_check_races
    assert p.try_complete_else_watch(op, ["a"]) is True
    assert op.completions == 1 and calls["n"] == 2 and p.delayed() == 0


def test_force_complete_has_one_winner() -> None:
    op = CounterOp(100, {"n": 0}, 1)
    wins = []
    barrier = threading.Barrier(8)

    def race() -> None:
        barrier.wait()
        wins.append(op.force_complete())

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1 and op.completions == 1


def test_many_ops_many_threads_complete_exactly_once() -> None:
    clock = Clock()
    state = {"n": 0}
    p: Purgatory[CounterOp] = Purgatory("t", clock, purge_interval=50)
    ops = [CounterOp(1_000, state, 1 + i % 5) for i in range(500)]
    for i, op in enumerate(ops):
        p.try_complete_else_watch(op, [f"k{i % 7}", "all"])

    def bump() -> None:
        for _ in range(5):
            state["n"] += 1
            for k in ["all", *(f"k{j}" for j in range(7))]:
                p.check_and_complete(k)

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    clock.now += 5_000
    p.advance_clock()
    assert all(op.completions == 1 for op in ops)
    assert sum(op.expirations for op in ops) == 0
    assert p.delayed() == 0
    assert p.purge_completed() >= 0 and p.watched() == 0


def test_reaper_thread_expires_and_shutdown_completes_pending() -> None:
    p: Purgatory[CounterOp] = Purgatory("t")
    p.start()
    try:
        op = CounterOp(30, {"n": 0}, 1)
        p.try_complete_else_watch(op, ["k"])
        for _ in range(200):
            if op.is_completed:
                break
            threading.Event().wait(0.01)
        assert op.completions == 1 and op.expirations == 1
        parked = CounterOp(60_000, {"n": 0}, 1)
        p.try_complete_else_watch(parked, ["k"])
    finally:
        p.shutdown(complete_pending=True)
    assert parked.completions == 1 and parked.expirations == 0
