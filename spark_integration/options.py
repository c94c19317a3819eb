"""Options of the Spark integration, validated by the config machinery every hmbclient client uses.

Two option sets, each a frozen config class (:mod:`hmbclient.config`): keys in any spelling
(``startingOffsets``, ``startingoffsets``, ``starting_offsets``; Spark lower-cases option names),
unknown keys raise :class:`~hmbclient.errors.ConfigError` naming the key and suggesting close
matches, and values given as strings (Spark passes every option as one) are converted to the
setting's type. The broker list goes through :func:`hmbclient.config.parse_broker_list`, topic
names through :func:`rebalance.paths.is_valid_topic_name`, group ids through the znode rules of
:mod:`rebalance.paths`.

* :class:`SourceOptions` -- the ``"hmb"`` data source (``spark.read`` / ``spark.readStream``),
  from :func:`parse_options`.
* :class:`KafkaParams` -- ``kafka_params`` of ``create_rdd`` and the group helpers, from
  :func:`parse_kafka_params`.

Options shared by both (:class:`ReadOptions`):

=============================  ==============================================================
``metadata.broker.list``       required; ``host:port[,host:port]`` (alias ``bootstrap.servers``)
``fetch.message.max.bytes``    bytes asked per fetch request (default 1 MiB)
``socket.timeout.ms``          SimpleConsumer socket timeout (default 30 000)
``client.id``                  client id sent to brokers (default ``hmb-spark``)
``api.version``                ``auto`` (default), ``0.8``, ``0.10``, ``2.1``, ``hmb``
``refresh.leader.backoff.ms``  pause before asking a moved leader again (default 200)
``zookeeper.connect``          with ``group.id``: the ZooKeeper consumer group whose offsets
``group.id``                   ``/consumers/<group>/offsets`` are read or written
``isolation.level``            ``read_uncommitted`` (default) or ``read_committed``: committed
                               transactions only, up to the last stable offset (alias
                               ``kafka.isolation.level``, Spark's Kafka source's name)
=============================  ==============================================================

Data source only (:class:`SourceOptions`):

=========================  ==================================================================
``topic``                  one topic; or ``topics`` (comma-separated); or ``topicPattern``
                           (a regex that must match a whole topic name). Exactly one of them.
``startingOffsets``        ``earliest`` | ``latest`` | JSON ``{"t": {"0": 5}}`` (-2 earliest,
                           -1 latest). Default: ``earliest`` for batch, ``latest`` streaming.
``endingOffsets``          batch only: ``latest`` (default) | JSON (-1 latest)
``maxOffsetsPerTrigger``   streaming only: at most this many offsets per micro-batch
=========================  ==================================================================

For the data source, ``zookeeper.connect`` and ``group.id`` are streaming only and go together:
the query then also records processed offsets in the group so lag tools see progress.

``create_rdd`` only (:class:`KafkaParams`): ``auto.offset.reset`` (``smallest`` | ``largest``,
default ``largest`` as in Kafka 0.8; ``earliest``/``latest`` are accepted as synonyms), used by
``ranges_from_group_offsets`` for a partition with nothing committed.

An option given as an empty string counts as not given (Spark has no way to unset one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from hmbclient.config import (
    ApiVersion,
    BrokerList,
    SecurityConfig,
    config_class,
    parse_broker_list,
    parse_zookeeper_connect,
    setting,
)
from hmbclient.errors import ConfigError
from rebalance.paths import TOPIC_NAME_RULE, consumer_group_path, is_valid_topic_name
from spark_integration.offsets import OffsetSpec, parse_offset_spec
from spark_integration.settings import ReadSettings

#: The client security settings' property names, handed to every task.
_SECURITY_PROPS = frozenset(info.prop for info in SecurityConfig.settings())

__all__ = [
    "ReadOptions",
    "SourceOptions",
    "KafkaParams",
    "parse_options",
    "parse_kafka_params",
]


def _zookeeper_connect(value: Any) -> Any:
    if isinstance(value, str):
        parse_zookeeper_connect(value)  # raises ValueError naming what is wrong
        return value.strip()
    return value


def _group_id(value: Any) -> Any:
    if isinstance(value, str):
        consumer_group_path(value)  # the group is a znode name: raises ValueError if unusable
    return value


def _regex(value: Any) -> Any:
    if isinstance(value, str):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regex: {exc}") from None
    return value


def _offset_spec(option: str) -> Any:
    def convert(value: Any) -> Any:
        if isinstance(value, str):
            # Defaults depend on the read (batch or streaming); a given value needs none.
            return parse_offset_spec(value, option=option, default="latest")
        return value

    return convert


def _isolation(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _offset_reset(value: Any) -> Any:
    # The modern names mean the same thing; accept them rather than fail a copied config.
    if isinstance(value, str):
        return {"earliest": "smallest", "latest": "largest"}.get(value.strip().lower(), value)
    return value


@config_class
class ReadOptions(SecurityConfig):
    """What every read needs: where the brokers are, how to fetch, which group (if any), and
    how to connect (the client security settings: ``security.protocol``, ``ssl.*``, ``sasl.*``)."""

    metadata_broker_list: BrokerList = setting(
        aliases=("bootstrap.servers",),
        convert=parse_broker_list,
        doc="metadata.broker.list: bootstrap brokers 'host:port,...' (at least one)",
    )
    fetch_message_max_bytes: int = setting(
        1_048_576, min=1, doc="fetch.message.max.bytes: bytes asked per partition per fetch"
    )
    socket_timeout_ms: int = setting(
        30_000, min=1, doc="socket.timeout.ms: how long to wait for a broker's response"
    )
    client_id: str = setting("hmb-spark", doc="client.id: sent with every request")
    api_version: ApiVersion = setting("auto", doc="api.version: auto, 0.8, 0.10, 2.1 or hmb")
    refresh_leader_backoff_ms: int = setting(
        200, min=1, doc="refresh.leader.backoff.ms: pause before asking a moved leader again"
    )
    zookeeper_connect: str | None = setting(
        None,
        convert=_zookeeper_connect,
        doc="zookeeper.connect: 'host:port,...[/chroot]' holding the group's offsets",
    )
    group_id: str | None = setting(
        None, convert=_group_id, doc="group.id: the consumer group whose offsets are kept"
    )
    isolation_level: Literal["read_uncommitted", "read_committed"] = setting(
        "read_uncommitted",
        aliases=("kafka.isolation.level",),  # the name Spark's Kafka source takes
        convert=_isolation,
        doc="isolation.level: read_committed reads committed transactions only, up to the last stable offset",
    )

    def _validate(self) -> None:
        super()._validate()
        if not self.metadata_broker_list:
            self._fail("'metadata.broker.list' (metadata_broker_list) needs at least one host:port")

    def read_settings(self) -> ReadSettings:
        """The picklable settings tasks receive."""
        return ReadSettings(
            brokers=self.metadata_broker_list,
            fetch_message_max_bytes=self.fetch_message_max_bytes,
            socket_timeout_ms=self.socket_timeout_ms,
            client_id=self.client_id,
            api_version=self.api_version,
            retry_backoff_ms=self.refresh_leader_backoff_ms,
            isolation_level=self.isolation_level,
            security=tuple(sorted(SecurityConfig.from_properties(
                {k: v for k, v in self.to_properties().items() if k in _SECURITY_PROPS}
            ).to_properties().items())),
        )


@config_class
class SourceOptions(ReadOptions):
    """Options of the ``"hmb"`` data source (see the module docstring for each one).

    Rules that hold for batch and streaming alike are checked on construction; the rules of
    one kind of read by :func:`parse_options`.
    """

    topic: str | None = setting(None, doc="topic: the one topic to read")
    topics: tuple[str, ...] | None = setting(None, doc="topics: comma-separated topics to read")
    topic_pattern: str | None = setting(
        None,
        prop="topicPattern",
        convert=_regex,
        doc="topicPattern: read every topic whose whole name matches this regex",
    )
    starting_offsets: OffsetSpec | None = setting(
        None,
        prop="startingOffsets",
        convert=_offset_spec("startingOffsets"),
        doc="startingOffsets: earliest, latest or JSON (default: earliest batch, latest streaming)",
    )
    ending_offsets: OffsetSpec | None = setting(
        None,
        prop="endingOffsets",
        convert=_offset_spec("endingOffsets"),
        doc="endingOffsets: batch only; latest (default) or JSON",
    )
    max_offsets_per_trigger: int | None = setting(
        None,
        prop="maxOffsetsPerTrigger",
        min=1,
        doc="maxOffsetsPerTrigger: streaming only; most offsets one micro-batch reads",
    )
    # Spark passes ``path`` when load("...") is given an argument; this source takes none.
    path: str | None = setting(None, doc="path: not used (topics are options)")

    def _validate(self) -> None:
        super()._validate()
        if self.path:
            self._fail("format 'hmb' takes no path; use .option('topic', ...)")
        chosen = [
            name
            for name, value in (
                ("topic", self.topic),
                ("topics", self.topics),
                ("topicPattern", self.topic_pattern),
            )
            if value is not None
        ]
        if len(chosen) != 1:
            self._fail(
                "needs exactly one of the options topic, topics, topicPattern"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        if self.topics is not None and not self.topics:
            self._fail("topics: no topic names given")
        for name in self.topic_names or ():
            if not is_valid_topic_name(name):
                self._fail(f"illegal topic name {name!r}: {TOPIC_NAME_RULE}")
        if (self.zookeeper_connect is None) != (self.group_id is None):
            self._fail("zookeeper.connect and group.id go together (both or neither)")
        ending = self.ending_offsets
        if ending is not None and ending.kind == "earliest":
            self._fail("endingOffsets='earliest' reads nothing; use 'latest' or JSON")
        if ending is not None and any(v == -2 for v in (ending.offsets or {}).values()):
            self._fail("endingOffsets: -2 (earliest) is not allowed as an ending offset")

    @property
    def topic_names(self) -> tuple[str, ...] | None:
        """The named topics (``topic`` or ``topics``), or None when ``topicPattern`` chooses."""
        return (self.topic,) if self.topic is not None else self.topics

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed by these options."""
        if self.topic_names is not None:
            return topic in self.topic_names
        assert self.topic_pattern is not None
        return re.fullmatch(self.topic_pattern, topic) is not None


@config_class
class KafkaParams(ReadOptions):
    """``kafka_params`` of ``create_rdd`` and the group helpers (Kafka 0.8 property names)."""

    auto_offset_reset: Literal["smallest", "largest"] = setting(
        "largest",
        convert=_offset_reset,
        doc="auto.offset.reset: where a partition with nothing committed starts",
    )


def _given(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that carry a value: Spark cannot unset an option, so "" means not given."""
    return {
        str(key): value
        for key, value in options.items()
        if value is not None and not (isinstance(value, str) and not value.strip())
    }


def parse_options(options: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    """Validate the options of a batch or streaming read.

    Args:
        options: Spark's option map (any spelling of each key; values usually strings).
        streaming: True for ``readStream``: ``endingOffsets`` is refused; batch refuses
            ``maxOffsetsPerTrigger``, ``zookeeper.connect`` and ``group.id``.

    Returns:
        The :class:`SourceOptions`. ``starting_offsets`` / ``ending_offsets`` are None when
        not given (the reader applies its kind's default).

    Raises:
        ConfigError: Unknown key, missing broker list, not exactly one of
            ``topic``/``topics``/``topicPattern``, an option the kind of read does not take,
            or an invalid value. The message starts with ``format 'hmb'``.
    """
    try:
        opts = SourceOptions.from_properties(_given(options))
    except ConfigError as exc:
        raise ConfigError(f"format 'hmb': {exc}") from None
    refused: dict[str, object]
    if streaming:
        refused = {"endingOffsets": opts.ending_offsets}
        kind = "batch reads only (spark.read)"
    else:
        refused = {
            "maxOffsetsPerTrigger": opts.max_offsets_per_trigger,
            "zookeeper.connect": opts.zookeeper_connect,
            "group.id": opts.group_id,
        }
        kind = "streaming reads only (spark.readStream)"
    for name, value in refused.items():
        if value is not None:
            raise ConfigError(f"format 'hmb': {name} is for {kind}")
    return opts


def parse_kafka_params(kafka_params: Mapping[str, Any]) -> KafkaParams:
    """Validate ``kafka_params`` (Kafka 0.8 dotted property names, or any other spelling).

    Args:
        kafka_params: See :class:`KafkaParams` and :class:`ReadOptions`
            (``metadata.broker.list`` is required).

    Returns:
        The parsed :class:`KafkaParams`.

    Raises:
        ConfigError: Unknown key, missing broker list, or a bad value.
    """
    return KafkaParams.from_properties(_given(kafka_params))
