"""Disk faults for the fault tests: a size-limited tmpfs that fills up, and plain-request helpers.

:class:`SmallDisk` mounts a tmpfs of ``size`` bytes on a directory (root only), can grow it
(``resize``: the space "returns") and always unmounts it at the end (``with``, and at
interpreter exit through the exit registry; a busy mount is detached lazily); one left by a
test process killed outright (its owner file names a pid that is gone) is unmounted by the
next ``SmallDisk``. The helpers write
and read one partition with raw Produce/Fetch requests, so every answer's error code is seen as
the broker sent it (no client retry hides a KAFKA_STORAGE_ERROR). :class:`DiskRun` is the
fault-run harness with a disk that fills (the ``chaos`` loop).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from hmbclient.broker.channel import BrokerChannel
from hmbclient.errors import ErrorCode
from hmbclient.protocol import records
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.testing._process import at_exit

from .harness import PARTITIONS, RECOVERY_TIMEOUT_S, FaultRecord, FaultRun, _wait

__all__ = ["DiskRun", "SmallDisk", "produce", "read_all"]


class SmallDisk:
    """A tmpfs of ``size`` bytes mounted on ``path`` (created if missing)."""

    def __init__(self, path: str | os.PathLike[str], size: int) -> None:
        self.path = Path(path)
        self.size = size
        self.mounted = False

    def __enter__(self) -> SmallDisk:
        _unmount_stale()
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)], check=True, capture_output=True)
        self.mounted = True
        at_exit.add_server(self)
        (self.path / f"{_OWNER}{os.getpid()}").touch()  # a plain file: the broker ignores it
        return self

    def resize(self, size: int) -> None:
        """Grow (or shrink) the file system in place: its files stay."""
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True, capture_output=True)
        self.size = size

    def used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def kill(self) -> None:
        """Unmount (lazily if busy); its files are gone with it."""
        if self.mounted:
            self.mounted = False
            if subprocess.run(["umount", str(self.path)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            at_exit.discard_server(self)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.kill()


_OWNER = ".hmb-small-disk-"


def _unmount_stale() -> None:
    """Unmount the small disks of test processes that died without unmounting (SIGKILL)."""
    try:
        with open("/proc/mounts") as f:
            points = [line.split()[1] for line in f if line.startswith("tmpfs ")]
    except OSError:
        return
    for point in points:
        try:
            owners = [n for n in os.listdir(point) if n.startswith(_OWNER)]
        except OSError:
            continue
        if owners and not any(os.path.exists(f"/proc/{n[len(_OWNER):]}") for n in owners):
            subprocess.run(["umount", "-l", point], capture_output=True)


def _req(api: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(api, version)].build(**fields)


def produce(ch: BrokerChannel, topic: str, values: list[bytes], *, partition: int = 0, acks: int = -1) -> tuple[int, int]:
    """One acks=``acks`` Produce of ``values`` as one batch: (error code, base offset)."""
    ts = int(time.time() * 1000)
    batch = records.encode_records(2, records.NONE, [(None, v, ts) for v in values], timestamp_ms=ts)
    resp = ch.request(_req(ApiKey.PRODUCE, 3, transactional_id=None, acks=acks, timeout_ms=5000, topics=[(topic, [(partition, batch)])]), 15.0)
    p = resp.topics[0].partitions[0]
    return int(p.error_code), int(p.base_offset)


def read_all(ch: BrokerChannel, topic: str, *, partition: int = 0) -> list[tuple[int, bytes | None]]:
    """Every (offset, value) of the partition up to its high watermark.

    Raises:
        AssertionError: a Fetch answered an error.
    """
    out: list[tuple[int, bytes | None]] = []
    offset = 0
    while True:
        resp = ch.request(_req(ApiKey.FETCH, 4, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                               topics=[(topic, [(partition, offset, 1 << 22)])]), 15.0)
        p = resp.topics[0].partitions[0]
        assert p.error_code == ErrorCode.NONE, f"Fetch {topic}-{partition}@{offset}: {ErrorCode(p.error_code).name}"
        got = [(r.offset, r.value) for r in records.decode_records(p.records) if r.offset >= offset] if p.records else []
        if not got:
            return out
        out += got
        offset = got[-1][0] + 1


class DiskRun(FaultRun):
    """A :class:`FaultRun` (producers, readers, validation) whose broker 2 keeps its log
    directory on a tmpfs. Fault ``disk_full``: the tmpfs shrinks to what it holds plus
    :data:`HEADROOM`, so the producers fill it within moments; once broker 2 has dropped out of
    an ISR (a follower that cannot write) the space returns, and the run's recovery waits for
    every ISR whole and every producer acknowledged again. Partitions broker 2 leads answer
    KAFKA_STORAGE_ERROR meanwhile (the producers retry)."""

    fault_kinds = ("disk_full",)
    small = 2

    def run(self) -> Any:
        with SmallDisk(self.log_dir / "cluster" / f"broker-{self.small}", ROOMY) as disk:
            self.disk = disk
            return super().run()

    def _disk_full(self, f: FaultRecord) -> None:
        used = self.disk.used()
        self.disk.resize(used + HEADROOM)
        f.detail = f"broker {self.small}: {used // 1024} KiB + {HEADROOM // 1024} KiB"
        self._event(f"broker {self.small}'s disk shrunk to {used + HEADROOM} bytes")
        try:
            _wait(f"broker {self.small} out of an ISR", lambda: any(self.small not in self._state(p).isr for p in range(PARTITIONS)),
                  RECOVERY_TIMEOUT_S)
            self._event(f"broker {self.small} left an ISR (disk {self.disk.used()} bytes used)")
        finally:
            self.disk.resize(ROOMY)
        self._event("space returned")


#: the tmpfs's size outside the fault (memory is used only for what is written)
ROOMY = 256 << 20
HEADROOM = 128 << 10
