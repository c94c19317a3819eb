"""Retry policies: tenacity objects with exponential backoff and jitter.

Retries live in two places only (docs/architecture.md, "Error model"): reconnect backoff inside
:mod:`.connection`, and request retries driven by ``error.retriable`` — built here. Blocking
callers run a policy directly (``policy(fn)`` or ``for attempt in policy``); the async
producer's sender, which must not sleep, asks :func:`backoff_ms` for the wait before attempt
``n`` from the same policy object, so both paths share one definition of the backoff.
"""

from __future__ import annotations

from typing import Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

__all__ = ["is_retriable", "retry_policy", "backoff_ms"]


def is_retriable(exc: BaseException) -> bool:
    """True for errors marked ``retriable`` (broker codes, lost connections, timeouts)."""
    return bool(getattr(exc, "retriable", False))


def retry_policy(
    *,
    max_retries: int,
    backoff_ms: float,
    backoff_max_ms: float | None = None,
    deadline_ms: float | None = None,
    retry_on: Any = is_retriable,
) -> Retrying:
    """A tenacity ``Retrying``: up to ``max_retries`` retries of retriable errors.

    Args:
        max_retries: retries after the first attempt (0 = try once).
        backoff_ms: first wait; doubles per attempt, plus up to ``backoff_ms`` of jitter.
        backoff_max_ms: cap on one wait (default 1 s, Kafka's ``retry.backoff.max.ms``
            (KIP-580), or ``backoff_ms`` if that is larger: a leader elected a second after a
            failure is found within about a second, not after a wait grown to 32 x backoff_ms).
        deadline_ms: stop retrying once this much time has passed since the first attempt.
        retry_on: predicate on the exception.

    Returns:
        The policy; the last error is re-raised when it gives up.
    """
    initial = max(backoff_ms, 0.0) / 1000.0
    cap = (backoff_max_ms if backoff_max_ms is not None else max(backoff_ms, 1000.0)) / 1000.0
    stop: Any = stop_after_attempt(max(0, int(max_retries)) + 1)
    if deadline_ms is not None:
        stop = stop | stop_after_delay(deadline_ms / 1000.0)
    return Retrying(
        stop=stop,
        wait=wait_exponential_jitter(multiplier=initial, max=cap, jitter=initial),
        retry=retry_if_exception(retry_on),
        reraise=True,
    )


def backoff_ms(policy: Retrying, attempt: int) -> float:
    """The wait (ms) the policy prescribes after failed attempt number ``attempt`` (1-based)."""
    state = RetryCallState(policy, None, (), {})
    state.attempt_number = max(1, attempt)
    wait = policy.wait
    return float(wait(state)) * 1000.0 if wait is not None else 0.0
