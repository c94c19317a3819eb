"""The coordination store: where brokers register, elect a controller and keep partition state.

Two implementations of one contract:

* :class:`ZkStore` — ZooKeeper in Kafka 0.8.2's layout (``hmbclient.zkpaths`` encodes every
  znode byte for byte as the Java code does), so Kafka's tools and the consumers' ZooKeeper
  rebalancing read the same data:

  - ``/brokers/ids/<id>`` (ephemeral) — a live broker; a live registration of the same id by
    another session is refused (two brokers with one id).
  - ``/controller`` (ephemeral) — who the controller is; the first broker to create it wins.
  - ``/controller_epoch`` — bumped by every new controller; every state write by the controller
    is a transaction that checks this znode's version, so a deposed controller's writes fail.
  - ``/brokers/topics/<t>`` — the replica assignment, written once by whoever creates the topic,
    with the topic's id (``"topic_id"``, KIP-516, as Kafka 2.8+). A topic znode without one
    (written by Kafka 0.8 or by us before topic ids) gets one the first time a broker asks
    (``topic_id``): drawn, written back conditional on the version read, and on a lost race
    the winner's id is read, so every broker serves the same id.
  - ``/brokers/topics/<t>/partitions/<p>/state`` — leader, leader epoch, ISR, written by the
    controller (leader changes) or the leader (ISR changes), always conditional on the version
    the writer read.
  - ``/isr_change_notification/isr_change_<seq>`` — a leader that changed an ISR tells the
    controller, which re-reads those states and sends UpdateMetadata.
  - ``/admin/delete_topics/<t>`` — a topic marked for deletion by DeleteTopics (any broker);
    the controller deletes the topic's znodes and then the marker (``finish_topic_deletion``).
  - ``/brokers/topics/<t>``'s ``"adding_replicas"`` / ``"removing_replicas"`` (KIP-455, as
    Kafka 2.4+ writes them) — the partitions being reassigned; the controller rewrites a
    partition's replicas and these maps together (``write_reassignment``, conditional on the
    version read) and reads them back after a fail-over (``reassignments``).
  - ``/brokers/topics/<t>`` rewritten with more partitions by CreatePartitions
    (``add_partitions``, conditional on the version read); the controller watches each topic's
    assignment (``assignment(topic, watch)``) and starts the new partitions.
  - ``/config/topics/<t>``, ``/config/brokers/<id>|<default>`` — dynamic configs (AlterConfigs),
    each write announced by ``/config/changes/config_change_<seq>`` naming the entity
    (``{"version":2,"entity_path":"topics/<t>"}``); every broker watches the changes
    (``config_changes``) and re-reads the entities named after the last sequence it saw. The
    writer removes notifications beyond the newest :data:`KEEP_CONFIG_CHANGES`.
  - ``/consumers/<group>/offsets/<topic>/<partition>`` — a ZooKeeper group's committed offset
    (the decimal next offset to consume), read and written for OffsetCommit/OffsetFetch v0 as
    Kafka 0.8.2's brokers do (``read_offset``/``write_offset``). These calls never wait longer
    than a bounded time and fail at once while ZooKeeper is unreachable (CoordinationError).

* :class:`MemoryStore` — the same contract in memory for a standalone broker (no ZooKeeper):
  one broker, which is its own controller; topics found on disk at start-up are its topics.
  Topic ids persist in ``<log dir>/topic-ids.json`` (``{"<topic>": "<id>"}``, Kafka's string
  form; written to a temporary file, fsynced, renamed) when the store is given that path: a
  topic keeps its id across restarts, one found without an id gets one and it is written.
  Dynamic configs (AlterConfigs / IncrementalAlterConfigs of topics and brokers, client
  quotas: every ``set_entity_config``) persist in ``<log dir>/dynamic-configs.json``
  (``{"version": 1, "configs": {"<entity type>/<name>": {key: value}}}``, the entity paths of
  ``/config/changes``; written the same atomic way, before the write is seen in memory) when
  the store is given that path, and are read back at start, so a restarted standalone broker
  keeps them as a ZooKeeper one does; a file that cannot be read or has another shape stops
  the start with a StorageError (never a guess). A topic's configs go with the topic's
  deletion.
  It has no ZooKeeper group offsets: ``offsets_in_zookeeper`` is False, ``read_offset`` answers
  None and ``write_offset`` raises :class:`NoZooKeeperError`, so a standalone broker serves
  OffsetCommit/OffsetFetch v0 from its own offsets topic like v1+.

Watches are one-shot callbacks (kazoo's model): a callback runs on the store's event thread
and must only hand work to another thread (the controller queues an event). Versions are
ZooKeeper ``Stat.version`` values; ``expected_version`` -1 means "create".
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)

from hmbclient import zkpaths as paths
from hmbclient.broker.controller.decisions import LeaderIsr
from hmbclient.broker.log.checkpoint import read_json, write_json_atomically
from hmbclient.broker.metadata import BrokerEndpoint
from hmbclient.errors import CoordinationError, StorageError

__all__ = ["CoordinationStore", "ZkStore", "MemoryStore", "ISR_CHANGE_PATH", "NoZooKeeperError", "TOPIC_IDS_FILE",
           "DYNAMIC_CONFIGS_FILE"]

#: a standalone broker's topic ids, in its log directory
TOPIC_IDS_FILE = "topic-ids.json"
#: a standalone broker's dynamic configs (topics, brokers, client quotas), in its log directory
DYNAMIC_CONFIGS_FILE = "dynamic-configs.json"

log = logging.getLogger("hmbclient.broker.store")

ISR_CHANGE_PATH = "/isr_change_notification"
_ISR_CHANGE_PREFIX = ISR_CHANGE_PATH + "/isr_change_"

Watch = Callable[[], None]
TP = tuple[str, int]

#: The longest a group-offset read or write waits for ZooKeeper (it is a request's answer that
#: waits, so this stays well under a client's request timeout).
OFFSET_IO_TIMEOUT_S = 3.0
#: config change notifications kept in ZooKeeper (older ones are removed by the writer)
KEEP_CONFIG_CHANGES = 100


class NoZooKeeperError(CoordinationError):
    """The store has no ZooKeeper (a standalone broker): there are no ZooKeeper group offsets."""


class CoordinationStore(Protocol):
    """What brokers and the controller need of ZooKeeper (see the module docstring)."""

    def register_broker(self, endpoint: BrokerEndpoint) -> None: ...
    def deregister_broker(self, broker_id: int) -> None: ...
    broker_epochs: dict[int, int]

    def live_brokers(self, watch: Watch | None = None) -> dict[int, BrokerEndpoint]: ...
    def elect(self, broker_id: int) -> int | None: ...
    def controller(self, watch: Watch | None = None) -> tuple[int, int]: ...
    def resign(self, broker_id: int) -> None: ...
    def topics(self, watch: Watch | None = None) -> list[str]: ...
    def assignment(self, topic: str, watch: Watch | None = None) -> list[tuple[int, ...]] | None: ...
    def create_topic(self, topic: str, assignment: list[tuple[int, ...]]) -> bool: ...
    def add_partitions(self, topic: str, assignment: list[tuple[int, ...]], current: int) -> bool: ...
    def reassignments(self, topic: str) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]: ...
    def write_reassignment(self, topic: str, partition: int, replicas: tuple[int, ...], adding: tuple[int, ...],
                           removing: tuple[int, ...]) -> bool: ...
    def mark_topic_for_deletion(self, topic: str) -> None: ...
    def topics_to_delete(self, watch: Watch | None = None) -> list[str]: ...
    def finish_topic_deletion(self, topic: str) -> None: ...
    def entity_config(self, entity_type: str, name: str) -> dict[str, str]: ...
    def entity_names(self, entity_type: str) -> list[str]: ...
    def set_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> None: ...
    def config_changes(self, after: int, watch: Watch | None = None) -> tuple[int, list[str]]: ...
    def topic_id(self, topic: str) -> uuid.UUID | None: ...
    def partition_state(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None: ...
    def write_state(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None: ...
    def write_isr(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None: ...
    def isr_changes(self, watch: Watch | None = None) -> list[TP]: ...

    #: whether ``read_offset``/``write_offset`` reach ZooKeeper group offsets
    offsets_in_zookeeper: bool

    def read_offset(self, group: str, topic: str, partition: int) -> int | None:
        """The group's committed offset of the partition, None if there is none.
        Raises ValueError (bad name), CoordinationError (ZooKeeper unreachable or slow)."""
        ...

    def write_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Commit ``offset`` (parents created). Raises as ``read_offset``."""
        ...

    def add_session_listener(self, fn: Callable[[str], None]) -> None: ...
    def close(self) -> None: ...


def _state_bytes(state: LeaderIsr) -> bytes:
    return paths.encode_partition_state(
        paths.PartitionState(leader=state.leader, isr=tuple(state.isr), leader_epoch=state.leader_epoch, controller_epoch=state.controller_epoch)
    )


def _state_from(data: bytes) -> LeaderIsr:
    st = paths.decode_partition_state(data)
    return LeaderIsr(st.leader, st.leader_epoch, tuple(st.isr), st.controller_epoch)


class ZkStore:
    """The coordination store on ZooKeeper.

    Args:
        connect: ``host:port[,host:port...][/chroot]`` (a missing chroot is created).
        session_timeout_ms: the ZooKeeper session timeout (how long a dead broker stays live).
        connection_timeout_ms: how long ``start`` may wait to connect.
        inter_broker_listener: the listener (``security.inter.broker.protocol``) whose address of
            each registered broker ``live_brokers`` reports as its ``host``/``port``.
    Raises:
        CoordinationError: ZooKeeper unreachable.
    """

    def __init__(
        self, connect: str, session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000, *, inter_broker_listener: str = "PLAINTEXT"
    ) -> None:
        self._connect = connect
        #: the listener whose address the brokers of this cluster use for each other
        self.inter_broker_listener = inter_broker_listener
        self._session_timeout_s = session_timeout_ms / 1000.0
        self._connect_timeout_s = connection_timeout_ms / 1000.0
        self.zk = KazooClient(hosts=connect, timeout=self._session_timeout_s)
        self._epoch_version = -1  # /controller_epoch's version while this broker is controller
        # broker id -> the creation zxid of its registration: a restarted broker has a new one
        # even when the controller saw no gap between its old and new registration.
        self.broker_epochs: dict[int, int] = {}
        self._session_listeners: list[Callable[[str], None]] = []
        self._registered: BrokerEndpoint | None = None
        self._lost = False
        self._closed = False
        self._ensure_chroot()
        try:
            self.zk.start(timeout=self._connect_timeout_s)
        except Exception as e:
            self.zk.close()
            raise CoordinationError(f"cannot reach ZooKeeper at {connect}: {e}") from e
        try:
            self.zk.add_listener(self._on_state)
            for p in (paths.BROKER_IDS_PATH, paths.BROKER_TOPICS_PATH, ISR_CHANGE_PATH, paths.DELETE_TOPICS_PATH):
                self.zk.ensure_path(p)
        except BaseException:
            # No store to close comes back to the caller: a started client left here would
            # run (and reconnect) for the life of the process.
            self.close()
            raise

    def _ensure_chroot(self) -> None:
        # Kafka creates a missing chroot ("host:port/kafka") itself; kazoo would only warn and
        # then fail every operation.
        if "/" not in self._connect:
            return
        base, chroot = self._connect.split("/", 1)
        boot = KazooClient(hosts=base, timeout=self._session_timeout_s)
        try:
            boot.start(timeout=self._connect_timeout_s)
            boot.ensure_path("/" + chroot)
        except Exception as e:
            raise CoordinationError(f"cannot reach ZooKeeper at {base}: {e}") from e
        finally:
            boot.stop()
            boot.close()

    # -- session -------------------------------------------------------------------------------
    def add_session_listener(self, fn: Callable[[str], None]) -> None:
        """``fn("lost")`` when the session expired (ephemeral znodes are gone), ``fn("renewed")``
        once a new session is connected and the broker is registered again."""
        self._session_listeners.append(fn)

    def _on_state(self, state: str) -> None:
        # kazoo's event thread: never block it.
        if state == KazooState.LOST:
            self._lost = True
            self._epoch_version = -1
            for fn in list(self._session_listeners):
                fn("lost")
        elif state == KazooState.CONNECTED and self._lost and not self._closed:
            self._lost = False
            threading.Thread(target=self._renew, name="zk-renew", daemon=True).start()

    def _renew(self) -> None:
        try:
            if self._registered is not None:
                self.register_broker(self._registered)
        except (KazooException, CoordinationError) as e:
            log.error("re-registration after a ZooKeeper session loss failed: %s", e)
            return
        for fn in list(self._session_listeners):
            fn("renewed")

    # -- brokers ---------------------------------------------------------------------------------
    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        """Create ``/brokers/ids/<id>``.

        Raises:
            CoordinationError: another live session holds that broker id.
        """
        path = paths.broker_path(endpoint.node_id)
        # One PLAINTEXT listener: Kafka 0.8's form, which 0.8 clients read; several: version 4.
        plain_only = [name for name, _, _ in endpoint.listeners] in ([], ["PLAINTEXT"])
        endpoints = () if plain_only else tuple(f"{name}://{host}:{port}" for name, host, port in endpoint.listeners)
        data = paths.encode_broker_registration(paths.BrokerRegistration(endpoint.host, endpoint.port, endpoints=endpoints))
        try:
            self.zk.create(path, data, ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:
                self.zk.create(path, data, ephemeral=True)
            else:
                if stat.ephemeralOwner != self.zk.client_id[0]:
                    raise CoordinationError(
                        f"broker id {endpoint.node_id} is already registered at {path} by another live "
                        f"ZooKeeper session (two brokers with one broker.id, or a crashed broker whose "
                        f"session has not expired yet)"
                    ) from None
                self.zk.set(path, data)
        self._registered = endpoint
        log.info("registered broker %d at %s (%s:%d)", endpoint.node_id, path, endpoint.host, endpoint.port)

    def deregister_broker(self, broker_id: int) -> None:
        self._registered = None
        try:
            self.zk.delete(paths.broker_path(broker_id))
        except NoNodeError:
            pass

    def live_brokers(self, watch: Watch | None = None) -> dict[int, BrokerEndpoint]:
        ids = self.zk.get_children(paths.BROKER_IDS_PATH, watch=(lambda _e: watch()) if watch else None)
        out: dict[int, BrokerEndpoint] = {}
        for name in ids:
            try:
                data, stat = self.zk.get(paths.broker_path(int(name)))
            except (NoNodeError, ValueError):
                continue
            try:
                reg = paths.decode_broker_registration(data, require_plaintext=False)
            except ValueError as e:
                log.warning("ignoring unreadable broker registration %s: %s", name, e)
                continue
            listeners = reg.listeners()
            inter = listeners.get(self.inter_broker_listener)
            if inter is None:
                log.warning("broker %s has no %s listener (it has %s): it cannot be reached", name, self.inter_broker_listener, ", ".join(listeners))
                continue
            out[int(name)] = BrokerEndpoint(int(name), *inter, tuple((n, h, p) for n, (h, p) in listeners.items()))
            self.broker_epochs[int(name)] = int(stat.czxid)
        return out

    # -- controller ------------------------------------------------------------------------------
    def elect(self, broker_id: int) -> int | None:
        """Try to become the controller; returns the new controller epoch, or None if another
        broker holds ``/controller``."""
        data = paths.encode_controller(paths.ControllerRegistration(broker_id))
        try:
            self.zk.create(paths.CONTROLLER_PATH, data, ephemeral=True)
        except NodeExistsError:
            return None
        try:
            raw, stat = self.zk.get(paths.CONTROLLER_EPOCH_PATH)
            epoch = int(raw.decode() or 0) + 1
            stat = self.zk.set(paths.CONTROLLER_EPOCH_PATH, str(epoch).encode(), version=stat.version)
        except NoNodeError:
            epoch = 1
            try:
                self.zk.create(paths.CONTROLLER_EPOCH_PATH, b"1")
                _, stat = self.zk.get(paths.CONTROLLER_EPOCH_PATH)
            except NodeExistsError:
                self.resign(broker_id)
                return None
        except BadVersionError:
            # Another controller bumped the epoch in between: it is the newer one.
            self.resign(broker_id)
            return None
        self._epoch_version = stat.version
        return epoch

    def controller(self, watch: Watch | None = None) -> tuple[int, int]:
        """``(controller broker id or -1, controller epoch)``; the watch fires on a change of
        ``/controller`` (created, deleted)."""
        w = (lambda _e: watch()) if watch else None
        try:
            data, _ = self.zk.get(paths.CONTROLLER_PATH, watch=w)
            cid = paths.decode_controller(data).broker_id
        except NoNodeError:
            self.zk.exists(paths.CONTROLLER_PATH, watch=w)
            cid = -1
        try:
            raw, _ = self.zk.get(paths.CONTROLLER_EPOCH_PATH)
            epoch = int(raw.decode() or 0)
        except NoNodeError:
            epoch = 0
        return cid, epoch

    def resign(self, broker_id: int) -> None:
        self._epoch_version = -1
        try:
            data, stat = self.zk.get(paths.CONTROLLER_PATH)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(paths.CONTROLLER_PATH, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    # -- topics ----------------------------------------------------------------------------------
    def topics(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.zk.get_children(paths.BROKER_TOPICS_PATH, watch=(lambda _e: watch()) if watch else None))

    def assignment(self, topic: str, watch: Watch | None = None) -> list[tuple[int, ...]] | None:
        w = (lambda _e: watch()) if watch else None
        try:
            data, _ = self.zk.get(paths.topic_path(topic), watch=w)
        except NoNodeError:
            return None
        parts = paths.decode_topic_assignment(data)
        return [tuple(parts[p]) for p in sorted(parts)]

    def add_partitions(self, topic: str, assignment: list[tuple[int, ...]], current: int) -> bool:
        """Rewrite the assignment with more partitions, if it still has ``current`` of them
        (conditional on the version read: two concurrent additions cannot both win)."""
        try:
            data, stat = self.zk.get(paths.topic_path(topic))
        except NoNodeError:
            return False
        if len(paths.decode_topic_assignment(data)) != current:
            return False
        # The other fields stay (the topic id, the ongoing reassignments of existing partitions).
        body = paths.encode_topic_assignment({p: list(r) for p, r in enumerate(assignment)}, paths.decode_topic_id(data))
        extra = {k: v for k, v in json.loads(data).items() if k not in ("partitions", "topic_id", "version")}
        if extra:
            body = json.dumps({**json.loads(body), **extra, "version": max(2, int(json.loads(data).get("version", 1)))},
                              separators=(",", ":")).encode()
        try:
            self.zk.set(paths.topic_path(topic), body, version=stat.version)
        except (BadVersionError, NoNodeError):
            return False
        return True

    def reassignments(self, topic: str) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        """partition -> (adding, removing) of the topic's ongoing reassignments (KIP-455)."""
        try:
            data, _ = self.zk.get(paths.topic_path(topic))
        except NoNodeError:
            return {}
        return paths.decode_topic_reassignments(data)

    def write_reassignment(self, topic: str, partition: int, replicas: tuple[int, ...], adding: tuple[int, ...],
                           removing: tuple[int, ...]) -> bool:
        """Set one partition's replicas and ongoing reassignment in the topic znode (the rest
        kept), conditional on the version read, re-read on a lost race. False: no such topic."""
        path = paths.topic_path(topic)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return False
            body = paths.with_reassignment(data, partition, replicas, adding, removing)
            try:
                self.zk.set(path, body, version=stat.version)
            except BadVersionError:
                continue
            except NoNodeError:
                return False
            return True

    def mark_topic_for_deletion(self, topic: str) -> None:
        try:
            self.zk.create(paths.delete_topic_path(topic), b"", makepath=True)
        except NodeExistsError:
            pass  # already marked: Kafka swallows this too and waits for the deletion

    def topics_to_delete(self, watch: Watch | None = None) -> list[str]:
        return sorted(self.zk.get_children(paths.DELETE_TOPICS_PATH, watch=(lambda _e: watch()) if watch else None))

    def finish_topic_deletion(self, topic: str) -> None:
        """Remove the topic's znodes (assignment, partition states, configs), then its marker."""
        for path in (paths.topic_path(topic), paths.config_path("topics", topic), paths.delete_topic_path(topic)):
            try:
                self.zk.delete(path, recursive=True)
            except NoNodeError:
                pass

    def create_topic(self, topic: str, assignment: list[tuple[int, ...]]) -> bool:
        data = paths.encode_topic_assignment({p: list(r) for p, r in enumerate(assignment)}, paths.new_topic_id())
        try:
            self.zk.create(paths.topic_path(topic), data, makepath=True)
        except NodeExistsError:
            return False
        return True

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id from its znode (None: no such topic); one without an id gets one,
        written back conditional on the version read (a lost race reads the winner's)."""
        try:
            return self._topic_id(topic)
        except KazooException as e:
            raise CoordinationError(f"topic id of {topic}: {e!r}") from e

    def _topic_id(self, topic: str) -> uuid.UUID | None:
        path = paths.topic_path(topic)
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return None
            tid = paths.decode_topic_id(data)
            if tid is not None:
                return tid
            tid = paths.new_topic_id()
            try:
                self.zk.set(path, paths.with_topic_id(data, tid), version=stat.version)
            except BadVersionError:
                continue  # another broker wrote one first: read it
            except NoNodeError:
                return None
            log.info("topic %s had no id: gave it %s", topic, paths.topic_id_str(tid))
            return tid

    # -- partition state -------------------------------------------------------------------------
    def partition_state(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None:
        try:
            data, stat = self.zk.get(paths.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return _state_from(data), stat.version

    def write_state(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None:
        """The controller's write, fenced by its epoch. Returns the new version or None."""
        if self._epoch_version < 0:
            return None
        path = paths.partition_state_path(topic, partition)
        if expected_version < 0:
            self.zk.ensure_path(path.rsplit("/", 1)[0])
        t = self.zk.transaction()
        t.check(paths.CONTROLLER_EPOCH_PATH, self._epoch_version)
        if expected_version < 0:
            t.create(path, _state_bytes(state))
        else:
            t.set_data(path, _state_bytes(state), version=expected_version)
        results = t.commit()
        if any(isinstance(r, Exception) for r in results):
            bad = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            log.info("state write of %s-%d refused: %s", topic, partition, bad)
            return None
        return 0 if expected_version < 0 else expected_version + 1

    def write_isr(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None:
        """A leader's ISR change (conditional on the version it holds), then a notification."""
        try:
            stat = self.zk.set(paths.partition_state_path(topic, partition), _state_bytes(state), version=expected_version)
        except (BadVersionError, NoNodeError):
            return None
        body = json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": partition}]}, separators=(",", ":")).encode()
        try:
            self.zk.create(_ISR_CHANGE_PREFIX, body, sequence=True)
        except KazooException as e:
            log.warning("ISR change notification for %s-%d failed: %s", topic, partition, e)
        return int(stat.version)

    def isr_changes(self, watch: Watch | None = None) -> list[TP]:
        """Read and delete the pending ISR change notifications."""
        names = self.zk.get_children(ISR_CHANGE_PATH, watch=(lambda _e: watch()) if watch else None)
        out: list[TP] = []
        for name in sorted(names):
            path = f"{ISR_CHANGE_PATH}/{name}"
            try:
                data, _ = self.zk.get(path)
                for p in json.loads(data.decode()).get("partitions", ()):
                    out.append((str(p["topic"]), int(p["partition"])))
                self.zk.delete(path)
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring malformed ISR change notification %s: %s", path, e)
                self.zk.delete(path)
        return out

    # -- dynamic configs -------------------------------------------------------------------------------
    def entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        try:
            data, _ = self.zk.get(paths.config_path(entity_type, name))
        except NoNodeError:
            return {}
        return paths.decode_config(data)

    def entity_names(self, entity_type: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(f"{paths.CONFIG_PATH}/{entity_type}"))
        except NoNodeError:
            return []

    def set_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        path = paths.config_path(entity_type, name)
        body = paths.encode_config(config)
        try:
            self.zk.set(path, body)
        except NoNodeError:
            try:
                self.zk.create(path, body, makepath=True)
            except NodeExistsError:
                self.zk.set(path, body)
        note = json.dumps({"version": 2, "entity_path": f"{entity_type}/{name}"}, separators=(",", ":")).encode()
        self.zk.create(paths.CONFIG_CHANGE_PREFIX, note, sequence=True, makepath=True)
        try:
            old = sorted(self.zk.get_children(paths.CONFIG_CHANGES_PATH))[:-KEEP_CONFIG_CHANGES]
            for n in old:
                self.zk.delete(f"{paths.CONFIG_CHANGES_PATH}/{n}")
        except NoNodeError:
            pass

    def config_changes(self, after: int, watch: Watch | None = None) -> tuple[int, list[str]]:
        """The entity paths of the notifications with a sequence above ``after`` (all of them for
        -1), in order, and the last sequence seen."""
        self.zk.ensure_path(paths.CONFIG_CHANGES_PATH)
        names = self.zk.get_children(paths.CONFIG_CHANGES_PATH, watch=(lambda _e: watch()) if watch else None)
        last, out = after, []
        for n in sorted(names):
            seq = int(n.rsplit("_", 1)[-1]) if n.rsplit("_", 1)[-1].isdigit() else -1
            if seq <= after:
                continue
            last = max(last, seq)
            try:
                data, _ = self.zk.get(f"{paths.CONFIG_CHANGES_PATH}/{n}")
                out.append(str(json.loads(data.decode())["entity_path"]))
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring malformed config change notification %s: %s", n, e)
        return last, out

    # -- ZooKeeper group offsets ---------------------------------------------------------------------
    offsets_in_zookeeper = True

    def _offset_call(self, what: str, start: Callable[[], Any]) -> Any:
        """Run one kazoo async call and wait at most OFFSET_IO_TIMEOUT_S for it. A ZooKeeper
        that is unreachable fails at once instead of queueing the call until it comes back."""
        if self._closed or not self.zk.connected:
            raise CoordinationError(f"{what}: not connected to ZooKeeper")
        try:
            return start().get(timeout=OFFSET_IO_TIMEOUT_S)
        except (NoNodeError, NodeExistsError):
            raise
        except Exception as e:  # kazoo's timeout and connection errors are not one hierarchy
            raise CoordinationError(f"{what}: {type(e).__name__}: {e}") from e

    def read_offset(self, group: str, topic: str, partition: int) -> int | None:
        path = paths.offset_path(group, topic, partition)
        try:
            data, _ = self._offset_call(f"reading {path}", lambda: self.zk.get_async(path))
        except NoNodeError:
            return None
        offset = paths.decode_offset(data, path)
        return None if offset == paths.NO_OFFSET else offset

    def write_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        path = paths.offset_path(group, topic, partition)
        # Kafka 0.8's "no offset" (-1) is the one negative value the znode format holds.
        data = paths.encode_offset(offset) if offset >= 0 else str(paths.NO_OFFSET).encode("ascii")
        what = f"writing {path}"
        try:
            self._offset_call(what, lambda: self.zk.set_async(path, data))
            return
        except NoNodeError:
            pass
        try:
            self._offset_call(what, lambda: self.zk.create_async(path, data, makepath=True))
        except NodeExistsError:  # a concurrent first commit created it: ours is the later one
            self._offset_call(what, lambda: self.zk.set_async(path, data))

    def close(self) -> None:
        self._closed = True
        try:
            self.zk.stop()
        finally:
            self.zk.close()


class MemoryStore:
    """The store of a standalone broker: one broker, its own controller; topic ids and dynamic
    configs persisted when given their files (topics are rebuilt from the log directory at
    start-up by the caller).

    Args:
        topic_ids_path: ``topic-ids.json`` (None: ids in memory only).
        configs_path: ``dynamic-configs.json`` (None: dynamic configs in memory only).

    Raises:
        StorageError: one of the files exists but cannot be read or has another shape.
    """

    def __init__(self, topic_ids_path: str | None = None, configs_path: str | None = None) -> None:
        self._lock = threading.RLock()
        self._ids_path = topic_ids_path
        self._ids: dict[str, uuid.UUID] = _load_topic_ids(topic_ids_path) if topic_ids_path else {}
        self._configs_path = configs_path
        self._brokers: dict[int, BrokerEndpoint] = {}
        self._controller = -1
        self._epoch = 0
        self._topics: dict[str, list[tuple[int, ...]]] = {}
        self._states: dict[TP, tuple[LeaderIsr, int]] = {}
        self._deleting: set[str] = set()
        self._reassignments: dict[str, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = {}
        self._configs: dict[tuple[str, str], dict[str, str]] = _load_configs(configs_path) if configs_path else {}
        self._changes: list[str] = []
        self._watches: dict[str, list[Watch]] = {}
        self.broker_epochs: dict[int, int] = {}
        self._registrations = 0

    def _arm(self, key: str, watch: Watch | None) -> None:
        if watch is not None:
            self._watches.setdefault(key, []).append(watch)

    def _fire(self, key: str) -> None:
        for w in self._watches.pop(key, []):
            w()

    def add_session_listener(self, fn: Callable[[str], None]) -> None:
        pass

    def register_broker(self, endpoint: BrokerEndpoint) -> None:
        with self._lock:
            if endpoint.node_id in self._brokers and self._brokers[endpoint.node_id] != endpoint:
                raise CoordinationError(f"broker id {endpoint.node_id} is already registered")
            self._brokers[endpoint.node_id] = endpoint
            self._registrations += 1
            self.broker_epochs[endpoint.node_id] = self._registrations
        self._fire("brokers")

    def deregister_broker(self, broker_id: int) -> None:
        with self._lock:
            self._brokers.pop(broker_id, None)
        self._fire("brokers")

    def live_brokers(self, watch: Watch | None = None) -> dict[int, BrokerEndpoint]:
        with self._lock:
            self._arm("brokers", watch)
            return dict(self._brokers)

    def elect(self, broker_id: int) -> int | None:
        with self._lock:
            if self._controller >= 0:
                return None
            self._controller = broker_id
            self._epoch += 1
            epoch = self._epoch
        self._fire("controller")
        return epoch

    def controller(self, watch: Watch | None = None) -> tuple[int, int]:
        with self._lock:
            self._arm("controller", watch)
            return self._controller, self._epoch

    def resign(self, broker_id: int) -> None:
        with self._lock:
            if self._controller != broker_id:
                return
            self._controller = -1
        self._fire("controller")

    def topics(self, watch: Watch | None = None) -> list[str]:
        with self._lock:
            self._arm("topics", watch)
            return sorted(self._topics)

    def assignment(self, topic: str, watch: Watch | None = None) -> list[tuple[int, ...]] | None:
        with self._lock:
            a = self._topics.get(topic)
            if a is not None:
                self._arm(f"assignment:{topic}", watch)
            return None if a is None else list(a)

    def add_partitions(self, topic: str, assignment: list[tuple[int, ...]], current: int) -> bool:
        with self._lock:
            a = self._topics.get(topic)
            if a is None or len(a) != current:
                return False
            self._topics[topic] = list(assignment)
        self._fire(f"assignment:{topic}")
        return True

    def reassignments(self, topic: str) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        with self._lock:
            return dict(self._reassignments.get(topic, {}))

    def write_reassignment(self, topic: str, partition: int, replicas: tuple[int, ...], adding: tuple[int, ...],
                           removing: tuple[int, ...]) -> bool:
        with self._lock:
            a = self._topics.get(topic)
            if a is None or not 0 <= partition < len(a):
                return False
            a = list(a)
            a[partition] = tuple(replicas)
            self._topics[topic] = a
            ongoing = self._reassignments.setdefault(topic, {})
            if adding or removing:
                ongoing[partition] = (tuple(adding), tuple(removing))
            else:
                ongoing.pop(partition, None)
        self._fire(f"assignment:{topic}")
        return True

    def mark_topic_for_deletion(self, topic: str) -> None:
        with self._lock:
            self._deleting.add(topic)
        self._fire("delete_topics")

    def topics_to_delete(self, watch: Watch | None = None) -> list[str]:
        with self._lock:
            self._arm("delete_topics", watch)
            return sorted(self._deleting)

    def entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        with self._lock:
            return dict(self._configs.get((entity_type, name), {}))

    def entity_names(self, entity_type: str) -> list[str]:
        with self._lock:
            return sorted(n for t, n in self._configs if t == entity_type)

    def set_entity_config(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        paths.config_path(entity_type, name)  # the same names as in ZooKeeper are legal
        with self._lock:
            configs = {**self._configs, (entity_type, name): dict(config)}
            self._save_configs(configs)  # on disk first: a failed write changes nothing
            self._configs = configs
            self._changes.append(f"{entity_type}/{name}")
        self._fire("config_changes")

    def config_changes(self, after: int, watch: Watch | None = None) -> tuple[int, list[str]]:
        with self._lock:
            self._arm("config_changes", watch)
            return len(self._changes) - 1, self._changes[after + 1:]

    def finish_topic_deletion(self, topic: str) -> None:
        with self._lock:
            if ("topics", topic) in self._configs:
                configs = dict(self._configs)
                del configs[("topics", topic)]
                self._save_configs(configs)
                self._configs = configs
            self._topics.pop(topic, None)
            self._reassignments.pop(topic, None)
            for tp in [tp for tp in self._states if tp[0] == topic]:
                del self._states[tp]
            self._deleting.discard(topic)
            self._watches.pop(f"assignment:{topic}", None)
        self._fire("topics")

    def create_topic(self, topic: str, assignment: list[tuple[int, ...]]) -> bool:
        with self._lock:
            if topic in self._topics:
                return False
            self._topics[topic] = list(assignment)
            if topic not in self._ids:
                self._ids[topic] = paths.new_topic_id()
                self._save_ids()
        self._fire("topics")
        return True

    def topic_id(self, topic: str) -> uuid.UUID | None:
        with self._lock:
            return self._ids.get(topic) if topic in self._topics else None

    def _save_ids(self) -> None:
        if self._ids_path is None:
            return
        write_json_atomically(self._ids_path, {t: paths.topic_id_str(u) for t, u in sorted(self._ids.items())})

    def _save_configs(self, configs: dict[tuple[str, str], dict[str, str]]) -> None:
        if self._configs_path is None:
            return
        body = {f"{t}/{n}": c for (t, n), c in configs.items()}
        write_json_atomically(self._configs_path, {"version": _CONFIGS_VERSION, "configs": body})

    def partition_state(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None:
        with self._lock:
            return self._states.get((topic, partition))

    def _cas(self, tp: TP, state: LeaderIsr, expected_version: int) -> int | None:
        with self._lock:
            cur = self._states.get(tp)
            if (cur is None and expected_version >= 0) or (cur is not None and cur[1] != expected_version):
                return None
            version = 0 if cur is None else cur[1] + 1
            self._states[tp] = (state, version)
            return version

    def write_state(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None:
        return self._cas((topic, partition), state, expected_version)

    def write_isr(self, topic: str, partition: int, state: LeaderIsr, expected_version: int) -> int | None:
        return self._cas((topic, partition), state, expected_version)

    def isr_changes(self, watch: Watch | None = None) -> list[TP]:
        return []

    offsets_in_zookeeper = False

    def read_offset(self, group: str, topic: str, partition: int) -> int | None:
        return None

    def write_offset(self, group: str, topic: str, partition: int, offset: int) -> None:
        raise NoZooKeeperError("a standalone broker has no ZooKeeper group offsets")

    def close(self) -> None:
        pass



_CONFIGS_VERSION = 1


def _load_configs(path: str) -> dict[tuple[str, str], dict[str, str]]:
    """``dynamic-configs.json`` of a standalone broker ({} when there is none yet)."""
    data = read_json(path, {"version": _CONFIGS_VERSION, "configs": {}})
    configs = data.get("configs") if isinstance(data, dict) and data.get("version") == _CONFIGS_VERSION else None
    if not isinstance(configs, dict) or not all(isinstance(c, dict) and "/" in e for e, c in configs.items()):
        raise StorageError(f'{path}: expected {{"version": {_CONFIGS_VERSION}, "configs": {{"<type>/<name>": {{key: value}}}}}}')
    out: dict[tuple[str, str], dict[str, str]] = {}
    for entity, config in configs.items():
        entity_type, _, name = entity.partition("/")
        out[(entity_type, name)] = {str(k): str(v) for k, v in config.items()}
    return out


def _load_topic_ids(path: str) -> dict[str, uuid.UUID]:
    """``topic-ids.json`` of a standalone broker ({} when there is none yet)."""
    data = read_json(path, {})
    if not isinstance(data, dict):
        raise StorageError(f"{path}: expected {{topic: id}}")
    try:
        return {str(t): paths.parse_topic_id(v) for t, v in data.items()}
    except paths.ZnodeDataError as e:
        raise StorageError(f"{path}: {e}") from e
