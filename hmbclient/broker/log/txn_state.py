"""A partition log's transaction state (KIP-98): the I/O shell of
:mod:`hmbclient.broker.transaction.partition` for one :class:`~hmbclient.broker.log.log.Log`.

It holds the partition's :class:`~hmbclient.broker.transaction.partition.PartitionTxns` (open
transactions per producer, aborted transactions) and the aborted-transaction index files,
``<segment base:020d>.txnindex`` beside each segment that holds an abort marker (Kafka's
layout, see :mod:`~hmbclient.broker.transaction.partition`). The log calls it at few points,
always under its lock:

* ``check(batches)`` before a leader's append: a control batch a client wrote is refused
  (INVALID_RECORD, as Kafka's "Clients are not allowed to write control records") unless the
  append comes from WriteTxnMarkers; a plain batch of a producer with a transaction open is
  INVALID_TXN_STATE; a marker of a deposed coordinator is TRANSACTION_COORDINATOR_FENCED
  (:func:`~hmbclient.broker.transaction.partition.check_batch`).
* ``appended(batches, segment_base)`` after every append (leader, follower): open
  transactions start and end; an aborted one is added to the index of the segment its marker
  went to.
* ``load(...)`` at start-up and after a truncation: the open transactions come from the
  producer state (whose entries keep each producer's open transaction and whose rebuild replays
  the markers after its snapshot); the aborted ones from the ``.txnindex`` files below the
  replay's start plus the ones the replay closed (the index files are rewritten so, which also
  drops entries of a tail a crash or a truncation cut).
* ``segments_changed(bases, log_end)`` after retention, truncation or emptying: index files of
  segments that are gone are deleted, entries past the log end dropped.

Invariant: ``state`` equals :func:`~hmbclient.broker.transaction.partition.replay` of the
log's batches from its start (restricted to aborted transactions still in the log).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable

from hmbclient.broker.log.producer_state import BatchHeader as PsBatch
from hmbclient.broker.transaction import partition as txnp
from hmbclient.errors import ErrorCode, StorageError, for_code
from hmbclient.protocol.records.control import BatchHeader, ControlType, EndTxnMarker

__all__ = ["TXN_INDEX_SUFFIX", "TXN_INDEX_FILE", "LogTxnState"]

log = logging.getLogger("hmbclient.broker.log.txn_state")

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_FILE = re.compile(r"^(\d{20})\.txnindex$")


def _header(b: PsBatch) -> tuple[BatchHeader, EndTxnMarker | None]:
    attrs = (0x10 if b.is_transactional else 0) | (0x20 if b.is_control else 0)
    hdr = BatchHeader(b.first_offset, b.last_offset, -1, attrs, b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence, 0)
    marker = EndTxnMarker(ControlType(b.control_type), b.coordinator_epoch) if b.is_control and b.control_type in (0, 1) else None
    return hdr, marker


class LogTxnState:
    """The transaction state of the log in ``directory`` (not thread-safe: the log's lock)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.state = txnp.PartitionTxns()
        #: segment base -> its aborted transactions (what its .txnindex holds)
        self._index: dict[int, list[txnp.AbortedTxn]] = {}

    # -- files ---------------------------------------------------------------------------------
    def _path(self, base: int) -> str:
        return os.path.join(self.directory, f"{base:020d}{TXN_INDEX_SUFFIX}")

    def _read(self, base: int) -> list[txnp.AbortedTxn]:
        path = self._path(base)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e}") from e
        return txnp.decode_index(data, path)

    def _rewrite(self, base: int, entries: list[txnp.AbortedTxn]) -> None:
        path = self._path(base)
        try:
            if not entries:
                if os.path.exists(path):
                    os.unlink(path)
                return
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(txnp.encode_index(entries))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise StorageError(f"cannot write {path}: {e}") from e

    def _add(self, base: int, entry: txnp.AbortedTxn) -> None:
        path = self._path(base)
        try:
            with open(path, "ab") as f:
                f.write(txnp.encode_index([entry]))
        except OSError as e:
            raise StorageError(f"cannot append to {path}: {e}") from e
        self._index.setdefault(base, []).append(entry)

    def flush(self) -> None:
        """fsync the index files (a roll seals a segment, a close ends the log)."""
        for base in self._index:
            path = self._path(base)
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise StorageError(f"cannot open {path}: {e}") from e
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # -- the log's calls -----------------------------------------------------------------------
    def check(self, batches: Iterable[PsBatch], producers: dict, *, markers: bool) -> None:
        """A leader's append of ``batches`` (Cases in the module docstring).

        Raises:
            BrokerError: INVALID_RECORD, INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH or
                TRANSACTION_COORDINATOR_FENCED (nothing may be written).
        """
        state = self.state
        for b in batches:
            if b.is_control and not markers:
                raise for_code(ErrorCode.INVALID_RECORD)("clients are not allowed to write control records")
            entry = producers.get(b.producer_id)
            hdr, marker = _header(b)
            code = txnp.check_batch(
                state, hdr, -1 if entry is None else entry.epoch, -1 if entry is None else entry.coordinator_epoch, marker
            )
            if code != ErrorCode.NONE:
                raise for_code(code)(f"producer {b.producer_id} at offset {b.first_offset}: {ErrorCode(code).name}")
            state, _ = txnp.on_batch(state, hdr, marker)

    def appended(self, batches: Iterable[PsBatch], segment_base: int) -> None:
        """Batches written to the segment at ``segment_base``, in offset order."""
        state = self.state
        for b in batches:
            if not (b.is_transactional or b.is_control or b.producer_id in state.ongoing):
                continue
            before = len(state.aborted)
            state, _ = txnp.on_batch(state, *_header(b))
            if len(state.aborted) > before:
                self._add(segment_base, state.aborted[-1])
        self.state = state

    def load(self, bases: list[int], open_txns: dict[int, int], replay_start: int, replayed: list[tuple[int, int, int, bool]], log_end: int) -> None:
        """Rebuild after start-up or a truncation.

        Args:
            bases: the segments' base offsets, in order.
            open_txns: the producer state's open transactions (producer id -> first offset).
            replay_start: where the producer state's replay started: index entries at or past
                it are replaced by ``replayed``.
            replayed: (producer id, first offset, marker offset, aborted) the replay closed.
            log_end: the log end offset.
        """
        known = set(bases)
        try:
            names = os.listdir(self.directory)
        except OSError as e:
            raise StorageError(f"cannot list {self.directory}: {e}") from e
        for name in names:
            m = TXN_INDEX_FILE.match(name)
            if m and int(m.group(1)) not in known:
                self._rewrite(int(m.group(1)), [])  # a segment that is gone
        index: dict[int, list[txnp.AbortedTxn]] = {}
        for base in bases:
            entries = self._read(base)
            if entries:
                index[base] = entries
        # the replay's markers: rebuilt with the open transactions they did not close
        redo: list[txnp.AbortedTxn] = []
        ongoing = dict(open_txns)
        for pid, first, last, was_aborted in replayed:
            if was_aborted and last < log_end:
                others = [f for p, f in ongoing.items() if p != pid and f < last]
                redo.append(txnp.AbortedTxn(pid, first, last, min(others, default=last + 1)))
        cut = min(replay_start, log_end)
        changed: set[int] = set()
        for base, entries in list(index.items()):
            kept = [e for e in entries if e.last_offset < cut]
            if len(kept) != len(entries):
                index[base] = kept
                changed.add(base)
        for a in redo:
            i = max((b for b in bases if b <= a.last_offset), default=bases[0])
            index.setdefault(i, []).append(a)
            changed.add(i)
        for base in changed:
            index[base].sort(key=lambda a: a.last_offset)
            self._rewrite(base, index[base])
        self._index = {b: v for b, v in index.items() if v}
        in_log = tuple(a for b in bases for a in self._index.get(b, ()))
        self.state = txnp.PartitionTxns(open_txns, in_log)
        if open_txns or in_log:
            log.info("%s: %d open transactions, %d aborted in the log", self.directory, len(open_txns), len(in_log))

    def segments_changed(self, bases: Iterable[int], log_start: int, log_end: int) -> None:
        """Retention, truncation or emptying: forget what went with the segments."""
        known = set(bases)
        for base in [b for b in self._index if b not in known]:
            self._rewrite(base, [])
            del self._index[base]
        for base, entries in list(self._index.items()):
            kept = [e for e in entries if e.last_offset < log_end]
            if len(kept) != len(entries):
                self._rewrite(base, kept)
                self._index[base] = kept
        state = txnp.drop_before(self.state, log_start)
        aborted = tuple(a for a in state.aborted if a.last_offset < log_end)
        ongoing = {p: f for p, f in state.ongoing.items() if f < log_end}
        self.state = txnp.PartitionTxns(ongoing, aborted)

    def clear(self) -> None:
        """The log was emptied: no state, no index file."""
        try:
            names = os.listdir(self.directory)
        except OSError as e:
            raise StorageError(f"cannot list {self.directory}: {e}") from e
        for name in names:
            m = TXN_INDEX_FILE.match(name)
            if m:
                self._rewrite(int(m.group(1)), [])
        self._index = {}
        self.state = txnp.PartitionTxns()

    # -- queries -------------------------------------------------------------------------------
    def last_stable_offset(self, high_watermark: int) -> int:
        return txnp.last_stable_offset(self.state, high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        return txnp.aborted_transactions(self.state, fetch_offset, upper_bound)
