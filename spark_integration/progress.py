"""A streaming query's progress mirrored into a consumer group, so lag tools see it.

:class:`GroupProgress` is what :class:`~spark_integration.datasource.HmbStreamReader` calls
with offsets Spark has finished processing (the ``start`` of each ``latestOffset`` call and
``commit(end)``). The checkpoint stays the only source of truth; the group is for monitoring.

Contract:

* Which group: ``group.id`` (Spark's ``kafka.group.id``), else ``<groupIdPrefix>-<uuid4>``
  (one per query run, as Spark's generated group ids), else none and nothing is written.
* Where: the broker's group coordinator (FindCoordinator + OffsetCommit as a group without
  members, generation -1, through :class:`hmbclient.consumer.KafkaOffsetStorage`) unless
  ``commitOffsetsToBroker=false``; and, with ``zookeeper.connect``, ZooKeeper's
  ``/consumers/<group>/offsets`` (:func:`spark_integration.zk.commit_group_offsets`).
  ``hmb groups``, ``kafka-consumer-groups.sh --describe`` and ConsumerOffsetChecker then show
  the query's lag.
* Only forward: an offset is written to a store only when it is above what this run wrote
  there, so a late ``commit(end)`` of an older batch never moves the group back.
* Never fatal: a store that fails is logged at WARNING and tried again on the next batch (the
  query must not stop because a monitoring copy could not be written).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from spark_integration.offsets import TopicPartition
from spark_integration.settings import ReadSettings
from spark_integration.zk import commit_group_offsets, start_zk_client

__all__ = ["GroupProgress", "group_for"]

log = logging.getLogger("hmbclient.spark")


def group_for(group_id: str | None, prefix: str | None) -> str | None:
    """The group a query commits to: ``group_id``, else ``<prefix>-<uuid4>``, else None."""
    if group_id is not None:
        return group_id
    if prefix is not None:
        return f"{prefix}-{uuid.uuid4()}"
    return None


class GroupProgress:
    """Forward-only commits of processed offsets to a group's stores (see the module doc).

    Args:
        settings: How to reach the brokers.
        group: The group, or None (then :meth:`commit` does nothing).
        to_broker: Commit to the broker's group coordinator.
        zookeeper: A ZooKeeper connect string to commit to as well, or None.
    """

    def __init__(
        self, settings: ReadSettings, group: str | None, *, to_broker: bool,
        zookeeper: str | None,
    ) -> None:
        self.settings = settings
        self.group = group
        self.to_broker = to_broker and group is not None
        self.zookeeper = zookeeper if group is not None else None
        self._written: dict[str, dict[TopicPartition, int]] = {"broker": {}, "zookeeper": {}}
        self._zk: Any = None
        self._net: Any = None
        self._storage: Any = None

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Write ``offsets`` (next offset to process, per partition) forward to each store."""
        if self.group is None or not offsets:
            return
        if self.to_broker:
            self._commit("broker", offsets, self._commit_broker)
        if self.zookeeper is not None:
            self._commit("zookeeper", offsets, self._commit_zookeeper)

    def _commit(self, store: str, offsets: Mapping[TopicPartition, int], write: Any) -> None:
        done = self._written[store]
        todo = {tp: o for tp, o in offsets.items() if o > done.get(tp, -1)}
        if not todo:
            return
        try:
            write(todo)
        except Exception as exc:  # noqa: BLE001 - monitoring only; see the module docstring
            log.warning("group %s: could not record offsets in %s: %r", self.group, store, exc)
            return
        done.update(todo)

    def _commit_broker(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._storage is None:
            from hmbclient.config import SecurityConfig
            from hmbclient.consumer import KafkaOffsetStorage
            from hmbclient.net import NetClient, Security

            settings = self.settings
            self._net = NetClient(
                list(settings.brokers),
                client_id=settings.client_id,
                api_version=settings.api_version,
                request_timeout_ms=settings.socket_timeout_ms,
                security=Security.from_config(
                    SecurityConfig.from_properties(settings.security_settings())
                ),
                name="hmbclient-io-spark-progress",
            )
            self._storage = KafkaOffsetStorage(
                self._net, str(self.group), max_retries=settings.max_retries,
                backoff_ms=settings.retry_backoff_ms, timeout_ms=settings.socket_timeout_ms,
            )
        self._storage.commit(offsets)

    def _commit_zookeeper(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self._zk is None:
            self._zk = start_zk_client(str(self.zookeeper))
        commit_group_offsets(self._zk, str(self.group), offsets)

    def close(self) -> None:
        """Close the connections this object opened."""
        zk, self._zk = self._zk, None
        net, self._net = self._net, None
        self._storage = None
        try:
            if zk is not None:
                zk.stop()
                zk.close()
        finally:
            if net is not None:
                net.close()
