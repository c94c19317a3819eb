"""Options of the ``"hmb"`` Spark data source, parsed once into a frozen dataclass.

Spark hands a data source its options as a case-insensitive string map. :func:`parse_options`
validates every key (unknown keys raise :class:`~hmbclient.errors.ConfigError`, as everywhere
in hmbclient) and converts values, so that readers and partitions carry plain typed fields
that pickle cheaply to executors.

Recognised options (case-insensitive):

=========================  ==================================================================
``metadata.broker.list``   required; ``host:port[,host:port]`` (alias ``bootstrap.servers``)
``topic``                  one topic; or ``topics`` (comma-separated); or ``topicPattern``
                           (a regex that must match a whole topic name). Exactly one of them.
``startingOffsets``        ``earliest`` | ``latest`` | JSON ``{"t": {"0": 5}}`` (-2 earliest,
                           -1 latest). Default: ``earliest`` for batch, ``latest`` streaming.
``endingOffsets``          batch only: ``latest`` (default) | JSON (-1 latest)
``maxOffsetsPerTrigger``   streaming only: at most this many offsets per micro-batch
``fetch.message.max.bytes`` bytes asked per fetch request (default 1 MiB)
``socket.timeout.ms``      SimpleConsumer socket timeout (default 30 000)
``client.id``              client id sent to brokers (default ``hmb-spark``)
``api.version``            ``auto`` (default), ``0.8``, ``0.10``, ``2.1``, ``hmb``
``zookeeper.connect``      streaming only, with ``group.id``: also record processed offsets
``group.id``               under ``/consumers/<group>/offsets`` so lag tools see progress
=========================  ==================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hmbclient.config import parse_broker_list
from hmbclient.errors import ConfigError
from spark_integration.offsets import OffsetSpec, parse_offset_spec

__all__ = ["SourceOptions", "parse_options"]

_DEFAULT_FETCH_BYTES = 1024 * 1024
_DEFAULT_SOCKET_TIMEOUT_MS = 30_000

_KNOWN = {
    "metadata.broker.list",
    "bootstrap.servers",
    "topic",
    "topics",
    "topicpattern",
    "startingoffsets",
    "endingoffsets",
    "maxoffsetspertrigger",
    "fetch.message.max.bytes",
    "socket.timeout.ms",
    "client.id",
    "api.version",
    "zookeeper.connect",
    "group.id",
    # Spark passes ``path`` when load("...") is given an argument; we accept it only empty.
    "path",
}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated data source options (see the module docstring for each field's meaning)."""

    brokers: tuple[tuple[str, int], ...]
    topics: tuple[str, ...] | None
    topic_pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fetch_message_max_bytes: int
    socket_timeout_ms: int
    client_id: str
    api_version: str
    zookeeper_connect: str | None
    group_id: str | None

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed by these options."""
        if self.topics is not None:
            return topic in self.topics
        assert self.topic_pattern is not None
        return re.fullmatch(self.topic_pattern, topic) is not None


def _positive_int(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key}={raw!r}: expected a positive integer") from None
    if value < 1:
        raise ConfigError(f"{key}={raw!r}: expected a positive integer")
    return value


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options of a batch or streaming read.

    Args:
        options: Spark's option map (keys compared case-insensitively).
        streaming: True for ``readStream``; streaming forbids ``endingOffsets`` and defaults
            ``startingOffsets`` to ``latest``; batch forbids the streaming-only options.

    Returns:
        The parsed :class:`SourceOptions`.

    Raises:
        ConfigError: Unknown key, missing broker list, not exactly one of
            ``topic``/``topics``/``topicPattern``, or an invalid value.
    """
    opts = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"unknown option(s) for format 'hmb': {', '.join(unknown)}; known: "
            "metadata.broker.list, topic, topics, topicPattern, startingOffsets, endingOffsets, "
            "maxOffsetsPerTrigger, fetch.message.max.bytes, socket.timeout.ms, client.id, "
            "api.version, zookeeper.connect, group.id"
        )
    if opts.get("path"):
        raise ConfigError("format 'hmb' takes no path; use .option('topic', ...)")
    broker_text = opts.get("metadata.broker.list") or opts.get("bootstrap.servers")
    if not broker_text:
        raise ConfigError("format 'hmb' needs option metadata.broker.list (host:port,...)")
    brokers = parse_broker_list(broker_text)
    if not brokers:
        raise ConfigError("format 'hmb' needs option metadata.broker.list (host:port,...)")

    chosen = [k for k in ("topic", "topics", "topicpattern") if opts.get(k)]
    if len(chosen) != 1:
        raise ConfigError(
            "format 'hmb' needs exactly one of the options topic, topics, topicPattern"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    topics: tuple[str, ...] | None = None
    pattern: str | None = None
    if chosen[0] == "topic":
        topics = (opts["topic"].strip(),)
    elif chosen[0] == "topics":
        topics = tuple(t.strip() for t in opts["topics"].split(",") if t.strip())
        if not topics:
            raise ConfigError("topics: no topic names given")
    else:
        pattern = opts["topicpattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"topicPattern={pattern!r} is not a valid regex: {exc}") from None

    if streaming:
        if "endingoffsets" in opts:
            raise ConfigError("endingOffsets is for batch reads only (spark.read)")
        starting = parse_offset_spec(
            opts.get("startingoffsets"), option="startingOffsets", default="latest"
        )
        ending = OffsetSpec("latest")
    else:
        for key, name in (("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
                          ("zookeeper.connect", "zookeeper.connect"), ("group.id", "group.id")):
            if key in opts:
                raise ConfigError(f"{name} is for streaming reads only (spark.readStream)")
        starting = parse_offset_spec(
            opts.get("startingoffsets"), option="startingOffsets", default="earliest"
        )
        ending = parse_offset_spec(opts.get("endingoffsets"), option="endingOffsets", default="latest")
        if ending.kind == "earliest":
            raise ConfigError("endingOffsets='earliest' reads nothing; use 'latest' or JSON")
        if ending.kind == "specific" and any(v == -2 for v in (ending.offsets or {}).values()):
            raise ConfigError("endingOffsets: -2 (earliest) is not allowed as an ending offset")
    zk = opts.get("zookeeper.connect") or None
    group = opts.get("group.id") or None
    if (zk is None) != (group is None):
        raise ConfigError("zookeeper.connect and group.id go together (both or neither)")

    api_version = (opts.get("api.version") or "auto").strip()
    return SourceOptions(
        brokers=brokers,
        topics=topics,
        topic_pattern=pattern,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", None),
        fetch_message_max_bytes=_positive_int(opts, "fetch.message.max.bytes", _DEFAULT_FETCH_BYTES)
        or _DEFAULT_FETCH_BYTES,
        socket_timeout_ms=_positive_int(opts, "socket.timeout.ms", _DEFAULT_SOCKET_TIMEOUT_MS)
        or _DEFAULT_SOCKET_TIMEOUT_MS,
        client_id=(opts.get("client.id") or "hmb-spark").strip(),
        api_version=api_version,
        zookeeper_connect=zk,
        group_id=group,
    )
