"""The delayed operations of the replica manager: DelayedProduce, DelayedFetch and
DelayedDeleteRecords.

DelayedProduce (acks=-1) completes when, for every partition it appended to,
  Case A: this broker no longer leads the partition (the partition fails NOT_LEADER), or
  Case B: the high watermark reached the offset after the appended messages: every ISR member
          has them (NONE), or the ISR shrank below ``min.insync.replicas`` on the way
          (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
With one replica in the ISR Case B holds right after the append, so the op completes in
``try_complete_else_watch``'s first check. On expiry the partitions still waiting fail with
REQUEST_TIMED_OUT (the messages stay in the log; the producer may retry and duplicate them).

DelayedFetch completes when
  Case A: this broker no longer leads one of the partitions,
  Case B: a partition's fetch offset is no longer in the log (truncated, deleted) or what the
          fetch may read up to went backwards,
  Case C: the bytes readable across the partitions reach ``min_bytes``. A consumer may read up
          to the high watermark, a follower up to the log end, so an append wakes followers'
          fetches and a high-watermark move wakes consumers'.
On completion (by a case or by the ``max_wait_ms`` expiry) it reads again and responds.

DelayedDeleteRecords (Kafka's) completes when, for every partition whose log start the leader
moved,
  Case A: this broker no longer leads the partition (NOT_LEADER_OR_FOLLOWER), or
  Case B: the low watermark (the smallest log start of the leader and of every follower on a
          live broker, as the followers' fetches report it) reached the offset asked for:
          NONE with that low watermark.
On expiry (the request's ``timeout_ms``) the partitions still waiting answer REQUEST_TIMED_OUT
(the leader's log start has moved all the same; the followers follow on their next fetches).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from hmbclient.broker.purgatory import DelayedOperation
from hmbclient.broker.results import AppendResult, FetchInfo
from hmbclient.errors import ErrorCode

if TYPE_CHECKING:
    from hmbclient.broker.log.log import Log

__all__ = ["DelayedProduce", "DelayedFetch", "DelayedDeleteRecords", "DeleteRecordsStatus", "ProduceStatus", "FetchWait", "Replicas"]


class Replicas(Protocol):
    """What the delayed operations need of the replica manager."""

    def acks_status(self, topic: str, partition: int, required_offset: int) -> int | None:
        """None while an acks=-1 produce still waits, else the partition's final error code."""
        ...

    def fetch_end(self, topic: str, partition: int, from_replica: bool, isolation_level: int = 0) -> tuple[int, Log | None, int]:
        """``(error, log, end)``: the offset a fetch may read up to (HW, LSO or LEO)."""
        ...

    def low_watermark(self, topic: str, partition: int) -> tuple[int, int]:
        """``(error, low watermark)`` of a partition this broker leads (see DelayedDeleteRecords)."""
        ...


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
        replicas: for leadership, high watermarks and the ISR size.
        respond: called once with ``{(topic, partition): AppendResult}``.
    """

    def __init__(self, timeout_ms: int, statuses: dict[tuple[str, int], ProduceStatus], replicas: Replicas, respond: Callable[[dict[tuple[str, int], AppendResult]], None]) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self.replicas = replicas
        self.respond = respond

    def try_complete(self) -> bool:
        waiting = False
        for tp, st in self.statuses.items():
            if not st.pending:
                continue
            code = self.replicas.acks_status(tp[0], tp[1], st.required_offset)
            if code is None:
                waiting = True
                continue
            # Case A (not the leader any more) or Case B (the HW got there)
            if code:
                st.result = st.result._replace(error_code=code)
            st.pending = False
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


class FetchWait(NamedTuple):
    """What a parked fetch saw on one partition: the offset it could read up to (-1: the
    partition failed) and the bytes the first read found."""

    end_at_park: int
    bytes_found: int


class DelayedFetch(DelayedOperation):
    """A Fetch waiting for ``min_bytes`` (or ``max_wait_ms``).

    Args:
        max_wait_ms: the request's max wait.
        min_bytes: bytes to wait for across all partitions.
        infos: the partitions asked for.
        waits: per partition, what the first read saw (see FetchWait).
        from_replica: a follower's fetch (reads to the log end) or a consumer's (to the HW).
        replicas: to check the logs.
        complete: called once, by whoever completes the op, to read again and respond.
    """

    def __init__(self, max_wait_ms: int, min_bytes: int, infos: list[FetchInfo], waits: list[FetchWait], from_replica: bool, replicas: Replicas, complete: Callable[[], Any]) -> None:
        super().__init__(max_wait_ms)
        self.min_bytes = min_bytes
        self.infos = infos
        self.waits = waits
        self.from_replica = from_replica
        self.replicas = replicas
        self._complete = complete

    def try_complete(self) -> bool:
        accumulated = 0
        for info, wait in zip(self.infos, self.waits, strict=True):
            if wait.end_at_park < 0:
                continue
            code, partition_log, end = self.replicas.fetch_end(info.topic, info.partition, self.from_replica, info.isolation_level)
            if code or partition_log is None:  # Case A
                return self.force_complete()
            if not partition_log.log_start_offset <= info.offset <= partition_log.log_end_offset or end < wait.end_at_park:  # Case B
                return self.force_complete()
            accumulated += wait.bytes_found
            if end > wait.end_at_park and end > info.offset:
                found, _ = partition_log.read(info.offset, info.max_bytes, max_offset=end)
                if found is not None:
                    accumulated += len(found) - wait.bytes_found
        if accumulated >= self.min_bytes:  # Case C
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self._complete()


@dataclass
class DeleteRecordsStatus:
    """One partition of a DeleteRecords: the offset the low watermark must reach, and the
    answer so far (error code, low watermark)."""

    required_offset: int
    error_code: int
    low_watermark: int = -1
    pending: bool = True


class DelayedDeleteRecords(DelayedOperation):
    """Waits until every live replica's log start reached what a DeleteRecords asked for.

    Args:
        timeout_ms: the request's ``timeout_ms``.
        statuses: per (topic, partition); partitions already answered are not pending.
        replicas: for leadership and low watermarks.
        respond: called once with ``{(topic, partition): DeleteRecordsStatus}``.
    """

    def __init__(self, timeout_ms: int, statuses: dict[tuple[str, int], DeleteRecordsStatus], replicas: Replicas,
                 respond: Callable[[dict[tuple[str, int], DeleteRecordsStatus]], None]) -> None:
        super().__init__(timeout_ms)
        self.statuses = statuses
        self.replicas = replicas
        self.respond = respond

    def try_complete(self) -> bool:
        waiting = False
        for tp, st in self.statuses.items():
            if not st.pending:
                continue
            code, lw = self.replicas.low_watermark(tp[0], tp[1])
            if code:  # Case A
                st.error_code, st.low_watermark, st.pending = code, -1, False
            elif lw >= st.required_offset:  # Case B
                st.error_code, st.low_watermark, st.pending = ErrorCode.NONE, lw, False
            else:
                waiting = True
        if waiting:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        for st in self.statuses.values():
            if st.pending:
                st.error_code, st.low_watermark, st.pending = ErrorCode.REQUEST_TIMED_OUT, -1, False
        self.respond(self.statuses)
