"""Client quotas enforced end to end (issue 27): quotas written to ZooKeeper by ``hmb quotas``
(Kafka's /config/clients layout), read by a running broker without a restart, and clients held
to them by throttle_time_ms and muting (KIP-219) -- kafka-python and hmbclient producers, a
kafka-python consumer -- while an unquota'd client in the same run is not slowed.

Rates are measured from acknowledged (or received) bytes after a 2 s warm-up (the quota
window starts with a burst of up to one window of bytes, as Kafka's does).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Any

import kafka  # kafka-python is a test dependency: a missing one fails, never skips
import pytest

from hmbclient import Producer
from hmbclient.broker.embedded import EmbeddedBroker
from hmbclient.broker.quotas import CONSUMER, PRODUCER, resolve
from hmbclient.cli import main as hmb

from .conftest import wait_until

QUOTA = 200_000
VALUE = b"q" * 1000
WARMUP_S = 2.0  # the 2 x 1 s quota window: the opening burst has aged out
RUN_S = 4.5


@pytest.fixture(scope="module")
def chroot(zookeeper: Any) -> str:
    return f"{zookeeper.connect}/quotas-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker(chroot: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    # 2 samples of 1 s: a throttled client settles within the test's few seconds
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("quotas")), zookeeper_connect=chroot,
                        num_partitions=1, quota_window_num=2) as b:
        yield b


def _set_quota(chroot: str, broker: EmbeddedBroker, client_id: str, key: str, rate: int) -> None:
    assert hmb(["quotas", "--zookeeper", chroot, "--client-id", client_id, "--add", f"{key}={rate}"]) == 0
    quotas = broker.broker.apis.quotas  # type: ignore[union-attr]
    # applied from the /config/changes notification: no restart
    wait_until(lambda: (resolve(quotas.configs, key, "ANONYMOUS", client_id) or (0,))[0] == rate, 10, f"quota {client_id} in force")


def _steady_rate(stamps: list[tuple[float, int]], t0: float, end: float) -> float:
    nbytes = sum(n for t, n in stamps if t0 + WARMUP_S <= t <= end)  # not the tail flushed at close
    return nbytes / (end - t0 - WARMUP_S)


def _kafka_python_producer(bootstrap: str, client_id: str, seconds: float, out: dict[str, Any]) -> None:
    p = kafka.KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, acks=1)
    stamps: list[tuple[float, int]] = []
    futs: deque[Any] = deque()
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        f = p.send("quota-topic", VALUE)
        f.add_callback(lambda _md: stamps.append((time.monotonic(), len(VALUE))))
        futs.append(f)
        if len(futs) > 300:  # as fast as acknowledgements allow, not a growing backlog
            futs.popleft().get(timeout=30)
    end = time.monotonic()
    out["rate"] = _steady_rate(stamps, t0, end)
    out["throttle_max"] = p.metrics()["producer-metrics"]["throttle-time-max"]
    p.close(timeout=30)


def _hmb_producer(bootstrap: str, client_id: str, seconds: float, out: dict[str, Any]) -> None:
    stamps: list[tuple[float, int]] = []
    with Producer(metadata_broker_list=bootstrap, client_id=client_id, producer_type="async", request_required_acks=1, batch_max_bytes=16384,
                  api_version="auto") as p:
        futs: deque[Any] = deque()
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            f = p.send_record("quota-topic", VALUE)
            f.add_done_callback(lambda _f: stamps.append((time.monotonic(), len(VALUE))))
            futs.append(f)
            if len(futs) > 300:
                futs.popleft().result(timeout=30)
        end = time.monotonic()
    out["rate"] = _steady_rate(stamps, t0, end)


def test_produce_quota_throttles_only_the_quotad_clients(chroot: str, broker: EmbeddedBroker) -> None:
    _set_quota(chroot, broker, "slow-kp", PRODUCER, QUOTA)
    _set_quota(chroot, broker, "slow-hmb", PRODUCER, QUOTA)
    results: dict[str, dict[str, Any]] = {"slow-kp": {}, "slow-hmb": {}, "fast": {}}
    runs = [
        threading.Thread(target=_kafka_python_producer, args=(broker.bootstrap, "slow-kp", RUN_S, results["slow-kp"])),
        threading.Thread(target=_hmb_producer, args=(broker.bootstrap, "slow-hmb", RUN_S, results["slow-hmb"])),
        threading.Thread(target=_hmb_producer, args=(broker.bootstrap, "fast", RUN_S, results["fast"])),
    ]
    for t in runs:
        t.start()
    for t in runs:
        t.join(60)
    print(results)
    for cid in ("slow-kp", "slow-hmb"):
        assert QUOTA * 0.7 <= results[cid]["rate"] <= QUOTA * 1.3, (cid, results)
    assert results["slow-kp"]["throttle_max"] > 0, results  # kafka-python saw throttle_time_ms
    assert results["fast"]["rate"] > QUOTA * 2, results  # the unquota'd client is not held back
    metrics = broker.broker.metrics()["kafka.server.ClientQuotaManager"]
    assert metrics["Produce-throttle-time-max"] > 0, metrics


def test_quota_change_applies_without_restart(chroot: str, broker: EmbeddedBroker) -> None:
    # a client id without traffic yet, so its window holds no history of the old quota
    _set_quota(chroot, broker, "changed", PRODUCER, QUOTA)
    _set_quota(chroot, broker, "changed", PRODUCER, QUOTA // 2)
    out: dict[str, Any] = {}
    _kafka_python_producer(broker.bootstrap, "changed", RUN_S, out)
    assert QUOTA // 2 * 0.7 <= out["rate"] <= QUOTA // 2 * 1.3, out


def test_fetch_quota(chroot: str, broker: EmbeddedBroker) -> None:
    total = 1_500_000
    # small batches (a fetch answers at least one whole batch, KIP-74): the answers stay small
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="filler", batch_size=16384, linger_ms=2)
    for _ in range(total // len(VALUE)):
        p.send("quota-fetch", VALUE)
    p.flush(timeout=30)
    p.close()
    _set_quota(chroot, broker, "slow-fetch", CONSUMER, QUOTA)
    c = kafka.KafkaConsumer("quota-fetch", bootstrap_servers=broker.bootstrap, client_id="slow-fetch",
                            auto_offset_reset="earliest", enable_auto_commit=False, group_id=None, fetch_max_wait_ms=100,
                            max_partition_fetch_bytes=32768)
    try:
        stamps: list[tuple[float, int]] = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < RUN_S:
            for recs in c.poll(timeout_ms=200).values():
                stamps.append((time.monotonic(), sum(len(r.value) for r in recs)))
        end = time.monotonic()
        rate = _steady_rate(stamps, t0, end)
        got = sum(n for _, n in stamps)
    finally:
        c.close()
    assert got < total, "the consumer read everything: the quota held nothing back"
    assert QUOTA * 0.7 <= rate <= QUOTA * 1.3, rate
    metrics = broker.broker.metrics()["kafka.server.ClientQuotaManager"]
    assert metrics["Fetch-throttle-time-max"] > 0, metrics


def test_cli_lists_and_deletes(chroot: str, broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    assert hmb(["quotas", "--zookeeper", chroot, "--user", "alice", "--client-id", "<default>", "--add", "consumer_byte_rate=4096"]) == 0
    capsys.readouterr()
    assert hmb(["quotas", "--zookeeper", chroot]) == 0
    listed = capsys.readouterr().out
    assert "user=alice\tclient-id=<default>\tconsumer_byte_rate=4096" in listed, listed
    quotas = broker.broker.apis.quotas  # type: ignore[union-attr]
    wait_until(lambda: resolve(quotas.configs, CONSUMER, "alice", "any") == (4096.0, ("alice", "any")), 10, "alice's quota")
    assert hmb(["quotas", "--zookeeper", chroot, "--user", "alice", "--client-id", "<default>", "--delete", "consumer_byte_rate"]) == 0
    wait_until(lambda: resolve(quotas.configs, CONSUMER, "alice", "any") is None, 10, "alice's quota removed")
    assert hmb(["quotas", "--zookeeper", chroot, "--client-id", "x", "--add", "producer_byte_rate=lots"]) == 1
    assert "producer_byte_rate" in capsys.readouterr().err


def test_alter_and_describe_client_quotas_apis(chroot: str, broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    from hmbclient.protocol.api.quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

    from .conftest import RawClient

    def alter(entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]], validate_only: bool = False) -> Any:
        return c.request(AlterClientQuotasRequest[0].build(entries=[(entity, ops)], validate_only=validate_only)).entries[0]

    def describe(comps: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
        return c.request(DescribeClientQuotasRequest[0].build(components=comps, strict=strict))

    with RawClient(broker.host, broker.port) as c:
        assert alter([("user", "bob"), ("client-id", None)], [(PRODUCER, 5000.0, False)]).error_code == 0
        assert alter([("client-id", "api-only")], [(CONSUMER, 7000.0, False)], validate_only=True).error_code == 0
        assert alter([("client-id", "x")], [("request_percentage", 5.0, False)]).error_code == 42  # INVALID_REQUEST
        assert alter([("ip", "1.2.3.4")], [(PRODUCER, 1.0, False)]).error_code == 42
        # applied on this broker at once, and stored where hmb quotas (and Kafka's tools) read it
        assert resolve(broker.broker.apis.quotas.configs, PRODUCER, "bob", "any") == (5000.0, ("bob", "any"))  # type: ignore[union-attr]
        assert hmb(["quotas", "--zookeeper", chroot]) == 0
        listed = capsys.readouterr().out
        assert "user=bob\tclient-id=<default>\tproducer_byte_rate=5000" in listed and "api-only" not in listed, listed
        r = describe([("user", 0, "bob")], strict=True)
        assert r.error_code == 0 and r.entries == []  # strict: the entity also names a client id
        r = describe([("user", 0, "bob"), ("client-id", 1, None)])
        assert r.error_code == 0
        assert [([(e.entity_type, e.entity_name) for e in x.entity], [(v.key, v.value) for v in x.values]) for x in r.entries] == [
            ([("user", "bob"), ("client-id", None)], [(PRODUCER, 5000.0)])]
        assert describe([("ip", 2, None)]).error_code == 42
        assert alter([("user", "bob"), ("client-id", None)], [(PRODUCER, 0.0, True)]).error_code == 0
        assert describe([("user", 0, "bob")]).entries == []


def test_kafka_config_command_sets_and_describes_quotas(chroot: str, broker: EmbeddedBroker) -> None:
    """Kafka 4.4's kafka-configs.sh (ConfigCommand through the AdminClient: AlterClientQuotas,
    DescribeClientQuotas) against this broker; the quota lands in ZooKeeper and in force."""
    from hmbclient.testing import kafka_java

    kafka_java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "clients",
               "--entity-name", "java-set", "--add-config", "producer_byte_rate=3072,consumer_byte_rate=6144", timeout_s=120)
    quotas = broker.broker.apis.quotas  # type: ignore[union-attr]
    assert resolve(quotas.configs, CONSUMER, "ANONYMOUS", "java-set") == (6144.0, ("", "java-set"))
    done = kafka_java("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", broker.bootstrap, "--describe", "--entity-type", "clients",
                      "--entity-name", "java-set", timeout_s=120)
    assert "producer_byte_rate=3072" in done.stdout and "consumer_byte_rate=6144" in done.stdout, done.stdout
