"""The process controls the fault runs rely on: a broker process can be frozen (SIGSTOP) and
thawed (SIGCONT), a frozen one still stops on request, and a broker process dies with the
process that started it (no orphan holding its port and log directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from hmbclient.broker import BrokerProcess, EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel
from hmbclient.errors import HmbError
from hmbclient.protocol.api import MetadataRequest

pytestmark = pytest.mark.timeout(60)


def _answers(bp: BrokerProcess, timeout_s: float) -> bool:
    ch = BrokerChannel(bp.host, bp.port, "faults-test")
    try:
        ch.request(MetadataRequest[1](topics=[]), timeout_s)
        return True
    except HmbError:
        return False
    finally:
        ch.close()


def _gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its new parent to reap it counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        time.sleep(0.05)


def test_pause_freezes_and_resume_thaws(tmp_path: Path) -> None:
    with BrokerProcess(str(tmp_path)) as bp:
        assert _answers(bp, 5.0)
        bp.pause()
        assert bp.paused and bp.running
        assert not _answers(bp, 1.0), "a paused broker answered"
        bp.resume()
        assert not bp.paused
        assert _answers(bp, 5.0)


def test_a_paused_broker_still_terminates(tmp_path: Path) -> None:
    bp = BrokerProcess(str(tmp_path)).start()
    bp.pause()
    start = time.monotonic()
    assert bp.terminate(timeout_s=20) == 0  # a clean stop, not the SIGKILL after the timeout
    assert time.monotonic() - start < 15
    with pytest.raises(HmbError):
        bp.pause()


def test_broker_process_dies_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import time
        from hmbclient.broker import BrokerProcess
        bp = BrokerProcess({str(tmp_path)!r}).start()
        print(bp.proc.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    broker_pid: int | None = None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"the parent did not start a broker: {line!r}"
        broker_pid = int(line)
        assert not _gone(broker_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        _wait(lambda: _gone(broker_pid), 10, f"broker process {broker_pid} to die with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if broker_pid is not None and not _gone(broker_pid):  # the check failed: no orphan left
            os.kill(broker_pid, signal.SIGKILL)


def test_in_process_cluster_cannot_pause() -> None:
    cluster = EmbeddedCluster(brokers=1)
    with pytest.raises(HmbError, match="processes=True"):
        cluster.pause(0)
    with pytest.raises(HmbError, match="processes=True"):
        cluster.resume(0)
