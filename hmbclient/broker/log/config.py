"""Per-log settings (the log layer's own config noun; the broker builds it from BrokerConfig).

Invariants: ``segment_bytes`` stays below 2 GiB because index positions are int32;
``index_interval_bytes`` >= 0 (0: an index entry per append). ``None`` disables a policy (no forced flush, no retention).
"""

from __future__ import annotations

from dataclasses import dataclass

from hmbclient.errors import ConfigError

__all__ = ["LogConfig"]

_MAX_SEGMENT_BYTES = 2**31 - 1


@dataclass(frozen=True)
class LogConfig:
    """How one partition log rolls, flushes, indexes and retains.

    Attributes:
        segment_bytes: roll to a new segment before a write would take the active one past this.
        index_interval_bytes: add a sparse index entry after this many bytes of appends.
        flush_interval_messages: fsync after this many messages (1 = every append); None = never
            forced by count.
        flush_interval_ms: fsync when the oldest unflushed append is this old (checked by the
            broker's scheduler through ``Log.maybe_flush``); None = never forced by time.
        retention_ms: delete whole non-active segments whose last write is older than this.
        retention_bytes: delete the oldest non-active segments while the log is bigger.
        max_message_bytes: largest batch/message accepted on append (MessageSizeTooLarge).
        compact: ``cleanup.policy`` has ``compact``: the log cleaner keeps the newest record
            per key (see ``cleaner``); retention still applies when set (``compact,delete``).
        min_cleanable_dirty_ratio: clean a compact log once this share of its cleanable bytes
            is dirty (``min.cleanable.dirty.ratio``).
        delete: ``cleanup.policy`` has ``delete``; a ``compact``-only log refuses DeleteRecords
            (POLICY_VIOLATION, as Kafka).
        min_compaction_lag_ms: a record stays uncompacted at least this long
            (``min.compaction.lag.ms``).
        delete_retention_ms: how long a tombstone outlives its cleaning (``delete.retention.ms``).
        producer_id_expiration_ms: forget an idempotent producer's state after this long
            without a write (``producer.id.expiration.ms``).
    """

    segment_bytes: int = 1024 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_interval_messages: int | None = None
    flush_interval_ms: int | None = None
    retention_ms: int | None = 7 * 24 * 3600 * 1000
    retention_bytes: int | None = None
    max_message_bytes: int = 1_000_012
    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    delete: bool = True
    min_compaction_lag_ms: int = 0
    delete_retention_ms: int = 86_400_000
    producer_id_expiration_ms: int = 86_400_000

    def __post_init__(self) -> None:
        if not 0 < self.segment_bytes <= _MAX_SEGMENT_BYTES:
            raise ConfigError(f"segment_bytes must be in 1..{_MAX_SEGMENT_BYTES}, got {self.segment_bytes}")
        if self.index_interval_bytes < 0:
            raise ConfigError(f"index_interval_bytes must be >= 0, got {self.index_interval_bytes}")
        if self.flush_interval_messages is not None and self.flush_interval_messages <= 0:
            raise ConfigError("flush_interval_messages must be > 0 or None")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ConfigError("flush_interval_ms must be >= 0 or None")
        if self.producer_id_expiration_ms <= 0:
            raise ConfigError("producer_id_expiration_ms must be > 0")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ConfigError("min_cleanable_dirty_ratio must be in [0, 1]")
        if self.min_compaction_lag_ms < 0 or self.delete_retention_ms < 0:
            raise ConfigError("min_compaction_lag_ms and delete_retention_ms must be >= 0")
        if self.max_message_bytes <= 0:
            raise ConfigError("max_message_bytes must be > 0")
