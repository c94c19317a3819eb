"""ZooKeeper coordination for consumer groups (Kafka 0.8 layout); imports kazoo and stdlib only.

- :mod:`rebalance.paths` — the znode layout and the JSON in each znode, byte-compatible
  with the Java 0.8 broker and consumer.
- :mod:`rebalance.assignors` — :func:`range_assign` and :func:`roundrobin_assign`, pure
  functions returning ``{thread_id: [(topic, partition), ...]}``.
"""

from rebalance import paths
from rebalance.assignors import (
    ASSIGNORS,
    Assignment,
    java_sort_key,
    java_string_hash,
    range_assign,
    roundrobin_assign,
)

__all__ = [
    "paths",
    "ASSIGNORS",
    "Assignment",
    "java_sort_key",
    "java_string_hash",
    "range_assign",
    "roundrobin_assign",
]
