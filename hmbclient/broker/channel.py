"""BrokerChannel: a blocking request/response connection from one broker to another.

The controller uses it to send LeaderAndIsr / UpdateMetadata / StopReplica, followers use it
to fetch from their leaders and to ask OffsetForLeaderEpoch. Each user owns its channels and
calls them from one thread, so a channel is a plain blocking socket around the sans-IO
:class:`hmbclient.protocol.frame.ClientConnection` (the client SDK's ``net`` package sits above
the broker in the layering and is not used here).

Contract: ``request(req, timeout_s)`` connects if needed, sends one request and returns its
response, or raises :class:`hmbclient.errors.KafkaConnectionError` (unreachable, closed, timed
out) after closing the socket, so the next call starts on a fresh connection. A response that
does not decode is a :class:`hmbclient.errors.RemoteProtocolError` and also closes the channel.

Closing from another thread (stopping a broker, a replica fetcher, a controller's sender):
``close()`` shuts the socket down (``shutdown(SHUT_RDWR)``) before it lets go of it, which wakes a
thread blocked in ``recv``/``send``/a TLS handshake on it at once -- closing a descriptor alone
does not wake a ``recv`` blocked on it in another thread, which then sat out its timeout (the
fetch's, up to ``replica.fetch.wait.max.ms`` plus the request timeout). A socket a request is
using right now is only shut down and detached: the thread using it closes it when its request
returns (a foreign ``close`` on an ``SSLSocket`` in use could otherwise surface as a
``ValueError`` from the middle of a read). The woken request raises ``KafkaConnectionError``.
``close()`` leaves the channel usable (the next request connects again); ``shutdown()`` closes it
for good: every later request, including one connecting right then, raises
``KafkaConnectionError`` instead of opening a new connection the stopping thread cannot see.

Security (the inter-broker listener, ``security.inter.broker.protocol``): with a
:class:`ChannelSecurity` a new connection is first wrapped in TLS (SSL, SASL_SSL: the other
broker's certificate checked against the context's CAs and its host name) and then
authenticated (SASL_PLAINTEXT, SASL_SSL: SaslHandshake v1 + SaslAuthenticate v1 tokens of the
shared client mechanisms in :mod:`hmbclient.protocol.sasl_mechanisms`) before the first request
goes out. A refused handshake or authentication is a ``KafkaConnectionError`` naming the broker,
the mechanism and the user (never the password), so every caller's retry handles it like any
unreachable broker, and the log says why.
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Any

from hmbclient.errors import (
    HmbError,
    KafkaConnectionError,
    ProtocolError,
    RemoteProtocolError,
)
from hmbclient.protocol.api.base import Request
from hmbclient.protocol.frame import NEED_DATA, ClientConnection
from hmbclient.protocol.sasl import SaslClientExchange
from hmbclient.protocol.sasl_mechanisms import client_mechanism

__all__ = ["BrokerChannel", "ChannelSecurity"]

_RECV_BYTES = 1 << 20


@dataclass(frozen=True)
class ChannelSecurity:
    """How a broker connects to the others: ``protocol`` SSL / SASL_PLAINTEXT / SASL_SSL, a
    client ``ssl_context`` for the TLS ones, and the SASL user for the SASL ones (the password
    is left out of the repr)."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


class BrokerChannel:
    """One blocking connection to ``host:port``.

    Args:
        host: the other broker's host.
        port: its port.
        client_id: sent in every request header (e.g. ``broker-1-fetcher``).
        connect_timeout_s: how long a connect (with its TLS handshake and SASL exchange) may take.
        security: TLS and SASL for the connection (None: plaintext).
    """

    def __init__(
        self, host: str, port: int, client_id: str, connect_timeout_s: float = 5.0, *, security: ChannelSecurity | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.security = security
        # Guards the four fields below; never held across I/O. Requests run on the user's
        # thread, close()/shutdown() may come from any other.
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proto: ClientConnection | None = None
        #: the socket a request (or its connect) is using right now: closed by that request
        self._in_use: socket.socket | None = None
        self._shut = False

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def _shut_error(self) -> KafkaConnectionError:
        return KafkaConnectionError(f"channel to broker at {self.host}:{self.port} is shut down")

    def _claim(self, sock: socket.socket) -> None:
        """Mark ``sock`` as the one this thread's request is on (see the module docstring)."""
        with self._lock:
            if self._shut:
                raise self._shut_error()
            self._in_use = sock

    def _release(self) -> None:
        """End of a request: close its socket if close() detached it meanwhile."""
        with self._lock:
            sock, self._in_use = self._in_use, None
            orphan = sock is not None and sock is not self._sock
        if orphan and sock is not None:
            _close_socket(sock)

    def _connect(self) -> tuple[socket.socket, ClientConnection]:
        with self._lock:
            if self._shut:
                raise self._shut_error()
            if self._sock is not None and self._proto is not None:
                self._in_use = self._sock
                return self._sock, self._proto
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        except OSError as e:
            raise KafkaConnectionError(f"cannot reach broker at {self.host}:{self.port}: {e}") from e
        proto = ClientConnection(self.client_id)
        sec = self.security
        try:
            self._claim(sock)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if sec is not None and sec.ssl_context is not None:
                # Handshake after the claim, so a shutdown() from another thread wakes it too.
                sock = sec.ssl_context.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
                self._claim(sock)
                sock.do_handshake()
            if sec is not None and sec.sasl:
                self._authenticate(sock, proto, sec)
            with self._lock:
                if self._shut:
                    raise self._shut_error()
                self._sock, self._proto = sock, proto
        except ssl.SSLError as e:
            sock.close()
            raise KafkaConnectionError(f"TLS to broker at {self.host}:{self.port} failed: {e}") from e
        except BaseException:
            sock.close()
            raise
        return sock, proto

    def _authenticate(self, sock: socket.socket, proto: ClientConnection, sec: ChannelSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v1 tokens until the mechanism is done."""
        if sec.username is None or sec.password is None:
            raise KafkaConnectionError(
                f"broker at {self.host}:{self.port} is reached over {sec.protocol}: set 'sasl.inter.broker.username' and "
                "'sasl.inter.broker.password' (and 'sasl.mechanism.inter.broker.protocol')"
            )
        mech = client_mechanism(sec.mechanism, sec.username, sec.password)
        who = f"SASL {mech.name} authentication of user {sec.username!r} to broker at {self.host}:{self.port}"
        timeout = self.connect_timeout_s
        # The exchange (sans-IO, shared with the client's connections) says what to send next.
        exchange = SaslClientExchange(mech, peer=f"broker at {self.host}:{self.port}")
        out: Request | bytes | None = exchange.start()
        try:
            while isinstance(out, Request):
                out = exchange.receive(self._exchange(sock, proto, out, timeout))
        except HmbError as e:  # refused, or the mechanism's own verdict (a wrong server proof)
            raise KafkaConnectionError(f"{who} failed: {e}") from e
        if not exchange.done:  # (v1 never asks for raw bytes)
            raise KafkaConnectionError(f"{who} failed: the exchange stopped in state {exchange.state}")

    def _exchange(self, sock: socket.socket, proto: ClientConnection, req: Request, timeout_s: float) -> Any:
        _, frame = proto.send_request(req)
        sock.settimeout(timeout_s)
        sock.sendall(frame)
        while True:
            ev = proto.next_response()
            if ev is not NEED_DATA:
                return ev[1]
            data = sock.recv(_RECV_BYTES)
            if not data:  # (or closed here, from another thread: see close)
                raise KafkaConnectionError(f"broker at {self.host}:{self.port} closed the connection")
            proto.receive_data(data)

    def request(self, req: Request, timeout_s: float) -> Any:
        """Send ``req`` and wait for its response.

        Raises:
            KafkaConnectionError: not reachable, connection lost, or no answer in ``timeout_s``.
            RemoteProtocolError: the answer did not decode.
        """
        try:
            sock, proto = self._connect()
            return self._exchange(sock, proto, req, timeout_s)
        except TimeoutError as e:
            self.close()
            raise KafkaConnectionError(f"{type(req).__name__} to {self.host}:{self.port}: no answer in {timeout_s:.1f} s") from e
        except OSError as e:
            self.close()
            raise KafkaConnectionError(f"{type(req).__name__} to {self.host}:{self.port} failed: {e}") from e
        except ProtocolError as e:
            self.close()
            raise RemoteProtocolError(f"{type(req).__name__} to {self.host}:{self.port}: {e}") from e
        except KafkaConnectionError:
            self.close()
            raise
        finally:
            self._release()

    def close(self) -> None:
        """Drop the connection, waking a request blocked on it in another thread (it raises
        ``KafkaConnectionError``); the next request connects again."""
        with self._lock:
            sock, self._sock, self._proto = self._sock, None, None
            busy = self._in_use
        if busy is not None:
            _wake(busy)  # the request using it closes it (_release)
        if sock is not None and sock is not busy:
            _close_socket(sock)

    def shutdown(self) -> None:
        """Close for good (stopping the channel's user): like ``close``, and every later request,
        or one connecting right now, raises ``KafkaConnectionError``."""
        with self._lock:
            self._shut = True
        self.close()

    def __repr__(self) -> str:
        return f"BrokerChannel({self.client_id} -> {self.host}:{self.port})"


def _wake(sock: socket.socket) -> None:
    """``shutdown(SHUT_RDWR)``: a thread blocked on ``sock`` returns at once. The plain socket
    method also for an ``SSLSocket``, whose own ``shutdown`` drops its TLS object under a
    reader's feet."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # not connected (yet, or any more), or closed
        pass


def _close_socket(sock: socket.socket) -> None:
    _wake(sock)
    try:
        sock.close()
    except OSError:
        pass
