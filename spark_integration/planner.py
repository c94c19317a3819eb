"""The driver-side partition planner: which partitions exist, who leads them, which offsets.

:class:`PartitionPlanner` answers the questions planning needs before any task runs: the
partitions of the subscribed topics (named, or matching a pattern) with their leaders, and
each partition's earliest or latest offset. Metadata comes from hmbclient's ``net.Metadata``
over the bootstrap list (never creating topics); offsets come from one SimpleConsumer per
leader. Everything it opens is closed when the planner is.

A leader that moved or went away while offsets are asked is looked up again and asked again,
up to ``ReadSettings.max_retries`` times with a pause of ``retry_backoff_ms``
(``refresh.leader.backoff.ms``); other broker errors are raised at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hmbclient.errors import KafkaConnectionError, UnknownTopicOrPartitionError
from hmbclient.net import retry_policy
from spark_integration.offsets import EARLIEST, LATEST, TopicPartition
from spark_integration.settings import (
    Leader,
    ReadSettings,
    close_quietly,
    is_transient,
    open_consumer,
)

__all__ = ["PartitionPlanner", "find_leader"]


class PartitionPlanner:
    """Driver-side planning view: partitions, leaders, offsets. Use as a context manager.

    Args:
        settings: How to reach the cluster.
    """

    def __init__(self, settings: ReadSettings) -> None:
        from hmbclient.config import SecurityConfig
        from hmbclient.net import Metadata, NetClient, Security

        self.settings = settings
        self._net = NetClient(
            list(settings.brokers),
            client_id=settings.client_id,
            api_version=settings.api_version,
            request_timeout_ms=settings.socket_timeout_ms,
            security=Security.from_config(SecurityConfig.from_properties(settings.security_settings())),
            name="hmbclient-io-spark-planner",
        )
        self._metadata = Metadata(self._net, allow_auto_topic_creation=False)
        self._consumers: dict[Leader, Any] = {}
        self._leaders: dict[TopicPartition, Leader | None] = {}

    def __enter__(self) -> PartitionPlanner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the metadata client and every consumer this planner opened."""
        consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            close_quietly(consumer)
        self._net.close()

    def _consumer(self, leader: Leader) -> Any:
        consumer = self._consumers.get(leader)
        if consumer is None:
            consumer = self._consumers[leader] = open_consumer(self.settings, leader)
        return consumer

    def _drop(self, leader: Leader) -> None:
        consumer = self._consumers.pop(leader, None)
        if consumer is not None:
            close_quietly(consumer)

    def _refresh(self, topics: list[str] | None) -> Any:
        view = self._metadata.refresh(topics)
        for topic, info in view.topics.items():
            for partition, partition_info in info.partitions.items():
                node = partition_info.leader
                self._leaders[(topic, partition)] = view.brokers.get(node) if node >= 0 else None
        return view

    def partitions(
        self, topics: Sequence[str] | None, *, pattern: str | None = None
    ) -> dict[TopicPartition, Leader | None]:
        """Every partition of ``topics`` (or of the topics matching ``pattern``) with its leader.

        Args:
            topics: Topic names, or None to list all topics and filter by ``pattern``.
            pattern: A regex that must match a whole topic name (used when ``topics`` is None).

        Returns:
            ``{(topic, partition): (host, port), or None while leaderless}``, sorted.

        Raises:
            UnknownTopicOrPartitionError: A named topic does not exist.
            KafkaConnectionError / RequestTimedOutError: No broker answered.
        """
        view = self._refresh(sorted(set(topics)) if topics is not None else None)
        if topics is not None:
            missing = [t for t in topics if t not in view.topics or not view.topics[t].partitions]
            if missing:
                raise UnknownTopicOrPartitionError(
                    f"topic(s) {', '.join(missing)} do not exist on "
                    + ",".join(f"{h}:{p}" for h, p in self.settings.brokers)
                )
            chosen = sorted(set(topics))
        else:
            assert pattern is not None
            regex = re.compile(pattern)
            chosen = sorted(t for t in view.topics if regex.fullmatch(t))
        return {
            (t, p): self._leaders.get((t, p))
            for t in chosen
            for p in sorted(view.topics[t].partitions)
        }

    def leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Leader | None]:
        """Fresh leaders of ``partitions`` (one metadata request for their topics)."""
        wanted = list(partitions)
        self._refresh(sorted({t for t, _ in wanted}))
        return {tp: self._leaders.get(tp) for tp in wanted}

    def offsets(
        self, partitions: Iterable[TopicPartition], time_: int
    ) -> dict[TopicPartition, int]:
        """Earliest (``EARLIEST``) or latest (``LATEST``) offset of each partition.

        Args:
            partitions: The partitions.
            time_: ``offsets.EARLIEST`` (-2) or ``offsets.LATEST`` (-1).

        Returns:
            ``{(topic, partition): offset}``; latest is the next offset to be written.

        Raises:
            BrokerError: A leader refused for a reason other than a moved leader.
            KafkaConnectionError: A partition had no reachable leader after the retries.
        """
        if time_ not in (EARLIEST, LATEST):
            raise ValueError(f"time_ must be EARLIEST or LATEST, got {time_}")
        wanted = list(partitions)
        unknown = [tp for tp in wanted if self._leaders.get(tp) is None]
        if unknown:
            self.leaders(unknown)
        return {tp: self._offset(tp, time_) for tp in wanted}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= the given one (ListOffsets by time, v1+).

        Args:
            timestamps: ``{(topic, partition): ms since the epoch}``.

        Returns:
            ``{(topic, partition): offset}``, or None where no message is that recent.

        Raises:
            BrokerError: A leader refused for a reason other than a moved leader.
            KafkaConnectionError: A partition had no reachable leader after the retries.
        """
        wanted = list(timestamps)
        unknown = [tp for tp in wanted if self._leaders.get(tp) is None]
        if unknown:
            self.leaders(unknown)
        out: dict[TopicPartition, int | None] = {}
        for tp in wanted:
            at = self._offset(tp, int(timestamps[tp]))
            # The client answers "no such message" with the latest offset, which no message
            # has: asked after, a latest above ``at`` means ``at`` holds a matching message.
            out[tp] = at if at < self._offset(tp, LATEST) else None
        return out

    def _offset(self, tp: TopicPartition, time_: int) -> int:
        # A fixed pause (the cap equals the first wait): refresh.leader.backoff.ms means one.
        policy = retry_policy(
            max_retries=self.settings.max_retries,
            backoff_ms=self.settings.retry_backoff_ms,
            backoff_max_ms=self.settings.retry_backoff_ms,
            retry_on=is_transient,
        )
        for attempt in policy:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    self.leaders([tp])
                return self._offset_from_leader(tp, time_)
        raise AssertionError("unreachable: the policy re-raises the last error")

    def _offset_from_leader(self, tp: TopicPartition, time_: int) -> int:
        from hmbclient import EARLIEST_TIME, LATEST_TIME

        leader = self._leaders.get(tp)
        if leader is None:
            raise KafkaConnectionError(f"{tp[0]}-{tp[1]} has no leader")
        when = EARLIEST_TIME if time_ == EARLIEST else LATEST_TIME if time_ == LATEST else time_
        try:
            offsets = self._consumer(leader).get_offsets_before(
                tp[0], tp[1], when, max_num_offsets=1
            )
        except Exception as exc:
            if is_transient(exc):
                self._drop(leader)
            raise
        return int(offsets[0]) if offsets else 0


def find_leader(settings: ReadSettings, topic: str, partition: int) -> Leader:
    """The current leader of one partition (one metadata request).

    Raises:
        KafkaConnectionError: The partition has no leader right now.
    """
    with PartitionPlanner(settings) as planner:
        leader = planner.leaders([(topic, partition)])[(topic, partition)]
    if leader is None:
        raise KafkaConnectionError(f"{topic}-{partition} has no leader right now")
    return leader
