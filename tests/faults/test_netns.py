"""NetworkLab (hmbclient.testing.netns) itself: a socket opened inside a node's namespace is
reached from the host over the bridge; a cut drops packets silently in the direction asked
(a connect times out, nothing is refused); a heal restores the link; closing the lab leaves
no namespace, bridge or veth behind."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from hmbclient.testing import NetworkLab
from hmbclient.testing.netns import HOST


def _reaches(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


def test_a_lab_cuts_and_heals_links_and_leaves_nothing_behind() -> None:
    lab = NetworkLab(["a", "b"])
    own = os.readlink("/proc/thread-self/ns/net")
    with lab:
        with lab.inside("a"):
            server = socket.create_server((lab.address("a"), 0))
            assert os.readlink("/proc/thread-self/ns/net") != own
        assert os.readlink("/proc/thread-self/ns/net") == own
        port = server.getsockname()[1]
        try:
            assert _reaches(lab.address("a"), port)
            lab.cut(HOST, "a", one_way=True)
            assert lab.cuts() == {(HOST, "a")}
            assert not _reaches(lab.address("a"), port)
            lab.heal()
            assert _reaches(lab.address("a"), port)
            lab.cut("a", HOST, one_way=True)  # the answers (SYN-ACK) are what is dropped now
            assert not _reaches(lab.address("a"), port)
            lab.heal(HOST, "a")
            assert lab.reaches(HOST, "a") and _reaches(lab.address("a"), port)
        finally:
            server.close()
        names = [lab.namespace("a"), lab.namespace("b")]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names), listed
    assert lab.bridge not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_a_lab_refuses_bad_node_names() -> None:
    with pytest.raises(ValueError):
        NetworkLab([HOST])
    with pytest.raises(ValueError):
        NetworkLab(["x", "x"])
