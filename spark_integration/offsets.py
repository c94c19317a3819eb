"""Offset ranges and offset maps: the pure planning half of the Spark integration.

Nothing here talks to a broker, to ZooKeeper or to Spark. Callers fetch the facts (the
partitions of a topic, their earliest and latest offsets) and these functions turn facts plus
user intent into :class:`OffsetRange` plans.

Contract and invariants:

* An :class:`OffsetRange` is ``[from_offset, until_offset)``: ``from_offset`` is the first
  offset read, ``until_offset`` is exclusive (the "next offset" after the range), so
  ``until_offset - from_offset`` is exactly the number of messages a compact log yields.
* Offset maps are ``{(topic, partition): offset}``. On the wire (Spark options, streaming
  checkpoints) they are JSON ``{"topic": {"0": 42, "1": 7}}`` -- the shape Spark's own Kafka
  source uses; partition keys are decimal strings because JSON keys are strings.
* :func:`offsets_to_json` / :func:`offsets_to_dict` are canonical (topics sorted, partitions
  sorted numerically) so that equal offset maps serialize to equal text. Spark decides "no new
  data" by comparing serialized offsets, so a stable order matters.
* In user-supplied JSON, ``-2`` means "earliest" and ``-1`` means "latest" (Kafka's
  ``EARLIEST_TIME`` / ``LATEST_TIME`` sentinels); every other offset must be >= 0.
* ``assign`` JSON is ``{"topic": [0, 1]}``; timestamp JSON is ``{"topic": {"0": ms}}`` (ms >= 0)
  and must name every partition read (as Spark requires).

Decisions Spark's Kafka source makes, here as pure functions of offsets and time:

* :func:`resolve_timestamp_offsets`: an offset found by timestamp, or (case *none*) the
  ``startingOffsetsByTimestampStrategy``: ``error`` fails naming the partitions, ``latest``
  (and every ending) takes the latest offset.
* :func:`split_ranges` (``maxRecordsPerPartition``, ``minPartitions``): first no piece longer
  than ``maxRecordsPerPartition``; then, while there are fewer pieces than ``minPartitions``,
  each range is cut into ``max(1, round(size / total * minPartitions))`` near-equal pieces, as
  Spark's ``KafkaOffsetRangeCalculator`` does. Balanced by offsets: hmb's broker serves no
  DescribeLogDirs, and where a broker does it tells a partition's total size, not where inside
  the partition the bytes lie, so a cut inside one partition can only be by offsets.
* :func:`data_loss` (``failOnDataLoss``): a position below the earliest offset (*retention*:
  ``[position, earliest)`` is lost) or above the latest (*went back*: the topic was recreated
  or the log truncated; ``[latest, position)`` vanished); the query resumes at the earliest.
* :func:`trigger_due` (``minOffsetsPerTrigger`` / ``maxTriggerDelay``).
* :func:`offsets_behind_latest`: Spark's source metrics ``minOffsetsBehindLatest``,
  ``maxOffsetsBehindLatest``, ``avgOffsetsBehindLatest``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hmbclient.errors import ConfigError

__all__ = [
    "OffsetRange",
    "TopicPartition",
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "parse_offset_spec",
    "parse_offsets_json",
    "offsets_to_json",
    "offsets_to_dict",
    "offsets_from_dict",
    "resolve_offsets",
    "plan_ranges",
    "limit_ends",
    "parse_assign",
    "parse_timestamps_json",
    "resolve_timestamp_offsets",
    "split_ranges",
    "DataLoss",
    "data_loss",
    "trigger_due",
    "offsets_behind_latest",
]

#: A (topic, partition) pair; the key of every offset map.
TopicPartition = tuple[str, int]

#: Sentinels accepted in user JSON (Kafka's EARLIEST_TIME / LATEST_TIME).
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """The messages ``[from_offset, until_offset)`` of one topic-partition.

    Args:
        topic: Topic name (non-empty).
        partition: Partition index (>= 0).
        from_offset: First offset to read (>= 0).
        until_offset: One past the last offset to read (>= ``from_offset``).

    Raises:
        ValueError: Any field is out of range; the message names the range.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"OffsetRange needs a non-empty topic name, got {self.topic!r}")
        for name in ("partition", "from_offset", "until_offset"):
            value = getattr(self, name)
            # bool is an int subclass; True as an offset is always a caller's mistake.
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{self!r}: {name} must be an int >= 0, got {value!r}")
        if self.until_offset < self.from_offset:
            raise ValueError(f"{self!r}: until_offset is below from_offset")

    @property
    def count(self) -> int:
        """How many offsets the range spans (``until_offset - from_offset``)."""
        return self.until_offset - self.from_offset

    @property
    def topic_partition(self) -> TopicPartition:
        """The ``(topic, partition)`` this range reads."""
        return (self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset})"


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """What the user asked for as a starting or ending position.

    ``kind`` is ``"earliest"``, ``"latest"`` or ``"specific"``; for ``"specific"``,
    ``offsets`` maps partitions to an offset or to the EARLIEST / LATEST sentinel, and any
    partition it does not name falls back to ``default`` (``"earliest"`` or ``"latest"``).
    """

    kind: str
    offsets: Mapping[TopicPartition, int] | None = None

    def __str__(self) -> str:
        """The option text this spec parses from (``earliest``, ``latest`` or JSON)."""
        if self.kind == "specific":
            return offsets_to_json(self.offsets or {})
        return self.kind


def parse_offset_spec(text: str | None, *, option: str, default: str) -> OffsetSpec:
    """Parse a ``startingOffsets`` / ``endingOffsets`` option value.

    Args:
        text: ``"earliest"``, ``"latest"``, a JSON object ``{"topic": {"0": 5}}``, or None
            (use ``default``).
        option: The option name, for error messages.
        default: ``"earliest"`` or ``"latest"``.

    Returns:
        The parsed :class:`OffsetSpec`.

    Raises:
        ConfigError: The text is neither keyword nor valid offsets JSON.
    """
    if text is None:
        return OffsetSpec(default)
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return OffsetSpec(stripped.lower())
    if not stripped.startswith("{"):
        raise ConfigError(
            f"{option}={text!r}: expected 'earliest', 'latest' or JSON such as "
            '{"topic": {"0": 23, "1": -2}} (-2 = earliest, -1 = latest)'
        )
    return OffsetSpec("specific", parse_offsets_json(stripped, option=option))


def parse_offsets_json(text: str, *, option: str = "offsets") -> dict[TopicPartition, int]:
    """Parse ``{"topic": {"partition": offset}}`` JSON into an offset map.

    Args:
        text: The JSON text.
        option: Name used in error messages.

    Returns:
        ``{(topic, partition): offset}``; offsets may be EARLIEST (-2) or LATEST (-1).

    Raises:
        ConfigError: Malformed JSON, a non-integer partition or offset, or an offset below -2.
    """
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: not valid JSON ({exc}): {text!r}") from None
    return _offsets_from_obj(raw, option=option, allow_sentinels=True)


def offsets_from_dict(obj: Any, *, what: str = "offset") -> dict[TopicPartition, int]:
    """Read an offset map back from its dict form (a streaming checkpoint offset).

    Args:
        obj: ``{"topic": {"0": 42}}`` as produced by :func:`offsets_to_dict`.
        what: Name used in error messages.

    Returns:
        ``{(topic, partition): offset}`` with every offset >= 0.

    Raises:
        ConfigError: The object does not have that shape.
    """
    return _offsets_from_obj(obj, option=what, allow_sentinels=False)


def _offsets_from_obj(raw: Any, *, option: str, allow_sentinels: bool) -> dict[TopicPartition, int]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{option}: expected a JSON object of topics, got {raw!r}")
    lowest = EARLIEST if allow_sentinels else 0
    result: dict[TopicPartition, int] = {}
    for topic, parts in raw.items():
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"{option}: bad topic name {topic!r}")
        if not isinstance(parts, dict):
            raise ConfigError(f"{option}: topic {topic!r} must map to {{partition: offset}}")
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{option}: {topic!r} has a non-integer partition {part!r}"
                ) from None
            if partition < 0:
                raise ConfigError(f"{option}: {topic!r} has a negative partition {part!r}")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < lowest:
                raise ConfigError(
                    f"{option}: {topic}-{partition} has offset {offset!r}; expected an integer "
                    + (">= 0 or -2 (earliest) / -1 (latest)" if allow_sentinels else ">= 0")
                )
            result[(topic, partition)] = offset
    return result


def offsets_to_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Canonical dict form ``{"topic": {"0": 42}}`` (topics sorted, partitions numerically).

    Args:
        offsets: ``{(topic, partition): offset}``.

    Returns:
        A JSON-ready dict whose iteration order is canonical.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Canonical JSON text of an offset map (see :func:`offsets_to_dict`)."""
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def resolve_offsets(
    spec: OffsetSpec | None,
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    *,
    option: str,
    default: str,
) -> dict[TopicPartition, int]:
    """Turn an :class:`OffsetSpec` into concrete offsets for ``partitions``.

    Args:
        spec: The parsed option, or None if it was not given (every partition gets
            ``default``).
        partitions: The partitions being read.
        earliest: Earliest available offset per partition.
        latest: Latest offset (next offset to be written) per partition.
        option: Option name for error messages.
        default: ``"earliest"`` or ``"latest"``: what a partition the JSON does not name gets.

    Returns:
        ``{(topic, partition): offset}`` for every partition in ``partitions``.

    Raises:
        ConfigError: The JSON names a partition that is not being read, or an offset outside
            ``[earliest, latest]`` of its partition.
    """
    if spec is None:
        spec = OffsetSpec(default)
    wanted = list(partitions)
    result: dict[TopicPartition, int] = {}
    specific = dict(spec.offsets or {})
    unknown = sorted(set(specific) - set(wanted))
    if unknown:
        names = ", ".join(f"{t}-{p}" for t, p in unknown)
        raise ConfigError(f"{option} names partitions that are not being read: {names}")
    for tp in wanted:
        if spec.kind == "specific":
            offset = specific.get(tp, EARLIEST if default == "earliest" else LATEST)
        else:
            offset = EARLIEST if spec.kind == "earliest" else LATEST
        lo, hi = earliest[tp], latest[tp]
        if offset == EARLIEST:
            offset = lo
        elif offset == LATEST:
            offset = hi
        elif not lo <= offset <= hi:
            raise ConfigError(
                f"{option}: {tp[0]}-{tp[1]} offset {offset} is outside the available "
                f"range [{lo}, {hi}]"
            )
        result[tp] = offset
    return result


def plan_ranges(
    starts: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """One :class:`OffsetRange` per partition, in canonical (topic, partition) order.

    Args:
        starts: First offset per partition.
        ends: Exclusive end offset per partition (same keys as ``starts``).

    Returns:
        The ranges, including empty ones (Spark still gets one input partition per
        topic-partition; an empty range reads nothing).

    Raises:
        ConfigError: The key sets differ, or an end lies before its start.
    """
    if set(starts) != set(ends):
        missing = sorted(set(starts) ^ set(ends))
        raise ConfigError(f"start and end offsets cover different partitions: {missing}")
    ranges = []
    for tp in sorted(starts):
        if ends[tp] < starts[tp]:
            raise ConfigError(
                f"{tp[0]}-{tp[1]}: ending offset {ends[tp]} is before starting offset {starts[tp]}"
            )
        ranges.append(OffsetRange(tp[0], tp[1], starts[tp], ends[tp]))
    return ranges


def limit_ends(
    starts: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_total: int | None,
) -> dict[TopicPartition, int]:
    """Cap how far each partition advances so the total is at most ``max_total``.

    The budget is shared in proportion to each partition's backlog (as Spark's Kafka source
    does for ``maxOffsetsPerTrigger``), rounding down and handing the remainder to the largest
    fractional shares, so the total is exactly ``min(max_total, backlog)`` and the result is
    deterministic for equal inputs.

    Args:
        starts: Current position per partition.
        latest: Latest available offset per partition (same keys as ``starts``).
        max_total: The budget, or None for no limit.

    Returns:
        End offset per partition, ``starts[tp] <= end <= max(starts[tp], latest[tp])``.

    Raises:
        ValueError: ``max_total`` is below 1.
    """
    backlog = {tp: max(0, latest[tp] - starts[tp]) for tp in starts}
    total = sum(backlog.values())
    if max_total is None or total <= max_total:
        return {tp: starts[tp] + backlog[tp] for tp in starts}
    if max_total < 1:
        raise ValueError(f"max_total must be >= 1, got {max_total}")
    shares = {tp: backlog[tp] * max_total // total for tp in starts}
    remainder = max_total - sum(shares.values())
    # Largest fractional part first; ties broken by partition order for determinism.
    order = sorted(starts, key=lambda tp: (-((backlog[tp] * max_total) % total), tp))
    for tp in order:
        if remainder == 0:
            break
        if shares[tp] < backlog[tp]:
            shares[tp] += 1
            remainder -= 1
    return {tp: starts[tp] + shares[tp] for tp in starts}


def parse_assign(text: str) -> tuple[TopicPartition, ...]:
    """Parse ``assign`` JSON ``{"topic": [0, 1]}`` into sorted ``(topic, partition)`` pairs.

    Raises:
        ConfigError: Not that shape, a negative or non-integer partition, or no partition.
    """
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"assign: not valid JSON ({exc}): {text!r}") from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f'assign: expected JSON such as {{"topic": [0, 1]}}, got {text!r}')
    out: set[TopicPartition] = set()
    for topic, parts in raw.items():
        if not topic or not isinstance(parts, list) or not parts:
            raise ConfigError(f"assign: topic {topic!r} must map to a non-empty list of partitions")
        for part in parts:
            if not isinstance(part, int) or isinstance(part, bool) or part < 0:
                raise ConfigError(f"assign: {topic!r} has a bad partition {part!r}")
            out.add((topic, part))
    return tuple(sorted(out))


def parse_timestamps_json(text: str, *, option: str) -> dict[TopicPartition, int]:
    """Parse ``{"topic": {"0": ms}}`` (``startingOffsetsByTimestamp`` and its ending twin).

    Raises:
        ConfigError: Malformed, or a timestamp below 0 (the message names ``option``).
    """
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{option}: not valid JSON ({exc}): {text!r}") from None
    return _offsets_from_obj(raw, option=option, allow_sentinels=False)


def resolve_timestamp_offsets(
    found: Mapping[TopicPartition, int | None],
    latest: Mapping[TopicPartition, int],
    *,
    option: str,
    strategy: str,
) -> dict[TopicPartition, int]:
    """Offsets looked up by timestamp, with the *none* case decided.

    Args:
        found: Per partition the first offset whose timestamp is >= the asked one, or None
            when the partition holds no such message.
        latest: Latest offset per partition.
        option: The option name, for the error.
        strategy: ``"error"`` (a None fails) or ``"latest"`` (a None takes ``latest``).

    Raises:
        ConfigError: ``strategy`` is ``"error"`` and some partition has no matching offset.
    """
    missing = sorted(tp for tp, offset in found.items() if offset is None)
    if missing and strategy == "error":
        names = ", ".join(f"{t}-{p}" for t, p in missing)
        raise ConfigError(
            f"{option}: no offset at or after the timestamp in {names} (set "
            "startingOffsetsByTimestampStrategy=latest to start there at the latest offset)"
        )
    return {tp: latest[tp] if offset is None else offset for tp, offset in found.items()}


def _cut(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    pieces = max(1, min(pieces, r.count))
    bounds = [r.from_offset + r.count * i // pieces for i in range(pieces + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def split_ranges(
    ranges: Iterable[OffsetRange], *, min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Cut non-empty ranges for ``maxRecordsPerPartition`` then ``minPartitions`` (see the
    module docstring); empty ranges are dropped. Pieces cover each range exactly, in order."""
    out = [r for r in ranges if r.count > 0]
    if max_records is not None:
        out = [piece for r in out for piece in _cut(r, -(-r.count // max_records))]
    if min_partitions is not None and 0 < len(out) < min_partitions:
        total = sum(r.count for r in out)
        out = [
            piece
            for r in out
            # half up, as Scala's math.round in Spark (Python's round() goes to even)
            for piece in _cut(r, max(1, int(r.count / total * min_partitions + 0.5)))
        ]
    return out


@dataclass(frozen=True, slots=True)
class DataLoss:
    """Offsets of one partition that can no longer be read: ``[lost_from, lost_to)``."""

    topic: str
    partition: int
    lost_from: int
    lost_to: int
    resume_at: int
    reason: str

    def __str__(self) -> str:
        return (
            f"{self.topic}-{self.partition}: offsets [{self.lost_from}, {self.lost_to}) "
            f"{self.reason}; resuming at {self.resume_at}"
        )


def data_loss(tp: TopicPartition, position: int, earliest: int, latest: int) -> DataLoss | None:
    """Whether reading ``tp`` from ``position`` lost data, given its earliest/latest offsets."""
    if position < earliest:
        return DataLoss(tp[0], tp[1], position, earliest, earliest,
                        "were deleted before they were read (retention or DeleteRecords)")
    if position > latest:
        return DataLoss(tp[0], tp[1], latest, position, earliest,
                        "vanished: the log ends before the query's position (topic recreated "
                        "or log truncated)")
    return None


def trigger_due(
    backlog: int, min_offsets: int | None, delay_ms: int, since_last_ms: float
) -> bool:
    """Whether a micro-batch should run: any backlog without ``minOffsetsPerTrigger``; with it,
    a backlog of at least that many offsets or (if any backlog) ``maxTriggerDelay`` elapsed."""
    if backlog <= 0:
        return False
    if min_offsets is None or backlog >= min_offsets:
        return True
    return since_last_ms >= delay_ms


def offsets_behind_latest(
    consumed: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> dict[str, str]:
    """Spark's Kafka source metrics: offsets between each partition's consumed end and its
    latest offset, as ``{"minOffsetsBehindLatest": ..., "maxOffsetsBehindLatest": ...,
    "avgOffsetsBehindLatest": ...}`` (strings, as Spark reports them); empty with no data."""
    behind = [max(0, latest[tp] - consumed[tp]) for tp in consumed if tp in latest]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(float(sum(behind)) / len(behind)),
    }
