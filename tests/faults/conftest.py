"""Fixtures of the fault runs: a one-line summary per run, printed at the end of the session
(passed runs included: the figures are the point), and the runs' log level.

The long runs are marked ``chaos`` (registered in pyproject.toml): ``make test`` deselects
them, ``make chaos`` runs only them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_SUMMARIES: list[str] = []
#: (fault kinds, client, acked or read, lost, duplicates, dirty reads, recovery seconds)
_ROWS: list[tuple[str, str, int, int, int, int, float]] = []


@pytest.fixture
def fault_summary() -> Callable[..., None]:
    """Record a run's summary line for the terminal summary, and its rows of the table: a
    run's result (anything with ``rows()``) or ``rows`` given as they are."""

    def record(line: str, result: Any = None, rows: list[tuple[str, str, int, int, int, int, float]] | None = None) -> None:
        _SUMMARIES.append(line)
        if result is not None:
            _ROWS.extend(result.rows())
        _ROWS.extend(rows or ())

    return record


def table(rows: list[tuple[str, str, int, int, int, int, float]]) -> list[str]:
    """One line per (fault kind, client kind), rows of several runs summed (recovery: the
    longest)."""
    merged: dict[tuple[str, str], list[Any]] = {}
    for kind, client, acked, lost, dups, dirty, recover in rows:
        m = merged.setdefault((kind, client.split("#")[0]), [0, 0, 0, 0, 0.0])
        m[0] += acked
        m[1] += lost
        m[2] += dups
        m[3] += dirty
        m[4] = max(m[4], recover)
    head = ("fault kind", "producer/consumer", "acked/read", "lost", "duplicates", "dirty/aborted read", "recover s")
    body = [(k, c, str(a), str(lo), str(d), str(dr), f"{r:.1f}") for (k, c), (a, lo, d, dr, r) in sorted(merged.items())]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i < 2 else '>'}{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in body]


@pytest.fixture(autouse=True)
def _quiet_clients() -> Iterator[None]:
    """Clients log every refused connection while a broker is down: thousands of lines that
    would bury a failure's report. The harness's own events stay at INFO."""
    names = ("kafka", "hmbclient", "kazoo", "tests.faults.librdkafka")
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    logging.getLogger("tests.faults").setLevel(logging.INFO)
    yield
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SUMMARIES:
        terminalreporter.section("fault runs")
        for line in _SUMMARIES:
            terminalreporter.write_line(line)
    if _ROWS:
        terminalreporter.section("fault table")
        for line in table(_ROWS):
            terminalreporter.write_line(line)
