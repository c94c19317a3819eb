"""The broker's metrics: counted from real traffic (a producer and a consumer of ours), read
through ``Broker.metrics()`` and scraped over HTTP from the Prometheus endpoint; ISR shrinks and
under-replicated partitions from a follower killed in a two-broker cluster."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedBroker, EmbeddedCluster

TOPICS = "kafka.server.BrokerTopicMetrics"
REPLICAS = "kafka.server.ReplicaManager"


def _scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the scrape")


def test_traffic_is_counted_and_scraped(tmp_path) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), metrics_port=0) as b:
        port = b.broker.metrics_endpoint.port
        p = Producer(metadata_broker_list=b.bootstrap, request_required_acks=1)
        values = [f"m-{i:03d}".encode() for i in range(300)]  # 5 bytes of value each
        try:
            for i in range(0, 300, 100):
                p.send(ProducerData("metered", None, values[i:i + 100]))
        finally:
            p.close()
        c = SimpleConsumer("127.0.0.1", b.port)
        try:
            got = list(c.fetch(FetchRequest("metered", 0, 0, 1 << 20)))
        finally:
            c.close()
        assert len(got) == 300
        snap = b.broker.metrics()
        topics = snap[TOPICS]
        assert topics["MessagesInPerSec-total"] == 300
        assert topics["BytesInPerSec-total"] >= 300 * 5 and topics["MessagesInPerSec-rate"] > 0
        assert topics["BytesOutPerSec-total"] >= topics["BytesInPerSec-total"] * 0.9  # the same batches read back
        assert topics["TotalProduceRequestsPerSec-total"] == 3 and topics["TotalFetchRequestsPerSec-total"] >= 1
        assert topics["FailedProduceRequestsPerSec-total"] == 0
        # per topic, as Kafka's BrokerTopicMetrics with topic=...
        assert topics["MessagesInPerSec-total{topic=metered}"] == 300
        assert topics["BytesInPerSec-total{topic=metered}"] == topics["BytesInPerSec-total"]
        assert topics["BytesOutPerSec-total{topic=metered}"] == topics["BytesOutPerSec-total"]
        assert snap[REPLICAS]["PartitionCount"] >= 1 and snap[REPLICAS]["UnderReplicatedPartitions"] == 0
        assert snap["kafka.controller.KafkaController"]["ActiveControllerCount"] == 1
        rq = snap["kafka.network.RequestChannel"]
        assert rq["RequestsPerSec-total"] >= 5 and rq["TotalTimeMs-max"] >= rq["TotalTimeMs-avg"] >= 0
        text = _scrape(port)
        assert _sample(text, "hmb_kafka_server_BrokerTopicMetrics_MessagesInPerSec_total") == 300
        assert _sample(text, 'hmb_kafka_server_BrokerTopicMetrics_MessagesInPerSec_total{broker="0",topic="metered"}') == 300
        assert '{broker="0"}' in text and "# TYPE hmb_kafka_server_ReplicaManager_UnderReplicatedPartitions gauge" in text
        with pytest.raises(urllib.error.HTTPError) as e:
            _scrape(port, "/other")
        assert e.value.code == 404
    # stopped with the broker: the port no longer answers
    with pytest.raises(OSError):
        _scrape(port)


def test_no_endpoint_unless_asked(tmp_path) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path)) as b:
        assert b.broker.metrics_endpoint is None and b.broker.metrics()[REPLICAS]["LeaderCount"] == 0


def test_isr_shrink_and_under_replicated_partitions(zookeeper: Any, tmp_path) -> None:
    with EmbeddedCluster(brokers=2, num_partitions=1, log_dir=str(tmp_path), replica_lag_time_max_ms=1_000,
                         zookeeper_connect=f"{zookeeper.connect}/metrics-{time.monotonic_ns()}") as cluster:
        cluster.create_topic("isr-metered", 1, 2)
        cluster.await_isr("isr-metered")
        leader = cluster.leader("isr-metered", 0)
        assert leader is not None
        lb = cluster.broker(leader)
        follower = 1 - leader
        assert lb.metrics()[REPLICAS]["UnderReplicatedPartitions"] == 0
        # The follower stops fetching but stays registered (a stuck replica fetcher): the
        # leader drops it from the ISR after replica.lag.time.max.ms, a shrink of its own.
        cluster.broker(follower).replica_manager.fetchers.shutdown()
        wait_until(lambda: lb.metrics()[REPLICAS]["UnderReplicatedPartitions"] == 1, 20, "the leader shrinks the ISR")
        snap = lb.metrics()[REPLICAS]
        assert snap["IsrShrinksPerSec-total"] == 1 and snap["IsrExpandsPerSec-total"] == 0
        # A fresh follower catches up and the leader takes it back: an expansion.
        cluster.kill(follower)
        cluster.restart(follower)
        wait_until(lambda: lb.metrics()[REPLICAS]["UnderReplicatedPartitions"] == 0, 30, "the follower back in the ISR")
        snap = lb.metrics()[REPLICAS]
        assert snap["IsrExpandsPerSec-total"] == 1 and snap["IsrShrinksPerSec-total"] == 1
