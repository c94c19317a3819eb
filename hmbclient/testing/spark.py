"""A real Spark standalone cluster on 127.0.0.1 for tests and local work: one master, N workers.

Usage::

    with LocalSparkCluster(workers=2) as cluster:      # cluster.master_url == "spark://127.0.0.1:P"
        spark = cluster.session("my-tests")             # a SparkSession on that master, "hmb" registered
        spark.range(10).count()                         # runs on executors in other JVMs
        spark.stop()

The daemons are the installed pyspark's own: ``bin/spark-class
org.apache.spark.deploy.master.Master`` and ``org.apache.spark.deploy.worker.Worker`` under
``SPARK_HOME`` (default: the pip-installed pyspark's directory, whose ``jars/`` hold Spark).
Nothing is downloaded; only ``bash`` and a Java 17+ ``java`` are needed besides pyspark.

Invariants:

* Everything is bound to 127.0.0.1: ``--host 127.0.0.1`` and ``SPARK_LOCAL_IP=127.0.0.1`` for
  every daemon; the RPC ports and the web UIs take free ports (port 0, the actual ones are read
  from the logs); the master's REST submission server, which would take the fixed port 6066,
  is disabled (``spark.master.rest.enabled=false`` in the cluster's own ``SPARK_CONF_DIR``, so a
  user's ``spark-defaults.conf`` does not leak in either).
* ``start()`` returns once the master is ALIVE and every worker logged "Successfully registered
  with master" (the log is read, never a fixed sleep); a daemon that exits or does not get
  there within ``startup_timeout_s`` raises :class:`LocalSparkClusterError` with its log tail.
* Each daemon dies with this process: ``spark-class`` execs the JVM in the process started
  here, which asks the kernel for SIGKILL when its parent thread dies (``PR_SET_PDEATHSIG``,
  from the main thread only; see :mod:`hmbclient.children`). Executors are the workers'
  children and exit when their worker goes (Spark's WorkerWatcher); their Python workers exit
  with their executor. An ``atexit`` hook also stops every cluster still running.
* ``stop()`` stops each daemon by its own pid (SIGTERM, then SIGKILL after ``timeout``),
  workers first so they can kill their executors, then the master. ``close()`` (and
  ``__exit__``) also removes the temp dir holding the logs and the workers' work dirs.

Sizes: the defaults (2 workers x 1 core x 512 MiB, executors of 512 MiB, daemons of 256 MiB
heap) fit a 2-core test machine. An application asking for more executor memory than a worker
offers never gets an executor: :meth:`LocalSparkCluster.session` asks for ``executor_memory``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hmbclient.testing._process import StartedOrClosed, launch_logged, stop_process

__all__ = ["LocalSparkCluster", "LocalSparkClusterError", "find_spark_home"]

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_ALIVE = "New state: ALIVE"
_WORKER_REGISTERED = "Successfully registered with master"
_UI_PORT = re.compile(r"Successfully started service '(?:MasterUI|WorkerUI)' on port (\d+)")
_LOG_TAIL_LINES = 30

#: The daemons' own JVM flags (SPARK_DAEMON_JAVA_OPTS): small and quick to start.
DAEMON_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.net.preferIPv4Stack=true"

#: spark-defaults.conf of the cluster's own SPARK_CONF_DIR (read by master and workers).
_DAEMON_DEFAULTS = {
    "spark.master.rest.enabled": "false",  # else a REST server on the fixed port 6066
    "spark.worker.cleanup.enabled": "false",  # the temp dir goes as a whole at close()
}


class LocalSparkClusterError(RuntimeError):
    """A daemon of the local Spark cluster failed to start, or no Spark could be found."""


def find_spark_home(spark_home: str | os.PathLike[str] | None = None) -> Path:
    """The Spark installation whose ``bin/spark-class`` runs the daemons.

    Args:
        spark_home: Explicit; default ``$SPARK_HOME``, else the installed pyspark's directory.

    Raises:
        LocalSparkClusterError: No such installation, or it has no ``bin/spark-class``.
    """
    home = spark_home or os.environ.get("SPARK_HOME")
    if not home:
        try:
            import pyspark
        except ImportError:
            raise LocalSparkClusterError(
                "no Spark found: install pyspark (`pip install 'hmbclient[spark]'`) or set SPARK_HOME"
            ) from None
        home = os.path.dirname(os.path.abspath(pyspark.__file__))
    root = Path(home)
    if not (root / "bin" / "spark-class").is_file():
        raise LocalSparkClusterError(f"{root} has no bin/spark-class: not a Spark installation")
    return root


# --------------------------------------------------------------------- cleanup at exit

_LIVE: set[LocalSparkCluster] = set()
_LIVE_LOCK = threading.Lock()


def _cleanup_at_exit() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for cluster in clusters:
        with contextlib.suppress(Exception):
            cluster.close()


atexit.register(_cleanup_at_exit)


# --------------------------------------------------------------------- one daemon


class _Daemon:
    """One Spark daemon JVM with its log file (stdout and stderr, Spark's INFO log)."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, cmd: list[str], env: Mapping[str, str], cwd: Path) -> None:
        self.proc = launch_logged(cmd, log_path=self.log_path, cwd=cwd, env=env)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def terminate(self, timeout: float) -> None:
        """SIGTERM this daemon (its own pid only), SIGKILL after ``timeout`` seconds."""
        if self.proc is not None:
            stop_process(self.proc, timeout)


# --------------------------------------------------------------------- the cluster


class LocalSparkCluster(StartedOrClosed):
    """A Spark standalone master and ``workers`` workers on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        workers: int = 2,
        *,
        cores_per_worker: int = 1,
        worker_memory: str = "512m",
        executor_memory: str = "512m",
        daemon_memory: str = "256m",
        spark_home: str | os.PathLike[str] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        """Prepare a cluster (nothing runs until :meth:`start` or ``with``).

        Args:
            workers: Number of worker daemons (>= 1); each runs one executor per application.
            cores_per_worker: ``--cores`` of each worker.
            worker_memory: ``--memory`` of each worker (what its executors may use).
            executor_memory: ``spark.executor.memory`` that :meth:`session` asks for; at most
                ``worker_memory``.
            daemon_memory: Heap of the master and worker JVMs (``SPARK_DAEMON_MEMORY``).
            spark_home: The Spark installation (see :func:`find_spark_home`).
            work_dir: Root for logs and the workers' work dirs (default: a temp dir, removed
                by :meth:`close`).
            startup_timeout_s: How long :meth:`start` waits for each daemon.

        Raises:
            ValueError: ``workers`` or ``cores_per_worker`` < 1.
            LocalSparkClusterError: No Spark installation found.
        """
        if workers < 1 or cores_per_worker < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.spark_home = find_spark_home(spark_home)
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.worker_memory = worker_memory
        self.executor_memory = executor_memory
        self.daemon_memory = daemon_memory
        self.startup_timeout_s = startup_timeout_s
        self._owns_root = work_dir is None
        self.root_dir = Path(tempfile.mkdtemp(prefix="hmb-spark-") if work_dir is None else work_dir)
        self.root_dir.mkdir(parents=True, exist_ok=True)
        self._conf_dir = self.root_dir / "conf"
        self._master = _Daemon("master", self.root_dir / "master.log")
        self._workers = [
            _Daemon(f"worker {i}", self.root_dir / f"worker{i}.log") for i in range(workers)
        ]
        self._master_url: str | None = None
        self.master_ui_port: int | None = None

    # --- properties

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT`` (known once :meth:`start` returned).

        Raises:
            LocalSparkClusterError: The master was never started.
        """
        if self._master_url is None:
            raise LocalSparkClusterError("the cluster is not started: no master URL yet")
        return self._master_url

    @property
    def total_cores(self) -> int:
        """Cores of all workers together."""
        return self.workers * self.cores_per_worker

    @property
    def master_pid(self) -> int | None:
        """The master JVM's pid (None before start)."""
        return self._master.pid

    @property
    def worker_pids(self) -> list[int | None]:
        """Each worker JVM's pid."""
        return [w.pid for w in self._workers]

    def log_paths(self) -> list[Path]:
        """The master's log, then each worker's."""
        return [self._master.log_path, *(w.log_path for w in self._workers)]

    def is_running(self) -> bool:
        """Whether the master and every worker JVM are alive."""
        return self._master.is_running() and all(w.is_running() for w in self._workers)

    # --- life cycle

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_CONF_DIR=str(self._conf_dir),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTIONS,
            # Executors inherit the worker's environment: the fallback interpreter for their
            # Python workers (an application's own PYSPARK_PYTHON wins).
            PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable),
        )
        for inherited in ("SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_WORKER_DIR"):
            env.pop(inherited, None)  # a user's daemon settings would not be the ones documented
        return env

    def _spark_class(self, main_class: str, *args: str) -> list[str]:
        return ["bash", str(self.spark_home / "bin" / "spark-class"), main_class, *args]

    def start(self) -> LocalSparkCluster:
        """Start the master, then the workers; return once every worker registered.

        Returns:
            self.

        Raises:
            LocalSparkClusterError: A daemon exited or did not get ready in time (the
                message holds its log tail); whatever started is stopped again.
        """
        if self.is_running():
            return self
        self._conf_dir.mkdir(parents=True, exist_ok=True)
        (self._conf_dir / "spark-defaults.conf").write_text(
            "".join(f"{k} {v}\n" for k, v in _DAEMON_DEFAULTS.items()), encoding="utf-8"
        )
        with _LIVE_LOCK:
            _LIVE.add(self)
        env = self._env()
        try:
            self._master.launch(
                self._spark_class(
                    _MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"
                ),
                env,
                self.root_dir,
            )
            found = self._wait_for(self._master, lambda text: _MASTER_ALIVE in text and
                                   _MASTER_URL.search(text) is not None, "become ALIVE")
            match = _MASTER_URL.search(found)
            assert match is not None  # the wait's condition
            self._master_url = match.group(1)
            ui = _UI_PORT.search(found)
            self.master_ui_port = int(ui.group(1)) if ui else None
            for i, worker in enumerate(self._workers):
                work = self.root_dir / f"worker{i}"
                work.mkdir(exist_ok=True)
                worker.launch(
                    self._spark_class(
                        _WORKER_CLASS,
                        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                        "--cores", str(self.cores_per_worker), "--memory", self.worker_memory,
                        "--work-dir", str(work), self._master_url,
                    ),
                    env,
                    self.root_dir,
                )
            # Started together, awaited one by one: the JVMs boot in parallel.
            for worker in self._workers:
                self._wait_for(worker, lambda text: _WORKER_REGISTERED in text,
                               "register with the master")
        except BaseException:
            self.stop(timeout=5.0)
            raise
        return self

    def _wait_for(self, daemon: _Daemon, ready: Any, what: str) -> str:
        """Poll ``daemon``'s log until ``ready(text)``; returns the log text then."""
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            text = daemon.log_text()
            if ready(text):
                return text
            if not daemon.is_running():
                raise LocalSparkClusterError(
                    f"Spark {daemon.name} exited (code {daemon.proc.returncode if daemon.proc else None})"
                    f" before it did {what}; last lines of {daemon.log_path}:\n{daemon.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise LocalSparkClusterError(
                    f"Spark {daemon.name} did not {what} within {self.startup_timeout_s:g} s;"
                    f" last lines of {daemon.log_path}:\n{daemon.log_tail()}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the workers (they stop their executors), then the master; logs are kept.

        Args:
            timeout: Seconds each daemon gets to exit after SIGTERM before SIGKILL.
        """
        for worker in self._workers:
            if worker.proc is not None and worker.proc.poll() is None:
                worker.proc.terminate()  # all at once: their shutdowns overlap
        for worker in self._workers:
            worker.terminate(timeout)
        self._master.terminate(timeout)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def close(self) -> None:
        """Stop every daemon and delete the temp dir (if this object created it)."""
        self.stop()
        if self._owns_root:
            shutil.rmtree(self.root_dir, ignore_errors=True)

    # --- applications

    def session_builder(self, app_name: str = "hmb-local-cluster") -> Any:
        """A ``SparkSession.Builder`` for this master, bound to 127.0.0.1 and sized to fit.

        Sets ``spark.driver.host``/``spark.driver.bindAddress`` to 127.0.0.1 (the executors
        connect back to the driver there), the executors' memory and cores to what the workers
        offer, the driver's web UI off, and ``PYSPARK_PYTHON`` to this interpreter unless the
        environment names one (the executors' Python workers run it: it must import what the
        jobs use).
        """
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # Read by the driver's JVM when PySpark launches it: without it Spark resolves the
        # host name and may pick an outside interface for what it does not bind explicitly.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from pyspark.sql import SparkSession

        return (
            SparkSession.builder.master(self.master_url)
            .appName(app_name)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.memory", self.executor_memory)
            .config("spark.executor.cores", str(self.cores_per_worker))
            .config("spark.cores.max", str(self.total_cores))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(self.total_cores))
            .config("spark.default.parallelism", str(self.total_cores))
        )

    def session(
        self,
        app_name: str = "hmb-local-cluster",
        *,
        conf: Mapping[str, str] | None = None,
        register_hmb: bool = True,
        executors_timeout_s: float | None = None,
    ) -> Any:
        """Start a SparkSession on this cluster and wait until every worker runs its executor.

        Args:
            app_name: The application's name.
            conf: More Spark settings (they win over :meth:`session_builder`'s).
            register_hmb: Register the ``"hmb"`` data source (``spark_integration.register``).
            executors_timeout_s: How long to wait for the executors (default
                ``startup_timeout_s``).

        Returns:
            The SparkSession; the caller stops it.

        Raises:
            LocalSparkClusterError: A SparkContext on another master is already active in
                this process (PySpark allows one per process: ``getOrCreate`` would silently
                hand back that one), or the executors did not register in time.
        """
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        if active is not None and active.master != self.master_url:
            raise LocalSparkClusterError(
                f"a SparkContext on {active.master} is already active in this process; PySpark "
                f"runs one per process: stop it before starting a session on {self.master_url}"
            )
        builder = self.session_builder(app_name)
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            spark.sparkContext.setLogLevel("WARN")
            self.wait_for_executors(spark, executors_timeout_s)
            if register_hmb:
                from spark_integration import register

                register(spark)
        except BaseException:
            spark.stop()
            raise
        return spark

    def wait_for_executors(self, spark: Any, timeout_s: float | None = None) -> int:
        """Block until one executor per worker has registered with ``spark``'s driver.

        Returns:
            The number of executors (the driver not counted).

        Raises:
            LocalSparkClusterError: Fewer executors than workers after ``timeout_s``.
        """
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
        deadline = time.monotonic() + (self.startup_timeout_s if timeout_s is None else timeout_s)
        while True:
            executors = int(status().size()) - 1  # the map holds the driver's block manager too
            if executors >= self.workers:
                return executors
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {w.name} ({w.log_path}):\n{w.log_tail(10)}" for w in self._workers)
                raise LocalSparkClusterError(
                    f"{executors} of {self.workers} executors registered within the time allowed"
                    f" (executor memory {self.executor_memory}, workers offer {self.worker_memory}):\n{tails}"
                )
            time.sleep(0.1)

    # --- context manager

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"LocalSparkCluster(master_url={self._master_url!r}, workers={self.workers}, {state})"
