"""Child-process hygiene shared by the local servers (ZooKeeper JVMs, Tansu).

``die_with_parent`` runs in the child between fork and exec and asks Linux to SIGKILL the
child when the thread that forked it dies (``PR_SET_PDEATHSIG``), so a test run killed from
outside leaves no orphan servers behind. Only use it for children forked from the main thread
(the signal follows the forking *thread*), hence :func:`preexec_for_current_thread`.
"""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["die_with_parent", "preexec_for_current_thread"]

try:  # resolved in the parent: dlopen between fork and exec could deadlock
    _PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def preexec_for_current_thread() -> Callable[[], None] | None:
    """``die_with_parent`` when called from the main thread (and prctl exists), else None."""
    if _PRCTL is not None and threading.current_thread() is threading.main_thread():
        return die_with_parent
    return None
