"""Consumer offsets in ZooKeeper: ``/consumers/<g>/offsets/<topic>/<partition>`` -> ``"<n>"``.

Contract
--------
* The stored value is the decimal *next offset to consume* (Kafka 0.8 writes
  ``offset.toString`` of the consumed position), persistent, readable by Java tools. The path
  and the encoding are :mod:`rebalance.paths`' (``offset_path``, ``encode_offset``,
  ``decode_offset``), shared with the Spark integration and ``hmb groups``.
* :meth:`ZkOffsetStore.fetch` returns None for a partition that has never been committed,
  or whose znode holds ``-1`` (Kafka 0.8's "no offset"; the consumer then applies
  ``auto.offset.reset``). A znode holding anything else is damage, not "no offset": fetch
  raises :class:`~rebalance.paths.ZnodeDataError` naming the path, rather than silently
  restarting the partition from ``auto.offset.reset`` (the consumer reports it as a
  ``CoordinationError``).
* :meth:`ZkOffsetStore.commit` writes every offset of the batch pipelined (``set``; a missing
  node is created with its parents). It raises if any write failed, so the caller never
  believes an offset durable that is not -- the rebalance loop relies on this to keep
  "offsets are committed before ownership is released".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from rebalance import paths

__all__ = ["ZkOffsetStore"]

TopicPartition = tuple[str, int]


class ZkOffsetStore:
    """Read and write a group's committed offsets in ZooKeeper.

    Args:
        zk: a started KazooClient.
        group: the consumer group id.
        op_timeout_s: bound on one pipelined batch.
    """

    def __init__(self, zk: KazooClient, group: str, op_timeout_s: float = 10.0) -> None:
        self.zk = zk
        self.group = group
        self.op_timeout_s = op_timeout_s

    def path(self, tp: TopicPartition) -> str:
        """``/consumers/<g>/offsets/<topic>/<partition>``."""
        return paths.offset_path(self.group, tp[0], tp[1])

    def fetch(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Committed next offsets (None: nothing committed).

        Args:
            partitions: the partitions to read.

        Returns:
            ``{tp: offset or None}`` for every requested partition.

        Raises:
            ZnodeDataError: a znode holds something other than a decimal offset (or ``-1``);
                the message names its path.
        """
        reads = [(tp, self.zk.get_async(self.path(tp))) for tp in partitions]
        out: dict[TopicPartition, int | None] = {}
        for tp, res in reads:
            try:
                data, _ = res.get(timeout=self.op_timeout_s)
            except NoNodeError:
                out[tp] = None
                continue
            offset = paths.decode_offset(data, self.path(tp))
            out[tp] = None if offset == paths.NO_OFFSET else offset
        return out

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write every offset of the batch.

        Args:
            offsets: ``{tp: next offset to consume}``; negative values are refused.

        Raises:
            ValueError: a negative offset (nothing is written then).
            kazoo errors: a write failed (nothing is retried here).
        """
        payloads: dict[TopicPartition, bytes] = {}
        for tp, off in offsets.items():
            try:
                payloads[tp] = paths.encode_offset(off)
            except ValueError as exc:
                raise ValueError(f"refusing to commit to {self.path(tp)}: {exc}") from None
        sets = [
            (tp, payload, self.zk.set_async(self.path(tp), payload))
            for tp, payload in payloads.items()
        ]
        creates = []
        for tp, payload, res in sets:
            try:
                res.get(timeout=self.op_timeout_s)
            except NoNodeError:
                created = self.zk.create_async(self.path(tp), payload, makepath=True)
                creates.append((tp, payload, created))
        for tp, payload, res in creates:
            try:
                res.get(timeout=self.op_timeout_s)
            except NodeExistsError:
                # Another writer created it between our set and our create: write ours.
                self.zk.set_async(self.path(tp), payload).get(timeout=self.op_timeout_s)
