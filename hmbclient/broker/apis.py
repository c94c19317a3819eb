"""KafkaApis: the thin request dispatcher (request -> replica/offset/topic managers -> response).

Each handler turns one decoded request into calls on the managers and builds the response of
the request's own version when their callback fires (possibly later, from a purgatory). It knows
nothing of sockets: the network layer hands it ``(header, request, channel)`` and the channel's
``send(response)`` / ``close(reason)`` carry the answer back in request order.

Versions: every (API, version) in ``hmbclient.protocol.api`` with a handler here is served and
advertised by ApiVersions, and nothing else. An ApiVersions request of a version we do not know
(clients open with v3/v4 and a flexible header) is answered in the v0 layout with
ErrorCode.UNSUPPORTED_VERSION and our ranges (KIP-511), so the client retries with a version we speak.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import Any, Protocol

from hmbclient.broker.metadata import NO_LEADER, ClusterView
from hmbclient.broker.producer_ids import INIT_PRODUCER_ID, ProducerIdManager
from hmbclient.broker.replica_manager import ReplicaManager
from hmbclient.broker.results import AppendResult, FetchInfo, FetchResult
from hmbclient.broker.topics import TOPIC_NAME_RULE, TopicManager, is_valid_topic_name
from hmbclient.clock import wall_ms
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey, ApiVersionsResponse
from hmbclient.protocol.api.base import REQUESTS, Request, Response
from hmbclient.protocol.frame import RequestHeader

__all__ = ["KafkaApis", "RequestChannel", "api_versions_table", "unsupported_api_versions_response"]

log = logging.getLogger("hmbclient.broker.apis")

_CREATE_TOPIC_MESSAGES: dict[int, str] = {
    ErrorCode.TOPIC_ALREADY_EXISTS: "topic already exists",
    ErrorCode.INVALID_PARTITIONS: "number of partitions must be at least 1",
}
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


class RequestChannel(Protocol):
    """Where a handler's answer goes (one per request; the network layer keeps the order)."""

    def send(self, response: Response | None) -> None:
        """Send ``response`` (None: no response, e.g. Produce with acks=0)."""

    def close(self, reason: str) -> None:
        """Close the connection after the responses before this one."""


@cache
def _shape(cls: type, *path: str) -> Any:
    """The namedtuple class of a nested struct of a response class, e.g. a topic entry."""
    st = cls.SCHEMA  # type: ignore[attr-defined]
    for name in path:
        st = st.field(name).item
    return st.values


def _make(shape: Any, **fields: Any) -> Any:
    names = shape._fields
    return shape(**{k: v for k, v in fields.items() if k in names})


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

    Args:
        broker_id: this broker.
        view: cluster metadata.
        replica_manager: log access.
        topics: topic creation / validation.
        offset_manager: the group offset store (None: offset APIs not served).
        producer_ids: producer id source (shared in a cluster; None: a private one).
    """

    def __init__(
        self,
        broker_id: int,
        view: ClusterView,
        replica_manager: ReplicaManager,
        topics: TopicManager,
        offset_manager: Any = None,
        producer_ids: ProducerIdManager | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.view = view
        self.rm = replica_manager
        self.topics = topics
        self.offsets = offset_manager
        self._handlers: dict[int, Callable[[RequestHeader, Any, RequestChannel], None]] = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            INIT_PRODUCER_ID: (producer_ids or ProducerIdManager()).handle_init_producer_id,
        }
        if offset_manager is not None:
            self._handlers[ApiKey.OFFSET_COMMIT] = offset_manager.handle_offset_commit
            self._handlers[ApiKey.OFFSET_FETCH] = offset_manager.handle_offset_fetch
            self._handlers[ApiKey.FIND_COORDINATOR] = offset_manager.handle_find_coordinator
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
            handler(header, request, channel)
        except Exception as e:
            # A bug here must not leave the client waiting: Kafka closes the connection too.
            log.exception("%s v%d (correlation id %d) failed", type(request).__name__, header.api_version, header.correlation_id)
            channel.close(f"internal error: {e}")

    # -- ApiVersions -------------------------------------------------------------------------------
    def handle_api_versions(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        channel.send(type(req).RESPONSE_TYPE.build(error_code=ErrorCode.NONE, api_keys=self.versions, throttle_time_ms=0))

    # -- Metadata ----------------------------------------------------------------------------------
    def handle_metadata(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        allow_auto = v < 4 or bool(req.allow_auto_topic_creation)
        if req.topics is None or (v == 0 and not req.topics):
            names = sorted(self.view.topics())
            codes: dict[str, int] = dict.fromkeys(names, ErrorCode.NONE)
        else:
            names = list(dict.fromkeys(req.topics))
            codes = {n: self.topics.ensure(n, allow_auto_create=allow_auto) for n in names}
        broker_shape = _shape(resp_cls, "brokers")
        brokers = [_make(broker_shape, node_id=b.node_id, host=b.host, port=b.port, rack=None) for b in self.view.brokers()]
        topic_shape = _shape(resp_cls, "topics")
        part_shape = _shape(resp_cls, "topics", "partitions")
        topics = []
        for name in names:
            code = codes[name]
            parts = []
            if code == ErrorCode.NONE:
                leaders = self.view.topics().get(name, [])
                preferred = self.view.preferred(name)
                for p, leader in enumerate(leaders):
                    replica = preferred[p] if p < len(preferred) else leader
                    parts.append(
                        _make(
                            part_shape,
                            error_code=ErrorCode.LEADER_NOT_AVAILABLE if leader == NO_LEADER else ErrorCode.NONE,
                            partition=p,
                            leader=leader,
                            leader_epoch=self.view.leader_epoch(name, p),
                            replicas=[replica],
                            isr=[] if leader == NO_LEADER else [leader],
                            offline_replicas=[replica] if leader == NO_LEADER else [],
                        )
                    )
            topics.append(
                _make(
                    topic_shape,
                    error_code=code,
                    topic=name,
                    is_internal=self.view.is_internal(name),
                    partitions=parts,
                    topic_authorized_operations=INT32_MIN,
                )
            )
        channel.send(
            resp_cls.build(
                throttle_time_ms=0,
                brokers=brokers,
                cluster_id=self.view.cluster_id,
                controller_id=self.view.controller_id(),
                topics=topics,
                cluster_authorized_operations=INT32_MIN,
            )
        )

    # -- Produce -----------------------------------------------------------------------------------
    def handle_produce(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        acks = req.acks
        resp_cls = type(req).RESPONSE_TYPE
        order: list[tuple[str, list[int]]] = []
        early: dict[tuple[str, int], int] = {}
        entries: list[tuple[str, int, Any]] = []
        for t in req.topics:
            topic = t.topic
            parts = [p.partition for p in t.partitions]
            order.append((topic, parts))
            if acks not in (0, 1, -1):
                for p in parts:
                    early[(topic, p)] = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            code = self.topics.ensure(topic)
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
            if acks == 0:
                failed = [tp for tp, r in results.items() if r.error_code] + list(early)
                if failed:
                    # acks=0 has no response to carry an error: Kafka closes the connection so
                    # the producer notices and refreshes its metadata.
                    channel.close(f"produce with acks=0 failed for {failed}")
                else:
                    channel.send(None)
                return
            part_shape = _shape(resp_cls, "topics", "partitions")
            topics = []
            for topic, parts in order:
                plist = []
                for p in parts:
                    code = early.get((topic, p))
                    if code is not None:
                        r = AppendResult(code, -1, -1)
                    else:
                        r = results.get((topic, p), AppendResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1))
                    plist.append(_make(part_shape, partition=p, error_code=r.error_code, base_offset=r.base_offset, log_append_time=-1, log_start_offset=r.log_start_offset))
                topics.append((topic, plist))
            channel.send(resp_cls.build(topics=topics, throttle_time_ms=0))

        if entries:
            self.rm.append_messages(req.timeout_ms, acks, entries, respond)
        else:
            respond({})

    # -- Fetch -------------------------------------------------------------------------------------
    def handle_fetch(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        if v >= 7 and req.session_id != 0:
            # We never hand out fetch sessions (responses carry session_id 0), so an
            # incremental fetch names a session that does not exist.
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, topics=[]))
            return
        max_magic = 0 if v <= 1 else 1 if v <= 3 else 2
        max_bytes = req.max_bytes if v >= 3 else INT32_MAX
        infos: list[FetchInfo] = []
        layout: list[tuple[str, list[tuple[int, int | None]]]] = []
        for t in req.topics:
            topic = t.topic
            known = self.view.has_topic(topic)
            plist: list[tuple[int, int | None]] = []
            for p in t.partitions:
                if not known:
                    plist.append((p.partition, ErrorCode.INVALID_TOPIC_EXCEPTION if not is_valid_topic_name(topic) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                else:
                    plist.append((p.partition, None))
                    infos.append(FetchInfo(topic, p.partition, p.fetch_offset, p.partition_max_bytes))
            layout.append((topic, plist))

        part_shape = _shape(resp_cls, "topics", "partitions")

        def respond(results: list[FetchResult]) -> None:
            it = iter(results)
            topics = []
            for topic, plist in layout:
                parts = []
                for p, code in plist:
                    if code is not None:
                        parts.append(_make(part_shape, partition=p, error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, records=b""))
                        continue
                    r = next(it)
                    parts.append(
                        _make(
                            part_shape,
                            partition=p,
                            error_code=r.error_code,
                            high_watermark=r.high_watermark,
                            last_stable_offset=r.high_watermark,
                            log_start_offset=r.log_start_offset,
                            aborted_transactions=None,
                            records=r.records,
                        )
                    )
                topics.append((topic, parts))
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, topics=topics))

        if not infos:
            respond([])
            return
        self.rm.fetch_messages(req.max_wait_ms, req.min_bytes, max_bytes, infos, max_magic, v >= 3, respond)

    # -- ListOffsets -------------------------------------------------------------------------------
    def handle_list_offsets(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        part_shape = _shape(resp_cls, "topics", "partitions")
        now = wall_ms()
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                code, lg = self.rm.leader_log(t.topic, p.partition)
                if not self.view.has_topic(t.topic) and not is_valid_topic_name(t.topic):
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                epoch = self.view.leader_epoch(t.topic, p.partition)
                if v == 0:
                    offsets: list[int] = []
                    if not code and lg is not None:
                        offsets = lg.offsets_before(p.timestamp, p.max_num_offsets, now)
                    parts.append(_make(part_shape, partition=p.partition, error_code=code, old_style_offsets=offsets))
                    continue
                ts, off = -1, -1
                if not code and lg is not None:
                    if p.timestamp == -1:
                        off = lg.log_end_offset
                    elif p.timestamp == -2:
                        off = lg.log_start_offset
                    else:
                        found = lg.offset_for_timestamp(p.timestamp)
                        if found is not None:
                            off, ts = found
                parts.append(_make(part_shape, partition=p.partition, error_code=code, timestamp=ts, offset=off, leader_epoch=epoch))
            topics.append((t.topic, parts))
        channel.send(resp_cls.build(throttle_time_ms=0, topics=topics))

    # -- CreateTopics ------------------------------------------------------------------------------
    def handle_create_topics(self, header: RequestHeader, req: Any, channel: RequestChannel) -> None:
        v = header.api_version
        resp_cls = type(req).RESPONSE_TYPE
        shape = _shape(resp_cls, "topics")
        validate_only = v >= 1 and bool(req.validate_only)
        out = []
        seen: set[str] = set()
        for t in req.topics:
            msg = None
            code: int
            n = t.num_partitions
            if t.assignments:
                n = len(t.assignments)
            elif n == -1:
                n = self.topics.num_partitions
            if t.topic in seen:
                code, msg = ErrorCode.INVALID_REQUEST, "topic named twice in one request"
            elif not is_valid_topic_name(t.topic):
                code, msg = ErrorCode.INVALID_TOPIC_EXCEPTION, f"illegal topic name: use {TOPIC_NAME_RULE}"
            elif t.replication_factor not in (-1, 1) and not t.assignments:
                code, msg = ErrorCode.INVALID_REPLICATION_FACTOR, "the embedded broker keeps one replica per partition"
            elif validate_only:
                code = ErrorCode.TOPIC_ALREADY_EXISTS if self.view.has_topic(t.topic) else (ErrorCode.INVALID_PARTITIONS if n < 1 else ErrorCode.NONE)
            else:
                code = self.topics.create(t.topic, n)
            seen.add(t.topic)
            if code and msg is None:
                msg = _CREATE_TOPIC_MESSAGES.get(code)
            out.append(_make(shape, topic=t.topic, error_code=code, error_message=msg))
        channel.send(resp_cls.build(throttle_time_ms=0, topics=out))
