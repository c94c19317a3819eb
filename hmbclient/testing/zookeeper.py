"""Real ZooKeeper servers for tests and local work: one JVM per server, on 127.0.0.1.

Usage::

    with LocalZooKeeper() as zk:                  # zk.connect == "127.0.0.1:PORT"
        client = KazooClient(zk.connect); client.start()
        zk.restart()                              # same port, same data
        zk.kill()                                 # SIGKILL, like a crash
        zk.start()

    with LocalZooKeeperEnsemble(3) as ens:        # ens.connect == "127.0.0.1:P1,...:P3"
        ens.kill(ens.leader()); ens.wait_for_leader()

The servers come from Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``,
whose manifest lists its dependencies) or from an Apache tarball named by ``ZOOKEEPER_HOME``
(its ``*.jar`` and ``lib/*.jar``), or from an explicit ``classpath``. If none is found,
:class:`ZooKeeperNotFoundError` says how to install one; nothing is skipped.

Life cycle of a server: ``start()`` writes ``zoo.cfg`` into its own temp dir, launches
``java ... ZooKeeperServerMain`` (``QuorumPeerMain`` in an ensemble) with stdout and stderr
going to ``zookeeper.log`` next to it, and returns once the ``srvr`` four-letter word answers
with a ``Mode:`` line. ``stop()`` (SIGTERM, then SIGKILL) and ``kill()`` (SIGKILL) end the
process but keep the data dir, so ``start()``/``restart()`` bring the same znodes back on
the same port. ``close()`` (and ``__exit__``) also deletes the temp dir. Every process and
temp dir still alive at interpreter exit is removed by an ``atexit`` hook; a JVM started
from the main thread also dies with this process (``PR_SET_PDEATHSIG`` on Linux).

Timing: ``tickTime`` defaults to 500 ms, so sessions may be as short as 1 s (2 ticks) for
expiry tests; ``maxSessionTimeout`` is raised to 60 s so that the usual 6-30 s client
timeouts are granted as asked. ``forceSync=no`` trades durability on power loss (irrelevant
for a throw-away server) for fast writes.

Note: sockets belong to ``hmbclient.net``, the broker and these local servers
(docs/architecture.md); here :meth:`LocalZooKeeper.four_letter_word` opens a plain TCP connection to send
a four-letter word; it is kept to that one small function.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket  # four-letter-word probe only (see module docstring)
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hmbclient.testing._process import (
    StartedOrClosed,
    at_exit,
    free_ports,
    launch_logged,
    stop_process,
)

__all__ = [
    "LocalZooKeeper",
    "LocalZooKeeperEnsemble",
    "LocalZooKeeperError",
    "ZooKeeperNotFoundError",
    "find_zookeeper_classpath",
    "four_letter_word",
]

DEBIAN_ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# An slf4j binding so the server log is readable (without one slf4j prints a NOP warning).
DEBIAN_SLF4J_BINDINGS = ("/usr/share/java/slf4j-simple.jar", "/usr/share/java/slf4j-nop.jar")
INSTALL_HINT = (
    "install ZooKeeper with `apt-get install zookeeper` (Debian/Ubuntu), or unpack an Apache "
    "ZooKeeper release and set ZOOKEEPER_HOME to its directory, or pass classpath=..."
)

# Flags for a fast-starting, small JVM: C1 only, serial GC, no perf-data files in /tmp.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Xshare:auto",
    "-Xms16m",
    "-Xmx256m",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.snapshot.trust.empty=true",
)

_STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_LOG_TAIL_LINES = 40


class LocalZooKeeperError(RuntimeError):
    """A local ZooKeeper server failed to start, or did something unexpected."""


class ZooKeeperNotFoundError(LocalZooKeeperError):
    """No ZooKeeper jars (or no java) could be found; the message says how to get them."""


# --------------------------------------------------------------------- discovery


def find_zookeeper_classpath(
    zookeeper_home: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Locate the jars that run a ZooKeeper server.

    Args:
        zookeeper_home: An Apache ZooKeeper install (``*.jar`` and ``lib/*.jar``); default
            ``$ZOOKEEPER_HOME``; when neither is set, Debian's ``/usr/share/java`` jars.

    Returns:
        Classpath entries, in order.

    Raises:
        ZooKeeperNotFoundError: The directory named holds no ZooKeeper jar, or (no home
            given) Debian's package is not installed.
    """
    home = zookeeper_home if zookeeper_home is not None else os.environ.get("ZOOKEEPER_HOME")
    if home:
        root = Path(home)
        jars = sorted(glob.glob(str(root / "*.jar"))) + sorted(
            glob.glob(str(root / "lib" / "*.jar"))
        )
        if not any(Path(j).name.startswith("zookeeper") for j in jars):
            source = "zookeeper_home" if zookeeper_home is not None else "ZOOKEEPER_HOME"
            raise ZooKeeperNotFoundError(
                f"{source}={os.fspath(home)!r} holds no zookeeper*.jar (looked in it and its "
                f"lib/); {INSTALL_HINT}"
            )
        entries = list(jars)
        if (root / "conf").is_dir():
            entries.insert(0, str(root / "conf"))  # logback.xml / log4j.properties
        return entries
    if not Path(DEBIAN_ZOOKEEPER_JAR).is_file():
        raise ZooKeeperNotFoundError(
            f"no ZooKeeper found: {DEBIAN_ZOOKEEPER_JAR} is missing and ZOOKEEPER_HOME is not "
            f"set; {INSTALL_HINT}"
        )
    # Debian's zookeeper.jar names its dependencies in its manifest Class-Path.
    entries = [DEBIAN_ZOOKEEPER_JAR]
    for binding in DEBIAN_SLF4J_BINDINGS:
        if Path(binding).is_file():
            entries.append(binding)
            break
    return entries


def _find_java(java: str | None) -> str:
    if java:
        if not shutil.which(java):
            raise ZooKeeperNotFoundError(f"java executable {java!r} not found")
        return java
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").is_file():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise ZooKeeperNotFoundError(
            "no `java` on PATH and JAVA_HOME unset; ZooKeeper needs a JRE "
            "(`apt-get install default-jre-headless`, or `apt-get install zookeeper` which "
            "pulls one in)"
        )
    return found


# --------------------------------------------------------------------- probes


def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter word and return the whole answer.

    Args:
        host: Server host.
        port: Server client port.
        word: ``srvr``, ``stat``, ``ruok``, ``mntr``, ``cons``, ... (the server must
            whitelist it; ours whitelist all).
        timeout: Connect/read timeout in seconds.

    Returns:
        The decoded answer ("" if the server closed without one).

    Raises:
        OSError: The server is not reachable.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while True:
            data = sock.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def _parse_mode(answer: str) -> str | None:
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


# --------------------------------------------------------------------- one JVM


class _ServerProcess:
    """One ZooKeeper JVM with its own directory, config file and log file."""

    def __init__(
        self,
        *,
        workdir: Path,
        config: Mapping[str, str],
        main_class: str,
        myid: int | None,
        classpath: Sequence[str],
        java: str,
        jvm_options: Sequence[str],
        client_port: int,
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.config_path = workdir / "zoo.cfg"
        self.log_path = workdir / "zookeeper.log"
        self.client_port = client_port
        self._config = dict(config)
        self._main_class = main_class
        self._myid = myid
        self._classpath = list(classpath)
        self._java = java
        self._jvm_options = list(jvm_options)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def launch(self) -> None:
        if self.is_running():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._myid is not None:
            (self.data_dir / "myid").write_text(f"{self._myid}\n", encoding="ascii")
        lines = [f"{k}={v}" for k, v in self._config.items()]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [
            self._java,
            *self._jvm_options,
            "-cp",
            os.pathsep.join(self._classpath),
            self._main_class,
            str(self.config_path),
        ]
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._proc = launch_logged(cmd, log_path=self.log_path, cwd=self.workdir)
        at_exit.add_server(self)

    def mode(self) -> str | None:
        """The ``Mode:`` of ``srvr`` (standalone/leader/follower), None if not serving."""
        if not self.is_running():
            return None
        try:
            return _parse_mode(four_letter_word("127.0.0.1", self.client_port, "srvr", 1.0))
        except OSError:
            return None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def serving(self, what: str) -> bool:
        """True once *this* JVM serves; raise if another server answers on our port.

        ``srvr`` alone cannot tell servers apart, so the first time it answers we also ask
        ``conf`` for the dataDir: a server left over from elsewhere on the same port must
        not pass for ours while our JVM fails to bind.
        """
        if self.mode() is None:
            return False
        try:
            conf = four_letter_word("127.0.0.1", self.client_port, "conf", 1.0)
        except OSError:
            return False
        if f"dataDir={self.data_dir}" in conf:
            return True
        self.kill()
        raise LocalZooKeeperError(
            f"{what}: port {self.client_port} is already served by another ZooKeeper "
            f"({next((ln for ln in conf.splitlines() if ln.startswith('dataDir=')), '?')}); "
            "pick another port (port=0 chooses a free one)"
        )

    def check_alive(self, what: str) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            code = self._proc.returncode
            raise LocalZooKeeperError(
                f"{what} exited with status {code} during start-up; last lines of "
                f"{self.log_path}:\n{self.log_tail()}"
            )

    def terminate(self, timeout: float, sig: int = signal.SIGTERM) -> None:
        if self._proc is None:
            return
        stop_process(self._proc, timeout, sig)
        self._forget()

    def kill(self) -> None:
        self.terminate(10.0, signal.SIGKILL)

    def _forget(self) -> None:
        at_exit.discard_server(self)


def _base_config(data_dir: Path, client_port: int, tick_time_ms: int) -> dict[str, str]:
    return {
        "tickTime": str(tick_time_ms),
        "dataDir": str(data_dir),
        "clientPort": str(client_port),
        "clientPortAddress": "127.0.0.1",
        "maxClientCnxns": "0",
        "minSessionTimeout": str(2 * tick_time_ms),
        "maxSessionTimeout": "60000",
        "4lw.commands.whitelist": "*",
        "admin.enableServer": "false",
        "forceSync": "no",
        "preAllocSize": "4096",  # KiB; the default 64 MiB txn-log preallocation is wasteful here
        "snapCount": "100000",
    }


class _Base(StartedOrClosed):
    """Shared set-up: installation discovery and the temp root."""

    def __init__(
        self,
        *,
        data_dir: str | os.PathLike[str] | None,
        classpath: str | Sequence[str] | None,
        zookeeper_home: str | os.PathLike[str] | None,
        java: str | None,
        jvm_options: Sequence[str] | None,
        tick_time_ms: int,
        startup_timeout_s: float,
        extra_config: Mapping[str, Any] | None,
    ) -> None:
        if isinstance(classpath, str):
            self._classpath = [p for p in classpath.split(os.pathsep) if p]
        elif classpath is not None:
            self._classpath = list(classpath)
        else:
            self._classpath = find_zookeeper_classpath(zookeeper_home)
        missing = [p for p in self._classpath if not Path(p).exists()]
        if missing or not self._classpath:
            raise ZooKeeperNotFoundError(
                f"classpath entries do not exist: {missing or '(empty classpath)'}; {INSTALL_HINT}"
            )
        self._java = _find_java(java)
        self._jvm_options = list(DEFAULT_JVM_OPTIONS if jvm_options is None else jvm_options)
        if tick_time_ms < 1:
            raise ValueError("tick_time_ms must be >= 1")
        self.tick_time_ms = tick_time_ms
        self.startup_timeout_s = startup_timeout_s
        self._extra_config = {k: str(v) for k, v in (extra_config or {}).items()}
        if data_dir is None:
            self._root = Path(tempfile.mkdtemp(prefix="hmb-zookeeper-"))
            self._owns_root = True
            at_exit.add_dir(str(self._root))
        else:
            self._root = Path(data_dir).resolve()
            self._root.mkdir(parents=True, exist_ok=True)
            self._owns_root = False

    @property
    def root_dir(self) -> Path:
        """The directory holding each server's zoo.cfg, data dir and zookeeper.log."""
        return self._root

    def _remove_root(self) -> None:
        if self._owns_root:
            shutil.rmtree(self._root, ignore_errors=True)
            at_exit.discard_dir(str(self._root))


# --------------------------------------------------------------------- standalone


class LocalZooKeeper(_Base):
    """A standalone ZooKeeper server on 127.0.0.1 (``ZooKeeperServerMain``)."""

    def __init__(
        self,
        port: int = 0,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        tick_time_ms: int = 500,
        classpath: str | Sequence[str] | None = None,
        zookeeper_home: str | os.PathLike[str] | None = None,
        java: str | None = None,
        jvm_options: Sequence[str] | None = None,
        startup_timeout_s: float = 30.0,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        """Prepare a server (nothing runs until :meth:`start` or ``with``).

        Args:
            port: Client port; 0 picks a free one (kept across restarts).
            data_dir: Where to keep config, data and log (default: a temp dir removed by
                :meth:`close`); an existing directory is reused, so data survives.
            tick_time_ms: ZooKeeper ``tickTime``; session timeouts may range from 2 ticks
                to 60 s.
            classpath: Explicit jars (list, or an ``os.pathsep``-joined string).
            zookeeper_home: An Apache ZooKeeper install (default ``$ZOOKEEPER_HOME``, then
                Debian's package).
            java: The java executable (default ``$JAVA_HOME/bin/java`` or ``java`` on PATH).
            jvm_options: Replaces :data:`DEFAULT_JVM_OPTIONS`.
            startup_timeout_s: How long :meth:`start` waits for the server to serve.
            extra_config: More ``zoo.cfg`` lines (override the defaults).

        Raises:
            ZooKeeperNotFoundError: No ZooKeeper jars or no java (the message says how to
                install them).
        """
        super().__init__(
            data_dir=data_dir,
            classpath=classpath,
            zookeeper_home=zookeeper_home,
            java=java,
            jvm_options=jvm_options,
            tick_time_ms=tick_time_ms,
            startup_timeout_s=startup_timeout_s,
            extra_config=extra_config,
        )
        self.host = "127.0.0.1"
        self.port = port or free_ports(1)[0]
        workdir = self._root
        config = _base_config(workdir / "data", self.port, tick_time_ms)
        config.update(self._extra_config)
        self._server = _ServerProcess(
            workdir=workdir,
            config=config,
            main_class=_STANDALONE_MAIN,
            myid=None,
            classpath=self._classpath,
            java=self._java,
            jvm_options=self._jvm_options,
            client_port=self.port,
        )

    @property
    def connect(self) -> str:
        """The connect string, ``"127.0.0.1:PORT"``."""
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        """ZooKeeper's ``dataDir`` (snapshots and transaction logs)."""
        return self._server.data_dir

    @property
    def log_path(self) -> Path:
        """The server's captured stdout/stderr."""
        return self._server.log_path

    @property
    def pid(self) -> int | None:
        """The JVM's process id (None when never started)."""
        return self._server.pid

    def is_running(self) -> bool:
        """Whether the JVM process is alive (not necessarily serving yet)."""
        return self._server.is_running()

    def start(self) -> LocalZooKeeper:
        """Start the server (no-op if running) and wait until it serves.

        Returns:
            self.

        Raises:
            LocalZooKeeperError: The JVM exited or did not serve within
                ``startup_timeout_s``; the message holds the tail of its log.
        """
        self._server.launch()
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            what = f"ZooKeeper on port {self.port}"
            self._server.check_alive(what)
            if self._server.serving(what):
                return self
            if time.monotonic() > deadline:
                tail = self._server.log_tail()
                self._server.kill()
                raise LocalZooKeeperError(
                    f"ZooKeeper on port {self.port} did not serve within "
                    f"{self.startup_timeout_s:g}s; last lines of {self.log_path}:\n{tail}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM, then SIGKILL after ``timeout``); keep the data.

        Args:
            timeout: Seconds to wait for a clean exit.
        """
        self._server.terminate(timeout)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; the data dir is kept."""
        self._server.kill()

    def restart(self) -> LocalZooKeeper:
        """Stop and start again on the same port with the same data.

        Returns:
            self.

        Raises:
            LocalZooKeeperError: The server did not come back.
        """
        self.stop()
        return self.start()

    def close(self) -> None:
        """Kill the server and delete its temp dir (if this object created it)."""
        self._server.terminate(timeout=5.0)
        self._remove_root()

    def four_letter_word(self, word: str = "srvr", timeout: float = 2.0) -> str:
        """Send a four-letter word (``srvr``, ``stat``, ``mntr``, ``cons``, ...).

        Args:
            word: The command.
            timeout: Seconds.

        Returns:
            The server's answer.

        Raises:
            OSError: The server is not reachable.
        """
        return four_letter_word(self.host, self.port, word, timeout)

    def mode(self) -> str | None:
        """``"standalone"`` while serving, None otherwise."""
        return self._server.mode()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"LocalZooKeeper(connect={self.connect!r}, {state})"


# --------------------------------------------------------------------- ensemble


class LocalZooKeeperEnsemble(_Base):
    """An ensemble of ZooKeeper servers (``QuorumPeerMain``) on 127.0.0.1.

    Member ``i`` (0-based) has ``myid`` i+1 and its own directory under :attr:`root_dir`.
    A majority must run for the ensemble to serve.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        tick_time_ms: int = 500,
        classpath: str | Sequence[str] | None = None,
        zookeeper_home: str | os.PathLike[str] | None = None,
        java: str | None = None,
        jvm_options: Sequence[str] | None = None,
        startup_timeout_s: float = 60.0,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        """Prepare an ensemble (nothing runs until :meth:`start` or ``with``).

        Args:
            size: Number of servers (>= 1; use an odd number).
            data_dir: Root for the members' directories (default: a temp dir).
            tick_time_ms: ZooKeeper ``tickTime`` (``initLimit`` 10 and ``syncLimit`` 5 ticks).
            classpath: Explicit jars (list, or an ``os.pathsep``-joined string).
            zookeeper_home: An Apache ZooKeeper install (default ``$ZOOKEEPER_HOME``).
            java: The java executable.
            jvm_options: Replaces :data:`DEFAULT_JVM_OPTIONS`.
            startup_timeout_s: How long start calls wait for serving members / a leader.
            extra_config: More ``zoo.cfg`` lines for every member.

        Raises:
            ValueError: ``size`` < 1.
            ZooKeeperNotFoundError: No ZooKeeper jars or no java.
        """
        if size < 1:
            raise ValueError("an ensemble needs at least one member")
        super().__init__(
            data_dir=data_dir,
            classpath=classpath,
            zookeeper_home=zookeeper_home,
            java=java,
            jvm_options=jvm_options,
            tick_time_ms=tick_time_ms,
            startup_timeout_s=startup_timeout_s,
            extra_config=extra_config,
        )
        ports = free_ports(3 * size)
        self.ports = ports[:size]
        quorum = {
            f"server.{i + 1}": f"127.0.0.1:{ports[size + i]}:{ports[2 * size + i]}"
            for i in range(size)
        }
        self._members: list[_ServerProcess] = []
        for i in range(size):
            workdir = self._root / f"zk{i + 1}"
            workdir.mkdir(parents=True, exist_ok=True)
            config = _base_config(workdir / "data", self.ports[i], tick_time_ms)
            config.update(
                {
                    "initLimit": "10",
                    "syncLimit": "5",
                    "reconfigEnabled": "false",
                    "standaloneEnabled": "false",
                    "electionPortBindRetry": "0",
                }
            )
            config.update(quorum)
            config.update(self._extra_config)
            self._members.append(
                _ServerProcess(
                    workdir=workdir,
                    config=config,
                    main_class=_QUORUM_MAIN,
                    myid=i + 1,
                    classpath=self._classpath,
                    java=self._java,
                    jvm_options=self._jvm_options,
                    client_port=self.ports[i],
                )
            )

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self._members)

    @property
    def connect(self) -> str:
        """The connect string of all members, ``"127.0.0.1:P1,127.0.0.1:P2,..."``."""
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def member_connect(self, index: int) -> str:
        """Connect string of one member.

        Args:
            index: Member index (0-based).

        Returns:
            ``"127.0.0.1:PORT"``.
        """
        return f"127.0.0.1:{self.ports[index]}"

    def log_path(self, index: int) -> Path:
        """The captured log of member ``index``."""
        return self._members[index].log_path

    def is_running(self, index: int) -> bool:
        """Whether member ``index``'s JVM is alive."""
        return self._members[index].is_running()

    def modes(self) -> list[str | None]:
        """Each member's ``srvr`` Mode (``leader``/``follower``; None: down or electing)."""
        return [m.mode() for m in self._members]

    def leader(self) -> int | None:
        """Index of the member whose ``srvr`` says ``Mode: leader`` (None during elections)."""
        for i, mode in enumerate(self.modes()):
            if mode == "leader":
                return i
        return None

    def start(self, index: int | None = None) -> LocalZooKeeperEnsemble:
        """Start every member (or one), then wait until the started ones serve.

        Args:
            index: One member to (re)start; None starts all that are not running.

        Returns:
            self.

        Raises:
            LocalZooKeeperError: A member exited, or the wait exceeded
                ``startup_timeout_s`` (the message holds the members' log tails).
        """
        targets = range(self.size) if index is None else [index]
        for i in targets:
            self._members[i].launch()
        self._wait(
            lambda: all(self._members[i].serving(f"ensemble member {i}") for i in targets),
            "serve",
        )
        return self

    def wait_for_leader(self, timeout_s: float | None = None) -> int:
        """Wait until a leader is elected and every running member serves.

        Args:
            timeout_s: Seconds (default ``startup_timeout_s``).

        Returns:
            The leader's index.

        Raises:
            LocalZooKeeperError: No leader in time (e.g. no majority is running).
        """
        found: list[int] = []

        def ready() -> bool:
            modes = self.modes()
            running = [i for i in range(self.size) if self._members[i].is_running()]
            if "leader" in modes and all(modes[i] is not None for i in running):
                found[:] = [modes.index("leader")]
                return True
            return False

        self._wait(ready, "elect a leader", timeout_s, check_alive=False)
        return found[0]

    def _wait(
        self,
        condition: Any,
        what: str,
        timeout_s: float | None = None,
        check_alive: bool = True,
    ) -> None:
        deadline = time.monotonic() + (
            timeout_s if timeout_s is not None else self.startup_timeout_s
        )
        while not condition():
            if check_alive:
                for i, m in enumerate(self._members):
                    m.check_alive(f"ZooKeeper ensemble member {i}")
            if time.monotonic() > deadline:
                tails = "\n".join(
                    f"--- member {i} ({m.log_path}):\n{m.log_tail(15)}"
                    for i, m in enumerate(self._members)
                )
                raise LocalZooKeeperError(
                    f"ZooKeeper ensemble did not {what} in time (modes {self.modes()}):\n{tails}"
                )
            time.sleep(0.05)

    def stop(self, index: int | None = None, timeout: float = 10.0) -> None:
        """Stop every member (or one) gracefully; data is kept.

        Args:
            index: One member; None stops all.
            timeout: Seconds to wait for each clean exit before SIGKILL.
        """
        targets = range(self.size) if index is None else [index]
        for i in targets:
            self._members[i].terminate(timeout)

    def kill(self, index: int) -> None:
        """SIGKILL member ``index`` (data kept; :meth:`start` brings it back).

        Args:
            index: Member index (0-based).
        """
        self._members[index].kill()

    def close(self) -> None:
        """Stop every member and delete the temp dir (if this object created it)."""
        for m in self._members:
            m.terminate(timeout=5.0)
        self._remove_root()

    def __iter__(self) -> Iterator[str]:
        return (self.member_connect(i) for i in range(self.size))

    def _enter(self) -> None:
        # ``with`` waits for a leader too: the ensemble serves then.
        self.start()
        self.wait_for_leader()

    def __repr__(self) -> str:
        return f"LocalZooKeeperEnsemble(connect={self.connect!r}, modes={self.modes()})"
