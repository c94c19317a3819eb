"""hmbclient -> Apache Kafka 4.x (KRaft), every message read back by Kafka's own Java consumer.

Kafka 4 removed the request versions older than Kafka 2.1 (KIP-896) and accepts only
RecordBatch v2 in Produce (v3+); Fetch answers carry what was written. So the formats that
reach it are RecordBatch v2 under every codec, through ``api_version="auto"`` (the ApiVersions
probe) and the pinned ``"2.1"``; the pinned 0.8/0.10 dialects must fail with an error that says
why. Also: the other direction of the codec matrix (batches Kafka's Java producer compressed,
fetched by hmbclient), SimpleConsumer's offsets, admin (create/describe topics), TLS and SASL
(PLAIN, SCRAM-SHA-256/512) listeners, and the ``hmb`` CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hmbclient import (
    EARLIEST_TIME,
    LATEST_TIME,
    FetchRequest,
    Producer,
    ProducerData,
    SimpleConsumer,
    admin,
)
from hmbclient.errors import KafkaConnectionError
from hmbclient.testing import kafka_java

from .helpers import java_read_all, unique, values

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _fetch_all(kafka, topic: str, partition: int = 0, api_version: str = "auto") -> list:
    consumer = SimpleConsumer("127.0.0.1", kafka.ports[0]["PLAINTEXT"], api_version=api_version)
    try:
        out, offset = [], 0
        while True:
            got = list(consumer.fetch(FetchRequest(topic, partition, offset, 1 << 20)))
            if not got:
                return out
            out += got
            offset = got[-1].next_offset
    finally:
        consumer.close()


@pytest.mark.parametrize("api_version", ["auto", "2.1"])
def test_produce_every_codec_fetch_and_java_reads_back(kafka4, api_version):
    topics, sent = [], {}
    for codec in CODECS:
        topic = unique(f"codec-{codec}")
        topics.append(topic)
        producer = Producer(metadata_broker_list=kafka4.bootstrap, compression_codec=codec,
                            api_version=api_version, request_required_acks=-1, batch_num_messages=50)
        try:
            msgs = [f"{codec}-{api_version}-{i}".encode() * (1 + i % 7) for i in range(120)]
            futures = producer.send(ProducerData(topic, b"key-" + codec.encode(), msgs))
            offsets = [f.result(timeout=30).offset for f in futures]
        finally:
            producer.close()
        assert offsets == list(range(120)), codec
        sent[topic] = msgs
        fetched = _fetch_all(kafka4, topic, api_version=api_version)
        assert [m.message.value for m in fetched] == msgs, codec
        assert [m.offset for m in fetched] == list(range(120))
        assert {m.message.key for m in fetched} == {b"key-" + codec.encode()}
    records = java_read_all(kafka4.bootstrap, topics, sum(map(len, sent.values())))
    for topic in topics:
        assert [r[4] for r in records if r[0] == topic] == sent[topic], topic


def test_fetch_batches_the_java_producer_compressed(kafka4):
    """The other side of the codec matrix: Kafka's producer writes, hmbclient decodes."""
    for codec in CODECS:
        topic = unique(f"javacodec-{codec}")
        lines = [f"{codec} line {i} " + "x" * (i % 50) for i in range(200)]
        kafka_java("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", kafka4.bootstrap,
                   "--topic", topic, "--compression-codec", codec, "--batch-size", "50",
                   input="\n".join(lines) + "\n")
        fetched = _fetch_all(kafka4, topic)
        assert [m.message.value.decode() for m in fetched] == lines, codec


@pytest.mark.parametrize("api_version", ["0.8", "0.10"])
def test_pinned_pre_2_1_dialects_fail_with_a_clear_error(kafka4, api_version):
    """Kafka 4 closes the connection on the removed versions (KIP-896): the error must say so
    (it used to blame a TLS listener only), and nothing is silently lost or half-written."""
    topic = unique("pinned")
    producer = Producer(metadata_broker_list=kafka4.bootstrap, api_version=api_version,
                        message_send_max_retries=1, retry_backoff_ms=50)
    try:
        with pytest.raises(KafkaConnectionError, match=r"api_version='0\.(8|10)'.*Kafka 4 removed"):
            producer.send(ProducerData(topic, None, [b"never"]))
    finally:
        producer.close()
    # Metadata v0 is still served (it auto-created the topic); nothing was written to it.
    assert admin.latest_offsets(kafka4.bootstrap, topic) == {0: 0}


def test_simple_consumer_offsets_and_multifetch(kafka4):
    topic = unique("simple")
    admin.create_topic(kafka4.bootstrap, topic, 3, 1)
    producer = Producer(metadata_broker_list=kafka4.bootstrap, request_required_acks=1)
    try:
        for i in range(30):
            producer.send(ProducerData(topic, f"k{i}".encode(), [f"v{i}".encode()]))
    finally:
        producer.close()
    parts = admin.describe_topics(kafka4.bootstrap, [topic])
    assert len(parts) == 3 and all(p.leader == 1 for p in parts)
    consumer = SimpleConsumer("127.0.0.1", kafka4.ports[0]["PLAINTEXT"])
    try:
        latest = [consumer.get_offsets_before(topic, p, LATEST_TIME, 1)[0] for p in range(3)]
        earliest = [consumer.get_offsets_before(topic, p, EARLIEST_TIME, 1)[0] for p in range(3)]
        sets = consumer.multifetch([FetchRequest(topic, p, 0, 1 << 20) for p in range(3)])
    finally:
        consumer.close()
    assert earliest == [0, 0, 0]
    got = [[m.message.value for m in s] for s in sets]
    assert [len(g) for g in got] == latest
    records = java_read_all(kafka4.bootstrap, topic, sum(latest))
    for p in range(3):
        assert [r[4] for r in records if r[1] == p] == got[p]


@pytest.mark.parametrize("protocol,mechanism", [
    ("SSL", None), ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512"),
])
def test_tls_and_sasl_listeners(kafka4, protocol, mechanism):
    topic = unique(f"sec-{(mechanism or 'tls').lower()}")
    security = {"security.protocol": protocol, "ssl.cafile": kafka4.pki.ca}
    if mechanism:
        security.update({"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": "alice-secret"})
    producer = Producer.from_properties({"metadata.broker.list": kafka4.bootstrap_for(protocol),
                                         "request.required.acks": "-1", "compression.codec": "lz4", **security})
    msgs = [f"{protocol}-{mechanism}-{i}".encode() for i in range(50)]
    try:
        [f.result(timeout=30) for f in producer.send(ProducerData(topic, None, msgs))]
    finally:
        producer.close()
    host, port = kafka4.bootstrap_for(protocol).split(":")
    consumer = SimpleConsumer(host, int(port), **{k.replace(".", "_"): v for k, v in security.items()})
    try:
        fetched = [m.message.value for m in consumer.fetch(FetchRequest(topic, 0, 0, 1 << 20))]
    finally:
        consumer.close()
    assert fetched == msgs
    # Java reads it over the same secured listener.
    props = kafka4.write_client_properties(protocol, mechanism=mechanism or "SCRAM-SHA-256")
    assert values(java_read_all(kafka4.bootstrap_for(protocol), topic, 50, properties=props)) == msgs


def test_sasl_wrong_password_is_refused(kafka4):
    producer = Producer.from_properties({
        "metadata.broker.list": kafka4.bootstrap_for("SASL_SSL"), "security.protocol": "SASL_SSL",
        "ssl.cafile": kafka4.pki.ca, "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
        "sasl.password": "wrong", "message.send.max.retries": "0"})
    try:
        with pytest.raises(Exception, match="(?i)auth"):
            producer.send(ProducerData(unique("nopass"), None, [b"x"]))
    finally:
        producer.close()


def test_hmb_cli_produce_and_consume(kafka4, tmp_path):
    topic = unique("cli")
    lines = [f"key{i}:value {i}" for i in range(40)]
    env = {**os.environ}
    hmb = [sys.executable, "-m", "hmbclient.cli"]
    subprocess.run([*hmb, "produce", "-b", kafka4.bootstrap, "-K", ":", "--acks", "-1", "-z", "zstd", topic],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=120, env=env, capture_output=True)
    out = subprocess.run([*hmb, "consume", "-b", kafka4.bootstrap, "-o", "earliest", "--exit-at-end",
                          "--format", "%k=%s\\n", topic],
                         text=True, check=True, timeout=120, env=env, capture_output=True).stdout
    assert out.splitlines() == [ln.replace(":", "=", 1) for ln in lines]
    # ...and over SASL_SSL with -X settings, the password from a file.
    pw = tmp_path / "pw"
    pw.write_text("alice-secret\n")
    sec = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.cafile={kafka4.pki.ca}", "-X",
           "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", f"sasl.password=@{pw}"]
    subprocess.run([*hmb, "produce", "-b", kafka4.bootstrap_for("SASL_SSL"), *sec, topic],
                   input="more\n", text=True, check=True, timeout=120, env=env, capture_output=True)
    records = java_read_all(kafka4.bootstrap, topic, 41)
    assert [(r[3], r[4]) for r in records] == [
        *[(f"key{i}".encode(), f"value {i}".encode()) for i in range(40)], (None, b"more")]
