"""The admin APIs of Kafka's AdminClient served by our brokers: DeleteTopics (20),
CreatePartitions (37), ElectLeaders (43, preferred election), AlterConfigs (33),
IncrementalAlterConfigs (44), DescribeLogDirs (35), DescribeCluster (60), OffsetDelete (47),
DeleteRecords (21), AlterPartitionReassignments (45) and ListPartitionReassignments (46).

Registered in :class:`~hmbclient.broker.apis.KafkaApis` through ``admin=``; each handler gets
the request, the channel and ``allowed(channel, operation, resource type, name)``.

Contract (Kafka's ZooKeeper-mode behaviour; any broker takes the requests, as the
controller-routing of Kafka's clients is not needed here):

* DeleteTopics marks each topic (``/admin/delete_topics/<t>``) and answers once no marked
  topic is in this broker's metadata any more, or after ``timeout_ms`` with REQUEST_TIMED_OUT
  for those still there (the deletion goes on: a replica may be down). Per topic:
  (a) named twice: INVALID_REQUEST; (b) no Delete on the topic: TOPIC_AUTHORIZATION_FAILED;
  (c) ``delete.topic.enable`` false: TOPIC_DELETION_DISABLED (INVALID_REQUEST below v3, as
  Kafka); (d) internal topic (``__consumer_offsets``, ``__transaction_state``):
  INVALID_TOPIC_EXCEPTION, its deletion would lose every group's offsets or transaction;
  (e) unknown or illegal name: UNKNOWN_TOPIC_OR_PARTITION, nothing touched; (f) marked: NONE.
* CreatePartitions grows each topic (:meth:`TopicManager.add_partitions`, its cases) and
  answers once this broker's metadata shows every grown topic with its new count and leaders,
  or after ``timeout_ms`` (REQUEST_TIMED_OUT). (a) named twice: INVALID_REQUEST; (b) no Alter
  on the topic: TOPIC_AUTHORIZATION_FAILED; (c) otherwise the TopicManager's answer.
* ElectLeaders: preferred election (type 0) of the named partitions (null: every partition)
  by this broker's controller; (a) no Alter on the cluster: CLUSTER_AUTHORIZATION_FAILED for
  every partition; (b) election type other than preferred: INVALID_REQUEST (unclean
  election is a broker setting here); (c) this broker is not the controller: NOT_CONTROLLER;
  (d) the controller's answer per partition (NONE, ELECTION_NOT_NEEDED,
  PREFERRED_LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION).
* AlterPartitionReassignments starts or cancels (null replicas) each partition's reassignment
  through this broker's controller and answers once they are started (as Kafka; their end is
  seen in ListPartitionReassignments). Top level: (a) no Alter on the cluster:
  CLUSTER_AUTHORIZATION_FAILED; (b) this broker is not the controller: NOT_CONTROLLER
  (Kafka's clients send it to the controller). Per partition: (c) named twice:
  INVALID_REQUEST; (d) the controller's answer (``controller.reassignment`` Case R1: unknown
  partition, nothing to cancel, bad target, replication factor change refused by v1).
* ListPartitionReassignments: the ongoing reassignments (of the named partitions; all when
  null) with their full replicas, adding and removing replicas. (a) no Describe on the
  cluster: CLUSTER_AUTHORIZATION_FAILED; (b) not the controller: NOT_CONTROLLER; (c) named
  partitions not being reassigned (or unknown) are left out.
* AlterConfigs replaces, IncrementalAlterConfigs edits, the whole dynamic config of each
  resource (stored, announced and applied by ``broker.dynamic_config``; the rules are
  ``broker.configs``' pure functions). Per resource: (a) a topic without AlterConfigs on it:
  TOPIC_AUTHORIZATION_FAILED, a broker without AlterConfigs on the cluster:
  CLUSTER_AUTHORIZATION_FAILED; (b) unknown topic: UNKNOWN_TOPIC_OR_PARTITION; (c) a broker
  resource naming another broker: INVALID_REQUEST (Kafka's "Unexpected broker id"; "" is
  every broker's default); (d) another resource type: INVALID_REQUEST; (e) the configs'
  own refusals (``configs.check_alter``, ``configs.apply_incremental``); (f) validate_only:
  checked, nothing stored; (g) stored: NONE. A topic's configs set at creation count as its
  dynamic config, as in Kafka (one ``/config/topics/<t>``): standalone, where they are kept
  apart (``topic-configs.json``), they are merged into the dynamic config on its first
  change, so an IncrementalAlterConfigs DELETE or an AlterConfigs that leaves them out removes
  them.
* DescribeLogDirs: this broker's one log directory with the size of each local replica's log
  (offset_lag 0: no future replicas here); (a) no Describe on the cluster: no results (v1 has
  no top-level error, as Kafka answers); (b) named partitions not held here are left out.
* DescribeCluster: the cluster id, the controller and the live brokers on the listener the
  request came in on, from the metadata cache; (a) no Describe on the cluster:
  CLUSTER_AUTHORIZATION_FAILED; (b) an endpoint type other than brokers (1):
  UNSUPPORTED_ENDPOINT_TYPE.
* OffsetDelete removes a group's committed offsets of the named partitions (tombstones in
  ``__consumer_offsets``, as DeleteGroups writes them). Top level: (a) no Delete on the group:
  GROUP_AUTHORIZATION_FAILED; (b) the coordinator's status (NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS...); (c) a group this coordinator does not know:
  GROUP_ID_NOT_FOUND; (d) a group with members of another protocol than "consumer":
  NON_EMPTY_GROUP. Per partition: (e) no Read on the topic: TOPIC_AUTHORIZATION_FAILED;
  (f) unknown topic: UNKNOWN_TOPIC_OR_PARTITION; (g) a topic a member subscribes to:
  GROUP_SUBSCRIBED_TO_TOPIC; (h) otherwise deleted (NONE, also when nothing was committed).
* DeleteRecords moves the log start of each partition to its offset (-1: the high watermark);
  it goes to the partition's leader (Kafka's clients send each partition there). Per
  partition: (a) no Delete on the topic: TOPIC_AUTHORIZATION_FAILED; (b) unknown topic or
  partition: UNKNOWN_TOPIC_OR_PARTITION; (c) an internal topic: INVALID_TOPIC_EXCEPTION
  (Kafka's "Cannot delete records of internal topic"); (d) named twice: INVALID_REQUEST for
  both (Kafka's request map keeps one of them silently; we refuse to guess which);
  (e) the replica manager's answer (``ReplicaManager.delete_records``, ``Partition.
  delete_records_on_leader``): NOT_LEADER_OR_FOLLOWER, POLICY_VIOLATION (``compact``-only
  topic), OFFSET_OUT_OF_RANGE (below -1 or past the high watermark), REQUEST_TIMED_OUT (a
  live follower's log start did not follow within ``timeout_ms``), or NONE with the low
  watermark (the smallest log start of the live replicas). Low watermark -1 on any error.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.configs import apply_incremental, check_alter
from hmbclient.broker.metadata import MetadataCache, is_internal_topic
from hmbclient.broker.topic_configs import FileTopicConfigs
from hmbclient.broker.topics import TopicManager
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api.base import ApiKey
from hmbclient.protocol.api.configs import RESOURCE_BROKER, RESOURCE_TOPIC
from hmbclient.zkpaths import DEFAULT_BROKER_ENTITY

__all__ = ["AdminApis"]

log = logging.getLogger("hmbclient.broker.admin_apis")

Allowed = Callable[[Any, str, str, str], bool]
Handler = Callable[[Any, Any, Any, Allowed], None]

#: the longest ElectLeaders waits for the controller's answer
ELECTION_WAIT_S = 30.0


class AdminApis:
    """The admin handlers of one broker.

    Args:
        config: the broker's configuration.
        metadata: its metadata cache.
        topics: topic creation, deletion and growth.
        controller: its controller (ElectLeaders; None: not served).
        dynamic: its ``DynamicConfigs`` (AlterConfigs, IncrementalAlterConfigs; None: not served).
        logs: its LogManager (DescribeLogDirs; None: not served).
        groups: its GroupCoordinator, whose store is the OffsetManager (OffsetDelete; None: not served).
        replicas: its ReplicaManager (DeleteRecords; None: not served).
    """

    def __init__(self, config: BrokerConfig, metadata: MetadataCache, topics: TopicManager, controller: Any = None,
                 dynamic: Any = None, logs: Any = None, groups: Any = None, replicas: Any = None) -> None:
        self.config = config
        self.metadata = metadata
        self.topics = topics
        self.controller = controller
        self.dynamic = dynamic
        self.logs = logs
        self.groups = groups
        self.replicas = replicas

    def handlers(self) -> dict[int, Handler]:
        """api key -> handler(header, request, channel, allowed)."""
        out: dict[int, Handler] = {
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
        }
        if self.controller is not None:
            out[ApiKey.ELECT_LEADERS] = self.handle_elect_leaders
            out[ApiKey.ALTER_PARTITION_REASSIGNMENTS] = self.handle_alter_reassignments
            out[ApiKey.LIST_PARTITION_REASSIGNMENTS] = self.handle_list_reassignments
        if self.dynamic is not None:
            out[ApiKey.ALTER_CONFIGS] = self.handle_alter_configs
            out[ApiKey.INCREMENTAL_ALTER_CONFIGS] = self.handle_alter_configs
        if self.logs is not None:
            out[ApiKey.DESCRIBE_LOG_DIRS] = self.handle_describe_log_dirs
        if self.groups is not None:
            out[ApiKey.OFFSET_DELETE] = self.handle_offset_delete
        if self.replicas is not None:
            out[ApiKey.DELETE_RECORDS] = self.handle_delete_records
        out[ApiKey.DESCRIBE_CLUSTER] = self.handle_describe_cluster
        return out

    # -- DeleteRecords ---------------------------------------------------------------------------------
    def handle_delete_records(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        counts = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
        answers: dict[tuple[str, int], tuple[int, int]] = {}
        wanted: dict[tuple[str, int], int] = {}
        for t in req.topics:
            may = allowed(channel, "Delete", "Topic", t.name)
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if not may:  # (a)
                    answers[tp] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
                elif self.metadata.partition(t.name, p.partition_index) is None:  # (b)
                    answers[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
                elif is_internal_topic(t.name):  # (c)
                    answers[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
                elif counts[tp] > 1:  # (d)
                    answers[tp] = (ErrorCode.INVALID_REQUEST, -1)
                else:
                    wanted[tp] = p.offset
        layout = [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]

        def respond(statuses: dict[tuple[str, int], Any]) -> None:  # (e)
            for tp, st in statuses.items():
                answers[tp] = (st.error_code, st.low_watermark if not st.error_code else -1)
            topics = [(name, [(p, answers[(name, p)][1], answers[(name, p)][0]) for p in parts]) for name, parts in layout]
            channel.send(resp_cls.build(throttle_time_ms=0, topics=topics))

        if not wanted:
            respond({})
            return
        self.replicas.delete_records(req.timeout_ms, wanted, respond)

    # -- OffsetDelete ------------------------------------------------------------------------------------
    def handle_offset_delete(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        from hmbclient.protocol.api.consumer_protocol import PROTOCOL_TYPE, decode_member_metadata

        resp_cls = type(req).RESPONSE_TYPE
        group_id = req.group_id

        def top(code: int) -> None:
            channel.send(resp_cls.build(error_code=code, throttle_time_ms=0, topics=[]))

        if not allowed(channel, "Delete", "Group", group_id):  # (a)
            top(ErrorCode.GROUP_AUTHORIZATION_FAILED)
            return
        offsets = self.groups.store
        code = offsets.group_status(group_id)
        if code:  # (b)
            top(code)
            return
        group = self.groups.group(group_id)
        members = list(group.members.values()) if group is not None else []
        if group is None and not offsets.committed(group_id):  # (c)
            top(ErrorCode.GROUP_ID_NOT_FOUND)
            return
        subscribed: set[str] = set()
        for m in members:
            if m.protocol_type != PROTOCOL_TYPE:  # (d)
                top(ErrorCode.NON_EMPTY_GROUP)
                return
            for _name, meta in m.protocols[:1]:
                try:
                    subscribed.update(decode_member_metadata(meta).topics)
                except Exception:  # an undecodable subscription: treat the group as subscribed to all
                    subscribed.add("*")
        results: list[tuple[str, list[tuple[int, int]]]] = []
        doomed: list[tuple[str, int]] = []
        for t in req.topics:
            parts: list[tuple[int, int]] = []
            for p in t.partitions:
                c: int
                if not allowed(channel, "Read", "Topic", t.name):  # (e)
                    c = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif not self.metadata.has_topic(t.name):  # (f)
                    c = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif t.name in subscribed or "*" in subscribed:  # (g)
                    c = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:  # (h)
                    c = ErrorCode.NONE
                    doomed.append((t.name, p.partition_index))
                parts.append((p.partition_index, c))
            results.append((t.name, parts))
        held = set(offsets.committed(group_id))

        def done(code: int) -> None:
            if code:
                out = [(n, [(p, code if (n, p) in doomed else c) for p, c in parts]) for n, parts in results]
            else:
                out = results
            channel.send(resp_cls.build(error_code=ErrorCode.NONE, throttle_time_ms=0, topics=out))

        offsets.delete_offsets(group_id, [tp for tp in doomed if tp in held], done)

    # -- DescribeLogDirs, DescribeCluster --------------------------------------------------------------
    def handle_describe_log_dirs(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        if not allowed(channel, "Describe", "Cluster", "kafka-cluster"):  # (a)
            channel.send(resp_cls.build(throttle_time_ms=0, results=[]))
            return
        wanted = None if req.topics is None else {(t.topic, p) for t in req.topics for p in t.partitions}
        by_topic: dict[str, list[tuple[int, int, int, bool]]] = {}
        for (topic, p), lg in sorted(self.logs.all_logs()):
            if wanted is not None and (topic, p) not in wanted:  # (b)
                continue
            size = sum(seg.size for seg in lg.segments)
            by_topic.setdefault(topic, []).append((p, size, 0, False))
        result = (ErrorCode.NONE, self.logs.log_dir, sorted(by_topic.items()))
        channel.send(resp_cls.build(throttle_time_ms=0, results=[result]))

    def handle_describe_cluster(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        endpoint_type = getattr(req, "endpoint_type", 1)
        base: dict[str, Any] = {"throttle_time_ms": 0, "endpoint_type": endpoint_type, "cluster_id": self.metadata.cluster_id, "brokers": []}
        if not allowed(channel, "Describe", "Cluster", "kafka-cluster"):  # (a)
            channel.send(resp_cls.build(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message="Authorization failed.", **base))
            return
        if endpoint_type != 1:  # (b)
            channel.send(resp_cls.build(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                        error_message=f"endpoint type {endpoint_type} is not supported", **base))
            return
        # As Metadata answers: this broker at the address the client reached, the others on the
        # same listener (left out when they have none).
        session = getattr(channel, "session", None)
        here, listener = getattr(session, "advertised", None), getattr(session, "listener", None)
        brokers = []
        for b in sorted(self.metadata.brokers(), key=lambda b: b.node_id):
            addr = here if here and b.node_id == self.config.broker_id else b.address(listener)
            if addr is not None:
                brokers.append((b.node_id, addr[0], addr[1], None))
        base["brokers"] = brokers
        channel.send(resp_cls.build(error_code=ErrorCode.NONE, error_message=None, controller_id=self.metadata.controller_id(), **base))

    # -- AlterConfigs, IncrementalAlterConfigs ------------------------------------------------------
    def handle_alter_configs(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        incremental = header.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
        out = []
        for r in req.resources:
            code, msg = self._alter_one(r, incremental, bool(req.validate_only), channel, allowed)
            out.append((code, msg, r.resource_type, r.resource_name))
        channel.send(resp_cls.build(throttle_time_ms=0, responses=out))

    def _alter_one(self, r: Any, incremental: bool, validate_only: bool, channel: Any, allowed: Allowed) -> tuple[int, str | None]:
        kind, name = r.resource_type, r.resource_name
        if kind == RESOURCE_TOPIC:
            if not allowed(channel, "AlterConfigs", "Topic", name):  # (a)
                return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            if not self.metadata.has_topic(name):  # (b)
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist"
            entity = ("topics", name)
        elif kind == RESOURCE_BROKER:
            if not allowed(channel, "AlterConfigs", "Cluster", "kafka-cluster"):  # (a)
                return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
            if name not in ("", str(self.config.broker_id)):  # (c)
                return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {self.config.broker_id} or empty string, but received {name}"
            entity = ("brokers", name or DEFAULT_BROKER_ENTITY)
        else:  # (d)
            return ErrorCode.INVALID_REQUEST, f"resource type {kind} is not supported"
        stored = self._creation_configs(name) if kind == RESOURCE_TOPIC else {}
        current = {**stored, **self.dynamic.store.entity_config(*entity)}
        props: dict[str, str | None]
        if incremental:
            code, msg, props = apply_incremental(current, [(c.name, c.config_operation, c.value) for c in r.configs])
            if code:  # (e)
                return code, msg
        else:
            names = [c.name for c in r.configs]
            if len(set(names)) != len(names):
                return ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
            props = {c.name: c.value for c in r.configs}
        code, msg = check_alter(kind, props, self.config)
        if code or validate_only:  # (e), (f)
            return code, msg
        new = {k: str(v) for k, v in props.items()}
        if stored:  # the dynamic layer takes them over before they are dropped (a crash keeps both)
            self.dynamic.store.set_entity_config(entity[0], entity[1], new)
            assert self.topics.config_store is not None
            self.topics.config_store.set(name, {})
        self.dynamic.set_local(entity[0], entity[1], new)  # (g)
        log.info("dynamic config of %s/%s set to %s", entity[0], entity[1], props)
        return ErrorCode.NONE, None

    def _creation_configs(self, topic: str) -> dict[str, str]:
        """A standalone topic's configs kept apart since its creation (in a cluster they are
        the dynamic config's own znode already)."""
        store = self.topics.config_store
        return store.get(topic) if isinstance(store, FileTopicConfigs) else {}

    # -- DeleteTopics ------------------------------------------------------------------------------
    def handle_delete_topics(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        counts = Counter(req.topic_names)
        results: list[tuple[str, int]] = []
        marked: list[str] = []
        for name in req.topic_names:
            code: int
            if counts[name] > 1:  # (a)
                code = ErrorCode.INVALID_REQUEST
            elif not allowed(channel, "Delete", "Topic", name):  # (b)
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not self.config.delete_topic_enable:  # (c)
                code = ErrorCode.TOPIC_DELETION_DISABLED if header.api_version >= 3 else ErrorCode.INVALID_REQUEST
            elif is_internal_topic(name):  # (d)
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
            else:
                code, _ = self.topics.delete(name)  # (e), (f)
                if code == ErrorCode.NONE:
                    marked.append(name)
            results.append((name, code))

        def answer() -> None:
            out = [(n, ErrorCode.REQUEST_TIMED_OUT if n in marked and self.metadata.has_topic(n) else c) for n, c in results]
            channel.send(resp_cls.build(throttle_time_ms=0, responses=out))

        if marked and req.timeout_ms > 0:
            self.topics.when(marked, lambda: not any(self.metadata.has_topic(t) for t in marked), req.timeout_ms, answer)
        else:
            answer()

    # -- CreatePartitions ---------------------------------------------------------------------------
    def handle_create_partitions(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        counts = Counter(t.name for t in req.topics)
        results: list[tuple[str, int, str | None]] = []
        grown: dict[str, int] = {}
        for t in req.topics:
            code: int
            msg: str | None
            if counts[t.name] > 1:  # (a)
                code, msg = ErrorCode.INVALID_REQUEST, "Duplicate topic in request."
            elif not allowed(channel, "Alter", "Topic", t.name):  # (b)
                code, msg = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            else:  # (c)
                assignment = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
                code, msg = self.topics.add_partitions(t.name, t.count, assignment, validate_only=bool(req.validate_only))
                if code == ErrorCode.NONE and not req.validate_only:
                    grown[t.name] = t.count
            results.append((t.name, code, msg))

        def served() -> bool:
            return all((self.metadata.num_partitions(n) or 0) >= c and self.metadata.is_ready(n) for n, c in grown.items())

        def answer() -> None:
            out = []
            for name, code, msg in results:
                if name in grown and not ((self.metadata.num_partitions(name) or 0) >= grown[name] and self.metadata.is_ready(name)):
                    code, msg = ErrorCode.REQUEST_TIMED_OUT, "the partitions were added, but not all have a leader yet"
                out.append((name, code, msg))
            channel.send(resp_cls.build(throttle_time_ms=0, results=out))

        if grown and req.timeout_ms > 0:
            self.topics.when(grown, served, req.timeout_ms, answer)
        else:
            answer()

    # -- ElectLeaders --------------------------------------------------------------------------------
    def handle_elect_leaders(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        election_type = getattr(req, "election_type", 0)
        asked = None if req.topic_partitions is None else [(t.topic, p) for t in req.topic_partitions for p in t.partitions]

        def send(results: dict[tuple[str, int], int], top: int = ErrorCode.NONE) -> None:
            by_topic: dict[str, list[tuple[int, int, str | None]]] = {}
            for (topic, p), code in sorted(results.items()):
                by_topic.setdefault(topic, []).append((p, code, None))
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=top, replica_election_results=sorted(by_topic.items())))

        if not allowed(channel, "Alter", "Cluster", "kafka-cluster"):  # (a)
            send({tp: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for tp in asked or ()}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            return
        if election_type != 0:  # (b)
            send({tp: ErrorCode.INVALID_REQUEST for tp in asked or ()}, ErrorCode.INVALID_REQUEST)
            return
        if not self.controller.active:  # (c)
            send({tp: ErrorCode.NOT_CONTROLLER for tp in asked or ()}, ErrorCode.NOT_CONTROLLER)
            return
        fut = self.controller.elect_preferred(asked)

        def done(f: Any) -> None:
            try:
                results = f.result()
            except Exception as e:  # the controller's failure is the request's
                log.warning("ElectLeaders failed: %r", e)
                send({tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in asked or ()}, ErrorCode.UNKNOWN_SERVER_ERROR)
                return
            if any(c == ErrorCode.NOT_CONTROLLER for c in results.values()):  # (c), deposed meanwhile
                send(results, ErrorCode.NOT_CONTROLLER)
                return
            send(results)  # (d)

        fut.add_done_callback(done)

    # -- AlterPartitionReassignments, ListPartitionReassignments -----------------------------------
    def handle_alter_reassignments(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE
        allow_rf = bool(getattr(req, "allow_replication_factor_change", True))
        asked = [((t.name, p.partition_index), None if p.replicas is None else tuple(p.replicas)) for t in req.topics for p in t.partitions]
        counts = Counter(tp for tp, _ in asked)
        extra = {"allow_replication_factor_change": allow_rf} if header.api_version >= 1 else {}

        def send(results: dict[tuple[str, int], tuple[int, str | None]], top: int = ErrorCode.NONE, msg: str | None = None) -> None:
            by_topic: dict[str, list[tuple[int, int, str | None]]] = {}
            for (topic, p), (code, m) in sorted(results.items()):
                by_topic.setdefault(topic, []).append((p, code, m))
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=top, error_message=msg, responses=sorted(by_topic.items()), **extra))

        if not allowed(channel, "Alter", "Cluster", "kafka-cluster"):  # (a)
            send({}, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
            return
        if not self.controller.active:  # (b)
            send({}, ErrorCode.NOT_CONTROLLER, "This broker is not the controller.")
            return
        twice = {tp: (int(ErrorCode.INVALID_REQUEST), "The partition is named more than once.") for tp, n in counts.items() if n > 1}  # (c)
        fut = self.controller.alter_reassignments({tp: r for tp, r in asked if tp not in twice}, allow_rf)

        def done(f: Any) -> None:
            try:
                results = dict(f.result())
            except Exception as e:  # the controller's failure is the request's
                log.warning("AlterPartitionReassignments failed: %r", e)
                send({}, ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
                return
            if any(c == ErrorCode.NOT_CONTROLLER for c, _ in results.values()):  # (b), deposed meanwhile
                send({}, ErrorCode.NOT_CONTROLLER, "This broker is not the controller.")
                return
            results.update(twice)
            send(results)  # (d)

        fut.add_done_callback(done)

    def handle_list_reassignments(self, header: Any, req: Any, channel: Any, allowed: Allowed) -> None:
        resp_cls = type(req).RESPONSE_TYPE

        def top(code: int, msg: str) -> None:
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=code, error_message=msg, topics=[]))

        if not allowed(channel, "Describe", "Cluster", "kafka-cluster"):  # (a)
            top(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
            return
        asked = None if req.topics is None else [(t.name, p) for t in req.topics for p in t.partition_indexes]
        fut = self.controller.list_reassignments(asked)

        def done(f: Any) -> None:
            try:
                found = f.result()
            except Exception as e:
                log.warning("ListPartitionReassignments failed: %r", e)
                top(ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
                return
            if found is None:  # (b)
                top(ErrorCode.NOT_CONTROLLER, "This broker is not the controller.")
                return
            by_topic: dict[str, list[tuple[int, list[int], list[int], list[int]]]] = {}
            for (topic, p), (replicas, ongoing) in sorted(found.items()):  # (c): only ongoing ones
                by_topic.setdefault(topic, []).append((p, list(replicas), list(ongoing.adding), list(ongoing.removing)))
            channel.send(resp_cls.build(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, topics=sorted(by_topic.items())))

        fut.add_done_callback(done)
