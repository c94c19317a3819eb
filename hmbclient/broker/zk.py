"""ZkRegistration: a broker's presence in ZooKeeper, in the Kafka 0.8 layout (``rebalance.paths``).

What is written (JSON as the Java/Scala 0.8 code writes it):

* ``/brokers/ids/<id>`` (ephemeral) -> ``{"jmx_port":-1,"timestamp":"...","host":...,"version":1,"port":...}``
  by every broker for itself; a live registration of the same id by another session is an error
  (two brokers with one id), as in Kafka.
* ``/controller`` (ephemeral) -> ``{"version":1,"brokerid":<id>,"timestamp":"..."}`` by the
  controller: the alive broker with the lowest id in the cluster view.
* ``/brokers/topics/<topic>`` -> ``{"version":1,"partitions":{"0":[1],...}}`` and
  ``/brokers/topics/<topic>/partitions/<n>/state`` ->
  ``{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}``, written by the
  controller when a topic appears or a leader changes (persistent znodes, as Kafka's controller
  writes them; ``leader`` is -1 while the partition's broker is down).

ZooKeeper is an output here: the cluster view stays the source of truth, so the consumers'
ZooKeeper-based rebalancing sees exactly what Metadata requests report. After a session expiry
the registration is written again once the client reconnects.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from hmbclient.broker.metadata import NO_LEADER, ClusterView
from hmbclient.errors import CoordinationError
from rebalance import paths

if TYPE_CHECKING:
    from hmbclient.config import BrokerConfig

__all__ = ["ZkRegistration"]

log = logging.getLogger("hmbclient.broker.zk")


class ZkRegistration:
    """Registers one broker (and, while it is the controller, the topics) in ZooKeeper.

    Args:
        config: ``zookeeper_connect`` and the session/connection timeouts, ``broker_id``.
        view: the cluster view to mirror.
        host: advertised host.
        port: advertised port.
    """

    def __init__(self, config: BrokerConfig, view: ClusterView, host: str, port: int) -> None:
        assert config.zookeeper_connect
        self.broker_id = config.broker_id
        self.view = view
        self.host = host
        self.port = port
        self._connect = config.zookeeper_connect
        self._session_timeout_s = config.zookeeper_session_timeout_ms / 1000.0
        self.zk = KazooClient(hosts=config.zookeeper_connect, timeout=self._session_timeout_s)
        self._connect_timeout_s = config.zookeeper_connection_timeout_ms / 1000.0
        self._lock = threading.RLock()
        self._lost = False
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect, register, and mirror the view if this broker is the controller.

        Raises:
            CoordinationError: ZooKeeper is unreachable, or the broker id is taken.
        """
        try:
            self._ensure_chroot()
            self.zk.start(timeout=self._connect_timeout_s)
        except Exception as e:
            self.zk.close()
            raise CoordinationError(f"cannot reach ZooKeeper at {self._connect}: {e}") from e
        self.zk.add_listener(self._on_state)
        try:
            self._register()
            self.view.add_listener(self._on_view_event)
            self._sync_if_controller()
        except BaseException:
            self.stop()
            raise

    def _ensure_chroot(self) -> None:
        # Kafka creates a missing chroot ("host:port/kafka") itself; kazoo would only warn and
        # then fail every operation.
        connect = self._connect
        if "/" not in connect:
            return
        base, chroot = connect.split("/", 1)
        boot = KazooClient(hosts=base, timeout=self._session_timeout_s)
        boot.start(timeout=self._connect_timeout_s)
        try:
            boot.ensure_path("/" + chroot)
        finally:
            boot.stop()
            boot.close()

    def stop(self) -> None:
        self._stopped = True
        self.view.remove_listener(self._on_view_event)
        try:
            self.zk.stop()
        finally:
            self.zk.close()

    # -- broker registration ----------------------------------------------------------------------
    def _register(self) -> None:
        path = paths.broker_path(self.broker_id)
        data = paths.encode_broker_registration(paths.BrokerRegistration(self.host, self.port))
        self.zk.ensure_path(paths.BROKER_IDS_PATH)
        try:
            self.zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:
                self.zk.create(path, data, ephemeral=True)
                return
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.set(path, data)  # ours, from before a reconnect
                return
            raise CoordinationError(
                f"broker id {self.broker_id} is already registered at {path} by another session"
            ) from None
        log.info("registered broker %d at %s (%s:%d)", self.broker_id, path, self.host, self.port)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's event thread: never block it; re-register from a thread of our own.
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost and not self._stopped:
            self._lost = False
            threading.Thread(target=self._reregister, name=f"zk-reregister-{self.broker_id}", daemon=True).start()

    def _reregister(self) -> None:
        try:
            self._register()
            self._sync_if_controller()
        except (KazooException, CoordinationError) as e:
            log.error("re-registration of broker %d failed: %s", self.broker_id, e)

    # -- controller duties ------------------------------------------------------------------------
    def _is_controller(self) -> bool:
        return self.view.controller_id() == self.broker_id

    def _on_view_event(self, event: str, arg: Any) -> None:
        if self._stopped:
            return
        try:
            if event == "topic" and self._is_controller():
                self._write_topic(arg)
            elif event == "leader" and self._is_controller():
                # A move changes the assignment too (the new leader is the replica now).
                self._write_topic(arg[0])
            elif event in ("broker_up", "broker_down"):
                self._sync_if_controller()
        except KazooException as e:
            log.error("ZooKeeper update after %s %r failed: %s", event, arg, e)

    def _sync_if_controller(self) -> None:
        if not self._is_controller():
            return
        with self._lock:
            data = paths.encode_controller(paths.ControllerRegistration(self.broker_id))
            try:
                self.zk.create(paths.CONTROLLER_PATH, data, ephemeral=True)
            except NodeExistsError:
                try:
                    cur, stat = self.zk.get(paths.CONTROLLER_PATH)
                    if stat.ephemeralOwner != self.zk.client_id[0]:
                        # The previous controller's session is still alive (it is stopping).
                        self.zk.delete(paths.CONTROLLER_PATH)
                        self.zk.create(paths.CONTROLLER_PATH, data, ephemeral=True)
                except (NoNodeError, NodeExistsError):
                    pass
            for topic in self.view.topics():
                self._write_topic(topic)

    def _write_topic(self, topic: str) -> None:
        with self._lock:
            preferred = self.view.preferred(topic)
            data = paths.encode_topic_assignment({p: [b] for p, b in enumerate(preferred)})
            path = paths.topic_path(topic)
            try:
                self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                self.zk.set(path, data)
            for p in range(len(preferred)):
                self._write_state(topic, p)

    def _write_state(self, topic: str, partition: int) -> None:
        with self._lock:
            leader = self.view.leader(topic, partition)
            if leader is None:
                return
            state = paths.PartitionState(
                leader=leader,
                isr=() if leader == NO_LEADER else (leader,),
                leader_epoch=self.view.leader_epoch(topic, partition),
            )
            data = paths.encode_partition_state(state)
            path = paths.partition_state_path(topic, partition)
            try:
                self.zk.set(path, data)
            except NoNodeError:
                try:
                    self.zk.create(path, data, makepath=True)
                except NodeExistsError:
                    self.zk.set(path, data)
