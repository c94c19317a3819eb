"""Hostile values, not hostile bytes: requests that decode cleanly but carry absurd values
(negative or huge partitions, offsets and sizes, negative or huge timeouts, far-future or
negative timestamps, deep header lists, very many topics in one request) reach the handlers.

Invariant, for every example: the broker answers with a Kafka error or a valid answer (the
connection stays open: the next request on it is answered too), and what it held before is
still there afterwards (the seeded topic's records read back unchanged).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import ErrorCode
from hmbclient.protocol import records
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS

from .conftest import RawClient, encode, fetch, produce, wait_until

pytestmark = pytest.mark.timeout(300)

SEEDED = "hostile-seeded"
SEED_VALUES = [f"seed-{i}".encode() for i in range(10)]
I32 = st.one_of(st.sampled_from([-(2**31), -1, 0, 1, 2**31 - 1, 2**30, -(2**30)]), st.integers(-(2**31), 2**31 - 1))
I64 = st.one_of(st.sampled_from([-(2**63), -2, -1, 0, 2**63 - 1, 2**62, 10**15]), st.integers(-(2**63), 2**63 - 1))
SMALL_WAIT = st.sampled_from([-(2**31), -1, 0, 1, 50])  # a huge max_wait_ms only makes the example slow
TOPIC = st.one_of(st.just(SEEDED), st.sampled_from(["", ".", "..", "a" * 300, "bad name", "__consumer_offsets"]),
                  st.text(min_size=1, max_size=20))
HOSTILE_TS = st.sampled_from([-(2**63), -2, -1, 0, 2**63 - 1, 10**15, int(time.time() * 1000) + 10**12])


def _req(api: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(api, version)].build(**fields)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(group_initial_rebalance_delay_ms=0, auto_create_topics_enable=False) as b:
        with RawClient("127.0.0.1", b.port) as c:
            resp = c.request(_req(ApiKey.CREATE_TOPICS, 2, topics=[(SEEDED, 2, 1, [], [])], timeout_ms=10_000, validate_only=False))
            assert resp.topics[0].error_code == ErrorCode.NONE
            wait_until(lambda: b.broker.metadata.is_ready(SEEDED), 20, "seeded topic ready")
            assert produce(c, SEEDED, 0, encode([(None, v) for v in SEED_VALUES]), acks=-1).error_code == ErrorCode.NONE
        yield b


def _seed_intact(c: RawClient) -> None:
    p = fetch(c, SEEDED, 0, 0)
    assert p.error_code == ErrorCode.NONE
    assert [r.value for r in records.decode_records(p.records)][: len(SEED_VALUES)] == SEED_VALUES


def _records(timestamps: list[int], headers: int, magic: int) -> bytes:
    items = [(None, b"x", ts) for ts in timestamps]
    if magic == 2 and headers:
        hdrs = [(f"h{i}", b"v" * (i % 7)) for i in range(headers)]
        return records.encode_records(2, records.NONE, [(k, v, ts, hdrs) for k, v, ts in items], timestamp_ms=timestamps[0])  # type: ignore[list-item]
    return records.encode_records(magic, records.NONE, items, timestamp_ms=timestamps[0])


produce_reqs = st.builds(
    lambda topic, part, acks, timeout, tss, headers, version: _req(
        ApiKey.PRODUCE, version, transactional_id=None, acks=acks, timeout_ms=timeout,
        topics=[(topic, [(part, _records(tss, headers, 2 if version >= 3 else 1))])]),
    TOPIC, I32, st.sampled_from([-2, -1, 0, 1, 2, 32767, -32768]), st.one_of(SMALL_WAIT, st.just(2**31 - 1)),
    st.builds(lambda ts, n: [ts] * n, HOSTILE_TS, st.integers(1, 3)), st.sampled_from([0, 1, 50, 2000]), st.sampled_from([2, 3, 7]),
)
fetch_reqs = st.builds(
    lambda topic, part, off, pmax, max_bytes, wait, min_bytes: _req(
        ApiKey.FETCH, 4, replica_id=-1, max_wait_ms=wait, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
        topics=[(topic, [(part, off, pmax)])]),
    TOPIC, I32, I64, I32, I32, SMALL_WAIT, st.sampled_from([-(2**31), -1, 0, 1, 2**31 - 1]),
)
list_offsets_reqs = st.builds(
    lambda topic, part, ts, n, version: _req(ApiKey.LIST_OFFSETS, version, replica_id=-1, isolation_level=0,
                                             topics=[(topic, [(part, ts, n)] if version == 0 else [(part, ts)])]),
    TOPIC, I32, HOSTILE_TS | I64, I32, st.sampled_from([0, 1, 2]),
)
metadata_reqs = st.builds(lambda topics: _req(ApiKey.METADATA, 4, topics=topics, allow_auto_topic_creation=False),
                          st.lists(TOPIC, max_size=5))
commit_reqs = st.builds(
    lambda group, gen, topic, part, off, meta, retention: _req(
        ApiKey.OFFSET_COMMIT, 2, group_id=group, generation_id=gen, member_id="", retention_time_ms=retention,
        topics=[(topic, [(part, off, meta)])]),
    st.sampled_from(["g-hostile", ""]), I32, TOPIC, I32, I64, st.sampled_from([None, "", "m" * 5000]), I64,
)
offset_fetch_reqs = st.builds(lambda group, topic, part: _req(ApiKey.OFFSET_FETCH, 3, group_id=group, topics=[(topic, [part])]),
                              st.sampled_from(["g-hostile", ""]), TOPIC, I32)
# KIP-848: OffsetCommit v9 / OffsetFetch v9 with absurd epochs and members, ConsumerGroupHeartbeat
# with absurd epochs and timeouts, ConsumerGroupDescribe of odd group ids
commit_v9_reqs = st.builds(
    lambda group, epoch, member, topic, part, off: _req(ApiKey.OFFSET_COMMIT, 9, group_id=group, generation_id=epoch, member_id=member,
                                                        topics=[(topic, [(part, off, -1, "")])]),
    st.sampled_from(["g-hostile-848", ""]), I32, st.sampled_from(["", "nobody", "x" * 1000]), TOPIC, I32, I64,
)
offset_fetch_v9_reqs = st.builds(
    lambda group, member, epoch, topic, part: _req(ApiKey.OFFSET_FETCH, 9, groups=[{"group_id": group, "member_id": member, "member_epoch": epoch,
                                                                                    "topics": None if part is None else [(topic, [part])]}]),
    st.sampled_from(["g-hostile-848", ""]), st.sampled_from([None, "", "nobody"]), I32, TOPIC, st.one_of(st.none(), I32),
)
cg_heartbeat_reqs = st.builds(
    lambda member, epoch, timeout, topics, assignor: _req(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, group_id="g-hostile-848", member_id=member,
                                                          member_epoch=epoch, rebalance_timeout_ms=timeout, subscribed_topic_names=topics,
                                                          server_assignor=assignor, topic_partitions=[]),
    st.sampled_from(["", "nobody", "x" * 1000]), I32, I32, st.one_of(st.none(), st.lists(TOPIC, max_size=3)),
    st.sampled_from([None, "uniform", "range", "", "sticky"]),
)
cg_describe_reqs = st.builds(lambda ids: _req(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, group_ids=ids, include_authorized_operations=True),
                             st.lists(st.sampled_from(["g-hostile-848", "", "x" * 300]), max_size=3))
create_reqs = st.builds(
    lambda n, rf, validate, timeout: _req(ApiKey.CREATE_TOPICS, 2, topics=[(f"hostile-{uuid.uuid4().hex[:8]}", n, rf, [], [])],
                                          timeout_ms=timeout, validate_only=validate),
    I32, st.sampled_from([-32768, -2, -1, 0, 1, 2, 32767]), st.booleans(), SMALL_WAIT,
)
join_reqs = st.builds(
    # A group of its own per example: a join into a group with earlier members waits (legitimately)
    # for them to rejoin or expire, longer than this test's client timeout.
    lambda session, rebalance, nprot: _req(ApiKey.JOIN_GROUP, 2, group_id=f"g-hostile-join-{uuid.uuid4().hex[:8]}", session_timeout_ms=session,
                                           rebalance_timeout_ms=rebalance, member_id="", protocol_type="consumer",
                                           protocols=[(f"p{i}", b"") for i in range(nprot)]),
    I32, st.sampled_from([-1, 0, 1, 100]), st.sampled_from([0, 1, 500]),
)
heartbeat_reqs = st.builds(lambda gen, member: _req(ApiKey.HEARTBEAT, 2, group_id="g-hostile-join", generation_id=gen, member_id=member),
                           I32, st.sampled_from(["", "nobody", "x" * 1000]))
epoch_reqs = st.builds(lambda topic, part, cur, epoch: _req(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, topics=[(topic, [(part, cur, epoch)])]),
                       TOPIC, I32, I32, I32)
delete_topics_reqs = st.builds(lambda names, timeout: _req(ApiKey.DELETE_TOPICS, 3, topic_names=names, timeout_ms=timeout),
                               st.lists(TOPIC.filter(lambda t: t != SEEDED), max_size=3), SMALL_WAIT)
create_partitions_reqs = st.builds(
    # validate_only on the seeded topic (a valid count must not add partitions it then holds)
    lambda topic, n, assignment, timeout: _req(ApiKey.CREATE_PARTITIONS, 1, topics=[(topic, n, assignment)], timeout_ms=timeout,
                                               validate_only=topic == SEEDED),
    TOPIC, I32, st.one_of(st.none(), st.lists(st.lists(I32, max_size=3).map(lambda ids: (ids,)), max_size=3)), SMALL_WAIT,
)
elect_reqs = st.builds(lambda kind, parts, timeout: _req(ApiKey.ELECT_LEADERS, 1, election_type=kind, topic_partitions=parts, timeout_ms=timeout),
                       st.sampled_from([-128, -1, 0, 1, 2, 127]), st.one_of(st.none(), st.lists(st.tuples(TOPIC, st.lists(I32, max_size=3)), max_size=3)),
                       SMALL_WAIT)
CONFIG_NAME = st.one_of(st.sampled_from(["retention.ms", "max.message.bytes", "min.insync.replicas", "segment.bytes", "log.retention.ms",
                                          "num.partitions", "", "x" * 300]), st.text(max_size=20))
CONFIG_VALUE = st.one_of(st.none(), st.sampled_from(["", "-1", "0", "1", "2147483648", "9" * 30, "true", "1e9"]), st.text(max_size=20))
alter_configs_reqs = st.builds(
    # validate_only: a valid value would otherwise change the broker the next examples run on
    lambda kind, name, cfgs: _req(ApiKey.ALTER_CONFIGS, 1, resources=[(kind, name, cfgs)], validate_only=True),
    st.sampled_from([-1, 0, 2, 4, 8, 127]), st.one_of(TOPIC, st.sampled_from(["0", "1", "-1", ""])),
    st.lists(st.tuples(CONFIG_NAME, CONFIG_VALUE), max_size=3),
)
incremental_reqs = st.builds(
    lambda kind, name, cfgs: _req(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, resources=[(kind, name, cfgs)], validate_only=True),
    st.sampled_from([-1, 2, 4]), st.one_of(TOPIC, st.sampled_from(["0", ""])),
    st.lists(st.tuples(CONFIG_NAME, st.sampled_from([-128, -1, 0, 1, 2, 3, 4, 127]), CONFIG_VALUE), max_size=3),
)
log_dirs_reqs = st.builds(lambda parts: _req(ApiKey.DESCRIBE_LOG_DIRS, 1, topics=parts),
                          st.one_of(st.none(), st.lists(st.tuples(TOPIC, st.lists(I32, max_size=3)), max_size=3)))
cluster_reqs = st.builds(lambda ops, kind: _req(ApiKey.DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=ops, endpoint_type=kind),
                         st.booleans(), st.sampled_from([-128, -1, 0, 1, 2, 127]))
offset_delete_reqs = st.builds(lambda group, topic, parts: _req(ApiKey.OFFSET_DELETE, 0, group_id=group, topics=[(topic, [(p,) for p in parts])]),
                               st.sampled_from(["g-hostile", "", "g" * 300]), TOPIC, st.lists(I32, max_size=3))
delete_records_reqs = st.builds(
    # the seeded partition 0 must keep its records: a valid offset there would delete them
    lambda topic, parts, timeout: _req(ApiKey.DELETE_RECORDS, 2, topics=[(topic, [(1 if topic == SEEDED else p, off) for p, off in parts])],
                                       timeout_ms=timeout),
    TOPIC, st.lists(st.tuples(I32, I64), max_size=3), SMALL_WAIT,
)
QUOTA_ENTITY = st.lists(st.tuples(st.sampled_from(["user", "client-id", "ip", "", "x" * 300]),
                                   st.one_of(st.none(), st.sampled_from(["", "a/b", "*", "<default>"]), st.text(max_size=10))), max_size=3)
describe_quotas_reqs = st.builds(
    lambda comps, strict: _req(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, components=comps, strict=strict),
    st.lists(st.tuples(st.sampled_from(["user", "client-id", "ip", ""]), st.sampled_from([-128, -1, 0, 1, 2, 3, 127]),
                       st.one_of(st.none(), st.text(max_size=10))), max_size=3), st.booleans(),
)
alter_quotas_reqs = st.builds(
    # validate_only: a quota stored here would throttle the next examples' client
    lambda entity, ops: _req(ApiKey.ALTER_CLIENT_QUOTAS, 0, entries=[(entity, ops)], validate_only=True),
    QUOTA_ENTITY,
    st.lists(st.tuples(st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage", ""]),
                       st.floats(), st.booleans()), max_size=3),
)
alter_reassign_reqs = st.builds(
    lambda version, topic, parts, timeout: _req(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, timeout_ms=timeout,
                                                allow_replication_factor_change=version == 0, topics=[(topic, parts)]),
    st.sampled_from([0, 1]), TOPIC, st.lists(st.tuples(I32, st.one_of(st.none(), st.lists(I32, max_size=4))), max_size=3), SMALL_WAIT,
)
list_reassign_reqs = st.builds(lambda parts, timeout: _req(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=timeout, topics=parts),
                               st.one_of(st.none(), st.lists(st.tuples(TOPIC, st.lists(I32, max_size=3)), max_size=3)), SMALL_WAIT)
init_pid_reqs = st.builds(lambda timeout: _req(22, 1, transactional_id=None, transaction_timeout_ms=timeout), I32)
# transactions (KIP-98): hostile ids, producer ids, epochs, timeouts and isolation levels
I16 = st.sampled_from([-32768, -1, 0, 1, 32767])
TXN_ID = st.sampled_from(["", "x-hostile", "y" * 300])
txn_init_reqs = st.builds(lambda tid, timeout: _req(22, 1, transactional_id=tid, transaction_timeout_ms=timeout), TXN_ID, I32)
add_partitions_reqs = st.builds(
    lambda tid, pid, epoch, topic, part: _req(ApiKey.ADD_PARTITIONS_TO_TXN, 1, transactional_id=tid, producer_id=pid, producer_epoch=epoch, topics=[(topic, [part])]),
    TXN_ID, I64, I16, TOPIC, I32,
)
add_offsets_reqs = st.builds(
    lambda tid, pid, epoch, group: _req(ApiKey.ADD_OFFSETS_TO_TXN, 1, transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group),
    TXN_ID, I64, I16, st.sampled_from(["g-hostile", ""]),
)
end_txn_reqs = st.builds(
    lambda tid, pid, epoch, commit: _req(ApiKey.END_TXN, 1, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit),
    TXN_ID, I64, I16, st.booleans(),
)
txn_commit_reqs = st.builds(
    lambda tid, group, pid, epoch, topic, part, off, meta: _req(ApiKey.TXN_OFFSET_COMMIT, 1, transactional_id=tid, group_id=group, producer_id=pid,
                                                                 producer_epoch=epoch, topics=[(topic, [(part, off, meta)])]),
    TXN_ID, st.sampled_from(["g-hostile-txn", ""]), I64, I16, TOPIC, I32, I64, st.sampled_from([None, "", "m" * 5000]),
)
markers_reqs = st.builds(
    lambda pid, epoch, commit, topic, part, cepoch: _req(ApiKey.WRITE_TXN_MARKERS, 0, markers=[(pid, epoch, commit, [(topic, [part])], cepoch)]),
    I64, I16, st.booleans(), TOPIC.filter(lambda t: t != SEEDED), I32, I32,
)
committed_fetch_reqs = st.builds(
    lambda topic, part, off, level: _req(ApiKey.FETCH, 4, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=level,
                                         topics=[(topic, [(part, off, 1 << 20)])]),
    TOPIC, I32, I64, st.sampled_from([-128, -1, 0, 1, 2, 127]),
)
describe_txn_reqs = st.builds(lambda ids: _req(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=ids), st.lists(TXN_ID, max_size=3))
list_txn_reqs = st.builds(
    lambda states, pids, duration: _req(ApiKey.LIST_TRANSACTIONS, 1, state_filters=states, producer_id_filters=pids, duration_filter=duration),
    st.lists(st.sampled_from(["Ongoing", "Empty", "", "nonsense"]), max_size=3), st.lists(I64, max_size=3), I64,
)

HOSTILE = st.one_of(alter_reassign_reqs, list_reassign_reqs, produce_reqs, fetch_reqs, list_offsets_reqs, metadata_reqs, commit_reqs, offset_fetch_reqs,
                    create_reqs, join_reqs, heartbeat_reqs, epoch_reqs, init_pid_reqs, txn_init_reqs, add_partitions_reqs,
                    add_offsets_reqs, end_txn_reqs, txn_commit_reqs, markers_reqs, committed_fetch_reqs,
                    describe_txn_reqs, list_txn_reqs, delete_topics_reqs, create_partitions_reqs,
                    elect_reqs, alter_configs_reqs, incremental_reqs, log_dirs_reqs, cluster_reqs,
                    offset_delete_reqs, describe_quotas_reqs, alter_quotas_reqs, delete_records_reqs,
                    commit_v9_reqs, offset_fetch_v9_reqs, cg_heartbeat_reqs, cg_describe_reqs)


class _Errors(logging.Handler):
    """The broker's ERROR records (a handler that raised logs one before closing the connection)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def errors() -> Iterator[_Errors]:
    h = _Errors()
    logger = logging.getLogger("hmbclient")
    logger.addHandler(h)
    try:
        yield h
    finally:
        logger.removeHandler(h)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(req=HOSTILE)
def test_hostile_values_get_an_answer_and_change_nothing_held(broker: EmbeddedBroker, errors: _Errors, req: Any) -> None:
    errors.records.clear()
    with RawClient("127.0.0.1", broker.port, timeout_s=30.0) as c:
        if req.API_KEY == ApiKey.PRODUCE and req.acks == 0:
            # No answer to wait for. A refused acks=0 produce closes the connection on purpose
            # (Kafka's way to tell such a producer); the checks go over a new one.
            c.send_no_response(req)
        else:
            try:
                c.request(req)  # raises ConnectionError if the broker closed the connection
            except TimeoutError:
                raise AssertionError(f"no answer within 30 s to {req!r:.800}") from None
            assert c.request(_req(ApiKey.API_VERSIONS, 0)).error_code == ErrorCode.NONE
    with RawClient("127.0.0.1", broker.port, timeout_s=30.0) as c:
        assert c.request(_req(ApiKey.API_VERSIONS, 0)).error_code == ErrorCode.NONE
        _seed_intact(c)
    assert not errors.records, [r.getMessage() for r in errors.records]


def test_a_million_topics_in_one_request_is_answered(broker: EmbeddedBroker) -> None:
    names = [f"absent-{i}" for i in range(10**6)]
    with RawClient("127.0.0.1", broker.port, timeout_s=120.0) as c:
        resp = c.request(_req(ApiKey.METADATA, 4, topics=names, allow_auto_topic_creation=False))
        assert len(resp.topics) == len(names)
        assert {t.error_code for t in resp.topics} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        resp = c.request(_req(ApiKey.LIST_OFFSETS, 1, replica_id=-1, isolation_level=0, topics=[(SEEDED, [(p, -1) for p in range(10**5)])]))
        codes = [p.error_code for p in resp.topics[0].partitions]
        assert codes[:2] == [ErrorCode.NONE, ErrorCode.NONE] and set(codes[2:]) == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        _seed_intact(c)


@pytest.mark.parametrize("n", [2**31 - 1, 10**6])
@pytest.mark.parametrize("validate_only", [False, True])
def test_absurd_partition_count_is_refused_at_once(broker: EmbeddedBroker, n: int, validate_only: bool) -> None:
    topic = f"hostile-huge-{uuid.uuid4().hex[:8]}"
    with RawClient("127.0.0.1", broker.port, timeout_s=10.0) as c:
        t = c.request(_req(ApiKey.CREATE_TOPICS, 2, topics=[(topic, n, 1, [], [])], timeout_ms=0, validate_only=validate_only)).topics[0]
        assert t.error_code == ErrorCode.INVALID_PARTITIONS and "at most" in t.error_message
        assert c.request(_req(ApiKey.API_VERSIONS, 0)).error_code == ErrorCode.NONE
    assert not broker.broker.metadata.has_topic(topic)


def test_offset_commit_with_the_largest_retention_is_stored(broker: EmbeddedBroker, errors: _Errors) -> None:
    """retention_time_ms = 2^63-1 made the expiry overflow the record's int64 (struct.error: the
    connection was closed and nothing committed); the expiry now saturates."""
    errors.records.clear()
    group = f"g-retention-{uuid.uuid4().hex[:6]}"
    req = _req(ApiKey.OFFSET_COMMIT, 2, group_id=group, generation_id=-1, member_id="", retention_time_ms=2**63 - 1,
               topics=[(SEEDED, [(0, 7, "m")])])
    with RawClient("127.0.0.1", broker.port, timeout_s=10.0) as c:
        deadline = time.monotonic() + 20
        while True:
            code = c.request(req).topics[0].partitions[0].error_code
            if code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert code == ErrorCode.NONE
        fetched = c.request(_req(ApiKey.OFFSET_FETCH, 1, group_id=group, topics=[(SEEDED, [0])]))
        assert fetched.topics[0].partitions[0].offset == 7
    assert not errors.records, [r.getMessage() for r in errors.records]
