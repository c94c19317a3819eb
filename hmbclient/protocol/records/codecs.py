"""Compression codecs of the Kafka record formats, as Kafka frames them.

    NONE 0, GZIP 1 (gzip container), SNAPPY 2 (xerial block framing), LZ4 3 (LZ4 frame),
    ZSTD 4 (zstd frame; RecordBatch v2 only)

``compress(codec, data, magic)`` / ``decompress(codec, data, magic)`` take any bytes-like object
and return ``bytes``. Every decompression failure, whatever library raised it, leaves as
:class:`CorruptRecordError`; nothing here retries.

Snappy: Kafka (through xerial's snappy-java) writes ``b"\\x82SNAPPY\\x00"`` + int32 version 1 +
int32 compat 1, then ``[int32 length][raw snappy block]...`` over 32 KiB chunks. Readers also
accept one plain raw snappy block (librdkafka and some producers send that).

LZ4: we write the frame ourselves around ``cramjam.lz4.compress_block`` so the descriptor is
exactly Kafka's own (FLG 0x60: version 1, independent blocks, no checksums, no content size;
BD 0x40: 64 KiB blocks). Kafka 0.8/0.9 (magic 0) computed the frame's header checksum over the
magic number too (KAFKA-3160); for magic 0 we write that broken checksum, as kafka-python does,
and on read we accept either checksum.

Decompression uses the python-lz4 and zstandard wheels when they are installed (the ``fast``
extra): they return ``bytes`` without cramjam's extra copy, and zstandard is 3-4x faster on
frames that carry their content size. Without them cramjam does everything.
"""

from __future__ import annotations

import struct
import zlib
from threading import local as _thread_local  # per-thread scratch only: no threads, no locks
from typing import Any

import cramjam

from hmbclient.errors import CorruptRecordError

# Optional, faster decompressors (the lz4 and zstandard wheels); cramjam does without them.
try:
    import lz4.frame as _lz4_frame
except ImportError:  # pragma: no cover - exercised where the wheel is absent
    _lz4_frame = None
try:
    import zstandard as _zstd
except ImportError:  # pragma: no cover
    _zstd = None  # type: ignore[assignment]
# A zstandard decompressor must not be used by two threads at once (it releases the GIL while
# it works): one per thread, made on first use.
_zstd_local = _thread_local()


def _zstd_decompressor() -> Any:
    try:
        return _zstd_local.decompressor
    except AttributeError:
        _zstd_local.decompressor = d = _zstd.ZstdDecompressor()
        return d

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "codec_from_name",
    "compress",
    "decompress",
    "xxh32",
]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_BY_NAME = {v: k for k, v in CODEC_NAMES.items()}
# Names other clients and Kafka 0.8 configs use for the same codecs.
_BY_NAME.update({"uncompressed": NONE, "nocompressioncodec": NONE, "": NONE})

GZIP_LEVEL = 6  # java.util.zip.Deflater's default, which the Kafka producer uses
ZSTD_LEVEL = 3  # Kafka's default zstd level (KIP-390)


def codec_from_name(name: str | int | None) -> int:
    """The codec id for a name (``"gzip"``, ``"snappy"``, ``"lz4"``, ``"zstd"``, ``"none"``).

    Args:
        name: a codec name (case-insensitive), ``None`` (no compression), or a codec id 0..4.

    Returns:
        The codec id, one of NONE, GZIP, SNAPPY, LZ4, ZSTD.

    Raises:
        ValueError: an unknown name or id.
    """
    if name is None:
        return NONE
    if isinstance(name, int) and not isinstance(name, bool):
        if name in CODEC_NAMES:
            return name
        raise ValueError(f"unknown compression codec id {name}")
    if isinstance(name, str):
        codec = _BY_NAME.get(name.strip().lower())
        if codec is not None:
            return codec
    raise ValueError(f"unknown compression codec {name!r}")


# --- gzip ------------------------------------------------------------------------------------


def _gzip_compress(data: Any) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: Any) -> bytes:
    # wbits 47 = gzip or zlib header, detected. Concatenated gzip members are legal gzip.
    decompressor = zlib.decompressobj(47)
    out = decompressor.decompress(data)
    if not decompressor.eof:
        raise CorruptRecordError("gzip: truncated stream")
    rest = decompressor.unused_data
    if not rest:
        return out
    parts = [out]
    while rest:
        decompressor = zlib.decompressobj(47)
        parts.append(decompressor.decompress(rest))
        if not decompressor.eof:
            raise CorruptRecordError("gzip: truncated stream")
        rest = decompressor.unused_data
    return b"".join(parts)


# --- snappy (xerial framing) -----------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_I32 = struct.Struct(">i")


def _snappy_compress(data: Any) -> bytes:
    mv = memoryview(data)
    parts = [_XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    # At least one block: readers tell xerial framing from raw snappy by a length over 16.
    for i in range(0, max(len(mv), 1), _XERIAL_BLOCK):
        block = bytes(compress_raw(mv[i : i + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Any) -> bytes:
    mv = memoryview(data)
    if len(mv) >= 16 and mv[:8] == _XERIAL_MAGIC:
        # version/compat (bytes 8..16) are ignored: some producers write them little-endian.
        parts = []
        decompress_raw = cramjam.snappy.decompress_raw
        pos = 16
        end = len(mv)
        while pos < end:
            if pos + 4 > end:
                raise CorruptRecordError("snappy: truncated xerial block length")
            (n,) = _I32.unpack_from(mv, pos)
            pos += 4
            if n < 0 or pos + n > end:
                raise CorruptRecordError("snappy: xerial block runs past the data")
            parts.append(decompress_raw(mv[pos : pos + n]))  # joined straight from cramjam's buffers
            pos += n
        return b"".join(parts)
    return bytes(cramjam.snappy.decompress_raw(mv))


# --- lz4 frame -------------------------------------------------------------------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (only ever run over a few frame-descriptor bytes, so pure Python is fine)."""

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _M32

    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i <= n - 16:
            for lane in range(4):
                word = int.from_bytes(data[i : i + 4], "little")
                v[lane] = (rotl((v[lane] + word * _P2) & _M32, 13) * _P1) & _M32
                i += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32
        h = (rotl(h, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M32
        h = (rotl(h, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, block independence, no checksums, no content size
_LZ4_BD = 0x40  # 64 KiB maximum block size
_LZ4_BLOCK = 64 * 1024
_LZ4_HC = (xxh32(bytes((_LZ4_FLG, _LZ4_BD))) >> 8) & 0xFF
_LZ4_HC_KAFKA_3160 = (xxh32(_LZ4_MAGIC + bytes((_LZ4_FLG, _LZ4_BD))) >> 8) & 0xFF
_LZ4_HEADER = _LZ4_MAGIC + bytes((_LZ4_FLG, _LZ4_BD, _LZ4_HC))
_LZ4_HEADER_V0 = _LZ4_MAGIC + bytes((_LZ4_FLG, _LZ4_BD, _LZ4_HC_KAFKA_3160))
_U32LE = struct.Struct("<I")
_LZ4_END = b"\x00\x00\x00\x00"


def _lz4_compress(data: Any, magic: int) -> bytes:
    mv = memoryview(data)
    parts = [_LZ4_HEADER_V0 if magic == 0 else _LZ4_HEADER]
    compress_block = cramjam.lz4.compress_block
    for i in range(0, len(mv), _LZ4_BLOCK):
        chunk = mv[i : i + _LZ4_BLOCK]
        block = bytes(compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            parts.append(_U32LE.pack(len(chunk) | 0x80000000))
            parts.append(bytes(chunk))
        else:
            parts.append(_U32LE.pack(len(block)))
            parts.append(block)
    parts.append(_LZ4_END)
    return b"".join(parts)


def _lz4_fix_header_checksum(data: Any) -> bytes | None:
    """The frame with the header checksum recomputed the correct way, or None if it has no
    frame header to fix (Kafka 0.8/0.9 frames, KAFKA-3160)."""
    raw = bytes(data)
    if len(raw) < 7 or raw[:4] != _LZ4_MAGIC:
        return None
    flg = raw[4]
    hc_pos = 15 if flg & 0x08 else 7  # FLG bit 3: an 8-byte content size follows BD
    hc_pos -= 1
    if len(raw) <= hc_pos:
        return None
    hc = (xxh32(raw[4:hc_pos]) >> 8) & 0xFF
    if raw[hc_pos] == hc:
        return None
    return raw[:hc_pos] + bytes((hc,)) + raw[hc_pos + 1 :]


def _lz4_decompress(data: Any) -> bytes:
    if _lz4_frame is not None:
        # python-lz4 (optional) returns bytes without cramjam's extra copy, and is faster on
        # frames without a content size (Kafka's).
        try:
            return _lz4_frame.decompress(data)
        except RuntimeError:
            fixed = _lz4_fix_header_checksum(data)
            if fixed is None:
                raise
            return _lz4_frame.decompress(fixed)
    try:
        return bytes(cramjam.lz4.decompress(data))
    except cramjam.DecompressionError:
        fixed = _lz4_fix_header_checksum(data)
        if fixed is None:
            raise
        return bytes(cramjam.lz4.decompress(fixed))


# --- zstd ------------------------------------------------------------------------------------


def _zstd_decompress(data: Any) -> bytes:
    if _zstd is not None:
        # zstandard (optional) is 3-4x faster than cramjam on frames that carry their content
        # size (librdkafka's, ours); a frame without one (the Java client's streaming
        # compressor) goes through a streaming decompressor, which must reach the frame's end.
        try:
            return _zstd_decompressor().decompress(data)
        except _zstd.ZstdError:
            obj = _zstd_decompressor().decompressobj()
            out = obj.decompress(data)
            if not obj.eof:
                raise CorruptRecordError("zstd: truncated frame") from None
            if obj.unused_data:
                out += _zstd_decompress(obj.unused_data)  # concatenated frames
            return out
    return bytes(cramjam.zstd.decompress(data))


# --- decompressing into a reused buffer -------------------------------------------------------
# A fresh output buffer of a megabyte or more per batch costs more than the decompression
# itself: glibc hands out (and takes back) such buffers as fresh pages, which are page-faulted
# in again each time (~470 faults, ~1 ms, per MiB of lz4 output grown by reallocation). The
# consumer's v2 decode reads the records out of the decompressed bytes and copies each key and
# value, so it can decompress into one buffer per thread, reused from batch to batch.

_scratch = _thread_local()
_SCRATCH_KEEP = 16 << 20  # larger outputs get a buffer of their own, not kept
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _scratch_view(size: int) -> memoryview:
    buf = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < size:
        buf = bytearray(size)
        if size <= _SCRATCH_KEEP:
            _scratch.buf = buf
    return memoryview(buf)


def _lz4_into_scratch(mv: memoryview) -> memoryview | None:
    """An LZ4 frame decompressed into the scratch buffer, or None to take the general path
    (not a frame this reads, or a bound larger than the scratch buffer keeps)."""
    n = len(mv)
    if n < 7 or mv[:4] != _LZ4_MAGIC:
        return None
    flg = mv[4]
    block_max = _LZ4_BLOCK_MAX.get((mv[5] >> 4) & 7)
    if flg >> 6 != 1 or block_max is None:
        return None
    if flg & 0x08:  # content size: exact
        bound = int.from_bytes(mv[6:14], "little")
    else:  # at most one maximal block per block
        pos = 7
        block_checksum = 4 if flg & 0x10 else 0
        blocks = 0
        while True:
            if pos + 4 > n:
                return None
            (size,) = _U32LE.unpack_from(mv, pos)
            pos += 4
            if not size:
                break
            pos += (size & 0x7FFFFFFF) + block_checksum
            blocks += 1
        bound = blocks * block_max
    if bound > _SCRATCH_KEEP:
        return None
    out = _scratch_view(bound)
    return out[: cramjam.lz4.decompress_into(mv, out)]


def _gzip_into_scratch(mv: memoryview) -> memoryview | None:
    """A gzip stream decompressed into the scratch buffer, sized from its last member's ISIZE
    (exact for one member; for several, too small, so cramjam refuses and the general path
    reads it), or None to take the general path."""
    if len(mv) < 18 or mv[0] != 0x1F or mv[1] != 0x8B:
        return None
    bound = int.from_bytes(mv[-4:], "little")
    if bound > _SCRATCH_KEEP:
        return None
    out = _scratch_view(bound)
    return out[: cramjam.gzip.decompress_into(mv, out)]


def decompress_reused(codec: int, data: Any) -> bytes | memoryview:
    """:func:`decompress`, but lz4 and gzip may come back as a view of this thread's reused
    buffer, valid only until the next call in the same thread (copy out what is kept). (Snappy
    and zstd outputs are allocated at their exact size, which glibc reuses without new pages.)

    Raises:
        CorruptRecordError: as :func:`decompress` (anything the reused path cannot read is
            handed to it).
    """
    try:
        if codec == LZ4:
            view = _lz4_into_scratch(memoryview(data))
        elif codec == GZIP:
            view = _gzip_into_scratch(memoryview(data))
        else:
            view = None
        if view is not None:
            return view
    except Exception:  # cramjam.DecompressionError, ...: decompress says what is wrong
        pass
    return decompress(codec, data, 2)


# --- entry points ----------------------------------------------------------------------------


def compress(codec: int, data: Any, magic: int = 2) -> bytes:
    """Compress ``data`` the way Kafka frames ``codec`` for messages of ``magic``.

    Raises:
        ValueError: an unknown codec, or zstd for magic 0/1.
    """
    if codec == GZIP:
        return _gzip_compress(data)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return _lz4_compress(data, magic)
    if codec == ZSTD:
        if magic < 2:
            raise ValueError("zstd needs RecordBatch v2 (magic 2)")
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    if codec == NONE:
        return bytes(data)
    raise ValueError(f"unknown compression codec id {codec}")


def decompress(codec: int, data: Any, magic: int = 2) -> bytes:
    """Decompress a record set compressed with ``codec``.

    Raises:
        CorruptRecordError: the data does not decompress, or the codec id is unknown.
    """
    try:
        if codec == GZIP:
            return _gzip_decompress(data)
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return _lz4_decompress(data)
        if codec == ZSTD:
            return _zstd_decompress(data)
        if codec == NONE:
            return bytes(data)
    except CorruptRecordError:
        raise
    except Exception as e:  # zlib.error, cramjam.DecompressionError, ValueError, ...
        raise CorruptRecordError(f"{CODEC_NAMES[codec]}: cannot decompress: {e}") from None
    raise CorruptRecordError(f"unknown compression codec id {codec}")
