"""The replica manager's per-partition inputs and answers, shared with the delayed operations.

They live apart from ``replica_manager`` so that ``delayed`` (which builds answers) and the
replica manager (which parks delayed operations) need not import each other.

Per-partition errors are Kafka error codes (:class:`hmbclient.errors.ErrorCode`), never
exceptions: a request touching several partitions answers each one on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from hmbclient.broker.log.segment import FileSlice

__all__ = ["TP", "AppendResult", "FetchInfo", "FetchResult"]

TP = tuple[str, int]


class AppendResult(NamedTuple):
    """One partition's outcome of a produce: the error code, the first offset written and the
    log start offset (-1 for both on error)."""

    error_code: int
    base_offset: int
    log_start_offset: int


class FetchInfo(NamedTuple):
    """One partition of a fetch: where to read from and at most how many bytes."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    #: 1: read_committed (KIP-98): read below the last stable offset only
    isolation_level: int = 0
    #: a follower's log start (Fetch v5+; -1: not said): the leader's low watermark
    log_start_offset: int = -1


class FetchResult(NamedTuple):
    """One partition's fetch answer: records are a file slice (sent with sendfile) or bytes."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    records: FileSlice | bytes
    size: int
    #: the last stable offset (-1: not known, e.g. on error)
    last_stable_offset: int = -1
    #: (producer id, first offset) of the aborted transactions a read_committed reader needs
    aborted: list[tuple[int, int]] | None = None
