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

======================================  ====================================================
``topic``                               one topic; or ``topics`` (comma-separated, alias
                                        ``subscribe``); or ``topicPattern`` (alias
                                        ``subscribePattern``: a regex matching a whole topic
                                        name); or ``assign`` (JSON ``{"t": [0, 1]}``).
                                        Exactly one of them.
``startingOffsets``                     ``earliest`` | ``latest`` | JSON ``{"t": {"0": 5}}``
                                        (-2 earliest, -1 latest). Default: ``earliest`` for
                                        batch, ``latest`` streaming.
``startingTimestamp``                   ms since the epoch, every partition: the first offset
                                        whose timestamp is >= it (wins over the two others)
``startingOffsetsByTimestamp``          JSON ``{"t": {"0": ms}}`` naming every partition read
``startingOffsetsByTimestampStrategy``  ``error`` (default: no such offset fails the read) |
                                        ``latest`` (start at the partition's latest offset)
``endingOffsets``                       batch only: ``latest`` (default) | JSON (-1 latest)
``endingTimestamp``                     batch only: as ``startingTimestamp``; no such offset
``endingOffsetsByTimestamp``            means latest
``failOnDataLoss``                      ``true`` (default) | ``false``: offsets deleted before
                                        they were read fail the query, or are skipped (each
                                        lost range logged at WARNING, topic-partition [from,
                                        to))
``minPartitions``                       split ranges so a read has at least this many tasks
``maxRecordsPerPartition``              split ranges so no task reads more offsets than this
``includeHeaders``                      ``false`` (default) | ``true``: a ``headers`` column
``maxOffsetsPerTrigger``                streaming only: at most this many offsets per batch
``minOffsetsPerTrigger``                streaming only: wait for this many new offsets ...
``maxTriggerDelay``                     ... but at most this long (default ``15m``; ``ms``,
                                        ``s``, ``m``, ``h``, ``d``; a bare number is ms)
``groupIdPrefix``                       streaming only: commit progress to a group of its own,
                                        ``<prefix>-<uuid>``, when no ``group.id`` is given
``commitOffsetsToBroker``               streaming only: ``true`` (default) | ``false``: write
                                        processed offsets to the broker's group (see below)
======================================  ====================================================

Any option may be spelled with Spark's ``kafka.`` prefix (``kafka.bootstrap.servers``,
``kafka.group.id``, ``kafka.security.protocol``): the prefix is dropped when the rest is one of
these options; other ``kafka.*`` keys are refused like any unknown option.

For the data source, ``group.id`` (``kafka.group.id``), ``groupIdPrefix``, ``zookeeper.connect``
and ``commitOffsetsToBroker`` are streaming only: a query with a group records processed offsets
in it, through the broker's group coordinator (OffsetCommit, unless ``commitOffsetsToBroker`` is
false) and, with ``zookeeper.connect``, in ZooKeeper, so lag tools see progress.

``create_rdd`` only (:class:`KafkaParams`): ``auto.offset.reset`` (``smallest`` | ``largest``,
default ``largest`` as in Kafka 0.8; ``earliest``/``latest`` are accepted as synonyms), used by
``ranges_from_group_offsets`` for a partition with nothing committed.

An option given as an empty string counts as not given (Spark has no way to unset one).
"""

from __future__ import annotations

import dataclasses
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
from spark_integration.offsets import (
    OffsetSpec,
    TopicPartition,
    parse_assign,
    parse_offset_spec,
    parse_timestamps_json,
)
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


def _assign(value: Any) -> Any:
    if isinstance(value, str):
        parse_assign(value)  # raises ConfigError naming what is wrong
        return value.strip()
    return value


def _timestamps(option: str) -> Any:
    def convert(value: Any) -> Any:
        if isinstance(value, str):
            parse_timestamps_json(value, option=option)
            return value.strip()
        return value

    return convert


def _strategy(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _duration_ms(value: Any) -> Any:
    if isinstance(value, str):
        return parse_duration_ms(value)
    return value


_DURATION = re.compile(r"(?i)^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """A Spark time string (``100ms``, ``30s``, ``15m``, ``1h``, ``2d``; bare numbers are ms).

    Raises:
        ValueError: Not such a string.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 30s, 15m, 1h")
    return int(match.group(1)) * _DURATION_MS[(match.group(2) or "ms").lower()]


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
        aliases=("bootstrap.servers", "kafka.bootstrap.servers"),
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
        None,
        aliases=("kafka.group.id",),
        convert=_group_id,
        doc="group.id: the consumer group whose offsets are kept",
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
    topics: tuple[str, ...] | None = setting(
        None, aliases=("subscribe",), doc="topics: comma-separated topics to read"
    )
    topic_pattern: str | None = setting(
        None,
        prop="topicPattern",
        aliases=("subscribePattern",),
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
    assign: str | None = setting(
        None, convert=_assign, doc='assign: JSON {"topic": [0, 1]}: exactly these partitions'
    )
    starting_timestamp: int | None = setting(
        None,
        prop="startingTimestamp",
        min=0,
        doc="startingTimestamp: ms; every partition starts at its first offset at or after it",
    )
    starting_offsets_by_timestamp: str | None = setting(
        None,
        prop="startingOffsetsByTimestamp",
        convert=_timestamps("startingOffsetsByTimestamp"),
        doc='startingOffsetsByTimestamp: JSON {"topic": {"0": ms}} for every partition read',
    )
    starting_offsets_by_timestamp_strategy: Literal["error", "latest"] = setting(
        "error",
        prop="startingOffsetsByTimestampStrategy",
        convert=_strategy,
        doc="startingOffsetsByTimestampStrategy: error | latest, when no offset matches",
    )
    ending_timestamp: int | None = setting(
        None, prop="endingTimestamp", min=0, doc="endingTimestamp: batch only; ms, as starting"
    )
    ending_offsets_by_timestamp: str | None = setting(
        None,
        prop="endingOffsetsByTimestamp",
        convert=_timestamps("endingOffsetsByTimestamp"),
        doc='endingOffsetsByTimestamp: batch only; JSON {"topic": {"0": ms}}',
    )
    fail_on_data_loss: bool = setting(
        True,
        prop="failOnDataLoss",
        doc="failOnDataLoss: fail (true) or skip and log (false) offsets deleted before read",
    )
    min_partitions: int | None = setting(
        None, prop="minPartitions", min=1, doc="minPartitions: at least this many read tasks"
    )
    max_records_per_partition: int | None = setting(
        None,
        prop="maxRecordsPerPartition",
        min=1,
        doc="maxRecordsPerPartition: at most this many offsets per read task",
    )
    include_headers: bool = setting(
        False, prop="includeHeaders", doc="includeHeaders: add a headers column"
    )
    min_offsets_per_trigger: int | None = setting(
        None,
        prop="minOffsetsPerTrigger",
        min=1,
        doc="minOffsetsPerTrigger: streaming only; wait for this many new offsets",
    )
    max_trigger_delay_ms: int | None = setting(
        None,
        prop="maxTriggerDelay",
        min=0,
        convert=_duration_ms,
        doc="maxTriggerDelay: streaming only; longest wait for minOffsetsPerTrigger (15m)",
    )
    group_id_prefix: str | None = setting(
        None,
        prop="groupIdPrefix",
        convert=_group_id,
        doc="groupIdPrefix: streaming only; commit to the group <prefix>-<uuid>",
    )
    commit_offsets_to_broker: bool = setting(
        True,
        prop="commitOffsetsToBroker",
        doc="commitOffsetsToBroker: streaming only; commit progress to the broker's group",
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
                ("assign", self.assign),
            )
            if value is not None
        ]
        if len(chosen) != 1:
            self._fail(
                "needs exactly one of the options topic, topics (subscribe), topicPattern "
                "(subscribePattern), assign"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        if self.topics is not None and not self.topics:
            self._fail("topics: no topic names given")
        for name in self.topic_names or ():
            if not is_valid_topic_name(name):
                self._fail(f"illegal topic name {name!r}: {TOPIC_NAME_RULE}")
        if self.zookeeper_connect is not None and self.group_id is None:
            self._fail("zookeeper.connect needs group.id (the group whose offsets it keeps)")
        if self.starting_offsets_by_timestamp_strategy not in ("error", "latest"):
            self._fail("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")
        ending = self.ending_offsets
        if ending is not None and ending.kind == "earliest":
            self._fail("endingOffsets='earliest' reads nothing; use 'latest' or JSON")
        if ending is not None and any(v == -2 for v in (ending.offsets or {}).values()):
            self._fail("endingOffsets: -2 (earliest) is not allowed as an ending offset")

    def read_settings(self) -> ReadSettings:
        """The picklable settings tasks receive (with the source's column and loss options)."""
        return dataclasses.replace(
            super().read_settings(),
            fail_on_data_loss=self.fail_on_data_loss,
            include_headers=self.include_headers,
        )

    @property
    def topic_names(self) -> tuple[str, ...] | None:
        """The named topics (``topic``, ``topics`` or ``assign``'s), or None for ``topicPattern``."""
        if self.assigned is not None:
            return tuple(sorted({t for t, _ in self.assigned}))
        return (self.topic,) if self.topic is not None else self.topics

    @property
    def assigned(self) -> tuple[TopicPartition, ...] | None:
        """``assign``'s partitions, sorted; None when topics are subscribed instead."""
        return parse_assign(self.assign) if self.assign is not None else None

    @property
    def trigger_delay_ms(self) -> int:
        """``maxTriggerDelay`` in ms (Spark's default 15 minutes when not given)."""
        return 15 * 60_000 if self.max_trigger_delay_ms is None else self.max_trigger_delay_ms

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
        opts = SourceOptions.from_properties(_without_kafka_prefix(_given(options)))
    except ConfigError as exc:
        raise ConfigError(f"format 'hmb': {exc}") from None
    refused: dict[str, object]
    if streaming:
        refused = {
            "endingOffsets": opts.ending_offsets,
            "endingTimestamp": opts.ending_timestamp,
            "endingOffsetsByTimestamp": opts.ending_offsets_by_timestamp,
        }
        kind = "batch reads only (spark.read)"
    else:
        refused = {
            "maxOffsetsPerTrigger": opts.max_offsets_per_trigger,
            "minOffsetsPerTrigger": opts.min_offsets_per_trigger,
            "maxTriggerDelay": opts.max_trigger_delay_ms,
            "zookeeper.connect": opts.zookeeper_connect,
            "group.id": opts.group_id,
            "groupIdPrefix": opts.group_id_prefix,
        }
        kind = "streaming reads only (spark.readStream)"
    for name, value in refused.items():
        if value is not None:
            raise ConfigError(f"format 'hmb': {name} is for {kind}")
    return opts


def _without_kafka_prefix(options: Mapping[str, Any]) -> dict[str, Any]:
    """Spark's ``kafka.<consumer property>`` spelling: drop the prefix of a key that names one of
    our options (``kafka.security.protocol``); keep any other key as given, to be refused."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key.lower().startswith("kafka.") and SourceOptions.split_properties({key[6:]: 1})[0]:
            key = key[6:]
        out[key] = value
    return out


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
