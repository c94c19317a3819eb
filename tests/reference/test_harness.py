"""The ApacheKafka harness itself: what a user's test sees when something is missing or fails."""

from __future__ import annotations

import pytest

from hmbclient.testing import ApacheKafka, ApacheKafkaError, ApacheKafkaNotFoundError, kafka_java


def test_missing_jars_say_to_run_make_peers(monkeypatch, tmp_path):
    monkeypatch.setenv("HMB_MAVEN_PEERS", str(tmp_path / "empty"))
    with pytest.raises(ApacheKafkaNotFoundError, match="make peers"):
        ApacheKafka()
    with pytest.raises(ApacheKafkaNotFoundError, match="make peers"):
        kafka_java("org.apache.kafka.tools.VerifiableProducer", "--help")


def test_a_version_we_did_not_fetch_is_named():
    with pytest.raises(ApacheKafkaNotFoundError, match="4.0.0 is not in"):
        ApacheKafka(version="4.0.0")
    with pytest.raises(ValueError, match="not one of the peers"):
        ApacheKafka(version="3.9.0")


def test_bad_listeners_and_0_8_security_are_refused():
    with pytest.raises(ValueError, match="listeners"):
        ApacheKafka(listeners=("PLAINTEXT", "QUIC"))
    with pytest.raises(ValueError, match="PLAINTEXT only"):
        ApacheKafka(version="0.8.2.2", listeners=("SSL",))


def test_a_failing_tool_raises_with_its_stderr():
    with pytest.raises(ApacheKafkaError, match="exited with"):
        kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", "127.0.0.1:1", "--describe",
                   "--topic", "x", "--command-config", "/nonexistent.properties", timeout_s=60)


def test_a_node_that_cannot_start_fails_with_its_log():
    # An unknown listener name: Kafka refuses it (at format time); the error quotes its log.
    with pytest.raises(ApacheKafkaError, match=r"(?s)failed for node 0.*NOSUCH defined in inter.broker.listener.name"), \
            ApacheKafka(extra_config={"inter.broker.listener.name": "NOSUCH"}, startup_timeout_s=60):
        pass


def test_the_pytest_fixture_serves(apache_kafka):
    """The plugin's ``apache_kafka`` fixture, as a user's suite gets it."""
    from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer

    producer = Producer(metadata_broker_list=apache_kafka.bootstrap, request_required_acks=-1)
    try:
        producer.send(ProducerData("fixture-topic", None, [b"hello"]))
    finally:
        producer.close()
    host, port = apache_kafka.bootstrap.split(":")
    consumer = SimpleConsumer(host, int(port))
    try:
        assert [m.message.value for m in consumer.fetch(FetchRequest("fixture-topic", 0, 0, 65536))] == [b"hello"]
    finally:
        consumer.close()
