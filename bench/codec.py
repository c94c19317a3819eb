"""Record codec throughput: hmbclient.protocol.records vs kafka-python's record builders/readers.

    .venv/bin/python bench/codec.py            # ~1 minute
    .venv/bin/python bench/codec.py --quick    # a few seconds
    .venv/bin/python bench/codec.py --gzip     # add gzip rows
    .venv/bin/python bench/codec.py --producer # the producer's encode per codec vs the fastest peer
    .venv/bin/python bench/codec.py --decode-codecs   # only the per-codec decode table

Encode = a producer building one batch of BATCH records (key None, fixed-size value, one
timestamp) into wire bytes: ``encode_records`` vs ``kafka.record.MemoryRecordsBuilder`` (which
drives DefaultRecordBatchBuilder / LegacyRecordBatchBuilder). Decode = a consumer turning a
fetched record set of about FETCH_BYTES (1 MiB, Kafka's default max.partition.fetch.bytes) of
such batches back into (offset, key, value) with every CRC
checked: ``decode_records`` (and ``iter_records``) vs ``kafka.record.MemoryRecords`` with
``validate_crc()`` per batch, as kafka-python's fetcher does by default. Both read the same bytes
(built by kafka-python). Figures are the median of ROUNDS timed rounds, in records per second;
compare the ratio column, absolute figures drift from run to run. Time is CPU time of this process,
each side measured in alternating rounds.

The per-codec decode table (none, gzip, snappy, lz4, zstd) adds aiokafka's record reader (a C
extension) and gives hmbclient's ratio to the fastest peer on the same bytes.

No client connects to a broker here, so the readiness rule of bench/_common.py (every client
connected to the partition leader before its clock starts) has nothing to apply to; its
counterpart is that every function compared runs once untimed before its rounds. End to end
with compression, clients and brokers together: ``bench/clients.py --codec NAME``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from kafka.record import MemoryRecords, MemoryRecordsBuilder

from hmbclient.protocol.records import GZIP, NONE, decode_records, encode_records, iter_records

BATCH = 1000
FETCH_BYTES = 1 << 20
TS = 1_700_000_000_000


def _rates(
    ours: Callable[[], int], theirs: Callable[[], int], seconds: float, rounds: int
) -> tuple[float, float]:
    """Median records/s of each, measured in alternating rounds so drift hits both alike.
    Time is this process's CPU time: other work on the machine does not count against us."""
    results: tuple[list[float], list[float]] = ([], [])
    ours()  # warm up
    theirs()
    for _ in range(rounds):
        for fn, rates in ((ours, results[0]), (theirs, results[1])):
            n = 0
            t0 = time.process_time()
            while True:
                n += fn()
                dt = time.process_time() - t0
                if dt >= seconds:
                    break
            rates.append(n / dt)
    return statistics.median(results[0]), statistics.median(results[1])


def _kafka_python_build(magic: int, codec: int, value: bytes, n: int) -> bytes:
    builder = MemoryRecordsBuilder(magic, codec, batch_size=1 << 30)
    append = builder.append
    for _ in range(n):
        append(TS, None, value)
    builder.close()
    return bytes(builder.buffer())


def _kafka_python_read(buf: bytes) -> int:
    n = 0
    records = MemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise RuntimeError("crc")
        for record in batch:
            record.offset, record.key, record.value  # noqa: B018 - touch what a consumer touches
            n += 1
    return n


def _aiokafka_build(codec: int, value: bytes, n: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 30,
    )
    append = builder.append
    for i in range(n):
        append(i, timestamp=TS, key=None, value=value, headers=[])
    return bytes(builder.build())


def producer_rows(seconds: float, rounds: int) -> list[tuple[str, float, float, str]]:
    """The producer's encode, per codec: ``v2.encode_batches`` over a batch's value column (what
    the async producer's sender runs per request) vs the fastest of kafka-python's
    MemoryRecordsBuilder and aiokafka's (Cython) DefaultRecordBatchBuilder building the same
    RecordBatch v2, message by message as those producers do."""
    from hmbclient.protocol.records import LZ4, SNAPPY, ZSTD, v2

    rows: list[tuple[str, float, float, str]] = []
    for codec, cname in ((NONE, "none"), (GZIP, "gzip"), (SNAPPY, "snappy"), (LZ4, "lz4"), (ZSTD, "zstd")):
        for size in (100, 1000):
            value = bytes(range(256)) * (size // 256) + bytes(size % 256)
            columns = [([value] * BATCH, None, None, TS)]

            def ours(codec: int = codec, columns: list[Any] = columns) -> int:
                v2.encode_batches(codec, columns)
                return BATCH

            peers = {
                "kafka-python": partial(lambda c, v: _kafka_python_build(2, c, v, BATCH) and BATCH, codec, value),
                "aiokafka": partial(lambda c, v: _aiokafka_build(c, v, BATCH) and BATCH, codec, value),
            }
            best_name, best_rate, our_rate = "", 0.0, 0.0
            for name, fn in peers.items():
                mine, theirs = _rates(ours, fn, seconds, rounds)
                our_rate = max(our_rate, mine)
                if theirs > best_rate:
                    best_name, best_rate = name, theirs
            rows.append((f"producer encode v2 {size} B {cname}", our_rate, best_rate, best_name))
    return rows


def _hmb_read(buf: bytes) -> int:
    n = 0
    for record in decode_records(buf):
        record.offset, record.key, record.value  # noqa: B018
        n += 1
    return n


def _hmb_iter(buf: bytes) -> int:
    n = 0
    for record in iter_records(buf):
        record.offset, record.key, record.value  # noqa: B018
        n += 1
    return n


def _aiokafka_read(buf: bytes) -> int:
    from aiokafka.record.memory_records import MemoryRecords as AIOMemoryRecords

    n = 0
    records = AIOMemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise RuntimeError("crc")
        for record in batch:
            record.offset, record.key, record.value  # noqa: B018
            n += 1
    return n


def _multi_rates(fns: list[Callable[[], int]], seconds: float, rounds: int) -> list[float]:
    """Median records/s of each function, in alternating rounds (CPU time, as _rates)."""
    results: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()  # warm up
    for _ in range(rounds):
        for fn, rates in zip(fns, results, strict=True):
            n = 0
            t0 = time.process_time()
            while True:
                n += fn()
                dt = time.process_time() - t0
                if dt >= seconds:
                    break
            rates.append(n / dt)
    return [statistics.median(r) for r in results]


def decode_codecs_table(seconds: float, rounds: int) -> None:
    """Decode of ~1 MiB of v2 batches per codec: hmbclient vs kafka-python vs aiokafka."""
    from hmbclient.protocol.records import LZ4, SNAPPY, ZSTD

    print(f"{'decode v2, 1000-record batches':<36}  {'hmbclient':>12}  {'kafka-python':>12}  {'aiokafka':>12}  {'hmb/fastest':>11}")
    for codec, cname in ((NONE, "none"), (GZIP, "gzip"), (SNAPPY, "snappy"), (LZ4, "lz4"), (ZSTD, "zstd")):
        for size in (100, 1000):
            value = bytes(range(256)) * (size // 256) + bytes(size % 256)
            one = _kafka_python_build(2, codec, value, BATCH)
            fetched = one * max(1, FETCH_BYTES // (BATCH * (size + 30)))
            expected = len(decode_records(fetched))
            assert expected == _kafka_python_read(fetched) == _aiokafka_read(fetched)
            ours, kp, aio = _multi_rates(
                [partial(_hmb_read, fetched), partial(_kafka_python_read, fetched), partial(_aiokafka_read, fetched)],
                seconds,
                rounds,
            )
            label = f"{cname} {size} B"
            print(f"{label:<36}  {ours:>10,.0f}/s  {kp:>10,.0f}/s  {aio:>10,.0f}/s  {ours / max(kp, aio):>10.2f}x", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short rounds")
    parser.add_argument("--gzip", action="store_true", help="also gzip batches")
    parser.add_argument(
        "--producer", action="store_true",
        help="only the producer's encode per codec (none, gzip, snappy, lz4, zstd) vs the fastest Python peer",
    )
    parser.add_argument("--decode-codecs", action="store_true", help="only the per-codec decode table")
    args = parser.parse_args(argv)
    seconds, rounds = (0.15, 3) if args.quick else (0.6, 5)
    if args.producer:
        prows = producer_rows(seconds, rounds)
        w = max(len(r[0]) for r in prows)
        print(f"{'workload':<{w}}  {'hmbclient':>12}  {'fastest peer':>12}  {'ratio':>6}  peer")
        for name, ours, theirs, peer in prows:
            print(f"{name:<{w}}  {ours:>10,.0f}/s  {theirs:>10,.0f}/s  {ours / theirs:>5.2f}x  {peer}")
        return 0
    if args.decode_codecs:
        decode_codecs_table(seconds, rounds)
        return 0

    codecs = [(NONE, "none")] + ([(GZIP, "gzip")] if args.gzip else [])
    rows: list[tuple[str, float, float]] = []
    for codec, cname in codecs:
        for magic, fmt in ((1, "v1 MessageSet"), (2, "v2 RecordBatch")):
            for size in (100, 1000):
                value = bytes(range(256)) * (size // 256) + bytes(size % 256)
                items = [(None, value, TS)] * BATCH
                label = f"{fmt} {size} B {cname}"

                def hmb_encode(
                    magic: int = magic, codec: int = codec, items: list[Any] = items
                ) -> int:
                    encode_records(magic, codec, items, 0, TS)
                    return BATCH

                def kafka_python_encode(magic: int = magic, codec: int = codec, value: bytes = value) -> int:
                    _kafka_python_build(magic, codec, value, BATCH)
                    return BATCH

                rows.append((f"encode {label}", *_rates(hmb_encode, kafka_python_encode, seconds, rounds)))

                one = _kafka_python_build(magic, codec, value, BATCH)
                batches = max(1, FETCH_BYTES // (len(items) * (size + 30)))
                fetched = one * batches
                assert len(decode_records(fetched)) == BATCH * batches == _kafka_python_read(fetched)
                kafka_python_read = partial(_kafka_python_read, fetched)
                rows.append(
                    (
                        f"decode {label}",
                        *_rates(partial(_hmb_read, fetched), kafka_python_read, seconds, rounds),
                    )
                )
                rows.append(
                    (
                        f"iter   {label}",
                        *_rates(partial(_hmb_iter, fetched), kafka_python_read, seconds, rounds),
                    )
                )

    w = max(len(r[0]) for r in rows)
    print(f"{'workload':<{w}}  {'hmbclient':>12}  {'kafka-python':>12}  {'ratio':>6}")
    for name, ours, theirs in rows:
        print(f"{name:<{w}}  {ours:>10,.0f}/s  {theirs:>10,.0f}/s  {ours / theirs:>5.2f}x")
    print()
    decode_codecs_table(seconds, rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
