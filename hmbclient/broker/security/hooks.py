"""Authorization hooks used by ``KafkaApis`` (Kafka's ``authorize`` calls in ``KafkaApis``).

``allowed(authorizer, channel, operation, resource_type, name)`` is the one question every
handler asks. Who asks is ``channel.session`` (set by the network layer for every client
request); a channel without that attribute is the broker talking to itself (the controller's
requests to its own broker through ``handle_local``) and is always allowed. A session of None
(a client that has not authenticated) is never allowed.

``refuse_request`` is the hook for the APIs whose handlers live outside ``KafkaApis`` (the group
APIs, served by the offset manager / group coordinator) and for the inter-broker APIs: it
answers a refused request itself, with the Kafka error code in every error field of the
response, and returns True; the handler then never runs, so nothing is stored.

Operations, as in Kafka: group APIs need Read on the Group (FindCoordinator and OffsetFetch:
Describe, which Read implies); OffsetCommit also needs Read on each Topic and OffsetFetch
Describe on each Topic (refused topics get TOPIC_AUTHORIZATION_FAILED, the rest is served;
OffsetFetch of all topics leaves them out); FindCoordinator for a transaction needs Describe on
the TransactionalId; inter-broker APIs (LeaderAndIsr, UpdateMetadata, StopReplica,
ControlledShutdown) need ClusterAction on the Cluster; InitProducerId needs Write on its
TransactionalId when it names one (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), else
IdempotentWrite on the Cluster or Write on some Topic; ListGroups shows
only the groups the session may Describe, DescribeGroups/DeleteGroups need Describe/Delete on
each Group; ConsumerGroupHeartbeat (KIP-848) needs Read on the Group and Describe on each
subscribed Topic (TOPIC_AUTHORIZATION_FAILED); ConsumerGroupDescribe also needs Describe on
every topic of its members' assignments and target assignments: a group naming one the session
may not see is answered TOPIC_AUTHORIZATION_FAILED without its members (Kafka 4.0+, KAFKA-18813:
per group, so no topic name leaks; the other groups are answered).
"""

from __future__ import annotations

from typing import Any

from hmbclient.broker.security.authorizer import CLUSTER_NAME, Authorizer
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey

__all__ = ["allowed", "refusal", "refuse_request", "INTERNAL"]

INTERNAL = object()

_CLUSTER_ACTION_APIS = {ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA, ApiKey.CONTROLLED_SHUTDOWN, ApiKey.WRITE_TXN_MARKERS}
# Write on the request's TransactionalId (Kafka); AddOffsetsToTxn and TxnOffsetCommit also
# need Read on the group (and TxnOffsetCommit Read on each topic), checked after it.
_TXN_ID_APIS = {ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT}
_GROUP_OPERATION = {ApiKey.FIND_COORDINATOR: "Describe", ApiKey.OFFSET_FETCH: "Describe"}
# OffsetDelete checks its group (Delete) and topics (Read) in its handler (broker/admin_apis.py),
# which answers a refused group with the top-level error only, as Kafka does.
_HANDLER_CHECKED = {ApiKey.OFFSET_DELETE}


def allowed(authorizer: Authorizer | None, channel: Any, operation: str, resource_type: str, name: str = CLUSTER_NAME) -> bool:
    if authorizer is None:
        return True
    session: Any = getattr(channel, "session", INTERNAL)
    if session is INTERNAL:
        return True
    if session is None:
        return False
    return authorizer.authorize(session.principal, session.host, operation, resource_type, name)


def _partition_number(p: Any) -> int:
    return p if isinstance(p, int) else getattr(p, "partition", getattr(p, "partition_index", -1))


def _topics_with(resp_cls: Any, topics: Any, code: int) -> list[Any]:
    topic_shape = resp_cls.nested("topics")
    part_shape = resp_cls.nested("topics", "partitions")
    out = []
    for t in topics or ():
        name = getattr(t, "topic", getattr(t, "name", ""))
        parts = [part_shape.build(partition=_partition_number(p), partition_index=_partition_number(p), error_code=code, offset=-1) for p in t.partitions]
        out.append(topic_shape.build(topic=name, name=name, partitions=parts))
    return out


def refusal(req: Any, code: int) -> Any:
    """The response to ``req`` with ``code`` in its error fields (top-level, or per partition
    of the request's topics when the response has no top-level error)."""
    resp_cls = type(req).RESPONSE_TYPE
    fields: dict[str, Any] = {"error_code": code, "throttle_time_ms": 0, "node_id": -1, "port": -1, "host": ""}
    if "topics" in resp_cls._fields and getattr(req, "topics", None):
        fields["topics"] = _topics_with(resp_cls, req.topics, code)
    return resp_cls.build(**fields)


def _txn_refusal(key: int, req: Any, code: int) -> Any:
    """The refusal of a transaction API: per partition where its answer has partitions."""
    resp_cls = type(req).RESPONSE_TYPE
    if key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return resp_cls.build(throttle_time_ms=0, results=[(t.topic, [(p, code) for p in t.partitions]) for t in req.topics])
    if key == ApiKey.WRITE_TXN_MARKERS:
        return resp_cls.build(markers=[(m.producer_id, [(t.topic, [(p, code) for p in t.partitions]) for t in m.topics]) for m in req.markers])
    return refusal(req, code)


def _group_id(req: Any) -> str | None:
    gid = getattr(req, "group_id", None)
    if gid is None and getattr(req, "key_type", 0) == 0:
        gid = getattr(req, "key", None)
    return gid


class _MergeChannel:
    """Passes the handler's answer on with the refused entries added to its ``field`` list
    (and, with ``keep``, only the entries ``keep`` accepts)."""

    def __init__(self, channel: Any, denied: list[Any], field: str = "topics", keep: Any = None) -> None:
        self.channel = channel
        self.denied = denied
        self.field = field
        self.keep = keep
        self.session = getattr(channel, "session", None)

    def send(self, response: Any) -> None:
        if response is not None:
            entries = [e for e in getattr(response, self.field) or () if self.keep is None or self.keep(e)]
            response = response._replace(**{self.field: entries + self.denied})
        self.channel.send(response)

    def close(self, reason: str) -> None:
        self.channel.close(reason)


def _field(entry: Any, name: str) -> Any:
    # Handlers may build entries as dicts or structs.
    return entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)


#: Kafka's message for a consumer group whose assignments name a topic the session may not Describe
TOPICS_NOT_DESCRIBABLE = "The group has described topic(s) that the client is not authorized to describe."


class _AssignedTopicsChannel:
    """ConsumerGroupDescribe: each described group whose members' assignment or target
    assignment names a topic the session may not Describe becomes TOPIC_AUTHORIZATION_FAILED,
    without its members (KAFKA-18813)."""

    def __init__(self, channel: Any, authorizer: Authorizer) -> None:
        self.channel = channel
        self.authorizer = authorizer
        self.session = getattr(channel, "session", None)

    def _hidden(self, group: Any) -> bool:
        topics = {_field(tp, "topic_name")
                  for m in _field(group, "members") or ()
                  for part in ("assignment", "target_assignment")
                  for tp in _field(_field(m, part) or {}, "topic_partitions") or ()}
        return not all(allowed(self.authorizer, self.channel, "Describe", "Topic", t) for t in topics)

    def send(self, response: Any) -> None:
        if response is not None:
            shape = type(response).nested("groups")
            groups = [shape.build(group_id=_field(g, "group_id"), error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                  error_message=TOPICS_NOT_DESCRIBABLE)
                      if not _field(g, "error_code") and self._hidden(g) else g for g in response.groups]
            response = response._replace(groups=groups)
        self.channel.send(response)

    def close(self, reason: str) -> None:
        self.channel.close(reason)


_MULTI_GROUP = {ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE}
#: (request field, answer field, operation) of the APIs naming several groups
_GROUP_FIELDS = {
    ApiKey.DESCRIBE_GROUPS: ("groups", "groups", "Describe"),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ("group_ids", "groups", "Describe"),
    ApiKey.DELETE_GROUPS: ("groups_names", "results", "Delete"),
}


def _split_groups(authorizer: Authorizer, header: Any, req: Any, channel: Any, handler: Any) -> bool:
    """ListGroups shows the groups the session may Describe (all with Describe on the
    Cluster); DescribeGroups, ConsumerGroupDescribe and DeleteGroups (Describe / Delete on each
    Group) serve the allowed groups and answer GROUP_AUTHORIZATION_FAILED for the rest."""
    key = header.api_key
    resp_cls = type(req).RESPONSE_TYPE
    if key == ApiKey.LIST_GROUPS:
        if allowed(authorizer, channel, "Describe", "Cluster"):
            return False
        names = resp_cls.nested("groups").names

        def group_of(g: Any) -> str:
            # Handlers may build entries as namedtuples, dicts or plain tuples (field order).
            if isinstance(g, dict):
                return str(g["group_id"])
            return str(getattr(g, "group_id", None) or g[names.index("group_id")])

        handler(header, req, _MergeChannel(channel, [], "groups", lambda g: allowed(authorizer, channel, "Describe", "Group", group_of(g))))
        return True
    field, out_field, op = _GROUP_FIELDS[key]
    names = list(getattr(req, field) or ())
    ok = [g for g in names if allowed(authorizer, channel, op, "Group", g)]
    if len(ok) == len(names):
        return False
    shape = resp_cls.nested(out_field)
    denied = [shape.build(group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in names if g not in ok]
    if not ok:
        channel.send(resp_cls.build(throttle_time_ms=0, **{out_field: denied}))
    else:
        handler(header, req._replace(**{field: ok}), _MergeChannel(channel, denied, out_field))
    return True


def _topic_of(entry: Any) -> str:
    # Handlers may build entries as namedtuples, dicts or plain tuples (field order).
    if isinstance(entry, dict):
        return str(entry["topic"])
    return str(entry.topic if hasattr(entry, "topic") else entry[0])


class _GroupsChannel:
    """OffsetFetch v8+: the handler's answer for the allowed groups, with the refused groups
    (GROUP_AUTHORIZATION_FAILED) and refused topics (TOPIC_AUTHORIZATION_FAILED) put back in
    the order asked."""

    def __init__(self, channel: Any, asked: list[Any], refused_groups: set[str], refused_topics: dict[str, list[Any]]) -> None:
        self.channel = channel
        self.asked = asked
        self.refused_groups = refused_groups
        self.refused_topics = refused_topics
        self.session = getattr(channel, "session", None)

    def send(self, response: Any) -> None:
        if response is None:
            self.channel.send(response)
            return
        resp_cls = type(response)
        part = resp_cls.nested("groups", "topics", "partitions")
        served = {(g["group_id"] if isinstance(g, dict) else g.group_id): g for g in response.groups}
        groups = []
        for g in self.asked:
            if g.group_id in self.refused_groups:
                groups.append({"group_id": g.group_id, "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
                continue
            got = served[g.group_id]
            if isinstance(got, dict):
                got = resp_cls.nested("groups").build(**got)
            denied = [
                (t.topic, [part.build(partition=p, offset=-1, committed_leader_epoch=-1, metadata="", error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                           for p in t.partitions])
                for t in self.refused_topics.get(g.group_id, [])
            ]
            groups.append({"group_id": g.group_id, "topics": list(got.topics) + denied, "error_code": got.error_code})
        self.channel.send(resp_cls.build(throttle_time_ms=response.throttle_time_ms, groups=groups))

    def close(self, reason: str) -> None:
        self.channel.close(reason)


def _split_offset_fetch_groups(authorizer: Authorizer, header: Any, req: Any, channel: Any, handler: Any) -> bool:
    """OffsetFetch v8+ (several groups): Describe on each Group (else the group's error is
    GROUP_AUTHORIZATION_FAILED) and on each named Topic (else TOPIC_AUTHORIZATION_FAILED);
    "all topics" lists only the topics the session may Describe."""

    def described(topic: str) -> bool:
        return allowed(authorizer, channel, "Describe", "Topic", topic)

    refused_groups = {g.group_id for g in req.groups if not allowed(authorizer, channel, "Describe", "Group", g.group_id)}
    refused_topics: dict[str, list[Any]] = {}
    kept = []
    for g in req.groups:
        if g.group_id in refused_groups:
            continue
        if g.topics is not None:
            refused_topics[g.group_id] = [t for t in g.topics if not described(t.topic)]
            g = g._replace(topics=[t for t in g.topics if described(t.topic)])
        kept.append(g)
    wrapped = _GroupsChannel(channel, list(req.groups), refused_groups, refused_topics)
    if not any(g.topics is None for g in kept) and not refused_groups and not any(refused_topics.values()):
        return False
    if any(g.topics is None for g in kept):
        inner = wrapped

        class _Keep:
            session = wrapped.session

            def send(self, response: Any) -> None:
                if response is not None:
                    response = response._replace(groups=[g._replace(topics=[t for t in g.topics if described(_topic_of(t))]) for g in response.groups])
                inner.send(response)

            def close(self, reason: str) -> None:
                inner.close(reason)

        out: Any = _Keep()
    else:
        out = wrapped
    handler(header, req._replace(groups=kept), out)
    return True


def _split_offset_fetch(authorizer: Authorizer, header: Any, req: Any, channel: Any, handler: Any) -> bool:
    """OffsetFetch needs Describe on each Topic: named topics the session may not Describe are
    answered TOPIC_AUTHORIZATION_FAILED (offset -1); "all topics" lists only the others."""

    def described(topic: str) -> bool:
        return allowed(authorizer, channel, "Describe", "Topic", topic)

    if req.topics is None:
        handler(header, req, _MergeChannel(channel, [], keep=lambda t: described(t.topic if hasattr(t, "topic") else t[0])))
        return True
    ok = [t for t in req.topics if described(t.topic)]
    if len(ok) == len(req.topics):
        return False
    denied = _topics_with(type(req).RESPONSE_TYPE, [t for t in req.topics if t not in ok], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if not ok:
        channel.send(type(req).RESPONSE_TYPE.build(throttle_time_ms=0, error_code=ErrorCode.NONE, topics=denied))
    else:
        handler(header, req._replace(topics=ok), _MergeChannel(channel, denied))
    return True


def refuse_request(authorizer: Authorizer | None, header: Any, req: Any, channel: Any, handler: Any) -> bool:
    """Answer ``req`` if the session may not do it (True), or let ``handler`` run (False).

    For OffsetCommit with some refused topics the handler runs on the allowed ones and the
    answer is merged (True is returned: the request was served here)."""
    if authorizer is None:
        return False
    key = header.api_key
    if key in _CLUSTER_ACTION_APIS:
        if not allowed(authorizer, channel, "ClusterAction", "Cluster"):
            channel.send(_txn_refusal(key, req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
            return True
        return False
    if key in _TXN_ID_APIS:
        if not allowed(authorizer, channel, "Write", "TransactionalId", req.transactional_id):
            channel.send(_txn_refusal(key, req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            return True
        if key in (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN):
            return False  # AddPartitionsToTxn's Topic Write is checked per partition by its handler
    if key == ApiKey.INIT_PRODUCER_ID:
        if req.transactional_id is not None:
            if allowed(authorizer, channel, "Write", "TransactionalId", req.transactional_id):
                return False
            channel.send(refusal(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            return True
        session: Any = getattr(channel, "session", INTERNAL)
        if allowed(authorizer, channel, "IdempotentWrite", "Cluster") or (
            session is not None and session is not INTERNAL and authorizer.allows_any(session.principal, session.host, "Write", "Topic")
        ):
            return False
        channel.send(refusal(req, ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
        return True
    if key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        channel = _AssignedTopicsChannel(channel, authorizer)
        if not _split_groups(authorizer, header, req, channel, handler):
            handler(header, req, channel)
        return True
    if key in _MULTI_GROUP:
        return _split_groups(authorizer, header, req, channel, handler)
    if key == ApiKey.FIND_COORDINATOR and header.api_version >= 1 and req.key_type == 1:
        if allowed(authorizer, channel, "Describe", "TransactionalId", req.key):
            return False
        channel.send(refusal(req, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return True
    if key == ApiKey.OFFSET_FETCH and header.api_version >= 8:
        return _split_offset_fetch_groups(authorizer, header, req, channel, handler)
    gid = _group_id(req) if key != ApiKey.METADATA and key not in _HANDLER_CHECKED else None
    if gid is None:
        return False
    if not allowed(authorizer, channel, _GROUP_OPERATION.get(key, "Read"), "Group", gid):
        channel.send(refusal(req, ErrorCode.GROUP_AUTHORIZATION_FAILED))
        return True
    if key == ApiKey.CONSUMER_GROUP_HEARTBEAT and req.subscribed_topic_names:
        # Kafka: Describe on every subscribed topic
        if not all(allowed(authorizer, channel, "Describe", "Topic", t) for t in req.subscribed_topic_names):
            channel.send(refusal(req, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            return True
    if key == ApiKey.OFFSET_FETCH:
        return _split_offset_fetch(authorizer, header, req, channel, handler)
    if key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT) and req.topics:
        ok = [t for t in req.topics if allowed(authorizer, channel, "Read", "Topic", t.topic)]
        if len(ok) == len(req.topics):
            return False
        denied = _topics_with(type(req).RESPONSE_TYPE, [t for t in req.topics if t not in ok], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if not ok:
            channel.send(type(req).RESPONSE_TYPE.build(throttle_time_ms=0, topics=denied))
        else:
            handler(header, req._replace(topics=ok), _MergeChannel(channel, denied))
        return True
    return False
