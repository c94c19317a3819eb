"""SocketServer: the broker's network layer (Kafka's acceptor + processors + request handlers).

Threads: one acceptor (accepts, hands each connection to a processor round-robin), N processors
(each a selectors loop owning its connections: reads frames through the sans-IO
``ServerConnection``, writes responses, reaps idle connections) and M request handlers (call
``KafkaApis.handle``). A connection's requests are handled one after the other, in arrival order
(appends from one producer stay in order), but a parked request (a Fetch waiting in purgatory)
does not stop the next one from being handled. A request of a connection with nothing queued is
handled on its processor thread at once (every API, Produce included); the handler threads
serve a connection only while requests of it are queued (``_HandlerPool.submit``), in order.

Response ordering: every request gets a slot in its connection's FIFO when it is parsed; the
answer, produced on any thread (handler, purgatory reaper, another connection's append), fills
the slot and pokes the owning processor; the processor writes the filled slots from the head
and stops at the first empty one. Kafka clients match responses by order, so this is the
per-connection guarantee they need.

Quota throttling (KIP-219; decisions in ``quotas.py``): a handler calls the channel's
``throttle(ms, mute)`` before its ``send``. ``mute`` (Produce v6+/Fetch v8+): the answer goes at
once and the connection reads no further request for ``ms`` (its fd leaves the selector; a
processor timer brings it back). Otherwise (older versions) the answer itself is held ``ms``
(the slot counts as not done until then, so later answers wait behind it: order is kept).

Zero copy: a Fetch response is encoded into parts; a ``FileSlice`` part (bytes of a segment
file) is written with ``os.sendfile``, the rest with ``sendmsg``.

Bad input: a frame whose size is out of range, a malformed request, or an unknown API key closes
that connection (logged) and nothing else; an ApiVersions request of an unknown version gets the
KIP-511 answer instead.

Listeners and security: the server binds one socket per listener (``PLAINTEXT``, ``SSL``,
``SASL_PLAINTEXT``, ``SASL_SSL``). On an SSL listener the TLS handshake runs in the processor,
non-blocking; a failed handshake (plaintext bytes, an untrusted client certificate with
``ssl.client.auth=required``) closes that connection only. On a SASL listener a per-connection
state machine (the sans-IO :class:`hmbclient.protocol.sasl.SaslServerExchange`, which this
processor drives and whose decisions it carries out) runs BEFORE anything reaches ``KafkaApis``: only ApiVersions and
SaslHandshake are accepted first, then SaslAuthenticate (or, after a v0 handshake, raw
size-prefixed tokens) until the mechanism completes; anything else, a wrong password, an
unknown user or a frame over ``SASL_MAX_RECEIVE`` bytes before authentication closes the
connection after its answer (SaslAuthenticate before SaslHandshake: ILLEGAL_SASL_STATE). No
request of an unauthenticated client is ever handed to the APIs. Each connection then has a
``Session`` (principal, client host, listener) that every request carries to ``KafkaApis``
(``channel.session``) for the authorizer. Passwords, tokens and keys are never logged.
TLS connections write with ``send`` (no ``sendmsg``/``sendfile``: the bytes must be encrypted),
reading file slices with ``pread``.
"""

from __future__ import annotations

import heapq
import logging
import os
import queue
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import deque
from typing import Any

from hmbclient.broker.apis import KafkaApis, unsupported_api_versions_response
from hmbclient.broker.listener import Listener
from hmbclient.broker.log.segment import FileSlice
from hmbclient.broker.metrics import BrokerMetrics
from hmbclient.broker.security import ANONYMOUS, Session
from hmbclient.broker.security.sasl import new_sasl_server
from hmbclient.clock import monotonic_ms
from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import Response
from hmbclient.protocol.frame import NEED_DATA, RequestEvent, ServerConnection, UnsupportedRequest
from hmbclient.protocol.sasl import SaslServerExchange, ServerStep

__all__ = ["Listener", "SocketServer", "SASL_MAX_RECEIVE"]

log = logging.getLogger("hmbclient.broker.server")

_RECV_BYTES = 256 * 1024
_IOV_MAX = 64
# Stop reading from a connection while this many of its requests wait for a handler or its
# responses wait for the socket: the client is faster than we are, let TCP push back.
_MAX_QUEUED_REQUESTS = 16
_MAX_UNSENT_SLOTS = 512
_REAP_EVERY_S = 1.0
#: Largest frame a client may send before it is authenticated (Kafka's
#: sasl.server.max.receive.size): an unauthenticated peer must not make us buffer 100 MB.
SASL_MAX_RECEIVE = 512 * 1024
_TLS_WRITE_CHUNK = 256 * 1024
_size = struct.Struct(">i")


def _cert_principal(cert: dict[str, Any] | None) -> str:
    """Kafka's default SSL principal: ``User:`` + the subject DN, most specific first."""
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    rdns = [",".join(f"{k}={v}" for k, v in rdn) for rdn in reversed(cert["subject"])]
    names = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC"}
    for long, short in names.items():
        rdns = [r.replace(f"{long}=", f"{short}=") for r in rdns]
    return "User:" + ",".join(rdns)


class _Slot:
    """One request's place in its connection's response order (a RequestChannel)."""

    __slots__ = ("conn", "cid", "parts", "done", "close_reason", "metrics", "t0", "hold_until")

    @property
    def session(self) -> Session | None:
        """Who sent the request (the authorizer's input)."""
        return self.conn.session

    def __init__(self, conn: _Connection, cid: int) -> None:
        self.conn = conn
        self.cid = cid
        self.parts: list[Any] | None = None
        self.done = False
        self.close_reason: str | None = None
        #: the broker's sensors when it keeps metrics, and when the request was decoded
        self.metrics: BrokerMetrics | None = None
        self.t0 = 0
        #: a throttled answer of an old version is held until then (time.monotonic())
        self.hold_until = 0.0

    def throttle(self, ms: int, mute: bool) -> None:
        """A client quota throttles this request ``ms``: mute the connection (KIP-219) or hold
        this answer (older versions). Called before ``send``."""
        until = time.monotonic() + ms / 1000.0
        if mute:
            conn = self.conn
            conn.muted_until = max(conn.muted_until, until)
        else:
            self.hold_until = until

    def send(self, response: Response | None) -> None:
        if self.metrics is not None:
            self.metrics.answered(monotonic_ms() - self.t0)
        if response is not None:
            self.parts = _coalesce(ServerConnection.encode_response(self.cid, response))
        self.done = True
        self.conn.processor.notify(self.conn)

    def close(self, reason: str) -> None:
        self.close_reason = reason
        self.done = True
        self.conn.processor.notify(self.conn)


def _coalesce(parts: list[Any]) -> list[Any]:
    """Join runs of small byte parts so a response is a few large writes, FileSlices apart."""
    out: list[Any] = []
    run: list[Any] = []
    for p in parts:
        if isinstance(p, FileSlice):
            if run:
                out.append(b"".join(run))
                run = []
            out.append(p)
        elif p:
            run.append(p)
    if run:
        out.append(b"".join(run) if len(run) > 1 else bytes(run[0]))
    return out


class _Connection:
    __slots__ = (
        "sock", "fd", "peer", "processor", "proto", "slots", "out", "out_off", "requests", "busy",
        "lock", "closed", "last_active", "events", "closing", "listener", "handshaking", "want_write",
        "sasl", "session", "tls", "muted_until",
    )

    def __init__(self, sock: socket.socket, processor: _Processor, max_frame_bytes: int, listener: Listener | None = None) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        try:
            host, port = sock.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except OSError:
            self.peer = "?"
        self.processor = processor
        self.proto = ServerConnection(max_frame_bytes)
        self.slots: deque[_Slot] = deque()
        self.out: deque[Any] = deque()
        self.out_off = 0
        self.requests: deque[tuple[_Slot, RequestEvent]] = deque()
        self.busy = False
        self.lock = threading.Lock()
        self.closed = False
        self.closing = False
        self.last_active = time.monotonic()
        self.events = 0
        self.listener = listener = listener or Listener()
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.handshaking = self.tls
        self.want_write = False
        #: KIP-219: no request is read before this (time.monotonic())
        self.muted_until = 0.0
        self.sasl: SaslServerExchange | None = None
        self.session: Session | None = self.make_session(ANONYMOUS)
        if listener.sasl:
            credentials = listener.credentials
            self.sasl = SaslServerExchange(
                listener.mechanisms,
                (lambda mech: new_sasl_server(mech, credentials)) if credentials is not None else None,
                reauth_ms=listener.reauth_ms,
            )
            self.session = None  # nobody until authenticated
            self.proto.max_frame_bytes = min(max_frame_bytes, SASL_MAX_RECEIVE)
        if self.tls:
            self.session = None  # known after the handshake (client certificate)


    def make_session(self, principal: str) -> Session:
        listener = self.listener
        advertised = None
        if listener is not self.processor.server.listeners[0]:
            host = listener.host
            if host in ("0.0.0.0", "::", ""):
                try:
                    host = self.sock.getsockname()[0]
                except OSError:
                    host = "127.0.0.1"
            advertised = (host, listener.port)
        return Session(principal, self.peer.rpartition(":")[0], listener.name, advertised)


class _HandlerPool:
    """Request handler threads; a connection is handed to one handler at a time."""

    def __init__(self, apis: KafkaApis, n: int, name: str) -> None:
        self.apis = apis
        self._q: queue.SimpleQueue[_Connection | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"{name}-handler-{i}", daemon=True) for i in range(n)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def submit(self, conn: _Connection, slot: _Slot, event: RequestEvent) -> None:
        with conn.lock:
            conn.requests.append((slot, event))
            if conn.busy:
                return
            conn.busy = True
        self._q.put(conn)

    def _run(self) -> None:
        apis = self.apis
        while True:
            conn = self._q.get()
            if conn is None:
                return
            while True:
                with conn.lock:
                    if not conn.requests or conn.closed:
                        conn.requests.clear()
                        conn.busy = False
                        break
                    slot, ev = conn.requests.popleft()
                    left = len(conn.requests)
                if slot.metrics is not None:
                    slot.metrics.request(ev.header.api_key, monotonic_ms() - slot.t0)
                apis.handle(ev.header, ev.request, slot)
                if left + 1 == _MAX_QUEUED_REQUESTS:
                    conn.processor.notify(conn)  # it may have stopped reading: resume

    def stop(self) -> None:
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join(timeout=5)


class _Processor(threading.Thread):
    def __init__(self, server: SocketServer, index: int) -> None:
        super().__init__(name=f"{server.name}-processor-{index}", daemon=True)
        self.server = server
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: deque[tuple[socket.socket, Listener | None]] = deque()
        self._ready: deque[_Connection] = deque()
        self._wake_pending = False
        self._wake_closed = False
        self._wake_lock = threading.Lock()
        self.conns: set[_Connection] = set()
        self.running = True
        #: (when, seq, conn): a muted connection to read again, a held answer to send
        self._timers: list[tuple[float, int, _Connection]] = []
        self._timer_seq = 0
        self._timer_at: dict[_Connection, float] = {}

    def _at(self, when: float, conn: _Connection) -> None:
        """Flush ``conn`` again at ``when`` (processor thread only)."""
        if self._timer_at.get(conn) == when:
            return
        self._timer_at[conn] = when
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, conn))

    # -- called from other threads ------------------------------------------------------------
    def wake(self) -> None:
        with self._wake_lock:
            # After the loop ended its pipe is closed and the fd number may belong to another
            # file by now (a segment!): a late wake from a handler must not write anywhere.
            if self._wake_pending or self._wake_closed:
                return
            self._wake_pending = True
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def add(self, sock: socket.socket, listener: Listener | None = None) -> None:
        self._new.append((sock, listener))
        self.wake()

    def notify(self, conn: _Connection) -> None:
        self._ready.append(conn)
        # On our own thread the loop drains _ready before it selects again: no wake-up needed.
        if threading.get_ident() != self.ident:
            self.wake()

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> None:
        last_reap = time.monotonic()
        try:
            while self.running:
                timeout = _REAP_EVERY_S
                if self._timers:
                    timeout = min(timeout, max(self._timers[0][0] - time.monotonic(), 0.0))
                for key, mask in self.sel.select(timeout=timeout):
                    conn = key.data
                    if conn is None:
                        self._drain_wake()
                        continue
                    try:
                        if mask & selectors.EVENT_READ and not conn.closed:
                            self._on_readable(conn)
                        if mask & selectors.EVENT_WRITE and not conn.closed:
                            if conn.handshaking:
                                self._handshake(conn)
                            else:
                                self._write(conn)
                            self._update_interest(conn)
                    except Exception:
                        # A bug must cost one connection, never the processor thread (which
                        # would silently stop serving all of its connections).
                        log.exception("%s: unexpected error, closing the connection", conn.peer)
                        self._close(conn, None)
                while self._new:
                    self._register(*self._new.popleft())
                if self._timers:
                    due = time.monotonic()
                    while self._timers and self._timers[0][0] <= due:
                        when, _, tconn = heapq.heappop(self._timers)
                        if self._timer_at.get(tconn) == when:
                            del self._timer_at[tconn]
                        self._ready.append(tconn)
                while self._ready:
                    conn = self._ready.popleft()
                    if not conn.closed:
                        try:
                            self._flush_slots(conn)
                        except Exception:
                            log.exception("%s: unexpected error, closing the connection", conn.peer)
                            self._close(conn, None)
                now = time.monotonic()
                if now - last_reap >= _REAP_EVERY_S:
                    last_reap = now
                    self._reap(now)
        finally:
            for conn in list(self.conns):
                self._close(conn, None)
            self.sel.close()
            with self._wake_lock:
                self._wake_closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _drain_wake(self) -> None:
        # Read first, then clear the flag: cleared first, a wake() between the two would have
        # its byte swallowed while the flag stays set, and every later wake() would be skipped.
        # A wake() that finds the flag still set here is fine: its connection is already in
        # _ready, which the loop drains after this.
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._wake_lock:
            self._wake_pending = False

    def _register(self, sock: socket.socket, listener: Listener | None = None) -> None:
        conn = _Connection(sock, self, self.server.max_frame_bytes, listener)
        self.conns.add(conn)
        conn.events = selectors.EVENT_READ
        self.sel.register(sock, selectors.EVENT_READ, conn)

    def _reap(self, now: float) -> None:
        idle = self.server.max_idle_s
        if idle is None:
            return
        for conn in list(self.conns):
            if not conn.slots and not conn.out and now - conn.last_active > idle:
                self._close(conn, "idle for more than connections.max.idle.ms")

    def _close(self, conn: _Connection, reason: str | None) -> None:
        if conn.closed:
            return
        with conn.lock:
            conn.closed = True
            conn.requests.clear()
        if reason:
            log.info("closing connection from %s: %s", conn.peer, reason)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass
        self.conns.discard(conn)
        conn.slots.clear()
        conn.out.clear()

    # -- reading --------------------------------------------------------------------------------
    def _handshake(self, conn: _Connection) -> bool:
        """One step of a TLS handshake; True once it is done (the session is then known)."""
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            conn.want_write = False
            return False
        except ssl.SSLWantWriteError:
            conn.want_write = True
            return False
        except (ssl.SSLError, OSError) as e:
            # Plaintext bytes on a TLS listener, an untrusted client certificate, a reset.
            self._close(conn, f"TLS handshake failed: {getattr(e, 'reason', None) or e}")
            return False
        conn.handshaking = conn.want_write = False
        conn.last_active = time.monotonic()
        if conn.sasl is None:
            conn.session = conn.make_session(_cert_principal(sock.getpeercert()))
        return True

    def _recv(self, conn: _Connection) -> bytes | None:
        """Bytes from the socket: b"" at EOF, None when there is nothing now."""
        sock = conn.sock
        if not conn.tls:
            return sock.recv(_RECV_BYTES)
        assert isinstance(sock, ssl.SSLSocket)
        chunks: list[bytes] = []
        try:
            while True:
                chunk = sock.recv(_RECV_BYTES)
                if not chunk:
                    if chunks:
                        break
                    return b""
                chunks.append(chunk)
                # Decrypted bytes may wait inside the TLS object with nothing left on the
                # socket: the selector would never wake us for them.
                if not sock.pending():
                    break
        except ssl.SSLWantReadError:
            if not chunks:
                return None
        except ssl.SSLWantWriteError:
            if not chunks:
                return None
        except ssl.SSLZeroReturnError:
            if not chunks:
                return b""
        return b"".join(chunks)

    def _on_readable(self, conn: _Connection) -> None:
        if conn.handshaking and not self._handshake(conn):
            self._update_interest(conn)
            return
        try:
            data = self._recv(conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close(conn, f"read failed: {e}")
            return
        if data is None:
            return
        if not data:
            self._close(conn, None)
            return
        conn.last_active = time.monotonic()
        conn.proto.receive_data(data)
        self._serve_buffered(conn)

    def _serve_buffered(self, conn: _Connection) -> None:
        """Hand the complete requests received on ``conn`` to the APIs, in order; stop at a
        KIP-219 mute (the rest stays buffered until the throttle time is over)."""
        proto = conn.proto
        server = self.server
        try:
            while True:
                if conn.muted_until and conn.muted_until > time.monotonic():
                    break  # muted by a quota: the requests already received wait too
                if conn.sasl is not None and conn.sasl.raw:
                    if not self._raw_sasl_token(conn):
                        break
                    continue
                ev = proto.next_request()
                if ev is NEED_DATA:
                    break
                if isinstance(ev, RequestEvent):
                    slot = _Slot(conn, ev.header.correlation_id)
                    conn.slots.append(slot)
                    metrics = server.metrics
                    if metrics is not None:
                        slot.metrics = metrics
                        slot.t0 = monotonic_ms()
                    sasl = conn.sasl
                    if sasl is not None:
                        h = ev.header
                        step = sasl.receive_request(h.api_key, h.api_version, ev.request, monotonic_ms())
                        if not step.pass_on:
                            self._sasl_step(conn, slot, step)
                            if conn.closing:
                                break
                            continue
                    if not conn.busy:
                        # Served right here when nothing of this connection is queued (order
                        # kept). Produce too: handing a request to a handler thread costs a
                        # queue hop, a thread wake-up and GIL hand-offs between three threads,
                        # which at 1,000 partitions x 100 producers (small requests) halved the
                        # broker's produce rate; an append waits for no other broker here
                        # (acks=-1 parks in the produce purgatory).
                        if metrics is not None:
                            metrics.request(ev.header.api_key, 0)
                        server.apis.handle(ev.header, ev.request, slot)
                    else:
                        server.handlers.submit(conn, slot, ev)
                    continue
                assert isinstance(ev, UnsupportedRequest)
                slot = _Slot(conn, ev.header.correlation_id)
                conn.slots.append(slot)
                h = ev.header
                if h.api_key == ApiKey.API_VERSIONS:
                    slot.send(unsupported_api_versions_response(server.apis.versions))
                else:
                    why = "unknown api key" if not any(k == h.api_key for k, _, _ in server.apis.versions) else "unsupported version"
                    log.warning(
                        "%s: %s %d v%d (correlation id %d, client %r): closing the connection",
                        conn.peer, why, h.api_key, h.api_version, h.correlation_id, h.client_id,
                    )
                    slot.close(f"{why} {h.api_key} v{h.api_version}")
        except ProtocolError as e:
            # Close after the answers to the requests before it (as an unknown API does): the
            # client then sees those answers and a clean close, not a reset mid-stream.
            log.warning("%s: malformed request, closing the connection: %s", conn.peer, e)
            slot = _Slot(conn, -1)
            conn.slots.append(slot)
            slot.close(f"malformed request: {e}")
        self._update_interest(conn)

    # -- SASL (the exchange is protocol.sasl.SaslServerExchange; here: answers, sessions, logs) --
    def _sasl_step(self, conn: _Connection, slot: _Slot, step: ServerStep) -> None:
        """Carry out what the exchange decided about one SASL request (answer, close, session)."""
        if step.internal_error is not None:
            log.error("%s: SASL mechanism failed unexpectedly", conn.peer, exc_info=step.internal_error)
        if step.authenticated is not None:
            self._sasl_authenticated(conn, step)
        slot.send(step.response)
        if step.close is not None:
            self._refuse(conn, slot, step.close)

    def _sasl_authenticated(self, conn: _Connection, step: ServerStep) -> None:
        assert conn.sasl is not None
        user, mech, listener = step.authenticated, conn.sasl.mechanism, conn.listener.name
        if step.reauthenticated:
            log.info("%s: re-authenticated as User:%s with %s on %s", conn.peer, user, mech, listener)
            return
        conn.session = conn.make_session(f"User:{user}")
        conn.proto.max_frame_bytes = self.server.max_frame_bytes
        log.info("%s: authenticated as User:%s with %s on %s", conn.peer, user, mech, listener)

    def _raw_sasl_token(self, conn: _Connection) -> bool:
        """One bare SASL token after a v0 handshake; False when it is not complete yet."""
        frame = conn.proto.next_raw_frame()
        if frame is None:
            return False
        sasl = conn.sasl
        assert sasl is not None
        step = sasl.receive_token(frame, monotonic_ms())
        slot = _Slot(conn, -1)
        conn.slots.append(slot)
        if step.internal_error is not None:
            log.error("%s: SASL mechanism failed unexpectedly", conn.peer, exc_info=step.internal_error)
        if step.close is not None:
            # v0 has no way to report the error: close (the client sees the connection end).
            slot.close(step.close)
            return False
        if step.authenticated is not None:
            self._sasl_authenticated(conn, step)
        out = step.response
        slot.parts = [_size.pack(len(out)) + out]
        slot.done = True
        self.notify(conn)
        return True

    def _refuse(self, conn: _Connection, answered: _Slot, reason: str) -> None:
        """Close after ``answered`` went out; nothing more is read from this client."""
        slot = _Slot(conn, -1)
        conn.slots.append(slot)
        slot.close(reason)
        conn.closing = True  # stop reading: nothing after the refused request counts

    # -- writing --------------------------------------------------------------------------------
    def _flush_slots(self, conn: _Connection) -> None:
        slots = conn.slots
        while slots and slots[0].done:
            if slots[0].hold_until and slots[0].hold_until > time.monotonic():
                self._at(slots[0].hold_until, conn)  # a throttled answer (old version): later
                break
            slot = slots.popleft()
            if slot.close_reason is not None:
                conn.closing = True
                slots.clear()
                log.info("closing connection from %s: %s", conn.peer, slot.close_reason)
                break
            if slot.parts:
                conn.out.extend(slot.parts)
        if conn.out:
            self._write(conn)
        if conn.closing and not conn.out:
            self._close(conn, None)
            return
        self._update_interest(conn)

    def _write_tls(self, conn: _Connection) -> None:
        """``_write`` for a TLS connection: plain ``send`` of bytes (file slices read first)."""
        out = conn.out
        sock = conn.sock
        try:
            while out:
                head = out[0]
                off = conn.out_off
                if isinstance(head, FileSlice):
                    n = min(head.length - off, _TLS_WRITE_CHUNK)
                    data: bytes | memoryview = os.pread(head.fileno(), n, head.position + off)
                    if not data:
                        self._close(conn, f"reading {head.store.path} came up short")
                        return
                    total = head.length
                else:
                    data = memoryview(head)[off : off + _TLS_WRITE_CHUNK]
                    total = len(head)
                sent = sock.send(data)
                conn.last_active = time.monotonic()
                off += sent
                if off < total:
                    conn.out_off = off
                    if sent < len(data):
                        return
                    continue
                out.popleft()
                conn.out_off = 0
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        except OSError as e:
            self._close(conn, f"write failed: {e}")
            return
        if conn.closing:
            self._close(conn, None)

    def _write(self, conn: _Connection) -> None:
        if conn.tls:
            self._write_tls(conn)
            return
        out = conn.out
        sock = conn.sock
        try:
            while out:
                head = out[0]
                if isinstance(head, FileSlice):
                    off = conn.out_off
                    sent = os.sendfile(conn.fd, head.fileno(), head.position + off, head.length - off)
                    if sent == 0:
                        # The file is shorter than the slice said: the frame cannot be finished.
                        self._close(conn, f"sendfile from {head.store.path} came up short")
                        return
                    off += sent
                    if off < head.length:
                        conn.out_off = off
                        return
                    out.popleft()
                    conn.out_off = 0
                    continue
                bufs: list[Any] = []
                for p in out:
                    if isinstance(p, FileSlice) or len(bufs) >= _IOV_MAX:
                        break
                    bufs.append(p)
                if conn.out_off:
                    bufs[0] = memoryview(bufs[0])[conn.out_off:]
                sent = sock.sendmsg(bufs)
                conn.last_active = time.monotonic()
                for b in bufs:
                    n = len(b)
                    if sent >= n:
                        sent -= n
                        out.popleft()
                        conn.out_off = 0
                    else:
                        conn.out_off += sent
                        return
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close(conn, f"write failed: {e}")
            return
        if conn.closing:
            self._close(conn, None)

    def _update_interest(self, conn: _Connection) -> None:
        if conn.closed:
            return
        muted = conn.muted_until and conn.muted_until > time.monotonic()
        if muted:
            self._at(conn.muted_until, conn)  # KIP-219: read again once the throttle is over
        elif conn.muted_until:
            conn.muted_until = 0.0
            self._serve_buffered(conn)  # the requests received before the mute; recurses once
            return
        paused = (
            conn.closing
            or muted
            or len(conn.requests) >= _MAX_QUEUED_REQUESTS
            or len(conn.slots) >= _MAX_UNSENT_SLOTS
        )
        ev = 0 if paused else selectors.EVENT_READ
        if conn.handshaking:
            ev = selectors.EVENT_WRITE if conn.want_write else selectors.EVENT_READ
        elif conn.out:
            ev |= selectors.EVENT_WRITE
        if ev != conn.events:
            conn.events = ev
            if ev:
                try:
                    self.sel.modify(conn.sock, ev, conn)
                except KeyError:
                    self.sel.register(conn.sock, ev, conn)
            else:
                try:
                    self.sel.unregister(conn.sock)
                except KeyError:
                    pass


class SocketServer:
    """Listens on ``host:port`` (or on each of ``listeners``) and serves requests through ``apis``.

    Args:
        apis: the dispatcher.
        host: interface to bind (when ``listeners`` is not given).
        port: port (0: ephemeral; read ``port`` after ``start``).
        listeners: the listeners to bind (None: one PLAINTEXT listener on ``host:port``); the
            first is the one ``host``/``port`` report and the one other brokers use.
        num_network_threads: processors.
        num_io_threads: request handlers.
        max_frame_bytes: largest request frame (socket.request.max.bytes).
        connections_max_idle_ms: idle connections are closed after this (-1: never).
        send_buffer_bytes / receive_buffer_bytes: SO_SNDBUF / SO_RCVBUF (-1: OS default).
        name: thread name prefix.
    """

    def __init__(
        self,
        apis: KafkaApis,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        num_network_threads: int = 1,
        num_io_threads: int = 2,
        max_frame_bytes: int = 100 * 1024 * 1024,
        connections_max_idle_ms: int = 600_000,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        name: str = "broker",
        listeners: list[Listener] | None = None,
    ) -> None:
        self.apis = apis
        #: the broker's sensors (set by the broker before start; None: no request metrics)
        self.metrics: BrokerMetrics | None = None
        self.listeners = listeners or [Listener("PLAINTEXT", host, port)]
        self.host = self.listeners[0].host
        self.port = self.listeners[0].port
        self.name = name
        self.max_frame_bytes = max_frame_bytes
        self.max_idle_s = None if connections_max_idle_ms < 0 else connections_max_idle_ms / 1000.0
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.handlers = _HandlerPool(apis, num_io_threads, name)
        self.processors = [_Processor(self, i) for i in range(num_network_threads)]
        self._sockets: list[tuple[socket.socket, Listener]] = []
        self._acceptor: threading.Thread | None = None
        self._running = False

    def start(self) -> None:
        """Bind, listen and start the threads.

        Raises:
            OSError: the address cannot be bound.
        """
        try:
            for lst in self.listeners:
                ls = socket.socket(socket.AF_INET6 if ":" in lst.host else socket.AF_INET, socket.SOCK_STREAM)
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    ls.bind((lst.host, lst.port))
                except OSError:
                    ls.close()
                    raise
                ls.listen(128)
                ls.setblocking(False)
                lst.port = ls.getsockname()[1]
                self._sockets.append((ls, lst))
        except OSError:
            for ls, _ in self._sockets:
                ls.close()
            self._sockets = []
            raise
        self.port = self.listeners[0].port
        self._running = True
        self.handlers.start()
        for p in self.processors:
            p.start()
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{self.name}-acceptor", daemon=True)
        self._acceptor.start()
        for lst in self.listeners:
            log.info("listening on %s://%s:%d", lst.protocol, lst.host, lst.port)

    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        for ls, lst in self._sockets:
            sel.register(ls, selectors.EVENT_READ, lst)
        i = 0
        try:
            while self._running:
                for key, _ in sel.select(timeout=0.2):
                    lst = key.data
                    try:
                        sock, _ = key.fileobj.accept()  # type: ignore[union-attr]
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        if not self._running:
                            break
                        log.exception("accept failed")
                        time.sleep(0.05)
                        continue
                    self._hand_over(sock, lst, i)
                    i += 1
        finally:
            sel.close()

    def _hand_over(self, sock: socket.socket, lst: Listener, i: int) -> None:
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
            if lst.ssl_context is not None:
                # No I/O here: the handshake runs non-blocking in the processor.
                sock = lst.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except OSError as e:
            log.info("dropping a new connection on %s: %s", lst.protocol, e)
            sock.close()
            return
        self.processors[i % len(self.processors)].add(sock, lst)

    def stop(self) -> None:
        """Stop accepting, close every connection, stop the threads."""
        self._running = False
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
            self._acceptor = None
        for ls, _ in self._sockets:
            ls.close()
        self._sockets = []
        for p in self.processors:
            p.running = False
            p.wake()
        for p in self.processors:
            if p.is_alive():
                p.join(timeout=5)
        self.handlers.stop()
