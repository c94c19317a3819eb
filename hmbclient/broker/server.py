"""SocketServer: the broker's network layer (Kafka's acceptor + processors + request handlers).

Threads: one acceptor (accepts, hands each connection to a processor round-robin), N processors
(each a selectors loop owning its connections: reads frames through the sans-IO
``ServerConnection``, writes responses, reaps idle connections) and M request handlers (call
``KafkaApis.handle``). A connection's requests are handled one after the other, in arrival order
(appends from one producer stay in order), but a parked request (a Fetch waiting in purgatory)
does not stop the next one from being handled.

Response ordering: every request gets a slot in its connection's FIFO when it is parsed; the
answer, produced on any thread (handler, purgatory reaper, another connection's append), fills
the slot and pokes the owning processor; the processor writes the filled slots from the head
and stops at the first empty one. Kafka clients match responses by order, so this is the
per-connection guarantee they need.

Zero copy: a Fetch response is encoded into parts; a ``FileSlice`` part (bytes of a segment
file) is written with ``os.sendfile``, the rest with ``sendmsg``.

Bad input: a frame whose size is out of range, a malformed request, or an unknown API key closes
that connection (logged) and nothing else; an ApiVersions request of an unknown version gets the
KIP-511 answer instead.
"""

from __future__ import annotations

import logging
import os
import queue
import selectors
import socket
import threading
import time
from collections import deque
from typing import Any

from hmbclient.broker.apis import KafkaApis, unsupported_api_versions_response
from hmbclient.broker.log.segment import FileSlice
from hmbclient.errors import ProtocolError
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import Response
from hmbclient.protocol.frame import NEED_DATA, RequestEvent, ServerConnection, UnsupportedRequest

__all__ = ["SocketServer"]

log = logging.getLogger("hmbclient.broker.server")

_RECV_BYTES = 256 * 1024
_IOV_MAX = 64
# Stop reading from a connection while this many of its requests wait for a handler or its
# responses wait for the socket: the client is faster than we are, let TCP push back.
_MAX_QUEUED_REQUESTS = 16
_MAX_UNSENT_SLOTS = 512
_REAP_EVERY_S = 1.0


class _Slot:
    """One request's place in its connection's response order (a RequestChannel)."""

    __slots__ = ("conn", "cid", "parts", "done", "close_reason")

    def __init__(self, conn: _Connection, cid: int) -> None:
        self.conn = conn
        self.cid = cid
        self.parts: list[Any] | None = None
        self.done = False
        self.close_reason: str | None = None

    def send(self, response: Response | None) -> None:
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
        "lock", "closed", "last_active", "events", "closing",
    )

    def __init__(self, sock: socket.socket, processor: _Processor, max_frame_bytes: int) -> None:
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
        self._new: deque[socket.socket] = deque()
        self._ready: deque[_Connection] = deque()
        self._wake_pending = False
        self._wake_closed = False
        self._wake_lock = threading.Lock()
        self.conns: set[_Connection] = set()
        self.running = True

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

    def add(self, sock: socket.socket) -> None:
        self._new.append(sock)
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
                for key, mask in self.sel.select(timeout=_REAP_EVERY_S):
                    conn = key.data
                    if conn is None:
                        self._drain_wake()
                        continue
                    try:
                        if mask & selectors.EVENT_READ and not conn.closed:
                            self._on_readable(conn)
                        if mask & selectors.EVENT_WRITE and not conn.closed:
                            self._write(conn)
                            self._update_interest(conn)
                    except Exception:
                        # A bug must cost one connection, never the processor thread (which
                        # would silently stop serving all of its connections).
                        log.exception("%s: unexpected error, closing the connection", conn.peer)
                        self._close(conn, None)
                while self._new:
                    self._register(self._new.popleft())
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

    def _register(self, sock: socket.socket) -> None:
        conn = _Connection(sock, self, self.server.max_frame_bytes)
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
    def _on_readable(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._close(conn, f"read failed: {e}")
            return
        if not data:
            self._close(conn, None)
            return
        conn.last_active = time.monotonic()
        proto = conn.proto
        server = self.server
        try:
            proto.receive_data(data)
            while True:
                ev = proto.next_request()
                if ev is NEED_DATA:
                    break
                if isinstance(ev, RequestEvent):
                    slot = _Slot(conn, ev.header.correlation_id)
                    conn.slots.append(slot)
                    if ev.header.api_key != 0 and not conn.busy:
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

    # -- writing --------------------------------------------------------------------------------
    def _flush_slots(self, conn: _Connection) -> None:
        slots = conn.slots
        while slots and slots[0].done:
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

    def _write(self, conn: _Connection) -> None:
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
        paused = (
            conn.closing
            or len(conn.requests) >= _MAX_QUEUED_REQUESTS
            or len(conn.slots) >= _MAX_UNSENT_SLOTS
        )
        ev = 0 if paused else selectors.EVENT_READ
        if conn.out:
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
    """Listens on ``host:port`` and serves requests through ``apis``.

    Args:
        apis: the dispatcher.
        host: interface to bind.
        port: port (0: ephemeral; read ``port`` after ``start``).
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
    ) -> None:
        self.apis = apis
        self.host = host
        self.port = port
        self.name = name
        self.max_frame_bytes = max_frame_bytes
        self.max_idle_s = None if connections_max_idle_ms < 0 else connections_max_idle_ms / 1000.0
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.handlers = _HandlerPool(apis, num_io_threads, name)
        self.processors = [_Processor(self, i) for i in range(num_network_threads)]
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._running = False

    def start(self) -> None:
        """Bind, listen and start the threads.

        Raises:
            OSError: the address cannot be bound.
        """
        ls = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            ls.bind((self.host, self.port))
        except OSError:
            ls.close()
            raise
        ls.listen(128)
        self.port = ls.getsockname()[1]
        self._listener = ls
        self._running = True
        self.handlers.start()
        for p in self.processors:
            p.start()
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{self.name}-acceptor", daemon=True)
        self._acceptor.start()
        log.info("listening on %s:%d", self.host, self.port)

    def _accept_loop(self) -> None:
        ls = self._listener
        assert ls is not None
        sel = selectors.DefaultSelector()
        sel.register(ls, selectors.EVENT_READ)
        i = 0
        try:
            while self._running:
                if not sel.select(timeout=0.2):
                    continue
                try:
                    sock, _ = ls.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    if not self._running:
                        break
                    log.exception("accept failed")
                    time.sleep(0.05)
                    continue
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer_bytes > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
                if self.receive_buffer_bytes > 0:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
                self.processors[i % len(self.processors)].add(sock)
                i += 1
        finally:
            sel.close()

    def stop(self) -> None:
        """Stop accepting, close every connection, stop the threads."""
        self._running = False
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
            self._acceptor = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for p in self.processors:
            p.running = False
            p.wake()
        for p in self.processors:
            if p.is_alive():
                p.join(timeout=5)
        self.handlers.stop()
