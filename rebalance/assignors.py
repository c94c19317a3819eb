"""Partition assignment strategies of the Kafka 0.8 ZooKeeper consumer, as pure functions.

Every member of a group runs the same function on the same inputs (read from ZooKeeper)
and claims only its own share, so the functions must be deterministic and must order ids
exactly as the Java 0.8 consumer does if Java and Python consumers are to share a group:

* thread ids sort like Java ``String.compareTo`` (UTF-16 code units, see :func:`java_sort_key`);
* the round-robin order of topic-partitions is by the Java ``String.hashCode`` of
  ``"[topic,partition]"`` (``TopicAndPartition.toString``), ties broken by (topic, partition).

Inputs: ``partitions_by_topic`` (topic -> partition numbers, as found under
``/brokers/topics``) and ``threads_by_topic`` (topic -> thread ids of every group member that
subscribed to it). Output: ``{thread_id: [(topic, partition), ...]}`` with an entry (maybe
empty) for every thread, lists sorted by (topic, partition). Topics nobody subscribed to are
ignored; subscribed topics without partitions assign nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "Assignment",
    "range_assign",
    "roundrobin_assign",
    "java_string_hash",
    "java_sort_key",
    "ASSIGNORS",
]

#: thread id -> the (topic, partition) pairs it owns.
Assignment = dict[str, list[tuple[str, int]]]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units.

    Args:
        text: Any string.

    Returns:
        The hash as a signed 32-bit int.
    """
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_sort_key(text: str) -> bytes:
    """A key that sorts strings like Java's ``String.compareTo`` (UTF-16 code-unit order).

    Python compares code points; the two orders differ only for characters outside the
    Basic Multilingual Plane, which UTF-16 stores as surrogates (0xD800-0xDFFF).

    Args:
        text: Any string.

    Returns:
        Its UTF-16-BE bytes (bytewise order == code-unit order).
    """
    return text.encode("utf-16-be", "surrogatepass")


def _check_inputs(
    partitions_by_topic: Mapping[str, Sequence[int]],
    threads_by_topic: Mapping[str, Sequence[str]],
) -> None:
    for topic, parts in partitions_by_topic.items():
        if len(set(parts)) != len(parts):
            raise ValueError(f"topic {topic!r} lists a partition twice: {list(parts)}")
        if any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts):
            raise ValueError(f"topic {topic!r} has a bad partition number: {list(parts)}")
    for topic, threads in threads_by_topic.items():
        if len(set(threads)) != len(threads):
            raise ValueError(f"topic {topic!r} lists a thread twice: {list(threads)}")


def _empty_assignment(threads_by_topic: Mapping[str, Sequence[str]]) -> Assignment:
    threads = {thread for subscribed in threads_by_topic.values() for thread in subscribed}
    return {t: [] for t in sorted(threads, key=java_sort_key)}


def range_assign(
    partitions_by_topic: Mapping[str, Sequence[int]],
    threads_by_topic: Mapping[str, Sequence[str]],
) -> Assignment:
    """Kafka 0.8's ``RangeAssignor``: contiguous ranges of each topic's partitions.

    Per topic, with partitions sorted numerically and the subscribed threads sorted, each
    of the C threads gets ``P // C`` consecutive partitions and the first ``P % C`` threads
    one more. Example: threads c1-0, c1-1, c2-0, c2-1 and partitions 0..4 give
    c1-0: 0, 1; c1-1: 2; c2-0: 3; c2-1: 4.

    Args:
        partitions_by_topic: topic -> partition numbers.
        threads_by_topic: topic -> subscribed thread ids (any order).

    Returns:
        thread id -> sorted (topic, partition) pairs; every thread appears.

    Raises:
        ValueError: A duplicate or negative partition, or a duplicate thread id.
    """
    _check_inputs(partitions_by_topic, threads_by_topic)
    assignment = _empty_assignment(threads_by_topic)
    for topic in sorted(threads_by_topic, key=java_sort_key):
        threads = sorted(threads_by_topic[topic], key=java_sort_key)
        partitions = sorted(partitions_by_topic.get(topic, ()))
        if not threads or not partitions:
            continue
        per_thread, extra = divmod(len(partitions), len(threads))
        for position, thread in enumerate(threads):
            start = per_thread * position + min(position, extra)
            count = per_thread + (1 if position < extra else 0)
            assignment[thread].extend((topic, p) for p in partitions[start : start + count])
    for owned in assignment.values():
        owned.sort(key=lambda tp: (java_sort_key(tp[0]), tp[1]))
    return assignment


def roundrobin_assign(
    partitions_by_topic: Mapping[str, Sequence[int]],
    threads_by_topic: Mapping[str, Sequence[str]],
) -> Assignment:
    """Kafka 0.8's ``RoundRobinAssignor``: deal all topic-partitions out to all threads.

    All subscribed topic-partitions, ordered by the Java hash of ``"[topic,partition]"``
    (a deterministic shuffle, so one topic's partitions do not all land on one consumer),
    are dealt one by one to the sorted threads. Counts per thread differ by at most one.

    It requires identical subscriptions: every topic must have the same set of thread ids
    (each consumer subscribes to the same topics with the same stream count).

    Args:
        partitions_by_topic: topic -> partition numbers.
        threads_by_topic: topic -> subscribed thread ids (any order).

    Returns:
        thread id -> sorted (topic, partition) pairs; every thread appears.

    Raises:
        ValueError: Subscriptions differ between topics, or bad input (see range_assign).
    """
    _check_inputs(partitions_by_topic, threads_by_topic)
    assignment = _empty_assignment(threads_by_topic)
    if not threads_by_topic:
        return assignment
    topics = sorted(threads_by_topic, key=java_sort_key)
    head = set(threads_by_topic[topics[0]])
    for topic in topics[1:]:
        if set(threads_by_topic[topic]) != head:
            raise ValueError(
                "round-robin assignment requires every consumer to subscribe to the same "
                f"topics with the same stream counts; threads for {topics[0]!r}: "
                f"{sorted(head)}, for {topic!r}: {sorted(threads_by_topic[topic])}"
            )
    threads = sorted(head, key=java_sort_key)
    if not threads:
        return assignment
    topic_partitions = [(t, p) for t in topics for p in partitions_by_topic.get(t, ())]
    topic_partitions.sort(
        key=lambda tp: (java_string_hash(f"[{tp[0]},{tp[1]}]"), java_sort_key(tp[0]), tp[1])
    )
    for i, tp in enumerate(topic_partitions):
        assignment[threads[i % len(threads)]].append(tp)
    for owned in assignment.values():
        owned.sort(key=lambda tp: (java_sort_key(tp[0]), tp[1]))
    return assignment


#: ``partition.assignment.strategy`` value -> assignor.
ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}
