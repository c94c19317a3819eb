"""The mixed group of ``tests/groups/test_kip848_migration.py`` on Apache Kafka 4 (the reference
for KIP-848's online migration, ``group.consumer.migration.policy=bidirectional`` by default):
confluent-kafka's classic cooperative-sticky member starts the group alone, hmbclient's
``Consumer`` with ``group.protocol=consumer`` joins (Kafka upgrades the group:
ConsumerGroupDescribe shows a consumer group with the classic members), confluent-kafka with
``group.protocol=consumer``, aiokafka and kafka-python join, the first leaves; the
consumer-protocol members leave and Kafka downgrades the group to classic (aiokafka and
kafka-python, which share the protocol name the first one had: Kafka's rule). The same checks as on our broker: every
message delivered, no partition owned by two members at once, every delivery at or above the
committed position its member started from.
"""

from __future__ import annotations

from typing import Any

from hmbclient import admin
from hmbclient.consumer.group_admin import describe_broker_group
from tests.groups.mixed_members import (
    aiokafka_member,
    hmb_member,
    kafka_python_member,
    mixed_group,
    rd_member,
)

from .helpers import unique


def test_classic_and_consumer_protocol_members_in_one_group_on_kafka4(kafka4: Any) -> None:
    topic, group = unique("mig"), unique("group")
    admin.create_topic(kafka4.bootstrap, topic, 6, 1)
    kinds = {
        "rd-coop": lambda b, g, t: rd_member(b, g, t, classic=True),
        "hmb": hmb_member,
        "rd-consumer": rd_member,
        "aiokafka": aiokafka_member,
        "kafka-python": kafka_python_member,
    }

    def mixed() -> bool:
        info = describe_broker_group(kafka4.bootstrap, group)
        return "group_epoch" in info and len(info["members"]) == 5

    def classic_again() -> bool:
        info = describe_broker_group(kafka4.bootstrap, group)
        return "group_epoch" not in info and info["protocol_type"] == "consumer"

    ledger = mixed_group(kafka4.bootstrap, group, topic, kinds, mixed_check=mixed, downgrade_check=classic_again, partitions=6)
    assert ledger.errors == []
    assert ledger.overlaps == [], ledger.overlaps
    assert ledger.below_committed == [], ledger.below_committed[:10]
