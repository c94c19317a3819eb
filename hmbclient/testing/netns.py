"""NetworkLab: network namespaces joined by a bridge, to partition servers at the socket level.

    with NetworkLab(["zk", "broker0", "broker1"]) as lab:
        with lab.inside("zk"):
            zk = LocalZooKeeper(extra_config={"clientPortAddress": "0.0.0.0"}).start()
        lab.address("zk")                 # "10.X.Y.2": reachable from every node and the host
        lab.cut("broker0", "zk")          # both directions: nothing passes
        lab.cut("broker0", "broker1", one_way=True)   # broker0 -> broker1 dropped only
        lab.heal()                        # every link whole again

What it builds. One network namespace per node (named ``hmbt<pid>x<n>-<node index>``), each
with ``lo`` and an ``eth0`` veth whose peer is enslaved to a bridge in the test's own (host)
namespace; the bridge holds the host's address (:data:`HOST`, ``.1``), node ``i`` gets
``.(i + 2)`` in a /24 of 198.18.0.0/15 (the range RFC 2544 sets aside for network tests, so
no real network is shadowed) chosen from the pid, skipping any /24 a route of the host already
covers, so labs of parallel test processes do not collide. Processes are put in a namespace by the *calling thread*: :meth:`inside`
moves only that thread (a network namespace is per thread in Linux) with ``setns(2)`` and
back, so a ``subprocess.Popen`` inside the block starts its child there, and the child still
dies with the thread that started it (``PR_SET_PDEATHSIG``). Its servers listen on the
node's address, which only this lab's namespaces and the host reach.

How a link is cut. Without iptables: a permanent neighbour entry on the sender side maps the
receiver's address to a MAC no interface has, so the sender's frames to it are flooded and
dropped by everyone: packets vanish silently, as on a real network (no RST, no ICMP), and a
connection in progress stalls until its own timeouts. Cutting ``a -> b`` only drops what
``a`` sends to ``b`` (an asymmetric partition: ``b``'s packets still reach ``a``, but TCP
cannot complete a handshake or deliver data either way; the sender's retransmissions do reach
the receiver when the other direction is the one cut). :meth:`heal` deletes the entries (the
next packet resolves the real MAC again).

Contract and invariants:

- :meth:`close` (and interpreter exit, through the exit registry, and the ``with`` block)
  deletes every namespace and the bridge; namespaces left by a process that no longer exists
  (killed with SIGKILL) are deleted when the next lab starts. Processes started inside are the
  caller's to stop (by their own pid): a namespace deleted while a process still runs in it
  vanishes when that process exits.
- :meth:`inside` always returns the thread to the namespace it came from, even on error.
- Only root can build a lab (``ip netns``, ``setns``); :class:`NetworkLabError` says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import subprocess
import threading
from collections.abc import Iterator, Sequence
from types import TracebackType

from hmbclient.errors import HmbError
from hmbclient.testing._process import at_exit

__all__ = ["HOST", "NetworkLab", "NetworkLabError"]

#: The name of the test's own namespace (where the bridge and the clients are).
HOST = "host"
_CLONE_NEWNET = 0x40000000
_BOGUS_MAC = "02:00:00:00:00:01"
_counter = 0
_counter_lock = threading.Lock()


class NetworkLabError(HmbError):
    """The lab could not be built or changed (not root, no ``ip``, a command failed)."""


def _ip(*args: str, check: bool = True) -> str:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetworkLabError(f"ip {' '.join(args)}: {e}") from e
    if check and done.returncode != 0:
        raise NetworkLabError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise NetworkLabError(f"setns: {os.strerror(err)}")


def _remove_stale() -> None:
    """Delete namespaces and bridges of labs whose process is gone."""
    for line in _ip("netns", "list", check=False).splitlines():
        m = re.match(r"hmbt(\d+)x\d+-\d+", line.split()[0]) if line.strip() else None
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _ip("netns", "del", line.split()[0], check=False)
    for m in re.finditer(r"^\d+: (hmbt(\d+)x\d+)[:@]", _ip("-o", "link", "show", "type", "bridge", check=False), re.M):
        if not os.path.exists(f"/proc/{m.group(2)}"):
            _ip("link", "del", m.group(1), check=False)


def _free_prefix(seed: int) -> str:
    """A ``198.(18|19).X`` /24 that no route of the host (nor another lab) uses yet."""
    routes = _ip("-o", "route", check=False)
    used = {m.group(1) for m in re.finditer(r"^(198\.1[89]\.\d+)\.\d+/", routes, re.M)}
    for k in range(512):
        key = (seed + k) % 512
        prefix = f"198.{18 + key // 256}.{key % 256}"
        if prefix not in used:
            return prefix
    raise NetworkLabError("no free /24 left in 198.18.0.0/15 for a network lab")


class NetworkLab:
    """Network namespaces for ``nodes``, joined by a bridge in the host namespace.

    Args:
        nodes: node names (unique, not :data:`HOST`); at most 200.

    Raises:
        ValueError: bad node names.
    """

    def __init__(self, nodes: Sequence[str]) -> None:
        if len(set(nodes)) != len(nodes) or HOST in nodes or not nodes or len(nodes) > 200:
            raise ValueError(f"NetworkLab: node names must be 1..200 unique names other than {HOST!r}: {list(nodes)}")
        global _counter
        with _counter_lock:
            _counter += 1
            n = _counter
        pid = os.getpid()
        self._tag = f"hmbt{pid}x{n}"
        self.bridge = self._tag[:15]
        self._prefix = _free_prefix(pid * 31 + n)
        self.nodes = list(nodes)
        self._ns = {node: f"{self._tag}-{i}" for i, node in enumerate(nodes)}
        self._addr = {node: f"{self._prefix}.{i + 2}" for i, node in enumerate(nodes)}
        self._addr[HOST] = f"{self._prefix}.1"
        self._cuts: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.running = False

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> NetworkLab:
        """Build the namespaces, veths and bridge. Returns self.

        Raises:
            NetworkLabError: not root, or an ``ip`` command failed (what was built is removed).
        """
        if self.running:
            return self
        if os.geteuid() != 0:
            raise NetworkLabError("NetworkLab needs root (ip netns, setns)")
        _remove_stale()
        at_exit.add_server(self)
        self.running = True
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self._addr[HOST]}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, node in enumerate(self.nodes):
                ns = self._ns[node]
                veth = f"{self._tag[:11]}v{i}"
                _ip("netns", "add", ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", ns, "addr", "add", f"{self._addr[node]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Delete every namespace and the bridge (their veths go with them)."""
        if not self.running:
            return
        self.running = False
        for i, ns in enumerate(self._ns.values()):
            _ip("link", "del", f"{self._tag[:11]}v{i}", check=False)  # the pair goes at once
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
        at_exit.discard_server(self)

    kill = close  # the exit registry's name

    def __enter__(self) -> NetworkLab:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- nodes --------------------------------------------------------------------------------
    def address(self, node: str) -> str:
        """The node's IPv4 address (:data:`HOST`: the bridge's, the test's own)."""
        return self._addr[node]

    def namespace(self, node: str) -> str:
        """The node's ``ip netns`` name."""
        return self._ns[node]

    @contextlib.contextmanager
    def inside(self, node: str) -> Iterator[None]:
        """Run the block with the calling thread in ``node``'s namespace (sockets it opens and
        processes it starts are there), then move it back.

        Raises:
            NetworkLabError: the lab is not running or setns failed.
        """
        if not self.running:
            raise NetworkLabError("the lab is not running")
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/run/netns/{self._ns[node]}", os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(own)

    # -- faults -------------------------------------------------------------------------------
    def _drop(self, src: str, dst: str, on: bool) -> None:
        where = ["-n", self._ns[src]] if src != HOST else []
        dev = "eth0" if src != HOST else self.bridge
        if on:
            _ip(*where, "neigh", "replace", self._addr[dst], "lladdr", _BOGUS_MAC, "dev", dev, "nud", "permanent")
        else:
            _ip(*where, "neigh", "del", self._addr[dst], "dev", dev, check=False)

    def cut(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Drop every packet ``a`` sends to ``b`` (and, unless ``one_way``, ``b`` to ``a``).

        Args:
            a: a node or :data:`HOST`.
            b: a node or :data:`HOST`.
            one_way: cut only ``a -> b``.

        Raises:
            KeyError: unknown node.
        """
        pairs = [(a, b)] if one_way else [(a, b), (b, a)]
        with self._lock:
            for src, dst in pairs:
                self._drop(src, dst, True)
                self._cuts.add((src, dst))

    def isolate(self, node: str, others: Sequence[str], *, one_way: bool = False) -> None:
        """Cut ``node`` from each of ``others`` (see :meth:`cut`).

        Args:
            node: the node cut off.
            others: the nodes (or :data:`HOST`) it is cut from.
            one_way: only ``node``'s packets to them are dropped.
        """
        for other in others:
            self.cut(node, other, one_way=one_way)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Restore ``a <-> b`` (both directions), or every link when no node is given.

        Args:
            a: a node, or None for all.
            b: the other node (with ``a``).
        """
        with self._lock:
            for src, dst in sorted(self._cuts):
                if a is None or {src, dst} == {a, b}:
                    self._drop(src, dst, False)
                    self._cuts.discard((src, dst))

    def cuts(self) -> set[tuple[str, str]]:
        """The (sender, receiver) pairs currently dropped."""
        with self._lock:
            return set(self._cuts)

    def reaches(self, a: str, b: str) -> bool:
        """Whether ``a``'s packets reach ``b`` and back (neither direction is cut)."""
        with self._lock:
            return (a, b) not in self._cuts and (b, a) not in self._cuts

    def __repr__(self) -> str:
        return f"NetworkLab({self._prefix}.0/24, {self.nodes}, running={self.running})"
