"""Per-topic log configs (CreateTopics ``configs``, ``hmb topics --config``) and the LogConfig
they give.

Contract: ``validate_topic_configs`` takes ``name -> value`` strings as Kafka clients send them
and returns them normalised, or raises ConfigError naming the first bad entry (an unknown name,
a value out of range); nothing is stored for a refused topic. ``log_config_with`` applies stored
overrides to a broker-wide LogConfig. Cases of ``cleanup.policy``: ``delete`` (retention only),
``compact`` (the cleaner, no retention), ``compact,delete`` (both).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from hmbclient.broker.log.config import LogConfig
from hmbclient.errors import ConfigError

__all__ = ["TOPIC_CONFIGS", "parse_cleanup_policy", "validate_topic_configs", "log_config_with"]


def parse_cleanup_policy(text: str) -> tuple[bool, bool]:
    """``(compact, delete)`` of a ``cleanup.policy`` value.

    Raises:
        ConfigError: anything but delete, compact, or both (comma separated).
    """
    parts = {p.strip() for p in text.split(",") if p.strip()}
    if not parts or not parts <= {"compact", "delete"}:
        raise ConfigError(f"cleanup.policy must be delete, compact or compact,delete, got {text!r}")
    return "compact" in parts, "delete" in parts


def _int(lo: int) -> Callable[[str], int]:
    def conv(text: str) -> int:
        v = int(text)
        if v < lo:
            raise ValueError(f"must be >= {lo}")
        return v

    return conv


def _ratio(text: str) -> float:
    v = float(text)
    if not 0.0 <= v <= 1.0 or math.isnan(v):
        raise ValueError("must be in [0, 1]")
    return v


def _policy(text: str) -> str:
    compact, delete = parse_cleanup_policy(text)
    return ",".join(p for p, on in (("compact", compact), ("delete", delete)) if on)


#: topic config name -> parser of its value (the topic configs our logs honour)
TOPIC_CONFIGS: dict[str, Callable[[str], Any]] = {
    "cleanup.policy": _policy,
    "min.cleanable.dirty.ratio": _ratio,
    "min.compaction.lag.ms": _int(0),
    "delete.retention.ms": _int(0),
    "retention.ms": _int(-1),
    "retention.bytes": _int(-1),
    "segment.bytes": _int(14),
    "max.message.bytes": _int(1),
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Normalised ``configs`` (None values dropped: Kafka's "use the default").

    Raises:
        ConfigError: an unknown name or a bad value.
    """
    out: dict[str, str] = {}
    for name, value in configs.items():
        if value is None:
            continue
        conv = TOPIC_CONFIGS.get(name)
        if conv is None:
            raise ConfigError(f"unknown topic config {name!r} (known: {', '.join(sorted(TOPIC_CONFIGS))})")
        try:
            out[name] = str(conv(str(value).strip()))
        except (ValueError, ConfigError) as e:
            raise ConfigError(f"invalid value {value!r} for topic config {name}: {e}") from None
    return out


def log_config_with(base: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """``base`` with the topic's ``overrides`` (already validated) applied.

    Raises:
        ConfigError: the result is not a valid LogConfig.
    """
    if not overrides:
        return base
    changes: dict[str, Any] = {}
    if "cleanup.policy" in overrides:
        compact, delete = parse_cleanup_policy(overrides["cleanup.policy"])
        changes["compact"] = compact
        changes["delete"] = delete
        if not delete:
            changes["retention_ms"] = None
            changes["retention_bytes"] = None
    simple = {
        "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", float),
        "min.compaction.lag.ms": ("min_compaction_lag_ms", int),
        "delete.retention.ms": ("delete_retention_ms", int),
        "segment.bytes": ("segment_bytes", int),
        "max.message.bytes": ("max_message_bytes", int),
    }
    for name, (field, conv) in simple.items():
        if name in overrides:
            changes[field] = conv(overrides[name])
    for name, field in (("retention.ms", "retention_ms"), ("retention.bytes", "retention_bytes")):
        if name in overrides and changes.get(field, 0) is not None:
            v = int(overrides[name])
            changes[field] = None if v < 0 else v
    return dataclasses.replace(base, **changes)
