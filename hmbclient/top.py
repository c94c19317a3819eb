"""``hmb top``: a live terminal view of a cluster, refreshed in place.

What it shows, each refresh: the brokers (the controller starred, how many partitions each
leads and hosts), every topic (partitions, under-replicated and offline ones, messages per
second in from the log end offsets, bytes per second in and out when brokers' metrics
endpoints are given), the partitions (leader, replicas, ISR, log end offset; under-replicated
ones marked ``!``) and the consumer groups with their lag (groups the brokers coordinate, and
ZooKeeper groups with ``--zookeeper``).

Design: :func:`collect` does the I/O and returns a :class:`Snapshot` (one NetClient kept open
across refreshes); :func:`render` is a pure function of two snapshots (the rates are their
differences) and the screen size, returning the lines; :func:`run` loops: collect, render, draw.
Drawing goes to the alternate screen on a terminal and rewrites it from the top left (each line
cleared to its end, the rest of the screen cleared after), so the view refreshes in place; with
no terminal each frame is printed after the last. Works against any Kafka-protocol cluster;
the byte rates need ``metrics.port`` on our brokers (``--metrics host:port``).
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from hmbclient.clock import monotonic_ms
from hmbclient.consumer.fetcher import list_offsets
from hmbclient.consumer.group_admin import describe_group_with, list_groups_with
from hmbclient.errors import HmbError
from hmbclient.net.client import NetClient
from hmbclient.net.metadata import Metadata

__all__ = ["GroupRow", "PartitionRow", "Snapshot", "collect", "render", "run"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    end: int | None  # log end offset (None: its leader did not answer)


@dataclass(frozen=True)
class GroupRow:
    group: str
    kind: str  # "broker" or "zookeeper"
    state: str
    members: int
    lag: int | None
    partitions: int


@dataclass
class Snapshot:
    """What one refresh saw; ``at_ms`` is monotonic."""

    at_ms: int
    bootstrap: str
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    controller: int = -1
    partitions: list[PartitionRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    #: topic -> (bytes in per second, bytes out per second), summed over the metrics endpoints
    topic_bytes: dict[str, tuple[float, float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


# -- collecting (I/O) -------------------------------------------------------------------------------

_SAMPLE = re.compile(r'^hmb_kafka_server_BrokerTopicMetrics_(BytesInPerSec|BytesOutPerSec)_rate\{(.*)\} (\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_topic_bytes(texts: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Per-topic bytes in/out per second from Prometheus scrapes of our brokers, summed."""
    out: dict[str, list[float]] = {}
    for text in texts:
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if m is None:
                continue
            labels = dict(_LABEL.findall(m.group(2)))
            topic = labels.get("topic")
            if topic is None:
                continue
            rates = out.setdefault(topic, [0.0, 0.0])
            rates[0 if m.group(1) == "BytesInPerSec" else 1] += float(m.group(3))
    return {t: (r[0], r[1]) for t, r in out.items()}


def collect(client: NetClient, metadata: Metadata, bootstrap: str, *, zookeeper: str | None = None,
            metrics: Sequence[str] = (), timeout_ms: int = 5_000,
            fetch_url: Callable[[str], str] | None = None) -> Snapshot:
    """One refresh: metadata, log end offsets, groups and lag, metrics scrapes. What fails is
    noted in ``errors`` (shown at the bottom), never raised: the view keeps refreshing."""
    snap = Snapshot(monotonic_ms(), bootstrap)
    try:
        view = metadata.refresh(None, timeout_ms=timeout_ms)
    except HmbError as e:
        snap.errors.append(f"metadata: {e}")
        return snap
    snap.brokers = dict(view.brokers)
    snap.controller = view.controller_id
    by_leader: dict[int, list[TopicPartition]] = {}
    for info in view.topics.values():
        for p in info.partitions.values():
            if p.leader >= 0:
                by_leader.setdefault(p.leader, []).append((p.topic, p.partition))
    ends: dict[TopicPartition, int] = {}
    for leader, tps in sorted(by_leader.items()):
        try:
            answers = list_offsets(client, leader, tps, True, timeout_ms)
        except HmbError as e:
            snap.errors.append(f"offsets from broker {leader}: {e}")
            continue
        ends.update({tp: v for tp, v in answers.items() if isinstance(v, int)})
    for topic in sorted(view.topics):
        for pid, p in sorted(view.topics[topic].partitions.items()):
            snap.partitions.append(PartitionRow(topic, pid, p.leader, p.replicas, p.isr, ends.get((topic, pid))))
    try:
        for group, _ in list_groups_with(client, metadata, timeout_ms):
            described = describe_group_with(client, metadata, group, timeout_ms)
            if described is not None:
                snap.groups.append(_group_row(group, "broker", described["state"], len(described["members"]),
                                              described["partitions"]))
    except HmbError as e:
        snap.errors.append(f"groups: {e}")
    if zookeeper:
        _zookeeper_groups(snap, zookeeper, bootstrap)
    get = fetch_url or _fetch_url
    texts = []
    for address in metrics:
        try:
            texts.append(get(f"http://{address}/metrics"))
        except OSError as e:
            snap.errors.append(f"metrics {address}: {e}")
    snap.topic_bytes = parse_topic_bytes(texts)
    return snap


def _group_row(group: str, kind: str, state: str, members: int, rows: list[dict[str, Any]]) -> GroupRow:
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    return GroupRow(group, kind, state or "-", members, sum(lags) if lags else None, len(rows))


def _zookeeper_groups(snap: Snapshot, zookeeper: str, bootstrap: str) -> None:
    from hmbclient.admin import describe_group, list_groups

    try:
        for group in list_groups(zookeeper):
            info = describe_group(zookeeper, group, brokers=bootstrap)
            state = "Stable" if info["members"] else "Empty"
            snap.groups.append(_group_row(group, "zookeeper", state, len(info["members"]), info["partitions"]))
    except HmbError as e:
        snap.errors.append(f"zookeeper groups: {e}")


def _fetch_url(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


# -- rendering (pure) -------------------------------------------------------------------------------

def _rate(now: Snapshot, before: Snapshot | None, topic: str) -> float | None:
    if before is None or now.at_ms <= before.at_ms:
        return None
    a = [r.end for r in now.partitions if r.topic == topic]
    b = {r.partition: r.end for r in before.partitions if r.topic == topic}
    total = 0
    for r in now.partitions:
        if r.topic != topic:
            continue
        prev = b.get(r.partition)
        if r.end is None or prev is None:
            return None
        total += r.end - prev
    return max(0, total) * 1000.0 / (now.at_ms - before.at_ms) if a else None


def _num(v: float | int | None, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), *(fmt.format(*row).rstrip() for row in rows)]


def render(now: Snapshot, before: Snapshot | None, width: int, height: int, *, interval_s: float,
           clock: str = "") -> list[str]:
    """The screen's lines for ``now`` (rates from ``before``), fitted to ``width`` x ``height``:
    the partition table is cut first (with a "... N more" line) so brokers, topics and groups
    stay visible."""
    head = [f"hmb top  {now.bootstrap}  {len(now.brokers)} broker(s), controller {now.controller}"
            f"  every {interval_s:g} s  {clock}".rstrip(), ""]
    leads: dict[int, int] = {}
    hosts: dict[int, int] = {}
    for r in now.partitions:
        leads[r.leader] = leads.get(r.leader, 0) + 1
        for b in r.replicas:
            hosts[b] = hosts.get(b, 0) + 1
    brokers = _table(("broker", "address", "leads", "hosts"), [
        (f"{b}{'*' if b == now.controller else ''}", f"{h}:{p}", str(leads.get(b, 0)), str(hosts.get(b, 0)))
        for b, (h, p) in sorted(now.brokers.items())
    ])
    topic_rows = []
    for topic in sorted({r.topic for r in now.partitions}):
        parts = [r for r in now.partitions if r.topic == topic]
        under = sum(1 for r in parts if len(r.isr) < len(r.replicas))
        offline = sum(1 for r in parts if r.leader < 0)
        ends = [r.end for r in parts if r.end is not None]
        bytes_in, bytes_out = now.topic_bytes.get(topic, (None, None))
        topic_rows.append((topic, str(len(parts)), str(under), str(offline), _num(_rate(now, before, topic), "{:,.1f}"),
                           _num(bytes_in), _num(bytes_out), _num(sum(ends) if ends else None)))
    topics = _table(("topic", "partitions", "under-replicated", "offline", "msgs/s in", "bytes/s in", "bytes/s out",
                     "messages"), topic_rows)
    groups = _table(("group", "kind", "state", "members", "partitions", "lag"), [
        (g.group, g.kind, g.state, str(g.members), str(g.partitions), _num(g.lag)) for g in now.groups
    ]) if now.groups else ["(no consumer groups)"]
    part_rows = [(f"{r.topic}-{r.partition}{' !' if len(r.isr) < len(r.replicas) else ''}", str(r.leader),
                  ",".join(map(str, r.replicas)), ",".join(map(str, r.isr)), _num(r.end, "{}"))
                 for r in now.partitions]
    partitions = _table(("partition", "leader", "replicas", "isr", "end offset"), part_rows)
    errors = [f"! {e}" for e in now.errors]
    fixed = [*head, "BROKERS", *brokers, "", "TOPICS", *topics, "", "GROUPS", *groups, "", "PARTITIONS"]
    room = height - len(fixed) - len(errors)
    if room < len(partitions):
        shown = max(1, room - 1)
        partitions = [*partitions[:shown], f"... {len(partitions) - shown} more"]
    lines = [*fixed, *partitions, *errors]
    return [line[:width].rstrip() for line in lines[:height]]


# -- the loop --------------------------------------------------------------------------------------

def run(bootstrap: str, *, interval_s: float = 2.0, iterations: int | None = None, zookeeper: str | None = None,
        metrics: Sequence[str] = (), api_version: str = "auto", security: Any = None,
        out: TextIO | None = None, stop: threading.Event | None = None) -> int:
    """Refresh the view every ``interval_s`` until ``iterations`` frames were drawn, ``stop``
    is set, or Ctrl-C. Returns 0."""
    out = out if out is not None else sys.stdout
    stop = stop if stop is not None else threading.Event()
    tty = out.isatty()
    client = NetClient(bootstrap, client_id="hmb-top", api_version=api_version, request_timeout_ms=5_000,
                       security=security, name="hmb-top-io")
    metadata = Metadata(client, allow_auto_topic_creation=False)
    before: Snapshot | None = None
    drawn = 0
    if tty:
        out.write("\x1b[?1049h\x1b[?25l")  # the alternate screen, no cursor
    try:
        while iterations is None or drawn < iterations:
            now = collect(client, metadata, bootstrap, zookeeper=zookeeper, metrics=metrics)
            size = shutil.get_terminal_size((120, 40))
            lines = render(now, before, size.columns, size.lines if tty else 10_000, interval_s=interval_s,
                           clock=time.strftime("%H:%M:%S"))
            if tty:
                out.write("\x1b[H" + "".join(line + "\x1b[K\n" for line in lines[:-1]) + lines[-1] + "\x1b[K\x1b[J")
            else:
                out.write("\n".join(lines) + "\n\n")
            out.flush()
            drawn += 1
            before = now
            if iterations is not None and drawn >= iterations:
                break
            if stop.wait(interval_s):
                break
    except KeyboardInterrupt:
        pass
    finally:
        if tty:
            out.write("\x1b[?25h\x1b[?1049l")
            out.flush()
        client.close()
    return 0
