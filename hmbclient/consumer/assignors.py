"""Partition assignors of broker-coordinated groups, as pure functions over member ids.

In a group balanced by the brokers' coordinator the *leader* (one member, chosen by the
coordinator) assigns the partitions of every member and hands the result in with SyncGroup.
Members of other clients may lead, so the functions are exactly the Java consumer's
``RangeAssignor`` and ``RoundRobinAssignor`` (``org.apache.kafka.clients.consumer``), which
kafka-python, aiokafka and librdkafka implement too, under the protocol names ``"range"`` and
``"roundrobin"``:

* members are ordered like Java's ``MemberInfo``: members with a ``group.instance.id``
  (static members) first, by instance id, then the others by member id; ids compare like Java's
  ``String.compareTo`` (:func:`rebalance.assignors.java_sort_key`);
* ``range``: per topic, its members in that order get contiguous runs of the sorted
  partitions, the first ``P % C`` of them one more;
* ``roundrobin``: every subscribed topic-partition, sorted by (topic, partition), dealt to the
  members in that order, skipping members not subscribed to the partition's topic.

These differ from the ZooKeeper consumer's assignors (:mod:`rebalance.assignors`), which
assign *consumer threads* and order round-robin partitions by a hash.

Inputs: ``partitions_by_topic`` (topic -> partition ids, from Metadata) and ``members``
(member id -> :class:`MemberSubscription`). Output: ``{member_id: [(topic, partition), ...]}``
with an entry (maybe empty) for every member, each list sorted by (topic, partition). Topics
without known partitions assign nothing.

:func:`streams_for` then spreads one member's share over its own streams (KafkaStream
"threads"), a purely local decision the rest of the group never sees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from hmbclient.zkpaths import thread_id
from rebalance.assignors import java_sort_key

__all__ = [
    "MemberSubscription",
    "GroupAssignor",
    "member_order",
    "range_assign",
    "roundrobin_assign",
    "GROUP_ASSIGNORS",
    "streams_for",
]

TopicPartition = tuple[str, int]


class MemberSubscription(NamedTuple):
    """What one member asked for in JoinGroup: its topics and, if static, its instance id."""

    topics: Sequence[str]
    group_instance_id: str | None = None


GroupAssignor = Callable[[Mapping[str, Sequence[int]], Mapping[str, MemberSubscription]], dict[str, list[TopicPartition]]]


def member_order(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Member ids in the Java consumer's ``MemberInfo`` order (static members first)."""

    def key(member_id: str) -> tuple[int, bytes, bytes]:
        instance = members[member_id].group_instance_id
        if instance is not None:
            return (0, java_sort_key(instance), java_sort_key(member_id))
        return (1, java_sort_key(member_id), b"")

    return sorted(members, key=key)


def _sorted_share(assignment: dict[str, list[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    for share in assignment.values():
        share.sort(key=lambda tp: (java_sort_key(tp[0]), tp[1]))
    return assignment


def range_assign(
    partitions_by_topic: Mapping[str, Sequence[int]], members: Mapping[str, MemberSubscription]
) -> dict[str, list[TopicPartition]]:
    """The Java consumer's ``RangeAssignor`` (protocol name ``"range"``).

    Example: members m1, m2 on topic t with partitions 0..4 give m1: t-0, t-1, t-2 and
    m2: t-3, t-4.
    """
    order = member_order(members)
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    topics = sorted({t for m in order for t in members[m].topics}, key=java_sort_key)
    for topic in topics:
        consumers = [m for m in order if topic in members[m].topics]
        partitions = sorted(partitions_by_topic.get(topic, ()))
        if not partitions:
            continue
        per_member, extra = divmod(len(partitions), len(consumers))
        for position, member in enumerate(consumers):
            start = per_member * position + min(position, extra)
            count = per_member + (1 if position < extra else 0)
            assignment[member].extend((topic, p) for p in partitions[start : start + count])
    return _sorted_share(assignment)


def roundrobin_assign(
    partitions_by_topic: Mapping[str, Sequence[int]], members: Mapping[str, MemberSubscription]
) -> dict[str, list[TopicPartition]]:
    """The Java consumer's ``RoundRobinAssignor`` (protocol name ``"roundrobin"``).

    Subscriptions may differ: a partition goes to the next member (cyclically) that
    subscribed to its topic.
    """
    order = member_order(members)
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    if not order:
        return assignment
    topics = sorted({t for m in order for t in members[m].topics}, key=java_sort_key)
    position = 0
    for topic in topics:
        for partition in sorted(partitions_by_topic.get(topic, ())):
            # Some member subscribed to every topic in the list, so this ends.
            while topic not in members[order[position % len(order)]].topics:
                position += 1
            assignment[order[position % len(order)]].append((topic, partition))
            position += 1
    return _sorted_share(assignment)


#: JoinGroup protocol name -> assignor.
GROUP_ASSIGNORS: dict[str, GroupAssignor] = {"range": range_assign, "roundrobin": roundrobin_assign}


def streams_for(
    consumer_id: str,
    share: Sequence[TopicPartition],
    topic_counts: Mapping[str, int] | None,
    num_streams: int,
) -> dict[TopicPartition, str]:
    """Spread one member's partitions over its streams: ``tp -> thread id``.

    With static topic counts each topic's partitions (sorted) are dealt to that topic's
    streams ``<consumer_id>-0 .. -<n-1>``; with a topic filter every partition (sorted by
    topic, partition) is dealt to the ``num_streams`` shared streams. The result only has to
    be stable for one assignment: nobody else reads it.
    """
    out: dict[TopicPartition, str] = {}
    ordered = sorted(share, key=lambda tp: (java_sort_key(tp[0]), tp[1]))
    if topic_counts is not None:
        dealt: dict[str, int] = {}
        for topic, partition in ordered:
            streams = topic_counts.get(topic)
            if not streams:
                continue  # not ours to consume (a leader of another client gave it anyway)
            index = dealt.get(topic, 0)
            dealt[topic] = index + 1
            out[(topic, partition)] = thread_id(consumer_id, index % streams)
        return out
    for index, tp in enumerate(ordered):
        out[tp] = thread_id(consumer_id, index % max(1, num_streams))
    return out
