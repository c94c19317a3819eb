"""Waiting for a condition instead of sleeping a fixed time: the one helper every test package
uses (``from waiting import wait_until``).

A fixed ``time.sleep`` in a test is either a guess at how long something takes -- flaky on a
loaded machine, slow on an idle one -- or the behaviour under test itself (a timeout that must
elapse, a producer's pace, a window in which something must *not* happen). The first kind waits
here, on the condition it was guessing at; the second kind stays a sleep and says why.

Contract of :func:`wait_until`: it returns ``cond()``'s first truthy value as soon as there is
one, polling with a pause that grows from 10 ms to 200 ms; it fails with an ``AssertionError``
naming what was awaited (and the state ``diag()`` describes) once ``timeout_s`` has passed. A
``cond`` that raises counts as "not yet" -- a znode not created yet, a broker still starting --
and the last exception is part of the failure message, so a real bug in ``cond`` still shows.

Importable from every test module because ``tests/conftest.py`` sits in ``tests/`` (which has
no ``__init__.py``): pytest puts ``tests/`` on ``sys.path`` when it loads that conftest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(
    cond: Callable[[], T],
    timeout_s: float = 10.0,
    what: str = "condition",
    diag: Callable[[], Any] | None = None,
) -> T:
    """Poll ``cond()`` until it is truthy; return that value.

    Args:
        cond: The condition; an exception it raises counts as false.
        timeout_s: How long to keep trying, in seconds.
        what: What is awaited, for the failure message ("the fetch parked").
        diag: Called once on timeout; its result is appended to the failure message.

    Returns:
        The first truthy value ``cond()`` returned.

    Raises:
        AssertionError: ``cond()`` was not truthy within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    last_error: BaseException | None = None
    while True:
        try:
            value = cond()
        except Exception as exc:  # "not yet"; reported if it never comes
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            detail = f"; last error: {last_error!r}" if last_error is not None else ""
            if diag is not None:
                detail += f"; state: {diag()}"
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{detail}")
        time.sleep(pause)
        pause = min(pause * 2, 0.2)
