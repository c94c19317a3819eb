"""FaultProxy: a TCP proxy between Kafka clients and one broker that loses answers on purpose.

Usage::

    with EmbeddedBroker() as broker, FaultProxy(broker.address, drop=drop_every(7)) as proxy:
        producer = KafkaProducer(bootstrap_servers=proxy.bootstrap)   # every 7th Produce
        ...                                                           # answer is lost
        proxy.cut()            # close every open link now (the client reconnects)
        proxy.set_link(False)  # the link is down: new connections are closed at once
        print(proxy.stats())   # answers passed and dropped

What it does. It listens on 127.0.0.1 (port 0 by default) and opens one upstream connection
to the broker per client connection (a *link*). Requests pass through unchanged, but their
headers are read so that each answer is known by its API key and version (a Kafka answer only
carries the correlation id). On the response path the proxy parses whole frames and asks the
*rule* about each one; when the rule says drop, the proxy closes both sides of that link
instead of passing the answer on — the broker did the work, the client never hears of it,
which is exactly the case an idempotent producer must survive.

Metadata and FindCoordinator answers (the versions :mod:`hmbclient.protocol` knows) are
rewritten so that the broker's own address reads as the proxy's, so clients stay on the proxy
after bootstrap. Several proxies in front of the brokers of one cluster share one
``address_map`` (see :func:`proxy_cluster`). Answers of versions the codec does not know pass
unchanged.

Contract and invariants:

- An answer is either passed whole and in order, or its link is closed before any byte of it
  reaches the client; the rule is asked once per answer, on the proxy's one thread.
- ``Answer.nth`` counts answers of that API key over the proxy's life (1-based), whichever
  link they came on, so ``drop_every(n)`` drops every n-th Produce answer overall.
- ``start`` returns once the port is bound; ``stop`` closes every socket and joins the thread
  (nothing outlives the proxy; it is a daemon thread in case a test forgets ``stop``).
- Only 127.0.0.1 is served: a non-loopback upstream is refused at construction.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api.base import RESPONSES, ApiKey
from hmbclient.protocol.frame import ServerConnection, _response_body

__all__ = ["Answer", "DropRule", "FaultProxy", "drop_every", "drop_when", "proxy_cluster"]

_size = struct.Struct(">i")
_req_hdr = struct.Struct(">hhi")
_corr = struct.Struct(">i")
_MAX_FRAME = 100 * 1024 * 1024
_LOOPBACK = {"127.0.0.1", "localhost"}
_FIND_COORDINATOR = 10


class Answer(NamedTuple):
    """One answer on its way to the client, as the rule sees it."""

    api_key: int
    api_version: int
    correlation_id: int
    link: int  # the link's number (1-based, in accept order)
    nth: int  # answers of this api_key so far, this one included (1-based, whole proxy)
    size: int  # frame size in bytes, without the size field


DropRule = Callable[[Answer], bool]


def drop_every(n: int, api_key: int = ApiKey.PRODUCE, *, first: int = 1) -> DropRule:
    """A rule dropping every ``n``-th answer of ``api_key`` (Produce by default).

    Args:
        n: The period (>= 1); ``n == 1`` drops them all.
        api_key: The API whose answers are counted.
        first: Answers before the ``first``-th are never dropped.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"drop_every: n must be >= 1, got {n}")
    key = int(api_key)
    return lambda a: a.api_key == key and a.nth >= first and a.nth % n == 0


def drop_when(pred: Callable[[Answer], bool]) -> DropRule:
    """A rule from any predicate on :class:`Answer` (documentation only: any callable works)."""
    return pred


def _never(_a: Answer) -> bool:
    return False


def _norm(addr: tuple[str, int]) -> tuple[str, int]:
    host = "127.0.0.1" if addr[0] == "localhost" else addr[0]
    return host, int(addr[1])


@dataclass
class _Link:
    num: int
    client: socket.socket
    upstream: socket.socket
    requests: bytearray = field(default_factory=bytearray)  # client -> proxy, not yet whole frames
    responses: bytearray = field(default_factory=bytearray)  # broker -> proxy, not yet whole frames
    to_upstream: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    in_flight: deque[tuple[int, int, int]] = field(default_factory=deque)  # (corr, key, version)
    closed: bool = False


class FaultProxy:
    """A dropping TCP proxy for one broker (see the module docstring).

    Args:
        upstream: The broker's ``(host, port)`` or ``"host:port"``; 127.0.0.1 (or localhost) only.
        drop: The rule deciding which answers are lost (default: none).
        port: The port to listen on (0: a free one).
        address_map: Broker address -> proxy address, used to rewrite Metadata and
            FindCoordinator answers. Default: this broker to this proxy. Shared (and filled)
            by :func:`proxy_cluster`.

    Raises:
        ValueError: a non-loopback upstream.
    """

    def __init__(
        self,
        upstream: tuple[str, int] | str,
        drop: DropRule | None = None,
        *,
        port: int = 0,
        address_map: MutableMapping[tuple[str, int], tuple[str, int]] | None = None,
    ) -> None:
        if isinstance(upstream, str):
            host, _, port_s = upstream.rpartition(":")
            upstream = (host, int(port_s))
        if upstream[0] not in _LOOPBACK:
            raise ValueError(f"FaultProxy serves 127.0.0.1 only, got upstream {upstream[0]!r}")
        self.upstream = _norm(upstream)
        self._rule: DropRule = drop or _never
        self._port = port
        self._map = address_map if address_map is not None else {}
        self._lock = threading.Lock()
        self._commands: deque[Callable[[], None]] = deque()
        self._links: dict[int, _Link] = {}
        self._counts: dict[int, int] = {}
        self._stats = {"links": 0, "passed": 0, "dropped": 0, "cut": 0, "refused": 0}
        self._link_up = True
        self._listener: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._failure: BaseException | None = None

    # ---- life cycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Bind and start the proxy thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", self._port))
        lst.listen(64)
        lst.setblocking(False)
        self._listener = lst
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._map.setdefault(self.upstream, self.address)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"FaultProxy-{self.address[1]}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close every link and the listener, and join the thread. Idempotent."""
        thread = self._thread
        if thread is None:
            return
        self._stopping = True
        self._wake()
        thread.join(timeout_s)
        self._thread = None
        if thread.is_alive():  # pragma: no cover - the loop wakes within its select timeout
            raise RuntimeError("FaultProxy thread did not stop")

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int]:
        if self._listener is None:
            raise RuntimeError("FaultProxy not started")
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"`` for a client's bootstrap servers."""
        host, port = self.address
        return f"{host}:{port}"

    @property
    def failure(self) -> BaseException | None:
        """The exception that ended the proxy thread, if any (a bug; tests should check it)."""
        return self._failure

    # ---- controls (any thread) --------------------------------------------------------------

    def set_rule(self, drop: DropRule | None) -> None:
        """Replace the rule (``None``: drop nothing). Applies from the next answer on."""
        self._rule = drop or _never

    def cut(self) -> None:
        """Close every open link now (the clients see their connections reset)."""
        self._command(self._cut_all)

    def set_link(self, up: bool) -> None:
        """``False``: cut every link and close new connections at once; ``True``: serve again."""
        self._link_up = up
        if not up:
            self.cut()

    def stats(self) -> dict[str, int]:
        """Counts so far: links accepted, answers passed and dropped, links cut, connections refused."""
        with self._lock:
            return dict(self._stats)

    def _command(self, fn: Callable[[], None]) -> None:
        if self._thread is None:
            return  # not running: there is no link to act on
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._commands.append(run)
        self._wake()
        if self._thread is not None and threading.current_thread() is not self._thread:
            done.wait(10.0)

    def _wake(self) -> None:
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")

    # ---- the loop (proxy thread only) -------------------------------------------------------

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        assert self._listener is not None and self._wake_r is not None
        sel.register(self._listener, selectors.EVENT_READ, ("accept", None))
        sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._sel = sel
        try:
            while not self._stopping:
                for key, mask in sel.select(0.5):
                    kind, link = key.data
                    if kind == "accept":
                        self._accept()
                    elif kind == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._service(link, kind, mask)
                while self._commands:
                    self._commands.popleft()()
        except BaseException as e:  # pragma: no cover - a bug in the proxy: keep it visible
            self._failure = e
            raise
        finally:
            for link in list(self._links.values()):
                self._close(link)
            while self._commands:
                self._commands.popleft()()
            sel.close()
            for s in (self._listener, self._wake_r, self._wake_w):
                if s is not None:
                    s.close()
            self._listener = self._wake_r = self._wake_w = None

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        # Counted before the close: a client that sees its connection closed reads the count.
        if not self._link_up:
            with self._lock:
                self._stats["refused"] += 1
            client.close()
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5.0)
        except OSError:
            with self._lock:
                self._stats["refused"] += 1
            client.close()  # the broker is down: the client sees what it would see without us
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._stats["links"] += 1
            num = self._stats["links"]
        link = _Link(num, client, upstream)
        self._links[num] = link
        self._sel.register(client, selectors.EVENT_READ, ("client", link))
        self._sel.register(upstream, selectors.EVENT_READ, ("upstream", link))

    def _service(self, link: _Link, side: str, mask: int) -> None:
        if link.closed:
            return
        sock = link.client if side == "client" else link.upstream
        if mask & selectors.EVENT_READ:
            try:
                data = sock.recv(256 * 1024)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._close(link)
                return
            if data:
                if side == "client":
                    self._on_requests(link, data)
                else:
                    self._on_responses(link, data)
                if link.closed:
                    return
        if mask & selectors.EVENT_WRITE or link.to_client or link.to_upstream:
            self._flush(link)

    def _on_requests(self, link: _Link, data: bytes) -> None:
        buf = link.requests
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _size.unpack_from(buf, pos)
            if size < 8 or size > _MAX_FRAME:
                self._close(link)  # not Kafka: do not guess
                return
            if len(buf) - pos - 4 < size:
                break
            key, version, corr = _req_hdr.unpack_from(buf, pos + 4)
            # Produce with acks=0 gets no answer; its body starts with the transactional id
            # (v3+) and then acks, which we would have to parse to know. Cheaper: acks=0
            # answers never come, and responses are matched by correlation id below.
            link.in_flight.append((corr, key, version))
            link.to_upstream += buf[pos : pos + 4 + size]
            pos += 4 + size
        del buf[:pos]

    def _on_responses(self, link: _Link, data: bytes) -> None:
        buf = link.responses
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _size.unpack_from(buf, pos)
            if size < 4 or size > _MAX_FRAME:
                self._close(link)
                return
            if len(buf) - pos - 4 < size:
                break
            (corr,) = _corr.unpack_from(buf, pos + 4)
            key, version = -1, -1
            while link.in_flight:  # requests without answers (acks=0) are skipped over
                c, k, v = link.in_flight.popleft()
                if c == corr:
                    key, version = k, v
                    break
            with self._lock:
                nth = self._counts.get(key, 0) + 1
                self._counts[key] = nth
            answer = Answer(key, version, corr, link.num, nth, size)
            if self._rule(answer):
                with self._lock:
                    self._stats["dropped"] += 1
                self._close(link)
                return
            frame = bytes(buf[pos : pos + 4 + size])
            if key in (ApiKey.METADATA, _FIND_COORDINATOR):
                frame = self._rewrite(key, version, corr, frame)
            link.to_client += frame
            with self._lock:
                self._stats["passed"] += 1
            pos += 4 + size
        del buf[:pos]

    def _rewrite(self, key: int, version: int, corr: int, frame: bytes) -> bytes:
        rtype = RESPONSES.get((key, version))
        if rtype is None:
            return frame
        try:
            # past size and correlation id, and a flexible (v1) header's tags: Metadata v9+
            resp = rtype.decode(_response_body(rtype, frame[4:]))
        except ProtocolError:
            return frame
        if key == ApiKey.METADATA:
            brokers = []
            for b in resp.brokers:
                host, port = self._map.get(_norm((b.host, b.port)), (b.host, b.port))
                brokers.append(b._replace(host=host, port=port))
            resp = resp._replace(brokers=brokers)
        else:
            host, port = self._map.get(_norm((resp.host, resp.port)), (resp.host, resp.port))
            resp = resp._replace(host=host, port=port)
        return b"".join(ServerConnection.encode_response(corr, resp))

    def _flush(self, link: _Link) -> None:
        for sock, out in ((link.upstream, link.to_upstream), (link.client, link.to_client)):
            if out:
                try:
                    n = sock.send(out)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    self._close(link)
                    return
                del out[:n]
        if link.closed:
            return
        for sock, out, side in ((link.upstream, link.to_upstream, "upstream"), (link.client, link.to_client, "client")):
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
            self._sel.modify(sock, events, (side, link))

    def _cut_all(self) -> None:
        for link in list(self._links.values()):
            with self._lock:
                self._stats["cut"] += 1
            self._close(link)

    def _close(self, link: _Link) -> None:
        if link.closed:
            return
        link.closed = True
        self._links.pop(link.num, None)
        for s in (link.client, link.upstream):
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._sel.unregister(s)
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def proxy_cluster(upstreams: Iterable[tuple[str, int] | str], drop: DropRule | None = None) -> list[FaultProxy]:
    """One (not yet started) :class:`FaultProxy` per broker, sharing one address map and rule,
    so that Metadata answers through any of them name the proxies of every broker."""
    shared: dict[tuple[str, int], tuple[str, int]] = {}
    return [FaultProxy(u, drop, address_map=shared) for u in upstreams]

