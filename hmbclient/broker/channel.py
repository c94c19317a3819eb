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
"""

from __future__ import annotations

import socket
from typing import Any

from hmbclient.errors import KafkaConnectionError, ProtocolError, RemoteProtocolError
from hmbclient.protocol.api.base import Request
from hmbclient.protocol.frame import NEED_DATA, ClientConnection

__all__ = ["BrokerChannel"]

_RECV_BYTES = 1 << 20


class BrokerChannel:
    """One blocking connection to ``host:port``.

    Args:
        host: the other broker's host.
        port: its port.
        client_id: sent in every request header (e.g. ``broker-1-fetcher``).
        connect_timeout_s: how long a connect may take.
    """

    def __init__(self, host: str, port: int, client_id: str, connect_timeout_s: float = 5.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self._sock: socket.socket | None = None
        self._proto: ClientConnection | None = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def _connect(self) -> tuple[socket.socket, ClientConnection]:
        if self._sock is not None and self._proto is not None:
            return self._sock, self._proto
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        except OSError as e:
            raise KafkaConnectionError(f"cannot reach broker at {self.host}:{self.port}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._proto = sock, ClientConnection(self.client_id)
        return sock, self._proto

    def request(self, req: Request, timeout_s: float) -> Any:
        """Send ``req`` and wait for its response.

        Raises:
            KafkaConnectionError: not reachable, connection lost, or no answer in ``timeout_s``.
            RemoteProtocolError: the answer did not decode.
        """
        sock, proto = self._connect()
        try:
            _, frame = proto.send_request(req)
            sock.settimeout(timeout_s)
            sock.sendall(frame)
            while True:
                ev = proto.next_response()
                if ev is not NEED_DATA:
                    return ev[1]
                data = sock.recv(_RECV_BYTES)
                if not data:
                    raise KafkaConnectionError(f"broker at {self.host}:{self.port} closed the connection")
                proto.receive_data(data)
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

    def close(self) -> None:
        sock, self._sock, self._proto = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"BrokerChannel({self.client_id} -> {self.host}:{self.port})"
