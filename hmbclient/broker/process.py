"""BrokerProcess: a broker in a child process (``python -m hmbclient.broker``), for crash tests.

    with BrokerProcess(log_dir=path, log_flush_interval_messages=1) as bp:
        bp.bootstrap
        bp.kill()          # SIGKILL: no shutdown code runs, as in a crash
        bp.start()         # same port, same log dir: recovery runs
        bp.pause()         # SIGSTOP: alive but silent (no fetches, no ZooKeeper pings)
        bp.resume()        # SIGCONT: it carries on where it stopped
        bp.terminate()     # SIGTERM: clean stop

Settings are BrokerConfig names (snake_case); they are passed as ``--set`` properties.

A child started from the main thread dies with it (``PR_SET_PDEATHSIG``, see
:mod:`hmbclient.children`): a test run killed from outside leaves no broker holding its port
and log directory, paused or not (SIGKILL ends a stopped process too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import Any

from hmbclient.broker.channel import BrokerChannel
from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.runner import READY_PREFIX
from hmbclient.broker.security.setup import inter_broker_security
from hmbclient.children import preexec_for_current_thread
from hmbclient.errors import HmbError

__all__ = ["BrokerProcess"]


class BrokerProcess:
    """One broker subprocess.

    Args:
        log_dir: data directory (required: a crash test restarts on the same data).
        port: listen port (0: ephemeral the first time, then kept across restarts).
        start_timeout_s: how long ``start`` waits for the ready line.
        **config: BrokerConfig settings.
    Raises:
        ConfigError: unknown settings (checked here, before any process starts).
    """

    def __init__(self, log_dir: str, port: int = 0, *, start_timeout_s: float = 30.0, **config: Any) -> None:
        self._config = cfg = BrokerConfig(port=port, log_dirs=(log_dir,), **config)
        self.log_dir = log_dir
        self.port = port
        self.host = cfg.advertised_host_name or cfg.host
        self.start_timeout_s = start_timeout_s
        defaults = BrokerConfig().to_properties()
        self._props = {k: v for k, v in cfg.to_properties().items() if k not in ("port", "log.dirs") and defaults.get(k) != v}
        self.proc: subprocess.Popen[str] | None = None
        self.output: deque[str] = deque(maxlen=200)
        #: True between pause() and resume() (or until the process is killed or restarted).
        self.paused = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def channel(self, client_id: str) -> BrokerChannel:
        """A channel to this broker on its first listener, with the inter-broker TLS and SASL
        settings of its config."""
        return BrokerChannel(self.host, self.port, client_id, security=inter_broker_security(self._config))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> BrokerProcess:
        """Start the process and wait until it serves. Returns self.

        Raises:
            HmbError: the process exited or did not get ready in time (its output is in the
                message).
        """
        if self.running:
            return self
        cmd = [sys.executable, "-m", "hmbclient.broker", "--port", str(self.port), "--log-dir", self.log_dir]
        secrets = {info.prop for info in BrokerConfig.settings() if info.secret}
        secret_files: list[str] = []
        for k, v in self._props.items():
            if v is None or v == "":
                continue
            if k in secrets:  # passwords go through a private file, never the command line
                fd, path = tempfile.mkstemp(prefix="hmb-secret-")
                with os.fdopen(fd, "w") as f:
                    f.write(v + "\n")
                secret_files.append(path)
                v = "@" + path
            cmd += ["--set", f"{k}={v}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            preexec_fn=preexec_for_current_thread(),  # no orphan broker if we are killed
        )
        self.paused = False
        ready = threading.Event()
        proc = self.proc

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.output.append(line.rstrip("\n"))
                if line.startswith(READY_PREFIX) and " listening on " in line:
                    addr = line.split(" listening on ", 1)[1].split()[0]
                    self.port = int(addr.rsplit(":", 1)[1])
                    ready.set()

        threading.Thread(target=pump, name="broker-process-output", daemon=True).start()
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while not ready.wait(0.05):
                if proc.poll() is not None or time.monotonic() > deadline:
                    time.sleep(0.1)
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                    out = "\n".join(self.output)
                    raise HmbError(f"broker process did not start (exit {proc.returncode}):\n{out}")
        finally:
            for path in secret_files:  # read at startup; not left on disk
                os.unlink(path)
        return self

    def kill(self) -> None:
        """SIGKILL the process and reap it (a crash: no flush, no clean shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP the process: it keeps its sockets and ZooKeeper session but answers nothing,
        fetches nothing and sends no heartbeat (a long GC pause or a frozen VM). Its followers
        drop out of the ISR after replica.lag.time.max.ms; after the session timeout ZooKeeper
        expires its session and the controller treats it as dead.

        Raises:
            HmbError: the process is not running.
        """
        if not self.running:
            raise HmbError("pause() needs a running broker process")
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused process: it carries on with whatever it was doing (its timers fire
        late, its ZooKeeper client finds out whether the session survived).

        Raises:
            HmbError: the process is not running.
        """
        if not self.running:
            raise HmbError("resume() needs a running broker process")
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def terminate(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout_s``; default: 10 s plus the controlled
        shutdown's retry backoffs, so a broker that is stopping cleanly is not killed).
        Returns the exit status."""
        if self.proc is None:
            return None
        if timeout_s is None:
            cfg = self._config
            timeout_s = 10.0 + cfg.controlled_shutdown_max_retries * cfg.controlled_shutdown_retry_backoff_ms / 1000.0
        if self.proc.poll() is None:
            if self.paused:  # a stopped process would hold SIGTERM until the timeout
                self.proc.send_signal(signal.SIGCONT)
                self.paused = False
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    stop = terminate

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.terminate()
