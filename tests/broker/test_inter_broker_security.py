"""Traffic between brokers on a secured listener, and each broker advertised per listener.

* A cluster whose only listener is SASL_SSL: the brokers authenticate to each other with
  SCRAM-SHA-512 as their own user over TLS (the controller's LeaderAndIsr/UpdateMetadata, the
  followers' fetches, the cluster's helpers), an authorizer lets only that user do
  ClusterAction, and clients (hmbclient, confluent-kafka) produce with acks=all and consume
  across a leader's crash. ZooKeeper's registration is Kafka's version-4 form with no
  plaintext address.
* With PLAINTEXT and SSL listeners, Metadata and FindCoordinator name every broker at its
  address on the listener the client asked on, and the registration lists both.
* Refusals: a wrong inter-broker password or an untrusted certificate is a clear error naming
  the broker, the mechanism and the user (never the password); bad settings fail at start.
"""

from __future__ import annotations

import json
import os
import ssl
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hmbclient import FetchRequest, Producer, ProducerData, SimpleConsumer
from hmbclient.broker import EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel, ChannelSecurity
from hmbclient.broker.security.authorizer import Acl, ZkAclStore
from hmbclient.broker.security.credentials import ZkCredentialStore
from hmbclient.broker.security.tool import add_user, open_store
from hmbclient.config import BrokerConfig
from hmbclient.errors import ConfigError, KafkaConnectionError
from hmbclient.protocol.api import FindCoordinatorRequest, MetadataRequest
from hmbclient.testing.pki import Pki, make_pki
from rebalance import paths

from .conftest import RawClient

BROKER_PASSWORD = "broker-secret-123"
ALICE_PASSWORD = "alice-secret-456"
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def _sasl_ssl_settings(pki: Pki, password: str = BROKER_PASSWORD) -> dict[str, Any]:
    return {
        "listeners": ["SASL_SSL://127.0.0.1:0"],
        "ssl_certfile": pki.server_cert,
        "ssl_keyfile": pki.server_key,
        "ssl_cafile": pki.ca,
        "sasl_mechanism_inter_broker_protocol": "SCRAM-SHA-512",
        "sasl_inter_broker_username": "broker",
        "sasl_inter_broker_password": password,
    }


@pytest.fixture(scope="module")
def secure_cluster(zookeeper: Any, pki: Pki) -> Iterator[tuple[EmbeddedCluster, str]]:
    chroot = f"{zookeeper.connect}/ibs-{uuid.uuid4().hex[:8]}"
    with open_store("users", zookeeper=chroot) as users:
        assert isinstance(users, ZkCredentialStore)
        add_user(users, "broker", BROKER_PASSWORD)
        add_user(users, "alice", ALICE_PASSWORD)
    with open_store("acls", zookeeper=chroot) as acls:
        assert isinstance(acls, ZkAclStore)
        acls.add([Acl.make("Topic", "ibs-", "User:alice", "All", pattern_type="PREFIXED")])
    with EmbeddedCluster(
        brokers=3,
        zookeeper_connect=chroot,
        authorizer_class_name="AclAuthorizer",
        super_users="User:broker",
        offsets_topic_replication_factor=3,
        **_sasl_ssl_settings(pki),
    ) as cluster:
        yield cluster, chroot


def _alice(pki: Pki) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.cafile": pki.ca,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": ALICE_PASSWORD,
    }


def _wait(what: str, check: Any, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_sasl_ssl_only_cluster_replicates_and_fails_over(secure_cluster: tuple[EmbeddedCluster, str], pki: Pki, zookeeper: Any) -> None:
    cluster, chroot = secure_cluster
    topic = f"ibs-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 1, 3)  # over the brokers' own SASL_SSL channel, as User:broker
    cluster.await_isr(topic, size=3)  # the followers fetch over SASL_SSL: all three in sync

    # ZooKeeper holds Kafka's version-4 registration: one SASL_SSL endpoint, no plaintext.
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=chroot)
    zk.start(timeout=10)
    try:
        for b in cluster.brokers:
            raw = json.loads(zk.get(paths.broker_path(b.broker_id))[0])
            port = b.server.listeners[0].port
            assert (raw["version"], raw["host"], raw["port"]) == (4, None, -1)
            assert raw["endpoints"] == [f"SASL_SSL://127.0.0.1:{port}"]
            assert raw["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}
    finally:
        zk.stop()
        zk.close()

    bootstrap = ",".join(f"127.0.0.1:{b.server.listeners[0].port}" for b in cluster.brokers)
    first = [f"a{i}".encode() for i in range(20)]
    with Producer(metadata_broker_list=bootstrap, request_required_acks=-1, request_timeout_ms=10_000, **_alice(pki)) as p:
        for f in p.send(ProducerData(topic, None, first)):
            f.result(20)
    leader = cluster.leader(topic, 0)
    assert leader is not None
    cluster.kill(leader)
    _wait("a new leader from the ISR", lambda: cluster.leader(topic, 0) not in (None, -1, leader))
    survivors = [b for b in cluster.brokers if b.broker_id != leader]
    bootstrap = ",".join(f"127.0.0.1:{b.server.listeners[0].port}" for b in survivors)
    second = [f"b{i}".encode() for i in range(20)]
    with Producer(metadata_broker_list=bootstrap, request_required_acks=-1, request_timeout_ms=10_000, **_alice(pki)) as p:
        for f in p.send(ProducerData(topic, None, second)):
            f.result(30)

    new_leader = cluster.broker(cluster.leader(topic, 0))  # type: ignore[arg-type]
    got: list[bytes] = []
    with SimpleConsumer("127.0.0.1", new_leader.server.listeners[0].port, so_timeout_ms=10_000, **_alice(pki)) as c:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 40 and time.monotonic() < deadline:
            got += [m.value for m in c.fetch(FetchRequest(topic, 0, len(got), 1 << 20))]
    assert got == first + second  # every acked message survived the leader's crash, in order


def test_confluent_kafka_on_the_sasl_ssl_cluster(secure_cluster: tuple[EmbeddedCluster, str], pki: Pki) -> None:
    """librdkafka follows the brokers Metadata names: all of them at their SASL_SSL ports."""
    import confluent_kafka  # a test dependency: missing, the test fails loudly
    cluster, _ = secure_cluster
    topic = f"ibs-{uuid.uuid4().hex[:6]}"
    cluster.create_topic(topic, 3, 2)
    live = [b for b in cluster.brokers if b.running]
    conf = {
        "bootstrap.servers": f"127.0.0.1:{live[0].server.listeners[0].port}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": pki.ca,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": ALICE_PASSWORD,
    }
    p = confluent_kafka.Producer({**conf, "acks": "all"})
    errors: list[Any] = []
    for i in range(30):
        p.produce(topic, f"m{i}".encode(), partition=i % 3, on_delivery=lambda err, _m: err and errors.append(err))
    assert p.flush(30) == 0 and not errors
    md = p.list_topics(topic, timeout=10)
    sasl_ports = {b.broker_id: b.server.listeners[0].port for b in live}
    assert {b.id: b.port for b in md.brokers.values()} == sasl_ports
    c = confluent_kafka.Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, n, 0) for n in range(3)])
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 30 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(30))


def test_wrong_inter_broker_password_or_untrusted_certificate_is_refused(secure_cluster: tuple[EmbeddedCluster, str], pki: Pki) -> None:
    cluster, _ = secure_cluster
    b = next(b for b in cluster.brokers if b.running)
    port = b.server.listeners[0].port
    good_ctx = ssl.create_default_context(cafile=pki.ca)
    wrong = ChannelSecurity("SASL_SSL", good_ctx, "SCRAM-SHA-512", "broker", "not-the-password")
    ch = BrokerChannel("127.0.0.1", port, "impostor", security=wrong)
    with pytest.raises(KafkaConnectionError, match=r"SCRAM-SHA-512 authentication of user 'broker' to broker at 127\.0\.0\.1:\d+ failed") as ei:
        ch.request(MetadataRequest[1](topics=[]), 5)
    assert "not-the-password" not in str(ei.value) and "not-the-password" not in repr(wrong)
    stranger_ctx = ssl.create_default_context()  # the system's CAs: the test CA is not one of them
    ch = BrokerChannel("127.0.0.1", port, "stranger", security=ChannelSecurity("SASL_SSL", stranger_ctx, "SCRAM-SHA-512", "broker", BROKER_PASSWORD))
    with pytest.raises(KafkaConnectionError, match="TLS to broker at 127.0.0.1:.*certificate verify failed"):
        ch.request(MetadataRequest[1](topics=[]), 5)
    # The right credentials work on the same broker, which kept serving.
    ok = BrokerChannel("127.0.0.1", port, "broker-ok", security=ChannelSecurity("SASL_SSL", good_ctx, "SCRAM-SHA-512", "broker", BROKER_PASSWORD))
    try:
        assert ok.request(MetadataRequest[1](topics=[]), 5).brokers
    finally:
        ok.close()


def test_inter_broker_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="'security.inter.broker.protocol'=SSL is not one of the listeners"):
        BrokerConfig(listeners=["PLAINTEXT://127.0.0.1:0"], security_inter_broker_protocol="ssl")
    with pytest.raises(ConfigError, match="'sasl.inter.broker.username' and 'sasl.inter.broker.password' go together"):
        BrokerConfig(listeners=["SASL_PLAINTEXT://127.0.0.1:0"], sasl_inter_broker_username="broker")
    # A broker alone needs no inter-broker user; a channel to another broker names what is missing.
    lonely = ChannelSecurity("SASL_PLAINTEXT")
    with pytest.raises(KafkaConnectionError, match="set 'sasl.inter.broker.username'"):
        BrokerChannel("127.0.0.1", 9, "x", security=lonely)._authenticate(None, None, lonely)  # type: ignore[arg-type]
    cfg = BrokerConfig(listeners=["SASL_PLAINTEXT://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"], security_inter_broker_protocol="PLAINTEXT")
    assert cfg.inter_broker_protocol == "PLAINTEXT"
    secret = BrokerConfig(sasl_inter_broker_username="broker", sasl_inter_broker_password="hush-hush")
    assert "hush-hush" not in repr(secret)


def test_each_broker_is_advertised_on_the_listener_asked_on(zookeeper: Any, pki: Pki) -> None:
    chroot = f"{zookeeper.connect}/adv-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(
        brokers=2,
        zookeeper_connect=chroot,
        listeners=["PLAINTEXT://127.0.0.1:0", "SSL://127.0.0.1:0"],
        ssl_certfile=pki.server_cert,
        ssl_keyfile=pki.server_key,
        offsets_topic_replication_factor=2,
    ) as cluster:
        cluster.await_brokers()
        ports = {b.broker_id: {lst.protocol: lst.port for lst in b.server.listeners} for b in cluster.brokers}
        b0 = cluster.brokers[0]
        ctx = ssl.create_default_context(cafile=pki.ca)
        tls = RawClient("127.0.0.1", ports[b0.broker_id]["SSL"])
        tls.sock = ctx.wrap_socket(tls.sock, server_hostname="127.0.0.1")
        with tls:
            md = tls.request(MetadataRequest[1](topics=[]))
            assert {b.node_id: b.port for b in md.brokers} == {i: p["SSL"] for i, p in ports.items()}
            coord = tls.request(FindCoordinatorRequest[1](key="adv-group", key_type=0))
            assert coord.error_code == 0 and coord.port == ports[coord.node_id]["SSL"]
        with RawClient("127.0.0.1", ports[b0.broker_id]["PLAINTEXT"]) as plain:
            md = plain.request(MetadataRequest[1](topics=[]))
            assert {b.node_id: b.port for b in md.brokers} == {i: p["PLAINTEXT"] for i, p in ports.items()}
            coord = plain.request(FindCoordinatorRequest[1](key="adv-group", key_type=0))
            assert coord.error_code == 0 and coord.port == ports[coord.node_id]["PLAINTEXT"]
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=chroot)
        zk.start(timeout=10)
        try:
            for i, p in ports.items():
                reg = paths.decode_broker_registration(zk.get(paths.broker_path(i))[0])
                # the PLAINTEXT address is where a 0.8 reader still finds the broker
                assert (reg.host, reg.port, reg.version) == ("127.0.0.1", p["PLAINTEXT"], 4)
                assert reg.listeners() == {"PLAINTEXT": ("127.0.0.1", p["PLAINTEXT"]), "SSL": ("127.0.0.1", p["SSL"])}
        finally:
            zk.stop()
            zk.close()


def test_broker_processes_replicate_over_sasl_ssl_with_the_password_off_the_command_line(zookeeper: Any, pki: Pki, tmp_path: Any) -> None:
    """Separate broker processes: the inter-broker password reaches each through a private
    file that is gone once the broker serves (``--set NAME=@FILE``), never its argv."""
    from hmbclient.broker.runner import broker_config

    secret = tmp_path / "pw"
    secret.write_text(BROKER_PASSWORD + "\n")
    assert broker_config(["sasl.inter.broker.username=broker", f"sasl.inter.broker.password=@{secret}"]).sasl_inter_broker_password == BROKER_PASSWORD
    with pytest.raises(ConfigError, match="sasl.inter.broker.password=@/nonexistent: cannot read it"):
        broker_config(["sasl.inter.broker.username=broker", "sasl.inter.broker.password=@/nonexistent"])

    chroot = f"{zookeeper.connect}/ibp-{uuid.uuid4().hex[:8]}"
    with open_store("users", zookeeper=chroot) as users:
        assert isinstance(users, ZkCredentialStore)
        add_user(users, "broker", BROKER_PASSWORD)
    topic = f"ibs-{uuid.uuid4().hex[:6]}"
    with EmbeddedCluster(brokers=2, zookeeper_connect=chroot, processes=True, offsets_topic_replication_factor=2, **_sasl_ssl_settings(pki)) as cluster:
        for b in cluster.brokers:
            assert b.proc is not None
            with open(f"/proc/{b.proc.pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            assert BROKER_PASSWORD.encode() not in b"".join(argv)
            ref = next(a for a in argv if a.startswith(b"sasl.inter.broker.password=@"))
            assert not os.path.exists(ref.split(b"@", 1)[1].decode())  # removed once serving
        cluster.create_topic(topic, 1, 2)
        cluster.await_isr(topic, size=2)  # the follower process fetches over SASL_SSL
