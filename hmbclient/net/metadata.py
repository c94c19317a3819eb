"""Cluster view: brokers, topics, partitions and their leaders, kept fresh from Metadata.

A :class:`ClusterView` is an immutable snapshot; :class:`Metadata` swaps in a new one after
each refresh (one reference assignment), so readers on any thread never lock and never see a
half-updated view. Refreshes are serialised by a lock: a thread that finds a refresh running
waits for it instead of sending a second request.

Refresh triggers: a topic the view does not know, a retriable/invalid-metadata error reported
through :meth:`Metadata.invalidate` (the next ``leader``/``refresh_if_needed`` refetches), and
age (``max_age_ms``; negative = only on errors). Metadata goes to the least-loaded ready broker,
else through the known nodes in turn (brokers from the last answer, then the bootstrap list),
so losing the bootstrap broker does not blind the client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import tenacity

from hmbclient.clock import monotonic_ms
from hmbclient.errors import (
    HmbError,
    KafkaConnectionError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    for_code,
)
from hmbclient.net.client import NetClient
from hmbclient.net.retry import is_retriable
from hmbclient.net.versions import BrokerVersions
from hmbclient.protocol.api.base import ApiKey

__all__ = ["PartitionInfo", "TopicInfo", "ClusterView", "Metadata"]

log = logging.getLogger("hmbclient.net")


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int  # -1: no leader right now
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True)
class TopicInfo:
    topic: str
    partitions: Mapping[int, PartitionInfo]
    error_code: int = 0

    @property
    def partition_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.partitions))


@dataclass(frozen=True)
class ClusterView:
    """One Metadata answer, merged with what earlier answers said about other topics."""

    brokers: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    updated_ms: float = 0.0

    def leader(self, topic: str, partition: int) -> int | None:
        t = self.topics.get(topic)
        if t is None:
            return None
        p = t.partitions.get(partition)
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return None
        return p.leader


def _unusable(info: TopicInfo | None, topic: str) -> HmbError | None:
    """Why a topic's metadata does not give every partition a leader yet (None: it does)."""
    if info is None:
        return UnknownTopicOrPartitionError(f"topic {topic!r} is not in the broker's metadata")
    if info.error_code:
        return for_code(info.error_code)(f"metadata for topic {topic!r}")
    if not info.partitions:
        return LeaderNotAvailableError(f"topic {topic!r} has no partitions yet")
    if any(p.leader < 0 for p in info.partitions.values()):
        return LeaderNotAvailableError(f"topic {topic!r} has partitions without a leader")
    return None


class Metadata:
    """The client's cluster view; see the module docstring."""

    def __init__(
        self,
        client: NetClient,
        *,
        max_age_ms: float = 300_000,
        retry_backoff_ms: float = 100,
        allow_auto_topic_creation: bool = True,
    ) -> None:
        self.client = client
        self.max_age_ms = max_age_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.view = ClusterView()
        self._stale: set[str] = set()
        self._all_stale = False
        self._lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------

    def leader(self, topic: str, partition: int) -> int | None:
        return self.view.leader(topic, partition)

    def invalidate(self, topic: str | None = None) -> None:
        """Mark a topic (or everything) stale after a retriable/invalid-metadata error."""
        if topic is None:
            self._all_stale = True
        else:
            self._stale.add(topic)

    def needs_refresh(self, topics: Iterable[str] = (), now_ms: float | None = None) -> bool:
        v = self.view
        if self._all_stale:
            return True
        for t in topics:
            if t in self._stale or t not in v.topics:
                return True
        if self.max_age_ms >= 0:
            now = monotonic_ms() if now_ms is None else now_ms
            return now - v.updated_ms >= self.max_age_ms
        return False

    def partitions_for(self, topic: str, timeout_ms: float) -> tuple[int, ...]:
        """The partition ids of ``topic``, fetching metadata until it is known and every
        partition has a leader, or the timeout passes.

        Retries (tenacity) are deadline-based: a retriable answer or error is followed by a
        pause of ``retry_backoff_ms`` (less if the deadline is nearer) and another refresh with
        the time left, until less than a last short attempt's worth (10 ms, or a tenth of
        ``timeout_ms``) remains.

        Raises:
            HmbError: UnknownTopicOrPartitionError, LeaderNotAvailableError,
                KafkaConnectionError or RequestTimedOutError when nothing usable came within
                ``timeout_ms``. A broker's own answer ("no such topic") is preferred over the
                timeout of a last, short attempt; a lost broker is reported over either. A
                non-retriable error is raised at once.
        """
        t = self.view.topics.get(topic)
        if t is not None and t.partitions and topic not in self._stale:
            return t.partition_ids
        deadline = monotonic_ms() + timeout_ms
        last_attempt_ms = min(10.0, timeout_ms / 10)
        answered: BaseException | None = None  # what a broker said about the topic, last

        def attempt() -> tuple[int, ...]:
            nonlocal answered
            try:
                view = self.refresh([topic], timeout_ms=max(1.0, deadline - monotonic_ms()))
            except HmbError:
                self._stale.add(topic)
                raise
            problem = _unusable(view.topics.get(topic), topic)
            if problem is None:
                return view.topics[topic].partition_ids
            answered = problem
            self._stale.add(topic)
            raise problem

        def give_up(state: tenacity.RetryCallState) -> NoReturn:
            assert state.outcome is not None
            last = state.outcome.exception()
            assert last is not None
            raise last if answered is None or isinstance(last, KafkaConnectionError) else answered

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_retriable),
            stop=lambda _: deadline - monotonic_ms() <= last_attempt_ms,
            wait=lambda _: max(0.0, min(deadline - monotonic_ms(), self.retry_backoff_ms)) / 1000.0,
            retry_error_callback=give_up,
        )
        return retrying(attempt)

    # -- refreshing ------------------------------------------------------------------------

    def refresh_if_needed(self, topics: Iterable[str] = (), timeout_ms: float | None = None) -> ClusterView:
        topics = list(topics)
        if self.needs_refresh(topics):
            return self.refresh(topics, timeout_ms=timeout_ms)
        return self.view

    def refresh(self, topics: Iterable[str] | None = None, *, timeout_ms: float | None = None) -> ClusterView:
        """Fetch metadata for ``topics`` (plus every topic already known; None = all topics).

        Returns:
            The new view.

        Raises:
            KafkaConnectionError / RequestTimedOutError: no broker answered in time.
        """
        started = monotonic_ms()
        with self._lock:
            v = self.view
            if v.updated_ms > started and topics is not None and all(t in v.topics for t in topics):
                return v  # another thread refreshed while we waited for the lock
            want = None if topics is None else sorted(set(topics) | set(v.topics))
            timeout = self.client.request_timeout_ms if timeout_ms is None else timeout_ms
            resp = self._request(want, timeout)
            view = self._merge(resp, want)
            self.view = view
            self.client.update_brokers(view.brokers)
            if want is None:
                self._stale.clear()
            else:
                self._stale.difference_update(want)
            self._all_stale = False
            return view

    def _request(self, topics: list[str] | None, timeout_ms: float) -> Any:
        deadline = monotonic_ms() + timeout_ms
        auto = self.allow_auto_topic_creation

        def build(versions: BrokerVersions) -> Any:
            v = versions.version(ApiKey.METADATA)
            # v0 has no null: an empty list means "all topics" there.
            t: Any = topics if topics is not None else ([] if v == 0 else None)
            return versions.build(ApiKey.METADATA, topics=t, allow_auto_topic_creation=auto)

        tried: list[int] = []
        first = self.client.least_loaded_node()
        nodes = [first] + [n for n in self.client.known_nodes() if n != first]
        last: BaseException | None = None
        for nid in nodes:
            left = deadline - monotonic_ms()
            if left <= 0:
                break
            tried.append(nid)
            try:
                return self.client.call(nid, build, timeout_ms=left, api_key=ApiKey.METADATA)
            except HmbError as e:
                if not e.retriable:
                    raise
                last = e
                log.info("metadata from node %s failed: %s", nid, e)
        if last is None:
            last = KafkaConnectionError("metadata: no broker to ask")
        raise type(last)(f"metadata request failed on every broker tried {tried}: {last}")

    def _merge(self, resp: Any, want: list[str] | None) -> ClusterView:
        brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        topics: dict[str, TopicInfo] = {} if want is None else dict(self.view.topics)
        for t in resp.topics:
            parts = {
                p.partition: PartitionInfo(t.topic, p.partition, p.leader, tuple(p.replicas), tuple(p.isr), p.error_code)
                for p in t.partitions
            }
            if t.error_code and not parts:
                topics.pop(t.topic, None)
                # Keep the error visible to partitions_for through a partition-less entry.
                topics[t.topic] = TopicInfo(t.topic, {}, t.error_code)
                continue
            topics[t.topic] = TopicInfo(t.topic, parts, t.error_code)
        if want is not None:
            # HMB leaves unknown topics out with no error entry: forget what we asked for and
            # did not get, so callers see "unknown topic" rather than a stale answer.
            answered = {t.topic for t in resp.topics}
            for name in want:
                if name not in answered:
                    topics.pop(name, None)
        return ClusterView(
            brokers=brokers,
            topics=topics,
            controller_id=getattr(resp, "controller_id", -1),
            cluster_id=getattr(resp, "cluster_id", None),
            updated_ms=monotonic_ms(),
        )
