"""Independent clients against the embedded broker: kafka-python (default and legacy
api_version), kcat/librdkafka (default and 0.8.2.2 fallback) and confluent-kafka; keys and
compression; consumed bytes equal produced bytes, and the stored format is the one each client
sent (the broker keeps wire bytes; older fetch versions get down-converted copies)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

KCAT = shutil.which("kcat")
LEGACY_KCAT = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # shutdown chatter of kafka-python
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("peers"))) as b:
        yield b


def _messages(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    return [(b"key-%d" % i, (f"{tag}-{i}-" + "x" * (i % 97)).encode()) for i in range(n)]


def _stored_magics(broker: EmbeddedBroker, topic: str) -> set[int]:
    from hmbclient.protocol import records

    seg = os.path.join(broker.log_dir, f"{topic}-0", "00000000000000000000.log")
    with open(seg, "rb") as f:
        return {e.magic for e in records.scan_entries(f.read())[0]}


def _kafka_python_produce(broker: EmbeddedBroker, topic: str, msgs: list[tuple[bytes, bytes]], api_version: Any, compression: str | None) -> None:
    from kafka import KafkaProducer

    kw = {} if api_version is None else {"api_version": api_version}
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=compression, linger_ms=5, **kw)
    try:
        futures = [p.send(topic, key=k, value=v, partition=0) for k, v in msgs]
        p.flush(10)
        offsets = [f.get(10).offset for f in futures]
    finally:
        p.close(5)
    assert offsets == list(range(offsets[0], offsets[0] + len(msgs)))


def _kafka_python_consume(broker: EmbeddedBroker, topic: str, n: int, api_version: Any) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    kw = {} if api_version is None else {"api_version": api_version}
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, consumer_timeout_ms=3000, enable_auto_commit=False, **kw)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out = []
        for m in c:
            out.append((m.key, m.value))
            if len(out) == n:
                break
        return out
    finally:
        c.close()


def _kcat(broker: EmbeddedBroker, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert KCAT, "kcat is not installed (Debian package kcat; `make setup` installs it)"
    r = subprocess.run([KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r


def _kcat_produce(broker: EmbeddedBroker, topic: str, msgs: list[tuple[bytes, bytes]], codec: str, legacy: bool) -> None:
    lines = b"".join(k + b"\t" + v + b"\n" for k, v in msgs)
    _kcat(broker, "-P", "-t", topic, "-p", "0", "-K", "\t", "-z", codec, "-X", "queue.buffering.max.ms=20", *(LEGACY_KCAT if legacy else []), stdin=lines)


def _kcat_consume(broker: EmbeddedBroker, topic: str, legacy: bool) -> list[tuple[bytes, bytes]]:
    r = _kcat(broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%k\t%s\n", *(LEGACY_KCAT if legacy else []))
    return [tuple(line.split(b"\t", 1)) for line in r.stdout.splitlines()]  # type: ignore[misc]


# --- kafka-python ----------------------------------------------------------------------------------

@pytest.mark.parametrize("api_version,magic", [((0, 8, 2), 0), ((0, 10, 0), 1), (None, 2)], ids=["0.8.2", "0.10.0", "default"])
@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4"])
def test_kafka_python_produce_and_consume(broker: EmbeddedBroker, api_version: Any, magic: int, compression: str | None) -> None:
    topic = f"kp-{magic}-{compression}"
    msgs = _messages(300, topic)
    _kafka_python_produce(broker, topic, msgs, api_version, compression)
    assert _stored_magics(broker, topic) == {magic}
    for consumer_version in ((0, 8, 2), (0, 10, 0), None):
        assert _kafka_python_consume(broker, topic, len(msgs), consumer_version) == msgs, consumer_version


# --- kcat (librdkafka 1.x) -------------------------------------------------------------------------

@pytest.mark.parametrize("legacy", [False, True], ids=["default", "fallback-0.8.2.2"])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_produce_and_consume(broker: EmbeddedBroker, legacy: bool, codec: str) -> None:
    topic = f"kcat-{codec}-{'legacy' if legacy else 'default'}"
    msgs = _messages(250, topic)
    _kcat_produce(broker, topic, msgs, codec, legacy)
    assert _stored_magics(broker, topic) == ({0} if legacy else {2})
    assert _kcat_consume(broker, topic, legacy) == msgs
    assert _kcat_consume(broker, topic, not legacy) == msgs


def test_cross_client_and_down_conversion(broker: EmbeddedBroker) -> None:
    # kafka-python writes RecordBatch v2; kcat in 0.8.2.2 mode reads it down-converted to v0
    msgs = _messages(100, "cross-a")
    _kafka_python_produce(broker, "cross-a", msgs, None, "gzip")
    assert _kcat_consume(broker, "cross-a", legacy=True) == msgs
    # kcat in 0.8.2.2 mode writes MessageSet v0; kafka-python (modern fetch) reads it as is
    msgs = _messages(100, "cross-b")
    _kcat_produce(broker, "cross-b", msgs, "gzip", legacy=True)
    assert _kafka_python_consume(broker, "cross-b", len(msgs), None) == msgs


def test_kcat_metadata_listing(broker: EmbeddedBroker) -> None:
    _kafka_python_produce(broker, "listed-by-kcat", _messages(3, "l"), None, None)
    for legacy in (False, True):
        out = _kcat(broker, "-L", *(LEGACY_KCAT if legacy else [])).stdout.decode()
        assert 'topic "listed-by-kcat" with 1 partitions' in out
        assert f"broker 0 at 127.0.0.1:{broker.port}" in out


# --- confluent-kafka (librdkafka 2.x) --------------------------------------------------------------

@pytest.mark.parametrize("codec", ["none", "snappy", "lz4", "zstd"])
def test_confluent_kafka_produce_and_consume(broker: EmbeddedBroker, codec: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"ck-{codec}"
    msgs = _messages(500, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5})
    errors: list[Any] = []
    for k, v in msgs:
        p.produce(topic, value=v, key=k, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and errors == []
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[bytes, bytes]] = []
        while len(got) < len(msgs):
            batch = c.consume(num_messages=len(msgs) - len(got), timeout=10)
            assert batch, f"stalled after {len(got)} messages"
            for m in batch:
                assert m.error() is None, m.error()
                got.append((m.key(), m.value()))
    finally:
        c.close()
    assert got == msgs
