"""Transactional offset commits (TxnOffsetCommit, KIP-98) on the group coordinator's side, as
pure functions: offsets a producer commits inside a transaction stay *pending* until its
transaction's marker reaches the group's ``__consumer_offsets`` partition; a commit marker makes
them the group's committed offsets, an abort marker drops them. Kafka's GroupMetadata
(prepareTxnOffsetCommit, onTxnOffsetCommitAppend, failPendingTxnOffsetCommit,
completePendingTxnOffsetCommit) in our nouns.

The offsets are written to ``__consumer_offsets`` as ordinary offset-commit records, but in a
transactional batch of the producer (so the partition's marker completes them); ``log_offset``
is where such a record landed. What wins is log order: a committed transaction's offset
replaces the group's committed offset only if it was appended after it (a plain OffsetCommit
appended later stays), as in Kafka.

Cases:

* Case A (:func:`prepare`): TxnOffsetCommit accepted: its offsets pend for the producer, with no
  log offset yet (the append is under way).
* Case B (:func:`appended`): the append succeeded: the pending offsets learn their log offset.
* Case C (:func:`failed`): the append failed: the pending offsets of that request are dropped.
* Case D (:func:`complete`, commit): every pending offset of the producer that was appended
  (has a log offset) and is newer in the log than the committed one becomes committed.
* Case E (:func:`complete`, abort): the producer's pending offsets are dropped.

Invariants: a pending offset is never visible to OffsetFetch (only :func:`has_pending` is, for
``require_stable`` fetches: UNSTABLE_OFFSET_COMMIT); completing a producer leaves nothing of it
pending; replaying the offsets partition (:func:`replay`) gives the same committed and pending
offsets as the live sequence that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "Committed",
    "GroupTxnOffsets",
    "prepare",
    "appended",
    "failed",
    "complete",
    "has_pending",
    "pending_producers",
    "replay",
]

TopicPartition = tuple[str, int]


class Committed(NamedTuple):
    """An offset and where its record is in ``__consumer_offsets`` (None: not appended yet)."""

    value: Any
    log_offset: int | None


@dataclass(frozen=True)
class GroupTxnOffsets:
    """One group's pending transactional offsets: producer id -> partition -> offset."""

    pending: Mapping[int, Mapping[TopicPartition, Committed]] = field(default_factory=dict)


def prepare(state: GroupTxnOffsets, producer_id: int, offsets: Mapping[TopicPartition, Any]) -> GroupTxnOffsets:
    """Case A."""
    mine = {**state.pending.get(producer_id, {}), **{tp: Committed(v, None) for tp, v in offsets.items()}}
    return GroupTxnOffsets({**state.pending, producer_id: mine})


def appended(state: GroupTxnOffsets, producer_id: int, partitions: Iterable[TopicPartition], log_offset: int) -> GroupTxnOffsets:
    """Case B: the records of ``partitions`` were appended at ``log_offset`` (one batch)."""
    mine = dict(state.pending.get(producer_id, {}))
    for tp in partitions:
        if tp in mine:
            mine[tp] = Committed(mine[tp].value, log_offset)
    return GroupTxnOffsets({**state.pending, producer_id: mine})


def failed(state: GroupTxnOffsets, producer_id: int, partitions: Iterable[TopicPartition]) -> GroupTxnOffsets:
    """Case C: only entries still waiting for their append are dropped (an entry already
    appended by an earlier request of the same transaction stays)."""
    mine = dict(state.pending.get(producer_id, {}))
    for tp in partitions:
        if tp in mine and mine[tp].log_offset is None:
            del mine[tp]
    pending = {**state.pending, producer_id: mine}
    if not mine:
        del pending[producer_id]
    return GroupTxnOffsets(pending)


def complete(
    state: GroupTxnOffsets, producer_id: int, committed: bool, current: Mapping[TopicPartition, Committed]
) -> tuple[GroupTxnOffsets, dict[TopicPartition, Committed]]:
    """Cases D and E: the producer's marker reached the offsets partition. Returns the state
    without the producer and the offsets to make committed (empty on abort)."""
    mine = state.pending.get(producer_id)
    if mine is None:
        return state, {}
    pending = {pid: offs for pid, offs in state.pending.items() if pid != producer_id}
    out: dict[TopicPartition, Committed] = {}
    if committed:  # Case D
        for tp, entry in mine.items():
            if entry.log_offset is None:
                continue
            have = current.get(tp)
            if have is None or have.log_offset is None or have.log_offset < entry.log_offset:
                out[tp] = entry
    return GroupTxnOffsets(pending), out  # Case E: nothing to commit


def has_pending(state: GroupTxnOffsets, tp: TopicPartition) -> bool:
    """Some producer has an offset of ``tp`` pending (OffsetFetch require_stable answers
    UNSTABLE_OFFSET_COMMIT for it)."""
    return any(tp in offs for offs in state.pending.values())


def pending_producers(state: GroupTxnOffsets) -> set[int]:
    return {pid for pid, offs in state.pending.items() if offs}


def replay(
    entries: Iterable[tuple[int, bool, Any]],
    committed: Mapping[TopicPartition, Committed] | None = None,
) -> tuple[dict[TopicPartition, Committed], GroupTxnOffsets]:
    """A group's offsets from its ``__consumer_offsets`` records in log order (loading).

    ``entries`` are ``(log_offset, transactional, item)`` where ``item`` is
    ``("offset", producer_id, tp, value)`` (value None: a tombstone) or
    ``("marker", producer_id, committed)``. Plain commits apply at once; transactional ones pend
    until their producer's marker.
    """
    done: dict[TopicPartition, Committed] = dict(committed or {})
    state = GroupTxnOffsets()
    for log_offset, transactional, item in entries:
        if item[0] == "marker":
            _, pid, ok = item
            state, won = complete(state, pid, ok, done)
            done.update(won)
            continue
        _, pid, tp, value = item
        if transactional and pid >= 0:
            state = appended(prepare(state, pid, {tp: value}), pid, [tp], log_offset)
        elif value is None:
            done.pop(tp, None)
        else:
            done[tp] = Committed(value, log_offset)
    return done, state
