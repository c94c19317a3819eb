"""The two delayed operations of the replica manager: DelayedProduce and DelayedFetch.

DelayedProduce (acks=-1) completes when, for every partition it appended to,
  Case A: this broker no longer leads the partition (the partition fails NOT_LEADER), or
  Case B: the high watermark reached the offset after the appended messages.
With one replica Case B holds right after the append, so the op completes in
``try_complete_else_watch``'s first check; replication would only change the high watermark.
On expiry the partitions still waiting fail with REQUEST_TIMED_OUT.

DelayedFetch completes when
  Case A: this broker no longer leads one of the partitions,
  Case B: a partition is gone or its fetch offset is no longer in the log (truncated/deleted),
  Case C: the log rolled past the segment the fetch was waiting on,
  Case D: the bytes available across the partitions reach ``min_bytes``.
On completion (by a case or by the ``max_wait_ms`` expiry) it reads again and responds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hmbclient.broker.purgatory import DelayedOperation
from hmbclient.broker.results import AppendResult, FetchInfo
from hmbclient.errors import ErrorCode

if TYPE_CHECKING:
    from hmbclient.broker.log.log import Log
    from hmbclient.broker.log.segment import Segment


class LeaderLogs(Protocol):
    """What the delayed operations need of the replica manager: the log of a partition this
    broker leads, or the error code saying why not."""

    def leader_log(self, topic: str, partition: int) -> tuple[int, Log | None]: ...

__all__ = ["DelayedProduce", "DelayedFetch", "ProduceStatus", "FetchWait"]

@dataclass
class ProduceStatus:
    required_offset: int
    result: AppendResult
    pending: bool = True


class DelayedProduce(DelayedOperation):
    """Waits for the acks of one produce request.

    Args:
        timeout_ms: the request's timeout.
        statuses: per (topic, partition) the offset the high watermark must reach and the append
            result to send; partitions that failed to append are not pending.
        leaders: for leadership and high watermarks.
        respond: called once with ``{(topic, partition): AppendResult}``.
    """

    def __init__(self, timeout_ms: int, statuses: dict[tuple[str, int], ProduceStatus], leaders: LeaderLogs, respond: Callable[[dict[tuple[str, int], AppendResult]], None]) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self.leaders = leaders
        self.respond = respond

    def try_complete(self) -> bool:
        waiting = False
        for tp, st in self.statuses.items():
            if not st.pending:
                continue
            code, partition_log = self.leaders.leader_log(*tp)
            if code or partition_log is None:  # Case A
                st.result = st.result._replace(error_code=code or ErrorCode.NOT_LEADER_FOR_PARTITION)
                st.pending = False
            elif partition_log.high_watermark >= st.required_offset:  # Case B
                st.pending = False
            else:
                waiting = True
        if waiting:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        out = {}
        for tp, st in self.statuses.items():
            if st.pending:
                st.result = st.result._replace(error_code=ErrorCode.REQUEST_TIMED_OUT)
            out[tp] = st.result
        self.respond(out)


@dataclass
class FetchWait:
    """What a parked fetch watches on one partition: the segment its offset was at (the active
    one when parked), that segment's size then, and the bytes the first read already found."""

    segment: Segment | None
    size_at_park: int
    bytes_found: int


class DelayedFetch(DelayedOperation):
    """A Fetch waiting for ``min_bytes`` (or ``max_wait_ms``).

    Args:
        max_wait_ms: the request's max wait.
        min_bytes: bytes to wait for across all partitions.
        infos: the partitions asked for.
        waits: per partition, what the first read saw (see FetchWait).
        leaders: to check the logs (the caller's ``complete`` reads again).
        complete: called once, by whoever completes the op, to read and respond.
    """

    def __init__(self, max_wait_ms: int, min_bytes: int, infos: list[FetchInfo], waits: list[FetchWait], leaders: LeaderLogs, complete: Callable[[], Any]) -> None:
        super().__init__(max_wait_ms)
        self.min_bytes = min_bytes
        self.infos = infos
        self.waits = waits
        self.leaders = leaders
        self._complete = complete

    def try_complete(self) -> bool:
        accumulated = 0
        for info, wait in zip(self.infos, self.waits, strict=True):
            code, partition_log = self.leaders.leader_log(info.topic, info.partition)
            if code or partition_log is None:  # Case A / B: not the leader any more, or gone
                return self.force_complete()
            if not partition_log.log_start_offset <= info.offset <= partition_log.log_end_offset:  # Case B
                return self.force_complete()
            seg = wait.segment
            if seg is None:
                accumulated += wait.bytes_found
                continue
            if partition_log.segments[-1] is not seg:  # Case C: rolled
                return self.force_complete()
            accumulated += wait.bytes_found + max(0, seg.size - wait.size_at_park)
        if accumulated >= self.min_bytes:  # Case D
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self._complete()
