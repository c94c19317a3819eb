"""Child-process hygiene: children that die with the thread that started them.

``die_with_parent`` runs in the child between fork and exec and asks Linux to SIGKILL the
child when the thread that forked it dies (``PR_SET_PDEATHSIG``), so a run killed from outside
(a test session interrupted, a CI job cancelled) leaves no orphan servers behind: no ZooKeeper
JVM, no Tansu, no broker process holding its port and log directory.

Invariant: only children forked from the main thread get it. The signal follows the forking
*thread*, not the process, so a child forked from a short-lived worker thread would be killed
when that thread ends; :func:`preexec_for_current_thread` returns None there (the child then
lives on its own, as it would without this module).

Standard library only (a leaf): the broker and the local test servers both import it.
On systems without ``prctl`` (not Linux) both functions do nothing.
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
    """Ask the kernel to SIGKILL this process when its parent thread dies (child side)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def preexec_for_current_thread() -> Callable[[], None] | None:
    """``die_with_parent`` when called from the main thread (and prctl exists), else None:
    the ``preexec_fn`` to give ``subprocess.Popen``."""
    if _PRCTL is not None and threading.current_thread() is threading.main_thread():
        return die_with_parent
    return None
