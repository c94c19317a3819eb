"""Crashes and damaged data with a broker in a child process (kill -9 is real), plus rolling and
retention with small limits."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from hmbclient.broker import BrokerProcess, EmbeddedBroker
from hmbclient.errors import StorageError
from hmbclient.protocol import records
from hmbclient.protocol.api import ListOffsetsRequest

from .conftest import RawClient, create_topic, encode, fetch, produce, wait_until

pytestmark = pytest.mark.timeout(120)


def _all_values(c: RawClient, topic: str) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = 0
    while True:
        p = fetch(c, topic, 0, offset)
        assert p.error_code == 0
        recs = [r for r in records.decode_records(p.records) if r.offset >= offset]
        if not recs:
            return out
        out += [r.value for r in recs]
        offset = recs[-1].offset + 1


def test_kill_9_during_acked_produces_loses_no_acked_message(tmp_path: Path) -> None:
    bp = BrokerProcess(str(tmp_path / "data"), log_flush_interval_messages=1, log_segment_bytes=20_000)
    bp.start()
    try:
        acked: list[bytes] = []
        stop = threading.Event()

        def stream() -> None:
            try:
                with RawClient(bp.host, bp.port, timeout_s=5) as c:
                    create_topic(c, "crash")
                    i = 0
                    while not stop.is_set():
                        v = b"msg-%06d" % i
                        magic = (0, 1, 2)[i % 3]
                        r = produce(c, "crash", 0, encode([(b"k", v)], magic=magic), version=(0, 2, 3)[i % 3], acks=1)
                        if r.error_code == 0:
                            acked.append(v)
                        i += 1
            except OSError:
                pass  # the broker died under us: expected

        th = threading.Thread(target=stream)
        th.start()
        wait_until(lambda: len(acked) >= 300, 20, "300 acknowledged produces")
        bp.kill()
        stop.set()
        th.join(10)
        bp.start()
        with RawClient(bp.host, bp.port) as c:
            values = _all_values(c, "crash")
            assert values[: len(acked)] == acked
            assert len(values) <= len(acked) + 1  # at most the one in flight at the kill
            # keeps serving after recovery
            assert produce(c, "crash", 0, encode([(None, b"after")])).base_offset == len(values)
    finally:
        bp.terminate()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_damaged_tail_is_cut_at_restart_and_broker_keeps_serving(tmp_path: Path, damage: str) -> None:
    data = tmp_path / "data"
    bp = BrokerProcess(str(data))
    bp.start()
    try:
        with RawClient(bp.host, bp.port) as c:
            create_topic(c, "tail")
            for i in range(20):
                produce(c, "tail", 0, encode([(None, b"v%02d" % i)]))
        bp.kill()
        seg = data / "tail-0" / "00000000000000000000.log"
        raw = seg.read_bytes()
        if damage == "garbage":
            seg.write_bytes(raw + os.urandom(3000))
            keep = 20
        else:
            seg.write_bytes(raw[:-11])
            keep = 19
        bp.start()
        with RawClient(bp.host, bp.port) as c:
            assert _all_values(c, "tail") == [b"v%02d" % i for i in range(keep)]
            assert produce(c, "tail", 0, encode([(None, b"new")])).base_offset == keep
            assert _all_values(c, "tail")[-1] == b"new"
        assert len(seg.read_bytes()) < len(raw) + 200
    finally:
        bp.terminate()


@pytest.mark.parametrize("problem", ["bad_name", "orphan_index"])
def test_malformed_segment_files_fail_start_up_loudly(tmp_path: Path, problem: str) -> None:
    data = tmp_path / "data"
    with EmbeddedBroker(log_dir=str(data), log_segment_bytes=300, log_index_interval_bytes=100) as b:
        with RawClient(b.host, b.port) as c:
            create_topic(c, "files")
            for _ in range(5):
                produce(c, "files", 0, encode([(None, b"x" * 150)]))
    part = data / "files-0"
    if problem == "bad_name":
        (part / "123.log").write_bytes(b"")
        match = "unexpected file"
    else:
        victim = sorted(p for p in os.listdir(part) if p.endswith(".log"))[1]
        os.unlink(part / victim)
        match = "index without its log"
    snapshot = {p: (part / p).read_bytes() for p in os.listdir(part)}
    with pytest.raises(StorageError, match=match):
        EmbeddedBroker(log_dir=str(data)).start()
    bp = BrokerProcess(str(data), start_timeout_s=20)
    with pytest.raises(Exception, match=match):
        bp.start()
    assert bp.proc is not None and bp.proc.returncode == 1
    # nothing was changed by the failed start-ups
    assert {p: (part / p).read_bytes() for p in os.listdir(part)} == snapshot


def test_rolling_and_retention_with_small_limits(tmp_path: Path) -> None:
    with EmbeddedBroker(
        log_dir=str(tmp_path),
        log_segment_bytes=2_000,
        log_index_interval_bytes=500,
        log_retention_bytes=6_000,
        log_retention_check_interval_ms=100,
    ) as b:
        with RawClient(b.host, b.port) as c:
            create_topic(c, "ret")
            for i in range(100):
                produce(c, "ret", 0, encode([(None, b"%03d" % i + b"r" * 200)]))
            part = Path(tmp_path) / "ret-0"

            def segment_files() -> list[str]:
                return sorted(p for p in os.listdir(part) if p.endswith(".log"))

            # the retention check runs every 100 ms and deletes the oldest segments
            wait_until(lambda: sum(os.path.getsize(part / p) for p in segment_files()) <= 8_000, 10, "retention down to 8000 bytes")
            logs = segment_files()
            assert 3 <= len(logs) <= 5
            assert all(os.path.getsize(part / p) <= 2_000 for p in logs)
            start = int(logs[0][:20])
            assert start > 0
            req = ListOffsetsRequest[1].build(replica_id=-1, topics=[("ret", [(0, -2)])])
            assert c.request(req).topics[0].partitions[0].offset == start
            assert fetch(c, "ret", 0, 0).error_code == 1
            p = fetch(c, "ret", 0, start)
            assert records.decode_records(p.records)[0].value[:3] == b"%03d" % start
