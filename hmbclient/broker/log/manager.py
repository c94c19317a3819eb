"""LogManager: every partition log under one data directory.

Layout: ``<log_dir>/<topic>-<partition>/`` per partition (the topic name is validated before it
reaches here, so it cannot contain a path separator), plus ``replication-offset-checkpoint``: the
high watermark of every log (Kafka's checkpoint format, entries ``topic partition hw``), written
by ``checkpoint_high_watermarks`` (the replica manager's periodic task, and ``close``), and
``log-start-offset-checkpoint`` (Kafka's name and format, ``topic partition log_start``): the log
start of every log whose start is past its first segment's base (DeleteRecords moved it inside a
segment; otherwise the segments say it), written by ``checkpoint_log_start_offsets`` when a
start moved (before DeleteRecords answers, so a kill -9 keeps it; Kafka writes it only
periodically), when a log is deleted (a topic created again under the name must not inherit
it), periodically and at ``close``. Start-up gives each log its start back before its high
watermark (``Log.restore_log_start_offset``).

Start-up loads every partition folder; a folder whose name is not ``<valid topic>-<number>`` is a
StorageError, as is any segment problem (see ``Log``) or a malformed high-watermark checkpoint.
Each log the checkpoint names gets its high watermark back (clamped to what recovery kept); a log
it does not name, or every log when the file is missing, keeps the default (its log start). A
folder ``<topic>-<partition>.<hex>-delete`` is a deletion a crash interrupted: it is removed.

Logs are created on demand and deleted by ``delete_log`` (StopReplica with delete).

Clean shutdown (as Kafka's ``.kafka_cleanshutdown``): ``close`` writes the marker file
``.kafka_cleanshutdown`` in the data directory after every log flushed and closed without an
error. Start-up reads it before loading (each Log then skips the CRC scan of its active segment,
see ``Log``) and removes it (durably: the folder is fsynced) once every log is loaded, before
anything can be written; so a marker is only ever found after a clean close, and a crash at any
later point leaves none. Without it, each log recovers its active segment (the recovery point:
older segments were fsynced when they rolled).

Open files: read handles of every log come from one ``HandleCache`` of at most
``max_open_read_handles`` (least recently used closed first); each partition written since
start-up also holds its active segment's writer. Indexes hold no descriptor.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from collections.abc import Callable

from hmbclient.broker.log.checkpoint import HW_ENTRY_FORMAT, CheckpointFile, fsync_dir
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import DELETE_SUFFIX, Log
from hmbclient.broker.log.store import DEFAULT_MAX_OPEN_READ_HANDLES, HandleCache
from hmbclient.errors import StorageError
from hmbclient.zkpaths import TOPIC_NAME_PATTERN

__all__ = ["LogManager", "partition_dir_name", "HW_CHECKPOINT", "LOG_START_CHECKPOINT", "CLEAN_SHUTDOWN_FILE"]

log = logging.getLogger("hmbclient.broker.log")

_PARTITION_DIR = re.compile(rf"^({TOPIC_NAME_PATTERN})-(\d{{1,9}})$")
_DELETED_DIR = re.compile(rf"^({TOPIC_NAME_PATTERN})-(\d{{1,9}})\.[0-9a-f]{{32}}{re.escape(DELETE_SUFFIX)}$")
HW_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogManager:
    """Owns the Log objects of one data directory.

    Args:
        log_dir: the data directory (created if missing).
        default_config: LogConfig of ordinary topics.
        config_for: optional ``topic -> LogConfig`` override (e.g. compaction for the offsets
            topic); None means ``default_config``.
        max_open_read_handles: the cap of the read-handle cache (see the module docstring).
    Raises:
        StorageError: unreadable directory, a malformed partition folder or segment, or a
            malformed ``replication-offset-checkpoint``.
    """

    def __init__(
        self,
        log_dir: str,
        default_config: LogConfig,
        config_for: Callable[[str], LogConfig | None] | None = None,
        *,
        max_open_read_handles: int = DEFAULT_MAX_OPEN_READ_HANDLES,
    ) -> None:
        self.log_dir = log_dir
        self.handles = HandleCache(max_open_read_handles)
        self.clean_shutdown_found = False
        self.default_config = default_config
        self._config_for = config_for
        self._logs: dict[tuple[str, int], Log] = {}
        self._lock = threading.Lock()
        # Serialises checkpoint writers (a periodic task and close): they share the .tmp file.
        self._checkpoint_lock = threading.Lock()
        self._closed = False
        self._hw_checkpoint = CheckpointFile(os.path.join(log_dir, HW_CHECKPOINT), HW_ENTRY_FORMAT)
        self._start_checkpoint = CheckpointFile(os.path.join(log_dir, LOG_START_CHECKPOINT), HW_ENTRY_FORMAT)
        #: what ``log-start-offset-checkpoint`` holds now (read at start-up: a write happens
        #: only when this changes)
        self._starts_written: list[tuple[str, int, int]] = []
        self._start_lock = threading.Lock()
        try:
            os.makedirs(log_dir, exist_ok=True)
            names = sorted(os.listdir(log_dir))
        except OSError as e:
            raise StorageError(f"cannot use log directory {log_dir}: {e}") from e
        marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
        clean = self.clean_shutdown_found = CLEAN_SHUTDOWN_FILE in names
        doomed: list[str] = []
        for name in names:
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue  # e.g. a lock or checkpoint file; partitions are folders
            if _DELETED_DIR.match(name):
                doomed.append(path)
                continue
            m = _PARTITION_DIR.match(name)
            if m is None or m.group(1) in (".", ".."):
                raise StorageError(f"{log_dir}: folder {name!r} is not <topic>-<partition>")
            topic, part = m.group(1), int(m.group(2))
            self._logs[(topic, part)] = Log(path, self._config(topic), cache=self.handles, clean_shutdown=clean)
        # The log starts first: a high watermark is clamped to its log's start.
        self._starts_written = sorted(self._start_checkpoint.read())
        for topic, part, start in self._starts_written:
            lg = self._logs.get((topic, part))
            if lg is not None:
                lg.restore_log_start_offset(start)
        for topic, part, hw in self._hw_checkpoint.read():
            lg = self._logs.get((topic, part))
            if lg is not None:
                lg.set_high_watermark(hw)
        for path in doomed:
            log.info("removing %s (a partition deletion interrupted by a restart)", path)
            try:
                shutil.rmtree(path)
            except OSError as e:
                raise StorageError(f"cannot remove {path}: {e}") from e
        if clean:
            # Gone before the first write: a crash from here on must not look clean.
            try:
                os.unlink(marker)
                fsync_dir(log_dir)
            except OSError as e:
                raise StorageError(f"cannot remove {marker}: {e}") from e
        if self._logs:
            log.info("loaded %d partition logs from %s (%s shutdown)", len(self._logs), log_dir, "clean" if clean else "unclean")

    def set_config_for(self, config_for: Callable[[str], LogConfig | None]) -> None:
        """Replace the ``topic -> LogConfig`` override of logs created from now on (dynamic
        topic configs; the caller reconfigures the open logs itself)."""
        self._config_for = config_for

    def _config(self, topic: str) -> LogConfig:
        if self._config_for is not None:
            c = self._config_for(topic)
            if c is not None:
                return c
        return self.default_config

    def topics(self) -> dict[str, int]:
        """Topics found or created, with their partition count (highest partition + 1)."""
        out: dict[str, int] = {}
        for topic, part in list(self._logs):
            out[topic] = max(out.get(topic, 0), part + 1)
        return out

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> Log:
        lg = self._logs.get((topic, partition))
        if lg is not None:
            return lg
        with self._lock:
            lg = self._logs.get((topic, partition))
            if lg is None:
                path = os.path.join(self.log_dir, partition_dir_name(topic, partition))
                lg = Log(path, self._config(topic), cache=self.handles)
                self._logs[(topic, partition)] = lg
            return lg

    def all_logs(self) -> list[tuple[tuple[str, int], Log]]:
        return list(self._logs.items())

    def delete_log(self, topic: str, partition: int) -> bool:
        """Forget a partition and delete its folder (StopReplica with delete); False if there
        was no such log. See ``Log.delete``: a crash midway leaves a folder removed at start-up.

        Raises:
            StorageError: the folder could not be renamed or removed.
        """
        with self._lock:
            lg = self._logs.pop((topic, partition), None)
        if lg is None:
            return False
        lg.delete()
        self.checkpoint_log_start_offsets()
        return True

    def checkpoint_high_watermarks(self) -> None:
        """Write every log's high watermark to ``replication-offset-checkpoint`` (atomically).

        Does nothing after ``close`` (the logs are gone; the file written at close stays).

        Raises:
            StorageError: the file could not be written (the previous one stays).
        """
        if self._closed:
            return
        entries = sorted((topic, part, lg.high_watermark) for (topic, part), lg in self.all_logs())
        with self._checkpoint_lock:
            self._hw_checkpoint.write(entries)

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint`` (atomically, fsynced) if what it should hold
        changed since the last write: every log whose start is past its first segment's base.

        Raises:
            StorageError: the file could not be written (the previous one stays).
        """
        if self._closed:
            return
        with self._start_lock:
            entries = sorted(
                (topic, part, lg.log_start_offset) for (topic, part), lg in self.all_logs() if lg.log_start_offset > lg.segments[0].base_offset
            )
            if entries == self._starts_written:
                return
            self._start_checkpoint.write(entries)
            self._starts_written = entries

    def run_retention(self, now_ms: int) -> int:
        n = 0
        for _, lg in self.all_logs():
            try:
                n += lg.apply_retention(now_ms)
                lg.remove_expired_producers(now_ms)
            except StorageError as e:
                log.error("retention: %s", e)
        return n

    def run_flush(self, now_ms: int) -> None:
        for _, lg in self.all_logs():
            try:
                lg.maybe_flush(now_ms)
            except StorageError as e:
                log.error("flush: %s", e)

    def reconfigure(self) -> None:
        """Ask ``config_for`` again for every log (topic overrides became readable, or changed):
        each log takes its new LogConfig (the cleaner and retention read it on each pass)."""
        for (topic, _), lg in self.all_logs():
            lg.config = self._config(topic)

    def close(self) -> None:
        """Checkpoint the high watermarks (a clean shutdown keeps them), close every log, and
        if all of that succeeded write the clean-shutdown marker. A second call does nothing
        (it must not checkpoint an empty set over the real one)."""
        if self._closed:
            return
        clean = True
        try:
            self.checkpoint_high_watermarks()
            self.checkpoint_log_start_offsets()
        except StorageError as e:
            log.error("high watermark / log start checkpoint at close: %s", e)
            clean = False
        self._closed = True
        with self._lock:
            for lg in self._logs.values():
                if not lg.close():
                    clean = False
            self._logs.clear()
        self.handles.clear()
        if clean:
            marker = os.path.join(self.log_dir, CLEAN_SHUTDOWN_FILE)
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                fsync_dir(self.log_dir)
            except OSError as e:
                log.error("cannot write the clean-shutdown marker %s (the next start-up recovers): %s", marker, e)
