"""Kafka record formats, sans-IO: MessageSet v0/v1 (magic 0/1) and RecordBatch v2 (magic 2).

    encode_records(magic, codec, items, base_offset=0, timestamp_ms=None) -> bytes
    iter_records(buf) / decode_records(buf)        -> Record(offset, timestamp, key, value, headers)
    records.decode_segments(buf)                   -> Records and uniform.UniformRun   columnar readers
    scan_entries(buf, verify_crc=True)             -> (entries, valid_bytes)     log recovery, index
    assign_offsets(buf, next_offset, *, max_message_bytes=None)
                                                   -> (bytes, count, last_offset, max_ts, magic)
    convert_records(buf, to_magic)                 -> bytes                      old fetch versions

Modules: ``codecs`` (gzip, xerial snappy, lz4 frame, zstd), ``legacy`` (magic 0/1), ``v2``
(RecordBatch), ``records`` (the format-agnostic entry points above), ``base`` (shared nouns).
"""

from .base import NO_TIMESTAMP, Entry, Record
from .codecs import GZIP, LZ4, NONE, SNAPPY, ZSTD, codec_from_name
from .records import (
    assign_offsets,
    convert_records,
    decode_records,
    encode_records,
    iter_records,
    max_magic_for_fetch,
    max_magic_for_produce,
    scan_entries,
)

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "codec_from_name",
    "NO_TIMESTAMP",
    "Record",
    "Entry",
    "encode_records",
    "iter_records",
    "decode_records",
    "scan_entries",
    "assign_offsets",
    "convert_records",
    "max_magic_for_fetch",
    "max_magic_for_produce",
]
