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

* ``cooperative-sticky`` (Java's ``CooperativeStickyAssignor``, librdkafka's of the same
  name, KIP-429): balanced like round-robin (share sizes differ by at most one among members
  of the same topics) while moving as few partitions as possible. Each member reports what
  it owns and from which generation (ConsumerProtocolSubscription v1+ ``owned_partitions``,
  v2+ ``generation_id``, or the generation in ``user_data``); a partition claimed by several
  members belongs to the claim of the highest generation. Rules, in order: (1) a member keeps
  the valid partitions it owns; when all members subscribe to the same topics, at most the
  larger quota (the ceiling of partitions per member), and only as many members keep the
  larger quota as the balance allows; (2) the
  partitions nobody keeps go, those with the fewest eligible members first, each to the
  eligible member with the fewest partitions; (3) while a member has two more than another
  member subscribed to one of its topics, one such partition moves. Then the *cooperative*
  rule: a partition given to a member while another member still owns it is left out of this
  assignment; its owner sees it gone, revokes it and rejoins, and the follow-up rebalance
  assigns it. So no partition has two owners at any time, and partitions that stay put are
  never revoked.

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
    "sticky_assign",
    "cooperative_sticky_assign",
    "GROUP_ASSIGNORS",
    "COOPERATIVE_ASSIGNORS",
    "streams_for",
]

TopicPartition = tuple[str, int]


class MemberSubscription(NamedTuple):
    """What one member asked for in JoinGroup: its topics, if static its instance id, and (for
    ``cooperative-sticky``) the partitions it owns and the generation it got them in."""

    topics: Sequence[str]
    group_instance_id: str | None = None
    owned_partitions: Sequence[TopicPartition] = ()
    generation: int = -1


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


def _valid_owners(partitions_by_topic: Mapping[str, Sequence[int]], members: Mapping[str, MemberSubscription]) -> dict[TopicPartition, str]:
    """partition -> the member whose claim counts: the claim of the highest generation among
    members subscribed to the topic, of a partition that exists; a tie at that generation
    leaves the partition unowned (two members cannot both have it)."""
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for member_id in member_order(members):
        sub = members[member_id]
        for tp in sub.owned_partitions:
            if tp[0] not in sub.topics or tp[1] not in partitions_by_topic.get(tp[0], ()):
                continue
            seen = best.get(tp)
            if seen is None or sub.generation > seen[0]:
                best[tp] = (sub.generation, member_id)
            elif sub.generation == seen[0]:
                best[tp] = (seen[0], None)
    return {tp: owner for tp, (_, owner) in best.items() if owner is not None}


def sticky_assign(
    partitions_by_topic: Mapping[str, Sequence[int]], members: Mapping[str, MemberSubscription]
) -> dict[str, list[TopicPartition]]:
    """The sticky balance (rules 1-3 of the module docstring), without the cooperative rule."""
    order = member_order(members)
    assignment: dict[str, list[TopicPartition]] = {m: [] for m in order}
    if not order:
        return assignment
    subscribed = {m: set(members[m].topics) for m in order}
    everything = sorted(
        ((t, p) for t in {t for m in order for t in subscribed[m]} for p in partitions_by_topic.get(t, ())),
        key=lambda tp: (java_sort_key(tp[0]), tp[1]),
    )
    owners = _valid_owners(partitions_by_topic, members)
    # Rule 1: keep what is owned, within the quotas when every member subscribes to the same
    # topics (Java's constrainedAssign); otherwise keep it all, and rule 3 evens out.
    floor, extra = divmod(len(everything), len(order))
    ceiling = floor + (1 if extra else 0)
    if len({frozenset(t) for t in subscribed.values()}) > 1:
        floor = ceiling = len(everything)
        extra = 0
    kept: dict[str, list[TopicPartition]] = {m: [] for m in order}
    for tp in everything:
        owner = owners.get(tp)
        if owner is not None:
            kept[owner].append(tp)
    at_ceiling = 0
    taken: set[TopicPartition] = set()
    for m in sorted(order, key=lambda m: -len(kept[m])):  # the largest owners keep the most
        limit = ceiling if at_ceiling < extra or not extra else floor
        share = kept[m][:limit]
        if extra and len(share) == ceiling:
            at_ceiling += 1
        assignment[m] = share
        taken.update(share)
    # Rule 2: the rest, the partitions with the fewest eligible members first.
    eligible = {tp: [m for m in order if tp[0] in subscribed[m]] for tp in everything if tp not in taken}
    for tp in sorted(eligible, key=lambda tp: (len(eligible[tp]), java_sort_key(tp[0]), tp[1])):
        if eligible[tp]:
            target = min(eligible[tp], key=lambda m: (len(assignment[m]), order.index(m)))
            assignment[target].append(tp)
    # Rule 3: balance between members that could trade.
    moved = True
    while moved:
        moved = False
        by_size = sorted(order, key=lambda m: (len(assignment[m]), order.index(m)))
        for low in by_size:
            for high in reversed(by_size):
                if len(assignment[high]) - len(assignment[low]) < 2:
                    break
                movable = [tp for tp in assignment[high] if tp[0] in subscribed[low]]
                if movable:
                    # Prefer a partition the high member did not own before (it moves anyway).
                    tp = next((tp for tp in reversed(movable) if owners.get(tp) != high), movable[-1])
                    assignment[high].remove(tp)
                    assignment[low].append(tp)
                    moved = True
                    break
            if moved:
                break
    return _sorted_share(assignment)


def cooperative_sticky_assign(
    partitions_by_topic: Mapping[str, Sequence[int]], members: Mapping[str, MemberSubscription]
) -> dict[str, list[TopicPartition]]:
    """Java's ``CooperativeStickyAssignor`` (protocol name ``"cooperative-sticky"``): the sticky
    balance, minus every partition that would change owner in this rebalance (its current owner
    revokes it first; the follow-up rebalance assigns it).

    Example: m1 owns t-0..t-3 and m2 joins: m1 keeps t-0, t-1, m2 gets nothing yet; m1 revokes
    t-2, t-3 and rejoins; then m2 gets t-2, t-3 and m1 keeps t-0, t-1.
    """
    assignment = sticky_assign(partitions_by_topic, members)
    owners = _valid_owners(partitions_by_topic, members)
    for member_id, share in assignment.items():
        share[:] = [tp for tp in share if owners.get(tp, member_id) == member_id]
    return assignment


#: JoinGroup protocol name -> assignor.
GROUP_ASSIGNORS: dict[str, GroupAssignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}
#: The assignors of the COOPERATIVE rebalance protocol (KIP-429): a member keeps the partitions
#: it still owns through a rebalance and revokes only those taken away.
COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})


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
