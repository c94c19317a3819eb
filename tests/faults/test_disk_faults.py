"""Disk faults under a broker process: a log directory that fills up.

A full disk (ENOSPC mid-append, on a size-limited tmpfs): every Produce that cannot be written
is answered KAFKA_STORAGE_ERROR (retriable) and leaves nothing behind (a partial write is cut
off again, no offset is used up); what was acknowledged before stays readable; once space
returns (the tmpfs grows) the same broker takes writes again, offsets continuing densely; a
restart after a crash finds exactly the acknowledged values.

Decision (recorded): Kafka marks the whole log directory offline on an I/O error and serves
it again only after a restart (its JBOD handling moves the leaderships to other replicas).
Here a failed write fails that request only and the next one tries again: the write path
already undoes a partial write (Store.append truncates back, the producer state and the
offsets move only after the bytes are written, the leader-epoch entry written first describes
no bytes yet), so nothing is left to distrust, and a broker whose disk was full for a moment
serves again without an operator. The cost: while the disk stays full the partition stays
unwritable on this leader (clients retry, as they do for Kafka's offline directory).

Replicas: a follower whose disk is full drops out of the ISR and catches up when space returns;
one whose closed segment was damaged (found by the start-up scan after an unclean shutdown,
see log.py) cuts its log there and fetches the rest again. The ``chaos`` run fills a broker's
disk three times under every producer kind and both readers (:class:`~.disk.DiskRun`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import BrokerProcess, EmbeddedCluster
from hmbclient.errors import ErrorCode
from hmbclient.protocol import records

from .disk import DiskRun, SmallDisk, produce, read_all
from .readers import READER_KINDS

TOPIC = "disk"

# kafka-python (a DiskRun producer) loads its protocol schemas through a deprecated importlib.resources call.
pytestmark = pytest.mark.filterwarnings(
    "ignore:read_text is deprecated:DeprecationWarning", "ignore:open_text is deprecated:DeprecationWarning"
)


@pytest.mark.timeout(120)
def test_full_disk_answers_storage_error_loses_nothing_and_serves_again(tmp_path: Path, fault_summary: Any) -> None:
    with SmallDisk(tmp_path / "disk", 1 << 20) as disk:
        bp = BrokerProcess(str(disk.path / "broker"), num_partitions=1, log_segment_bytes=256 * 1024,
                           log_index_interval_bytes=4096)
        with bp:
            ch = bp.channel("disk-test")
            acked: list[bytes] = []
            codes: dict[int, int] = {}
            wait_until(lambda: produce(ch, TOPIC, [b"first"])[0] == ErrorCode.NONE, 30, "the topic's first produce")
            acked.append(b"first")
            i = 0
            while codes.get(ErrorCode.KAFKA_STORAGE_ERROR, 0) < 5 and i < 1000:  # well past the 1 MiB
                values = [b"%06d-%04d-" % (i, j) + b"x" * 1000 for j in range(20)]
                code, base = produce(ch, TOPIC, values)
                codes[code] = codes.get(code, 0) + 1
                if code == ErrorCode.NONE:
                    assert base == len(acked), f"acknowledged at {base}, expected {len(acked)}"
                    acked += values
                i += 1
            assert set(codes) == {ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR}, codes
            full_at = len(acked)
            assert bp.running, "the broker died of a full disk"
            assert [v for _, v in read_all(ch, TOPIC)] == acked

            disk.resize(8 << 20)  # space returns
            started = time.monotonic()
            more = [b"after-%04d" % j for j in range(200)]
            code, base = produce(ch, TOPIC, more[:100])
            recovered = time.monotonic() - started
            assert (code, base) == (ErrorCode.NONE, len(acked)), (ErrorCode(code).name, base, len(acked))
            acked += more[:100]
            assert produce(ch, TOPIC, more[100:]) == (ErrorCode.NONE, len(acked))
            acked += more[100:]
            got = read_all(ch, TOPIC)
            assert [o for o, _ in got] == list(range(len(acked))), "offsets are not dense"
            assert [v for _, v in got] == acked
            ch.close()

            bp.kill()  # a crash after all that: recovery must find exactly what was acknowledged
            bp.start()
            ch = bp.channel("disk-test-after")
            got = wait_until(lambda: read_all(ch, TOPIC), 30, "reading back after the restart")
            assert [v for _, v in got] == acked
            ch.close()
        fault_summary(f"full disk: acked {len(acked)} ({full_at} before the disk filled), storage errors "
                      f"{codes[ErrorCode.KAFKA_STORAGE_ERROR]}, lost 0",
                      rows=[("disk_full (leader)", "raw acks=-1", len(acked), 0, 0, 0, recovered)])


def _disk_records(log_dir: str, topic: str) -> list[tuple[int, bytes | None]]:
    d = Path(log_dir) / f"{topic}-0"
    out: list[tuple[int, bytes | None]] = []
    for seg in sorted(d.glob("*.log")):
        out += [(r.offset, r.value) for r in records.iter_records(seg.read_bytes())]
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("victim", ["follower", "old leader"])
def test_a_replica_with_a_damaged_segment_truncates_and_refetches(zookeeper: Any, tmp_path: Path, victim: str, fault_summary: Any) -> None:
    """A byte flipped in the middle of a closed segment of one replica while it is down (it
    was SIGKILLed: an unclean start follows): its start-up scan cuts its log there, it fetches
    the rest from the leader again and rejoins the ISR; every acknowledged value is read back,
    and the replicas' segment files hold identical records."""
    topic = f"damaged-{victim.replace(' ', '-')}"
    chroot = f"{zookeeper.connect}/{topic}"
    with EmbeddedCluster(3, chroot, log_dir=str(tmp_path / "cluster"), processes=True, replication_factor=3, min_insync_replicas=2,
                         log_segment_bytes=8192, zookeeper_session_timeout_ms=6000, unclean_leader_election_enable=False) as cluster:
        cluster.create_topic(topic, 1, 3)
        cluster.await_isr(topic, 30, size=3)
        leader = cluster.leader(topic, 0)
        assert leader is not None and leader >= 0
        ch = cluster.broker(leader).channel("damage-test")
        acked: list[bytes] = []
        for i in range(40):
            values = [b"%03d-%02d-" % (i, j) + b"y" * 60 for j in range(10)]
            assert produce(ch, topic, values) == (ErrorCode.NONE, len(acked))
            acked += values
        ch.close()
        target = leader if victim == "old leader" else (leader + 1) % 3
        cluster.await_isr(topic, 30, size=3)
        wait_until(lambda: len(_disk_records(cluster.broker_log_dir(target), topic)) == len(acked), 30, "the victim holding everything")
        cluster.kill(target)
        if target == leader:
            wait_until(lambda: cluster.leader(topic, 0) not in (None, -1, target), 60, "a new leader")
        segs = sorted((Path(cluster.broker_log_dir(target)) / f"{topic}-0").glob("*.log"))
        assert len(segs) >= 4, segs
        damaged = segs[len(segs) // 2]
        found, _ = records.scan_entries(damaged.read_bytes(), verify_crc=False)
        bad = found[len(found) // 2]
        with open(damaged, "r+b") as f:
            f.seek(bad.position + bad.size - 5)
            byte = f.read(1)
            f.seek(bad.position + bad.size - 5)
            f.write(bytes([byte[0] ^ 0xFF]))
        started = time.monotonic()
        cluster.restart(target, timeout_s=60)
        cluster.await_isr(topic, 60, size=3)
        recovered = time.monotonic() - started
        fixed, _ = records.scan_entries(damaged.read_bytes(), verify_crc=True)
        assert sum(e.size for e in fixed) == damaged.stat().st_size, "the damaged entry is still there"
        now = cluster.leader(topic, 0)
        assert now is not None and now >= 0
        ch = cluster.broker(now).channel("damage-test-read")
        try:
            got = read_all(ch, topic)
        finally:
            ch.close()
        assert [v for _, v in got] == acked
        logs = {b: _disk_records(cluster.broker_log_dir(b), topic) for b in range(3)}
        wait_until(lambda: all(_disk_records(cluster.broker_log_dir(b), topic) == logs[now] for b in range(3)), 30,
                   "identical replicas", diag=lambda: {b: len(_disk_records(cluster.broker_log_dir(b), topic)) for b in range(3)})
    fault_summary(f"damaged closed segment on the {victim} (broker {target}): cut at offset {bad.base_offset} of {len(acked)}, "
                  f"refetched, acked {len(acked)}, lost 0",
                  rows=[(f"damaged_segment ({victim})", "raw acks=-1", len(acked), 0, 0, 0, recovered)])


@pytest.mark.timeout(120)
def test_a_follower_whose_disk_fills_leaves_the_isr_and_catches_up_when_space_returns(zookeeper: Any, tmp_path: Path, fault_summary: Any) -> None:
    """Broker 2's log directory is a 1 MiB tmpfs: as a follower it cannot write what it
    fetches, drops out of the ISR, and the partition goes on taking acks=-1 writes with the
    other two (min.insync.replicas 2); once space returns it fetches the same offsets again
    (no truncation loop), rejoins the ISR, and holds exactly the leader's records."""
    topic = "follower-disk"
    small = 2
    with SmallDisk(tmp_path / "cluster" / f"broker-{small}", 1 << 20) as disk:
        with EmbeddedCluster(3, f"{zookeeper.connect}/{topic}", log_dir=str(tmp_path / "cluster"), processes=True, replication_factor=3,
                             min_insync_replicas=2, log_segment_bytes=256 * 1024, zookeeper_session_timeout_ms=6000,
                             replica_lag_time_max_ms=1000, unclean_leader_election_enable=False) as cluster:
            cluster.create_topic(topic, 3, 3)
            cluster.await_isr(topic, 30, size=3)
            partition = next(p for p in range(3) if cluster.leader(topic, p) != small)
            leader = cluster.leader(topic, partition)
            assert leader is not None
            ch = cluster.broker(leader).channel("follower-disk-test")
            acked: list[bytes] = []
            errors: dict[int, int] = {}

            def write(n: int, tag: bytes) -> None:
                for i in range(n):
                    values = [tag + b"-%04d-%02d-" % (i, j) + b"z" * 1000 for j in range(10)]
                    code, base = produce(ch, topic, values, partition=partition)
                    if code == ErrorCode.NONE:
                        assert base == len(acked)
                        acked.extend(values)
                    else:
                        errors[code] = errors.get(code, 0) + 1

            def isr() -> tuple[int, ...]:
                meta = cluster.partition(topic, partition)
                return () if meta is None else tuple(meta.isr)

            write(150, b"fill")  # 1.5 MB: more than the follower's disk holds
            wait_until(lambda: small not in isr(), 30, f"broker {small} out of the ISR", diag=lambda: (isr(), disk.used()))
            mark = len(acked)
            write(20, b"without")  # the other two replicas still make min.insync.replicas
            assert len(acked) > mark, errors
            disk.resize(16 << 20)
            started = time.monotonic()
            wait_until(lambda: small in isr(), 60, f"broker {small} back in the ISR", diag=isr)
            recovered = time.monotonic() - started
            got = read_all(ch, topic, partition=partition)
            ch.close()
            assert [v for _, v in got] == acked
            d = Path(cluster.broker_log_dir(small)) / f"{topic}-{partition}"
            on_follower = [(r.offset, r.value) for seg in sorted(d.glob("*.log")) for r in records.iter_records(seg.read_bytes())]
            assert on_follower == got
            out = "\n".join(cluster.broker(small).output)
            assert "cannot append what broker" not in out, "a disk error sent the partition back to truncation"
            assert 1 <= out.count("cannot write what broker") <= 3, "the disk error is logged once per failure streak and partition"
    fault_summary(f"follower's disk full: acked {len(acked)} (errors {errors}), lost 0, back in the ISR {recovered:.1f} s after space returned",
                  rows=[("follower_disk_full", "raw acks=-1", len(acked), 0, 0, 0, recovered)])


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", [301, 302])
def test_chaos_disk_full(zookeeper: Any, tmp_path: Path, seed: int, fault_summary: Any) -> None:
    """Every producer kind and both readers while broker 2's disk fills three times over."""
    result = DiskRun(zookeeper.connect, tmp_path, seed, ["disk_full"] * 3, readers=READER_KINDS).run()
    fault_summary(result.summary(), result)
    result.check()
