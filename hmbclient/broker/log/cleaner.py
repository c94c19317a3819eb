"""Log compaction (``cleanup.policy=compact``): the cleaner threads, their decisions, the swap.

Model: Kafka's LogCleaner. Every log whose config says ``compact`` has a *first dirty offset*
(``cleaner-offset-checkpoint`` in the data directory, ``topic partition offset`` per line; the
log start when absent): below it the log was cleaned, from it on it is dirty.

Decisions (pure functions of state, below; the thread only does the I/O):

* ``cleanable_end``: the first offset a pass may not touch. A segment is cleanable when it is
  not the active one, all of it is below the high watermark (uncommitted data may still be
  truncated), and its newest timestamp is older than ``min.compaction.lag.ms``; the range stops
  at the first segment that is not.
* ``dirty_ratio``: dirty bytes / (clean + dirty bytes) of the cleanable range. ``choose_log``
  picks the log with the highest ratio among those at or above their
  ``min.cleanable.dirty.ratio`` and not being cleaned by another thread.
* ``record_survives``: the offset map holds the newest offset of each key in the dirty range
  (capped by ``log.cleaner.dedupe.buffer.size``: the dirty range then ends at the segment that
  filled it, the rest waits for the next pass). A record survives unless a newer record of its
  key is in the map; a record without a key always survives. A tombstone (null value) survives
  too, unless ``tombstone_droppable``: its segment was already clean before this pass and was
  last written more than ``delete.retention.ms`` ago (the rewrite keeps the newest mtime of the
  segments it replaces, so a tombstone lasts at least that long after its write, and at least
  one pass). A consumer that reads a compacted topic from the start within
  ``delete.retention.ms`` thus sees every delete.
* ``group_segments``: consecutive segments of the range are rewritten together while their
  total size fits ``segment.bytes`` and their offsets fit one index (int32 relative offsets).
* Control batches (transaction markers) are kept as they are: ``retain_control_batch`` is the
  hook for the transaction work (Kafka drops a marker once no data of its transaction is left,
  and drops aborted transactional records: not done here, see the note there). Transactions
  (KIP-98) bound a pass by the last stable offset instead of the high watermark, and the
  records of aborted transactions are left out of the offset map (they supersede nothing).

Rewriting a batch: a v2 batch whose records all survive is copied byte for byte; one that loses
every record is dropped (our producer state is rebuilt from snapshots and the active segment,
which is never cleaned, so no empty batch is needed to remember a producer); otherwise its
survivors are encoded in one batch with the same codec, attributes, producer id and epoch,
leader epoch, their own offsets and timestamps, and the base sequence moved by as many offsets
as the first survivor is past the old base (so the sequence of each record is unchanged).
Legacy v0/v1 entries keep their format (each survivor its own message). Offsets never change;
a consumer sees gaps.

The swap (I/O at the edge, crash-safe): a group is written to ``<first base>.log.cleaned`` and
fsynced. Then, under the log's lock (``Log.replace_segments``), if the group is still in the
log unchanged: the file is renamed to ``<first base>.<group next offset>.log.swap`` (the commit
point; the name says which offsets it replaces), the old segments are deleted with retention's
rule (retired first, then unlinked: a reader or a queued ``sendfile`` holding a handle keeps
reading the old file, a reader without one retries on the new segments), and the swap file is
renamed to ``<first base>.log``; its index is rebuilt. ``complete_interrupted_cleaning``, run at
the start of every ``Log`` load, finishes what a crash interrupted: a ``.cleaned`` file is
deleted (the originals are intact), a ``.swap`` file deletes every segment file in its range
and takes its place (the cleaned data is complete). So a kill -9 at any point loses nothing.

Known differences from Kafka: records without a key are accepted and kept (Kafka refuses them
on a compacted topic); a truncation below a log's first dirty offset (a follower after an
unclean election) does not move the checkpoint back, so the records between are treated as
clean: a newer record of their key still removes them, but they remove no older one, which
costs space, never a record (the offset map only removes records older than one it holds).

``log.cleaner.io.max.bytes.per.second`` throttles the bytes a thread reads and writes (as
Kafka's); tests use it to hold a pass open.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from hmbclient.broker.log.checkpoint import HW_ENTRY_FORMAT, CheckpointFile, fsync_dir
from hmbclient.broker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, Segment, segment_file_name
from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.errors import StorageError
from hmbclient.protocol import records
from hmbclient.protocol.records import control
from hmbclient.protocol.records import v2 as _v2
from hmbclient.protocol.records.base import CODEC_MASK, Entry, Record

# ``Log`` and ``LogManager`` import this module: they are typed ``Any`` here (no import cycle).
Log = Any
LogManager = Any

__all__ = [
    "CLEANER_CHECKPOINT",
    "CleanerSettings",
    "LogCleaner",
    "SegmentInfo",
    "clean_log",
    "cleanable_end",
    "choose_log",
    "complete_interrupted_cleaning",
    "dirty_ratio",
    "group_segments",
    "record_survives",
    "tombstone_droppable",
]

log = logging.getLogger("hmbclient.broker.log.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_CLEANED_FILE = re.compile(r"^(\d{20})\.log\.cleaned$")
_SWAP_FILE = re.compile(r"^(\d{20})\.(\d{20})\.log\.swap$")
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index)$")
_MAX_INDEX_SPAN = 2**31 - 1
_READ_CHUNK = 8 * 1024 * 1024
# Bytes of memory one offset-map entry is counted for (Kafka's map: a 16-byte hash + an 8-byte
# offset); ``log.cleaner.dedupe.buffer.size`` / this = the most keys one pass maps.
MAP_ENTRY_BYTES = 24


# -- decisions -------------------------------------------------------------------------------------
class SegmentInfo(NamedTuple):
    base_offset: int
    next_offset: int
    size: int
    mtime_ms: int
    max_timestamp: int


def cleanable_end(segs: Sequence[SegmentInfo], high_watermark: int, now_ms: int, min_lag_ms: int) -> int:
    """The first offset a pass may not clean: the base of the first segment that is the active
    one, reaches the high watermark, or holds a record newer than ``min_lag_ms``."""
    for s in segs[:-1]:
        if s.next_offset > high_watermark or (min_lag_ms > 0 and s.max_timestamp > now_ms - min_lag_ms):
            return s.base_offset
    return segs[-1].base_offset


def dirty_ratio(segs: Sequence[SegmentInfo], first_dirty: int, end: int) -> tuple[int, int, float]:
    """``(clean bytes, dirty bytes, dirty / (clean + dirty))`` of the segments below ``end``; a
    segment is dirty when it holds an offset at or past ``first_dirty``."""
    clean = dirty = 0
    for s in segs:
        if s.next_offset > end or s.base_offset >= end:
            break
        if s.next_offset <= first_dirty:
            clean += s.size
        else:
            dirty += s.size
    total = clean + dirty
    return clean, dirty, (dirty / total if total else 0.0)


def choose_log(candidates: Sequence[tuple[Any, float, float]], busy: set[Any] | frozenset[Any] = frozenset()) -> Any:
    """The key of the dirtiest candidate ``(key, ratio, min ratio)`` whose ratio reaches its min
    and that is not ``busy``; None if none. Ties go to the first listed."""
    best, best_ratio = None, -1.0
    for key, ratio, min_ratio in candidates:
        if key in busy or ratio <= 0.0 or ratio < min_ratio:
            continue
        if ratio > best_ratio:
            best, best_ratio = key, ratio
    return best


def group_segments(segs: Sequence[SegmentInfo], max_bytes: int) -> list[list[int]]:
    """Indexes of ``segs`` in groups rewritten together: consecutive, total size <= ``max_bytes``
    (a bigger segment alone), offsets spanning less than an int32 index can address."""
    groups: list[list[int]] = []
    cur: list[int] = []
    size = 0
    for i, s in enumerate(segs):
        if cur and (size + s.size > max_bytes or s.next_offset - segs[cur[0]].base_offset > _MAX_INDEX_SPAN):
            groups.append(cur)
            cur, size = [], 0
        cur.append(i)
        size += s.size
    if cur:
        groups.append(cur)
    return groups


def tombstone_droppable(seg: SegmentInfo, first_dirty: int, now_ms: int, delete_retention_ms: int) -> bool:
    """Tombstones of ``seg`` may go: it was clean before this pass and last written more than
    ``delete_retention_ms`` ago."""
    return seg.next_offset <= first_dirty and now_ms - seg.mtime_ms > delete_retention_ms


def record_survives(offset: int, key: bytes | None, value: bytes | None, latest: Mapping[bytes, int], drop_tombstones: bool) -> bool:
    """Whether a record is kept (see the module docstring)."""
    if key is None:
        return True
    newest = latest.get(key)
    if newest is not None and offset < newest:
        return False
    return not (value is None and drop_tombstones)


def retain_control_batch(header: control.BatchHeader) -> bool:
    """Whether a control batch (a transaction marker) is kept: always, for now.

    Hook for the transaction work: Kafka removes a marker once the cleaner has removed every
    record of its transaction (and past ``delete.retention.ms``), and removes the records of
    aborted transactions (it tracks the aborted ones from the markers as it reads the log).
    Until that lands, markers and aborted records are kept, which is safe: readers filter them.
    """
    return True


# -- the settings a pass needs ---------------------------------------------------------------------
class CleanerSettings(NamedTuple):
    threads: int = 1
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_max_bytes_per_second: float = float("inf")


class CleanResult(NamedTuple):
    first_dirty: int  # the new first dirty offset (the end of the range cleaned)
    dropped: int  # records removed
    bytes_read: int
    bytes_written: int


class _Throttle:
    def __init__(self, rate: float, stop: threading.Event | None) -> None:
        self.rate = rate
        self.stop = stop
        self.start = monotonic_ms()
        self.done = 0

    def __call__(self, n: int) -> None:
        """Account ``n`` bytes of I/O; sleep as long as the rate asks. Raises _Stopped."""
        self.done += n
        if self.rate == float("inf") or self.rate <= 0:
            if self.stop is not None and self.stop.is_set():
                raise _Stopped
            return
        ahead_s = self.done / self.rate - (monotonic_ms() - self.start) / 1000.0
        if ahead_s > 0:
            if self.stop is not None:
                if self.stop.wait(ahead_s):
                    raise _Stopped
            else:
                time.sleep(ahead_s)
        elif self.stop is not None and self.stop.is_set():
            raise _Stopped


class _Stopped(Exception):
    """The cleaner is stopping: the pass is abandoned (nothing was swapped in for its group)."""


# -- I/O ---------------------------------------------------------------------------------------------
def _info(seg: Segment) -> SegmentInfo:
    return SegmentInfo(seg.base_offset, seg.next_offset, seg.size, seg.mtime_ms(), seg.max_timestamp)


def _entries(seg: Segment) -> Iterator[tuple[Entry, bytes]]:
    """Every top-level entry of a (sealed) segment with its bytes, read in chunks."""
    size = seg.size
    pos = 0
    while pos < size:
        buf = seg.store.read(pos, min(_READ_CHUNK, size - pos))
        found, valid = records.scan_entries(buf, verify_crc=False)
        if not found:
            if len(buf) < 12:
                return
            need = 12 + int.from_bytes(buf[8:12], "big", signed=True)
            if need <= len(buf) or pos + need > size:
                raise StorageError(f"{seg.log_path}: unreadable entry at {pos}")
            buf = seg.store.read(pos, need)
            found, valid = records.scan_entries(buf, verify_crc=False)
            if not found:
                raise StorageError(f"{seg.log_path}: unreadable entry at {pos}")
        for e in found:
            yield e, bytes(buf[e.position : e.position + e.size])
        pos += valid


def _rewrite_entry(entry: Entry, data: bytes, keep: Callable[[Record], bool]) -> tuple[bytes | None, int]:
    """The entry with only the records ``keep`` accepts: ``(bytes or None, records dropped)``;
    the same bytes when nothing goes."""
    if entry.magic == 2:
        header = control.batch_header(data)
        if header.is_control:
            return (data if retain_control_batch(header) else None), 0
        recs = records.decode_records(data)
        kept = [r for r in recs if keep(r)]
        if len(kept) == len(recs):
            return data, 0
        if not kept:
            return None, len(recs)
        seq = header.base_sequence
        if seq >= 0:
            seq = (seq + kept[0].offset - header.base_offset) % (2**31)
        out = bytearray(
            _v2.encode(
                header.codec,
                [(r.key, r.value, r.timestamp, r.headers) for r in kept],
                kept[0].offset,
                kept[0].timestamp,
                [r.offset for r in kept],
                producer=(header.producer_id, header.producer_epoch, seq),
                flags=header.attributes & ~CODEC_MASK,
            )
        )
        out[_v2.EPOCH_OFFSET : _v2.EPOCH_OFFSET + 4] = header.partition_leader_epoch.to_bytes(4, "big", signed=True)
        return bytes(out), len(recs) - len(kept)
    recs = records.decode_records(data)
    kept = [r for r in recs if keep(r)]
    if len(kept) == len(recs):
        return data, 0
    if not kept:
        return None, len(recs)
    parts = [records.encode_records(entry.magic, records.NONE, [(r.key, r.value, r.timestamp)], base_offset=r.offset, timestamp_ms=r.timestamp) for r in kept]
    return b"".join(parts), len(recs) - len(kept)


def clean_log(
    lg: Log,
    first_dirty: int,
    *,
    now_ms: int | None = None,
    dedupe_buffer_size: int = CleanerSettings().dedupe_buffer_size,
    throttle: Callable[[int], None] | None = None,
) -> CleanResult | None:
    """One pass over ``lg`` (see the module docstring); None if nothing is cleanable.

    Raises:
        StorageError: I/O failure (the log is unchanged, or a swap is left for start-up).
    """
    now = wall_ms() if now_ms is None else now_ms
    cfg = lg.config
    segs = lg.segments
    infos = [_info(s) for s in segs]
    # Kafka's rule: nothing below the log start is dirty (DeleteRecords may have put the start
    # inside the first segment; the records there are unreadable and only ever removed here).
    first_dirty = max(first_dirty, infos[0].base_offset, lg.log_start_offset)
    # KIP-98: never past the last stable offset (a record of an open transaction may yet be
    # aborted, and must not cost the committed one it would supersede)
    end = cleanable_end(infos, lg.last_stable_offset, now, cfg.min_compaction_lag_ms)
    if end <= first_dirty:
        return None
    account = throttle or (lambda n: None)
    # The offset map over the dirty range.
    latest: dict[bytes, int] = {}
    max_keys = max(1, dedupe_buffer_size // MAP_ENTRY_BYTES)
    read = 0
    for s in segs:
        if s.base_offset >= end:
            break
        if s.next_offset <= first_dirty:
            continue
        for e, data in _entries(s):
            if e.last_offset < first_dirty:
                continue
            if e.magic == 2:
                header = control.batch_header(data)
                if header.is_control:
                    continue
                if header.is_transactional and lg.txns.is_aborted(header.producer_id, header.base_offset):
                    continue  # an aborted transaction's record supersedes nothing (KIP-98)
            for r in records.decode_records(data):
                if r.key is not None and first_dirty <= r.offset < end:
                    latest[r.key] = r.offset
        read += s.size
        account(s.size)
        if len(latest) >= max_keys and s.next_offset < end:
            end = s.next_offset  # the map is full: the rest of the dirty range waits
            break
    todo = [i for i, s in enumerate(infos) if s.next_offset <= end and s.base_offset < end]
    dropped = written = 0
    for group in group_segments([infos[i] for i in todo], cfg.segment_bytes):
        old = tuple(segs[todo[k]] for k in group)
        olds = [infos[todo[k]] for k in group]
        g_dropped, g_written, g_read = _clean_group(lg, old, olds, latest, first_dirty, now, cfg.delete_retention_ms, account)
        dropped += g_dropped
        written += g_written
        read += g_read
    return CleanResult(end, dropped, read, written)


def _clean_group(
    lg: Log,
    old: tuple[Segment, ...],
    infos: list[SegmentInfo],
    latest: Mapping[bytes, int],
    first_dirty: int,
    now_ms: int,
    delete_retention_ms: int,
    account: Callable[[int], None],
) -> tuple[int, int, int]:
    """Rewrite one group and swap it in; ``(records dropped, bytes written, bytes read)``."""
    directory = lg.directory
    base = old[0].base_offset
    cleaned = os.path.join(directory, segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
    dropped = 0
    written = 0
    read = 0
    out_entries: list[Entry] = []
    try:
        fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        raise StorageError(f"cleaning {directory}: {e}") from e
    ok = False
    try:
        for seg, info in zip(old, infos, strict=True):
            drop_tombstones = tombstone_droppable(info, first_dirty, now_ms, delete_retention_ms)

            def keep(r: Record, _drop: bool = drop_tombstones) -> bool:
                return record_survives(r.offset, r.key, r.value, latest, _drop)

            for entry, data in _entries(seg):
                kept, n = _rewrite_entry(entry, data, keep)
                dropped += n
                if kept is None:
                    continue
                found, _ = records.scan_entries(kept, verify_crc=False)
                out_entries.extend(x._replace(position=x.position + written) for x in found)
                os.write(fd, kept)
                written += len(kept)
            read += info.size
            account(info.size)
        account(written)
        os.fsync(fd)
        ok = True
    except OSError as e:
        raise StorageError(f"cleaning {directory}: {e}") from e
    finally:
        os.close(fd)
        if not ok:
            _unlink(cleaned)
    if not dropped and len(old) == 1:
        _unlink(cleaned)  # nothing to gain
        return 0, 0, read
    mtime_ms = max(i.mtime_ms for i in infos)
    next_offset = old[-1].next_offset
    swap = os.path.join(directory, f"{base:020d}.{next_offset:020d}{LOG_SUFFIX}{SWAP_SUFFIX}")

    def commit() -> None:
        # Under the log's lock, the group still in place (Log.replace_segments).
        for s in old:
            s.index.lookup(s.base_offset)  # a reader of an old segment keeps its own index
        os.utime(cleaned, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        os.replace(cleaned, swap)
        fsync_dir(directory)  # the commit point: from here start-up completes the swap
        for s in old:
            s.delete()  # retention's rule: retired, then unlinked; open handles keep reading
        os.replace(swap, old[0].log_path)
        fsync_dir(directory)

    try:
        if not lg.replace_segments(old, commit, out_entries):
            log.info("%s: the log changed during cleaning; group at %d left for the next pass", directory, base)
            _unlink(cleaned)
            return 0, 0, read
    except OSError as e:
        raise StorageError(f"cleaning {directory}: swap of {base}: {e}") from e
    return dropped, written, read


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("cannot remove %s: %s", path, e)


def complete_interrupted_cleaning(directory: str) -> int:
    """Start-up recovery of a partition folder (see the module docstring): delete ``.cleaned``
    files, complete ``.swap`` files. Returns how many swaps were completed.

    Raises:
        StorageError: a file could not be removed or renamed.
    """
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise StorageError(f"cannot list {directory}: {e}") from e
    swaps = []
    try:
        for name in names:
            if _CLEANED_FILE.match(name):
                log.warning("%s: removing unfinished cleaning output %s", directory, name)
                os.unlink(os.path.join(directory, name))
            m = _SWAP_FILE.match(name)
            if m:
                swaps.append((int(m.group(1)), int(m.group(2)), name))
        for base, nxt, name in sorted(swaps):
            for other in os.listdir(directory):
                s = _SEGMENT_FILE.match(other)
                if s and base <= int(s.group(1)) < nxt:
                    os.unlink(os.path.join(directory, other))
            os.replace(os.path.join(directory, name), os.path.join(directory, segment_file_name(base, LOG_SUFFIX)))
            log.warning("%s: completed the interrupted swap of cleaned segments %d..%d", directory, base, nxt - 1)
        if swaps:
            fsync_dir(directory)
    except OSError as e:
        raise StorageError(f"{directory}: cannot recover an interrupted cleaning: {e}") from e
    return len(swaps)


assert INDEX_SUFFIX == ".index"  # the segment file pattern above matches both suffixes


class LogCleaner:
    """The cleaner threads of one LogManager (``log.cleaner.threads``; 0: none).

    Args:
        logs: the LogManager whose ``compact`` logs are cleaned.
        settings: threads, backoff, dedupe buffer, I/O throttle.
        name: thread name prefix.
    """

    def __init__(self, logs: LogManager, settings: CleanerSettings, name: str = "log-cleaner") -> None:
        self.logs = logs
        self.settings = settings
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._busy: set[tuple[str, int]] = set()
        self._checkpoint = CheckpointFile(os.path.join(logs.log_dir, CLEANER_CHECKPOINT), HW_ENTRY_FORMAT)
        try:
            self._first_dirty: dict[tuple[str, int], int] = {(t, p): o for t, p, o in self._checkpoint.read()}
        except StorageError as e:
            log.warning("%s (starting every log as dirty)", e)
            self._first_dirty = {}
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(settings.threads)]
        #: passes completed (for tests and metrics)
        self.passes = 0

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop the threads; a pass in progress is abandoned before its next swap."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout=10)

    def first_dirty_offset(self, topic: str, partition: int) -> int:
        with self._lock:
            return self._first_dirty.get((topic, partition), 0)

    def _pick(self, now_ms: int) -> tuple[tuple[str, int], Log, int] | None:
        candidates = []
        found: dict[tuple[str, int], tuple[Log, int]] = {}
        with self._lock:
            for key, lg in self.logs.all_logs():
                if not lg.config.compact:
                    continue
                segs = lg.segments
                infos = [_info(s) for s in segs]
                fd = max(self._first_dirty.get(key, 0), infos[0].base_offset, lg.log_start_offset)
                end = cleanable_end(infos, lg.high_watermark, now_ms, lg.config.min_compaction_lag_ms)
                if end <= fd:
                    continue
                _, _, ratio = dirty_ratio(infos, fd, end)
                candidates.append((key, ratio, lg.config.min_cleanable_dirty_ratio))
                found[key] = (lg, fd)
            key = choose_log(candidates, self._busy)
            if key is None:
                return None
            self._busy.add(key)
        lg, fd = found[key]
        return key, lg, fd

    def clean_once(self, now_ms: int | None = None) -> CleanResult | None:
        """Clean the dirtiest log that needs it; None if none does."""
        now = wall_ms() if now_ms is None else now_ms
        picked = self._pick(now)
        if picked is None:
            return None
        key, lg, fd = picked
        try:
            result = clean_log(
                lg, fd, now_ms=now, dedupe_buffer_size=self.settings.dedupe_buffer_size,
                throttle=_Throttle(self.settings.io_max_bytes_per_second, self._stop),
            )
            if result is not None:
                with self._lock:
                    self._first_dirty[key] = result.first_dirty
                    live = {k for k, _ in self.logs.all_logs()}
                    entries = sorted((t, p, o) for (t, p), o in self._first_dirty.items() if (t, p) in live)
                    self._checkpoint.write(entries)
                self.passes += 1
                log.info("%s-%d: cleaned up to %d, %d records dropped, %d bytes read, %d written",
                         key[0], key[1], result.first_dirty, result.dropped, result.bytes_read, result.bytes_written)
            return result
        finally:
            with self._lock:
                self._busy.discard(key)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self.clean_once()
            except _Stopped:
                return
            except StorageError as e:
                log.error("log cleaner: %s", e)
                result = None
            except Exception:  # a bug must not kill the thread silently
                log.exception("log cleaner")
                result = None
            if result is None and self._stop.wait(self.settings.backoff_ms / 1000.0):
                return
