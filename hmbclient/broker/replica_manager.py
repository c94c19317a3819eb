"""ReplicaManager: appends to and reads from the partition logs this broker leads.

This is the layer the purgatory refactoring (KAFKA-1583) moved out of the request handlers:
``append_messages`` and ``fetch_messages`` take per-partition inputs and a callback, answer at
once when they can, and otherwise park a DelayedProduce / DelayedFetch in their purgatory. The
request dispatcher (``apis``) and the offset manager both call it; neither knows about logs.

Per-partition errors are codes, never exceptions: 3 unknown topic-partition, 5 leader not
available (its broker is down), 6 not the leader here, 1 offset out of range, 2 corrupt message,
10 message too large, 17 internal topic written by a client, 56 storage error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hmbclient.broker.delayed import DelayedFetch, DelayedProduce, FetchWait, ProduceStatus
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.manager import LogManager
from hmbclient.broker.log.segment import FileSlice
from hmbclient.broker.metadata import NO_LEADER, ClusterView
from hmbclient.broker.purgatory import Purgatory
from hmbclient.broker.results import TP, AppendResult, FetchInfo, FetchResult
from hmbclient.clock import monotonic_ms
from hmbclient.errors import (
    BrokerError,
    CorruptRecordError,
    ErrorCode,
    OffsetOutOfRangeError,
    ProtocolError,
    StorageError,
)
from hmbclient.protocol import records

__all__ = ["ReplicaManager", "AppendResult", "FetchInfo", "FetchResult"]

log = logging.getLogger("hmbclient.broker.replica_manager")


_EMPTY = b""


class ReplicaManager:
    """Leader-side log access for one broker.

    Args:
        broker_id: this broker.
        view: cluster metadata (who leads what).
        logs: the partition logs.
        now_ms: the purgatories' clock.
    """

    def __init__(self, broker_id: int, view: ClusterView, logs: LogManager, now_ms: Callable[[], int] = monotonic_ms) -> None:
        self.broker_id = broker_id
        self.view = view
        self.logs = logs
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("produce", now_ms)
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", now_ms)
        self._append_listeners: list[Callable[[str, int], None]] = []

    def start(self) -> None:
        self.view.add_listener(self._on_view_event)
        self.produce_purgatory.start()
        self.fetch_purgatory.start()

    def shutdown(self) -> None:
        self.view.remove_listener(self._on_view_event)
        # Parked requests answer now (a fetch with what is there, a produce with a timeout)
        # instead of holding their connections until the sockets close.
        self.fetch_purgatory.shutdown(complete_pending=True)
        self.produce_purgatory.shutdown(complete_pending=True)

    def _on_view_event(self, event: str, arg: Any) -> None:
        if event == "leader":
            self.fetch_purgatory.check_and_complete(arg)
            self.produce_purgatory.check_and_complete(arg)
        elif event == "broker_down":
            for topic, leaders in self.view.topics().items():
                for p, b in enumerate(leaders):
                    if b == NO_LEADER:
                        self.fetch_purgatory.check_and_complete((topic, p))

    def add_append_listener(self, fn: Callable[[str, int], None]) -> None:
        """``fn(topic, partition)`` after every successful append (the offset manager's hook)."""
        self._append_listeners.append(fn)

    # -- leadership ----------------------------------------------------------------------------
    def leader_log(self, topic: str, partition: int) -> tuple[int, Log | None]:
        """``(0, log)`` if this broker leads the partition, else ``(error code, None)``."""
        leader = self.view.leader(topic, partition)
        if leader is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if leader == NO_LEADER:
            return ErrorCode.LEADER_NOT_AVAILABLE, None
        if leader != self.broker_id:
            return ErrorCode.NOT_LEADER_FOR_PARTITION, None
        lg = self.logs.get(topic, partition)
        if lg is None:
            lg = self.logs.get_or_create(topic, partition)
        return ErrorCode.NONE, lg

    # -- appends -------------------------------------------------------------------------------
    def append_messages(
        self,
        timeout_ms: int,
        acks: int,
        entries: list[tuple[str, int, Any]],
        respond: Callable[[dict[TP, AppendResult]], None],
        *,
        allow_internal: bool = False,
    ) -> None:
        """Append each ``(topic, partition, records bytes)`` and call ``respond`` with the
        per-partition results: at once for acks 0/1, through a DelayedProduce for acks -1."""
        results: dict[TP, AppendResult] = {}
        appended: list[tuple[TP, int]] = []
        for topic, partition, buf in entries:
            tp = (topic, partition)
            code, lg = self.leader_log(topic, partition)
            if not code and not allow_internal and self.view.is_internal(topic):
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
            if code or lg is None:
                results[tp] = AppendResult(code, -1, -1)
                continue
            try:
                info = lg.append(buf if buf is not None else _EMPTY)
            except BrokerError as e:
                log.info("append to %s-%d refused: %s", topic, partition, e)
                results[tp] = AppendResult(e.errno, -1, -1)
                continue
            except (CorruptRecordError, ProtocolError) as e:
                log.info("append to %s-%d refused: %s", topic, partition, e)
                results[tp] = AppendResult(ErrorCode.CORRUPT_MESSAGE, -1, -1)
                continue
            except StorageError as e:
                log.error("append to %s-%d failed: %s", topic, partition, e)
                results[tp] = AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, -1, -1)
                continue
            results[tp] = AppendResult(ErrorCode.NONE, info.first_offset, lg.log_start_offset)
            if info.num_records:
                appended.append((tp, info.last_offset + 1))
        for tp, _ in appended:
            self.fetch_purgatory.check_and_complete(tp)
            for fn in self._append_listeners:
                fn(*tp)
        if acks == -1 and appended:
            ends = dict(appended)
            statuses = {tp: ProduceStatus(ends.get(tp, 0), r, pending=tp in ends) for tp, r in results.items()}
            op = DelayedProduce(timeout_ms, statuses, self, respond)
            self.produce_purgatory.try_complete_else_watch(op, list(ends))
        else:
            respond(results)

    # -- fetches -------------------------------------------------------------------------------
    def read(self, infos: list[FetchInfo], max_bytes: int, max_magic: int, min_one_entry: bool, waits: list[FetchWait] | None = None) -> list[FetchResult]:
        """Read every partition now (no waiting).

        Args:
            infos: partitions and offsets, in response order.
            max_bytes: budget across partitions (Fetch v3+), each partition also capped by its own.
            max_magic: highest message format the response may carry; data stored in a newer one
                is down-converted (and then sent from memory, not with sendfile).
            min_one_entry: the first partition with data returns at least one whole entry (KIP-74).
            waits: if given, filled with what a DelayedFetch needs to watch each partition.
        """
        out: list[FetchResult] = []
        remaining = max_bytes
        for info in infos:
            code, lg = self.leader_log(info.topic, info.partition)
            if code or lg is None:
                out.append(FetchResult(code, -1, -1, _EMPTY, 0))
                if waits is not None:
                    waits.append(FetchWait(None, 0, 0))
                continue
            # Snapshot before reading: an append racing with this read then shows up as growth.
            active = lg.segments[-1]
            size_before = active.size
            hw = lg.high_watermark
            start = lg.log_start_offset
            limit = min(info.max_bytes, remaining)
            data: FileSlice | bytes = _EMPTY
            n = 0
            if limit > 0 or min_one_entry:
                try:
                    sl, magic = lg.read(info.offset, max(limit, 0), min_one_entry=min_one_entry)
                except OffsetOutOfRangeError:
                    out.append(FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, hw, start, _EMPTY, 0))
                    if waits is not None:
                        waits.append(FetchWait(None, 0, 0))
                    continue
                if sl is not None:
                    if magic > max_magic:
                        data = self._down_convert(sl, max_magic)
                    else:
                        data = sl
                    n = len(data)
            if n:
                remaining -= n
                min_one_entry = False
            out.append(FetchResult(ErrorCode.NONE, hw, start, data, n))
            if waits is not None:
                waits.append(FetchWait(active, size_before, n))
        return out

    @staticmethod
    def _down_convert(sl: FileSlice, to_magic: int) -> bytes:
        buf = sl.read()
        # Convert whole entries only: the converter works on complete messages, and a client
        # reading an old format re-fetches from the next offset anyway.
        _, valid = records.scan_entries(buf, verify_crc=False)
        if valid:
            return bytes(records.convert_records(memoryview(buf)[:valid], to_magic))
        if len(buf) < 12:
            return _EMPTY
        # Not even the first entry fits: send the start of its conversion, cut at the limit,
        # as Kafka 0.8 sent a partial message; an old client then knows to fetch bigger.
        whole = sl.store.read(sl.position, 12 + int.from_bytes(buf[8:12], "big"))
        return bytes(records.convert_records(whole, to_magic))[: len(sl)]

    def fetch_messages(
        self,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        infos: list[FetchInfo],
        max_magic: int,
        min_one_entry: bool,
        respond: Callable[[list[FetchResult]], None],
    ) -> None:
        """Read now and respond if ``min_bytes`` are there (or an error, or no wait); else park
        a DelayedFetch that responds when an append satisfies it or ``max_wait_ms`` passes."""
        waits: list[FetchWait] = []
        results = self.read(infos, max_bytes, max_magic, min_one_entry, waits)
        total = 0
        failed = False
        for r in results:
            total += r.size
            if r.error_code:
                failed = True
        if max_wait_ms <= 0 or not infos or total >= min_bytes or failed:
            respond(results)
            return

        def complete() -> None:
            respond(self.read(infos, max_bytes, max_magic, min_one_entry))

        op = DelayedFetch(max_wait_ms, min_bytes, infos, waits, self, complete)
        self.fetch_purgatory.try_complete_else_watch(op, [(i.topic, i.partition) for i in infos])
