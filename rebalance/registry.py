"""One consumer group's znodes, seen by one member: registration, ownership and brokers.

Contract
--------
* :class:`GroupRegistry` writes only what belongs to its member: its ephemeral
  ``/consumers/<g>/ids/<consumer_id>`` node and ephemeral ``/consumers/<g>/owners/<t>/<p>``
  nodes holding one of its thread ids (``<consumer_id>-<n>``). It deletes another node only
  when that node was left behind by one of *this member's own* earlier sessions (its
  ``ephemeralOwner`` is a session id we held before a session loss) -- never a live peer's.
* Claims are idempotent (the kazoo recipes' "node exists counts as success after a suspended
  connection"): a create that fails with NodeExists on a node holding our thread id under
  our current session counts as claimed, so a retried claim after a ConnectionLoss is safe.
* Release deletes an owner node only if it still holds our thread id under our session.
* Many small operations are pipelined: every request of a batch is queued before the first
  answer is awaited, so claiming or releasing 100 partitions costs about one round trip.

Nothing here retries on its own or watches anything for longer than one call: the rebalance
loop (:mod:`rebalance.rebalancer`) owns retries, watches and the order of the steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from rebalance import paths
from rebalance.filters import STATIC, TopicFilter, filter_from_registration

__all__ = [
    "TopicPartition",
    "Registration",
    "BrokerInfo",
    "ClaimOutcome",
    "GroupView",
    "GroupRegistry",
    "thread_index",
    "topic_partitions",
]

log = logging.getLogger("hmbclient.rebalance")

#: ``(topic, partition)``.
TopicPartition = tuple[str, int]

Watch = Callable[[Any], None]


def thread_index(consumer_id: str, thread_id: str) -> int | None:
    """The stream index of ``thread_id`` if it is one of ``consumer_id``'s threads, else None.

    Thread ids are ``<consumer_id>-<n>`` (:func:`rebalance.paths.thread_id`); this is
    :func:`rebalance.paths.parse_thread_id` answering "is it mine, and which stream".
    """
    try:
        owner, index = paths.parse_thread_id(thread_id)
    except ValueError:
        return None
    return index if owner == consumer_id else None


@dataclass(frozen=True)
class Registration:
    """The JSON of ``/consumers/<g>/ids/<consumer_id>`` (Java 0.8 ``ZookeeperConsumerConnector``).

    ``subscription`` maps a topic (static) or the filter's regex (wildcard) to a stream count;
    ``pattern`` is ``"static"``, ``"white_list"`` or ``"black_list"``; ``timestamp`` is the
    registration time in ms, *as a string*, as Java writes it.
    """

    consumer_id: str
    subscription: Mapping[str, int]
    pattern: str = STATIC
    timestamp: str = field(default_factory=lambda: str(paths.wall_ms()))
    version: int = 1

    def to_json(self) -> bytes:
        """The znode payload, byte for byte what Kafka 0.8's ``Json.encode`` writes."""
        return paths.consumer_registration_json(
            dict(self.subscription), self.pattern, self.timestamp
        )

    @classmethod
    def from_json(cls, consumer_id: str, data: bytes) -> Registration:
        """Parse another member's registration (any field order, see ``rebalance.paths``).

        Raises:
            ValueError: not a consumer registration.
        """
        reg = paths.decode_consumer_registration(data)
        return cls(
            consumer_id=consumer_id,
            subscription=dict(reg.subscription),
            pattern=reg.pattern,
            timestamp=str(reg.timestamp_ms),
            version=reg.version,
        )

    def topic_filter(self) -> TopicFilter | None:
        """The wildcard filter of a white_list/black_list registration, None when static."""
        if self.pattern == STATIC:
            return None
        (regex,) = self.subscription
        return filter_from_registration(self.pattern, regex)

    def threads_per_topic(
        self, all_topics: Iterable[str], exclude_internal_topics: bool = True
    ) -> dict[str, list[str]]:
        """Thread ids per topic this member consumes (Java ``TopicCount``).

        Args:
            all_topics: every topic that exists (used only by wildcard registrations).
            exclude_internal_topics: as the consumer config of the same name.

        Returns:
            ``{topic: [<consumer_id>-0, <consumer_id>-1, ...]}``.
        """
        topic_filter = self.topic_filter()
        if topic_filter is None:
            counts = dict(self.subscription)
        else:
            (n,) = self.subscription.values()
            counts = {t: n for t in all_topics if topic_filter.is_topic_allowed(t, exclude_internal_topics)}
        return {t: paths.thread_ids(self.consumer_id, n) for t, n in counts.items()}


@dataclass(frozen=True)
class BrokerInfo:
    """A broker registered in ``/brokers/ids`` (``host``/``port`` of its plaintext listener)."""

    broker_id: int
    host: str
    port: int


@dataclass
class GroupView:
    """One pipelined read of a group's ZooKeeper state (see :meth:`GroupRegistry.snapshot`).

    ``brokers``/``topics`` are None when ``/brokers/ids`` / ``/brokers/topics`` do not exist.
    """

    members: dict[str, Registration]
    ids_cversion: int
    brokers: list[BrokerInfo] | None
    brokers_cversion: int
    topics: list[str] | None


@dataclass
class ClaimOutcome:
    """What one claim attempt achieved.

    ``claimed``: partitions now owned by us (``tp -> thread id``), including ones we already
    held. ``conflicts``: partitions still held by someone else (``tp -> their thread id``, or
    None when the holder vanished between our create and our read: simply try again).
    """

    claimed: dict[TopicPartition, str] = field(default_factory=dict)
    conflicts: dict[TopicPartition, str | None] = field(default_factory=dict)


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def topic_partitions(data: bytes) -> list[int]:
    """Partition ids from a ``/brokers/topics/<topic>`` payload (``{"partitions": {"0": [...]}}``).

    Raises:
        ValueError: the payload has no partition map.
    """
    return sorted(paths.decode_topic_assignment(data))


class GroupRegistry:
    """Registration and ownership znodes of one member of one group.

    Args:
        zk: a started KazooClient (the caller owns its lifecycle and chroot).
        group: the consumer group id.
        consumer_id: this member's id (unique in the group).
        op_timeout_s: how long one pipelined batch may take before it is abandoned.
    """

    def __init__(
        self, zk: KazooClient, group: str, consumer_id: str, op_timeout_s: float = 10.0
    ) -> None:
        self.zk = zk
        self.group = group
        self.consumer_id = consumer_id
        self.op_timeout_s = op_timeout_s
        # Session ids this member held before (after a session loss). Nodes still owned by one
        # of these are our own leftovers and may be deleted at once instead of waiting up to a
        # whole session timeout for the server to expire them.
        self.past_sessions: set[int] = set()
        # A member's registration does not change while its node lives, and a broker's only
        # when it re-registers (a child change): both are read once and cached.
        self._registrations: dict[str, Registration] = {}
        self._brokers: tuple[int, list[BrokerInfo]] | None = None

    # ------------------------------------------------------------------ helpers

    def _await(self, res: Any) -> Any:
        # Every request is bounded: while ZooKeeper is unreachable kazoo queues requests
        # instead of failing them, and the rebalance thread must stay responsive to close().
        return res.get(timeout=self.op_timeout_s)

    @property
    def session_id(self) -> int:
        """The current ZooKeeper session id (0 when there is none)."""
        client_id = self.zk.client_id  # (session id, password), None without a session
        return int(client_id[0]) if client_id else 0

    def _is_ours(self, data: bytes | None, stat: ZnodeStat, tid: str | None = None) -> bool:
        if stat.ephemeralOwner != self.session_id:
            return False
        text = _text(data)
        if tid is not None:
            return text == tid
        return text is not None and thread_index(self.consumer_id, text) is not None

    def _is_our_leftover(self, stat: ZnodeStat) -> bool:
        return stat.ephemeralOwner in self.past_sessions

    # ------------------------------------------------------------------ membership

    @property
    def ids_path(self) -> str:
        """``/consumers/<g>/ids``."""
        return paths.consumer_ids_path(self.group)

    def register(self, registration: Registration) -> None:
        """Create (or refresh) our ephemeral registration node.

        Idempotent. A node left by one of our own earlier sessions is replaced at once.

        Raises:
            CoordinationError-worthy kazoo errors propagate (the caller retries); a live
            foreign node with our id raises NodeExistsError.
        """
        path = paths.consumer_registration_path(self.group, self.consumer_id)
        payload = registration.to_json()
        for _ in range(5):
            try:
                self._await(self.zk.create_async(path, payload, ephemeral=True, makepath=True))
                return
            except NodeExistsError:
                try:
                    data, stat = self._await(self.zk.get_async(path))
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    if data != payload:
                        self._await(self.zk.set_async(path, payload, version=stat.version))
                    return
                if self._is_our_leftover(stat):
                    log.info("replacing registration %s left by our expired session", path)
                    try:
                        self._await(self.zk.delete_async(path, version=stat.version))
                    except NoNodeError:
                        pass
                    continue
                raise
        raise NodeExistsError(f"could not register {path}")

    def unregister(self) -> None:
        """Delete our registration node if it is ours (no error when it is gone)."""
        path = paths.consumer_registration_path(self.group, self.consumer_id)
        try:
            _, stat = self._await(self.zk.get_async(path))
            if stat.ephemeralOwner == self.session_id or self._is_our_leftover(stat):
                self._await(self.zk.delete_async(path, version=stat.version))
        except NoNodeError:
            pass

    def snapshot(
        self,
        member_watch: Watch | None = None,
        broker_watch: Watch | None = None,
        topic_watch: Watch | None = None,
    ) -> GroupView:
        """Members, brokers and topics in (usually) one round trip.

        The three child listings are sent together (each with its watch); then, in a second
        pipelined batch, only the registrations of members not seen before and -- when the
        broker list's child version changed -- the brokers' registrations are read.

        Args:
            member_watch: child watch on ``/consumers/<g>/ids``.
            broker_watch: child watch on ``/brokers/ids`` (exists watch when absent).
            topic_watch: child watch on ``/brokers/topics`` (None: topics are not listed).

        Returns:
            The :class:`GroupView`.
        """
        zk = self.zk
        ids_listing = zk.get_children_async(self.ids_path, watch=member_watch, include_data=True)
        broker_listing = zk.get_children_async(paths.BROKER_IDS_PATH, watch=broker_watch, include_data=True)
        topic_listing = (
            zk.get_children_async(paths.BROKER_TOPICS_PATH, watch=topic_watch)
            if topic_watch is not None
            else None
        )
        member_ids, ids_cversion = self._member_ids(ids_listing, member_watch)
        broker_ids, brokers_cversion = self._broker_ids(broker_listing, broker_watch)
        topics = self._topic_names(topic_listing, topic_watch)

        registration_reads = [
            (member_id, zk.get_async(f"{self.ids_path}/{member_id}"))
            for member_id in member_ids
            if member_id not in self._registrations
        ]
        broker_reads = None
        if broker_ids is not None and (self._brokers is None or self._brokers[0] != brokers_cversion):
            broker_reads = self._send_broker_reads(broker_ids)
        members = self._cached_registrations(member_ids, registration_reads)
        if broker_ids is None:
            brokers = None
        elif broker_reads is not None:
            brokers = self._collect_brokers(broker_reads)
            self._brokers = (brokers_cversion, brokers)
        else:
            assert self._brokers is not None
            brokers = list(self._brokers[1])
        return GroupView(members, ids_cversion, brokers, brokers_cversion, topics)

    def _member_ids(self, listing: Any, watch: Watch | None) -> tuple[list[str], int]:
        # A group nobody joined yet has no ids directory: create it and list it again.
        try:
            children, stat = self._await(listing)
        except NoNodeError:
            self._await(self.zk.ensure_path_async(self.ids_path))
            children, stat = self._await(
                self.zk.get_children_async(self.ids_path, watch=watch, include_data=True)
            )
        return sorted(children), stat.cversion

    def _broker_ids(self, listing: Any, watch: Watch | None) -> tuple[list[str] | None, int]:
        # No /brokers/ids (brokers that do not register in ZooKeeper): watch for its creation.
        try:
            children, stat = self._await(listing)
        except NoNodeError:
            self.zk.exists_async(paths.BROKER_IDS_PATH, watch=watch)
            return None, -1
        return children, stat.cversion

    def _topic_names(self, listing: Any, watch: Watch | None) -> list[str] | None:
        if listing is None:
            return None
        try:
            return sorted(self._await(listing))
        except NoNodeError:
            self.zk.exists_async(paths.BROKER_TOPICS_PATH, watch=watch)
            return None

    def _cached_registrations(
        self, member_ids: list[str], reads: list[tuple[str, Any]]
    ) -> dict[str, Registration]:
        # A member's registration does not change while its node lives: parse the new ones,
        # forget the departed ones. A node that vanished while we read is left out (the ids
        # watch has fired, so the caller reads again).
        for member_id, res in reads:
            try:
                data, _ = self._await(res)
            except NoNodeError:
                continue
            try:
                self._registrations[member_id] = Registration.from_json(member_id, data)
            except ValueError as exc:
                log.warning("ignoring unreadable registration of %s in %s: %s", member_id, self.group, exc)
        live = set(member_ids)
        for departed in [m for m in self._registrations if m not in live]:
            del self._registrations[departed]
        return {m: self._registrations[m] for m in member_ids if m in self._registrations}

    # ------------------------------------------------------------------ ownership

    def owner_path(self, tp: TopicPartition) -> str:
        """``/consumers/<g>/owners/<topic>/<partition>``."""
        return paths.owner_path(self.group, tp[0], tp[1])

    def claim(
        self, wanted: Mapping[TopicPartition, str], watch: Watch | None = None
    ) -> ClaimOutcome:
        """Try once to own every partition in ``wanted`` (``tp -> our thread id``).

        Every create is sent before any answer is awaited. For each NodeExists we read the
        node: our own thread id under our session counts as claimed (idempotent); a leftover
        of one of our past sessions is deleted and re-created; anything else is a conflict,
        and ``watch`` (if given) is set on that node so the caller learns of its release.

        Returns:
            The :class:`ClaimOutcome`.
        """
        out = ClaimOutcome()
        creates = [
            (tp, tid, self.zk.create_async(self.owner_path(tp), tid.encode(), ephemeral=True, makepath=True))
            for tp, tid in wanted.items()
        ]
        exists: list[tuple[TopicPartition, str]] = []
        for tp, tid, res in creates:
            try:
                self._await(res)
                out.claimed[tp] = tid
            except NodeExistsError:
                exists.append((tp, tid))
        if not exists:
            return out
        reads = [(tp, tid, self.zk.get_async(self.owner_path(tp), watch=watch)) for tp, tid in exists]
        retry: list[tuple[TopicPartition, str]] = []
        for tp, tid, res in reads:
            try:
                data, stat = self._await(res)
            except NoNodeError:
                # Released between our create and our read: the caller retries at once.
                out.conflicts[tp] = None
                if watch is not None:
                    # No watch was left on a missing node; make sure the caller wakes.
                    watch(None)
                continue
            if self._is_ours(data, stat, tid):
                out.claimed[tp] = tid
            elif self._is_our_leftover(stat) or (
                stat.ephemeralOwner == self.session_id and _text(data) != tid
            ):
                # Our own stale node (old session), or one of our other threads' (a partition
                # moving between our own streams): replace it.
                try:
                    self._await(self.zk.delete_async(self.owner_path(tp), version=stat.version))
                except NoNodeError:
                    pass
                retry.append((tp, tid))
            else:
                out.conflicts[tp] = _text(data)
        if retry:
            again = self.claim(dict(retry), watch)
            out.claimed.update(again.claimed)
            out.conflicts.update(again.conflicts)
        return out

    def release(self, owned: Mapping[TopicPartition, str]) -> list[TopicPartition]:
        """Delete our owner nodes for ``owned`` (``tp -> our thread id``).

        A node that no longer holds our thread id under our session is left alone.

        Returns:
            The partitions whose node we deleted.
        """
        reads = [(tp, tid, self.zk.get_async(self.owner_path(tp))) for tp, tid in owned.items()]
        deletes = []
        for tp, tid, res in reads:
            try:
                data, stat = self._await(res)
            except NoNodeError:
                continue
            if self._is_ours(data, stat, tid) or (
                self._is_our_leftover(stat) and _text(data) == tid
            ):
                deletes.append((tp, self.zk.delete_async(self.owner_path(tp), version=stat.version)))
        done = []
        for tp, res in deletes:
            try:
                self._await(res)
                done.append(tp)
            except NoNodeError:
                pass
        return done

    def verify(self, owned: Mapping[TopicPartition, str]) -> dict[TopicPartition, str]:
        """Which of ``owned`` still hold our thread id under our session (after a reconnect).

        Returns:
            The subset of ``owned`` that is still ours.
        """
        reads = [(tp, tid, self.zk.get_async(self.owner_path(tp))) for tp, tid in owned.items()]
        still: dict[TopicPartition, str] = {}
        for tp, tid, res in reads:
            try:
                data, stat = self._await(res)
            except NoNodeError:
                continue
            if self._is_ours(data, stat, tid):
                still[tp] = tid
        return still

    def purge_leftovers(self, partitions: Iterable[TopicPartition]) -> int:
        """Delete owner nodes among ``partitions`` left by our past sessions.

        Returns:
            How many nodes were deleted.
        """
        reads = [(tp, self.zk.get_async(self.owner_path(tp))) for tp in partitions]
        deletes = []
        for tp, res in reads:
            try:
                _, stat = self._await(res)
            except NoNodeError:
                continue
            if self._is_our_leftover(stat):
                deletes.append(self.zk.delete_async(self.owner_path(tp), version=stat.version))
        n = 0
        for res in deletes:
            try:
                self._await(res)
                n += 1
            except NoNodeError:
                pass
        return n

    def owners(self, topics: Iterable[str]) -> dict[TopicPartition, str]:
        """Current owner thread id of every claimed partition of ``topics`` (for tools, tests)."""
        out: dict[TopicPartition, str] = {}
        for topic in topics:
            base = paths.consumer_owners_path(self.group, topic)
            try:
                children = self._await(self.zk.get_children_async(base))
            except NoNodeError:
                continue
            reads = [(int(p), self.zk.get_async(f"{base}/{p}")) for p in children if p.isdigit()]
            for p, res in reads:
                try:
                    data, _ = self._await(res)
                except NoNodeError:
                    continue
                out[(topic, p)] = _text(data) or ""
        return out

    # ------------------------------------------------------------------ brokers and topics

    def brokers(self, watch: Watch | None = None) -> list[BrokerInfo] | None:
        """Brokers registered in ``/brokers/ids``; None when that directory does not exist.

        Args:
            watch: a child watch on ``/brokers/ids`` (or an exists watch when it is absent).
        """
        try:
            ids = self._await(self.zk.get_children_async(paths.BROKER_IDS_PATH, watch=watch))
        except NoNodeError:
            self._await(self.zk.exists_async(paths.BROKER_IDS_PATH, watch=watch))
            return None
        return self._collect_brokers(self._send_broker_reads(ids))

    def _send_broker_reads(self, broker_ids: Iterable[str]) -> list[tuple[int, Any]]:
        return [
            (int(i), self.zk.get_async(paths.broker_path(int(i)))) for i in broker_ids if i.isdigit()
        ]

    def _collect_brokers(self, reads: list[tuple[int, Any]]) -> list[BrokerInfo]:
        found = []
        for broker_id, res in reads:
            try:
                reg = paths.decode_broker_registration(self._await(res)[0])
            except NoNodeError:
                continue
            except ValueError as exc:
                log.warning("ignoring unreadable broker registration %s: %s", broker_id, exc)
                continue
            found.append(BrokerInfo(broker_id, reg.host, reg.port))
        return sorted(found, key=lambda b: b.broker_id)

    def partitions(
        self, topics: Iterable[str], watch: Watch | None = None
    ) -> dict[str, list[int]]:
        """Partition ids of each topic registered under ``/brokers/topics`` (absent topics omitted).

        Args:
            topics: topic names.
            watch: a data watch on each topic node (partition count changes).
        """
        reads = [
            (t, self.zk.get_async(f"{paths.BROKER_TOPICS_PATH}/{t}", watch=watch)) for t in topics
        ]
        out: dict[str, list[int]] = {}
        for t, res in reads:
            try:
                data, _ = self._await(res)
            except NoNodeError:
                continue
            try:
                out[t] = topic_partitions(data)
            except ValueError as exc:
                log.warning("ignoring unreadable topic registration %s: %s", t, exc)
        return out
