"""The transaction state of one partition's log, as pure functions: which producers have a
transaction open here (and from which offset), the aborted transactions (Kafka's per-segment
``.txnindex``), the last stable offset, and what a ``read_committed`` Fetch is told.

The log calls :func:`check_batch` for each batch a leader is about to append (under the log's
lock, with the producer's epoch and coordinator epoch as the producer state holds them), then
:func:`on_batch` for every batch appended, replicated or replayed at recovery, in offset order;
the returned :class:`CompletedTxn`, if any, is the transaction a marker ended (an aborted one
goes to the ``.txnindex`` of the active segment as an :class:`AbortedTxn`).

Cases of :func:`check_batch` (Kafka's ProducerAppendInfo):

* Case A: no producer id, or an idempotent producer with no transaction open: no check here.
* Case B: a plain (non-transactional) batch from a producer with a transaction open here:
  INVALID_TXN_STATE.
* Case C: a marker older than the producer's epoch: INVALID_PRODUCER_EPOCH (the transaction it
  ends belongs to a fenced producer; the coordinator has sent a newer one).
* Case D: a marker from an older coordinator epoch than the last marker of that producer:
  TRANSACTION_COORDINATOR_FENCED (a deposed coordinator's late marker).

Cases of :func:`on_batch`:

* Case E: a transactional data batch of a producer with no open transaction opens one at its
  base offset; later batches of the same transaction change nothing.
* Case F: a commit/abort marker closes the producer's open transaction, returning it (with the
  last stable offset once it is closed, for the index); a marker of a producer with nothing
  open (an empty transaction, or a retried marker) returns None.
* Case G: anything else changes nothing.

Invariants: the last stable offset never passes the first offset of an open transaction nor
the high watermark; every aborted transaction overlapping [fetch offset, LSO) is reported to a
``read_committed`` fetch, so its reader drops exactly the aborted records; replaying a log from
its start with :func:`on_batch` rebuilds the same state (recovery).

``.txnindex`` layout (Kafka's AbortedTxn, 34 bytes an entry, in last_offset order)::

    version:int16(0) producer_id:int64 first_offset:int64 last_offset:int64 last_stable_offset:int64
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from hmbclient.errors import ErrorCode, StorageError
from hmbclient.protocol.records.control import BatchHeader, EndTxnMarker

__all__ = [
    "AbortedTxn",
    "CompletedTxn",
    "PartitionTxns",
    "INDEX_ENTRY",
    "check_batch",
    "on_batch",
    "first_unstable_offset",
    "last_stable_offset",
    "aborted_transactions",
    "drop_before",
    "replay",
    "encode_index",
    "decode_index",
]

INDEX_ENTRY = struct.Struct(
    ">h"  # version
    "q"  # producer id
    "q"  # first offset
    "q"  # last offset
    "q"  # last stable offset
)
_INDEX_VERSION = 0


class AbortedTxn(NamedTuple):
    """An aborted transaction: its producer, its first record's offset, its abort marker's
    offset, and the last stable offset just after the marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class CompletedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True)
class PartitionTxns:
    """``ongoing``: producer id -> first offset of its open transaction. ``aborted``: the aborted
    transactions still in the log, in marker (``last_offset``) order."""

    ongoing: Mapping[int, int] = field(default_factory=dict)
    aborted: tuple[AbortedTxn, ...] = ()


def check_batch(state: PartitionTxns, hdr: BatchHeader, producer_epoch: int, coordinator_epoch: int, marker: EndTxnMarker | None) -> ErrorCode:
    """Whether a leader may append this batch (see the module's Cases A-D).

    ``producer_epoch``/``coordinator_epoch`` are what the producer state holds for
    ``hdr.producer_id`` (-1 when unknown); ``marker`` is the batch's marker if it is one."""
    pid = hdr.producer_id
    if pid < 0:  # Case A
        return ErrorCode.NONE
    if hdr.is_control:
        if marker is None:
            return ErrorCode.CORRUPT_MESSAGE
        if hdr.producer_epoch < producer_epoch:  # Case C
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if marker.coordinator_epoch < coordinator_epoch:  # Case D
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return ErrorCode.NONE
    if not hdr.is_transactional and pid in state.ongoing:  # Case B
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE  # Case A


def on_batch(state: PartitionTxns, hdr: BatchHeader, marker: EndTxnMarker | None) -> tuple[PartitionTxns, CompletedTxn | None]:
    """The state after one appended batch (Cases E-G), and the transaction it completed."""
    pid = hdr.producer_id
    if pid < 0:  # Case G
        return state, None
    if hdr.is_control:
        if marker is None or pid not in state.ongoing:  # Case F, nothing open
            return state, None
        ongoing = dict(state.ongoing)
        first = ongoing.pop(pid)
        done = CompletedTxn(pid, first, hdr.base_offset, not marker.committed)
        aborted = state.aborted
        if done.aborted:
            lso = min(ongoing.values(), default=hdr.base_offset + 1)
            aborted = (*aborted, AbortedTxn(pid, first, hdr.base_offset, lso))
        return PartitionTxns(ongoing, aborted), done  # Case F
    if hdr.is_transactional and pid not in state.ongoing:  # Case E
        return replace(state, ongoing={**state.ongoing, pid: hdr.base_offset}), None
    return state, None  # Case G


def replay(batches: Iterable[tuple[BatchHeader, EndTxnMarker | None]], state: PartitionTxns | None = None) -> PartitionTxns:
    """Recovery: the state after ``batches`` (in offset order) from ``state`` (empty)."""
    state = state or PartitionTxns()
    for hdr, marker in batches:
        state, _ = on_batch(state, hdr, marker)
    return state


def first_unstable_offset(state: PartitionTxns) -> int | None:
    """The first offset of the oldest open transaction, None when none is open."""
    return min(state.ongoing.values(), default=None)


def last_stable_offset(state: PartitionTxns, high_watermark: int) -> int:
    """How far a ``read_committed`` reader may read: the high watermark, or the first offset
    of the oldest open transaction if that is lower."""
    fuo = first_unstable_offset(state)
    return high_watermark if fuo is None else min(fuo, high_watermark)


def aborted_transactions(state: PartitionTxns, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
    """(producer id, first offset) of every aborted transaction with records in
    [fetch_offset, upper_bound): what a Fetch with isolation_level 1 answers."""
    return [(a.producer_id, a.first_offset) for a in state.aborted if a.last_offset >= fetch_offset and a.first_offset < upper_bound]


def drop_before(state: PartitionTxns, log_start_offset: int) -> PartitionTxns:
    """Retention: forget aborted transactions whose marker is below the new log start."""
    kept = tuple(a for a in state.aborted if a.last_offset >= log_start_offset)
    return state if len(kept) == len(state.aborted) else replace(state, aborted=kept)


def encode_index(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(INDEX_ENTRY.pack(_INDEX_VERSION, *e) for e in entries)


def decode_index(data: Any, name: str = ".txnindex") -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file. StorageError (recovery fails loudly) for a size
    that is not a whole number of entries or an entry of another version."""
    if len(data) % INDEX_ENTRY.size:
        raise StorageError(f"{name}: {len(data)} bytes is not a whole number of {INDEX_ENTRY.size}-byte entries")
    out = []
    for pos in range(0, len(data), INDEX_ENTRY.size):
        version, *fields = INDEX_ENTRY.unpack_from(data, pos)
        if version != _INDEX_VERSION:
            raise StorageError(f"{name}: entry at byte {pos} has version {version}")
        out.append(AbortedTxn(*fields))
    return out
