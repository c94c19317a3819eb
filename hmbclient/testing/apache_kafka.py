"""Apache Kafka itself, for tests: real Kafka brokers and Kafka's Java tools, from jars on disk.

Usage::

    with ApacheKafka() as kafka:                          # Kafka 4.x, KRaft, one combined node
        producer = Producer(metadata_broker_list=kafka.bootstrap)

    with ApacheKafka(nodes=3) as kafka:                   # three combined nodes = the quorum
        kafka.kill(0); kafka.restart(0)

    with ApacheKafka(listeners=("PLAINTEXT", "SASL_SSL"), sasl={"alice": "alice-secret"}) as k:
        k.bootstrap_for("SASL_SSL"); k.pki.ca             # CA of the brokers' certificate

    with LocalZooKeeper() as zk, ApacheKafka(version="0.8.2.2", zookeeper_connect=zk.connect) as k:
        ...                                               # the seeds' Kafka, ZooKeeper mode

    kafka_java("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", ..., ...)

Where the jars come from: ``make peers`` (part of ``make setup``) copies each
``peers/NAME/pom.xml``'s dependencies from Maven Central into ``.cache/maven-peers/NAME/jars``
and compiles our Java programs of ``tests/java/NAME/`` into ``.cache/maven-peers/NAME/classes``;
``HMB_MAVEN_PEERS`` names another cache. Nothing is downloaded here: missing jars raise
:class:`ApacheKafkaNotFoundError` saying to run ``make peers``, never a skip.

Contract of a cluster:

* Kafka 4.x (``version`` "4" or "4.x.y"): KRaft in combined mode, every node both broker and
  controller, the controller quorum being all nodes (static voters). Storage is formatted first
  (``kafka.tools.StorageTool format``, with the SCRAM users of ``sasl``). Each node has an
  ``INTERNAL`` PLAINTEXT listener for replication and probes, a ``CONTROLLER`` listener, and one
  client listener per entry of ``listeners`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), all on
  127.0.0.1, each on a free port kept across restarts. SASL offers PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512 with the same users; TLS uses a test PKI (:mod:`hmbclient.testing.pki`).
* Kafka 0.8 (``version`` "0.8.2.2"): ZooKeeper mode (``zookeeper_connect``; a LocalZooKeeper of
  our own when not given), PLAINTEXT only, node i is ``broker.id`` i.
* Readiness: :meth:`start` and :meth:`restart` return once every started node logged that its
  server started *and* answers an ApiVersions request on its internal listener; no sleeps. A
  node whose JVM exits, or that is not ready within ``startup_timeout_s``, raises
  :class:`ApacheKafkaError` with the tail of its log.
* Processes: each node is one ``java -cp <jars> kafka.Kafka server.properties`` with a small
  heap, its log (stdout+stderr) in ``<node dir>/kafka.log``; a JVM started from the main thread
  dies with this process (``PR_SET_PDEATHSIG``), and an ``atexit`` hook kills what is left.
  :meth:`kill` is SIGKILL (a crash), :meth:`stop` SIGTERM then SIGKILL; both keep the data, so
  :meth:`restart` brings the node back. :meth:`close` (and ``__exit__``) also removes the temp dir.

Note: sockets belong to ``hmbclient.net``, the broker and these local servers
(docs/architecture.md); here the ApiVersions probe opens plain sockets (free ports: ``_process``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket  # readiness probe only (see module docstring)
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hmbclient.testing._process import (
    StartedOrClosed,
    at_exit,
    free_ports,
    launch_logged,
    preexec_for_current_thread,
    stop_process,
)

__all__ = [
    "ApacheKafka",
    "ApacheKafkaError",
    "ApacheKafkaNotFoundError",
    "kafka_classpath",
    "kafka_java",
    "kafka_java_process",
    "spark_kafka_connector_jars",
]

# Small, fast-starting JVMs: the machine has 2 cores and is shared.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xms32m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Djava.awt.headless=true",
)
TOOL_JVM_OPTIONS: tuple[str, ...] = ("-Xms16m", "-Xmx256m", *DEFAULT_JVM_OPTIONS[2:])

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_SASL_USERS: Mapping[str, str] = {"alice": "alice-secret"}
_LOG_TAIL_LINES = 40

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""
_LOG4J1 = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={target}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class ApacheKafkaError(RuntimeError):
    """An Apache Kafka node failed to start, or a Java tool failed."""


class ApacheKafkaNotFoundError(ApacheKafkaError):
    """The jars (or java) are missing; the message says how to get them."""


# --------------------------------------------------------------------- jars


def _peers_root() -> Path:
    env = os.environ.get("HMB_MAVEN_PEERS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".cache" / "maven-peers"


def _peer_name(version: str) -> str:
    if version == "0.8" or version.startswith("0.8."):
        return "kafka-0.8"
    if version == "4" or version.startswith("4."):
        return "kafka-4"
    raise ValueError(f"Kafka version {version!r} is not one of the peers (4.x, 0.8.2.x)")


def kafka_classpath(version: str = "4") -> list[str]:
    """The classpath that runs Kafka ``version``: our compiled Java programs, then the jars.

    Args:
        version: "4" or "4.x.y" (the Kafka 4 peer), "0.8" or "0.8.2.2".

    Returns:
        Classpath entries (a ``dir/*`` wildcard for the jars).

    Raises:
        ApacheKafkaNotFoundError: ``make peers`` has not run (or fetched another version).
        ValueError: a version we have no peer for.
    """
    name = _peer_name(version)
    peer = _peers_root() / name
    jars = peer / "jars"
    found = sorted(p.name for p in jars.glob("kafka_2.1*-*.jar")) if jars.is_dir() else []
    if not found:
        raise ApacheKafkaNotFoundError(
            f"no Apache Kafka jars in {jars}: run `make peers` (or `make setup`) to fetch "
            f"peers/{name}/pom.xml from Maven Central, or set HMB_MAVEN_PEERS to such a cache"
        )
    if version.count(".") >= 2 and not any(n.endswith(f"-{version}.jar") for n in found):
        raise ApacheKafkaNotFoundError(
            f"Kafka {version} is not in {jars} (found {', '.join(found)}): change "
            f"peers/{name}/pom.xml and run `make peers`"
        )
    entries = []
    if (peer / "classes").is_dir():
        entries.append(str(peer / "classes"))
    entries.append(str(jars / "*"))
    return entries


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").is_file():
        return str(Path(java_home, "bin", "java"))
    found = shutil.which("java")
    if not found:
        raise ApacheKafkaNotFoundError("no `java` on PATH and JAVA_HOME unset (`make setup` installs one)")
    return found


def jar_version(version: str = "4") -> str:
    """The exact Kafka version of the jars in the cache ("4.4.0", "0.8.2.2")."""
    jars = Path(kafka_classpath(version)[-1]).parent
    name = sorted(p.name for p in jars.glob("kafka_2.1*-*.jar"))[0]
    return name[: -len(".jar")].split("-", 1)[1]


def spark_kafka_connector_jars() -> list[str]:
    """Spark's own Kafka connector (``format("kafka")``) for ``spark.jars``: the connector,
    its token provider, kafka-clients and commons-pool2 from ``peers/spark-kafka`` (Spark,
    Scala and Hadoop themselves come with pyspark).

    Raises:
        ApacheKafkaNotFoundError: ``make peers`` has not run.
    """
    jars = _peers_root() / "spark-kafka" / "jars"
    wanted = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-", "commons-pool2-")
    found = [next(iter(sorted(jars.glob(f"{w}*.jar"))), None) for w in wanted] if jars.is_dir() else [None]
    if not all(found):
        raise ApacheKafkaNotFoundError(
            f"Spark's Kafka connector is not in {jars}: run `make peers` (peers/spark-kafka/pom.xml)")
    return [str(j) for j in found]


# --------------------------------------------------------------------- Java tools


_TOOL_LOG_DIR: list[str] = []


def _tool_logging(version: str) -> list[str]:
    """JVM flags that send a tool's log (WARN and up) to stderr, keeping stdout for its output."""
    if not _TOOL_LOG_DIR:
        d = tempfile.mkdtemp(prefix="kafka-tools-")
        at_exit.add_dir(d)
        Path(d, "log4j2.properties").write_text(_LOG4J2.format(target="SYSTEM_ERR", level="WARN"))
        Path(d, "log4j.properties").write_text(_LOG4J1.format(target="System.err", level="WARN"))
        _TOOL_LOG_DIR.append(d)
    d = _TOOL_LOG_DIR[0]
    if _peer_name(version) == "kafka-0.8":
        return [f"-Dlog4j.configuration=file:{d}/log4j.properties"]
    return [f"-Dlog4j2.configurationFile={d}/log4j2.properties"]


def _tool_command(main_class: str, args: Sequence[str], version: str, jvm_options: Sequence[str] | None) -> list[str]:
    return [
        _find_java(),
        *(jvm_options if jvm_options is not None else TOOL_JVM_OPTIONS),
        *_tool_logging(version),
        "-cp",
        os.pathsep.join(kafka_classpath(version)),
        main_class,
        *args,
    ]


def kafka_java(
    main_class: str,
    *args: str,
    version: str = "4",
    timeout_s: float = 120.0,
    check: bool = True,
    input: str | None = None,
    jvm_options: Sequence[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's Java tools (or one of our programs of ``tests/java``) to completion.

    Args:
        main_class: e.g. ``org.apache.kafka.tools.VerifiableProducer``, ``kafka.tools.ConsoleProducer``.
        *args: Its command-line arguments.
        version: Which Kafka's classpath (see :func:`kafka_classpath`).
        timeout_s: Kill it after this long (then raise).
        check: Raise :class:`ApacheKafkaError` on a non-zero exit (with its stderr).
        input: Text for its stdin.
        jvm_options: Replace :data:`TOOL_JVM_OPTIONS`.

    Returns:
        The finished process: ``stdout`` (its output) and ``stderr`` (its log) as text.

    Raises:
        ApacheKafkaError: non-zero exit (``check``) or timeout.
        ApacheKafkaNotFoundError: no jars.
    """
    cmd = _tool_command(main_class, args, version, jvm_options)
    try:
        done = subprocess.run(
            cmd,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            preexec_fn=preexec_for_current_thread(),
        )
    except subprocess.TimeoutExpired as e:
        raise ApacheKafkaError(
            f"{main_class} did not finish within {timeout_s:g}s; stderr:\n{_tail(_text(e.stderr))}"
        ) from e
    if check and done.returncode != 0:
        raise ApacheKafkaError(
            f"{main_class} {' '.join(args)} exited with {done.returncode}; stderr:\n{_tail(done.stderr)}"
            f"\nstdout:\n{_tail(done.stdout, 10)}"
        )
    return done


def kafka_java_process(
    main_class: str,
    *args: str,
    version: str = "4",
    jvm_options: Sequence[str] | None = None,
    stderr_path: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[str]:
    """Start one of Kafka's Java tools (or our programs) in the background.

    Its stdout is a text pipe (``proc.stdout``, line-buffered); its stderr goes to
    ``stderr_path`` (default: discarded). The caller ends it (``terminate``/``kill``) and waits;
    a process started from the main thread also dies with this one.

    Raises:
        ApacheKafkaNotFoundError: no jars.
    """
    cmd = _tool_command(main_class, args, version, jvm_options)
    err: Any = open(stderr_path, "ab") if stderr_path is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            bufsize=1,
            preexec_fn=preexec_for_current_thread(),
        )
    finally:
        if stderr_path is not None:
            err.close()


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode("utf-8", "replace")


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------- probes


# ApiVersions v0 (every Kafka since 0.10 answers it; 0.8 closes the connection), correlation 7.
_API_VERSIONS_PROBE = (lambda body: struct.pack(">i", len(body)) + body)(
    struct.pack(">hhih", 18, 0, 7, 5) + b"ready"
)
# Metadata v0 for no topics (answered by 0.8), correlation 7.
_METADATA_PROBE = (lambda body: struct.pack(">i", len(body)) + body)(
    struct.pack(">hhih", 3, 0, 7, 5) + b"ready" + struct.pack(">i", 0)
)


def _answers(port: int, probe: bytes) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            s.sendall(probe)
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
            return struct.unpack(">ii", head)[1] == 7
    except OSError:
        return False


def _properties(config: Mapping[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{k}={esc(v)}\n" for k, v in config.items())


class _Node:
    """One Kafka JVM: its directory, server.properties and log."""

    def __init__(self, index: int, workdir: Path, config: Mapping[str, str], java: str,
                 classpath: Sequence[str], jvm_options: Sequence[str], probe_port: int,
                 legacy: bool) -> None:
        self.index = index
        self.workdir = workdir
        self.config_path = workdir / "server.properties"
        self.log_path = workdir / "kafka.log"
        self.probe_port = probe_port
        self.config = dict(config)
        self._java = java
        self._classpath = list(classpath)
        self._jvm_options = list(jvm_options)
        self._legacy = legacy
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(_properties(self.config), encoding="utf-8")
        if self._legacy:
            (self.workdir / "log4j.properties").write_text(_LOG4J1.format(target="System.out", level="INFO"))
        else:
            (self.workdir / "log4j2.properties").write_text(_LOG4J2.format(target="SYSTEM_OUT", level="INFO"))

    def logging_options(self) -> list[str]:
        if self._legacy:
            return [f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}"]
        return [f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}"]

    def run_tool(self, main_class: str, *args: str) -> None:
        cmd = [self._java, *self._jvm_options, *self.logging_options(), "-cp",
               os.pathsep.join(self._classpath), main_class, *args]
        with open(self.log_path, "ab") as log:
            log.write(f"=== {' '.join(cmd)}\n".encode())
            log.flush()
            rc = subprocess.run(cmd, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, timeout=120,
                                preexec_fn=preexec_for_current_thread()).returncode
        if rc != 0:
            raise ApacheKafkaError(f"{main_class} failed for node {self.index} ({rc}):\n{self.log_tail()}")

    def launch(self) -> None:
        if self.is_running():
            return
        cmd = [self._java, *self._jvm_options, *self.logging_options(), "-cp",
               os.pathsep.join(self._classpath), "kafka.Kafka", str(self.config_path)]
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._proc = launch_logged(cmd, log_path=self.log_path, cwd=self.workdir)
        at_exit.add_server(self)

    def log_since_launch(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _tail(self.log_since_launch(), lines) or "(no log)"

    def ready(self) -> bool:
        """Started (its log says so) and answering on its probe listener."""
        if not self.is_running():
            return False
        text = self.log_since_launch()
        if self._legacy:
            return "], started (kafka.server.KafkaServer)" in text and _answers(self.probe_port, _METADATA_PROBE)
        return "Kafka Server started" in text and _answers(self.probe_port, _API_VERSIONS_PROBE)

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            rc = self._proc.returncode
            self._proc = None
            at_exit.discard_server(self)
            raise ApacheKafkaError(f"Kafka node {self.index} exited with {rc}; last lines of {self.log_path}:\n"
                                   f"{self.log_tail()}")

    def signal(self, sig: int, timeout: float) -> None:
        if self._proc is None:
            return
        stop_process(self._proc, timeout, sig)
        self._proc = None
        at_exit.discard_server(self)

    def kill(self) -> None:
        self.signal(signal.SIGKILL, 10.0)


# --------------------------------------------------------------------- the cluster


class ApacheKafka(StartedOrClosed):
    """A real Apache Kafka cluster of ``nodes`` JVMs on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        version: str = "4",
        nodes: int = 1,
        *,
        listeners: Sequence[str] = ("PLAINTEXT",),
        sasl: Mapping[str, str] | None = None,
        zookeeper_connect: str | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        jvm_options: Sequence[str] | None = None,
        startup_timeout_s: float = 120.0,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        """Prepare a cluster (nothing runs until :meth:`start` or ``with``).

        Args:
            version: "4"/"4.x.y" (KRaft) or "0.8"/"0.8.2.2" (ZooKeeper); see :func:`kafka_classpath`.
            nodes: How many nodes (1 or 3 is usual; KRaft needs a majority of them running).
            listeners: Client listeners' security protocols, the first one being :attr:`bootstrap`.
            sasl: SASL users and passwords (default ``{"alice": "alice-secret"}`` when a SASL
                listener is asked for).
            zookeeper_connect: Kafka 0.8 only: the ZooKeeper to register in (default: a
                LocalZooKeeper of our own, closed with the cluster).
            data_dir: Root of the nodes' directories (default: a temp dir removed by :meth:`close`).
            jvm_options: Replace :data:`DEFAULT_JVM_OPTIONS`.
            startup_timeout_s: How long :meth:`start`/:meth:`restart` wait for readiness.
            extra_config: More ``server.properties`` lines for every node.

        Raises:
            ApacheKafkaNotFoundError: no jars or no java (the message says what to run).
            ValueError: an unknown protocol, or TLS/SASL asked of Kafka 0.8.
        """
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        listeners = tuple(p.upper() for p in listeners)
        bad = [p for p in listeners if p not in PROTOCOLS]
        if bad or not listeners or len(set(listeners)) != len(listeners):
            raise ValueError(f"listeners must be distinct protocols of {PROTOCOLS}, got {listeners}")
        self.version = version
        self.legacy = _peer_name(version) == "kafka-0.8"
        if self.legacy and listeners != ("PLAINTEXT",):
            raise ValueError("Kafka 0.8 has PLAINTEXT only (TLS and SASL came in 0.9/0.10)")
        self.listeners = listeners
        self.sasl_users: dict[str, str] = dict(sasl or DEFAULT_SASL_USERS) if any(
            p.startswith("SASL") for p in listeners) else dict(sasl or {})
        self._classpath = kafka_classpath(version)
        self._java = _find_java()
        self._jvm_options = list(jvm_options if jvm_options is not None else DEFAULT_JVM_OPTIONS)
        self.startup_timeout_s = startup_timeout_s
        if data_dir is None:
            self._root = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
            self._owns_root = True
            at_exit.add_dir(str(self._root))
        else:
            self._root = Path(data_dir)
            self._root.mkdir(parents=True, exist_ok=True)
            self._owns_root = False
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.pki: Any = None
        if any(p in ("SSL", "SASL_SSL") for p in listeners):
            from hmbclient.testing.pki import make_pki

            pki_dir = self._root / "pki"
            pki_dir.mkdir(exist_ok=True)
            self.pki = make_pki(str(pki_dir))
        self._zookeeper: Any = None
        self._zookeeper_connect = zookeeper_connect
        per_node = 1 if self.legacy else len(listeners) + 2
        ports = free_ports(per_node * nodes)
        self.ports: list[dict[str, int]] = []
        for i in range(nodes):
            mine = ports[i * per_node:(i + 1) * per_node]
            if self.legacy:
                self.ports.append({"PLAINTEXT": mine[0]})
            else:
                self.ports.append({**dict(zip(listeners, mine, strict=False)),
                                   "INTERNAL": mine[-2], "CONTROLLER": mine[-1]})
        self._extra_config = {k: str(v) for k, v in (extra_config or {}).items()}
        self._nodes: list[_Node] = []
        self._formatted = False

    # ----------------------------------------------------------------- addresses

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:P1,..."``: every node's first client listener."""
        return self.bootstrap_for(self.listeners[0])

    def bootstrap_for(self, protocol: str) -> str:
        """Every node's listener of one security protocol, ``"127.0.0.1:P1,..."``."""
        return ",".join(f"127.0.0.1:{p[protocol.upper()]}" for p in self.ports)

    def node_bootstrap(self, node: int, protocol: str | None = None) -> str:
        """One node's listener, ``"127.0.0.1:PORT"``."""
        return f"127.0.0.1:{self.ports[node][(protocol or self.listeners[0]).upper()]}"

    @property
    def zookeeper_connect(self) -> str | None:
        """Kafka 0.8: the ZooKeeper the brokers registered in."""
        return self._zookeeper_connect

    def client_properties(self, protocol: str | None = None, mechanism: str = "SCRAM-SHA-256",
                          user: str | None = None) -> dict[str, str]:
        """Properties for Kafka's Java clients on a listener (pass them as ``--command-config``).

        Args:
            protocol: The listener's protocol (default: the first one).
            mechanism: SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
            user: SASL user (default: the first of ``sasl``).
        """
        protocol = (protocol or self.listeners[0]).upper()
        props = {"bootstrap.servers": self.bootstrap_for(protocol), "security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.pki.ca})
        if protocol.startswith("SASL"):
            name = user or next(iter(self.sasl_users))
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            props["sasl.mechanism"] = mechanism
            props["sasl.jaas.config"] = (f'{module} required username="{name}" '
                                         f'password="{self.sasl_users[name]}";')
        return props

    def write_client_properties(self, protocol: str | None = None, **kwargs: Any) -> str:
        """:meth:`client_properties` written to a file in the cluster's dir; its path."""
        props = self.client_properties(protocol, **kwargs)
        fd, path = tempfile.mkstemp(prefix="client-", suffix=".properties", dir=self._root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_properties(props))
        return path

    def log_path(self, node: int) -> Path:
        """Node ``node``'s captured log."""
        return self._nodes[node].log_path if self._nodes else self._root / f"node{node}" / "kafka.log"

    def pid(self, node: int) -> int | None:
        """Node ``node``'s JVM process id (None when not running)."""
        return self._nodes[node].pid if self._nodes else None

    def is_running(self, node: int) -> bool:
        """Whether node ``node``'s JVM is alive."""
        return bool(self._nodes) and self._nodes[node].is_running()

    # ----------------------------------------------------------------- configs

    def _node_config(self, i: int) -> dict[str, str]:
        n = len(self.ports)
        rf = str(min(n, 3))
        ports = self.ports[i]
        data = self._root / f"node{i}" / "data"
        if self.legacy:
            config = {
                "broker.id": str(i),
                "host.name": "127.0.0.1",
                "advertised.host.name": "127.0.0.1",
                "port": str(ports["PLAINTEXT"]),
                "log.dirs": str(data),
                "zookeeper.connect": str(self._zookeeper_connect),
                "num.partitions": "1",
                "default.replication.factor": "1",
                "offsets.topic.replication.factor": rf,
                "offsets.topic.num.partitions": "4",
                "controlled.shutdown.enable": "true",
                "log.flush.interval.messages": "10000",
            }
        else:
            client = {p: ports[p] for p in self.listeners}
            listeners = [f"{p}://127.0.0.1:{port}" for p, port in client.items()]
            protomap = {p: p for p in client}
            protomap.update({"INTERNAL": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"})
            config = {
                "process.roles": "broker,controller",
                "node.id": str(i + 1),
                "controller.quorum.voters": ",".join(
                    f"{j + 1}@127.0.0.1:{p['CONTROLLER']}" for j, p in enumerate(self.ports)),
                "listeners": ",".join([*listeners, f"INTERNAL://127.0.0.1:{ports['INTERNAL']}",
                                       f"CONTROLLER://127.0.0.1:{ports['CONTROLLER']}"]),
                "advertised.listeners": ",".join([*listeners, f"INTERNAL://127.0.0.1:{ports['INTERNAL']}"]),
                "listener.security.protocol.map": ",".join(f"{k}:{v}" for k, v in protomap.items()),
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "INTERNAL",
                "log.dirs": str(data),
                "num.partitions": "1",
                "default.replication.factor": rf,
                "offsets.topic.replication.factor": rf,
                "offsets.topic.num.partitions": "4",
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "4",
                "share.coordinator.state.topic.replication.factor": rf,
                "share.coordinator.state.topic.min.isr": "1",
                "group.initial.rebalance.delay.ms": "0",
                "auto.create.topics.enable": "true",
                "num.network.threads": "2",
                "num.io.threads": "2",
                "log.segment.bytes": str(64 << 20),
            }
            if self.sasl_users:
                config["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
                plain_users = " ".join(f'user_{u}="{pw}"' for u, pw in self.sasl_users.items())
                for p in self.listeners:
                    if p.startswith("SASL"):
                        lname = p.lower()
                        config[f"listener.name.{lname}.plain.sasl.jaas.config"] = (
                            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};")
                        for m in SASL_MECHANISMS[1:]:
                            config[f"listener.name.{lname}.{m.lower()}.sasl.jaas.config"] = (
                                "org.apache.kafka.common.security.scram.ScramLoginModule required;")
            if self.pki is not None:
                chain = Path(self.pki.server_cert).read_text() + Path(self.pki.ca).read_text()
                config.update({
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.certificate.chain": chain,
                    "ssl.keystore.key": Path(self.pki.server_key).read_text(),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.certificates": Path(self.pki.ca).read_text(),
                    "ssl.client.auth": "none",
                })
        config.update(self._extra_config)
        return config

    def _build(self) -> None:
        if self.legacy and self._zookeeper_connect is None:
            from hmbclient.testing.zookeeper import LocalZooKeeper

            self._zookeeper = LocalZooKeeper().start()
            self._zookeeper_connect = self._zookeeper.connect
        for i in range(len(self.ports)):
            node = _Node(i, self._root / f"node{i}", self._node_config(i), self._java, self._classpath,
                         self._jvm_options, self.ports[i]["PLAINTEXT" if self.legacy else "INTERNAL"],
                         self.legacy)
            node.write_config()
            self._nodes.append(node)

    def _format(self) -> None:
        if self.legacy or self._formatted:
            return
        scram = []
        for user, password in self.sasl_users.items():
            for m in SASL_MECHANISMS[1:]:
                scram += ["--add-scram", f"{m}=[name={user},password={password}]"]
        for node in self._nodes:
            node.run_tool("kafka.tools.StorageTool", "format", "--ignore-formatted", "-t", self.cluster_id,
                          "-c", str(node.config_path), *scram)
        self._formatted = True

    # ----------------------------------------------------------------- life cycle

    def start(self) -> ApacheKafka:
        """Format (first time), start every node that is not running, and wait until all serve.

        Returns:
            self.

        Raises:
            ApacheKafkaError: a node exited or was not ready in time (with its log tail).
        """
        if not self._nodes:
            self._build()
        self._format()
        for node in self._nodes:
            node.launch()
        self._wait([n.index for n in self._nodes])
        return self

    def _wait(self, indexes: Sequence[int]) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        pending = list(indexes)
        while pending:
            for i in list(pending):
                self._nodes[i].check_alive()
                if self._nodes[i].ready():
                    pending.remove(i)
            if not pending:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- node {i} ({self._nodes[i].log_path}):\n{self._nodes[i].log_tail(20)}"
                                  for i in pending)
                raise ApacheKafkaError(f"Kafka nodes {pending} not ready within {self.startup_timeout_s:g}s:\n{tails}")
            time.sleep(0.1)

    def kill(self, node: int) -> None:
        """SIGKILL one node, as a crash would (its data is kept)."""
        self._nodes[node].kill()

    def stop(self, node: int | None = None, timeout: float = 30.0) -> None:
        """Stop one node (or all) gracefully: SIGTERM, then SIGKILL after ``timeout``; data kept."""
        targets = self._nodes if node is None else [self._nodes[node]]
        for n in targets:
            n.signal(signal.SIGTERM, timeout)

    def restart(self, node: int) -> ApacheKafka:
        """Stop one node (if running) and start it again on the same ports and data; wait for it."""
        self._nodes[node].signal(signal.SIGTERM, 30.0)
        self._nodes[node].launch()
        self._wait([node])
        return self

    def close(self) -> None:
        """Stop every node and remove the temp dir (and our own ZooKeeper, if any)."""
        for n in self._nodes:  # all at once: a quorum shutting down one node at a time is slow
            if n.is_running() and n._proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    n._proc.send_signal(signal.SIGTERM)
        for n in self._nodes:
            n.signal(signal.SIGTERM, 10.0)
        if self._zookeeper is not None:
            self._zookeeper.close()
            self._zookeeper = None
        if self._owns_root:
            shutil.rmtree(self._root, ignore_errors=True)
            at_exit.discard_dir(str(self._root))

    def __repr__(self) -> str:
        running = [n.index for n in self._nodes if n.is_running()]
        return f"ApacheKafka(version={self.version!r}, bootstrap={self.bootstrap!r}, running={running})"
