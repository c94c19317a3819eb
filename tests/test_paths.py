"""Znode layout and JSON: byte-for-byte what Java 0.8 writes, tolerant parsing, real ZooKeeper."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.client import KazooClient

from hmbclient.testing import LocalZooKeeper
from rebalance import paths
from rebalance.paths import (
    BrokerRegistration,
    ConsumerRegistration,
    ControllerRegistration,
    PartitionState,
    ZnodeDataError,
)

# Znode contents in the form Kafka 0.8.2 writes them (ZkUtils / ZookeeperConsumerConnector:
# Json.encode of Scala maps; small maps keep insertion order, 5-entry maps hash-trie order).
JAVA_BROKER = (
    b'{"jmx_port":-1,"timestamp":"1428512949385","host":"localhost","version":1,"port":9092}'
)
JAVA_STATE = b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}'
JAVA_TOPIC = b'{"version":1,"partitions":{"1":[1,0],"0":[0,1]}}'
JAVA_CONSUMER = (
    b'{"version":1,"subscription":{"events":2},"pattern":"static","timestamp":"1411020563145"}'
)
JAVA_CONTROLLER = b'{"version":1,"brokerid":0,"timestamp":"1428512949612"}'
# A later (0.10+) broker: version 4 with listeners, extra fields, different order.
MODERN_BROKER = (
    b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://kafka-1:19092"],"jmx_port":9999,"host":null,'
    b'"timestamp":"1500000000000","port":-1,"version":4}'
)


def test_paths() -> None:
    assert paths.consumer_group_path("g") == "/consumers/g"
    assert paths.consumer_ids_path("g") == "/consumers/g/ids"
    assert paths.consumer_registration_path("g", "g_h-1-ab") == "/consumers/g/ids/g_h-1-ab"
    assert paths.consumer_owners_path("g") == "/consumers/g/owners"
    assert paths.owner_path("g", "t", 3) == "/consumers/g/owners/t/3"
    assert paths.consumer_offsets_path("g", "t") == "/consumers/g/offsets/t"
    assert paths.offset_path("g", "t", 0) == "/consumers/g/offsets/t/0"
    assert paths.broker_path(7) == "/brokers/ids/7"
    assert paths.topic_path("t") == "/brokers/topics/t"
    assert paths.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"


@pytest.mark.parametrize(
    "call",
    [
        lambda: paths.consumer_group_path("a/b"),
        lambda: paths.consumer_group_path(""),
        lambda: paths.owner_path("g", "..", 0),
        lambda: paths.offset_path("g", "t", -1),
        lambda: paths.broker_path(-1),
        lambda: paths.partition_state_path("t", True),
    ],
)
def test_bad_path_elements(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("name", "legal"),
    [
        ("events", True),
        ("a.b_c-D9", True),
        ("x" * 249, True),
        ("x" * 250, False),
        ("", False),
        (".", False),
        ("..", False),
        ("../x", False),
        ("a/b", False),
        ("caf\u00e9", False),
        ("a\n", False),
        (7, False),
        (None, False),
    ],
)
def test_topic_name_rule(name: object, legal: bool) -> None:
    assert paths.is_valid_topic_name(name) is legal
    # The broker's check and the group subscription's check are this one rule.
    from hmbclient.broker.topics import is_valid_topic_name

    assert is_valid_topic_name is paths.is_valid_topic_name


def test_ids_follow_java_format() -> None:
    cid = paths.make_consumer_id(
        "billing", hostname="host1", now_ms=1411020563145, uuid8="0f1e2d3c"
    )
    assert cid == "billing_host1-1411020563145-0f1e2d3c"
    generated = paths.make_consumer_id("billing")
    group, _, rest = generated.partition("_")
    host_ms, _, tag = rest.rpartition("-")
    assert group == "billing" and len(tag) == 8 and host_ms.rpartition("-")[2].isdigit()
    assert paths.thread_ids(cid, 2) == [f"{cid}-0", f"{cid}-1"]
    assert paths.parse_thread_id(f"{cid}-11") == (cid, 11)
    with pytest.raises(ValueError):
        paths.parse_thread_id("nodash")


def test_encoders_reproduce_java_bytes() -> None:
    assert (
        paths.encode_broker_registration(
            BrokerRegistration("localhost", 9092, timestamp_ms=1428512949385)
        )
        == JAVA_BROKER
    )
    assert (
        paths.encode_partition_state(
            PartitionState(leader=0, isr=(0,), leader_epoch=0, controller_epoch=1)
        )
        == JAVA_STATE
    )
    assert (
        paths.encode_consumer_registration(
            ConsumerRegistration({"events": 2}, "static", timestamp_ms=1411020563145)
        )
        == JAVA_CONSUMER
    )
    assert (
        paths.consumer_registration_json({"events": 2}, "static", "1411020563145") == JAVA_CONSUMER
    )
    assert (
        paths.encode_controller(ControllerRegistration(0, timestamp_ms=1428512949612))
        == JAVA_CONTROLLER
    )
    # Partitions are written in numeric order (Java's order is a hash map's).
    assert paths.encode_topic_assignment({1: [1, 0], 0: [0, 1]}) == (
        b'{"version":1,"partitions":{"0":[0,1],"1":[1,0]}}'
    )
    assert paths.encode_offset(42) == b"42"
    assert paths.encode_owner("g_h-1-ab-0") == b"g_h-1-ab-0"


def test_decoders_read_java_bytes() -> None:
    assert paths.decode_broker_registration(JAVA_BROKER) == BrokerRegistration(
        "localhost", 9092, jmx_port=-1, timestamp_ms=1428512949385, version=1
    )
    assert paths.decode_partition_state(JAVA_STATE) == PartitionState(0, (0,), 0, 1, 1)
    assert paths.decode_topic_assignment(JAVA_TOPIC) == {0: [0, 1], 1: [1, 0]}
    assert list(paths.decode_topic_assignment(JAVA_TOPIC)) == [0, 1]
    reg = paths.decode_consumer_registration(JAVA_CONSUMER)
    assert (reg.subscription, reg.pattern, reg.timestamp_ms) == (
        {"events": 2},
        "static",
        1411020563145,
    )
    assert paths.decode_controller(JAVA_CONTROLLER).broker_id == 0
    assert paths.decode_controller(b"2").broker_id == 2
    assert paths.decode_offset(b" 17\n") == 17
    assert paths.decode_owner(b"g_h-1-ab-0") == "g_h-1-ab-0"


def test_decoders_tolerate_field_order_types_and_extras() -> None:
    shuffled = json.dumps(
        {"timestamp": 5, "pattern": "white_list", "subscription": {"ev.*": 3}, "version": 1, "x": 1}
    )
    reg = paths.decode_consumer_registration(shuffled.encode())
    assert (reg.subscription, reg.pattern, reg.timestamp_ms) == ({"ev.*": 3}, "white_list", 5)
    modern = paths.decode_broker_registration(MODERN_BROKER)
    assert (modern.host, modern.port, modern.jmx_port, modern.version) == (
        "kafka-1",
        19092,
        9999,
        4,
    )
    assert modern.endpoints == ("PLAINTEXT://kafka-1:19092",)
    state = paths.decode_partition_state(b'{"isr":[2,1],"leader":2,"version":1}')
    assert (state.leader, state.isr, state.leader_epoch) == (2, (2, 1), 0)


@pytest.mark.parametrize(
    ("decode", "data"),
    [
        (paths.decode_broker_registration, b"not json"),
        (paths.decode_broker_registration, b'{"host":null,"port":-1}'),
        (paths.decode_partition_state, b'{"leader":"x","isr":[0]}'),
        (paths.decode_partition_state, b'{"leader":0,"isr":"0"}'),
        (paths.decode_topic_assignment, b'{"version":1,"partitions":{"a":[0]}}'),
        (paths.decode_topic_assignment, b"[]"),
        (paths.decode_consumer_registration, b'{"subscription":{"t":1},"pattern":"regex"}'),
        (paths.decode_consumer_registration, None),
        (paths.decode_offset, b"twelve"),
        (paths.decode_offset, b""),
        (paths.decode_offset, None),
        (paths.decode_offset, b"+5"),
        (paths.decode_offset, b"1_000"),
        (paths.decode_offset, b"-2"),
        (paths.decode_offset, b"0x10"),
        (paths.decode_offset, "\u0663".encode()),
        (paths.decode_owner, b""),
    ],
)
def test_malformed_data_raises_znode_data_error(decode: object, data: bytes | None) -> None:
    with pytest.raises(ZnodeDataError):
        decode(data)  # type: ignore[operator]


def test_offsets_are_decimal_and_strict() -> None:
    assert paths.encode_offset(0) == b"0"
    assert paths.decode_offset(b"-1") == paths.NO_OFFSET  # Kafka 0.8's "no offset"
    for bad in (-1, -5, True, 1.0):
        with pytest.raises(ValueError):
            paths.encode_offset(bad)  # type: ignore[arg-type]
    with pytest.raises(ZnodeDataError, match="/consumers/g/offsets/t/0"):
        paths.decode_offset(b"x", "/consumers/g/offsets/t/0")


@given(st.integers(0, 2**63 - 1))
def test_offset_round_trip(offset: int) -> None:
    assert paths.decode_offset(paths.encode_offset(offset)) == offset


@given(
    st.dictionaries(st.text(min_size=1), st.integers(1, 64), min_size=1, max_size=5),
    st.sampled_from(["static", "white_list", "black_list"]),
    st.integers(0, 2**62),
)
def test_consumer_registration_round_trip(sub: dict[str, int], pattern: str, ts: int) -> None:
    reg = ConsumerRegistration(sub, pattern, timestamp_ms=ts)  # type: ignore[arg-type]
    assert paths.decode_consumer_registration(paths.encode_consumer_registration(reg)) == reg


@given(
    st.dictionaries(
        st.integers(0, 500), st.lists(st.integers(0, 9), min_size=1, max_size=3), max_size=8
    )
)
def test_topic_assignment_round_trip(replicas: dict[int, list[int]]) -> None:
    assert paths.decode_topic_assignment(paths.encode_topic_assignment(replicas)) == dict(
        sorted(replicas.items())
    )


# --------------------------------------------------------------------- in a real ZooKeeper


@pytest.fixture(scope="module")
def zk_client() -> Iterator[KazooClient]:
    with LocalZooKeeper() as zk:
        client = KazooClient(hosts=zk.connect, timeout=10)
        client.start(timeout=15)
        try:
            yield client
        finally:
            client.stop()
            client.close()


def test_layout_in_a_real_zookeeper(zk_client: KazooClient) -> None:
    cid = paths.make_consumer_id("grp", hostname="h", now_ms=1, uuid8="abcdef01")
    writes = {
        paths.consumer_registration_path("grp", cid): (
            paths.encode_consumer_registration(ConsumerRegistration({"t": 1}, timestamp_ms=1)),
            True,
        ),
        paths.owner_path("grp", "t", 0): (paths.encode_owner(paths.thread_id(cid, 0)), True),
        paths.offset_path("grp", "t", 0): (paths.encode_offset(10), False),
        paths.broker_path(0): (
            paths.encode_broker_registration(BrokerRegistration("127.0.0.1", 9092)),
            True,
        ),
        paths.topic_path("t"): (paths.encode_topic_assignment({0: [0]}), False),
        paths.partition_state_path("t", 0): (
            paths.encode_partition_state(PartitionState(0, (0,))),
            False,
        ),
    }
    for path, (data, ephemeral) in writes.items():
        zk_client.create(path, data, ephemeral=ephemeral, makepath=True)
    assert zk_client.get_children(paths.consumer_ids_path("grp")) == [cid]
    assert zk_client.get_children(paths.BROKER_IDS_PATH) == ["0"]
    assert zk_client.get_children(paths.topic_partitions_path("t")) == ["0"]
    assert paths.decode_owner(zk_client.get(paths.owner_path("grp", "t", 0))[0]) == f"{cid}-0"
    assert paths.decode_offset(zk_client.get(paths.offset_path("grp", "t", 0))[0]) == 10
    assert paths.decode_partition_state(
        zk_client.get(paths.partition_state_path("t", 0))[0]
    ).isr == (0,)


def test_every_reader_of_offset_znodes_is_strict(zk_client: KazooClient) -> None:
    """The group's offset store, the consumer's storage and the Spark helpers share one rule:
    no znode or ``-1`` is "nothing committed"; anything else that is not a decimal offset is
    an error naming the znode, never a silent restart from auto.offset.reset."""
    from hmbclient.consumer.offsets import ZooKeeperOffsetStorage
    from hmbclient.errors import CoordinationError
    from rebalance.offsets import ZkOffsetStore
    from spark_integration import commit_group_offsets, read_group_offsets

    store = ZkOffsetStore(zk_client, "strict")
    store.commit({("t", 0): 5, ("t", 1): 0})
    assert zk_client.get(paths.offset_path("strict", "t", 0))[0] == b"5"
    with pytest.raises(ValueError, match="/consumers/strict/offsets/t/2"):
        store.commit({("t", 3): 1, ("t", 2): -1})
    assert not zk_client.exists(paths.offset_path("strict", "t", 3))  # nothing written
    zk_client.create(paths.offset_path("strict", "t", 4), b"-1", makepath=True)
    wanted = [("t", 0), ("t", 1), ("t", 4), ("t", 9)]
    assert store.fetch(wanted) == {("t", 0): 5, ("t", 1): 0, ("t", 4): None, ("t", 9): None}
    assert read_group_offsets(zk_client, "strict", wanted) == {("t", 0): 5, ("t", 1): 0}
    assert commit_group_offsets(zk_client, "strict", {("t", 1): 7}) == {("t", 1): 7}
    assert store.fetch([("t", 1)]) == {("t", 1): 7}

    bad = paths.offset_path("strict", "t", 5)
    zk_client.create(bad, b"5 messages", makepath=True)
    with pytest.raises(ZnodeDataError, match=bad):
        store.fetch([("t", 0), ("t", 5)])
    with pytest.raises(CoordinationError, match=bad):
        ZooKeeperOffsetStorage(zk_client, "strict").fetch([("t", 5)])
    with pytest.raises(CoordinationError, match=bad):
        read_group_offsets(zk_client, "strict", [("t", 5)])


def test_rebalance_paths_is_the_shared_layout_name_for_name() -> None:
    """rebalance.paths (public API) and hmbclient.zkpaths (where the broker and the consumers
    read the layout) are one layout: every public name is the same object."""
    import hmbclient.zkpaths as shared
    import rebalance.paths as public

    assert set(shared.__all__) <= set(public.__all__)
    for name in public.__all__:
        assert getattr(public, name) is getattr(shared, name), name
