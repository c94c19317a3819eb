"""One non-blocking connection to one broker, driven by the I/O thread of :mod:`.client`.

Contract (the I/O thread is the only caller; nothing here is thread-safe by design):

* ``enqueue(req, now_ms)`` queues a request; it is written once the connection is READY and
  fewer than ``max_in_flight`` requests await an answer. Kafka answers a connection's requests
  in order, so the in-flight queue is FIFO and the sans-IO ``ClientConnection`` checks each
  correlation id against its head.
* States (:class:`ConnState`): DISCONNECTED -> CONNECTING -> (HANDSHAKING) -> (PROBING) ->
  (AUTHENTICATING) -> READY -> DISCONNECTED, and CLOSED for good from any of them; ``_TRANSITIONS`` lists the legal moves and
  ``BrokerConnection._enter`` is the one place the state changes. PROBING exists only for a
  dialect with ``probe=True``: an ApiVersions v0 request is the first thing written. If the
  broker closes the connection or does not answer within the probe timeout (Kafka 0.8/0.9), the
  connection reconnects at once without a probe and keeps the legacy version set for good --
  unless this broker has answered a probe before: then the lost probe is a network fault (a
  partition, a proxy closing links, a broker restarting), never a downgrade, and the attempt
  fails like a refused connect (backoff, then a new probe).
  HANDSHAKING is the TLS handshake (security.protocol SSL / SASL_SSL) and AUTHENTICATING the SASL
  exchange (SASL_PLAINTEXT / SASL_SSL); see "Security" below. READY -> AUTHENTICATING is a
  re-authentication on the same connection.
  The other flags are not states: ``_legacy`` remembers that this broker takes no probe,
  ``_recycled`` that the next READY is a deliberate reconnect (no status event), ``_writing``
  whether the selector watches for writability.
* A request whose deadline passes fails with RequestTimedOutError naming the API; since a late
  answer would desynchronise the ordered stream, the connection is then closed and the other
  requests in flight fail with KafkaConnectionError (retriable). Requests not yet written stay
  queued across a reconnect; a failed connect attempt fails them (broker_unavailable) and
  starts an exponential backoff, capped at ``reconnect_backoff_max_ms``.
* Requests with ``expect_response=False`` (Produce acks=0) complete as soon as they are framed.
* Quota throttling (KIP-219): a Produce (v6+) or Fetch (v8+) answer with ``throttle_time_ms``
  > 0 means the broker muted this connection that long; nothing more is written to it until
  then (``_throttled_until``; the requests stay queued, their deadlines keep running) -- Kafka's
  clients do the same. Older versions' answers were already held by the broker: nothing to do.

Security (settings: :class:`hmbclient.net.security.Security`):

* TLS runs inside the I/O thread: once TCP connects, the socket is wrapped
  (``do_handshake_on_connect=False``) and ``do_handshake`` is driven on readiness
  (SSLWantReadError / SSLWantWriteError pick what the selector watches). The connect timeout
  covers TCP and TLS together. A certificate problem (untrusted, self-signed, expired, another
  host's name) fails the attempt like a refused connect, with a KafkaConnectionError naming the
  cause. An SSL socket can hold decrypted bytes the selector cannot see: reads continue while
  ``pending()`` says so, and :meth:`BrokerConnection.buffered` tells the I/O loop to come back
  without sleeping when the per-event read budget ran out first.
* SASL follows the ApiVersions probe (Kafka answers ApiVersions before authentication). The
  exchange itself is the sans-IO :class:`hmbclient.protocol.sasl.SaslClientExchange` (which
  requests, which tokens, which errors); this connection writes what it asks for, feeds it the
  answers and runs the deadline and re-authentication timer:
  SaslHandshake v1 then SaslAuthenticate v0/v1 tokens when the broker lists SaslAuthenticate,
  otherwise SaslHandshake v0 then raw size-prefixed tokens (Kafka 0.10). Nothing of the
  caller's is written before the exchange ends; a failure (wrong password, unknown user:
  SaslAuthenticationFailedError; mechanism not enabled: UnsupportedSaslMechanismError) fails
  the queued requests with that error, which is not retriable, and backs off like a failed
  connect. Errors name the mechanism and the user, never the password.
* Re-authentication (KIP-368): when SaslAuthenticate v1 reports ``session_lifetime_ms`` > 0,
  the connection re-authenticates at 85-95% of it (Kafka's window): from then on no new request
  is written, and once nothing is in flight (an idle moment, so no answer is interleaved with the
  exchange) SaslHandshake + SaslAuthenticate run again and the held requests follow.

Receiving: frames are cut from what each ``recv_into`` returns; a frame larger than that gets a
buffer of its own, sized from its header, and the rest of it is received straight into it, so a
megabyte fetch answer is copied once (into ``bytes`` by the record decoder), not re-buffered.
Correlation ids and decoding stay the sans-IO ClientConnection's (``ClientConnection.take_frame``
in :mod:`hmbclient.protocol.frame`).

HMB quirk (dialect ``fetch_frame_quirk``): its Fetch v0 replies carry size 0 and correlation id
0 in the frame header. :class:`~hmbclient.protocol.frame.HmbClientConnection` recognises that header while a Fetch is the
request in flight, finds the end of the reply by walking the Fetch v0 body's length fields, and
attributes it to that (single) request. HMB answers one Fetch per connection
(``fetch_once_per_connection``): after a Fetch answer the connection is closed quietly and the
next request opens a fresh one (no status events for these deliberate reconnects).
"""

from __future__ import annotations

import errno
import logging
import random
import socket
import ssl
import struct
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from enum import Enum
from typing import Any, Protocol

from hmbclient.errors import (
    ErrorCode,
    HmbError,
    KafkaConnectionError,
    ProtocolError,
    RemoteProtocolError,
    RequestTimedOutError,
    UnsupportedByBroker,
)
from hmbclient.metrics import Sensor
from hmbclient.net.security import Security, describe_tls_error
from hmbclient.net.versions import BrokerVersions, Dialect, api_name, pick_versions
from hmbclient.protocol.api import ApiVersionsRequest
from hmbclient.protocol.api.base import Request
from hmbclient.protocol.frame import NEED_DATA, ClientConnection, HmbClientConnection
from hmbclient.protocol.sasl import SaslClientExchange

__all__ = ["ConnState", "PendingRequest", "BrokerConnection", "ConnectionOwner", "RequestBuilder"]

log = logging.getLogger("hmbclient.net")

#: Builds the request once the connection knows its versions (called in the I/O thread).
RequestBuilder = Callable[[BrokerVersions], Request]

_RECV_BYTES = 256 * 1024  # one recv; larger frames are received into their own buffer
_i32 = struct.Struct(">i")


#: the first version of Produce (0) and Fetch (1) whose throttled answers mean a muted
#: connection (KIP-219); the client then sends nothing more for the throttle time
_KIP219_FROM = {0: 6, 1: 8}


class ConnState(Enum):
    DISCONNECTED = "disconnected"  # no socket; connects when a request waits and backoff allows
    CONNECTING = "connecting"  # TCP connect in progress
    HANDSHAKING = "handshaking"  # TCP connected; the TLS handshake is in progress
    PROBING = "probing"  # connected; the ApiVersions probe is in flight
    AUTHENTICATING = "authenticating"  # the SASL exchange (first or re-authentication) runs
    READY = "ready"  # versions known: requests are written
    CLOSED = "closed"  # for good (client closed, or the broker moved): requests fail at once


_TRANSITIONS: dict[ConnState, frozenset[ConnState]] = {
    ConnState.DISCONNECTED: frozenset({ConnState.CONNECTING, ConnState.CLOSED}),
    ConnState.CONNECTING: frozenset(
        {
            ConnState.HANDSHAKING,
            ConnState.PROBING,
            ConnState.AUTHENTICATING,
            ConnState.READY,
            ConnState.DISCONNECTED,
            ConnState.CLOSED,
        }
    ),
    ConnState.HANDSHAKING: frozenset(
        {ConnState.PROBING, ConnState.AUTHENTICATING, ConnState.READY, ConnState.DISCONNECTED, ConnState.CLOSED}
    ),
    ConnState.PROBING: frozenset({ConnState.AUTHENTICATING, ConnState.READY, ConnState.DISCONNECTED, ConnState.CLOSED}),
    ConnState.AUTHENTICATING: frozenset({ConnState.READY, ConnState.DISCONNECTED, ConnState.CLOSED}),
    ConnState.READY: frozenset({ConnState.AUTHENTICATING, ConnState.DISCONNECTED, ConnState.CLOSED}),
    ConnState.CLOSED: frozenset(),
}


class ConnectionOwner(Protocol):
    """What a connection needs from the selector owner (the NetClient's I/O thread)."""

    def _watch(self, conn: BrokerConnection, sock: socket.socket, write: bool) -> None: ...
    def _unwatch(self, conn: BrokerConnection, sock: socket.socket) -> None: ...
    def _emit(self, kind: str, conn: BrokerConnection, error: BaseException | None) -> None: ...


class PendingRequest:
    """A request waiting to be written or answered. ``request`` may be a builder."""

    __slots__ = ("request", "future", "deadline_ms", "timeout_ms", "expect_response", "api", "on_answer")

    def __init__(
        self,
        request: Request | RequestBuilder,
        future: Future[Any],
        deadline_ms: float,
        timeout_ms: float,
        expect_response: bool = True,
        api_key: int | None = None,
    ) -> None:
        self.request = request
        self.future = future
        self.deadline_ms = deadline_ms
        self.timeout_ms = timeout_ms
        self.expect_response = expect_response
        if isinstance(request, Request):
            api_key = request.API_KEY
        self.api = api_name(api_key) if api_key is not None else "request"
        #: the connection's own requests (SASL) are answered to this, in the I/O thread
        self.on_answer: Callable[[Any, float], None] | None = None


def _fail(fut: Future[Any] | None, err: BaseException) -> None:
    if fut is not None and not fut.done():
        try:
            fut.set_exception(err)
        except Exception:  # a racing cancel(); nothing to deliver
            pass


def _succeed(fut: Future[Any] | None, value: Any) -> None:
    if fut is not None and not fut.done():
        try:
            fut.set_result(value)
        except Exception:
            pass


class BrokerConnection:
    """One broker connection; see the module docstring for the state machine."""

    def __init__(
        self,
        owner: ConnectionOwner,
        node_id: int,
        host: str,
        port: int,
        *,
        dialect: Dialect,
        client_id: str | None,
        max_in_flight: int,
        connect_timeout_ms: float,
        probe_timeout_ms: float,
        reconnect_backoff_ms: float,
        reconnect_backoff_max_ms: float,
        max_frame_bytes: int,
        send_buffer_bytes: int | None = None,
        receive_buffer_bytes: int | None = None,
        security: Security | None = None,
        latency_sensor: Sensor | None = None,
    ) -> None:
        self.owner = owner
        self.latency_sensor = latency_sensor
        self.node_id = node_id
        self.host = host
        self.port = port
        self.dialect = dialect
        self.client_id = client_id
        self.max_in_flight = max(1, dialect.max_in_flight or max_in_flight)
        self.connect_timeout_ms = connect_timeout_ms
        self.probe_timeout_ms = probe_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_frame_bytes = max_frame_bytes
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes

        self.state = ConnState.DISCONNECTED
        self.sock: socket.socket | None = None
        self.versions: BrokerVersions | None = None
        self._proto: ClientConnection | None = None
        self._pending: deque[PendingRequest] = deque()
        self._in_flight: deque[PendingRequest] = deque()
        self._out: deque[memoryview] = deque()
        self._writing = False
        self._connect_deadline = 0.0
        self._probe_deadline = 0.0
        self._backoff_until = 0.0
        self._failures = 0
        self._legacy = False  # the probe failed once: never probe this broker again
        self._probed_ok = False  # this broker answered a probe once: it is not a legacy broker
        self._last_error: HmbError | None = None
        self._recycled = False
        # Receive path: HMB's quirky frames go through ClientConnection's own buffering; every
        # other broker through _ingest_fast.
        self._fast = not dialect.fetch_frame_quirk
        self._scratch = bytearray(_RECV_BYTES)
        self._sview = memoryview(self._scratch)
        self._big: bytearray | None = None
        self._big_have = 0
        self._partial: bytes = b""
        self._version_waiters: list[Future[BrokerVersions]] = []
        # Security: TLS context and SASL credentials (None: plaintext, no authentication).
        self.security = security
        self._tls = security is not None and security.tls
        self._sasl: SaslClientExchange | None = None  # the exchange in progress (sans-IO)
        self._sasl_versions: BrokerVersions | None = None  # versions once authenticated
        self._auth_deadline = 0.0
        self._reauth_at: float | None = None  # KIP-368: re-authenticate from then on
        self._reauthenticating = False
        self._heard = False  # any byte received on this socket (see _silence_hint)
        self._throttled_until = 0.0  # KIP-219: the broker muted this connection until then

    # -- public (I/O thread) ---------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"node {self.node_id} at {self.host}:{self.port}"

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def closed(self) -> bool:
        return self.state is ConnState.CLOSED

    def enqueue(self, req: PendingRequest, now_ms: float) -> None:
        if self.closed:
            _fail(req.future, KafkaConnectionError(f"{self.address}: client closed"))
            return
        self._pending.append(req)
        if self.state is ConnState.READY:
            self._pump(now_ms)
        elif self.state is ConnState.DISCONNECTED and now_ms >= self._backoff_until:
            self._start_connect(now_ms)

    def wait_versions(self, fut: Future[BrokerVersions], now_ms: float) -> None:
        if self.closed:
            _fail(fut, KafkaConnectionError(f"{self.address}: client closed"))
            return
        if self.state is ConnState.READY and self.versions is not None:
            _succeed(fut, self.versions)
            return
        self._version_waiters.append(fut)
        if self.state is ConnState.DISCONNECTED and now_ms >= self._backoff_until:
            self._start_connect(now_ms)

    def next_deadline(self) -> float | None:
        """The earliest time check_timeouts has work to do, or None."""
        d: float | None = None
        if self.state is ConnState.CONNECTING or self.state is ConnState.HANDSHAKING:
            d = self._connect_deadline
        elif self.state is ConnState.PROBING:
            d = self._probe_deadline
        elif self.state is ConnState.AUTHENTICATING:
            d = self._auth_deadline
        elif self.state is ConnState.READY and self._reauth_at is not None and not self._reauthenticating:
            # (Once due, the re-authentication starts when the last answer arrives: no timer.)
            d = self._reauth_at
        elif self.state is ConnState.DISCONNECTED and (self._pending or self._version_waiters):
            d = self._backoff_until
        if self._pending and self._throttled_until and self.state is ConnState.READY:
            d = self._throttled_until if d is None else min(d, self._throttled_until)
        for r in self._in_flight:
            if d is None or r.deadline_ms < d:
                d = r.deadline_ms
        if self._pending:
            # Pending requests are roughly in deadline order; the head is a good bound and
            # check_timeouts scans them all anyway.
            h = self._pending[0].deadline_ms
            if d is None or h < d:
                d = h
        return d

    def check_timeouts(self, now_ms: float) -> None:
        state = self.state
        if state is ConnState.CONNECTING and now_ms >= self._connect_deadline:
            self._connect_failed(
                KafkaConnectionError(f"{self.address}: connect timed out after {self.connect_timeout_ms:.0f} ms"),
                now_ms,
            )
            return
        if state is ConnState.HANDSHAKING and now_ms >= self._connect_deadline:
            self._connect_failed(
                KafkaConnectionError(
                    f"{self.address}: TLS handshake not finished within {self.connect_timeout_ms:.0f} ms "
                    "(is this a TLS listener?)"
                ),
                now_ms,
            )
            return
        if state is ConnState.AUTHENTICATING and now_ms >= self._auth_deadline:
            self._connect_failed(
                KafkaConnectionError(f"{self.address}: SASL {self._sasl.label if self._sasl else ''} got no answer in time"),
                now_ms,
            )
            return
        if state is ConnState.READY and self._reauth_at is not None and now_ms >= self._reauth_at:
            self._reauthenticating = True
            if not self._in_flight:
                self._start_reauth(now_ms)
                return
        if state is ConnState.PROBING and now_ms >= self._probe_deadline:
            if not self._probed_ok:
                log.info(
                    "%s: no answer to the ApiVersions probe; using the legacy (0.8) versions%s", self.address, self._silence_hint()
                )
            self._probe_failed(now_ms)
            return
        if state is ConnState.DISCONNECTED and now_ms >= self._backoff_until and (self._pending or self._version_waiters):
            self._start_connect(now_ms)
        if self._throttled_until and now_ms >= self._throttled_until:
            self._throttled_until = 0.0
            if state is ConnState.READY and self._pending:
                self._pump(now_ms)
        for r in self._in_flight:
            if now_ms >= r.deadline_ms:
                _fail(
                    r.future,
                    RequestTimedOutError(
                        f"{r.api} request to {self.address} got no answer within {r.timeout_ms:.0f} ms{self._silence_hint()}"
                    ),
                )
                self._disconnect(
                    KafkaConnectionError(f"{self.address}: connection closed after a {r.api} request timed out"),
                    now_ms,
                )
                return
        if self._pending:
            keep: deque[PendingRequest] = deque()
            for r in self._pending:
                if now_ms >= r.deadline_ms:
                    err: HmbError
                    if self.state is ConnState.DISCONNECTED and self._last_error is not None:
                        # It never left because the broker cannot be reached: say so.
                        err = KafkaConnectionError(
                            f"{r.api} request to {self.address} was not sent within {r.timeout_ms:.0f} ms: "
                            f"{self._last_error}"
                        )
                    else:
                        err = RequestTimedOutError(
                            f"{r.api} request to {self.address} was not sent within {r.timeout_ms:.0f} ms "
                            f"(connection {self.state.value}){self._silence_hint()}"
                        )
                    _fail(r.future, err)
                elif not r.future.done():
                    keep.append(r)
            self._pending = keep

    def on_event(self, readable: bool, writable: bool, now_ms: float) -> None:
        if self.state is ConnState.CONNECTING:
            if writable or readable:
                self._finish_connect(now_ms)
            return
        if self.state is ConnState.HANDSHAKING:
            self._do_handshake(now_ms)
            return
        if writable:
            self._flush(now_ms)
        if readable and self.sock is not None:
            if self._sasl is not None and self._sasl.raw:
                self._read_raw_tokens(now_ms)
            else:
                self._read(now_ms)

    def _silence_hint(self) -> str:
        # A TLS listener (Python's ssl among them) may wait silently for a TLS record that a
        # plaintext request never completes: say so when nothing at all came back.
        if self._tls or self._heard or self.state not in (ConnState.PROBING, ConnState.READY):
            return ""
        hint = (
            "; nothing at all came back on this connection: if this is a TLS listener, set "
            "security.protocol to SSL or SASL_SSL"
        )
        if not self.dialect.probe and self.dialect.name in ("0.8", "0.10"):
            # Kafka 4 closes the connection on request versions it removed (KIP-896: all
            # before Kafka 2.1), which is all a pinned 0.8/0.10 dialect speaks.
            hint += (
                f"; or the broker no longer serves the request versions of api_version="
                f"{self.dialect.name!r} (Kafka 4 removed those older than 2.1): use "
                "api_version='auto' or '2.1'"
            )
        return hint

    def buffered(self) -> bool:
        """True when the TLS layer holds decrypted bytes not yet read (the selector cannot
        report them; the I/O loop calls ``on_event`` again instead of sleeping)."""
        sock = self.sock
        return isinstance(sock, ssl.SSLSocket) and self.state is not ConnState.HANDSHAKING and sock.pending() > 0

    def close(self, err: HmbError | None = None) -> None:
        """Close for good: every queued and in-flight request fails (no status event)."""
        e = err or KafkaConnectionError(f"{self.address}: client closed")
        if self.sock is not None:
            log.info("%s disconnected: %s", self.address, e)
        self._enter(ConnState.CLOSED)
        self._teardown(e)
        for r in self._pending:
            _fail(r.future, e)
        self._pending.clear()
        for w in self._version_waiters:
            _fail(w, e)
        self._version_waiters.clear()

    # -- connecting ------------------------------------------------------------------------

    def _start_connect(self, now_ms: float) -> None:
        try:
            infos = socket.getaddrinfo(self.host, self.port, 0, socket.SOCK_STREAM)
        except OSError as e:
            self._connect_failed(KafkaConnectionError(f"{self.address}: cannot resolve host: {e}"), now_ms)
            return
        family, stype, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, stype, proto)
        sock.setblocking(False)
        if self.send_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
        if self.receive_buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        rc = sock.connect_ex(sockaddr)
        if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            sock.close()
            self._connect_failed(
                KafkaConnectionError(f"{self.address}: cannot connect: {errno.errorcode.get(rc, rc)} {rc}"), now_ms
            )
            return
        self.sock = sock
        self._enter(ConnState.CONNECTING)
        self._connect_deadline = now_ms + self.connect_timeout_ms
        self.owner._watch(self, sock, True)

    def _finish_connect(self, now_ms: float) -> None:
        assert self.sock is not None
        rc = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if rc != 0:
            self._connect_failed(
                KafkaConnectionError(f"{self.address}: cannot connect: {errno.errorcode.get(rc, rc)} ({rc})"), now_ms
            )
            return
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        proto_cls = HmbClientConnection if self.dialect.fetch_frame_quirk else ClientConnection
        self._proto = proto_cls(self.client_id, self.max_frame_bytes)
        self._big = None
        self._partial = b""
        if self._tls:
            self._start_tls(now_ms)
            return
        self._after_transport(now_ms)

    # -- TLS -------------------------------------------------------------------------------

    def _start_tls(self, now_ms: float) -> None:
        sock = self.sock
        assert sock is not None and self.security is not None and self.security.ssl_context is not None
        self.owner._unwatch(self, sock)
        self._writing = False
        try:
            ssock = self.security.ssl_context.wrap_socket(
                sock, server_hostname=self.host, do_handshake_on_connect=False
            )
        except (OSError, ValueError) as e:
            sock.close()
            self.sock = None
            self._connect_failed(KafkaConnectionError(f"{self.address}: {describe_tls_error(e, self.host)}"), now_ms)
            return
        self.sock = ssock
        self._enter(ConnState.HANDSHAKING)
        self.owner._watch(self, ssock, False)
        self._do_handshake(now_ms)

    def _do_handshake(self, now_ms: float) -> None:
        sock = self.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._want_write(False)
            return
        except ssl.SSLWantWriteError:
            self._want_write(True)
            return
        except ssl.SSLError as e:
            self._connect_failed(KafkaConnectionError(f"{self.address}: {describe_tls_error(e, self.host)}"), now_ms)
            return
        except OSError as e:
            self._connect_failed(
                KafkaConnectionError(f"{self.address}: TLS handshake failed: {e} (is this a TLS listener?)"), now_ms
            )
            return
        self._want_write(False)
        log.debug("%s: TLS %s established", self.address, sock.version())
        self._after_transport(now_ms)

    def _want_write(self, write: bool) -> None:
        if self.sock is not None and write != self._writing:
            self._writing = write
            self.owner._watch(self, self.sock, write)

    # -- after the transport is up -----------------------------------------------------------

    def _after_transport(self, now_ms: float) -> None:
        assert self.sock is not None and self._proto is not None
        self.owner._watch(self, self.sock, False)
        self._writing = False
        if self.dialect.probe and not self._legacy:
            self._enter(ConnState.PROBING)
            self._probe_deadline = now_ms + self.probe_timeout_ms
            _, data = self._proto.send_request(ApiVersionsRequest[0]())
            probe = PendingRequest(ApiVersionsRequest[0](), Future(), self._probe_deadline + 1e12, self.probe_timeout_ms)
            self._in_flight.append(probe)
            self._write(data, now_ms)
            return
        versions = self.dialect.fallback_versions() if self.dialect.probe else self.dialect.initial_versions()
        assert versions is not None
        self._negotiated(versions, now_ms)

    def _negotiated(self, versions: BrokerVersions, now_ms: float) -> None:
        """Versions are known: authenticate first if SASL is configured, else READY."""
        if self.security is not None and self.security.sasl:
            self._start_sasl(versions, now_ms)
        else:
            self._ready(versions, now_ms)

    def _ready(self, versions: BrokerVersions, now_ms: float) -> None:
        self.versions = versions
        self._failures = 0
        self._last_error = None
        self._enter(ConnState.READY)
        log.debug("%s ready: %r", self.address, versions)
        if self._recycled:
            self._recycled = False  # a deliberate reconnect is not news to listeners
        else:
            self.owner._emit("broker_connected", self, None)
        waiters, self._version_waiters = self._version_waiters, []
        for w in waiters:
            _succeed(w, versions)
        self._pump(now_ms)

    def _on_probe_answer(self, resp: Any, now_ms: float) -> None:
        # UNSUPPORTED_VERSION still carries the broker's ranges (KIP-511).
        if resp.error_code not in (ErrorCode.NONE, ErrorCode.UNSUPPORTED_VERSION):
            log.warning("%s: ApiVersions error %s; using the legacy versions", self.address, resp.error_code)
            self._negotiated(self.dialect.fallback_versions(), now_ms)
            return
        self._probed_ok = True
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        picked = pick_versions((k, lo, hi) for k, (lo, hi) in ranges.items())
        self._negotiated(BrokerVersions(self.dialect, picked, probed=True, ranges=ranges), now_ms)

    # -- SASL (the exchange itself is protocol.sasl.SaslClientExchange; here: I/O and timers) --

    def _start_sasl(self, versions: BrokerVersions, now_ms: float) -> None:
        assert self.security is not None
        self._sasl_versions = versions
        self._sasl = SaslClientExchange.negotiate(
            self.security.mechanism(), versions.ranges, peer=self.address, max_token_bytes=self.max_frame_bytes
        )
        self._reauth_at = None
        self._enter(ConnState.AUTHENTICATING)
        self._auth_deadline = now_ms + max(self.connect_timeout_ms, self.probe_timeout_ms)
        self._send_internal(self._sasl.start(), now_ms)

    def _start_reauth(self, now_ms: float) -> None:
        assert self.versions is not None
        log.debug("%s: session lifetime ends soon; re-authenticating", self.address)
        self._start_sasl(self.versions, now_ms)

    def _send_internal(self, request: Request, now_ms: float) -> None:
        assert self._proto is not None
        _, data = self._proto.send_request(request)
        req = PendingRequest(request, Future(), self._auth_deadline + 1e12, 0.0)
        req.on_answer = self._on_sasl_answer
        self._in_flight.append(req)
        self._write(data, now_ms)

    def _sasl_failed(self, err: HmbError, now_ms: float) -> None:
        log.warning("%s: %s", self.address, err)
        self._connect_failed(err, now_ms)

    def _sasl_next(self, out: Request | bytes | None, now_ms: float) -> None:
        """Send what the exchange asks for next, or finish when it is done."""
        if isinstance(out, Request):
            self._send_internal(out, now_ms)
        elif out:
            self._write(out, now_ms)
        elif self._sasl is not None and self._sasl.done:
            self._sasl_done(self._sasl.session_lifetime_ms, now_ms)

    def _on_sasl_answer(self, resp: Any, now_ms: float) -> None:
        exchange = self._sasl
        assert exchange is not None
        try:
            out = exchange.receive(resp)
        except HmbError as e:
            self._sasl_failed(e, now_ms)
            return
        self._sasl_next(out, now_ms)

    def _sasl_done(self, lifetime_ms: int, now_ms: float) -> None:
        assert self._sasl is not None
        log.debug("%s: %s succeeded", self.address, self._sasl.label)
        self._sasl = None
        if lifetime_ms and lifetime_ms > 0:
            # Kafka's client re-authenticates at 85-95% of the lifetime (spread, so many
            # connections do not all re-authenticate at once).
            self._reauth_at = now_ms + lifetime_ms * (0.85 + 0.10 * random.random())
        versions = self._sasl_versions
        assert versions is not None
        if self._reauthenticating:
            self._reauthenticating = False
            self._enter(ConnState.READY)
            self._pump(now_ms)
        else:
            self._ready(versions, now_ms)

    def _read_raw_tokens(self, now_ms: float) -> None:
        """SaslHandshake v0: the broker's SASL tokens arrive as bare size-prefixed frames."""
        sock = self.sock
        exchange = self._sasl
        assert sock is not None and exchange is not None
        for _ in range(16):
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as e:
                self._disconnect(KafkaConnectionError(f"{self.address}: receive failed: {e}"), now_ms)
                return
            if not data:
                self._closed_by_peer(now_ms)
                return
            self._heard = True
            try:
                out = exchange.receive_data(data)
            except ProtocolError as e:
                self._disconnect(RemoteProtocolError(str(e)), now_ms)
                return
            except HmbError as e:
                self._sasl_failed(e, now_ms)
                return
            self._sasl_next(out, now_ms)
            if self.sock is None or not exchange.raw:
                return
            if not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                break

    def _probe_failed(self, now_ms: float) -> None:
        if self._probed_ok:
            # It answered ApiVersions before: a network fault, not a 0.8 broker.
            self._connect_failed(KafkaConnectionError(
                f"{self.address}: the ApiVersions probe got no answer (this broker answered one before: "
                "a network fault, not a legacy broker; retrying)"), now_ms)
            return
        self._legacy = True
        self._teardown(KafkaConnectionError(f"{self.address}: ApiVersions probe unanswered"))
        self._backoff_until = now_ms
        self._start_connect(now_ms)

    def _connect_failed(self, err: HmbError, now_ms: float) -> None:
        self._last_error = err
        self._teardown(err)
        self._failures += 1
        backoff = min(self.reconnect_backoff_max_ms, self.reconnect_backoff_ms * (2 ** (self._failures - 1)))
        self._backoff_until = now_ms + backoff
        log.info("%s unavailable (%s); next attempt in %.0f ms", self.address, err, backoff)
        pending, self._pending = self._pending, deque()
        for r in pending:
            _fail(r.future, err)
        waiters, self._version_waiters = self._version_waiters, []
        for w in waiters:
            _fail(w, err)
        self.owner._emit("broker_unavailable", self, err)

    # -- I/O -------------------------------------------------------------------------------

    def _pump(self, now_ms: float) -> None:
        proto = self._proto
        versions = self.versions
        if proto is None or versions is None or self.state is not ConnState.READY or self._reauthenticating:
            return
        if self._throttled_until and now_ms < self._throttled_until:
            return  # KIP-219: muted by the broker's quota; check_timeouts pumps again
        pending = self._pending
        in_flight = self._in_flight
        wrote = False
        while pending and len(in_flight) < self.max_in_flight:
            r = pending.popleft()
            if r.future.done():  # cancelled or failed meanwhile
                continue
            if not r.future.set_running_or_notify_cancel():
                continue
            request = r.request
            try:
                if not isinstance(request, Request):
                    request = request(versions)
                    r.api = api_name(request.API_KEY)
                    r.request = request
                want = versions.version(request.API_KEY)
                if request.API_VERSION != want and not versions.supports(request.API_KEY, request.API_VERSION):
                    raise UnsupportedByBroker(
                        f"{self.address} speaks {r.api} up to v{want}, not v{request.API_VERSION} "
                        f"(api_version={self.dialect.name!r}); nothing was sent"
                    )
                expect = r.expect_response or (
                    request.API_KEY == 0 and self.dialect.acks0_replies
                )
                _, data = proto.send_request(request, expect_response=expect)
            except BaseException as e:
                _fail(r.future, e)
                continue
            if expect:
                # (HMB answers Produce even with acks=0: the answer completes the future.)
                in_flight.append(r)
            else:
                _succeed(r.future, None)
            self._out.append(memoryview(data))
            wrote = True
        if wrote:
            self._flush(now_ms)

    def _write(self, data: bytes, now_ms: float) -> None:
        self._out.append(memoryview(data))
        self._flush(now_ms)

    def _flush(self, now_ms: float) -> None:
        sock = self.sock
        out = self._out
        if sock is None:
            return
        tls = self._tls
        while out:
            try:
                if len(out) > 1 and not tls:  # SSLSocket has no sendmsg
                    n = sock.sendmsg(list(out)[:64])
                else:
                    n = sock.send(out[0])
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                break
            except OSError as e:
                self._disconnect(KafkaConnectionError(f"{self.address}: send failed: {e}"), now_ms)
                return
            while n:
                head = out[0]
                if n >= len(head):
                    n -= len(head)
                    out.popleft()
                else:
                    out[0] = head[n:]
                    n = 0
        want_write = bool(out)
        if want_write != self._writing:
            self._writing = want_write
            self.owner._watch(self, sock, want_write)

    def _closed_by_peer(self, now_ms: float) -> None:
        if self.state is ConnState.AUTHENTICATING and self._sasl is not None:
            # Kafka closes the connection after a failed exchange (with raw v0 tokens that is
            # the only answer a wrong password gets).
            self._sasl_failed(self._sasl.connection_closed(), now_ms)
            return
        if self.state is ConnState.PROBING:
            if not self._probed_ok:
                log.info("%s closed the connection on the ApiVersions probe; using legacy versions", self.address)
            self._probe_failed(now_ms)
            return
        self._disconnect(KafkaConnectionError(f"{self.address}: connection closed by the broker"), now_ms)

    def _ingest_fast(self, now_ms: float) -> list[bytes | bytearray] | None:
        """Read what the socket has into whole frames (None: the connection is gone).

        Copy budget: a frame that fits in what one recv returned is copied out once; a larger
        one gets its own buffer, sized from its header, and the rest of it is received
        straight into that buffer (no re-buffering of megabyte fetch answers).
        """
        sock = self.sock
        assert sock is not None
        frames: list[bytes | bytearray] = []
        scratch = self._scratch
        sview = self._sview
        max_frame = self.max_frame_bytes
        for _ in range(16):  # bounded, so one busy connection cannot starve the others
            big = self._big
            try:
                if big is not None:
                    n = sock.recv_into(memoryview(big)[self._big_have :])
                else:
                    n = sock.recv_into(sview)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as e:
                self._disconnect(KafkaConnectionError(f"{self.address}: receive failed: {e}"), now_ms)
                return None
            if not n:
                self._closed_by_peer(now_ms)
                return None
            self._heard = True
            if big is not None:
                self._big_have += n
                if self._big_have == len(big):
                    frames.append(big)
                    self._big = None
                continue
            data: Any = sview[:n]
            if self._partial:
                data = self._partial + bytes(data)
                self._partial = b""
            pos = 0
            end = len(data)
            while end - pos >= 4:
                (size,) = _i32.unpack_from(data, pos)
                if size < 4 or size > max_frame:
                    self._disconnect(RemoteProtocolError(self._bad_frame_message(size, data[pos], data[pos + 1])), now_ms)
                    return None
                if end - pos - 4 >= size:
                    frames.append(bytes(data[pos + 4 : pos + 4 + size]))
                    pos += 4 + size
                else:
                    frame = bytearray(size)
                    have = end - pos - 4
                    frame[:have] = data[pos + 4 : end]
                    self._big = frame
                    self._big_have = have
                    pos = end
            if pos < end:
                self._partial = bytes(data[pos:end])
            if n < len(scratch) and self._big is None and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                break
        return frames

    def _bad_frame_message(self, size: int, b0: int, b1: int) -> str:
        max_frame = self.max_frame_bytes
        if not self._tls and b0 in (0x15, 0x16) and b1 == 0x03:
            # A TLS record header (alert or handshake, version 3.x) where a size was expected.
            return (
                f"{self.address} answered with TLS: this is a TLS listener; "
                "set security.protocol to SSL or SASL_SSL"
            )
        return f"{self.address}: frame size {size} is outside 4..{max_frame}"

    def _read(self, now_ms: float) -> None:
        sock = self.sock
        proto = self._proto
        assert sock is not None and proto is not None
        in_flight = self._in_flight
        responses: list[Any] = []
        try:
            if self._fast:
                frames = self._ingest_fast(now_ms)
                if frames is None:
                    return
                take = proto.take_frame
                for frame in frames:
                    responses.append(take(frame))
            else:
                for _ in range(8):
                    try:
                        data = sock.recv(_RECV_BYTES)
                    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        break
                    except OSError as e:
                        self._disconnect(KafkaConnectionError(f"{self.address}: receive failed: {e}"), now_ms)
                        return
                    if not data:
                        self._closed_by_peer(now_ms)
                        return
                    self._heard = True
                    proto.receive_data(data)
                    if len(data) < _RECV_BYTES and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                        break
                while True:
                    r = proto.next_response()
                    if r is NEED_DATA:
                        break
                    responses.append(r)
        except ProtocolError as e:
            head = in_flight[0].api if in_flight else "unsolicited"
            self._disconnect(RemoteProtocolError(f"{self.address}: malformed {head} response: {e}"), now_ms)
            return
        recycle = False
        for r in responses:
            req = in_flight.popleft()
            if req.on_answer is not None:
                req.on_answer(r[1], now_ms)
                if self.sock is None:  # the exchange failed: the connection is gone
                    return
                continue
            if self.state is ConnState.PROBING:
                self._on_probe_answer(r[1], now_ms)
                continue
            if self.dialect.fetch_once_per_connection and getattr(r[1], "API_KEY", -1) == 1:
                recycle = True
            if self.latency_sensor is not None:
                self.latency_sensor.record(now_ms - (req.deadline_ms - req.timeout_ms), int(now_ms))
            resp = r[1]
            throttle = getattr(resp, "throttle_time_ms", 0)
            if throttle and throttle > 0 and resp.API_VERSION >= _KIP219_FROM.get(resp.API_KEY, 1 << 30):
                self._throttled_until = max(self._throttled_until, now_ms + throttle)
            _succeed(req.future, resp)
        if recycle and not in_flight:
            # HMB answers one Fetch per connection: start the next request on a fresh one.
            self._recycle(now_ms)
            return
        if self._reauthenticating and not in_flight and self.state is ConnState.READY:
            self._start_reauth(now_ms)
            return
        if responses and self.state is ConnState.READY:
            self._pump(now_ms)

    def _enter(self, state: ConnState) -> None:
        """The one place the state changes. An illegal move is a bug: it fails loudly (the I/O
        thread then closes every connection)."""
        if state is self.state:
            return
        if state not in _TRANSITIONS[self.state]:
            raise AssertionError(f"{self.address}: connection state {self.state.value} -> {state.value}")
        self.state = state

    def _close_socket(self) -> None:
        """Forget the socket and its protocol state; the connection becomes DISCONNECTED (or
        stays CLOSED)."""
        sock = self.sock
        if sock is not None:
            self.owner._unwatch(self, sock)
            try:
                sock.close()
            except OSError:
                pass
        self.sock = None
        self._proto = None
        self._out.clear()
        self._writing = False
        self.versions = None
        self._sasl = None
        self._reauth_at = None
        self._reauthenticating = False
        self._heard = False
        if self.state is not ConnState.CLOSED:
            self._enter(ConnState.DISCONNECTED)

    def _teardown(self, err: HmbError) -> None:
        """Close the socket and fail what was in flight; queued requests stay queued."""
        was = self.state
        was_ready = was is ConnState.READY or (was is ConnState.AUTHENTICATING and self._reauthenticating)
        self._close_socket()
        in_flight, self._in_flight = self._in_flight, deque()
        for r in in_flight:
            _fail(r.future, err)
        if was_ready:
            self.owner._emit("broker_disconnected", self, err)

    def _recycle(self, now_ms: float) -> None:
        """Close deliberately (nothing in flight): no status event, no backoff."""
        self._close_socket()
        self._backoff_until = now_ms
        self._recycled = True
        if self._pending or self._version_waiters:
            self._start_connect(now_ms)

    def _disconnect(self, err: HmbError, now_ms: float) -> None:
        if self.sock is None:  # already DISCONNECTED (or CLOSED)
            return
        heard = self._heard
        hint = self._silence_hint()
        if hint and isinstance(err, KafkaConnectionError):
            err = KafkaConnectionError(f"{err}{hint}")
        log.info("%s disconnected: %s", self.address, err)
        self._teardown(err)
        if heard:
            # The next attempt is immediate after a good connection...
            self._backoff_until = now_ms
        else:
            # ...but a connection that never received a byte is a failed attempt: back off, so
            # a listener that drops every request (TLS on the other end) is not hammered.
            self._last_error = err
            self._failures += 1
            self._backoff_until = now_ms + min(
                self.reconnect_backoff_max_ms, self.reconnect_backoff_ms * (2 ** (self._failures - 1))
            )
        if (self._pending or self._version_waiters) and now_ms >= self._backoff_until:
            self._start_connect(now_ms)

