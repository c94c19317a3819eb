"""Golden bytes for the record formats, checked against independent implementations.

Two peers, both real code from other projects: kafka-python's record builders/readers
(``kafka.record``) and aiokafka's C record extensions (``aiokafka.record``). Bytes we encode must
decode with the peer's reader, and bytes the peer's builder produces must decode with ours, for
magic 0, 1 and 2 with every codec the peer implements (zstd only in v2; aiokafka refuses
magic 0 LZ4, the KAFKA-3160 frame). kafka-python's snappy/lz4/zstd need python-snappy, lz4,
zstandard and xxhash, which are test dependencies: when one is missing its cases fail (nothing
is skipped). tests/protocol/test_records_codecs.py covers the magic 0 LZ4 frame too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiokafka.record.default_records as aiokafka_default
import aiokafka.record.legacy_records as aiokafka_legacy
import aiokafka.record.memory_records as aiokafka_memory
import kafka.codec as kafka_codec
import kafka.record as kafka_record
import pytest

from hmbclient.protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    assign_offsets,
    decode_records,
    encode_records,
    iter_records,
    scan_entries,
)

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
BASE_TS = 1_700_000_000_000

# (key, value, timestamp, headers): null keys, empty and null values, headers (v2 only).
ITEMS: list[tuple[Any, Any, int, list[tuple[str, bytes | None]]]] = [
    (None, b"value-0", BASE_TS, []),
    (b"key-1", b"value-1" * 40, BASE_TS + 1, [("h1", b"x"), ("h2", None)]),
    (b"", b"", BASE_TS + 1, []),
    (b"k3", None, BASE_TS - 5, [("\u00e9t\u00e9", b"")]),
    (None, bytes(range(256)) * 4, BASE_TS + 100_000, []),
    (b"key-5", b"v", BASE_TS + 7, []),
]


def _items(magic: int) -> list[tuple[Any, ...]]:
    if magic == 2:
        return [(k, v, t, h) for k, v, t, h in ITEMS]
    return [(k, v, t) for k, v, t, _ in ITEMS]


def _expected(magic: int, base_offset: int) -> list[tuple[Any, ...]]:
    out = []
    for i, (k, v, t, h) in enumerate(ITEMS):
        ts = t if magic else -1
        headers = tuple(h) if magic == 2 else ()
        out.append((base_offset + i, ts, k, v, headers))
    return out


def _kafka_python_supports(magic: int, codec: int) -> bool:
    # Every codec: its optional libraries (python-snappy, lz4, xxhash, zstandard) are test
    # dependencies, so a missing one fails the case loudly instead of skipping it.
    return codec != ZSTD or magic == 2


def _aiokafka_supports(magic: int, codec: int) -> bool:
    if codec == ZSTD:
        return magic == 2
    return not (codec == LZ4 and magic == 0)  # aiokafka refuses KAFKA-3160 frames


# --- the peers -------------------------------------------------------------------------------


def kp_build(magic: int, codec: int, items: list[tuple[Any, ...]]) -> bytes:
    builder = kafka_record.MemoryRecordsBuilder(magic, codec, batch_size=1 << 24)
    for it in items:
        headers = list(it[3]) if len(it) > 3 else None
        assert builder.append(it[2], it[0], it[1], headers=headers) is not None
    builder.close()
    return bytes(builder.buffer())


def kp_read(buf: bytes) -> list[tuple[Any, ...]]:
    out = []
    records = kafka_record.MemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return out


def aio_build(magic: int, codec: int, items: list[tuple[Any, ...]]) -> bytes:
    if magic == 2:
        builder: Any = aiokafka_default.DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 24,
        )
        for offset, it in enumerate(items):
            assert builder.append(offset, it[2], it[0], it[1], list(it[3])) is not None
    else:
        builder = aiokafka_legacy.LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 24)
        for offset, it in enumerate(items):
            assert builder.append(offset, it[2], it[0], it[1]) is not None
    return bytes(builder.build())


def aio_read(buf: bytes) -> list[tuple[Any, ...]]:
    out = []
    records = aiokafka_memory.MemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return out


PEERS: dict[str, tuple[Callable[..., bytes], Callable[[bytes], list[Any]], Callable[..., bool]]] = {
    "kafka-python": (kp_build, kp_read, _kafka_python_supports),
    "aiokafka": (aio_build, aio_read, _aiokafka_supports),
}

CASES = [
    (peer, magic, codec)
    for peer in PEERS
    for magic in (0, 1, 2)
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD)
    if PEERS[peer][2](magic, codec)
]


def _ids(case: tuple[str, int, int]) -> str:
    return f"{case[0]}-v{case[1]}-{CODEC_NAMES[case[2]]}"


def _require_peer(peer: str, magic: int, codec: int) -> None:
    # CASES holds only what the peer can do in principle; a missing library must fail.
    assert PEERS[peer][2](magic, codec)
    if peer == "kafka-python":
        assert kafka_codec.has_snappy() and kafka_codec.has_lz4() and kafka_codec.has_zstd(), (
            "kafka-python's codec libraries are missing: pip install -e '.[test]'"
        )
        assert kafka_codec.xxhash is not None, "kafka-python needs xxhash: pip install -e '.[test]'"


def _ours(recs: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]


def _normalise_peer(magic: int, recs: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    # Peers report magic 0 timestamps as None where we report NO_TIMESTAMP (-1).
    return [(o, -1 if magic == 0 else t, k, v, tuple(h)) for o, t, k, v, h in recs]


@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("base_offset", [0, 1234])
def test_peer_reads_what_we_encode(case: tuple[str, int, int], base_offset: int) -> None:
    peer, magic, codec = case
    _require_peer(peer, magic, codec)
    buf = encode_records(magic, codec, _items(magic), base_offset=base_offset)
    got = _normalise_peer(magic, PEERS[peer][1](buf))
    assert got == _expected(magic, base_offset)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_we_read_what_peer_builds(case: tuple[str, int, int]) -> None:
    peer, magic, codec = case
    _require_peer(peer, magic, codec)
    buf = PEERS[peer][0](magic, codec, _items(magic))
    recs = decode_records(buf)
    expected = _expected(magic, 0)
    if magic == 1 and codec != NONE:
        # A producer's magic 1 wrapper carries offset 0 and relative inner offsets 0..n-1; the
        # broker gives the wrapper its last absolute offset. Until then they read as -(n-1)..0.
        shift = -(len(ITEMS) - 1)
        expected = [(o + shift, *rest) for o, *rest in expected]
    assert _ours(recs) == expected
    assert list(iter_records(memoryview(buf))) == recs
    assert list(iter_records(bytearray(buf))) == recs
    entries, valid = scan_entries(buf)
    assert valid == len(buf)
    assert sum(e.count for e in entries) == len(ITEMS)
    # and once the broker has assigned offsets, everything is absolute
    new, count, last, max_ts, m = assign_offsets(buf, 500)
    assert (count, last, m) == (len(ITEMS), 500 + len(ITEMS) - 1, magic)
    assert _ours(decode_records(new)) == _expected(magic, 500)
    if magic:
        assert max_ts == max(t for _, _, t, _ in ITEMS)
    assert _normalise_peer(magic, PEERS[peer][1](new)) == _expected(magic, 500)


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_uncompressed_bytes_identical_to_kafka_python(magic: int) -> None:
    """Uncompressed encodings are canonical, so ours should equal kafka-python's byte for byte
    (modulo the v2 fields kafka-python writes differently: the leader epoch)."""
    items = _items(magic)
    ours = encode_records(magic, NONE, items)
    theirs = kp_build(magic, NONE, items)
    if magic == 2:
        # kafka-python writes partitionLeaderEpoch 0, the Java producer (and we) -1; the field
        # is outside the CRC. Everything else must match.
        assert ours[:12] == theirs[:12]
        assert ours[16:] == theirs[16:]
        assert ours[12:16] == b"\xff\xff\xff\xff"
    else:
        assert ours == theirs


def test_mixed_magics_in_one_fetch_response() -> None:
    parts = [
        encode_records(0, NONE, _items(0), base_offset=0),
        encode_records(1, GZIP, _items(1), base_offset=6),
        encode_records(2, NONE, _items(2), base_offset=12),
        encode_records(2, GZIP, _items(2), base_offset=18),
        encode_records(1, NONE, _items(1), base_offset=24),
    ]
    buf = b"".join(parts)
    recs = decode_records(buf)
    assert [r.offset for r in recs] == list(range(30))
    assert [(r.offset, r.key, r.value) for r in recs] == [
        (o, k, v)
        for o, _, k, v, _ in kp_read(buf)  # aiokafka's C reader cannot mix magics
    ]
    entries, valid = scan_entries(buf)
    assert valid == len(buf)
    assert [e.magic for e in entries] == [0] * 6 + [1, 2, 2] + [1] * 6
