"""Size-delimited frames, request/response headers, and the two sans-IO connection objects.

Wire layout. Non-flexible versions (request header v1, response header v0):

    request  := size:int32 api_key:int16 api_version:int16 correlation_id:int32
                client_id:nullable_string body
    response := size:int32 correlation_id:int32 body

Flexible versions (KIP-482; the class says ``FLEXIBLE = True``) add a tagged-field section to
each header (request header v2, response header v1):

    request  := size api_key api_version correlation_id client_id:nullable_string tags body
    response := size correlation_id tags body

with one exception, as Kafka: ApiVersions responses always use response header v0 (a client
must read the answer even when the broker did not understand the version it asked for). We
write empty header tag sections and skip unknown header tags when reading (no header tag is
defined that we act on); a malformed section is a ProtocolError like any other bad header. The
server reads a flexible request's fields and ignores bytes after them, as Kafka's generated
parsers do (librdkafka 2.16 sends some); a non-flexible request must end where its fields end.

``ClientConnection`` (client side, h11 style): ``send_request(req) -> (correlation_id, bytes)``
records what response type to expect; ``receive_data(bytes)`` buffers; ``next_response()``
returns ``(correlation_id, response)`` or ``NEED_DATA``. Responses arrive in request order on a
Kafka connection, so a correlation id that is not the oldest one in flight is a ProtocolError.

``ServerConnection`` (broker side, the mirror): ``receive_data``; ``next_request()`` returns
``RequestEvent``, ``UnsupportedRequest`` (header parsed, api/version unknown: the broker decides
between an error response and closing) or ``NEED_DATA``; ``encode_response(correlation_id, resp)``.
The request header is parsed as header v1 whatever the version, which is also right for the
first fields of a flexible header v2 (its client_id stays an int16 string; the tagged fields
that follow are left at the start of ``UnsupportedRequest.body``). So an ApiVersions v3+ probe
from librdkafka or the Java client is seen as api_key 18 with its version and correlation id,
and the broker can answer with the v0 layout and UNSUPPORTED_VERSION (KIP-511).

ApiVersions fallback (client side): a broker that does not know the ApiVersions version we sent
answers in the v0 layout. As the Java client does, a response that does not decode as the
version we asked for is decoded again as v0 and returned as ``ApiVersionsResponse[0]``.

Two more client-side parsers: ``ClientConnection.take_frame(frame)`` matches and decodes one
frame whose size prefix the caller already cut (``hmbclient.net``'s receive path reads large
frames straight into their own buffer), and :class:`HmbClientConnection` accepts HMB's Fetch v0
replies, which carry size 0 and correlation id 0 in the frame header (:func:`fetch_v0_body_end`
finds where such a reply ends).

The size field is checked against ``max_frame_bytes`` (default 100 MiB) *before* anything is
buffered for it, so a hostile size cannot make us allocate. Once a ProtocolError was raised the
connection is dead: every later call raises it again (a byte stream cannot be resynchronised).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any, NamedTuple

from hmbclient.errors import ProtocolError
from hmbclient.protocol.api.base import REQUESTS, RESPONSES, ApiKey, Request, Response
from hmbclient.protocol.types import NullableString, _TaggedSection

__all__ = [
    "NEED_DATA",
    "DEFAULT_MAX_FRAME_BYTES",
    "RequestHeader",
    "RequestEvent",
    "UnsupportedRequest",
    "ClientConnection",
    "ServerConnection",
    "encode_request",
    "FrameBuffer",
    "HmbClientConnection",
    "fetch_v0_body_end",
]

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024

_size = struct.Struct(">i")
_req_hdr = struct.Struct(">hhi")
_corr = struct.Struct(">i")
_i16 = struct.Struct(">h")


#: the header's tagged-field section (no tag is known: all are skipped)
_HEADER_TAGS = _TaggedSection("header", [])
_NO_TAGS = b"\x00"


def _flexible_response_header(rtype: type[Response]) -> bool:
    # Response header v1 for flexible versions, except ApiVersions (always v0, KIP-511).
    return rtype.FLEXIBLE and rtype.API_KEY != ApiKey.API_VERSIONS


def _response_body(rtype: type[Response], frame: bytes | bytearray) -> memoryview:
    """The body of a response frame (size prefix already cut): past the correlation id and,
    for a flexible response header, its tagged fields."""
    body = memoryview(frame)[4:]
    if _flexible_response_header(rtype):
        _, pos = _HEADER_TAGS.read(body, 0)
        body = body[pos:]
    return body


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Any = _NeedData()


class RequestHeader(NamedTuple):
    """The request header fields (v1; also the leading fields of header v2)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class RequestEvent(NamedTuple):
    """A request we implement, decoded."""

    header: RequestHeader
    request: Request


class UnsupportedRequest(NamedTuple):
    """A frame whose header parsed but whose (api_key, api_version) we do not implement."""

    header: RequestHeader
    body: bytes


def encode_request(request: Request, correlation_id: int, client_id: str | None) -> list[Any]:
    """Frame one request (request header v1, or v2 for a flexible version).

    Args:
        request: any request instance (e.g. ``MetadataRequest[1](topics=None)``).
        correlation_id: a signed int32 the response will echo.
        client_id: the header's client id; None is written as a null string.

    Returns:
        The parts (size, header, body parts) to write in order; ``b"".join`` gives the frame.

    Raises:
        ProtocolError: a value does not fit its wire type (e.g. correlation_id outside int32).
    """
    try:
        hdr = _req_hdr.pack(request.API_KEY, request.API_VERSION, correlation_id)
    except struct.error as e:
        raise ProtocolError(f"request header: {e}") from None
    out: list[Any] = [b"", hdr]
    NullableString.write(out, client_id)
    if request.FLEXIBLE:
        out.append(_NO_TAGS)
    request.SCHEMA.write(out, request)
    size = 0
    for p in out:
        size += len(p)
    out[0] = _size.pack(size)
    return out


class FrameBuffer:
    """Accumulates bytes and yields complete frames (without their size prefix).

    The size field is validated as soon as its 4 bytes are here (``peek_size``/``next_frame``),
    before the frame body is waited for; an invalid size fails the buffer for good.
    """

    __slots__ = ("_buf", "max_frame_bytes", "_error")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._buf = bytearray()
        self.max_frame_bytes = max_frame_bytes
        self._error: ProtocolError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Raises the stored ProtocolError once the buffer has failed."""
        if self._error is not None:
            raise self._error
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def peek_size(self) -> int | None:
        """The size field of the next frame, validated, or None if fewer than 4 bytes."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        if len(buf) < 4:
            return None
        (n,) = _size.unpack_from(buf, 0)
        if n < 0 or n > self.max_frame_bytes:
            self._error = ProtocolError(
                f"frame size {n} is outside 0..{self.max_frame_bytes} (max_frame_bytes)"
            )
            raise self._error
        return n

    def next_frame(self) -> bytes | None:
        """The next complete frame's bytes (size prefix removed), or None if incomplete.

        Raises:
            ProtocolError: the size field is negative or over ``max_frame_bytes``.
        """
        n = self.peek_size()
        if n is None or len(self._buf) < 4 + n:
            return None
        buf = self._buf
        # One copy (bytes(buf[a:b]) would make two); the views are released before the
        # bytearray is resized below, which a live export would forbid.
        with memoryview(buf) as mv, mv[4 : 4 + n] as body:
            frame = body.tobytes()
        # bytearray deletion from the front is amortised O(1) in CPython (it moves a start
        # pointer), so draining many small frames does not go quadratic.
        del buf[: 4 + n]
        return frame

    def take(self, n: int) -> bytes:
        """Remove and return exactly n raw bytes (the caller checked they are there)."""
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def fail(self, err: ProtocolError) -> ProtocolError:
        """Mark the stream dead with ``err`` (every later call raises it); returns ``err``."""
        self._error = err
        return err

    @property
    def failed(self) -> ProtocolError | None:
        """The error that killed this stream, or None."""
        return self._error

    @property
    def raw(self) -> bytearray:
        return self._buf


class ClientConnection:
    """Sans-IO client side of one broker connection.

    Invariants: responses are matched to requests in FIFO order by correlation id; once a
    ProtocolError was raised (bad size, mismatched correlation id, undecodable response) every
    later ``send_request``/``receive_data``/``next_response`` raises it again.
    """

    def __init__(self, client_id: str | None = "hmbclient", max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.client_id = client_id
        self._frames = FrameBuffer(max_frame_bytes)
        self._in_flight: deque[tuple[int, type[Response]]] = deque()
        self._next_correlation_id = 0

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def next_correlation_id(self) -> int:
        cid = self._next_correlation_id
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        return cid

    def send_request(self, request: Request, *, expect_response: bool = True, correlation_id: int | None = None) -> tuple[int, bytes]:
        """Frame a request and remember which response type to expect.

        Args:
            request: the request to send.
            expect_response: False for Produce with acks=0: the broker sends no reply, so
                nothing is queued and the next response belongs to the next request.
            correlation_id: use this id instead of the connection's counter.

        Returns:
            ``(correlation_id, frame_bytes)``.

        Raises:
            ProtocolError: the connection has failed, or a value does not fit its wire type.
        """
        if self._frames.failed is not None:
            raise self._frames.failed
        cid = self.next_correlation_id() if correlation_id is None else correlation_id
        data = b"".join(encode_request(request, cid, self.client_id))
        if expect_response:
            self._in_flight.append((cid, request.RESPONSE_TYPE))
        return cid, data

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the socket (any split). Raises ProtocolError once failed."""
        self._frames.feed(data)

    def next_response(self) -> Any:
        """``(correlation_id, response)`` for the oldest request in flight, or NEED_DATA.

        Raises:
            ProtocolError: frame size out of range, a response with nothing in flight, a
                correlation id other than the oldest in flight, or an undecodable body. The
                connection is then dead.
        """
        frame = self._frames.next_frame()
        if frame is None:
            return NEED_DATA
        if not self._in_flight:
            raise self._frames.fail(ProtocolError("response received with no request in flight"))
        if len(frame) < 4:
            raise self._frames.fail(ProtocolError(f"response frame of {len(frame)} bytes has no header"))
        (cid,) = _corr.unpack_from(frame, 0)
        want, rtype = self._in_flight[0]
        if cid != want:
            raise self._frames.fail(
                ProtocolError(f"correlation id {cid} does not match the oldest request in flight ({want})")
            )
        self._in_flight.popleft()
        try:
            body = _response_body(rtype, frame)
            resp = rtype.decode(body)
        except ProtocolError as e:
            if _flexible_response_header(rtype):
                raise self._frames.fail(ProtocolError(f"{rtype.__name__}: {e}")) from None
            resp = _api_versions_v0_fallback(rtype, body)
            if resp is None:
                raise self._frames.fail(ProtocolError(f"{rtype.__name__}: {e}")) from None
        return cid, resp

    def fail_all(self) -> list[int]:
        """Forget every request in flight (connection lost); returns their correlation ids."""
        ids = [cid for cid, _ in self._in_flight]
        self._in_flight.clear()
        return ids

    def take_frame(self, frame: bytes | bytearray) -> tuple[int, Any]:
        """Match one whole frame (size prefix already cut by the caller, e.g. a receive path
        that reads large frames straight into their own buffer) to the oldest request in
        flight and decode it; ``receive_data``/``next_response`` are not involved.

        Returns:
            ``(correlation_id, response)``.

        Raises:
            ProtocolError: no request in flight, a frame with no header, a correlation id
                other than the oldest in flight, or an undecodable body.
        """
        in_flight = self._in_flight
        if not in_flight:
            raise ProtocolError("response received with no request in flight")
        if len(frame) < 4:
            raise ProtocolError(f"response frame of {len(frame)} bytes has no header")
        (cid,) = _corr.unpack_from(frame, 0)
        want, rtype = in_flight[0]
        if cid != want:
            raise ProtocolError(f"correlation id {cid} does not match the oldest request in flight ({want})")
        in_flight.popleft()
        try:
            body = _response_body(rtype, frame)
            return cid, rtype.decode(body)
        except ProtocolError as e:
            if _flexible_response_header(rtype):
                raise ProtocolError(f"{rtype.__name__}: {e}") from None
            resp = _api_versions_v0_fallback(rtype, body)
            if resp is None:
                raise ProtocolError(f"{rtype.__name__}: {e}") from None
            return cid, resp


def fetch_v0_body_end(buf: bytes | bytearray, pos: int) -> int | None:
    """End offset of a Fetch v0 response body starting at ``pos``, or None if incomplete.

    Walks only the length fields (topics, partitions, records size), so a large reply that
    arrives in many pieces is not re-parsed from the start each time beyond this O(topics +
    partitions) walk.

    Raises:
        ProtocolError: a negative count or a null topic name.
    """
    n = len(buf)

    def need(k: int) -> bool:
        return pos + k <= n

    if not need(4):
        return None
    (topics,) = _corr.unpack_from(buf, pos)
    pos += 4
    if topics < 0:
        raise ProtocolError(f"HMB fetch reply: negative topic count {topics}")
    for _ in range(topics):
        if not need(2):
            return None
        (slen,) = _i16.unpack_from(buf, pos)
        if slen < 0:
            raise ProtocolError("HMB fetch reply: null topic name")
        pos += 2 + slen
        if not need(4):
            return None
        (parts,) = _corr.unpack_from(buf, pos)
        pos += 4
        if parts < 0:
            raise ProtocolError(f"HMB fetch reply: negative partition count {parts}")
        for _ in range(parts):
            # partition int32, error_code int16, high_watermark int64, records size int32
            if not need(18):
                return None
            (rlen,) = _corr.unpack_from(buf, pos + 14)
            pos += 18 + max(rlen, 0)
    return pos if pos <= n else None


class HmbClientConnection(ClientConnection):
    """ClientConnection that also accepts HMB's Fetch v0 replies, whose frame header carries
    size 0 and correlation id 0: while a Fetch v0 is the oldest request in flight, such a
    header is recognised, the reply's end found by :func:`fetch_v0_body_end`, and the reply
    attributed to that (single) request."""

    _ZERO_HEADER = b"\x00" * 8

    def next_response(self) -> Any:
        raw = self._frames.raw
        in_flight = self._in_flight
        if in_flight and raw[:8] == self._ZERO_HEADER[: len(raw)]:
            rtype = in_flight[0][1]
            if rtype.API_KEY == ApiKey.FETCH and rtype.API_VERSION == 0:
                # (Fewer than 8 zero bytes: wait; a real frame is never of size 0, so this
                # cannot hold back a normal reply.)
                end = fetch_v0_body_end(raw, 8) if len(raw) >= 8 else None
                if end is None:
                    return NEED_DATA
                data = self._frames.take(end)
                cid, _ = in_flight.popleft()
                try:
                    return cid, rtype.decode(memoryview(data)[8:])
                except ProtocolError as e:
                    raise self._frames.fail(ProtocolError(f"HMB {rtype.__name__}: {e}")) from None
        return super().next_response()


def _api_versions_v0_fallback(rtype: type[Response], body: memoryview) -> Response | None:
    # KIP-511: a broker that does not support the ApiVersions version we sent answers in the
    # v0 layout (error_code + api_keys), like the Java client's ApiVersionsResponse.parse.
    if rtype.API_KEY != ApiKey.API_VERSIONS or rtype.API_VERSION == 0:
        return None
    try:
        return RESPONSES[(ApiKey.API_VERSIONS, 0)].decode(body)
    except ProtocolError:
        return None


class ServerConnection:
    """Sans-IO broker side of one client connection.

    Invariant: once a ProtocolError was raised every later call raises it again.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._frames = FrameBuffer(max_frame_bytes)

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame accepted; a broker lowers it until a SASL client authenticated."""
        return self._frames.max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, n: int) -> None:
        self._frames.max_frame_bytes = n

    def next_raw_frame(self) -> bytes | None:
        """The next size-prefixed frame with no request header (a raw SASL token after a
        SaslHandshake v0), or None if incomplete.

        Raises:
            ProtocolError: the size is out of range (the connection is then dead).
        """
        return self._frames.next_frame()

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the socket (any split). Raises ProtocolError once failed."""
        self._frames.feed(data)

    def next_request(self) -> Any:
        """The next request: ``RequestEvent``, ``UnsupportedRequest`` or ``NEED_DATA``.

        Returns:
            ``RequestEvent(header, request)`` for an (api_key, api_version) we implement;
            ``UnsupportedRequest(header, body)`` for any other, with the header parsed (the
            broker answers UNSUPPORTED_VERSION or closes); NEED_DATA until a frame is complete.

        Raises:
            ProtocolError: frame size out of range, a frame too short for a header, a bad
                client_id, or an undecodable request body. The connection is then dead.
        """
        frame = self._frames.next_frame()
        if frame is None:
            return NEED_DATA
        if len(frame) < 10:
            raise self._frames.fail(ProtocolError(f"request frame of {len(frame)} bytes has no header"))
        api_key, api_version, cid = _req_hdr.unpack_from(frame, 0)
        try:
            client_id, pos = NullableString.read(frame, 8)
        except ProtocolError as e:
            raise self._frames.fail(ProtocolError(f"request header: {e}")) from None
        header = RequestHeader(api_key, api_version, cid, client_id)
        rtype = REQUESTS.get((api_key, api_version))
        if rtype is None:
            return UnsupportedRequest(header, frame[pos:])
        try:
            if rtype.FLEXIBLE:
                _, pos = _HEADER_TAGS.read(frame, pos)
            # A flexible body may be followed by bytes its version does not define: Kafka's
            # generated parsers read the fields and drop the rest, and librdkafka 2.16's
            # all-topics Metadata v12 carries 3 such bytes. Non-flexible bodies stay exact.
            req = rtype.decode(memoryview(frame)[pos:], exact=not rtype.FLEXIBLE)
        except ProtocolError as e:
            raise self._frames.fail(ProtocolError(f"{rtype.__name__} (correlation id {cid}): {e}")) from None
        return RequestEvent(header, req)

    @staticmethod
    def encode_response(correlation_id: int, response: Response) -> list[Any]:
        """Frame a response (response header v0: the correlation id; v1 adds an empty
        tagged-field section for a flexible version other than ApiVersions).

        Returns:
            The parts to write in order (a Records field may be a FileSlice, sent with
            ``os.sendfile``); for plain bytes ``b"".join`` gives the frame.

        Raises:
            ProtocolError: a value does not fit its wire type.
        """
        try:
            out: list[Any] = [b"", _corr.pack(correlation_id)]
        except struct.error as e:
            raise ProtocolError(f"response header: {e}") from None
        if _flexible_response_header(type(response)):
            out.append(_NO_TAGS)
        response.SCHEMA.write(out, response)
        size = 0
        for p in out:
            size += len(p)
        out[0] = _size.pack(size)
        return out
