"""A damaged log on disk (real Log objects on real files; no broker): a byte flipped in the
middle of a closed segment, and a damaged index.

- Closed segment, after an unclean shutdown: the start-up scan finds the first bad entry (a
  CRC failure, or a size field that cannot be right) and truncates the log to the offset it
  should have started at; everything before it is read back intact, nothing after it is
  served. After a clean shutdown no closed segment is scanned (the decision recorded in
  log.py's docstring): the damage is not looked for then.
- Index: an entry whose position points into the middle of an entry (still increasing, so the
  load-time check passes) is found at the lookup, the index is rebuilt from the log, and every
  offset reads back right.
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.protocol import records

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=512)


def _fill(directory: Path, batches: int = 60) -> list[bytes]:
    log = Log(str(directory), CONFIG)
    values: list[bytes] = []
    for i in range(batches):
        ts = int(time.time() * 1000)
        vs = [b"v%04d-%02d-" % (i, j) + b"x" * 40 for j in range(5)]
        log.append(records.encode_records(2, records.NONE, [(None, v, ts) for v in vs], timestamp_ms=ts), leader_epoch=0)
        values += vs
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    assert len(log.segments) >= 4, log.segments
    log.close()
    return values


def _read(log: Log) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data, _ = log.read(offset, 1 << 20)
        if data is None:
            break
        got = [(r.offset, r.value) for r in records.decode_records(data.read()) if r.offset >= offset]
        if not got:
            break
        out += got
        offset = got[-1][0] + 1
    return out


def _entries(path: Path) -> list[records.Entry]:
    found, _ = records.scan_entries(path.read_bytes(), verify_crc=False)
    return found


def _flip(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x5A]))


@pytest.mark.parametrize("where", ["payload", "size field"])
def test_a_damaged_closed_segment_is_found_at_an_unclean_start_and_the_log_cut_there(tmp_path: Path, where: str) -> None:
    values = _fill(tmp_path)
    segs = sorted(tmp_path.glob("*.log"))
    victim = segs[1]  # a closed segment in the middle of the log
    entries = _entries(victim)
    bad = entries[len(entries) // 2]
    _flip(victim, bad.position + (bad.size - 3 if where == "payload" else 10))

    clean = Log(str(tmp_path), CONFIG, clean_shutdown=True)
    assert clean.log_end_offset == len(values), "a clean start-up scans no closed segment"
    clean.close()

    log = Log(str(tmp_path), CONFIG, clean_shutdown=False)
    try:
        assert log.log_end_offset == bad.base_offset, (log.log_end_offset, bad.base_offset)
        assert [v for _, v in _read(log)] == values[: bad.base_offset]
        assert [s.base_offset for s in log.segments][-1] == int(victim.name[:20])
        assert not any(int(p.name[:20]) > int(victim.name[:20]) for p in tmp_path.glob("*.log")), "later segments stay"
        assert log.leader_epochs.end_offset_for(0, log.log_end_offset) == (0, bad.base_offset)
        # It takes writes (a follower's refetch) right after the cut.
        ts = int(time.time() * 1000)
        info = log.append(records.encode_records(2, records.NONE, [(None, b"again", ts)], timestamp_ms=ts), leader_epoch=0)
        assert info.first_offset == bad.base_offset
    finally:
        log.close()


def test_a_damaged_index_is_rebuilt_at_the_lookup(tmp_path: Path) -> None:
    values = _fill(tmp_path)
    victim = sorted(tmp_path.glob("*.index"))[1]
    data = bytearray(victim.read_bytes())
    n = len(data) // 8
    assert n >= 3
    # The middle entry's position moves 5 bytes on: still increasing, now inside an entry.
    i = n // 2
    rel, pos = struct.unpack_from(">ii", data, i * 8)
    struct.pack_into(">ii", data, i * 8, rel, pos + 5)
    victim.write_bytes(bytes(data))
    os.sync()

    log = Log(str(tmp_path), CONFIG, clean_shutdown=True)
    try:
        got = _read(log)
        assert [o for o, _ in got] == list(range(len(values)))
        assert [v for _, v in got] == values
        base = int(victim.name[:20])
        for offset in range(base + rel - 2, base + rel + 3):  # around the damaged entry, one by one
            data_at, _ = log.read(offset, 1 << 20)
            assert data_at is not None
            first = [r for r in records.decode_records(data_at.read()) if r.offset >= offset][0]
            assert (first.offset, first.value) == (offset, values[offset])
    finally:
        log.close()
