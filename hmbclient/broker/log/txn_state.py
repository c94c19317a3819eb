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
* ``segments_changed(bases, log_start, log_end)`` after retention: entries outside the log are
  dropped. ``clear()`` after emptying: no entry, no file.

An entry lives in the index file of the segment holding its marker; when segments change under
it (the log cleaner merges a group into its first segment, retention deletes some), the next
``load`` or ``segments_changed`` moves it to the file of the segment that holds the marker now,
so no aborted transaction is forgotten while its records are in the log.

Invariant: ``state`` equals :func:`~hmbclient.broker.transaction.partition.replay` of the
log's batches from its start (restricted to aborted transactions still in the log).
"""

from __future__ import annotations

import logging
import os
import re
from bisect import bisect_right
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
            if not (b.is_control or b.is_transactional or b.producer_id in state.ongoing):
                continue  # an idempotent batch, no transaction here: nothing to check (the hot path)
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

    def _files(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except OSError as e:
            raise StorageError(f"cannot list {self.directory}: {e}") from e
        return sorted(int(m.group(1)) for m in map(TXN_INDEX_FILE.match, names) if m)

    def _regroup(self, bases: list[int], entries: Iterable[txnp.AbortedTxn], files: Iterable[int]) -> None:
        """Keep ``entries`` in the index file of the segment holding each one's marker (the
        log cleaner merges segments, retention and truncation drop them: an entry outlives the
        file it was written to), rewriting only the files that change."""
        index: dict[int, list[txnp.AbortedTxn]] = {}
        for a in sorted(set(entries), key=lambda a: a.last_offset):
            i = bisect_right(bases, a.last_offset) - 1
            index.setdefault(bases[max(i, 0)], []).append(a)
        for base in set(files) | set(self._index) | set(index):
            want = index.get(base, [])
            if want != self._index.get(base, []):
                self._rewrite(base, want)
        self._index = index

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
        files = self._files()
        cut = min(replay_start, log_end)
        start = bases[0] if bases else 0
        self._index = {base: self._read(base) for base in files}  # what the files hold
        entries = [a for held in self._index.values() for a in held if start <= a.last_offset < cut]
        # the replay's markers: rebuilt with the open transactions they did not close
        for pid, first, last, was_aborted in replayed:
            if was_aborted and last < log_end:
                others = [f for p, f in open_txns.items() if p != pid and f < last]
                entries.append(txnp.AbortedTxn(pid, first, last, min(others, default=last + 1)))
        self._regroup(bases, entries, files)
        in_log = tuple(a for b in bases for a in self._index.get(b, ()))
        self.state = txnp.PartitionTxns(open_txns, in_log)
        if open_txns or in_log:
            log.info("%s: %d open transactions, %d aborted in the log", self.directory, len(open_txns), len(in_log))

    def segments_changed(self, bases: Iterable[int], log_start: int, log_end: int) -> None:
        """Retention, truncation or emptying: forget what went with the segments."""
        state = txnp.drop_before(self.state, log_start)
        aborted = tuple(a for a in state.aborted if a.last_offset < log_end)
        ongoing = {p: f for p, f in state.ongoing.items() if f < log_end}
        self.state = txnp.PartitionTxns(ongoing, aborted)
        self._regroup(list(bases), aborted, [])

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

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether ``offset`` of ``producer_id`` is in one of its aborted transactions."""
        return any(a.producer_id == producer_id and a.first_offset <= offset <= a.last_offset for a in self.state.aborted)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        return txnp.aborted_transactions(self.state, fetch_offset, upper_bound)
