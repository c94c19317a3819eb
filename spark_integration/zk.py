"""Group offsets in ZooKeeper, the Kafka 0.8 way, so lag tools see what Spark processed.

Spark's 0.8 direct stream kept its offsets in its own checkpoint only, and users complained
that ``ConsumerOffsetChecker`` and friends no longer saw any progress. These helpers read and
write the high-level consumer's offset znodes:

    /consumers/<group>/offsets/<topic>/<partition>   data: the next offset to read, as decimal
                                                      ASCII (what the Java 0.8 consumer writes)

The path and the encoding are :mod:`rebalance.paths`' (``offset_path``, ``encode_offset``,
``decode_offset``), the same the ConsumerConnector uses.

Contract: a committed value is an ``until_offset`` (exclusive end = next offset to consume),
the same meaning the ConsumerConnector gives it, so a high-level consumer started later in the
same group resumes exactly after what Spark processed. Writes create missing parents; reads
treat a missing znode (or one holding ``-1``, Kafka 0.8's "no offset") as "nothing
committed", and a znode holding anything else as damage:
:class:`~hmbclient.errors.CoordinationError` naming the path. Nothing here retries: kazoo's
own connection retry covers transient loss, and a failed commit raises ``CoordinationError``
naming the group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hmbclient.errors import CoordinationError
from rebalance.paths import NO_OFFSET, ZnodeDataError, decode_offset, encode_offset, offset_path
from spark_integration.offsets import OffsetRange, TopicPartition

__all__ = [
    "offset_path",
    "read_group_offsets",
    "commit_group_offsets",
    "start_zk_client",
    "zk_client",
]

log = logging.getLogger("hmbclient.spark")

_ZK_TIMEOUT_S = 15.0


def start_zk_client(connect: str) -> Any:
    """A started KazooClient for ``connect``; the caller stops and closes it.

    Args:
        connect: ``"host:port[,host:port][/chroot]"``.

    Raises:
        CoordinationError: ZooKeeper could not be reached within 15 s.
    """
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=connect, timeout=_ZK_TIMEOUT_S)
    try:
        client.start(timeout=_ZK_TIMEOUT_S)
    except KazooTimeoutError as exc:
        client.close()
        raise CoordinationError(f"cannot reach ZooKeeper at {connect}: {exc}") from exc
    return client


@contextmanager
def zk_client(zookeeper: Any) -> Iterator[Any]:
    """Yield a started KazooClient: ``zookeeper`` is a connect string or a started client.

    A client passed in is used as is and left open; one made from a connect string (see
    :func:`start_zk_client`) is stopped and closed on exit.

    Raises:
        CoordinationError: ZooKeeper could not be reached within 15 s.
    """
    if not isinstance(zookeeper, str):
        yield zookeeper
        return
    client = start_zk_client(zookeeper)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def read_group_offsets(
    zookeeper: Any, group_id: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """Read committed offsets of ``group_id``.

    Args:
        zookeeper: Connect string ``"host:port[,host:port][/chroot]"`` or a started KazooClient.
        group_id: The consumer group.
        partitions: The partitions to look up.

    Returns:
        ``{(topic, partition): next_offset}`` for the partitions that have a committed offset;
        partitions with nothing committed are absent.

    Raises:
        CoordinationError: ZooKeeper unreachable, or a znode holds something that is not a
            decimal offset (the message names its path).
    """
    from kazoo.exceptions import NoNodeError

    result: dict[TopicPartition, int] = {}
    with zk_client(zookeeper) as zk:
        for topic, partition in partitions:
            path = offset_path(group_id, topic, partition)
            try:
                data, _ = zk.get(path)
            except NoNodeError:
                continue
            try:
                offset = decode_offset(data, path)
            except ZnodeDataError as exc:
                raise CoordinationError(f"group {group_id!r}: {exc}") from exc
            if offset != NO_OFFSET:
                result[(topic, partition)] = offset
    return result


def commit_group_offsets(
    zookeeper: Any,
    group_id: str,
    offsets: Mapping[TopicPartition, int] | Iterable[OffsetRange],
) -> dict[TopicPartition, int]:
    """Write next-offsets for ``group_id`` (an OffsetRange commits its ``until_offset``).

    Args:
        zookeeper: Connect string or a started KazooClient.
        group_id: The consumer group.
        offsets: ``{(topic, partition): next_offset}``, or offset ranges whose
            ``until_offset`` is the next offset to consume. If several ranges name the same
            partition, the highest until_offset wins.

    Returns:
        The offsets written, ``{(topic, partition): next_offset}``.

    Raises:
        ValueError: A negative offset (nothing is written then).
        CoordinationError: ZooKeeper unreachable or the write failed.
    """
    from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

    if isinstance(offsets, Mapping):
        wanted = {tp: int(v) for tp, v in offsets.items()}
    else:
        wanted = {}
        for offset_range in offsets:
            tp = offset_range.topic_partition
            wanted[tp] = max(wanted.get(tp, 0), offset_range.until_offset)
    # Encode (and so validate) every offset before writing any.
    writes = []
    for (topic, partition), next_offset in sorted(wanted.items()):
        path = offset_path(group_id, topic, partition)
        try:
            writes.append((path, topic, partition, next_offset, encode_offset(next_offset)))
        except ValueError as exc:
            raise ValueError(f"group {group_id!r}: not committing to {path}: {exc}") from None
    with zk_client(zookeeper) as zk:
        for path, topic, partition, next_offset, data in writes:
            try:
                try:
                    zk.set(path, data)
                except NoNodeError:
                    try:
                        zk.create(path, data, makepath=True)
                    except NodeExistsError:
                        # Another committer created it between our set and create.
                        zk.set(path, data)
            except KazooException as exc:
                raise CoordinationError(
                    f"group {group_id!r}: committing {topic}-{partition}={next_offset} "
                    f"to {path} failed: {exc!r}"
                ) from exc
    log.debug("group %s committed %d offsets to ZooKeeper", group_id, len(wanted))
    return wanted
