"""Disk faults for the fault tests: a size-limited tmpfs that fills up, and plain-request helpers.

:class:`SmallDisk` mounts a tmpfs of ``size`` bytes on a directory (root only), can grow it
(``resize``: the space "returns") and always unmounts it at the end (``with``, and at
interpreter exit through the exit registry; a busy mount is detached lazily). The helpers write
and read one partition with raw Produce/Fetch requests, so every answer's error code is seen as
the broker sent it (no client retry hides a KAFKA_STORAGE_ERROR).
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

__all__ = ["SmallDisk", "produce", "read_all"]


class SmallDisk:
    """A tmpfs of ``size`` bytes mounted on ``path`` (created if missing)."""

    def __init__(self, path: str | os.PathLike[str], size: int) -> None:
        self.path = Path(path)
        self.size = size
        self.mounted = False

    def __enter__(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)], check=True, capture_output=True)
        self.mounted = True
        at_exit.add_server(self)
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
