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


@pytest.fixture
def fault_summary() -> Callable[[str], None]:
    """Record a run's summary line for the terminal summary."""
    return _SUMMARIES.append


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
