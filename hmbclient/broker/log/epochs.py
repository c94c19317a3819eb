"""LeaderEpochCache: which leader epoch started at which offset (KIP-101), per partition.

Every RecordBatch v2 carries the epoch of the leader that appended it (``partitionLeaderEpoch``).
The cache keeps one ``(epoch, start_offset)`` entry per epoch that wrote data: the offset of the
first batch of that epoch. A follower that lost its place (restart, leader change) asks the
leader ``OffsetsForLeaderEpoch(its latest epoch)`` and truncates to the answer instead of to its
high watermark, which is what lets a replica keep messages the high watermark did not cover yet
and never keep a tail the new leader does not have.

Invariants: entries are strictly increasing in epoch and non-decreasing in start offset; an
epoch below 0 (``NO_PARTITION_LEADER_EPOCH``, -1) is never stored. Every change is written
before it is visible, atomically, through ``CheckpointFile`` (``leader-epoch-checkpoint``, lines
``epoch start_offset``), so a process crash (``kill -9``) never takes an entry away.

Durability against a machine crash is deferred (``dirty`` until ``flush``): a change is fsynced
only when the Log is about to write bytes that need it (``Log`` calls ``flush`` before every
append while ``dirty``, and at close). Why: a leader election assigns a new epoch to every
partition it moves (1,000 partitions of a new topic: 1,000 checkpoint writes), and two fsyncs
each cost seconds in all; most of those entries are followed by no data for a while. What a
machine crash can then lose is harmless, because the Log's start-up repairs it: an entry for an
epoch that wrote nothing yet (dropped: the next election assigns a newer one anyway), an entry
already truncated away (``truncate_from_end(log end)`` at start-up drops it again) or already
retained away (``truncate_from_start(log start)``). An entry describing bytes on disk is always
durable before those bytes are written.

The truncations a start-up makes (``defer_write=True``) are not even written: start-up makes
them again after any crash, as long as no log bytes were appended after them, and ``flush``
(before any append) writes them. So a restart whose leaders wrote nothing in their last epoch
(every such entry starts at the log end and is dropped) costs no checkpoint write per partition.

Pure logic over a file: no broker, no log. The Log calls ``assign`` when it appends v2 batches,
``truncate_from_end`` when it truncates, ``truncate_from_start`` when retention moves the log
start, and ``clear`` when a legacy (v0/v1) entry is appended -- those carry no epoch, so after
one the cache cannot describe the log any more and Kafka's rule applies: forget every epoch and
let the follower fall back to truncating to its high watermark. Thread-safe (one lock); the
Log's own lock already serialises the writers.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import NamedTuple

from hmbclient.broker.log.checkpoint import EPOCH_ENTRY_FORMAT, CheckpointFile
from hmbclient.errors import StorageError

__all__ = ["LeaderEpochCache", "EpochEntry", "LEADER_EPOCH_CHECKPOINT", "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET"]

log = logging.getLogger("hmbclient.broker.log")

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# OffsetsForLeaderEpoch's "no answer": the follower then truncates to its high watermark.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """The epoch -> start offset entries of one partition, persisted in ``path``.

    Attributes (read-only):
        latest_epoch: the newest epoch that wrote data, -1 (``UNDEFINED_EPOCH``) if none.
        latest_start_offset: the start offset of that epoch, -1 if none.

    Args:
        path: the checkpoint file, normally ``<partition folder>/leader-epoch-checkpoint``; a
            folder is taken to mean that file inside it.
    Raises:
        StorageError: the checkpoint exists but is malformed, or its entries are not increasing.
    """

    def __init__(self, path: str) -> None:
        if os.path.isdir(path):
            path = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
        self.path = path
        self._file = CheckpointFile(path, EPOCH_ENTRY_FORMAT)
        self._lock = threading.RLock()
        entries = [EpochEntry(e, s) for e, s in self._file.read()]
        for prev, cur in zip(entries, entries[1:], strict=False):
            if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
                raise StorageError(f"{path}: entries are not increasing at {prev} -> {cur}")
        if entries and (entries[0].epoch < 0 or entries[0].start_offset < 0):
            raise StorageError(f"{path}: negative epoch or offset in {entries[0]}")
        self._entries: tuple[EpochEntry, ...] = ()
        # True while the file lacks a change, or holds one not fsynced yet (module docstring);
        # ``_unwritten``: the file lacks one (only start-up truncations are left unwritten).
        self.dirty = False
        self._unwritten = False
        self.latest_epoch = UNDEFINED_EPOCH
        self.latest_start_offset = UNDEFINED_EPOCH_OFFSET
        self._set(tuple(entries))

    # -- reads -----------------------------------------------------------------------------
    def entries(self) -> list[EpochEntry]:
        """Every entry, oldest epoch first."""
        return list(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """The OffsetsForLeaderEpoch answer for ``requested_epoch``: ``(epoch, end_offset)``.

        * the latest epoch itself: ``(latest_epoch, log_end_offset)`` (it is still being written);
        * an older epoch: the largest known epoch ``e <= requested_epoch`` and the start offset of
          the first epoch after ``e`` (where ``e``'s data ends);
        * a negative epoch, one above the latest, one below every known epoch, or an empty
          cache: ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` = (-1, -1), and the follower falls
          back to its high watermark. (Below every known epoch is KIP-101's answer; later Kafka
          versions answer ``(requested, first start offset)`` there, which is only safe when
          every entry of the log is RecordBatch v2.)
        """
        entries = self._entries
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch < 0 or not entries:
            return undefined
        latest = entries[-1].epoch
        if requested_epoch == latest:
            return latest, log_end_offset
        if requested_epoch > latest or requested_epoch < entries[0].epoch:
            return undefined
        # Largest index whose epoch is <= requested (entries[0].epoch <= requested < latest).
        lo, hi = 0, len(entries) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if entries[mid].epoch <= requested_epoch:
                lo = mid
            else:
                hi = mid - 1
        return entries[lo].epoch, entries[lo + 1].start_offset

    # -- writes ----------------------------------------------------------------------------
    def _set(self, entries: tuple[EpochEntry, ...]) -> None:
        self._entries = entries
        # Plain attributes, not properties: the leader's append compares with latest_epoch on
        # every produce.
        self.latest_epoch = entries[-1].epoch if entries else UNDEFINED_EPOCH
        self.latest_start_offset = entries[-1].start_offset if entries else UNDEFINED_EPOCH_OFFSET

    def _publish(self, entries: tuple[EpochEntry, ...], *, defer_write: bool = False) -> None:
        if defer_write:
            # Case: a start-up truncation, which the next start-up redoes: memory only.
            self._unwritten = True
        else:
            # Written first: readers only ever see what survives a process crash; ``flush``
            # makes it survive a machine crash before the log relies on it.
            self._file.write(entries, sync=False)
            self._unwritten = False
        self.dirty = True
        self._set(entries)

    def flush(self) -> None:
        """fsync the checkpoint if a change is not durable yet (the Log, before it writes log
        bytes, and at close).

        Raises:
            StorageError: the fsync failed (the cache stays dirty).
        """
        if not self.dirty:
            return
        with self._lock:
            if self._unwritten:
                self._file.write(self._entries)
                self._unwritten = False
            elif self.dirty:
                self._file.sync()
            self.dirty = False

    def flush_written(self) -> None:
        """``flush`` what was written, leave start-up truncations unwritten (a clean close: the
        next start-up makes them again).

        Raises:
            StorageError: the fsync failed.
        """
        if self.dirty and not self._unwritten:
            self.flush()

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        Ignored when ``epoch`` is not newer than the latest epoch, when ``start_offset`` is below
        the latest start offset, or when either is negative. A new epoch starting at the same
        offset as the latest one replaces it: the older epoch wrote nothing (Kafka does the same).

        Raises:
            StorageError: the checkpoint could not be written (the cache is unchanged).
        """
        if epoch < 0 or start_offset < 0:
            return False
        with self._lock:
            entries = self._entries
            if entries:
                last = entries[-1]
                if epoch <= last.epoch or start_offset < last.start_offset:
                    return False
                if start_offset == last.start_offset:
                    entries = entries[:-1]
            self._publish((*entries, EpochEntry(epoch, start_offset)))
        log.debug("%s: epoch %d starts at offset %d", self.path, epoch, start_offset)
        return True

    def truncate_from_end(self, end_offset: int, *, defer_write: bool = False) -> bool:
        """Drop the entries whose start offset is >= ``end_offset`` (the log was truncated to
        ``end_offset``); True if any was dropped. ``defer_write``: a start-up's truncation, left
        unwritten until ``flush`` (see the module docstring)."""
        with self._lock:
            entries = self._entries
            keep = len(entries)
            while keep and entries[keep - 1].start_offset >= end_offset:
                keep -= 1
            if keep == len(entries):
                return False
            self._publish(entries[:keep], defer_write=defer_write)
        return True

    def truncate_from_start(self, start_offset: int, *, defer_write: bool = False) -> bool:
        """The log now starts at ``start_offset`` (retention): drop entries that end at or before
        it and move the start of the epoch covering it up to ``start_offset``; True if changed.
        An entry starting exactly at ``start_offset`` is kept as it is. ``defer_write`` as for
        ``truncate_from_end``."""
        with self._lock:
            entries = self._entries
            i = 0
            while i < len(entries) and entries[i].start_offset <= start_offset:
                i += 1
            if i == 0 or (i == 1 and entries[0].start_offset == start_offset):
                return False
            first = EpochEntry(entries[i - 1].epoch, start_offset)
            self._publish((first, *entries[i:]), defer_write=defer_write)
        return True

    def clear(self) -> bool:
        """Forget every entry (a legacy entry was appended, or the log was emptied); True if
        there was any."""
        with self._lock:
            if not self._entries:
                return False
            self._publish(())
        return True

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path!r}, {list(self._entries)})"
