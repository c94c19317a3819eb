"""Compression codecs as Kafka frames them: xerial snappy, LZ4 frames (incl. KAFKA-3160), gzip."""

from __future__ import annotations

import gzip
import os
import struct

import aiokafka.codec as aiokafka_codec
import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hmbclient.errors import CorruptRecordError, ProtocolError
from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    codec_from_name,
    decode_records,
    encode_records,
)
from hmbclient.protocol.records.codecs import compress, decompress, xxh32

SAMPLES = [b"", b"x", b"hello kafka " * 5000, os.urandom(70_000), bytes(200_000)]


def test_codec_from_name() -> None:
    assert codec_from_name(None) == NONE
    assert [codec_from_name(n) for n in ("none", "gzip", "snappy", "lz4", "zstd")] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert codec_from_name("GZIP") == GZIP
    assert codec_from_name(3) == LZ4
    for bad in ("brotli", "", 7, -1, True):
        if bad == "":
            assert codec_from_name(bad) == NONE
            continue
        with pytest.raises(ValueError):
            codec_from_name(bad)


def test_xxh32_known_vectors() -> None:
    # Reference values of the xxHash32 spec (seed 0).
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_round_trip(codec: int, data: bytes) -> None:
    for magic in (0, 1, 2):
        if codec == ZSTD and magic < 2:
            continue
        assert decompress(codec, compress(codec, data, magic), magic) == data
        assert decompress(codec, memoryview(compress(codec, data, magic)), magic) == data


@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_snappy_is_xerial_framed_and_peer_compatible(data: bytes) -> None:
    out = compress(SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert aiokafka_codec.snappy_decode(out) == data
    assert decompress(SNAPPY, aiokafka_codec.snappy_encode(data)) == data
    # plain raw snappy (no xerial header) is read too
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_xerial_with_little_endian_version_fields() -> None:
    data = b"abc" * 100
    block = bytes(cramjam.snappy.compress_raw(data))
    framed = b"\x82SNAPPY\x00" + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(SNAPPY, framed) == data


@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_lz4_frame_is_kafkas_and_peer_compatible(data: bytes) -> None:
    out = compress(LZ4, data, 1)
    # magic, FLG 0x60 (v1, independent blocks), BD 0x40 (64 KiB), then the header checksum
    assert out[:6] == b"\x04\x22\x4d\x18\x60\x40"
    assert out[6] == (xxh32(b"\x60\x40") >> 8) & 0xFF
    assert bytes(cramjam.lz4.decompress(out)) == data
    assert aiokafka_codec.lz4_decode(out) == data
    assert decompress(LZ4, aiokafka_codec.lz4_encode(data), 1) == data


def test_lz4_magic0_uses_the_kafka_3160_header_checksum() -> None:
    data = b"old broker " * 1000
    out = compress(LZ4, data, 0)
    # Kafka 0.8/0.9 hashed the 4 magic bytes too (what kafka-python's lz4_encode_old_kafka does)
    assert out[6] == (xxh32(out[0:6]) >> 8) & 0xFF
    assert out[6] != (xxh32(out[4:6]) >> 8) & 0xFF
    with pytest.raises(cramjam.DecompressionError):  # a strict LZ4 reader rejects it
        cramjam.lz4.decompress(out)
    assert decompress(LZ4, out, 0) == data


def test_lz4_reads_broken_checksum_frames_from_other_writers() -> None:
    """A frame from another writer (content checksum, content size) with its header checksum
    recomputed the KAFKA-3160 way: still readable, whatever magic it came with."""
    data = b"payload " * 3000
    frame = bytearray(cramjam.lz4.compress(data))
    flg = frame[4]
    hc_pos = 14 if flg & 0x08 else 6
    frame[hc_pos] = (xxh32(bytes(frame[0:hc_pos])) >> 8) & 0xFF
    assert decompress(LZ4, bytes(frame), 0) == data
    assert decompress(LZ4, bytes(frame), 1) == data


def test_gzip_reads_concatenated_members_and_zlib() -> None:
    data = b"abc" * 1000
    two = gzip.compress(data[:1000]) + gzip.compress(data[1000:])
    assert decompress(GZIP, two) == data
    assert decompress(GZIP, compress(GZIP, data)) == data
    assert gzip.decompress(compress(GZIP, data)) == data


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_garbage_raises_corrupt_record(codec: int) -> None:
    good = compress(codec, b"hello world" * 100)
    bads = [b"garbage that is not compressed", good[: len(good) // 2]]
    if codec != SNAPPY:  # b"" and b"\x00" are raw snappy encodings of b""
        bads += [b"", b"\x00"]
    for bad in bads:
        with pytest.raises(CorruptRecordError):
            decompress(codec, bad)


@given(st.binary(max_size=300), st.sampled_from([GZIP, SNAPPY, LZ4, ZSTD]))
def test_decompress_arbitrary_bytes_raises_only_corrupt(data: bytes, codec: int) -> None:
    try:
        decompress(codec, data, 0)
    except ProtocolError:
        pass


def test_zstd_needs_magic_2() -> None:
    with pytest.raises(ValueError):
        encode_records(1, ZSTD, [(None, b"v", 1)])
    with pytest.raises(ValueError):
        compress(ZSTD, b"x", 0)
    buf = encode_records(2, ZSTD, [(None, b"v" * 1000, 1)] * 10)
    assert [r.value for r in decode_records(buf)] == [b"v" * 1000] * 10
