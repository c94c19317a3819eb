"""Child-process hygiene of the local servers (ZooKeeper and Kafka JVMs, Tansu): the one
implementation of dying with the parent lives in :mod:`hmbclient.children` (the broker process
uses it too); this module keeps the names the local servers import, and the one registry of
what an interpreter exit must still clean up (servers to kill, temporary directories)."""

from __future__ import annotations

import atexit
import contextlib
import shutil
import threading
from typing import Any

from hmbclient.children import die_with_parent, preexec_for_current_thread

__all__ = ["die_with_parent", "preexec_for_current_thread", "at_exit"]


class _ExitRegistry:
    """Servers (anything with ``kill()``) and temporary directories still alive; at interpreter
    exit the servers are killed, then the directories removed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._servers: set[Any] = set()
        self._dirs: set[str] = set()
        atexit.register(self.cleanup)

    def add_server(self, server: Any) -> None:
        with self._lock:
            self._servers.add(server)

    def discard_server(self, server: Any) -> None:
        with self._lock:
            self._servers.discard(server)

    def add_dir(self, path: str) -> None:
        with self._lock:
            self._dirs.add(path)

    def discard_dir(self, path: str) -> None:
        with self._lock:
            self._dirs.discard(path)

    def cleanup(self) -> None:
        with self._lock:
            servers = list(self._servers)
            dirs = list(self._dirs)
        for server in servers:
            with contextlib.suppress(Exception):
                server.kill()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


at_exit = _ExitRegistry()
