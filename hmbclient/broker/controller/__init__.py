"""The cluster controller: one broker, elected through ZooKeeper's ``/controller``, decides partition
leaders and ISRs. :mod:`~hmbclient.broker.controller.decisions` holds those decisions as pure
functions; the I/O around them (ZooKeeper watches, requests to brokers) calls them."""

from hmbclient.broker.controller.decisions import (
    NO_LEADER,
    Change,
    ClusterState,
    LeaderIsr,
    assign_replicas,
    elect_leader,
    initial_states,
    offsets_topic_replication_factor,
    on_broker_failure,
    on_broker_startup,
    on_controlled_shutdown,
    preferred_leader_changes,
    validate_assignment,
)

__all__ = [
    "NO_LEADER",
    "Change",
    "ClusterState",
    "LeaderIsr",
    "assign_replicas",
    "elect_leader",
    "initial_states",
    "offsets_topic_replication_factor",
    "on_broker_failure",
    "on_broker_startup",
    "on_controlled_shutdown",
    "preferred_leader_changes",
    "validate_assignment",
]
