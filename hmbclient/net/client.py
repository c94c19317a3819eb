"""NetClient: one I/O thread owns a selector and every broker connection; callers get futures.

Usage::

    client = NetClient("127.0.0.1:9092", api_version="auto")
    versions = client.versions(client.bootstrap_ids[0]).result(5)
    fut = client.send(node_id, versions.build(ApiKey.METADATA, topics=["events"]))
    resp = fut.result(timeout=5)
    client.close()

Threading contract:

* Any thread may call ``send``, ``versions``, ``update_brokers``, ``add_listener`` and ``close``.
  They append a command to a deque (atomic in CPython) and, if the I/O thread may be asleep,
  write one byte to a wake-up socketpair. Only the I/O thread touches the selector, the sockets
  and the connection objects, so no lock guards them.
* Futures are completed on the I/O thread: done-callbacks must be short and must not block.
  Status listeners (``broker_connected``, ``broker_disconnected``, ``broker_unavailable``) are
  called there too, with a :class:`BrokerEvent`; exceptions they raise are logged and dropped.
* Node ids: brokers from Metadata keep their ids (>= 0); bootstrap servers get ids -1, -2, ...
  (``bootstrap_ids``) until metadata names them.
* Security: ``security=Security(...)`` (TLS, SASL) applies to every connection, bootstrap and
  metadata-learnt alike; the TLS handshake and the SASL exchange run in the I/O thread (see
  :mod:`.connection`), and an SSL socket's already-decrypted bytes are read without waiting
  for the selector (``BrokerConnection.buffered``).
* A request that cannot be written or answered in time fails with RequestTimedOutError naming
  the API; an unreachable broker fails queued requests with KafkaConnectionError naming the
  address. Nothing waits past its timeout.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Any, NamedTuple

from hmbclient.clock import monotonic_ms
from hmbclient.config import parse_broker_list
from hmbclient.errors import ConfigError, KafkaConnectionError
from hmbclient.metrics import Count, Metrics, Rate
from hmbclient.net.connection import BrokerConnection, ConnState, PendingRequest, RequestBuilder
from hmbclient.net.security import Security
from hmbclient.net.versions import BrokerVersions, Dialect, resolve_dialect
from hmbclient.protocol.api.base import Request
from hmbclient.protocol.frame import DEFAULT_MAX_FRAME_BYTES

__all__ = [
    "NetClient",
    "BrokerEvent",
    "BROKER_CONNECTED",
    "BROKER_DISCONNECTED",
    "BROKER_UNAVAILABLE",
    "parse_bootstrap",
]

log = logging.getLogger("hmbclient.net")

BROKER_CONNECTED = "broker_connected"
BROKER_DISCONNECTED = "broker_disconnected"
BROKER_UNAVAILABLE = "broker_unavailable"


class BrokerEvent(NamedTuple):
    """A status event: ``kind`` is one of the BROKER_* constants; ``error`` explains the last two."""

    kind: str
    node_id: int
    host: str
    port: int
    error: BaseException | None


def parse_bootstrap(servers: str | Iterable[str] | Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Parse ``"h1:p1,h2:p2"`` (or a list of "h:p" strings / (host, port) pairs).

    The parsing is :func:`hmbclient.config.parse_broker_list`'s; a client also needs at least
    one broker.

    Raises:
        ConfigError: empty, or an entry without a valid host and port (named in the message).
    """
    brokers = list(parse_broker_list(servers))
    if not brokers:
        raise ConfigError("no broker addresses given (metadata_broker_list / bootstrap_servers)")
    return brokers


class NetClient:
    """Multiplexes requests to many brokers over one I/O thread. See the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str] | Iterable[tuple[str, int]],
        *,
        client_id: str | None = "hmbclient",
        api_version: str | Dialect = "auto",
        max_in_flight_requests_per_connection: int = 5,
        request_timeout_ms: float = 30_000,
        connect_timeout_ms: float = 10_000,
        probe_timeout_ms: float | None = None,
        reconnect_backoff_ms: float = 50,
        reconnect_backoff_max_ms: float = 1_000,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        send_buffer_bytes: int | None = None,
        receive_buffer_bytes: int | None = None,
        security: Security | None = None,
        name: str = "hmbclient-io",
        metrics: Metrics | None = None,
        metric_group: str = "client-metrics",
    ) -> None:
        """Start the I/O thread (connections open lazily, on the first request).

        Args:
            bootstrap_servers: "host:port,host:port" or a list.
            client_id: sent in every request header.
            api_version: "auto" (ApiVersions probe), "0.8", "0.10", "2.1" or "hmb".
            max_in_flight_requests_per_connection: requests awaiting an answer per connection.
            request_timeout_ms: default per-request timeout.
            connect_timeout_ms: TCP connect timeout.
            probe_timeout_ms: how long to wait for the ApiVersions answer before assuming a
                0.8/0.9 broker (default: min(request_timeout_ms, 5000)).
            reconnect_backoff_ms: first wait of the exponential reconnect backoff.
            reconnect_backoff_max_ms: its largest wait.
            security: TLS and SASL for every connection (None: PLAINTEXT); build it with
                ``Security.from_config(config)`` or ``Security("SASL_SSL", ...)``.
            name: the I/O thread's name.
            metrics: a registry to record ``request-latency-avg/max`` (from queueing a request
                to its answer) and ``response-rate/-total`` into, under ``metric_group``.
            metric_group: the metric group of those (``producer-metrics``...).

        Raises:
            ConfigError: bad addresses, api_version or limits.
        """
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        if max_in_flight_requests_per_connection < 1:
            raise ConfigError("max_in_flight_requests_per_connection must be >= 1")
        if request_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ConfigError("timeouts must be > 0")
        self.dialect = resolve_dialect(api_version)
        self.client_id = client_id
        self.request_timeout_ms = float(request_timeout_ms)
        self._conn_kwargs: dict[str, Any] = dict(
            dialect=self.dialect,
            client_id=client_id,
            max_in_flight=max_in_flight_requests_per_connection,
            connect_timeout_ms=float(connect_timeout_ms),
            probe_timeout_ms=float(probe_timeout_ms if probe_timeout_ms is not None else min(request_timeout_ms, 5_000)),
            reconnect_backoff_ms=float(reconnect_backoff_ms),
            reconnect_backoff_max_ms=float(max(reconnect_backoff_ms, reconnect_backoff_max_ms)),
            max_frame_bytes=max_frame_bytes,
            send_buffer_bytes=send_buffer_bytes,
            receive_buffer_bytes=receive_buffer_bytes,
            security=security,
            latency_sensor=None if metrics is None else metrics.avg_max(
                "request-latency", metric_group, "request-latency", "ms from queueing a request to its answer"
            ).add(metric_group, "response-rate", Rate(metrics.num_samples, metrics.sample_window_ms, count=True),
                  "answers received per second").add(metric_group, "response-total", Count(), "answers received"),
        )
        self.bootstrap_ids: list[int] = [-(i + 1) for i in range(len(self._bootstrap))]
        # node id -> (host, port). Written by callers (whole-dict swap), read by the I/O thread.
        self._addresses: dict[int, tuple[str, int]] = dict(zip(self.bootstrap_ids, self._bootstrap, strict=True))
        self._conns: dict[int, BrokerConnection] = {}
        self._listeners: list[Callable[[BrokerEvent], None]] = []
        self._commands: deque[tuple[Any, ...]] = deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._wake_pending = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- caller side -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def send(
        self,
        node_id: int,
        request: Request | RequestBuilder,
        *,
        timeout_ms: float | None = None,
        expect_response: bool = True,
        api_key: int | None = None,
    ) -> Future[Any]:
        """Queue a request for a broker.

        Args:
            node_id: a broker id from metadata or one of ``bootstrap_ids``.
            request: a Request at a version the connection speaks, or a builder called on
                the I/O thread with the connection's BrokerVersions (so the version is picked
                by the connection).
            timeout_ms: from now until the answer (default ``request_timeout_ms``).
            expect_response: False for Produce with acks=0 (completes once written).
            api_key: names the API in errors when ``request`` is a builder.

        Returns:
            A Future of the decoded response (None when no response is expected). It fails
            with KafkaConnectionError, RequestTimedOutError, UnsupportedByBroker or
            RemoteProtocolError.
        """
        fut: Future[Any] = Future()
        if self._closed:
            fut.set_exception(KafkaConnectionError("client closed"))
            return fut
        t = self.request_timeout_ms if timeout_ms is None else float(timeout_ms)
        req = PendingRequest(request, fut, monotonic_ms() + t, t, expect_response, api_key)
        self._commands.append(("send", node_id, req))
        self._wake()
        return fut

    def versions(self, node_id: int) -> Future[BrokerVersions]:
        """A Future of the connection's BrokerVersions, connecting (and probing) if needed."""
        fut: Future[BrokerVersions] = Future()
        if self._closed:
            fut.set_exception(KafkaConnectionError("client closed"))
            return fut
        self._commands.append(("versions", node_id, fut))
        self._wake()
        return fut

    def call(
        self, node_id: int, build: RequestBuilder, *, timeout_ms: float | None = None, api_key: int | None = None
    ) -> Any:
        """Send and wait: ``build(versions) -> Request`` runs once the connection is ready.

        Returns:
            The decoded response.

        Raises:
            RequestTimedOutError: nothing came back in time.
            HmbError: whatever else the future raises.
        """
        t = self.request_timeout_ms if timeout_ms is None else float(timeout_ms)
        fut = self.send(node_id, build, timeout_ms=t, api_key=api_key)
        # The I/O thread enforces the deadline; the extra second only guards against a wedged
        # I/O thread turning into a silent hang.
        return fut.result(timeout=t / 1000.0 + 1.0)

    def update_brokers(self, brokers: Mapping[int, tuple[str, int]]) -> None:
        """Record broker addresses from metadata (node id -> (host, port))."""
        new = dict(self._addresses)
        changed = False
        for node_id, addr in brokers.items():
            if new.get(node_id) != addr:
                new[node_id] = (addr[0], int(addr[1]))
                changed = True
        if changed:
            self._addresses = new
            self._commands.append(("addresses",))
            self._wake()

    def address(self, node_id: int) -> tuple[str, int] | None:
        return self._addresses.get(node_id)

    def known_nodes(self) -> list[int]:
        """Metadata node ids first (sorted), then the bootstrap ids."""
        ids = list(self._addresses)
        return sorted(i for i in ids if i >= 0) + [i for i in self.bootstrap_ids if i in self._addresses]

    def is_ready(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return conn is not None and conn.state is ConnState.READY

    def in_flight(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return conn.in_flight if conn is not None else 0

    def least_loaded_node(self) -> int:
        """A ready node with the fewest requests in flight; else the first known node."""
        best: int | None = None
        best_n = 1 << 30
        for node_id, conn in list(self._conns.items()):
            if conn.state is ConnState.READY and node_id in self._addresses and conn.in_flight < best_n:
                best, best_n = node_id, conn.in_flight
        if best is not None:
            return best
        return self.known_nodes()[0]

    def add_listener(self, listener: Callable[[BrokerEvent], None]) -> None:
        """Register a status listener (called on the I/O thread; must not block)."""
        self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: Callable[[BrokerEvent], None]) -> None:
        self._listeners = [x for x in self._listeners if x is not listener]

    def close(self, timeout_s: float = 5.0) -> None:
        """Close every connection (queued requests fail) and stop the I/O thread."""
        if self._closed:
            return
        self._closed = True
        self._commands.append(("close",))
        self._wake(force=True)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def __enter__(self) -> NetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self, force: bool = False) -> None:
        # Order matters: the command is appended before the flag is read, and the I/O thread
        # clears the flag after draining the socket and before running the commands, so a
        # command is never left behind unseen.
        if threading.current_thread() is self._thread:
            return  # the loop drains commands before sleeping again
        if self._wake_pending and not force:
            return
        self._wake_pending = True
        try:
            self._wake_w.send(b"\x00")
        except (BlockingIOError, OSError):
            pass

    # -- ConnectionOwner (I/O thread) ------------------------------------------------------

    def _watch(self, conn: BrokerConnection, sock: socket.socket, write: bool) -> None:
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        try:
            self._selector.modify(sock, events, conn)
        except KeyError:
            self._selector.register(sock, events, conn)

    def _unwatch(self, conn: BrokerConnection, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    def _emit(self, kind: str, conn: BrokerConnection, error: BaseException | None) -> None:
        if conn.closed:
            return
        ev = BrokerEvent(kind, conn.node_id, conn.host, conn.port, error)
        for fn in self._listeners:
            try:
                fn(ev)
            except Exception:
                log.exception("status listener %r failed on %s", fn, kind)

    # -- the loop --------------------------------------------------------------------------

    def _conn(self, node_id: int) -> BrokerConnection | None:
        conn = self._conns.get(node_id)
        addr = self._addresses.get(node_id)
        if conn is not None and (addr is None or (conn.host, conn.port) == addr):
            return conn
        if addr is None:
            return conn
        if conn is not None:
            # The broker moved: finish the old connection's work by failing it (retriable).
            conn.close(KafkaConnectionError(f"{conn.address}: broker {node_id} moved to {addr[0]}:{addr[1]}"))
        conn = BrokerConnection(self, node_id, addr[0], addr[1], **self._conn_kwargs)
        self._conns[node_id] = conn
        return conn

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException:  # pragma: no cover - a bug; make it loud and fail everything
            log.exception("hmbclient I/O thread crashed")
            self._closed = True
        finally:
            self._shutdown()

    def _loop(self) -> None:
        selector = self._selector
        commands = self._commands
        while True:
            now = monotonic_ms()
            timeout: float | None = None
            buffered: list[BrokerConnection] = []
            for conn in self._conns.values():
                deadline = conn.next_deadline()
                if deadline is not None and (timeout is None or deadline < timeout):
                    timeout = deadline
                if conn.buffered():
                    buffered.append(conn)
            wait: float | None
            if commands or buffered:
                wait = 0.0
            elif timeout is None:
                wait = None
            else:
                wait = max(0.0, (timeout - now) / 1000.0)
            events = selector.select(wait)
            now = monotonic_ms()
            for key, mask in events:
                conn = key.data
                if conn is None:
                    # Drain first, then clear the flag: a submitter that saw the flag still set
                    # sent no byte, and its command is drained below all the same; clearing
                    # before draining could swallow the byte of a command queued in between
                    # and leave the flag set with nothing left to wake us.
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, InterruptedError):
                        pass
                    self._wake_pending = False
                    continue
                conn.on_event(bool(mask & selectors.EVENT_READ), bool(mask & selectors.EVENT_WRITE), now)
            for conn in buffered:
                # TLS bytes already decrypted: the selector will not report them.
                if conn.buffered():
                    conn.on_event(True, False, now)
            while commands:
                cmd = commands.popleft()
                op = cmd[0]
                if op == "send":
                    _, node_id, req = cmd
                    target = self._conn(node_id)
                    if target is None:
                        req.future.set_exception(
                            KafkaConnectionError(f"unknown broker node {node_id} (not in metadata)")
                        )
                    else:
                        target.enqueue(req, now)
                elif op == "versions":
                    _, node_id, fut = cmd
                    target = self._conn(node_id)
                    if target is None:
                        fut.set_exception(KafkaConnectionError(f"unknown broker node {node_id} (not in metadata)"))
                    else:
                        target.wait_versions(fut, now)
                elif op == "addresses":
                    for node_id in list(self._conns):
                        self._conn(node_id)
                elif op == "close":
                    return
            for conn in list(self._conns.values()):
                conn.check_timeouts(now)

    def _shutdown(self) -> None:
        err = KafkaConnectionError("client closed")
        for conn in list(self._conns.values()):
            conn.close(err)
        while self._commands:
            cmd = self._commands.popleft()
            if cmd[0] == "send":
                fut = cmd[2].future
            elif cmd[0] == "versions":
                fut = cmd[2]
            else:
                continue
            if not fut.done():
                fut.set_exception(err)
        try:
            self._selector.close()
        finally:
            self._wake_r.close()
            self._wake_w.close()
