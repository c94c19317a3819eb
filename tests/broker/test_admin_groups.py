"""OffsetDelete (47) on a standalone broker, from hmbclient.admin, kafka-python's
KafkaAdminClient.delete_group_offsets and Kafka 4.4's ConsumerGroupCommand --delete-offsets.

* An empty group's committed offsets of the named partitions go (the others stay), and stay
  gone after the broker restarts (tombstones in ``__consumer_offsets``).
* While a member of the group subscribes to a topic, its offsets are refused
  (GROUP_SUBSCRIBED_TO_TOPIC); another topic's may go. An unknown group: GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from hmbclient import admin
from hmbclient.broker import EmbeddedBroker
from hmbclient.errors import ErrorCode, GroupIdNotFoundError
from hmbclient.protocol.api.base import REQUESTS, ApiKey
from hmbclient.protocol.api.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolMemberMetadata
from hmbclient.testing import kafka_java

from .conftest import RawClient, wait_until

E = ErrorCode


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _commit(b: EmbeddedBroker, group: str, topic: str) -> None:
    admin.reset_group_offsets(b.bootstrap, group, ("latest", 0), topics=[topic], execute=True)


def test_offset_delete_from_three_clients(tmp_path: Any) -> None:
    from kafka.admin import KafkaAdminClient

    with EmbeddedBroker(log_dir=str(tmp_path), group_initial_rebalance_delay_ms=0) as b:
        t1, t2, group = _unique("od-a"), _unique("od-b"), _unique("g-od")
        admin.create_topic(b.bootstrap, t1, 2, 1)
        admin.create_topic(b.bootstrap, t2, 1, 1)
        _commit(b, group, t1)
        _commit(b, group, t2)
        om = b.broker.offset_manager
        assert set(om.committed(group)) == {(t1, 0), (t1, 1), (t2, 0)}
        assert admin.delete_group_offsets(b.bootstrap, group, [(t1, 0)]) == {(t1, 0): E.NONE}
        assert set(om.committed(group)) == {(t1, 1), (t2, 0)}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets(b.bootstrap, _unique("g-none"), [(t1, 0)])
        client = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="admin-tests", request_timeout_ms=30_000)
        try:
            from kafka import TopicPartition

            result = client.delete_group_offsets(group, [TopicPartition(t1, 1)])
            assert [(tp.topic, tp.partition, err.errno) for tp, err in result.items()] == [(t1, 1, 0)]
        finally:
            client.close()
        assert set(om.committed(group)) == {(t2, 0)}
        kafka_java("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", b.bootstrap, "--delete-offsets",
                   "--group", group, "--topic", t2, timeout_s=120)
        assert om.committed(group) == {}
        b.stop()
        b.start()
        wait_until(lambda: not b.broker.offset_manager.is_loading(), 20, "offsets loaded")
        assert b.broker.offset_manager.committed(group) == {}


def test_offset_delete_refuses_subscribed_topics() -> None:
    with EmbeddedBroker(group_initial_rebalance_delay_ms=0) as b:
        t1, t2, group = _unique("od-sub"), _unique("od-free"), _unique("g-sub")
        admin.create_topic(b.bootstrap, t1, 1, 1)
        admin.create_topic(b.bootstrap, t2, 1, 1)
        _commit(b, group, t1)
        _commit(b, group, t2)
        meta = ConsumerProtocolMemberMetadata[0](topics=[t1], user_data=None)
        with RawClient("127.0.0.1", b.port) as c:
            join = REQUESTS[(ApiKey.JOIN_GROUP, 2)].build(group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=10_000, member_id="",
                                                         protocol_type=PROTOCOL_TYPE, protocols=[("range", meta.encode())])
            resp = c.request(join)
            assert resp.error_code == E.NONE, resp
            assert admin.delete_group_offsets(b.bootstrap, group, [(t1, 0), (t2, 0)]) == {(t1, 0): E.GROUP_SUBSCRIBED_TO_TOPIC, (t2, 0): E.NONE}
        assert set(b.broker.offset_manager.committed(group)) == {(t1, 0)}
