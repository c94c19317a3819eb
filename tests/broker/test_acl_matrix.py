"""Every API the broker serves x its resource/operation in Kafka's ACL model, tried by a
principal with and without the ACL.

The table is Kafka's "Operations and Resources on Protocols" (docs, security section; the
Confluence page "Kafka Authorizations (ACLs)" lists the same). Each ``Case`` names the ACLs a
request needs and the one under test. For every case, on a fresh topic/group/transactional id:

- ``eve`` holds every ACL the request needs except the one under test, plus *decoys*: every
  other operation on that resource that does not imply the needed one (so a check of the wrong
  operation fails too). Her request must get the Kafka error of the case, and the broker's
  state (topics, log ends, committed offsets, group members, listed groups, the transactional
  id's producer id and epoch) must not change.
- ``alice`` holds exactly the ACLs the case needs. Her request must succeed (the answer a
  request that passed authorization gets), and, for the requests that change something, the
  state must change (so the "nothing changed" snapshot is shown able to see a change).

Both authenticate over SASL_PLAINTEXT, once with PLAIN and once with SCRAM-SHA-256, against a
broker with the ACL authorizer (``allow.everyone.if.no.acl.found`` false, ``User:admin`` a
super user who prepares each case). ACLs are in a file, read per request, and removed after
each case so no case's grants leak into another's (Write on any topic implies IdempotentWrite).

``test_matrix_covers_every_served_api`` keeps the table honest: every API key the broker
advertises in ApiVersions has a case.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.security.authorizer import _IMPLIES, OPERATIONS, Acl, FileAclStore
from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.protocol.sasl_mechanisms import client_mechanism

from .conftest import RawClient, encode, wait_until

PASSWORDS = {"alice": "alice-pw", "eve": "eve-pw", "admin": "admin-pw"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256")
TIMEOUT_S = 20.0
E = ErrorCode


def _req(api: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(api, version)].build(**fields)


# -- the broker and its clients -------------------------------------------------------------------
@pytest.fixture(scope="module")
def acls(tmp_path_factory: pytest.TempPathFactory) -> FileAclStore:
    return FileAclStore(str(tmp_path_factory.mktemp("acls") / "acls.json"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, acls: FileAclStore) -> Iterator[EmbeddedBroker]:
    creds = str(tmp_path_factory.mktemp("creds") / "credentials.json")
    store = FileCredentialStore(creds)
    for user, pw in PASSWORDS.items():
        store.put(user, {m: make_credential(m, pw) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")})
    with EmbeddedBroker(
        listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
        sasl_credentials_file=creds,
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        authorizer_acls_file=acls.path,
        super_users=("User:admin",),
        group_initial_rebalance_delay_ms=0,
    ) as b:
        yield b


def _login(b: EmbeddedBroker, user: str, mechanism: str, c: RawClient | None = None) -> RawClient:
    """Authenticate a new connection (or re-authenticate ``c``, KIP-368) as ``user``."""
    c = c or RawClient("127.0.0.1", b.port, timeout_s=TIMEOUT_S, client_id=f"acl-matrix-{user}")
    hs = c.request(_req(ApiKey.SASL_HANDSHAKE, 1, mechanism=mechanism))
    assert hs.error_code == E.NONE, hs
    mech = client_mechanism(mechanism, user, PASSWORDS[user])
    token: bytes | None = mech.first()
    while token is not None:
        resp = c.request(_req(ApiKey.SASL_AUTHENTICATE, 1, auth_bytes=token))
        assert resp.error_code == E.NONE, resp
        token = mech.step(resp.auth_bytes) if not mech.done else None
        if mechanism == "PLAIN":
            break
    c.user, c.mechanism = user, mechanism  # type: ignore[attr-defined]
    return c


@dataclass
class Clients:
    admin: RawClient
    alice: RawClient
    eve: RawClient


@pytest.fixture(scope="module", params=MECHANISMS)
def clients(request: pytest.FixtureRequest, broker: EmbeddedBroker) -> Iterator[Clients]:
    cs = Clients(*(_login(broker, u, request.param) for u in ("admin", "alice", "eve")))
    yield cs
    for c in (cs.admin, cs.alice, cs.eve):
        c.close()


# -- one case's names and the broker's state --------------------------------------------------------
@dataclass
class Ctx:
    b: EmbeddedBroker
    admin: RawClient
    topic: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:10]}")
    new_topic: str = field(default_factory=lambda: f"n-{uuid.uuid4().hex[:10]}")
    group: str = field(default_factory=lambda: f"g-{uuid.uuid4().hex[:10]}")
    txn: str = field(default_factory=lambda: f"x-{uuid.uuid4().hex[:10]}")
    member: str = ""
    generation: int = -1
    producer: tuple[int, int] = (-1, -1)

    def resource(self, kind: str) -> tuple[str, str]:
        return {
            "topic": ("Topic", self.topic), "new_topic": ("Topic", self.new_topic), "group": ("Group", self.group),
            "txn": ("TransactionalId", self.txn), "cluster": ("Cluster", "kafka-cluster"),
        }[kind]


def snapshot(ctx: Ctx) -> Any:
    """What a refused request must not change."""
    br = ctx.b.broker
    ends = []
    for t in (ctx.topic, ctx.new_topic):
        for p in range(4):
            part = br.replica_manager.partition(t, p)
            ends.append(None if part is None else (part.log.log_start_offset, part.log.log_end_offset))
    group = br.group_coordinator.group(ctx.group)
    members = None if group is None else (group.state, group.generation_id, tuple(sorted(group.members)))
    txn = br.transactions.metadata_of(ctx.txn)
    return (
        None if txn is None else txn.state, br.offset_manager.pending_txn_offsets(ctx.group),
        br.metadata.has_topic(ctx.topic), br.metadata.has_topic(ctx.new_topic), tuple(ends),
        tuple(sorted(br.offset_manager.committed(ctx.group).items())), members, ctx.group in br.group_coordinator.group_ids(),
        None if txn is None else (txn.producer_id, txn.producer_epoch),
        _topic_configs(ctx),
    )


# -- admin's preparations -----------------------------------------------------------------------------
def _create(ctx: Ctx, topic: str | None = None) -> None:
    topic = topic or ctx.topic
    resp = ctx.admin.request(_req(ApiKey.CREATE_TOPICS, 2, topics=[(topic, 1, 1, [], [])], timeout_ms=10_000, validate_only=False))
    assert resp.topics[0].error_code == E.NONE, resp
    wait_until(lambda: ctx.b.broker.metadata.is_ready(topic), TIMEOUT_S, f"{topic} ready")


def _produce_req(topic: str, txn: str | None = None) -> Any:
    return _req(ApiKey.PRODUCE, 3, transactional_id=txn, acks=1, timeout_ms=5000, topics=[(topic, [(0, encode([(None, b"v")]))])])


def _with_data(ctx: Ctx) -> None:
    _create(ctx)
    assert ctx.admin.request(_produce_req(ctx.topic)).topics[0].partitions[0].error_code == E.NONE


def _retry_coordinator(send: Callable[[], Any], code_of: Callable[[Any], int]) -> Any:
    """Waits out the offsets topic's first election."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        resp = send()
        if code_of(resp) not in (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR) or time.monotonic() > deadline:
            return resp
        time.sleep(0.1)


def _commit_req(ctx: Ctx, offset: int = 1) -> Any:
    return _req(ApiKey.OFFSET_COMMIT, 2, group_id=ctx.group, generation_id=-1, member_id="", retention_time_ms=-1, topics=[(ctx.topic, [(0, offset, None)])])


def _committed(ctx: Ctx) -> None:
    _with_data(ctx)
    resp = _retry_coordinator(lambda: ctx.admin.request(_commit_req(ctx)), lambda r: r.topics[0].partitions[0].error_code)
    assert resp.topics[0].partitions[0].error_code == E.NONE, resp


def _join_req(ctx: Ctx, member: str = "") -> Any:
    return _req(ApiKey.JOIN_GROUP, 2, group_id=ctx.group, session_timeout_ms=30_000, rebalance_timeout_ms=10_000, member_id=member,
                protocol_type="consumer", protocols=[("range", b"")])


def _joined(ctx: Ctx) -> None:
    """A group with one member (admin's), synced, so Heartbeat/Sync/Leave have a target."""
    _create(ctx)
    resp = _retry_coordinator(lambda: ctx.admin.request(_join_req(ctx)), lambda r: r.error_code)
    assert resp.error_code == E.NONE, resp
    ctx.member, ctx.generation = resp.member_id, resp.generation_id
    sync = ctx.admin.request(_req(ApiKey.SYNC_GROUP, 2, group_id=ctx.group, generation_id=ctx.generation, member_id=ctx.member, assignments=[(ctx.member, b"a")]))
    assert sync.error_code == E.NONE, sync


def _consumer_member(ctx: Ctx) -> None:
    """A consumer-protocol group (KIP-848) with one member (admin's)."""
    _create(ctx)
    join = _req(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=ctx.group, member_id="m-admin", member_epoch=0, rebalance_timeout_ms=30_000,
                subscribed_topic_names=[ctx.topic], topic_partitions=[])
    resp = _retry_coordinator(lambda: ctx.admin.request(join), lambda r: r.error_code)
    assert resp.error_code == E.NONE, resp


def _empty_group_with_offsets(ctx: Ctx) -> None:
    _committed(ctx)
    assert ctx.group in ctx.b.broker.group_coordinator.group_ids()


# -- the requests (each returns the outcome to compare) ----------------------------------------------------
def produce(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_produce_req(ctx.topic)).topics[0].partitions[0].error_code


def produce_auto_create(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_produce_req(ctx.new_topic)).topics[0].partitions[0].error_code


def produce_transactional(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_produce_req(ctx.topic, ctx.txn)).topics[0].partitions[0].error_code


def fetch(ctx: Ctx, c: RawClient, replica_id: int = -1) -> Any:
    resp = c.request(_req(ApiKey.FETCH, 4, replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                          topics=[(ctx.topic, [(0, 0, 1 << 20)])]))
    p = resp.topics[0].partitions[0]
    return p.error_code, bool(p.records)


def follower_fetch(ctx: Ctx, c: RawClient) -> Any:
    return fetch(ctx, c, replica_id=7)[0]  # 7 is no live broker: past authorization, REPLICA_NOT_AVAILABLE


def list_offsets(ctx: Ctx, c: RawClient) -> Any:
    p = c.request(_req(ApiKey.LIST_OFFSETS, 2, replica_id=-1, isolation_level=0, topics=[(ctx.topic, [(0, -1)])])).topics[0].partitions[0]
    return p.error_code, p.offset


def metadata(ctx: Ctx, c: RawClient) -> Any:
    t = c.request(_req(ApiKey.METADATA, 4, topics=[ctx.topic], allow_auto_topic_creation=False)).topics[0]
    return t.error_code, len(t.partitions)


def metadata_by_id(ctx: Ctx, c: RawClient) -> Any:
    """Metadata v12 asking by topic id (KIP-516): an id the session may not Describe is
    UNKNOWN_TOPIC_ID with no name, as Kafka (it does not tell that the topic exists)."""
    tid = ctx.b.broker.topics.topic_id(ctx.topic)
    assert tid is not None
    t = c.request(_req(ApiKey.METADATA, 12, topics=[{"topic_id": tid, "topic": None}], allow_auto_topic_creation=False)).topics[0]
    return t.error_code, t.topic


def metadata_all(ctx: Ctx, c: RawClient) -> Any:
    return ctx.topic in [t.topic for t in c.request(_req(ApiKey.METADATA, 1, topics=None)).topics]


def metadata_auto_create(ctx: Ctx, c: RawClient) -> Any:
    code = c.request(_req(ApiKey.METADATA, 4, topics=[ctx.new_topic], allow_auto_topic_creation=True)).topics[0].error_code
    return E.NONE if code in (E.NONE, E.LEADER_NOT_AVAILABLE) else code  # created: leaders may still be elected


def create_topics(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.CREATE_TOPICS, 2, topics=[(ctx.new_topic, 1, 1, [], [])], timeout_ms=10_000, validate_only=False)).topics[0].error_code


def offset_for_leader_epoch(ctx: Ctx, c: RawClient) -> Any:
    p = c.request(_req(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, topics=[(ctx.topic, [(0, -1, 0)])])).topics[0].partitions[0]
    return p.error_code, p.end_offset


def init_producer_id(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(INIT_PRODUCER_ID, 1, transactional_id=None, transaction_timeout_ms=60_000))
    return r.error_code, r.producer_id >= 0


def init_producer_id_transactional(ctx: Ctx, c: RawClient) -> Any:
    r = _retry_coordinator(lambda: c.request(_req(INIT_PRODUCER_ID, 1, transactional_id=ctx.txn, transaction_timeout_ms=60_000)), lambda r: r.error_code)
    return r.error_code, r.producer_id >= 0


def offset_commit(ctx: Ctx, c: RawClient) -> Any:
    return _retry_coordinator(lambda: c.request(_commit_req(ctx, 5)), lambda r: r.topics[0].partitions[0].error_code).topics[0].partitions[0].error_code


def offset_fetch(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.OFFSET_FETCH, 3, group_id=ctx.group, topics=[(ctx.topic, [0])]))
    p = r.topics[0].partitions[0] if r.topics else None
    return (r.error_code or (p.error_code if p else -1)), (p.offset if p else None)


def offset_fetch_all(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.OFFSET_FETCH, 3, group_id=ctx.group, topics=None))
    return r.error_code, sorted((t.topic, p.offset) for t in r.topics for p in t.partitions)


def offset_fetch_v9(ctx: Ctx, c: RawClient) -> Any:
    """OffsetFetch v9 (several groups per request): the group's error, or the partition's."""
    r = c.request(_req(ApiKey.OFFSET_FETCH, 9, groups=[{"group_id": ctx.group, "member_id": None, "topics": [(ctx.topic, [0])]}]))
    g = r.groups[0]
    p = g.topics[0].partitions[0] if g.topics else None
    return (g.error_code or (p.error_code if p else -1)), (p.offset if p else None)


def find_coordinator(ctx: Ctx, c: RawClient) -> Any:
    return _retry_coordinator(lambda: c.request(_req(ApiKey.FIND_COORDINATOR, 1, key=ctx.group, key_type=0)), lambda r: r.error_code).error_code


def find_coordinator_txn(ctx: Ctx, c: RawClient) -> Any:
    return _retry_coordinator(lambda: c.request(_req(ApiKey.FIND_COORDINATOR, 1, key=ctx.txn, key_type=1)), lambda r: r.error_code).error_code


def join_group(ctx: Ctx, c: RawClient) -> Any:
    return _retry_coordinator(lambda: c.request(_join_req(ctx)), lambda r: r.error_code).error_code


def sync_group(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.SYNC_GROUP, 2, group_id=ctx.group, generation_id=ctx.generation, member_id=ctx.member, assignments=[(ctx.member, b"b")])).error_code


def heartbeat(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.HEARTBEAT, 2, group_id=ctx.group, generation_id=ctx.generation, member_id=ctx.member)).error_code


def leave_group(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.LEAVE_GROUP, 2, group_id=ctx.group, member_id=ctx.member)).error_code


def list_groups(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.LIST_GROUPS, 2))
    return r.error_code, ctx.group in [g.group_id for g in r.groups]


def describe_groups(ctx: Ctx, c: RawClient) -> Any:
    g = c.request(_req(ApiKey.DESCRIBE_GROUPS, 1, groups=[ctx.group])).groups[0]
    return g.error_code, len(g.members)


def delete_groups(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.DELETE_GROUPS, 1, groups_names=[ctx.group])).results[0].error_code


def describe_configs_topic(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.DESCRIBE_CONFIGS, 1, resources=[(2, ctx.topic, None)], include_synonyms=False)).results[0]
    return r.error_code, bool(r.configs)


def describe_configs_broker(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.DESCRIBE_CONFIGS, 1, resources=[(4, str(ctx.b.broker_id), None)], include_synonyms=False)).results[0]
    return r.error_code, bool(r.configs)


def delete_topics(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.DELETE_TOPICS, 3, topic_names=[ctx.topic], timeout_ms=10_000)).responses[0].error_code


def delete_records(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.DELETE_RECORDS, 2, topics=[(ctx.topic, [(0, -1)])], timeout_ms=10_000)).topics[0].partitions[0]
    return r.error_code, r.low_watermark


def create_partitions(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.CREATE_PARTITIONS, 1, topics=[(ctx.topic, 2, None)], timeout_ms=10_000, validate_only=False)).results[0]
    return r.error_code


def elect_leaders(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.ELECT_LEADERS, 1, election_type=0, topic_partitions=[(ctx.topic, [0])], timeout_ms=10_000))
    return r.error_code, r.replica_election_results[0].partition_result[0].error_code


def alter_reassignments(ctx: Ctx, c: RawClient) -> Any:
    # a cancel with nothing in progress: Kafka's answer once authorized, and nothing changes
    r = c.request(_req(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=10_000, topics=[(ctx.topic, [(0, None)])]))
    return r.error_code, [p.error_code for t in r.responses for p in t.partitions]


def list_reassignments(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=10_000, topics=None))
    return r.error_code, list(r.topics)


def alter_configs_topic(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.ALTER_CONFIGS, 1, resources=[(2, ctx.topic, [("retention.ms", "3600000")])], validate_only=False)).responses[0].error_code


def alter_configs_broker(ctx: Ctx, c: RawClient) -> Any:
    # validate_only: a dynamic broker config set here would change every later case's broker
    return c.request(_req(ApiKey.ALTER_CONFIGS, 1, resources=[(4, str(ctx.b.broker_id), [("log.retention.ms", "3600000")])],
                          validate_only=True)).responses[0].error_code


def incremental_alter_configs_topic(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, resources=[(2, ctx.topic, [("retention.ms", 0, "3600000")])],
                          validate_only=False)).responses[0].error_code


def incremental_alter_configs_broker(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, resources=[(4, "", [("log.retention.ms", 0, "3600000")])],
                          validate_only=True)).responses[0].error_code


def describe_log_dirs(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.DESCRIBE_LOG_DIRS, 1, topics=[(ctx.topic, [0])]))
    return [(t.name, [p.partition_index for p in t.partitions]) for d in r.results for t in d.topics] == [(ctx.topic, [0])]


def describe_cluster(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False, endpoint_type=1))
    return r.error_code, [b.broker_id for b in r.brokers]


def describe_client_quotas(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, components=[], strict=False))
    return r.error_code, r.entries is not None


def alter_client_quotas(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.ALTER_CLIENT_QUOTAS, 0, entries=[([("client-id", "acl-matrix")], [("producer_byte_rate", 1e9, False)])],
                       validate_only=True))
    return r.entries[0].error_code


def offset_delete(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.OFFSET_DELETE, 0, group_id=ctx.group, topics=[(ctx.topic, [(0,)])]))
    return r.error_code, [p.error_code for t in r.topics for p in t.partitions]


def _topic_configs(ctx: Ctx) -> Any:
    return sorted(ctx.b.broker.store.entity_config("topics", ctx.topic).items())


# Inter-broker requests carry controller epoch 1000 (no controller has it): past authorization
# they are answered STALE_CONTROLLER_EPOCH and change nothing.
def leader_and_isr(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.LEADER_AND_ISR, 1, controller_id=0, controller_epoch=1000,
                          ungrouped_partition_states=[(ctx.topic, 0, 1000, 5, 99, [5], 0, [5], False)], live_leaders=[])).error_code


def update_metadata(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.UPDATE_METADATA, 5, controller_id=0, controller_epoch=1000, broker_epoch=-1,
                          topic_states=[(ctx.topic, [(0, 1000, 5, 99, [5], 0, [5], [])])], live_brokers=[])).error_code


def stop_replica(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.STOP_REPLICA, 0, controller_id=0, controller_epoch=1000, delete_partitions=True,
                          ungrouped_partitions=[(ctx.topic, 0)])).error_code


def controlled_shutdown(ctx: Ctx, c: RawClient) -> Any:
    # Broker 99 is not a live broker: past authorization the controller refuses it.
    return c.request(_req(ApiKey.CONTROLLED_SHUTDOWN, 1, broker_id=99)).error_code


def api_versions(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.API_VERSIONS, 0)).error_code


def sasl_reauthenticate(ctx: Ctx, c: RawClient) -> Any:
    """SaslHandshake + SaslAuthenticate on an authenticated connection (re-authentication):
    served without any ACL; the connection serves on."""
    _login(ctx.b, c.user, c.mechanism, c)  # type: ignore[attr-defined]
    return c.request(_req(ApiKey.API_VERSIONS, 0)).error_code


def _txn_ready(ctx: Ctx) -> None:
    """A topic and a transactional id with a producer (admin's), no transaction open."""
    _create(ctx)
    r = _retry_coordinator(lambda: ctx.admin.request(_req(INIT_PRODUCER_ID, 1, transactional_id=ctx.txn, transaction_timeout_ms=60_000)), lambda r: r.error_code)
    assert r.error_code == E.NONE, r
    ctx.producer = (r.producer_id, r.producer_epoch)


def _add_partitions_req(ctx: Ctx) -> Any:
    return _req(ApiKey.ADD_PARTITIONS_TO_TXN, 1, transactional_id=ctx.txn, producer_id=ctx.producer[0], producer_epoch=ctx.producer[1], topics=[(ctx.topic, [0])])


def _add_offsets_req(ctx: Ctx) -> Any:
    return _req(ApiKey.ADD_OFFSETS_TO_TXN, 1, transactional_id=ctx.txn, producer_id=ctx.producer[0], producer_epoch=ctx.producer[1], group_id=ctx.group)


def _txn_open(ctx: Ctx) -> None:
    """As _txn_ready, with a transaction open on the topic and the group's offsets."""
    _txn_ready(ctx)
    r = ctx.admin.request(_add_partitions_req(ctx))
    assert r.results[0].results[0].error_code == E.NONE, r
    r = _retry_coordinator(lambda: ctx.admin.request(_add_offsets_req(ctx)), lambda r: r.error_code)
    assert r.error_code == E.NONE, r


def add_partitions_to_txn(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_add_partitions_req(ctx)).results[0].results[0].error_code


def add_offsets_to_txn(ctx: Ctx, c: RawClient) -> Any:
    return _retry_coordinator(lambda: c.request(_add_offsets_req(ctx)), lambda r: r.error_code).error_code


def end_txn(ctx: Ctx, c: RawClient) -> Any:
    return c.request(_req(ApiKey.END_TXN, 1, transactional_id=ctx.txn, producer_id=ctx.producer[0], producer_epoch=ctx.producer[1], committed=False)).error_code


def txn_offset_commit(ctx: Ctx, c: RawClient) -> Any:
    req = _req(ApiKey.TXN_OFFSET_COMMIT, 1, transactional_id=ctx.txn, group_id=ctx.group, producer_id=ctx.producer[0], producer_epoch=ctx.producer[1],
               topics=[(ctx.topic, [(0, 5, None)])])
    return _retry_coordinator(lambda: c.request(req), lambda r: r.topics[0].partitions[0].error_code).topics[0].partitions[0].error_code


def write_txn_markers(ctx: Ctx, c: RawClient) -> Any:
    # an abort marker for a producer id that wrote nothing here: written, changes the log end
    r = c.request(_req(ApiKey.WRITE_TXN_MARKERS, 0, markers=[(987_654_321, 0, False, [(ctx.topic, [0])], 0)]))
    return r.markers[0].topics[0].partitions[0].error_code


def describe_transactions(ctx: Ctx, c: RawClient) -> Any:
    d = c.request(_req(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=[ctx.txn])).transaction_states[0]
    return d.error_code, d.transaction_state


def list_transactions(ctx: Ctx, c: RawClient) -> Any:
    r = c.request(_req(ApiKey.LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[], duration_filter=-1))
    return r.error_code, ctx.txn in [t.transactional_id for t in r.transaction_states]


def consumer_group_describe(ctx: Ctx, c: RawClient) -> Any:
    """Describe on the group: its members."""
    g = c.request(_req(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=[ctx.group])).groups[0]
    return g.error_code, [m.member_id for m in g.members]


def consumer_group_heartbeat(ctx: Ctx, c: RawClient) -> Any:
    """A KIP-848 join: Group Read and Describe on the subscribed topic (as Kafka)."""
    r = c.request(_req(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id=ctx.group, member_id="", member_epoch=0, rebalance_timeout_ms=30_000, subscribed_topic_names=[ctx.topic], topic_partitions=[]))
    return r.error_code


INIT_PRODUCER_ID = 22


# -- the table ------------------------------------------------------------------------------------------------
Grant = tuple[str, str]  # (resource kind in Ctx.resource, operation)


@dataclass(frozen=True)
class Case:
    name: str
    api: int
    call: Callable[[Ctx, RawClient], Any]
    needs: tuple[Grant, ...]
    missing: Grant | None  # the ACL under test (None: the API needs none)
    denied: Any  # eve's outcome
    allowed: Any  # alice's outcome
    setup: Callable[[Ctx], None] = _create
    changes: bool = False  # alice's request changes the snapshot


CASES = [
    Case("produce", ApiKey.PRODUCE, produce, (("topic", "Write"),), ("topic", "Write"), E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("produce-auto-create", ApiKey.PRODUCE, produce_auto_create, (("new_topic", "Write"), ("new_topic", "Create")), ("new_topic", "Create"),
         E.UNKNOWN_TOPIC_OR_PARTITION, E.NONE, changes=True),
    Case("produce-transactional", ApiKey.PRODUCE, produce_transactional, (("topic", "Write"), ("txn", "Write")), ("txn", "Write"),
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("fetch", ApiKey.FETCH, fetch, (("topic", "Read"),), ("topic", "Read"), (E.TOPIC_AUTHORIZATION_FAILED, False), (E.NONE, True), _with_data),
    Case("fetch-follower", ApiKey.FETCH, follower_fetch, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.REPLICA_NOT_AVAILABLE, _with_data),
    Case("list-offsets", ApiKey.LIST_OFFSETS, list_offsets, (("topic", "Describe"),), ("topic", "Describe"), (E.TOPIC_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _with_data),
    Case("metadata", ApiKey.METADATA, metadata, (("topic", "Describe"),), ("topic", "Describe"), (E.TOPIC_AUTHORIZATION_FAILED, 0), (E.NONE, 1)),
    Case("metadata-by-id", ApiKey.METADATA, metadata_by_id, (("topic", "Describe"),), ("topic", "Describe"), (E.UNKNOWN_TOPIC_ID, None),
         (E.NONE, "TOPIC")),
    Case("metadata-all", ApiKey.METADATA, metadata_all, (("topic", "Describe"),), ("topic", "Describe"), False, True),
    Case("metadata-auto-create", ApiKey.METADATA, metadata_auto_create, (("new_topic", "Describe"), ("new_topic", "Create")), ("new_topic", "Create"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("metadata-auto-create-cluster", ApiKey.METADATA, metadata_auto_create, (("new_topic", "Describe"), ("cluster", "Create")), ("cluster", "Create"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("create-topics", ApiKey.CREATE_TOPICS, create_topics, (("new_topic", "Create"),), ("new_topic", "Create"), E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("create-topics-cluster", ApiKey.CREATE_TOPICS, create_topics, (("cluster", "Create"),), ("cluster", "Create"), E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("offset-for-leader-epoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, offset_for_leader_epoch, (("topic", "Describe"),), ("topic", "Describe"),
         (E.TOPIC_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _with_data),
    Case("offset-for-leader-epoch-cluster", ApiKey.OFFSET_FOR_LEADER_EPOCH, offset_for_leader_epoch, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         (E.TOPIC_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _with_data),
    Case("init-producer-id", INIT_PRODUCER_ID, init_producer_id, (("cluster", "IdempotentWrite"),), ("cluster", "IdempotentWrite"),
         (E.CLUSTER_AUTHORIZATION_FAILED, False), (E.NONE, True)),
    Case("init-producer-id-write-any-topic", INIT_PRODUCER_ID, init_producer_id, (("topic", "Write"),), ("topic", "Write"),
         (E.CLUSTER_AUTHORIZATION_FAILED, False), (E.NONE, True)),
    Case("init-producer-id-transactional", INIT_PRODUCER_ID, init_producer_id_transactional, (("txn", "Write"),), ("txn", "Write"),
         (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, False), (E.NONE, True), changes=True),
    Case("offset-commit-group", ApiKey.OFFSET_COMMIT, offset_commit, (("group", "Read"), ("topic", "Read")), ("group", "Read"),
         E.GROUP_AUTHORIZATION_FAILED, E.NONE, _committed, changes=True),
    Case("offset-commit-topic", ApiKey.OFFSET_COMMIT, offset_commit, (("group", "Read"), ("topic", "Read")), ("topic", "Read"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE, _committed, changes=True),
    Case("offset-fetch-group", ApiKey.OFFSET_FETCH, offset_fetch, (("group", "Describe"), ("topic", "Describe")), ("group", "Describe"),
         (E.GROUP_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _committed),
    Case("offset-fetch-topic", ApiKey.OFFSET_FETCH, offset_fetch, (("group", "Describe"), ("topic", "Describe")), ("topic", "Describe"),
         (E.TOPIC_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _committed),
    Case("offset-fetch-all-topic", ApiKey.OFFSET_FETCH, offset_fetch_all, (("group", "Describe"), ("topic", "Describe")), ("topic", "Describe"),
         (E.NONE, []), (E.NONE, "committed"), _committed),
    Case("offset-fetch-v9-group", ApiKey.OFFSET_FETCH, offset_fetch_v9, (("group", "Describe"), ("topic", "Describe")), ("group", "Describe"),
         (E.GROUP_AUTHORIZATION_FAILED, None), (E.NONE, 1), _committed),  # a refused group's answer has no topics, as Kafka
    Case("offset-fetch-v9-topic", ApiKey.OFFSET_FETCH, offset_fetch_v9, (("group", "Describe"), ("topic", "Describe")), ("topic", "Describe"),
         (E.TOPIC_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _committed),
    Case("consumer-group-describe", ApiKey.CONSUMER_GROUP_DESCRIBE, consumer_group_describe, (("group", "Describe"), ("topic", "Describe")),
         ("group", "Describe"),
         (E.GROUP_AUTHORIZATION_FAILED, []), (E.NONE, ["m-admin"]), _consumer_member),
    # Kafka 4.0+ (KAFKA-18813): Describe on each topic of the members' assignments, else the
    # group is answered TOPIC_AUTHORIZATION_FAILED without its members (no topic name leaks)
    Case("consumer-group-describe-topics", ApiKey.CONSUMER_GROUP_DESCRIBE, consumer_group_describe, (("group", "Describe"), ("topic", "Describe")),
         ("topic", "Describe"), (E.TOPIC_AUTHORIZATION_FAILED, []), (E.NONE, ["m-admin"]), _consumer_member),
    Case("find-coordinator", ApiKey.FIND_COORDINATOR, find_coordinator, (("group", "Describe"),), ("group", "Describe"), E.GROUP_AUTHORIZATION_FAILED, E.NONE),
    Case("find-coordinator-transaction", ApiKey.FIND_COORDINATOR, find_coordinator_txn, (("txn", "Describe"),), ("txn", "Describe"),
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.NONE),
    Case("join-group", ApiKey.JOIN_GROUP, join_group, (("group", "Read"),), ("group", "Read"), E.GROUP_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("sync-group", ApiKey.SYNC_GROUP, sync_group, (("group", "Read"),), ("group", "Read"), E.GROUP_AUTHORIZATION_FAILED, E.NONE, _joined),
    Case("consumer-group-heartbeat", ApiKey.CONSUMER_GROUP_HEARTBEAT, consumer_group_heartbeat, (("group", "Read"), ("topic", "Describe")), ("group", "Read"),
         E.GROUP_AUTHORIZATION_FAILED, E.NONE),  # (consumer groups are in memory: no snapshot change)
    Case("consumer-group-heartbeat-topic", ApiKey.CONSUMER_GROUP_HEARTBEAT, consumer_group_heartbeat, (("group", "Read"), ("topic", "Describe")), ("topic", "Describe"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE),
    Case("heartbeat", ApiKey.HEARTBEAT, heartbeat, (("group", "Read"),), ("group", "Read"), E.GROUP_AUTHORIZATION_FAILED, E.NONE, _joined),
    Case("leave-group", ApiKey.LEAVE_GROUP, leave_group, (("group", "Read"),), ("group", "Read"), E.GROUP_AUTHORIZATION_FAILED, E.NONE, _joined, changes=True),
    Case("list-groups", ApiKey.LIST_GROUPS, list_groups, (("group", "Describe"),), ("group", "Describe"), (E.NONE, False), (E.NONE, True), _joined),
    Case("list-groups-cluster", ApiKey.LIST_GROUPS, list_groups, (("cluster", "Describe"),), ("cluster", "Describe"), (E.NONE, False), (E.NONE, True), _joined),
    Case("describe-groups", ApiKey.DESCRIBE_GROUPS, describe_groups, (("group", "Describe"),), ("group", "Describe"),
         (E.GROUP_AUTHORIZATION_FAILED, 0), (E.NONE, 1), _joined),
    Case("delete-groups", ApiKey.DELETE_GROUPS, delete_groups, (("group", "Delete"),), ("group", "Delete"), E.GROUP_AUTHORIZATION_FAILED, E.NONE,
         _empty_group_with_offsets, changes=True),
    Case("describe-configs-topic", ApiKey.DESCRIBE_CONFIGS, describe_configs_topic, (("topic", "DescribeConfigs"),), ("topic", "DescribeConfigs"),
         (E.TOPIC_AUTHORIZATION_FAILED, False), (E.NONE, True)),
    Case("describe-configs-broker", ApiKey.DESCRIBE_CONFIGS, describe_configs_broker, (("cluster", "DescribeConfigs"),), ("cluster", "DescribeConfigs"),
         (E.CLUSTER_AUTHORIZATION_FAILED, False), (E.NONE, True)),
    Case("delete-topics", ApiKey.DELETE_TOPICS, delete_topics, (("topic", "Delete"),), ("topic", "Delete"), E.TOPIC_AUTHORIZATION_FAILED, E.NONE,
         _with_data, changes=True),
    Case("delete-records", ApiKey.DELETE_RECORDS, delete_records, (("topic", "Delete"),), ("topic", "Delete"),
         (E.TOPIC_AUTHORIZATION_FAILED, -1), (E.NONE, 1), _with_data, changes=True),
    Case("create-partitions", ApiKey.CREATE_PARTITIONS, create_partitions, (("topic", "Alter"),), ("topic", "Alter"), E.TOPIC_AUTHORIZATION_FAILED, E.NONE,
         changes=True),
    Case("elect-leaders", ApiKey.ELECT_LEADERS, elect_leaders, (("cluster", "Alter"),), ("cluster", "Alter"),
         (E.CLUSTER_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED), (E.NONE, E.ELECTION_NOT_NEEDED)),
    Case("alter-partition-reassignments", ApiKey.ALTER_PARTITION_REASSIGNMENTS, alter_reassignments, (("cluster", "Alter"),),
         ("cluster", "Alter"), (E.CLUSTER_AUTHORIZATION_FAILED, []), (E.NONE, [E.NO_REASSIGNMENT_IN_PROGRESS])),
    Case("list-partition-reassignments", ApiKey.LIST_PARTITION_REASSIGNMENTS, list_reassignments, (("cluster", "Describe"),),
         ("cluster", "Describe"), (E.CLUSTER_AUTHORIZATION_FAILED, []), (E.NONE, [])),
    Case("alter-configs-topic", ApiKey.ALTER_CONFIGS, alter_configs_topic, (("topic", "AlterConfigs"),), ("topic", "AlterConfigs"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("alter-configs-broker", ApiKey.ALTER_CONFIGS, alter_configs_broker, (("cluster", "AlterConfigs"),), ("cluster", "AlterConfigs"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.NONE),
    Case("incremental-alter-configs-topic", ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental_alter_configs_topic, (("topic", "AlterConfigs"),),
         ("topic", "AlterConfigs"), E.TOPIC_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("incremental-alter-configs-broker", ApiKey.INCREMENTAL_ALTER_CONFIGS, incremental_alter_configs_broker, (("cluster", "AlterConfigs"),),
         ("cluster", "AlterConfigs"), E.CLUSTER_AUTHORIZATION_FAILED, E.NONE),
    Case("describe-log-dirs", ApiKey.DESCRIBE_LOG_DIRS, describe_log_dirs, (("cluster", "Describe"),), ("cluster", "Describe"), False, True),
    Case("describe-cluster", ApiKey.DESCRIBE_CLUSTER, describe_cluster, (("cluster", "Describe"),), ("cluster", "Describe"),
         (E.CLUSTER_AUTHORIZATION_FAILED, []), (E.NONE, [0])),
    Case("describe-client-quotas", ApiKey.DESCRIBE_CLIENT_QUOTAS, describe_client_quotas, (("cluster", "DescribeConfigs"),),
         ("cluster", "DescribeConfigs"), (E.CLUSTER_AUTHORIZATION_FAILED, False), (E.NONE, True)),
    Case("alter-client-quotas", ApiKey.ALTER_CLIENT_QUOTAS, alter_client_quotas, (("cluster", "AlterConfigs"),), ("cluster", "AlterConfigs"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.NONE),
    Case("offset-delete-group", ApiKey.OFFSET_DELETE, offset_delete, (("group", "Delete"), ("topic", "Read")), ("group", "Delete"),
         # Kafka answers a refused group with the top-level error and no topics
         (E.GROUP_AUTHORIZATION_FAILED, []), (E.NONE, [E.NONE]), _empty_group_with_offsets, changes=True),
    Case("offset-delete-topic", ApiKey.OFFSET_DELETE, offset_delete, (("group", "Delete"), ("topic", "Read")), ("topic", "Read"),
         (E.NONE, [E.TOPIC_AUTHORIZATION_FAILED]), (E.NONE, [E.NONE]), _empty_group_with_offsets, changes=True),
    Case("leader-and-isr", ApiKey.LEADER_AND_ISR, leader_and_isr, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.STALE_CONTROLLER_EPOCH, _with_data),
    Case("update-metadata", ApiKey.UPDATE_METADATA, update_metadata, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.STALE_CONTROLLER_EPOCH, _with_data),
    Case("stop-replica", ApiKey.STOP_REPLICA, stop_replica, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.STALE_CONTROLLER_EPOCH, _with_data),
    Case("controlled-shutdown", ApiKey.CONTROLLED_SHUTDOWN, controlled_shutdown, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         E.CLUSTER_AUTHORIZATION_FAILED, "not-authorization-failed", _with_data),
    Case("add-partitions-to-txn", ApiKey.ADD_PARTITIONS_TO_TXN, add_partitions_to_txn, (("txn", "Write"), ("topic", "Write")), ("txn", "Write"),
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.NONE, _txn_ready, changes=True),
    Case("add-partitions-to-txn-topic", ApiKey.ADD_PARTITIONS_TO_TXN, add_partitions_to_txn, (("txn", "Write"), ("topic", "Write")), ("topic", "Write"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE, _txn_ready, changes=True),
    Case("add-offsets-to-txn", ApiKey.ADD_OFFSETS_TO_TXN, add_offsets_to_txn, (("txn", "Write"), ("group", "Read")), ("txn", "Write"),
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.NONE, _txn_ready, changes=True),
    Case("add-offsets-to-txn-group", ApiKey.ADD_OFFSETS_TO_TXN, add_offsets_to_txn, (("txn", "Write"), ("group", "Read")), ("group", "Read"),
         E.GROUP_AUTHORIZATION_FAILED, E.NONE, _txn_ready, changes=True),
    Case("end-txn", ApiKey.END_TXN, end_txn, (("txn", "Write"),), ("txn", "Write"), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.NONE, _txn_open, changes=True),
    Case("txn-offset-commit", ApiKey.TXN_OFFSET_COMMIT, txn_offset_commit, (("txn", "Write"), ("group", "Read"), ("topic", "Read")), ("txn", "Write"),
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.NONE, _txn_open, changes=True),
    Case("txn-offset-commit-group", ApiKey.TXN_OFFSET_COMMIT, txn_offset_commit, (("txn", "Write"), ("group", "Read"), ("topic", "Read")), ("group", "Read"),
         E.GROUP_AUTHORIZATION_FAILED, E.NONE, _txn_open, changes=True),
    Case("txn-offset-commit-topic", ApiKey.TXN_OFFSET_COMMIT, txn_offset_commit, (("txn", "Write"), ("group", "Read"), ("topic", "Read")), ("topic", "Read"),
         E.TOPIC_AUTHORIZATION_FAILED, E.NONE, _txn_open, changes=True),
    Case("write-txn-markers", ApiKey.WRITE_TXN_MARKERS, write_txn_markers, (("cluster", "ClusterAction"),), ("cluster", "ClusterAction"),
         E.CLUSTER_AUTHORIZATION_FAILED, E.NONE, changes=True),
    Case("describe-transactions", ApiKey.DESCRIBE_TRANSACTIONS, describe_transactions, (("txn", "Describe"),), ("txn", "Describe"),
         (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ""), (E.NONE, "Empty"), _txn_ready),
    Case("list-transactions", ApiKey.LIST_TRANSACTIONS, list_transactions, (("txn", "Describe"),), ("txn", "Describe"),
         (E.NONE, False), (E.NONE, True), _txn_ready),
    Case("api-versions", ApiKey.API_VERSIONS, api_versions, (), None, E.NONE, E.NONE),
    Case("sasl-handshake", ApiKey.SASL_HANDSHAKE, sasl_reauthenticate, (), None, E.NONE, E.NONE),
    Case("sasl-authenticate", ApiKey.SASL_AUTHENTICATE, sasl_reauthenticate, (), None, E.NONE, E.NONE),
]


def _decoys(rtype: str, op: str) -> list[str]:
    """Every operation on the resource that neither is nor implies ``op``."""
    implying = set(_IMPLIES.get(op, (op,))) | {"All", op}
    return [o for o in OPERATIONS if o not in implying]


def _acls(ctx: Ctx, principal: str, grants: list[Grant], decoys_of: Grant | None) -> list[Acl]:
    out = []
    for kind, op in grants:
        rtype, name = ctx.resource(kind)
        out.append(Acl.make(rtype, name, principal, op))
    if decoys_of is not None:
        rtype, name = ctx.resource(decoys_of[0])
        out += [Acl.make(rtype, name, principal, o) for o in _decoys(rtype, decoys_of[1])]
    return out


def _matches(outcome: Any, expected: Any, ctx: Ctx) -> bool:
    if expected == "not-authorization-failed":
        return outcome not in (E.CLUSTER_AUTHORIZATION_FAILED, E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED)
    if expected == (E.NONE, "committed"):
        return bool(outcome == (E.NONE, [(ctx.topic, 1)]))
    if expected == (E.NONE, "TOPIC"):
        return bool(outcome == (E.NONE, ctx.topic))
    return bool(outcome == expected)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_acl_matrix(case: Case, broker: EmbeddedBroker, clients: Clients, acls: FileAclStore) -> None:
    ctx = Ctx(broker, clients.admin)
    case.setup(ctx)
    eve = _acls(ctx, "User:eve", [g for g in case.needs if g != case.missing], case.missing)
    alice = _acls(ctx, "User:alice", list(case.needs), None)
    acls.add(eve + alice)
    try:
        before = snapshot(ctx)
        refused = case.call(ctx, clients.eve)
        assert _matches(refused, case.denied, ctx), f"{case.name}: eve without {case.missing} got {refused!r}, expected {case.denied!r}"
        assert snapshot(ctx) == before, f"{case.name}: eve's refused request changed the broker's state"
        served = case.call(ctx, clients.alice)
        assert _matches(served, case.allowed, ctx), f"{case.name}: alice with {case.needs} got {served!r}, expected {case.allowed!r}"
        if case.changes:
            wait_until(lambda: snapshot(ctx) != before, TIMEOUT_S, f"{case.name}: alice's request shows in the snapshot")
    finally:
        acls.remove(eve + alice)


def test_matrix_covers_every_served_api(broker: EmbeddedBroker, clients: Clients) -> None:
    served = {k.api_key for k in clients.eve.request(_req(ApiKey.API_VERSIONS, 0)).api_keys}
    assert served == {c.api for c in CASES}
