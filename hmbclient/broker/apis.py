"""KafkaApis: the thin request dispatcher (request -> replica/offset/topic managers -> response).

Each handler turns one decoded request into calls on the managers and builds the response of
the request's own version when their callback fires (possibly later, from a purgatory). It knows
nothing of sockets: the network layer hands it ``(header, request, channel)`` and the channel's
``send(response)`` / ``close(reason)`` carry the answer back in request order.

Versions: every (API, version) in ``hmbclient.protocol.api`` with a handler here is served and
advertised by ApiVersions, and nothing else. An ApiVersions request of a version we do not know
(clients open with v3/v4 and a flexible header) is answered in the v0 layout with
UNSUPPORTED_VERSION and our ranges (KIP-511), so the client retries with a version we speak.

Inter-broker APIs (LeaderAndIsr, UpdateMetadata, StopReplica) are obeyed only when they carry
the controller id and epoch that ZooKeeper names now (``controller_guard``): a request from an
older controller, or from anything else, is answered STALE_CONTROLLER_EPOCH and changes
nothing. ControlledShutdown is served by the active controller only (NOT_CONTROLLER elsewhere).
A follower's Fetch (``replica_id`` >= 0) must name a live broker.

Client quotas (``quotas.py``): with a ``quotas`` manager set, a client's Produce (record bytes
of the request) and Fetch (record bytes of the answer; followers are not quota'd) go through
``_throttle``: the answer carries ``throttle_time_ms`` and the channel's ``throttle`` mutes the
connection (Produce v6+/Fetch v8+, KIP-219) or holds the answer (older versions).

Requests that name a topic this broker does not serve yet (just auto-created, or created by
CreateTopics) wait for it in the topic purgatory, not on a network thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from hmbclient.broker.log.overrides import validate_topic_configs
from hmbclient.broker.metadata import NO_LEADER, BrokerEndpoint, MetadataCache, PartitionMeta
from hmbclient.broker.producer_ids import INIT_PRODUCER_ID, ProducerIdManager
from hmbclient.broker.quotas import CONSUMER, PRODUCER, QuotaManager, user_of
from hmbclient.broker.replica_manager import PartitionState, ReplicaManager
from hmbclient.broker.results import AppendResult, FetchInfo, FetchResult
from hmbclient.broker.security.hooks import allowed, refuse_request
from hmbclient.broker.topics import TopicManager, is_valid_topic_name
from hmbclient.clock import monotonic_ms, wall_ms
from hmbclient.errors import ConfigError, ErrorCode
from hmbclient.protocol.api import ApiKey, ApiVersionsResponse
from hmbclient.protocol.api.base import REQUESTS, Request, Response
from hmbclient.protocol.api.cluster import SECURITY_PROTOCOL_NAMES
from hmbclient.protocol.frame import RequestHeader
from hmbclient.protocol.types import ZERO_UUID

#: ``(controller id, controller epoch)`` of a request -> NONE or STALE_CONTROLLER_EPOCH.
ControllerGuard = Callable[[int, int], int]
#: Serves a ControlledShutdown on the active controller: ``(broker id, answer)`` where the
#: answer takes ``(error code, partitions still led)``.
ShutdownHandler = Callable[[int, Callable[[int, list[tuple[str, int]]], None]], None]

TOPIC_WAIT_MS = 3000

__all__ = ["KafkaApis", "RequestChannel", "api_versions_table", "unsupported_api_versions_response"]

log = logging.getLogger("hmbclient.broker.apis")

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


class RequestChannel(Protocol):
    """Where a handler's answer goes (one per request; the network layer keeps the order)."""

    def send(self, response: Response | None) -> None:
        """Send ``response`` (None: no response, e.g. Produce with acks=0)."""

    def close(self, reason: str) -> None:
        """Close the connection after the responses before this one."""


def api_versions_table(handled: set[int]) -> list[tuple[int, int, int]]:
    """``(api_key, min, max)`` for every API that has both a codec and a handler."""
    out = []
    for key in sorted(handled):
        vs = [v for (k, v) in REQUESTS if k == key]
        if vs:
            out.append((key, min(vs), max(vs)))
    return out


def unsupported_api_versions_response(table: list[tuple[int, int, int]]) -> Response:
    """The v0-layout ApiVersions answer to a version we do not implement (KIP-511)."""
    return ApiVersionsResponse[0](error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=table)


class KafkaApis:
    """Dispatches requests of one broker.

    With an ``authorizer`` (set by the Broker when ``authorizer.class.name`` is), every handler
    first asks it about the request's ``channel.session`` (see ``security.hooks``); a refused
    request is answered with TOPIC/GROUP/CLUSTER_AUTHORIZATION_FAILED and changes nothing.

    Args:
        broker_id: this broker.
        metadata: this broker's metadata cache.
        replica_manager: the local replicas.
        topics: topic creation / validation.
        offset_manager: the group offset store (None: offset APIs not served).
        producer_ids: producer id source (None: a private one).
        controller_guard: checks the controller id/epoch of inter-broker requests (None: they
            are not served).
        controlled_shutdown: serves ControlledShutdown (None: not served).
        group_coordinator: serves the group membership APIs (JoinGroup, SyncGroup, Heartbeat,
            LeaveGroup, ListGroups, DescribeGroups, DeleteGroups; None: not served).
        configs: serves DescribeConfigs (a ``broker.configs.ConfigDescriber``; None: not served).
        transactions: the transaction coordinator (``broker.transaction.coordinator``): serves
            InitProducerId, a transactional id through its decisions, a null one on the
            idempotent path (None: ``producer_ids`` alone), AddPartitionsToTxn,
            AddOffsetsToTxn, EndTxn, WriteTxnMarkers, DescribeTransactions and
            ListTransactions; with ``offset_manager``,
            TxnOffsetCommit.
        admin: serves the admin APIs (a ``broker.admin_apis.AdminApis``; None: not served).
    """

    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        topics: TopicManager,
        offset_manager: Any = None,
        producer_ids: ProducerIdManager | None = None,
        controller_guard: ControllerGuard | None = None,
        controlled_shutdown: ShutdownHandler | None = None,
        group_coordinator: Any = None,
        configs: Any = None,
        transactions: Any = None,
        admin: Any = None,
    ) -> None:
        self.authorizer: Any = None
        #: client quotas (set by the Broker; None: no quotas) and the sensors of throttling
        self.quotas: QuotaManager | None = None
        self.metrics: Any = None
        #: the listener brokers reach each other on (set by the Broker): UpdateMetadata's
        #: address of that listener is where this broker fetches from and sends to.
        self.inter_broker_listener = "PLAINTEXT"
        self.broker_id = broker_id
        self.metadata = metadata
        self.replicas = replica_manager
        self.topics = topics
        self.offsets = offset_manager
        self.controller_guard = controller_guard
        self.controlled_shutdown = controlled_shutdown
        self._handlers: dict[int, Callable[[RequestHeader, Any, RequestChannel], None]] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKey.SASL_HANDSHAKE: self.handle_sasl_out_of_place,
            ApiKey.SASL_AUTHENTICATE: self.handle_sasl_out_of_place,
            INIT_PRODUCER_ID: (producer_ids or ProducerIdManager()).handle_init_producer_id,
        }
        if transactions is not None:
            # InitProducerId with a transactional id; a null id still gets a plain producer id
            self._handlers[INIT_PRODUCER_ID] = transactions.handle_init_producer_id
            self._handlers[ApiKey.ADD_PARTITIONS_TO_TXN] = transactions.handle_add_partitions_to_txn
            self._handlers[ApiKey.ADD_OFFSETS_TO_TXN] = transactions.handle_add_offsets_to_txn
            self._handlers[ApiKey.END_TXN] = transactions.handle_end_txn
            self._handlers[ApiKey.WRITE_TXN_MARKERS] = transactions.handle_write_txn_markers
            self._handlers[ApiKey.DESCRIBE_TRANSACTIONS] = transactions.handle_describe_transactions
            self._handlers[ApiKey.LIST_TRANSACTIONS] = transactions.handle_list_transactions
            transactions.allowed = self._allowed
            if offset_manager is not None:
                self._handlers[ApiKey.TXN_OFFSET_COMMIT] = offset_manager.handle_txn_offset_commit
        if offset_manager is not None:
            self._handlers[ApiKey.OFFSET_COMMIT] = offset_manager.handle_offset_commit
            self._handlers[ApiKey.OFFSET_FETCH] = offset_manager.handle_offset_fetch
            self._handlers[ApiKey.FIND_COORDINATOR] = offset_manager.handle_find_coordinator
        if group_coordinator is not None:
            self._handlers[ApiKey.JOIN_GROUP] = group_coordinator.handle_join_group
            self._handlers[ApiKey.SYNC_GROUP] = group_coordinator.handle_sync_group
            self._handlers[ApiKey.HEARTBEAT] = group_coordinator.handle_heartbeat
            self._handlers[ApiKey.LEAVE_GROUP] = group_coordinator.handle_leave_group
            self._handlers[ApiKey.LIST_GROUPS] = group_coordinator.handle_list_groups
            self._handlers[ApiKey.DESCRIBE_GROUPS] = group_coordinator.handle_describe_groups
            self._handlers[ApiKey.DELETE_GROUPS] = group_coordinator.handle_delete_groups
            self._handlers[ApiKey.CONSUMER_GROUP_HEARTBEAT] = group_coordinator.handle_consumer_group_heartbeat
            self._handlers[ApiKey.CONSUMER_GROUP_DESCRIBE] = group_coordinator.handle_consumer_group_describe
        if configs is not None:
            self._handlers[ApiKey.DESCRIBE_CONFIGS] = lambda h, r, ch: configs.handle_describe_configs(h, r, ch, self._allowed)
        if admin is not None:
            for key, fn in admin.handlers().items():
                self._handlers[key] = self._with_allowed(fn)
        if controller_guard is not None:
            self._handlers[ApiKey.LEADER_AND_ISR] = self.handle_leader_and_isr
            self._handlers[ApiKey.UPDATE_METADATA] = self.handle_update_metadata
            self._handlers[ApiKey.STOP_REPLICA] = self.handle_stop_replica
        if controlled_shutdown is not None:
            self._handlers[ApiKey.CONTROLLED_SHUTDOWN] = self.handle_controlled_shutdown
        self.versions = api_versions_table(set(self._handlers))

    def handles(self, api_key: int) -> bool:
        return api_key in self._handlers

    def handle(self, header: RequestHeader, request: Request, channel: RequestChannel) -> None:
        """Serve one request; the answer goes to ``channel`` now or later (never raises)."""
        handler = self._handlers.get(header.api_key)
        if handler is None:
            channel.close(f"no handler for api key {header.api_key}")
            return
        try:
            if self.authorizer is not None and refuse_request(self.authorizer, header, request, channel, handler):
                return
            handler(header, request, channel)
        except Exception as e:
            # A bug here must not leave the client waiting: Kafka closes the connection too.
            log.exception("%s v%d (correlation id %d) failed", type(request).__name__, header.api_version, header.correlation_id)
            channel.close(f"internal error: {e}")

    def handle_local(self, request: Request, client_id: str = "controller") -> Any:
        """Serve a request from this broker itself (the controller's requests to its own
        broker) and return the answer. Only for handlers that answer at once."""
        box: list[Any] = []

        class _Local:
            def send(self, response: Response | None) -> None:
                box.append(response)

            def close(self, reason: str) -> None:
                box.append(None)

        header = RequestHeader(request.API_KEY, request.API_VERSION, 0, client_id)
        # Through the codec, so the handler sees exactly what it would from the wire.
        decoded = type(request).decode(memoryview(request.encode()))
        self.handle(header, decoded, _Local())
        if not box:
            raise RuntimeError(f"{type(request).__name__} was not answered at once")
        return box[0]

    def serve(self, handlers: dict[int, Callable[..., None]]) -> None:
        """Serve more APIs: ``api key -> handler(header, request, channel, allowed)``
        (the client quota APIs, set up after the quota manager)."""
        for key, fn in handlers.items():
            self._handlers[key] = self._with_allowed(fn)
        self.versions = api_versions_table(set(self._handlers))

    def _with_allowed(self, fn: Callable[..., None]) -> Callable[[RequestHeader, Any, RequestChannel], None]:
        return lambda h, r, ch: fn(h, r, ch, self._allowed)

    def _allowed(self, channel: RequestChannel, operation: str, resource_type: str, name: str = "kafka-cluster") -> bool:
        return allowed(self.authorizer, channel, operation, resource_type, name)

    def _may_create(self, channel: RequestChannel, topic: str) -> bool:
        return self._allowed(channel, "Create", "Cluster") or self._allowed(channel, "Create", "Topic", topic)

    def handle_sasl_out_of_place(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        """SaslHandshake/SaslAuthenticate that reached the APIs: on a listener without SASL, or
        after authentication outside a KIP-368 re-authentication (a SaslHandshake the network
        layer takes): ILLEGAL_SASL_STATE."""
        channel.send(type(req).RESPONSE_TYPE.build(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[], error_message="no SASL on this connection now", auth_bytes=b"", session_lifetime_ms=0))

    # -- ApiVersions -------------------------------------------------------------------------------
    def handle_api_versions(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        channel.send(type(req).RESPONSE_TYPE.build(error_code=ErrorCode.NONE, api_keys=self.versions, throttle_time_ms=0))

    # -- Metadata ----------------------------------------------------------------------------------
    def handle_metadata(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        allow_auto = v < 4 or bool(req.allow_auto_topic_creation)
        by_id: list[tuple[int, str | None, Any]] = []  # entries asked by topic id we answer with an error
        if req.topics is None or (v == 0 and not req.topics):
            names = sorted(n for n in self.metadata.topics() if self._allowed(channel, "Describe", "Topic", n))
            codes: dict[str, int] = dict.fromkeys(names, ErrorCode.NONE)
        else:
            names = list(dict.fromkeys(req.topics if v < 9 else self._metadata_names(v, req.topics, channel, by_id)))
            codes = {n: self._metadata_topic_code(channel, n, allow_auto) for n in names}
        session = getattr(channel, "session", None)
        here, here_listener = getattr(session, "advertised", None), getattr(session, "listener", None)

        def answer() -> None:
            channel.send(self._metadata_response(resp_cls, names, codes, here, here_listener, by_id))

        waiting = [n for n in names if codes[n] == ErrorCode.NONE and not self.metadata.is_ready(n)]
        if waiting:
            self.topics.when_ready(waiting, TOPIC_WAIT_MS, answer)
        else:
            answer()

    def _metadata_names(self, v: int, entries: Any, channel: RequestChannel, by_id: list[tuple[int, str | None, Any]]) -> list[str]:
        """The names a v9+ request asks for. Asking by topic id (KIP-516) is v12+ (v10-11:
        INVALID_REQUEST, as Kafka); an id we do not know, or whose topic the session may not
        Describe, is UNKNOWN_TOPIC_ID with a null name (nothing about the topic leaks)."""
        names = []
        for e in entries:
            tid = getattr(e, "topic_id", ZERO_UUID)
            if tid == ZERO_UUID and e.topic is not None:
                names.append(e.topic)
            elif v < 12:
                by_id.append((ErrorCode.INVALID_REQUEST, e.topic or "", tid))
            else:
                name = self.topics.topic_name(tid)
                if name is None or not self._allowed(channel, "Describe", "Topic", name):
                    by_id.append((ErrorCode.UNKNOWN_TOPIC_ID, None, tid))
                else:
                    names.append(name)
        return names

    def _metadata_topic_code(self, channel: RequestChannel, name: str, allow_auto: bool) -> int:
        """A named topic's code: Describe needed; a topic the request would auto-create but the
        session may not Create is TOPIC_AUTHORIZATION_FAILED (as Kafka), and not created."""
        if not self._allowed(channel, "Describe", "Topic", name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        may_create = allow_auto and self._may_create(channel, name)
        code = self.topics.ensure(name, allow_auto_create=may_create)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and allow_auto and self.topics.auto_create and not may_create:
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return code

    def _metadata_response(
        self,
        resp_cls: Any,
        names: list[str],
        codes: dict[str, int],
        here: tuple[str, int] | None = None,
        here_listener: str | None = None,
        by_id: list[tuple[int, str | None, Any]] | None = None,
    ) -> Response:
        broker_shape = resp_cls.nested("brokers")
        # A client on another listener than the registered one is told this broker's address
        # on the listener it came in on (``here``), so it stays on its security protocol.
        # Other brokers are listed at their address on that same listener, and left out when
        # they have no such listener (as Kafka does).
        listener = here_listener
        brokers = []
        for b in self.metadata.brokers():
            addr = here if here and b.node_id == self.broker_id else b.address(listener)
            if addr is not None:
                brokers.append(broker_shape.build(node_id=b.node_id, host=addr[0], port=addr[1], rack=None))
        live = self.metadata.live_broker_ids()
        topic_shape = resp_cls.nested("topics")
        part_shape = resp_cls.nested("topics", "partitions")
        with_ids = "topic_id" in topic_shape.names  # v10+
        topics = [topic_shape.build(error_code=c, topic=n, topic_id=t, partitions=[]) for c, n, t in by_id or ()]
        for name in names:
            code = codes[name]
            parts = []
            if code == ErrorCode.NONE:
                metas = self.metadata.topic_partitions(name)
                if not metas:
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                for p, meta in enumerate(metas):
                    parts.append(self._partition_metadata(part_shape, p, meta, live))
            topics.append(
                topic_shape.build(
                    error_code=code,
                    topic=name,
                    topic_id=(self.topics.topic_id(name) or ZERO_UUID) if with_ids else ZERO_UUID,
                    is_internal=self.metadata.is_internal(name),
                    partitions=parts,
                    topic_authorized_operations=INT32_MIN,
                )
            )
        return resp_cls.build(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.metadata.cluster_id,
            controller_id=self.metadata.controller_id(),
            topics=topics,
            cluster_authorized_operations=INT32_MIN,
        )

    @staticmethod
    def _partition_metadata(part_shape: Any, p: int, meta: PartitionMeta, live: set[int]) -> Any:
        online = meta.leader != NO_LEADER and meta.leader in live
        return part_shape.build(
            error_code=ErrorCode.NONE if online else ErrorCode.LEADER_NOT_AVAILABLE,
            partition=p,
            leader=meta.leader if online else NO_LEADER,
            leader_epoch=meta.leader_epoch,
            replicas=list(meta.replicas),
            isr=list(meta.isr),
            offline_replicas=meta.offline_replicas(live),
        )

    def _throttle(self, header: RequestHeader, channel: RequestChannel, fetch: bool, nbytes: int) -> int:
        """Record a client's bytes against its quota; throttle the channel; the throttle ms."""
        quotas = self.quotas
        if quotas is None or not quotas.enabled():
            return 0
        session = getattr(channel, "session", None)
        user = user_of(session.principal if session is not None else None)
        ms = quotas.record(CONSUMER if fetch else PRODUCER, user, header.client_id or "", nbytes, monotonic_ms())
        if self.metrics is not None:
            self.metrics.throttled(fetch, ms)
        hold = getattr(channel, "throttle", None)
        if ms and hold is not None:
            hold(ms, header.api_version >= (8 if fetch else 6))
        return ms

    # -- Produce -----------------------------------------------------------------------------------
    def handle_produce(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        acks = req.acks
        resp_cls = type(req).RESPONSE_TYPE
        order: list[tuple[str, list[int]]] = []
        early: dict[tuple[str, int], int] = {}
        entries: list[tuple[str, int, Any]] = []
        waiting: list[str] = []
        # A transactional producer needs Write on its TransactionalId (Kafka refuses the whole request).
        txn = getattr(req, "transactional_id", None)
        txn_denied = txn is not None and not self._allowed(channel, "Write", "TransactionalId", txn)
        for t in req.topics:
            topic = t.topic
            parts = [p.partition for p in t.partitions]
            order.append((topic, parts))
            if txn_denied:
                for p in parts:
                    early[(topic, p)] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                continue
            if acks not in (0, 1, -1):
                for p in parts:
                    early[(topic, p)] = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            if not self._allowed(channel, "Write", "Topic", topic):
                for p in parts:  # refused before ensure(): not even auto-created
                    early[(topic, p)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            code = self.topics.ensure(topic, allow_auto_create=self._may_create(channel, topic))
            if not code and not self.metadata.is_ready(topic):
                waiting.append(topic)
            for p in t.partitions:
                if code:
                    early[(topic, p.partition)] = code
                    continue
                recs = p.records
                # Produce v3+ must carry RecordBatch v2 (the magic byte sits at offset 16 of
                # every entry format); Kafka rejects anything else as an invalid record.
                if v >= 3 and recs is not None and len(recs) > 16 and recs[16] != 2:
                    early[(topic, p.partition)] = ErrorCode.INVALID_RECORD
                    continue
                entries.append((topic, p.partition, recs))

        def respond(results: dict[tuple[str, int], AppendResult]) -> None:
            throttle_ms = self._throttle(header, channel, False, sum(len(e[2]) for e in entries if e[2] is not None))
            if acks == 0:
                failed = [tp for tp, r in results.items() if r.error_code] + list(early)
                if failed:
                    # acks=0 has no response to carry an error: Kafka closes the connection so
                    # the producer notices and refreshes its metadata.
                    channel.close(f"produce with acks=0 failed for {failed}")
                else:
                    channel.send(None)
                return
            row = resp_cls.nested("topics", "partitions").row("partition", "error_code", "base_offset", "log_append_time", "log_start_offset")
            topics = []
            for topic, parts in order:
                plist = []
                for p in parts:
                    code = early.get((topic, p)) if early else None
                    if code is not None:
                        plist.append(row(p, code, -1, -1, -1))
                        continue
                    r = results.get((topic, p))
                    if r is None:
                        plist.append(row(p, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1))
                    else:
                        plist.append(row(p, r.error_code, r.base_offset, -1, r.log_start_offset))
                topics.append((topic, plist))
            channel.send(resp_cls.build(topics=topics, throttle_time_ms=throttle_ms))

        def append() -> None:
            if entries:
                self.replicas.append_messages(req.timeout_ms, acks, entries, respond)
            else:
                respond({})

        if waiting:
            self.topics.when_ready(waiting, min(max(req.timeout_ms, 0), TOPIC_WAIT_MS), append)
        else:
            append()

    # -- Fetch -------------------------------------------------------------------------------------
    def handle_fetch(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        if v >= 7 and req.session_id != 0:
            # We never hand out fetch sessions (responses carry session_id 0), so an
            # incremental fetch names a session that does not exist.
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, topics=[]))
            return
        replica_id = req.replica_id if req.replica_id >= 0 else -1
        max_magic = 0 if v <= 1 else 1 if v <= 3 else 2
        max_bytes = req.max_bytes if v >= 3 else INT32_MAX
        infos: list[FetchInfo] = []
        layout: list[tuple[str, list[tuple[int, int | None]]]] = []
        refused = replica_id >= 0 and replica_id not in self.metadata.live_broker_ids()
        # read_committed (Fetch v4+, KIP-98): consumers read below the last stable offset
        isolation = req.isolation_level if v >= 4 and replica_id < 0 else 0
        cluster_ok = replica_id < 0 or self._allowed(channel, "ClusterAction", "Cluster")
        for t in req.topics:
            topic = t.topic
            known = self.metadata.has_topic(topic)
            plist: list[tuple[int, int | None]] = []
            denied = (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not cluster_ok
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED if replica_id < 0 and not self._allowed(channel, "Read", "Topic", topic)
                else None
            )
            for p in t.partitions:
                if denied is not None:
                    plist.append((p.partition, denied))
                elif refused:
                    plist.append((p.partition, ErrorCode.REPLICA_NOT_AVAILABLE))
                elif not known:
                    plist.append((p.partition, ErrorCode.INVALID_TOPIC_EXCEPTION if not is_valid_topic_name(topic) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                else:
                    plist.append((p.partition, None))
                    # a follower's log start (v5+): the leader's low watermark for DeleteRecords
                    start = p.log_start_offset if v >= 5 and replica_id >= 0 else -1
                    infos.append(FetchInfo(topic, p.partition, p.fetch_offset, p.partition_max_bytes, isolation, start))
            layout.append((topic, plist))

        row = resp_cls.nested("topics", "partitions").row("partition", "error_code", "high_watermark", "last_stable_offset", "log_start_offset", "aborted_transactions", "records")

        def respond(results: list[FetchResult]) -> None:
            it = iter(results)
            topics = []
            for topic, plist in layout:
                parts = []
                for p, code in plist:
                    if code is not None:
                        parts.append(row(p, code, -1, -1, -1, None, b""))
                        continue
                    r = next(it)
                    lso = r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark
                    parts.append(row(p, r.error_code, r.high_watermark, lso, r.log_start_offset, r.aborted, r.records))
                topics.append((topic, parts))
            throttle_ms = 0 if replica_id >= 0 else self._throttle(header, channel, True, sum(len(r.records) for r in results))
            channel.send(resp_cls.build(throttle_time_ms=throttle_ms, error_code=ErrorCode.NONE, session_id=0, topics=topics))

        if not infos:
            respond([])
            return
        self.replicas.fetch_messages(req.max_wait_ms, req.min_bytes, max_bytes, infos, max_magic, v >= 3, respond, replica_id)

    # -- ListOffsets -------------------------------------------------------------------------------
    def handle_list_offsets(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        part_shape = resp_cls.nested("topics", "partitions")
        # Consumers see committed messages only: "latest" is the high watermark; a follower
        # (replica_id >= 0) asks for the leader's log end.
        from_replica = req.replica_id >= 0
        now = wall_ms()
        topics = []
        for t in req.topics:
            parts = []
            described = self._allowed(channel, "Describe", "Topic", t.topic)
            for p in t.partitions:
                code, partition_log = self.replicas.leader_log(t.topic, p.partition)
                if not self.metadata.has_topic(t.topic) and not is_valid_topic_name(t.topic):
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                if not described:
                    code, partition_log = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
                epoch = self.metadata.leader_epoch(t.topic, p.partition)
                end = -1
                if partition_log is not None:
                    # read_committed (v2+): "latest" is the last stable offset (KIP-98)
                    committed = v >= 2 and getattr(req, "isolation_level", 0) == 1
                    end = partition_log.log_end_offset if from_replica else partition_log.last_stable_offset if committed else partition_log.high_watermark
                if v == 0:
                    offsets: list[int] = []
                    if not code and partition_log is not None:
                        offsets = sorted({min(o, end) for o in partition_log.offsets_before(p.timestamp, p.max_num_offsets, now)}, reverse=True)
                    parts.append(part_shape.build(partition=p.partition, error_code=code, old_style_offsets=offsets))
                    continue
                ts, off = -1, -1
                if not code and partition_log is not None:
                    if p.timestamp == -1:
                        off = end
                    elif p.timestamp == -2:
                        off = partition_log.log_start_offset
                    else:
                        found = partition_log.offset_for_timestamp(p.timestamp)
                        if found is not None and found[0] < end:
                            off, ts = found
                parts.append(part_shape.build(partition=p.partition, error_code=code, timestamp=ts, offset=off, leader_epoch=epoch))
            topics.append((t.topic, parts))
        channel.send(resp_cls.build(throttle_time_ms=0, topics=topics))

    # -- CreateTopics ------------------------------------------------------------------------------
    def handle_create_topics(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        shape = resp_cls.nested("topics")
        validate_only = v >= 1 and bool(req.validate_only)
        results: list[tuple[str, int, str | None]] = []
        created: list[str] = []
        seen: set[str] = set()
        for t in req.topics:
            code: int
            msg: str | None
            assignment = {a.partition: list(a.broker_ids) for a in t.assignments} if t.assignments else None
            if t.topic in seen:
                code, msg = ErrorCode.INVALID_REQUEST, "topic named twice in one request"
            elif not self._may_create(channel, t.topic):
                code, msg = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            else:
                n = t.num_partitions if t.num_partitions != -1 else self.topics.num_partitions
                try:
                    overrides = validate_topic_configs({c.name: c.value for c in t.configs or ()})
                except ConfigError as e:
                    code, msg = ErrorCode.INVALID_CONFIG, str(e)
                else:
                    code, msg = self.topics.create_with_message(t.topic, n, t.replication_factor, assignment=assignment, validate_only=validate_only, configs=overrides)
                if code == ErrorCode.NONE and not validate_only:
                    created.append(t.topic)
            seen.add(t.topic)
            results.append((t.topic, code, msg))

        def answer() -> None:
            out = []
            for topic, code, msg in results:
                if topic in created and not self.metadata.is_ready(topic):
                    code, msg = ErrorCode.REQUEST_TIMED_OUT, "created, but its leaders were not elected within the request's timeout"
                out.append(shape.build(topic=topic, error_code=code, error_message=msg))
            channel.send(resp_cls.build(throttle_time_ms=0, topics=out))

        if created and req.timeout_ms > 0:
            self.topics.when_ready(created, req.timeout_ms, answer)
        else:
            answer()

    # -- inter-broker: LeaderAndIsr, UpdateMetadata, StopReplica --------------------------------------
    def _check_controller(self, controller_id: int, controller_epoch: int) -> int:
        assert self.controller_guard is not None
        return self.controller_guard(controller_id, controller_epoch)

    def handle_leader_and_isr(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        code = self._check_controller(req.controller_id, req.controller_epoch)
        if code:
            log.warning("LeaderAndIsr from controller %d epoch %d refused (error %d)", req.controller_id, req.controller_epoch, code)
            channel.send(resp_cls.build(error_code=code, partition_errors=[]))
            return
        states = [
            PartitionState(s.topic, s.partition, s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas), s.zk_version, s.controller_epoch)
            for s in req.ungrouped_partition_states
        ]
        leaders = {b.broker_id: BrokerEndpoint(b.broker_id, b.host_name, b.port) for b in req.live_leaders}
        for b in self.metadata.brokers():
            leaders.setdefault(b.node_id, b)
        results = self.replicas.become_leader_or_follower(states, leaders)
        channel.send(resp_cls.build(error_code=ErrorCode.NONE, partition_errors=[(t, p, c) for (t, p), c in sorted(results.items())]))

    def handle_update_metadata(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        code = self._check_controller(req.controller_id, req.controller_epoch)
        if code:
            log.warning("UpdateMetadata from controller %d epoch %d refused (error %d)", req.controller_id, req.controller_epoch, code)
            channel.send(resp_cls.build(error_code=code))
            return
        v = header.api_version
        if v == 0:
            brokers = [BrokerEndpoint(b.id, b.host, b.port) for b in req.live_brokers]
        else:
            brokers = []
            for b in req.live_brokers:
                # v1-2 name an endpoint by its security protocol, v3+ by its listener name.
                eps = tuple((e.listener if v >= 3 else SECURITY_PROTOCOL_NAMES.get(e.security_protocol, "?"), e.host, e.port) for e in b.endpoints)
                if eps:
                    inter = next((e for e in eps if e[0] == self.inter_broker_listener), eps[0])
                    brokers.append(BrokerEndpoint(b.id, inter[1], inter[2], eps))
        if v >= 5:
            flat = [(t.topic, s) for t in req.topic_states for s in t.partition_states]
        else:
            flat = [(s.topic, s) for s in req.ungrouped_partition_states]
        states = [
            (topic, s.partition, PartitionMeta(s.leader, s.leader_epoch, tuple(s.isr), tuple(s.replicas), s.zk_version, s.controller_epoch))
            for topic, s in flat
        ]
        self.metadata.update(req.controller_id, req.controller_epoch, brokers, states)
        channel.send(resp_cls.build(error_code=ErrorCode.NONE))

    def handle_stop_replica(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        code = self._check_controller(req.controller_id, req.controller_epoch)
        if code:
            channel.send(resp_cls.build(error_code=code, partition_errors=[]))
            return
        results = self.replicas.stop_replicas([(p.topic, p.partition) for p in req.ungrouped_partitions], bool(req.delete_partitions))
        channel.send(resp_cls.build(error_code=ErrorCode.NONE, partition_errors=[(t, p, c) for (t, p), c in sorted(results.items())]))

    def handle_controlled_shutdown(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        assert self.controlled_shutdown is not None

        def answer(code: int, remaining: list[tuple[str, int]]) -> None:
            channel.send(resp_cls.build(error_code=code, remaining_partitions=[list(tp) for tp in remaining]))

        self.controlled_shutdown(req.broker_id, answer)

    # -- OffsetForLeaderEpoch (followers truncating, KIP-101) ------------------------------------------
    def handle_offset_for_leader_epoch(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        part_shape = resp_cls.nested("topics", "partitions")
        topics = []
        for t in req.topics:
            parts = []
            described = self._allowed(channel, "ClusterAction", "Cluster") or self._allowed(channel, "Describe", "Topic", t.topic)
            for p in t.partitions:
                code, epoch, end = self.replicas.last_offset_for_leader_epoch(t.topic, p.partition, p.leader_epoch)
                if not described:
                    code, epoch, end = ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1
                current = getattr(p, "current_leader_epoch", -1) if v >= 2 else -1
                if not code and current >= 0:
                    mine = self.metadata.leader_epoch(t.topic, p.partition)
                    part = self.replicas.partition(t.topic, p.partition)
                    mine = part.leader_epoch if part is not None else mine
                    if current < mine:
                        code, epoch, end = ErrorCode.FENCED_LEADER_EPOCH, -1, -1
                    elif current > mine:
                        code, epoch, end = ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1
                parts.append(part_shape.build(error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end))
            topics.append((t.topic, parts))
        channel.send(resp_cls.build(throttle_time_ms=0, topics=topics))
