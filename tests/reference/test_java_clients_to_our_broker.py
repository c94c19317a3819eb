"""Kafka's own Java clients (4.x, the protocol's reference implementation) -> our broker.

* One EmbeddedBroker: Kafka's TopicCommand creates and lists topics; Kafka's AdminClient
  describes them (leader, replicas, ISR equal to what hmbclient's admin reports) and the group;
  VerifiableProducer (acks=all) writes, two VerifiableConsumers in one group (classic protocol)
  split the partitions and together read every acknowledged value; ConsumerGroupCommand lists
  and describes the group with the offsets they committed.
* SASL_SSL (SCRAM-SHA-512 and PLAIN, our credentials file): VerifiableProducer writes and
  Kafka's consumer reads back over the secured listener.
* A 3-broker EmbeddedCluster on a real ZooKeeper: VerifiableProducer (acks=all, min ISR 2)
  writes while the leader of its partition is killed and brought back; every acknowledged
  value is read back by Kafka's consumer.

* The same cluster as broker processes, with ``enable.idempotence=true``: VerifiableProducer
  (acks=all, 5 in flight) writes to 3 partitions through FaultProxies that lose Produce answers,
  while the leader of partition 0 is killed -9 and brought back. Every acknowledged value is read
  back exactly once, in send order per partition, at the offset its acknowledgement named.

The first leader-kill test runs with ``enable.idempotence=false``: its retries may duplicate
(allowed there, never a loss); the idempotent one judges duplicates and order too.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import admin
from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.broker.security.credentials import FileCredentialStore
from hmbclient.broker.security.tool import add_user
from hmbclient.testing import drop_every, kafka_java, kafka_java_process, proxy_cluster
from hmbclient.testing.pki import make_pki

from .helpers import java_read_all, unique

PRODUCER_FLAGS = ("--acks", "-1")


def _props_file(path: Any, props: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def verifiable_produce(bootstrap: str, topic: str, count: int, config: str, *extra: str,
                       timeout_s: float = 180) -> list[dict[str, Any]]:
    """Run VerifiableProducer to the end; its producer_send_success events (the acked values)."""
    done = kafka_java("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", bootstrap,
                      "--topic", topic, "--max-messages", str(count), *PRODUCER_FLAGS,
                      "--command-config", config, *extra, timeout_s=timeout_s)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [e for e in events if e["name"] == "producer_send_success"]


class VerifiableConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, log: str, config: str | None = None) -> None:
        self.values: list[str] = []
        self.assigned: list[list[int]] = []
        extra = ["--command-config", config] if config else []
        self.proc = kafka_java_process(
            "org.apache.kafka.tools.VerifiableConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
            "--group-id", group, "--group-protocol", "classic", "--verbose", "--reset-policy", "earliest",
            "--session-timeout", "10000", *extra, stderr_path=log)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("name") == "record_data":
                self.values.append(event["value"])
            elif event.get("name") == "partitions_assigned":
                self.assigned.append(sorted(p["partition"] for p in event["partitions"]))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self._thread.join(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("ours")
    pki = make_pki(str(d))
    creds = str(d / "credentials.json")
    add_user(FileCredentialStore(creds), "alice", "alice-secret")
    with EmbeddedBroker(listeners=["PLAINTEXT://127.0.0.1:0", "SASL_SSL://127.0.0.1:0"], ssl_certfile=pki.server_cert,
                        ssl_keyfile=pki.server_key, sasl_credentials_file=creds, log_dir=str(d / "log"),
                        offsets_topic_replication_factor=1) as b:
        b.pki = pki
        yield b


def _bootstrap(b: EmbeddedBroker, protocol: str) -> str:
    return f"127.0.0.1:{next(lst.port for lst in b.broker.server.listeners if lst.protocol == protocol)}"


def test_java_admin_producer_and_consumer_group(broker, tmp_path):
    bs = _bootstrap(broker, "PLAINTEXT")
    topic, group = unique("java"), unique("jgroup")
    kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
               "--partitions", "4", "--replication-factor", "1")
    listed = kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--list").stdout.split()
    assert topic in listed
    described = kafka_java("AdminCheck", bs, "describe-topics", topic).stdout.splitlines()
    ours = admin.describe_topics(bs, [topic])
    assert sorted(described) == sorted(
        f"{topic}\t{p.partition}\t{p.leader}\t{','.join(map(str, p.replicas))}\t{','.join(map(str, p.isr))}"
        for p in ours)
    assert len(described) == 4

    config = _props_file(tmp_path / "producer.properties", {"enable.idempotence": "false", "linger.ms": "5",
        "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"})
    acked = verifiable_produce(bs, topic, 2000, config)
    assert len(acked) == 2000
    assert {e["partition"] for e in acked} == {0, 1, 2, 3}
    want = {e["value"] for e in acked}

    consumers = [VerifiableConsumer(bs, topic, group, str(tmp_path / f"consumer{i}.log")) for i in range(2)]
    try:
        wait_until(lambda: set(consumers[0].values) | set(consumers[1].values) >= want, 90,
                   "the two Java consumers together read every acknowledged value",
                   lambda: [(len(c.values), c.assigned) for c in consumers])
        wait_until(lambda: all(c.assigned and len(c.assigned[-1]) == 2 for c in consumers), 60,
                   "our coordinator split the four partitions 2+2", lambda: [c.assigned for c in consumers])
        group_view = kafka_java("AdminCheck", bs, "describe-group", group).stdout.splitlines()
        assert group_view[0].split("\t")[0].upper() == "STABLE" and group_view[0].endswith("\t2"), group_view
        assert sorted(line.split("\t")[1] for line in group_view[1:]) == sorted(
            ",".join(map(str, c.assigned[-1])) for c in consumers)
        # VerifiableConsumer commits after each batch it consumed: the group's offsets reach the end.
        def lag_zero() -> bool:
            out = kafka_java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs,
                             "--describe", "--group", group).stdout
            rows = [ln.split() for ln in out.splitlines() if ln.startswith(group)]
            return len(rows) == 4 and all(r[5] == "0" for r in rows)
        wait_until(lag_zero, 60, "ConsumerGroupCommand shows the group's committed offsets at the end")
        assert group in kafka_java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                                   "--bootstrap-server", bs, "--list").stdout.split()
    finally:
        for c in consumers:
            c.stop()


def test_java_idempotent_producer_is_served(broker, tmp_path):
    """Kafka 4's producer is idempotent by default: InitProducerId, then batches with a producer
    id and sequence numbers. Our broker serves that path (no faults here, so no retries: this is
    not a de-duplication test -- that belongs to the idem-broker work)."""
    bs = _bootstrap(broker, "PLAINTEXT")
    topic = unique("jidem")
    config = _props_file(tmp_path / "idem.properties", {"enable.idempotence": "true", "retries": "5"})
    acked = verifiable_produce(bs, topic, 500, config)
    assert len(acked) == 500
    records = java_read_all(bs, topic, 500)
    assert [r[4].decode() for r in records] == [e["value"] for e in acked]


def test_java_admin_describes_configs(broker):
    """Kafka's AdminClient.describeConfigs and kafka-topics --describe (which asks it first) on our
    broker. Before DescribeConfigs was served both failed: "The node does not support
    DESCRIBE_CONFIGS"."""
    bs = _bootstrap(broker, "PLAINTEXT")
    topic = unique("jconf")
    admin.create_topic(bs, topic, 2, 1)
    configs = dict(line.split("=", 1) for line in kafka_java("AdminCheck", bs, "describe-configs", topic).stdout.splitlines())
    cfg = broker.config
    assert configs["retention.ms"] == str(cfg.log_retention_ms)
    assert configs["segment.bytes"] == str(cfg.log_segment_bytes)
    assert configs["max.message.bytes"] == str(cfg.message_max_bytes)
    assert configs["min.insync.replicas"] == str(cfg.min_insync_replicas)
    out = kafka_java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--describe", "--topic", topic).stdout
    assert f"Topic: {topic}" in out and "PartitionCount: 2" in out
    assert out.count("Leader: ") == 2
    # The broker's own settings, secrets hidden; an unknown topic is an error, not an empty list.
    brokers = kafka_java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bs, "--describe", "--all",
                         "--entity-type", "brokers", "--entity-name", str(cfg.broker_id)).stdout
    assert f"num.partitions={cfg.num_partitions}" in brokers
    missing = kafka_java("AdminCheck", bs, "describe-configs", unique("nosuch"), check=False)
    assert missing.returncode != 0 and "UnknownTopicOrPartition" in missing.stderr


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_java_clients_over_sasl_ssl(broker, tmp_path, mechanism):
    bs = _bootstrap(broker, "SASL_SSL")
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    security = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.jaas.config": f'{module} required username="alice" password="alice-secret";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": broker.pki.ca}
    config = _props_file(tmp_path / "sasl.properties", {**security, "enable.idempotence": "false"})
    topic = unique("jsasl")
    acked = verifiable_produce(bs, topic, 300, config)
    assert len(acked) == 300
    records = java_read_all(bs, topic, 300, properties=config)
    assert [r[4].decode() for r in records] == [e["value"] for e in acked]


def test_java_producer_through_a_leader_kill(zookeeper, tmp_path):
    topic = unique("jkill")
    with EmbeddedCluster(brokers=3, zookeeper_connect=f"{zookeeper.connect}/{unique('jc')}",
                         log_dir=str(tmp_path / "cluster"), replication_factor=3, min_insync_replicas=2,
                         offsets_topic_replication_factor=3) as cluster:
        cluster.create_topic(topic, 1, 3)
        cluster.await_isr(topic)
        config = _props_file(tmp_path / "p.properties", {
            "enable.idempotence": "false", "retries": "2147483647", "delivery.timeout.ms": "120000",
            "request.timeout.ms": "10000", "max.in.flight.requests.per.connection": "1", "linger.ms": "5"})
        proc = kafka_java_process("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", cluster.bootstrap,
                                  "--topic", topic, "--max-messages", "3000", "--throughput", "300", *PRODUCER_FLAGS,
                                  "--command-config", config, stderr_path=str(tmp_path / "producer.log"))
        acked: list[str] = []
        lines: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if '"producer_send_success"' in line:
                    acked.append(json.loads(line)["value"])

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            wait_until(lambda: len(acked) >= 500, 60, "500 acks before the kill")
            leader = admin.describe_topics(cluster.bootstrap, [topic])[0].leader
            cluster.kill(leader)
            n_at_kill = len(acked)
            wait_until(lambda: len(acked) >= n_at_kill + 500, 90, "acks again from the new leader",
                       lambda: lines[-3:])
            cluster.restart(leader)
            assert proc.wait(120) == 0, (tmp_path / "producer.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            reader.join(10)
        assert len(acked) == 3000, lines[-5:]
        cluster.await_isr(topic)
        records = java_read_all(cluster.bootstrap, topic, len(acked))
        got = {r[4].decode() for r in records}
        assert set(acked) <= got


def test_java_idempotent_producer_through_lost_answers_and_a_leader_kill(zookeeper, tmp_path):
    """enable.idempotence=true, acks=all, 5 in flight, against 3 broker processes (replication 3,
    min ISR 2) behind FaultProxies dropping every 40th Produce answer (the broker wrote the batch,
    the producer never hears of it and resends it with the same sequence), and the leader of
    partition 0 killed -9 mid-run. Judged per partition: the values read back are the acked ones
    exactly once and in send order (VerifiableProducer's values are its send counter), and each
    acked offset holds its value (a de-duplicated retry is answered with the first write's offset)."""
    topic, partitions, count = unique("jidemkill"), 3, 3000
    with EmbeddedCluster(brokers=3, zookeeper_connect=f"{zookeeper.connect}/{unique('jci')}",
                         log_dir=str(tmp_path / "cluster"), processes=True, replication_factor=3,
                         min_insync_replicas=2, offsets_topic_replication_factor=3,
                         unclean_leader_election_enable=False, zookeeper_session_timeout_ms=6000,
                         replica_lag_time_max_ms=1000) as cluster:
        cluster.create_topic(topic, partitions, 3)
        cluster.await_isr(topic)
        proxies = proxy_cluster([f"{b.host}:{b.port}" for b in cluster.brokers], drop=drop_every(40, first=20))
        for p in proxies:
            p.start()
        config = _props_file(tmp_path / "idem.properties", {
            "enable.idempotence": "true", "retries": "2147483647", "delivery.timeout.ms": "120000",
            "request.timeout.ms": "10000", "max.in.flight.requests.per.connection": "5", "linger.ms": "5",
            "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"})
        proc = kafka_java_process("org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server",
                                  ",".join(p.bootstrap for p in proxies), "--topic", topic, "--max-messages",
                                  str(count), "--throughput", "300", *PRODUCER_FLAGS, "--command-config", config,
                                  stderr_path=str(tmp_path / "producer.log"))
        acked: list[dict[str, Any]] = []
        lines: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if '"producer_send_success"' in line:
                    acked.append(json.loads(line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            wait_until(lambda: len(acked) >= 600, 60, "600 acks before the kill", lambda: lines[-3:])
            leader = cluster.leader(topic, 0)
            assert leader is not None and leader >= 0, leader
            cluster.kill(leader)
            n_at_kill = len(acked)
            wait_until(lambda: len(acked) >= n_at_kill + 600, 90, "acks again from the new leader",
                       lambda: lines[-3:])
            cluster.restart(leader)
            assert proc.wait(120) == 0, (tmp_path / "producer.log").read_text()[-3000:]
            reader.join(10)
            dropped = sum(p.stats().get("dropped", 0) for p in proxies)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            reader.join(10)
            for p in proxies:
                p.stop()
        assert len(acked) == count, lines[-5:]
        assert dropped > 0, [p.stats() for p in proxies]
        cluster.await_isr(topic)
        records = java_read_all(cluster.bootstrap, topic, count)
    for part in range(partitions):
        sent = sorted((e for e in acked if e["partition"] == part), key=lambda e: int(e["value"]))
        got = [(r[2], r[4].decode()) for r in records if r[1] == part]
        got_values = [v for _, v in got]
        dupes = sorted({v for v in got_values if got_values.count(v) > 1}, key=int)
        assert not dupes, f"partition {part}: values written twice: {dupes[:20]}"
        assert got_values == [e["value"] for e in sent], f"partition {part}: not the acked values in send order"
        at = dict(got)
        wrong = [(e["offset"], e["value"], at.get(e["offset"])) for e in sent if at.get(e["offset"]) != e["value"]]
        assert not wrong, f"partition {part}: acked offset -> value read there: {wrong[:20]}"
