"""Child-process hygiene of the local servers (ZooKeeper and Kafka JVMs, Spark daemons, Tansu):
the one implementation of dying with the parent lives in :mod:`hmbclient.children` (the broker
process uses it too); this module keeps the names the local servers import, the one registry of
what an interpreter exit must still clean up (servers to kill, temporary directories), and what
the local servers do alike:

* :func:`launch_logged` starts a server process: its own session (a terminal's Ctrl-C reaches
  us, and we stop it), dying with the thread that starts it, stdin closed, stdout and stderr
  appended to its log file after a ``=== starting: <command>`` line.
* :func:`stop_process` stops one: a signal (SIGTERM by default) to its own pid only, SIGKILL
  if it has not ended within the timeout.
* :func:`free_ports` picks free ports on 127.0.0.1 for a server to listen on.
* :class:`StartedOrClosed`: ``with server:`` starts it and closes it on the way out; a start
  that fails closes what it had begun before the error goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import socket  # free ports only
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from hmbclient.children import die_with_parent, preexec_for_current_thread

__all__ = ["die_with_parent", "preexec_for_current_thread", "at_exit", "launch_logged", "stop_process",
           "StartedOrClosed", "free_ports"]


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


def launch_logged(
    cmd: Sequence[str], *, log_path: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a server process, its output appended to ``log_path`` (see the module docstring).

    Args:
        cmd: The command line.
        log_path: The log file (appended to).
        cwd: Its working directory.
        env: Its environment (None: ours).

    Returns:
        The process.
    """
    preexec = preexec_for_current_thread()
    with open(log_path, "ab") as log:
        log.write(f"=== starting: {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C goes to us, and we stop the server
            preexec_fn=preexec,
        )


def stop_process(proc: subprocess.Popen[bytes], timeout: float, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to ``proc`` (its own pid only) unless it has ended; SIGKILL it after
    ``timeout`` seconds, then wait for it (at most 10 s more).

    Args:
        proc: The process.
        timeout: Seconds to wait after ``sig``.
        sig: The signal to stop it with.
    """
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class StartedOrClosed:
    """``with server:`` runs :meth:`_enter` (``start()`` unless overridden), closes the server
    when that fails, and closes it on the way out."""

    def start(self) -> object:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _enter(self) -> None:
        self.start()

    def __enter__(self) -> Self:
        try:
            self._enter()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1.

    They are bound all at once so the kernel hands out distinct ports; a small race with other
    processes remains until the server binds them (acceptable for tests).

    Args:
        count: How many.

    Returns:
        The port numbers.
    """
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
