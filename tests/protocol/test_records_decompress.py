"""Decompression through the optional faster wheels (python-lz4, zstandard): the frames other
Kafka writers produce read the same as through cramjam, and bad input still leaves as
CorruptRecordError."""

from __future__ import annotations

import cramjam
import lz4.frame
import pytest
import zstandard

from hmbclient.errors import CorruptRecordError
from hmbclient.protocol.records import GZIP, LZ4, SNAPPY, ZSTD, codecs, decode_records, v2

DATA = b"".join(b"record %06d " % i + bytes(range(i % 200)) for i in range(3000))


def test_zstd_frames_with_and_without_content_size() -> None:
    with_size = zstandard.ZstdCompressor(level=3).compress(DATA)
    # the Java client's streaming compressor writes no content size
    without = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(DATA)
    streamed = zstandard.ZstdCompressor().compressobj()
    chunked = streamed.compress(DATA[:5000]) + streamed.compress(DATA[5000:]) + streamed.flush()
    for frame in (with_size, without, chunked, bytes(cramjam.zstd.compress(DATA))):
        assert codecs.decompress(ZSTD, frame) == DATA
        assert codecs.decompress(ZSTD, memoryview(frame)) == DATA
    # concatenated frames are one zstd stream
    assert codecs.decompress(ZSTD, without + without) == DATA + DATA


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_truncated_or_damaged_zstd_is_corrupt(cut: int) -> None:
    for frame in (
        zstandard.ZstdCompressor().compress(DATA),
        zstandard.ZstdCompressor(write_content_size=False).compress(DATA),
    ):
        with pytest.raises(CorruptRecordError):
            codecs.decompress(ZSTD, frame[:-cut])
        damaged = bytearray(frame)
        damaged[len(frame) // 2] ^= 0xFF
        damaged[len(frame) // 2 + 1] ^= 0xFF
        try:
            out = codecs.decompress(ZSTD, bytes(damaged))
        except CorruptRecordError:
            continue
        assert out != DATA  # what zstd cannot detect, the batch CRC does


def test_lz4_frames_of_other_writers() -> None:
    frames = [
        lz4.frame.compress(DATA),
        lz4.frame.compress(DATA, content_checksum=True, store_size=True),
        lz4.frame.compress(DATA, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=True),
        codecs.compress(LZ4, DATA, 2),
        codecs.compress(LZ4, DATA, 0),  # KAFKA-3160's header checksum
    ]
    for frame in frames:
        assert codecs.decompress(LZ4, frame) == DATA
        assert codecs.decompress(LZ4, memoryview(frame)) == DATA
    with pytest.raises(CorruptRecordError):
        codecs.decompress(LZ4, frames[0][:-5])
    with pytest.raises(CorruptRecordError):
        codecs.decompress(LZ4, b"\x04\x22\x4d\x18garbage")


def test_snappy_xerial_join_of_blocks() -> None:
    framed = codecs.compress(SNAPPY, DATA, 2)
    assert codecs.decompress(SNAPPY, framed) == DATA
    assert type(codecs.decompress(SNAPPY, framed)) is bytes


@pytest.mark.parametrize("codec", [LZ4, ZSTD])
def test_compressed_batches_decode(codec: int) -> None:
    items = [(None, b"v%05d" % i * 20, 1_700_000_000_000 + i) for i in range(2000)]
    batch = v2.encode(codec, items, 0, 0)
    recs = decode_records(batch)
    assert [(r.offset, r.timestamp, r.value) for r in recs] == [
        (i, item[2], item[1]) for i, item in enumerate(items)
    ]


def test_lz4_into_the_reused_buffer_is_copied_out() -> None:
    """Consecutive lz4 batches decompress into one reused buffer: records of the first batch
    keep their own bytes after the second overwrote it, whatever the frame's block options."""
    first = [(None, b"a%04d" % i * 30, 1) for i in range(500)]
    second = [(b"k", b"b%04d" % i * 30, 2) for i in range(500)]
    a = decode_records(v2.encode(LZ4, first, 0, 0))
    b = decode_records(v2.encode(LZ4, second, 500, 0))
    assert [r.value for r in a] == [item[1] for item in first]
    assert [r.value for r in b] == [item[1] for item in second]
    assert all(type(r.value) is bytes for r in a + b)
    view = codecs.decompress_reused(LZ4, lz4.frame.compress(DATA, block_linked=True, content_checksum=True))
    assert bytes(view) == DATA
    view = codecs.decompress_reused(LZ4, lz4.frame.compress(DATA, store_size=True, block_checksum=True))
    assert bytes(view) == DATA
    with pytest.raises(CorruptRecordError):
        codecs.decompress_reused(LZ4, lz4.frame.compress(DATA)[:-9])
    assert codecs.decompress_reused(LZ4, codecs.compress(LZ4, DATA, 0)) == DATA  # KAFKA-3160


def test_gzip_into_the_reused_buffer() -> None:
    import gzip
    import zlib

    one = gzip.compress(DATA)
    assert bytes(codecs.decompress_reused(GZIP, one)) == DATA
    # several members: the last one's ISIZE is too small a bound, the general path reads all
    assert bytes(codecs.decompress_reused(GZIP, one + gzip.compress(b"tail"))) == DATA + b"tail"
    assert bytes(codecs.decompress_reused(GZIP, gzip.compress(b"") + one)) == DATA
    assert bytes(codecs.decompress_reused(GZIP, zlib.compress(DATA))) == DATA  # zlib header
    with pytest.raises(CorruptRecordError):
        codecs.decompress_reused(GZIP, one[:-10])
    damaged = bytearray(one)
    damaged[-6] ^= 0xFF  # the CRC32 trailer
    with pytest.raises(CorruptRecordError):
        codecs.decompress_reused(GZIP, bytes(damaged))
