"""SimpleConsumer: Kafka 0.8's low-level, stateless consumer of one broker.

    consumer = SimpleConsumer("127.0.0.1", 9092, so_timeout_ms=10_000, api_version="auto")
    ms = consumer.fetch(FetchRequest("events", 0, offset, max_size=1_048_576))
    for mo in ms:                       # MessageAndOffset, decoded lazily
        handle(mo.offset, mo.message.key, mo.message.value)
    offsets = consumer.get_offsets_before("events", 0, LATEST_TIME, 1)   # descending
    consumer.close()

Every call carries its offsets; the consumer keeps no position. It talks to the one broker it
was given (no metadata, no leader lookup): a partition led elsewhere answers with
NotLeaderForPartitionError, as in 0.8.

Behaviour worth knowing:

* ``fetch`` raises the partition's error (OffsetOutOfRangeError, ...). ``multifetch`` returns
  one message set per request, in order; a set whose partition failed raises on iteration and
  exposes ``.error``.
* A single message larger than ``max_size`` (old brokers return just its first bytes): the
  fetch is repeated with the size doubled, up to ``fetch_message_max_bytes``; then
  MessageSizeTooLargeError.
* Pipelining: when a fetch returns messages, the fetch that continues after the last of them is
  sent at once — by the I/O thread the moment the answer arrives (a header walk finds the next
  offset, no decoding) — so the broker works while the caller decodes. At most ``prefetch``
  (default 2) fetches run ahead of what the caller has asked for. The next ``fetch`` for exactly that (topic,
  partition, offset, max_size) uses the answer; any other request discards it. An empty or
  failed speculative answer is never handed out: the fetch is repeated for real. Disabled for
  the "hmb" dialect (one request in flight).
* HMB ignores max_bytes: over ``api_version="hmb"`` a fetch hands out at most ``max_size``
  bytes of complete messages and keeps the rest; the next fetch from where that left off is
  answered from it without asking HMB again.
* ``get_offsets_before`` uses ListOffsets v0 (0.8's answer: a descending list) on brokers whose
  newest ListOffsets is v0 (Kafka 0.8/0.9, ``api_version="0.8"``); on newer brokers it builds
  the list from v1+ answers (latest and earliest, or the offset for a timestamp), because
  modern brokers drop v0 (Kafka 4) or answer it malformed (Tansu 0.6 omits the offsets array). Over "hmb" it raises UnsupportedByBroker without
  sending anything.
"""

from __future__ import annotations

import functools
import logging
import struct
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from hmbclient.consumer.config import SimpleConsumerConfig, isolation_code
from hmbclient.consumer.message_set import (
    ByteBufferMessageSet,
    first_entry_incomplete,
    last_offset_of,
)
from hmbclient.errors import (
    BrokerError,
    MessageSizeTooLargeError,
    UnknownTopicOrPartitionError,
    for_code,
)
from hmbclient.net.client import NetClient
from hmbclient.net.security import Security
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey

__all__ = ["SimpleConsumer", "FetchRequest", "LATEST_TIME", "EARLIEST_TIME"]

log = logging.getLogger("hmbclient.consumer")

#: ``get_offsets_before`` time meaning "the log end offset".
LATEST_TIME = -1
#: ``get_offsets_before`` time meaning "the first offset still in the log".
EARLIEST_TIME = -2

_NODE = -1  # the one bootstrap broker


class FetchRequest(NamedTuple):
    """What to fetch: a partition, the offset to start at, and at most ``max_size`` bytes
    (None: the consumer's ``fetch_message_max_bytes``)."""

    topic: str
    partition: int
    offset: int
    max_size: int | None = None


class SimpleConsumer:
    """Stateless low-level consumer of one broker. See the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        so_timeout_ms: int | None = None,
        buffer_size: int | None = None,
        client_id: str | None = None,
        api_version: str | None = None,
        *,
        prefetch: bool | int = True,
        **settings: Any,
    ) -> None:
        """Connect lazily to ``host:port``.

        Args:
            host: the broker's host.
            port: the broker's port.
            so_timeout_ms: how long to wait for an answer (socket.timeout.ms).
            buffer_size: socket receive buffer (socket.receive.buffer.bytes; -1 = OS default).
            client_id: sent with each request.
            api_version: "auto", "0.8", "0.10", "2.1" or "hmb".
            prefetch: how many continuing fetches may run ahead of the caller (True = 2,
                False/0 = none; see the module docstring).
            settings: other SimpleConsumerConfig fields (fetch_message_max_bytes,
                fetch_min_bytes, fetch_wait_max_ms), in any spelling.

        Raises:
            ConfigError: an unknown setting or a bad value.
        """
        given: dict[str, Any] = dict(settings)
        for k, v in (
            ("so_timeout_ms", so_timeout_ms),
            ("buffer_size", buffer_size),
            ("client_id", client_id),
            ("api_version", api_version),
        ):
            if v is not None:
                given[k] = v
        self.config = SimpleConsumerConfig(host=host, port=port, **given)
        cfg = self.config
        self._client = NetClient(
            [(cfg.host, cfg.port)],
            client_id=cfg.client_id,
            api_version=cfg.api_version,
            request_timeout_ms=cfg.so_timeout_ms,
            connect_timeout_ms=cfg.so_timeout_ms,
            receive_buffer_bytes=cfg.buffer_size if cfg.buffer_size > 0 else None,
            security=Security.from_config(cfg),
            name=f"hmbclient-io-simple-{cfg.host}:{cfg.port}",
        )
        self._dialect = self._client.dialect
        self._isolation = isolation_code(cfg.isolation_level)
        depth = 2 if prefetch is True else int(prefetch)
        self._prefetch_depth = depth if self._dialect.max_in_flight != 1 else 0
        # (topic, partition) -> speculative fetches, consecutive, oldest first:
        # (offset, max_size, future, request)
        self._prefetched: dict[tuple[str, int], deque[tuple[int, int, Future[Any], tuple[str, int, int, int]]]] = {}
        self._want: dict[tuple[str, int], int] = {}  # the offset the caller is fetching now
        self._pf_lock = threading.Lock()
        self._closed = False
        # Brokers that ignore max_bytes (HMB): what they sent beyond the asked size, kept for
        # the next call: (topic, partition) -> (offset it starts at, bytes, high watermark).
        self._leftover: dict[tuple[str, int], tuple[int, bytes, int]] = {}

    @classmethod
    def from_properties(cls, props: dict[str, Any], /, **overrides: Any) -> SimpleConsumer:
        """Build from dotted 0.8 property names (``{"host": ..., "port": ..., "socket.timeout.ms": ...}``)."""
        cfg = SimpleConsumerConfig.from_properties(props, **overrides)
        fields = {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
        host, port = fields.pop("host"), fields.pop("port")
        return cls(host, port, **fields)

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def client(self) -> NetClient:
        return self._client

    def add_listener(self, listener: Any) -> None:
        """Receive broker status events (``BrokerEvent``: broker_connected, broker_disconnected,
        broker_unavailable), called on the I/O thread."""
        self._client.add_listener(listener)

    # -- fetching --------------------------------------------------------------------------

    def _timeout_ms(self) -> float:
        return float(self.config.so_timeout_ms + self.config.fetch_wait_max_ms)

    def _send_fetch(self, reqs: Sequence[tuple[str, int, int, int]]) -> Future[Any]:
        cfg = self.config
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        total = 0
        for topic, partition, offset, size in reqs:
            by_topic.setdefault(topic, []).append((partition, offset, size))
            total += size

        def build(versions: BrokerVersions) -> Any:
            # One positional row per partition at the connection's Fetch version (the version
            # drops the fields it lacks: current_leader_epoch before v9, log_start_offset before v5).
            row = versions.request_class(ApiKey.FETCH).nested("topics", "partitions").row(
                "partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "log_start_offset"
            )
            topics = [(topic, [row(p, offset, size, -1, -1) for p, offset, size in parts]) for topic, parts in by_topic.items()]
            return versions.build(
                ApiKey.FETCH,
                replica_id=-1,
                # 0.8's SimpleConsumer asks min_bytes=0 / max_wait_ms=0: "answer at once". Tansu
                # answers max_wait_ms=0 with nothing at all, and with min_bytes=0 it always
                # waits the full max_wait_ms. min_bytes>=1 with max_wait_ms>=1 means the same
                # on every broker: data at once if there is any, else an empty answer after 1 ms.
                max_wait_ms=max(1, cfg.fetch_wait_max_ms),
                min_bytes=max(1, cfg.fetch_min_bytes),
                max_bytes=max(total, 1),
                isolation_level=self._isolation,
                session_id=0,
                session_epoch=-1,
                topics=topics,
                forgotten_topics_data=[],
            )

        return self._client.send(_NODE, build, timeout_ms=self._timeout_ms(), api_key=ApiKey.FETCH)

    def _wait(self, fut: Future[Any]) -> Any:
        # The I/O thread enforces the request deadline; the margin guards against a hang.
        return fut.result(timeout=self._timeout_ms() / 1000.0 + 2.0)

    def _sets(self, resp: Any, reqs: Sequence[tuple[str, int, int, int]]) -> list[ByteBufferMessageSet]:
        found: dict[tuple[str, int], Any] = {}
        for t in resp.topics:
            for p in t.partitions:
                found[(t.topic, p.partition)] = p
        out = []
        for topic, partition, offset, _size in reqs:
            p = found.get((topic, partition))
            if p is None:
                # Some brokers (Tansu) leave a partition with nothing to return out of the answer.
                out.append(ByteBufferMessageSet(topic, partition, offset, b"", -1, None))
                continue
            error = for_code(p.error_code)(f"fetch {topic}-{partition} at offset {offset}") if p.error_code else None
            if self._isolation and hasattr(p, "aborted_transactions"):
                # read_committed (Fetch v4+): the broker cut the set at the last stable offset
                # and named the aborted transactions in it (None: none)
                out.append(
                    ByteBufferMessageSet(
                        topic, partition, offset, p.records, p.high_watermark, error,
                        aborted=p.aborted_transactions or [], last_stable_offset=p.last_stable_offset,
                    )
                )
            else:
                out.append(ByteBufferMessageSet(topic, partition, offset, p.records, p.high_watermark, error))
        return out

    def _norm(self, r: FetchRequest) -> tuple[str, int, int, int]:
        size = self.config.fetch_message_max_bytes if r.max_size is None else int(r.max_size)
        if size <= 0:
            raise ValueError(f"FetchRequest.max_size must be > 0, got {size}")
        return (r.topic, int(r.partition), int(r.offset), size)

    def _grow(self, req: tuple[str, int, int, int], ms: ByteBufferMessageSet) -> ByteBufferMessageSet:
        """Refetch while the set holds only part of one message, doubling the size."""
        topic, partition, offset, size = req
        cap = self.config.fetch_message_max_bytes
        while ms.error is None and (need := first_entry_incomplete(ms.buffer)) is not None:
            if size >= cap:
                raise MessageSizeTooLargeError(
                    f"{topic}-{partition}: the message at offset {offset} needs {need} bytes, more than "
                    f"the fetch size {size} and fetch_message_max_bytes={cap}"
                )
            size = min(size * 2, cap)
            log.debug("%s-%s@%s: message larger than the fetch size; retrying with %d", topic, partition, offset, size)
            sub = (topic, partition, offset, size)
            ms = self._sets(self._wait(self._send_fetch([sub])), [sub])[0]
        return ms

    def fetch(self, request: FetchRequest) -> ByteBufferMessageSet:
        """Fetch one partition.

        Args:
            request: FetchRequest(topic, partition, offset, max_size).

        Returns:
            The message set (iterate for MessageAndOffset values; decoded lazily).

        Raises:
            OffsetOutOfRangeError, NotLeaderForPartitionError, UnknownTopicOrPartitionError, ...:
                the partition's error.
            MessageSizeTooLargeError: one message is larger than fetch_message_max_bytes.
            KafkaConnectionError / RequestTimedOutError: the broker is unreachable or silent.
        """
        req = self._norm(request)
        if self._dialect.ignores_max_bytes:
            return self._fetch_capped(req)
        key = (req[0], req[1])
        ahead = self._prefetch_depth > 0
        pf = None
        if ahead:
            with self._pf_lock:
                self._want[key] = req[2]
                q = self._prefetched.get(key)
                tail = None
                if q:
                    if q[0][0] == req[2] and q[0][1] == req[3]:
                        pf = q.popleft()
                        tail = q[-1] if q else None
                    else:
                        q.clear()  # the caller went elsewhere: forget the speculation
            if tail is not None and tail[2].done():
                # The newest speculation answered while the queue was full: continue it now.
                self._continue(tail[3], tail[2])
        ms: ByteBufferMessageSet | None = None
        if pf is not None:
            try:
                cand = self._sets(self._wait(pf[2]), [req])[0]
                if cand.error is None and len(cand.buffer):
                    ms = cand
            except Exception as e:  # the speculative fetch failed: ask again for real
                log.debug("speculative fetch of %s failed: %s", key, e)
        if ms is None:
            if pf is not None:
                with self._pf_lock:
                    self._prefetched.pop(key, None)  # what follows a bad answer is stale too
            ms = self._sets(self._wait(self._send_fetch_ahead(req) if ahead else self._send_fetch([req])), [req])[0]
        ms = self._grow(req, ms)
        if ms.error is not None:
            raise ms.error
        if ahead and len(ms.buffer):
            # Usually the I/O thread already sent the continuing fetch when this answer came
            # in (see _continue); if not (the answer was waiting here), send it now.
            last = last_offset_of(ms.buffer)
            if last is not None and last >= req[2]:
                self._extend_ahead(req[2], (req[0], req[1], last + 1, req[3]))
        return ms

    def _send_fetch_ahead(self, req: tuple[str, int, int, int]) -> Future[Any]:
        """Send a fetch whose answer, when it arrives, sends the continuing fetch at once."""
        fut = self._send_fetch([req])
        fut.add_done_callback(functools.partial(self._continue, req))
        return fut

    def _extend_ahead(self, after: int, nxt: tuple[str, int, int, int]) -> None:
        """Queue the speculative fetch ``nxt``, which continues the fetch at offset ``after``,
        if that fetch is the caller's current one or the newest speculation, and the queue is
        shorter than the prefetch depth (lock taken here)."""
        key = (nxt[0], nxt[1])
        with self._pf_lock:
            if self._closed:
                return
            q = self._prefetched.get(key)
            if q is None:
                q = self._prefetched[key] = deque()
            if q:
                if q[-1][0] != after:
                    return  # only the newest speculation is continued (a contiguous chain)
            elif self._want.get(key) != after:
                return  # a speculative answer nobody asked for: do not run further ahead
            if len(q) >= self._prefetch_depth:
                return
            fut = self._send_fetch([nxt])
            q.append((nxt[2], nxt[3], fut, nxt))
        # Outside the lock: on an already-answered future add_done_callback runs _continue
        # right here, and _continue re-enters this method (a self-deadlock under the lock).
        fut.add_done_callback(functools.partial(self._continue, nxt))

    def _continue(self, req: tuple[str, int, int, int], fut: Future[Any]) -> None:
        """Done-callback of a fetch (normally on the I/O thread): if the answer belongs to the
        caller's current fetch or to the newest speculative one, send the fetch that continues
        after it right away, so the broker works while the caller decodes. At most
        ``prefetch`` fetches run ahead of the caller."""
        if fut.cancelled() or fut.exception() is not None:
            return
        topic, partition, offset, size = req
        records = None
        for t in fut.result().topics:
            if t.topic == topic:
                for p in t.partitions:
                    if p.partition == partition:
                        if p.error_code:
                            return
                        records = p.records
        if not records:
            return
        last = last_offset_of(records)
        if last is not None and last >= offset:
            self._extend_ahead(offset, (topic, partition, last + 1, size))

    def _fetch_capped(self, req: tuple[str, int, int, int]) -> ByteBufferMessageSet:
        """Fetch for a broker that ignores max_bytes: serve from what it already sent when
        possible, hand out at most ``max_size`` bytes of complete messages, keep the rest."""
        topic, partition, offset, size = req
        key = (topic, partition)
        left = self._leftover.pop(key, None)
        if left is not None and left[0] == offset:
            buf: Any = left[1]
            hw = left[2]
        else:
            ms = self._sets(self._wait(self._send_fetch([req])), [req])[0]
            if ms.error is not None:
                raise ms.error
            buf = bytes(ms.buffer)
            hw = ms.high_watermark
        cut = 0
        n = len(buf)
        while cut + 12 <= n:
            (entry,) = struct.unpack_from(">i", buf, cut + 8)
            end = cut + 12 + entry
            if end > n or end > size:
                break
            cut = end
        if cut == 0 and n:
            need = first_entry_incomplete(buf)
            if need is None:  # a complete first message larger than max_size
                (entry,) = struct.unpack_from(">i", buf, 8)
                need = 12 + entry
                if need <= self.config.fetch_message_max_bytes:
                    # Same rule as for partial messages: the size may grow up to the cap.
                    cut = need
            if cut == 0:
                raise MessageSizeTooLargeError(
                    f"{topic}-{partition}: the message at offset {offset} needs {need} bytes, more than "
                    f"the fetch size {size} and fetch_message_max_bytes={self.config.fetch_message_max_bytes}"
                )
        head, rest = buf[:cut], buf[cut:]
        if rest and (last := last_offset_of(head)) is not None and last_offset_of(rest) is not None:
            self._leftover[key] = (last + 1, rest, hw)
        return ByteBufferMessageSet(topic, partition, offset, head, hw, None)

    def multifetch(self, requests: Sequence[FetchRequest]) -> list[ByteBufferMessageSet]:
        """Fetch several partitions in one round trip (duplicates go in separate requests).

        Returns:
            One message set per request, in the order asked. A set whose partition failed
            has ``.error`` set and raises it when iterated.

        Raises:
            MessageSizeTooLargeError: a message does not fit in the largest fetch.
            KafkaConnectionError: the broker could not be reached.
            RequestTimedOutError: no answer in time.
        """
        norm = [self._norm(r) for r in requests]
        if self._dialect.ignores_max_bytes:
            out_capped: list[ByteBufferMessageSet] = []
            for r in norm:
                try:
                    out_capped.append(self._fetch_capped(r))
                except BrokerError as e:
                    out_capped.append(ByteBufferMessageSet(r[0], r[1], r[2], b"", -1, e))
            return out_capped
        with self._pf_lock:
            for r in norm:
                self._prefetched.pop((r[0], r[1]), None)
                self._want.pop((r[0], r[1]), None)
        # One Fetch may name a partition once: split duplicates into later requests.
        rounds: list[list[int]] = []
        for i, r in enumerate(norm):
            for rnd in rounds:
                if all((norm[j][0], norm[j][1]) != (r[0], r[1]) for j in rnd):
                    rnd.append(i)
                    break
            else:
                rounds.append([i])
        futs = [(rnd, self._send_fetch([norm[i] for i in rnd])) for rnd in rounds]
        out: list[ByteBufferMessageSet | None] = [None] * len(norm)
        for rnd, fut in futs:
            sub = [norm[i] for i in rnd]
            for i, ms in zip(rnd, self._sets(self._wait(fut), sub), strict=True):
                out[i] = self._grow(norm[i], ms)
        return out  # type: ignore[return-value]

    # -- offsets ---------------------------------------------------------------------------

    def get_offsets_before(self, topic: str, partition: int, time: int, max_num_offsets: int) -> list[int]:
        """Valid offsets before ``time``, newest first (Kafka 0.8 ``getOffsetsBefore``).

        Args:
            topic: the partition's topic.
            partition: the partition.
            time: LATEST_TIME (-1), EARLIEST_TIME (-2), or a timestamp in ms.
            max_num_offsets: at most this many offsets.

        Returns:
            A descending list of offsets (at most ``max_num_offsets``).

        Raises:
            UnsupportedByBroker: the dialect has no ListOffsets (HMB); nothing was sent.
            UnknownTopicOrPartitionError, NotLeaderForPartitionError, ...: the broker's error.
            KafkaConnectionError: the broker could not be reached.
            RequestTimedOutError: no answer in time.
        """
        if max_num_offsets < 1:
            return []
        timeout = float(self.config.so_timeout_ms)
        versions: BrokerVersions = self._client.versions(_NODE).result(timeout=timeout / 1000.0 + 2.0)
        top = versions.version(ApiKey.LIST_OFFSETS)  # raises UnsupportedByBroker (HMB)
        if top == 0:
            req = versions.build(
                ApiKey.LIST_OFFSETS,
                replica_id=-1,
                topics=[{"topic": topic, "partitions": [{"partition": partition, "timestamp": int(time), "max_num_offsets": int(max_num_offsets)}]}],
            )
            p = self._list_offsets(req, timeout)
            return sorted((int(o) for o in p.old_style_offsets), reverse=True)[:max_num_offsets]
        # Brokers without v0 (Kafka 4): one offset per query; compose 0.8's list from them.
        latest = self._offset_v1(versions, topic, partition, LATEST_TIME, timeout)
        if time == LATEST_TIME:
            out = [latest]
            if max_num_offsets > 1:
                earliest = self._offset_v1(versions, topic, partition, EARLIEST_TIME, timeout)
                if earliest < latest:
                    out.append(earliest)
            return out
        earliest = self._offset_v1(versions, topic, partition, EARLIEST_TIME, timeout)
        if time == EARLIEST_TIME:
            return [earliest]
        at = self._offset_v1(versions, topic, partition, int(time), timeout)
        first = latest if at < 0 else at
        out = [first]
        if max_num_offsets > 1 and earliest < first:
            out.append(earliest)
        return out

    def _list_offsets(self, req: Any, timeout: float) -> Any:
        resp = self._wait(self._client.send(_NODE, req, timeout_ms=timeout))
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise for_code(p.error_code)(f"ListOffsets {t.topic}-{p.partition}")
                return p
        raise UnknownTopicOrPartitionError("ListOffsets: the broker's answer named no partition")

    def _offset_v1(self, versions: BrokerVersions, topic: str, partition: int, ts: int, timeout: float) -> int:
        req = versions.build(
            ApiKey.LIST_OFFSETS,
            replica_id=-1,
            isolation_level=self._isolation,  # read_committed: LATEST is the last stable offset
            topics=[{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1, "timestamp": ts}]}],
        )
        return int(self._list_offsets(req, timeout).offset)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection; the consumer cannot be used afterwards."""
        with self._pf_lock:
            self._closed = True
            self._prefetched.clear()
        self._client.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
