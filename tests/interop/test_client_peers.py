"""hmbclient and independent clients read each other's messages identically.

* hmbclient produces (sync/async, every codec, keys and null keys, pinned versions) ->
  kafka-python reads the same keys, values and offsets, on Tansu and on the embedded broker;
  kcat (librdkafka) reads them too, on the embedded broker (kcat 1.7 cannot talk to Tansu).
* kafka-python and kcat produce -> hmbclient's SimpleConsumer reads the same keys, values and
  offsets.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedBroker
from hmbclient.testing.tansu import LocalTansu

pytestmark = pytest.mark.timeout(180)

KCAT = shutil.which("kcat")
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


class Srv:
    def __init__(self, kind: str, host: str, port: int) -> None:
        self.kind, self.host, self.port = kind, host, port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


@pytest.fixture(scope="module", params=["tansu", "embedded"])
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Srv]:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if request.param == "tansu":
        with LocalTansu() as t:
            yield Srv("tansu", t.host, t.port)
    else:
        with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("peers")), num_partitions=1) as b:
            yield Srv("embedded", b.host, b.port)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Srv]:
    """The embedded broker alone: legacy formats and kcat (which cannot talk to Tansu)."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("peers-legacy")), num_partitions=1) as b:
        yield Srv("embedded", b.host, b.port)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(srv: Srv, topic: str) -> None:
    from hmbclient.net import Metadata, NetClient
    from hmbclient.protocol.api.base import ApiKey

    with NetClient(srv.bootstrap) as c:
        c.call(-1, lambda v: v.build(ApiKey.CREATE_TOPICS, topics=[(topic, 1, 1, [], [])], timeout_ms=10_000, validate_only=False))
        Metadata(c).partitions_for(topic, 10_000)


def _messages(n: int, tag: str) -> list[tuple[bytes | None, bytes]]:
    # Printable, so kcat's JSON output carries them unchanged; every third key is null.
    return [(None if i % 3 == 0 else b"k%d" % (i % 5), (f"{tag}-{i}-" + "x" * (i % 41)).encode()) for i in range(n)]


def _kafka_python_read(srv: Srv, topic: str, n: int) -> list[tuple[int, bytes | None, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id=None, consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out = []
        for m in c:
            out.append((m.offset, m.key, m.value))
            if len(out) == n:
                break
        return out
    finally:
        c.close()


def _hmb_read(srv: Srv, topic: str, api_version: str = "auto") -> list[tuple[int, bytes | None, bytes]]:
    out: list[tuple[int, bytes | None, bytes]] = []
    with SimpleConsumer(srv.host, srv.port, api_version=api_version) as c:
        offset = 0
        while True:
            recs = list(c.fetch(FetchRequest(topic, 0, offset, 1 << 20)))
            if not recs:
                return out
            out += [(r.offset, r.key, r.value) for r in recs]
            offset = recs[-1].next_offset


def _kcat(srv: Srv, *args: str, stdin: bytes | None = None) -> bytes:
    assert KCAT, "kcat is not installed (Debian package kcat; `make setup` installs it)"
    r = subprocess.run([KCAT, "-b", srv.bootstrap, *args], input=stdin, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def _kcat_read(srv: Srv, topic: str) -> list[tuple[int, bytes | None, bytes]]:
    out = []
    for line in _kcat(srv, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J", "-q").splitlines():
        m = json.loads(line)
        key = None if m["key"] is None else m["key"].encode()
        out.append((m["offset"], key, m["payload"].encode()))
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_hmbclient_produces_peers_read(srv: Srv, codec: str, ptype: str) -> None:
    topic = unique(f"hp-{codec}")
    _create(srv, topic)
    msgs = _messages(60, codec)
    with Producer(metadata_broker_list=srv.bootstrap, producer_type=ptype, compression_codec=codec, batch_num_messages=25) as p:
        futs = [p.send(ProducerData(topic, k, [v]))[0] for k, v in msgs]
        p.flush()
        assert [f.result(10).offset for f in futs] == list(range(60))
    want = [(i, k, v) for i, (k, v) in enumerate(msgs)]
    assert _kafka_python_read(srv, topic, 60) == want
    if srv.kind == "embedded":
        assert _kcat_read(srv, topic) == want
    assert _hmb_read(srv, topic) == want


@pytest.mark.parametrize("pin", ["0.8", "0.10"])
def test_pinned_legacy_formats_are_read_by_peers(embedded: Srv, pin: str) -> None:
    # Tansu speaks only RecordBatch v2: MessageSet v0/v1 go to the embedded broker.
    srv = embedded
    topic = unique(f"pin{pin}")
    msgs = _messages(30, pin)
    with Producer(metadata_broker_list=srv.bootstrap, api_version=pin, compression_codec="gzip") as p:
        for k, v in msgs:
            p.send(ProducerData(topic, k, [v]))
    want = [(i, k, v) for i, (k, v) in enumerate(msgs)]
    assert _kafka_python_read(srv, topic, 30) == want
    assert _kcat_read(srv, topic) == want


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_produces_hmbclient_reads(srv: Srv, codec: str) -> None:
    from kafka import KafkaProducer

    topic = unique(f"kp-{codec}")
    _create(srv, topic)
    msgs = _messages(80, "kp")
    p = KafkaProducer(bootstrap_servers=srv.bootstrap, compression_type=None if codec == "none" else codec, linger_ms=5)
    try:
        futs = [p.send(topic, key=k, value=v, partition=0) for k, v in msgs]
        p.flush(10)
        offsets = [f.get(10).offset for f in futs]
    finally:
        p.close(5)
    assert offsets == list(range(80))
    assert _hmb_read(srv, topic) == [(i, k, v) for i, (k, v) in enumerate(msgs)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_produces_hmbclient_reads(embedded: Srv, codec: str) -> None:
    srv = embedded  # kcat 1.7 cannot talk to Tansu
    topic = unique(f"kc-{codec}")
    _create(srv, topic)
    msgs = [(b"k%d" % i, b"kcat-%d-%s" % (i, b"y" * (i % 13))) for i in range(50)]
    _kcat(srv, "-P", "-t", topic, "-p", "0", "-K", ":", "-z", codec, stdin=b"\n".join(k + b":" + v for k, v in msgs) + b"\n")
    want = [(i, k, v) for i, (k, v) in enumerate(msgs)]
    assert _hmb_read(srv, topic) == want
    assert _hmb_read(srv, topic, api_version="0.8") == want  # down-converted for Fetch v0
