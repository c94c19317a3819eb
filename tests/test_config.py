"""Config framework: spellings, aliases, .properties strings, validation, frozen-ness."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest

from encoders import StringEncoder
from hmbclient.config import (
    API_VERSIONS,
    NEVER,
    BrokerConfig,
    ConfigBase,
    ConsumerConfig,
    ProducerConfig,
    SimpleConsumerConfig,
    config_class,
    load_properties,
    parse_broker_list,
    parse_properties,
    parse_zookeeper_connect,
    setting,
)
from hmbclient.errors import ConfigError
from partitioners import Murmur2Partitioner

BROKERS = {"metadata_broker_list": "127.0.0.1:9092"}
ZK = {"zookeeper.connect": "127.0.0.1:2181", "group.id": "g"}


# --------------------------------------------------------------------- unknown keys


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("queue.bufering.max.ms", "'queue.buffering.max.ms'"),
        ("queue_bufering_max_ms", "'queue_buffering_max_ms'"),
        ("request.required.ack", "'request.required.acks'"),
        ("compresion.codec", "'compression.codec'"),
    ],
)
def test_unknown_key_names_it_and_suggests(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as err:
        ProducerConfig.from_properties({**BROKERS, key: 1})
    text = str(err.value)
    assert repr(key) in text and "ProducerConfig" in text
    assert f"did you mean {suggestion}" in text


def test_unknown_keyword_is_config_error_not_type_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown ConsumerConfig key 'group_idd'.*'group_id'"):
        ConsumerConfig(zookeeper_connect="127.0.0.1:2181", group_idd="g")


def test_unknown_key_without_close_match_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig(completely_unrelated_thing=1)
    assert "did you mean" not in str(err.value)


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ProducerConfig(**BROKERS, acks=7)


# --------------------------------------------------------------------- spellings, aliases


def test_all_spellings_of_a_key_agree() -> None:
    forms = [
        {"queue_buffering_max_ms": 7},
        {"queue.buffering.max.ms": 7},
        {"QUEUE.BUFFERING.MAX.MS": 7},
        {"queue-buffering-max-ms": 7},
        {"queue.time": 7},
        {"queue_time": 7},
        {"linger.ms": 7},
    ]
    for form in forms:
        assert ProducerConfig.from_properties(BROKERS, **form).queue_buffering_max_ms == 7
        assert ProducerConfig(**BROKERS, **form).queue_buffering_max_ms == 7


def test_documented_aliases() -> None:
    p = ProducerConfig(bootstrap_servers="h:1", batch_size=50, acks="all", retries=0)
    assert p.metadata_broker_list == (("h", 1),)
    assert p.batch_num_messages == 50
    assert p.request_required_acks == -1
    assert p.message_send_max_retries == 0
    assert ProducerConfig.from_properties({"bootstrap.servers": "h:1"}).metadata_broker_list == (
        ("h", 1),
    )
    assert BrokerConfig(log_dir="/data/k").log_dirs == ("/data/k",)
    assert BrokerConfig(log_dir=Path("/data/k")).log_dirs == ("/data/k",)
    assert SimpleConsumerConfig(host="h", port=1, so_timeout_ms=5).so_timeout_ms == 5


def test_same_field_twice_is_an_error() -> None:
    with pytest.raises(ConfigError, match="given twice"):
        ProducerConfig(**BROKERS, queue_time=1, queue_buffering_max_ms=2)


def test_overrides_win_over_properties() -> None:
    p = ProducerConfig.from_properties({**BROKERS, "queue.time": "9"}, queue_buffering_max_ms=3)
    assert p.queue_buffering_max_ms == 3


# --------------------------------------------------------------------- string conversion


def test_properties_strings_convert_to_field_types() -> None:
    text = """
    # a producer.properties file
    metadata.broker.list = h1:9092, h2:9093
    producer.type=ASYNC
    request.required.acks: -1
    compression.codec 2
    compressed.topics=a, b ,c
    queue.buffering.max.ms=250
    """
    p = ProducerConfig.from_properties(parse_properties(text))
    assert p.metadata_broker_list == (("h1", 9092), ("h2", 9093))
    assert p.producer_type == "async"
    assert p.request_required_acks == -1
    assert p.compression_codec == "snappy"  # 0.8 numeric codec id
    assert p.compressed_topics == ("a", "b", "c")
    assert p.queue_buffering_max_ms == 250

    c = ConsumerConfig.from_properties(
        {
            **ZK,
            "auto.commit.enable": "false",
            "exclude.internal.topics": "TRUE",
            "consumer.timeout.ms": " 5000 ",
        }
    )
    assert c.auto_commit_enable is False
    assert c.exclude_internal_topics is True
    assert c.consumer_timeout_ms == 5000


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("request.timeout.ms", "ten", "'request.timeout.ms' (request_timeout_ms)"),
        ("request.timeout.ms", True, "not a boolean"),
        ("request.timeout.ms", 1.5, "integer"),
        ("producer.type", "later", "one of 'sync', 'async'"),
        ("compression.codec", "brotli", "one of 'none'"),
        ("api.version", "0.9", "one of 'auto'"),
        ("client.id", 12, "expected a string"),
        ("metadata.broker.list", "h1", "missing port"),
        ("metadata.broker.list", "h1:99999", "port out of range"),
        ("request.required.acks", "2", "one of 0, 1, -1"),
    ],
)
def test_bad_values_name_the_key(key: str, value: Any, fragment: str) -> None:
    props = {**BROKERS, key: value} if key != "metadata.broker.list" else {key: value}
    with pytest.raises(ConfigError) as err:
        ProducerConfig.from_properties(props)
    assert fragment in str(err.value)
    assert key in str(err.value)


def test_integral_float_is_accepted_for_int_fields() -> None:
    assert ProducerConfig(**BROKERS, retry_backoff_ms=250.0).retry_backoff_ms == 250


def test_object_settings_accept_instances_or_class_paths() -> None:
    enc = StringEncoder()
    assert ProducerConfig(**BROKERS, serializer=enc).serializer is enc
    p = ProducerConfig.from_properties(
        {
            **BROKERS,
            "serializer.class": "encoders.StringEncoder",
            "partitioner.class": "partitioners:Murmur2Partitioner",
        }
    )
    assert isinstance(p.serializer, StringEncoder)
    assert isinstance(p.partitioner, Murmur2Partitioner)
    with pytest.raises(ConfigError, match="serializer.class.*cannot import"):
        ProducerConfig(**BROKERS, serializer="no_such_module.Encoder")
    with pytest.raises(ConfigError, match="has no attribute"):
        ProducerConfig(**BROKERS, serializer="encoders.NoSuchEncoder")


# --------------------------------------------------------------------- validation


def test_required_settings() -> None:
    with pytest.raises(
        ConfigError, match=r"'metadata.broker.list' \(metadata_broker_list\) is required"
    ):
        ProducerConfig()
    with pytest.raises(ConfigError, match="'group.id'"):
        ConsumerConfig(zookeeper_connect="127.0.0.1:2181")
    with pytest.raises(ConfigError, match="'zookeeper.connect'"):
        ConsumerConfig(group_id="g")
    with pytest.raises(ConfigError, match="at least one"):
        ProducerConfig(metadata_broker_list="")


@pytest.mark.parametrize(
    ("cls", "base", "changes", "fragment"),
    [
        (ProducerConfig, BROKERS, {"retry_backoff_ms": -1}, ">= 0"),
        (ProducerConfig, BROKERS, {"queue_enqueue_timeout_ms": -2}, ">= -1"),
        (ProducerConfig, BROKERS, {"batch_num_messages": 0}, ">= 1"),
        (
            ProducerConfig,
            BROKERS,
            {
                "producer_type": "async",
                "batch_num_messages": 20,
                "queue_buffering_max_messages": 10,
            },
            "can't be larger than 'queue.buffering.max.messages'",
        ),
        (SimpleConsumerConfig, {"host": "h"}, {"port": 70000}, "<= 65535"),
        (SimpleConsumerConfig, {"host": " ", "port": 1}, {}, "'host' must not be empty"),
        (ConsumerConfig, ZK, {"group_id": "a/b"}, "ZooKeeper path"),
        (ConsumerConfig, ZK, {"group_id": ""}, "non-empty"),
        (ConsumerConfig, ZK, {"auto_offset_reset": "middle"}, "one of 'smallest', 'largest'"),
        (ConsumerConfig, ZK, {"partition_assignment_strategy": "sticky"}, "'range', 'roundrobin'"),
        (ConsumerConfig, ZK, {"offsets_storage": "redis"}, "'zookeeper', 'kafka'"),
        (
            ConsumerConfig,
            ZK,
            {"fetch_wait_max_ms": 5000, "socket_timeout_ms": 1000},
            "fetch.wait.max.ms",
        ),
        (ConsumerConfig, ZK, {"zookeeper_connect": "h:port"}, "bad port"),
        (ConsumerConfig, ZK, {"zookeeper_connect": "h:2181/"}, "bad chroot"),
        (BrokerConfig, {}, {"log_segment_bytes": 10}, ">= 14"),
        (
            BrokerConfig,
            {},
            {"log_index_interval_bytes": 100, "log_segment_bytes": 50},
            "log.index.interval.bytes",
        ),
        (BrokerConfig, {}, {"port": -1}, ">= 0"),
    ],
)
def test_validation_errors(
    cls: type[ConfigBase], base: dict[str, Any], changes: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        cls.from_properties(base, **changes)
    assert fragment in str(err.value)


def test_consumer_accepts_modern_offset_reset_names_and_defaults_client_id() -> None:
    c = ConsumerConfig.from_properties(ZK, auto_offset_reset="earliest")
    assert c.auto_offset_reset == "smallest"
    assert (
        ConsumerConfig.from_properties(ZK, auto_offset_reset="latest").auto_offset_reset
        == "largest"
    )
    assert c.client_id == "g"
    assert ConsumerConfig.from_properties(ZK, client_id="me").client_id == "me"


# --------------------------------------------------------------------- defaults, identity


def test_defaults() -> None:
    p = ProducerConfig(**BROKERS)
    assert (p.producer_type, p.request_required_acks, p.compression_codec) == ("sync", 1, "none")
    assert p.queue_buffering_max_ms == 5 and p.batch_num_messages == 200
    assert p.batch_max_bytes == 1 << 20 and p.message_max_bytes == 1_000_000
    assert p.client_id == "hmbclient" and p.api_version == "auto"
    s = SimpleConsumerConfig(host="h", port=1)
    assert (s.so_timeout_ms, s.buffer_size, s.fetch_message_max_bytes) == (30_000, 65_536, 1 << 20)
    c = ConsumerConfig.from_properties(ZK)
    assert c.auto_offset_reset == "largest" and c.rebalance_backoff_ms == 200
    assert c.zookeeper_session_timeout_ms == 6000 and c.auto_commit_interval_ms == 60_000
    b = BrokerConfig()
    assert (b.host, b.port, b.log_segment_bytes, b.message_max_bytes) == (
        "127.0.0.1",
        0,
        1 << 30,
        1_000_012,
    )
    assert b.log_flush_interval_messages == NEVER and b.log_retention_ms == 7 * 86_400_000
    assert set(API_VERSIONS) == {"auto", "0.8", "0.10", "2.1", "hmb"}


def test_frozen_hashable_picklable() -> None:
    p = ProducerConfig(**BROKERS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.queue_buffering_max_ms = 1
    assert hash(p) == hash(ProducerConfig(**BROKERS))
    assert pickle.loads(pickle.dumps(p)) == p


def test_replace_validates_and_keeps_original() -> None:
    p = ProducerConfig(**BROKERS)
    q = p.replace(linger_ms=50)
    assert (p.queue_buffering_max_ms, q.queue_buffering_max_ms) == (5, 50)
    with pytest.raises(ConfigError):
        p.replace(linger_ms=-5)
    with pytest.raises(ConfigError, match="unknown"):
        p.replace(lingerms=5)


@pytest.mark.parametrize(
    "config",
    [
        ProducerConfig(metadata_broker_list="[::1]:9092,h:1", compressed_topics="a,b"),
        SimpleConsumerConfig(host="h", port=9),
        ConsumerConfig(zookeeper_connect="a:1,b:2/kafka", group_id="g", metadata_broker_list="h:1"),
        BrokerConfig(log_dirs="/a,/b", zookeeper_connect="z:2181"),
    ],
)
def test_to_properties_round_trips(config: ConfigBase) -> None:
    props = config.to_properties()
    assert all(isinstance(v, str) for v in props.values())
    assert type(config).from_properties(props) == config


def test_settings_describe_every_field() -> None:
    infos = {i.name: i for i in ProducerConfig.settings()}
    assert infos["queue_buffering_max_ms"].prop == "queue.buffering.max.ms"
    assert "queue.time" in infos["queue_buffering_max_ms"].aliases
    assert infos["metadata_broker_list"].required
    assert infos["serializer"].prop == "serializer.class"
    for cls in (ProducerConfig, SimpleConsumerConfig, ConsumerConfig, BrokerConfig):
        for info in cls.settings():
            assert info.doc, f"{cls.__name__}.{info.name} has no doc"


# --------------------------------------------------------------------- framework


def test_framework_is_generic_for_new_configs() -> None:
    @config_class
    class WidgetConfig(ConfigBase):
        widget_size_bytes: int = setting(10, min=1, aliases=("size",), doc="size")
        widget_ratio: float = setting(0.5, min=0, max=1, doc="ratio")
        widget_name: str | None = setting(None, doc="name")

    w = WidgetConfig.from_properties({"widget.size.bytes": "20", "widget.ratio": "0.25"})
    assert (w.widget_size_bytes, w.widget_ratio, w.widget_name) == (20, 0.25, None)
    assert WidgetConfig(size=3).widget_size_bytes == 3
    with pytest.raises(ConfigError, match="<= 1"):
        WidgetConfig(widget_ratio=2)
    with pytest.raises(ConfigError, match="did you mean 'widget.ratio'"):
        WidgetConfig.from_properties({"widget.ration": 1})


def test_conflicting_spellings_are_a_definition_error() -> None:
    with pytest.raises(TypeError, match="names both"):

        @config_class
        class Bad(ConfigBase):
            a_b: int = setting(1, doc="x")
            c: int = setting(1, aliases=("a.b",), doc="y")


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("a", "'a'"),
        ("h:1,a:x", "'a:x'"),
        ("a:0", "'a:0'"),
        (":9", "':9'"),
        ("[::1]9", "'[::1]9'"),
        ([("h", 70000)], "'h:70000'"),
        ([("", 1)], "('', 1)"),
        ([42], "42"),
    ],
)
def test_broker_list_errors_are_config_errors_naming_the_entry(value: Any, named: str) -> None:
    # One parser for every broker list (configs, NetClient, Spark options, CLI): a bad entry is
    # a ConfigError (also a ValueError, so config classes report it against the property).
    with pytest.raises(ConfigError) as err:
        parse_broker_list(value)
    assert named in str(err.value)
    assert isinstance(err.value, ValueError)


def test_parse_helpers(tmp_path: Path) -> None:
    assert parse_broker_list(["h:1", ("g", 2), "h:1"]) == (("h", 1), ("g", 2))
    assert parse_broker_list("[::1]:9,  ,h:2") == (("::1", 9), ("h", 2))
    assert parse_broker_list(" a:1, b:2 ") == (("a", 1), ("b", 2))
    assert parse_broker_list("") == ()
    assert parse_zookeeper_connect("a,b:2182/kafka/x") == ((("a", 2181), ("b", 2182)), "/kafka/x")
    text = "a=1\n! comment\nb : two \\\n   words\nc\\u00e9=x\\ty\nd\n"
    assert parse_properties(text) == {"a": "1", "b": "two words", "cé": "x\ty", "d": ""}
    f = tmp_path / "consumer.properties"
    f.write_text("zookeeper.connect=127.0.0.1:2181\ngroup.id=billing\n", encoding="utf-8")
    assert ConsumerConfig.from_properties(load_properties(f)).group_id == "billing"
    with pytest.raises(ConfigError, match="cannot read"):
        load_properties(tmp_path / "missing.properties")


def test_acks_default_to_all_when_idempotence_or_a_transactional_id_is_asked_for() -> None:
    """Kafka's ProducerConfig: acks not given + idempotence asked for -> acks=all; acks given
    and not all -> refused (the implied default never overrides what the caller set)."""
    from hmbclient.config import ProducerConfig
    from hmbclient.errors import ConfigError

    broker = {"metadata.broker.list": "h:9092"}
    assert ProducerConfig(**broker, **{"transactional.id": "orders-1"}).request_required_acks == -1
    assert ProducerConfig(**broker, **{"enable.idempotence": "true"}).request_required_acks == -1
    assert ProducerConfig(**broker, **{"enable.idempotence": True}).request_required_acks == -1
    assert ProducerConfig(**broker).request_required_acks == 1  # the 0.8 default stays
    assert ProducerConfig(**broker, **{"enable.idempotence": False}).request_required_acks == 1
    with pytest.raises(ConfigError, match="needs 'request.required.acks'=-1"):
        ProducerConfig(**broker, **{"transactional.id": "orders-1", "acks": 1})
    cfg = ProducerConfig.from_properties({**broker, "transactional.id": "t"})
    assert cfg.request_required_acks == -1 and cfg.replace(client_id="x").request_required_acks == -1
