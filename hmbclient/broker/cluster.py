"""EmbeddedCluster: N real brokers on one ZooKeeper, with replication, for tests and local work.

    with EmbeddedCluster(brokers=3, zookeeper_connect=zk.connect, num_partitions=6,
                         replication_factor=3) as cluster:
        cluster.bootstrap                       # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        cluster.create_topic("events", 6, replication_factor=3)
        cluster.await_isr("events")             # every replica in sync
        cluster.leader("events", 0)             # broker id
        cluster.kill(1)                         # a crash: no controlled shutdown
        cluster.restart(1)                      # same port, same data: it catches up
        cluster.move_leader("events", 0, 2)     # an ISR member takes over (leader epoch + 1)
        cluster.pause(2); cluster.resume(2)     # SIGSTOP / SIGCONT (processes=True only)

Every broker is a separate :class:`Broker` with its own log directory (``<dir>/broker-<id>``),
its own ZooKeeper session and its own metadata cache, exactly as separate processes would be;
``processes=True`` runs each one as a ``python -m hmbclient.broker`` child process instead
(then ``kill`` is SIGKILL and ZooKeeper notices only when the session times out).
``replication_factor`` is the cluster's ``default.replication.factor`` (auto-created topics
and ``create_topic``). Several brokers need ``zookeeper_connect`` (give each cluster its own
chroot, e.g. ``"127.0.0.1:2181/my-test"``); a cluster of one broker may run without ZooKeeper,
as a standalone broker does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from hmbclient.broker.broker import Broker
from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.metadata import PartitionMeta
from hmbclient.errors import ConfigError, HmbError, for_code
from hmbclient.protocol.api import CreateTopicsRequest, MetadataRequest

__all__ = ["EmbeddedCluster"]


class EmbeddedCluster:
    """Several brokers that form one replicated cluster.

    Args:
        brokers: how many (ids 0..N-1).
        zookeeper_connect: the ZooKeeper to use (required for more than one broker).
        num_partitions: partitions of auto-created topics.
        replication_factor: replicas of auto-created topics (``default.replication.factor``;
            default ``min(3, brokers)``).
        log_dir: data directory (None: a temp dir removed on stop).
        processes: run each broker in a child process.
        **config: other BrokerConfig settings applied to every broker (not broker_id/port).
    Raises:
        ConfigError: bad settings.
    """

    def __init__(
        self,
        brokers: int = 3,
        zookeeper_connect: str | None = None,
        num_partitions: int | None = None,
        log_dir: str | None = None,
        *,
        replication_factor: int | None = None,
        processes: bool = False,
        **config: Any,
    ) -> None:
        if brokers < 1:
            raise ConfigError(f"brokers must be >= 1, got {brokers}")
        if brokers > 1 and not zookeeper_connect:
            raise ConfigError(
                "an EmbeddedCluster of several brokers needs zookeeper_connect: brokers elect their "
                "controller and keep partition state there (hmbclient.testing.LocalZooKeeper starts one)"
            )
        for key in ("broker_id", "port", "log_dirs"):
            if key in config:
                raise ConfigError(f"{key} is chosen by the cluster")
        self._owns_dir = log_dir is None
        self._log_dir = log_dir or tempfile.mkdtemp(prefix="hmb-cluster-")
        self._zk_connect = zookeeper_connect
        self.processes = processes
        extra = dict(config)
        if num_partitions is not None:
            extra["num_partitions"] = num_partitions
        # A test cluster replicates by default (Kafka's default.replication.factor is 1, but
        # leader moves and failover need replicas): min(3, brokers) unless told otherwise.
        extra["default_replication_factor"] = replication_factor if replication_factor is not None else min(3, brokers)
        # Validate now (a bad key fails here, before anything starts).
        BrokerConfig(broker_id=0, port=0, **{k: v for k, v in extra.items()})
        self._extra = extra
        self._n = brokers
        self._ports: dict[int, int] = {}
        self._brokers: dict[int, Any] = {}
        self.running = False

    # -- lifecycle -------------------------------------------------------------------------------
    def _config(self, broker_id: int) -> BrokerConfig:
        return BrokerConfig(
            broker_id=broker_id,
            port=self._ports.get(broker_id, 0),
            log_dirs=(self.broker_log_dir(broker_id),),
            zookeeper_connect=self._zk_connect,
            **self._extra,
        )

    def broker_log_dir(self, broker_id: int) -> str:
        return os.path.join(self._log_dir, f"broker-{broker_id}")

    def _new_broker(self, broker_id: int) -> Any:
        cfg = self._config(broker_id)
        if not self.processes:
            return Broker(cfg)
        from hmbclient.broker.process import BrokerProcess

        settings = {k: v for k, v in self._extra.items()}
        return BrokerProcess(
            self.broker_log_dir(broker_id),
            self._ports.get(broker_id, 0),
            broker_id=broker_id,
            zookeeper_connect=self._zk_connect,
            **settings,
        )

    def _start_broker(self, broker_id: int) -> None:
        b = self._brokers.get(broker_id)
        if b is None or (self.processes and not b.running):
            b = self._new_broker(broker_id)
            self._brokers[broker_id] = b
        elif not self.processes and not b.running:
            b = Broker(self._config(broker_id))
            self._brokers[broker_id] = b
        b.start()
        self._ports[broker_id] = b.port

    def start(self) -> EmbeddedCluster:
        """Start every broker. Returns self."""
        if self.running:
            return self
        try:
            for i in range(self._n):
                self._start_broker(i)
            self.await_brokers()
        except BaseException:
            self._shutdown()
            raise
        self.running = True
        return self

    def _shutdown(self) -> None:
        # Controlled shutdown one by one would move every leadership around for nothing: the
        # whole cluster goes away.
        for b in reversed(list(self._brokers.values())):
            if self.processes:
                b.terminate()
            else:
                b.stop(controlled=False)

    def stop(self) -> None:
        """Stop every broker; remove the temp dir if the cluster made it."""
        self._shutdown()
        self.running = False
        if self._owns_dir:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    close = stop

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inspection ------------------------------------------------------------------------------
    @property
    def brokers(self) -> list[Any]:
        """The brokers, index = broker id (``.host``, ``.port``, ``.running``)."""
        return [self._brokers[i] for i in sorted(self._brokers)]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers)

    @property
    def zookeeper_connect(self) -> str | None:
        return self._zk_connect

    @property
    def log_dir(self) -> str:
        return self._log_dir

    def broker(self, broker_id: int) -> Any:
        return self._brokers[broker_id]

    def _live(self) -> list[Any]:
        """Running brokers that can answer: a paused process is running but silent."""
        return [b for b in self.brokers if b.running and not getattr(b, "paused", False)]

    def _metadata(self, topics: list[str] | None = None) -> Any:
        """A Metadata v1 answer from a live broker."""
        last: Exception | None = None
        for b in self._live():
            ch = b.channel("embedded-cluster")
            try:
                return ch.request(MetadataRequest[1](topics=topics), 10.0)
            except HmbError as e:
                last = e
            finally:
                ch.close()
        raise HmbError(f"no broker answered Metadata: {last}")

    def partition(self, topic: str, partition: int) -> PartitionMeta | None:
        """The partition's state as a live broker's metadata shows it."""
        for t in self._metadata([topic]).topics:
            for p in t.partitions:
                if p.partition == partition:
                    return PartitionMeta(p.leader, -1, tuple(p.isr), tuple(p.replicas))
        return None

    def leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader id (-1: none; None: unknown partition)."""
        meta = self.partition(topic, partition)
        return None if meta is None else meta.leader

    def controller_id(self) -> int:
        return int(self._metadata([]).controller_id)

    # -- waiting ---------------------------------------------------------------------------------
    def _wait(self, what: str, check: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while True:
            try:
                if check():
                    return
            except HmbError:
                pass
            if time.monotonic() > deadline:
                raise HmbError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def await_brokers(self, timeout_s: float = 30.0) -> None:
        """Wait until every running broker's metadata lists every running broker."""
        want = {i for i, b in self._brokers.items() if b.running}

        def check() -> bool:
            return all({x.node_id for x in resp.brokers} == want for resp in self._metadata_from_each([]))

        self._wait(f"brokers {sorted(want)} to see each other", check, timeout_s)

    def await_isr(self, topic: str, timeout_s: float = 30.0, *, size: int | None = None) -> None:
        """Wait until every partition of ``topic`` has a leader and an ISR of all its replicas
        (or of at least ``size`` members) on every running broker."""

        def check() -> bool:
            for resp in self._metadata_from_each([topic]):
                t = resp.topics[0]
                if t.error_code or not t.partitions:
                    return False
                for p in t.partitions:
                    if p.leader < 0:
                        return False
                    want = len(p.replicas) if size is None else size
                    if len(p.isr) < want:
                        return False
            return True

        self._wait(f"the ISR of {topic}", check, timeout_s)

    # -- control ---------------------------------------------------------------------------------
    def create_topic(self, topic: str, num_partitions: int | None = None, replication_factor: int | None = None, timeout_ms: int = 30_000) -> None:
        """Create a topic and wait until it has leaders.

        Raises:
            BrokerError: the broker's refusal (INVALID_TOPIC, TOPIC_ALREADY_EXISTS,
                INVALID_REPLICATION_FACTOR, ...).
        """
        n = num_partitions or self._config(0).num_partitions
        rf = replication_factor or self._config(0).default_replication_factor
        b = self._live()[0]
        ch = b.channel("embedded-cluster")
        try:
            resp = ch.request(CreateTopicsRequest[1](topics=[(topic, n, rf, [], [])], timeout_ms=timeout_ms, validate_only=False), timeout_ms / 1000.0 + 5)
        finally:
            ch.close()
        r = resp.topics[0]
        if r.error_code:
            raise for_code(r.error_code)(r.error_message or f"cannot create {topic}")

    def move_leader(self, topic: str, partition: int, broker_id: int, timeout_s: float = 10.0) -> None:
        """Make ``broker_id`` (an in-sync replica) lead the partition; the old leader answers
        NOT_LEADER_FOR_PARTITION from then on.

        Raises:
            KeyError: unknown partition, or ``broker_id`` is not one of its in-sync replicas.
        """
        if self.processes:
            raise HmbError("move_leader needs an in-process cluster")
        meta = self.partition(topic, partition)
        if meta is None:
            raise KeyError(f"unknown partition {topic}-{partition}")
        if broker_id not in meta.replicas:
            raise KeyError(f"broker {broker_id} is not a replica of {topic}-{partition} (replicas {list(meta.replicas)})")
        try:
            # A replica that is catching up joins the ISR soon; only an in-sync one may lead.
            self._wait(f"broker {broker_id} in the ISR of {topic}-{partition}", lambda: broker_id in self.partition(topic, partition).isr, timeout_s)  # type: ignore[union-attr]
        except HmbError as e:
            raise KeyError(str(e)) from None
        cid = self.controller_id()
        controller = self._brokers[cid].controller
        if controller is None or not controller.move_leader(topic, partition, broker_id).result(timeout=timeout_s):
            raise KeyError(f"the controller did not move {topic}-{partition} to broker {broker_id}")
        self._wait(f"{topic}-{partition} led by {broker_id} on every broker", lambda: self._leaders_everywhere(topic, partition) == {broker_id}, timeout_s)

    def _leaders_everywhere(self, topic: str, partition: int) -> set[int]:
        """The partition's leader as each running broker's metadata shows it."""
        return {p.leader for resp in self._metadata_from_each([topic]) for t in resp.topics for p in t.partitions if p.partition == partition}

    def _metadata_from_each(self, topics: list[str]) -> list[Any]:
        """A Metadata v1 answer from every running broker (each its own view)."""
        out = []
        for b in self._live():
            ch = b.channel("embedded-cluster")
            try:
                out.append(ch.request(MetadataRequest[1](topics=topics), 5.0))
            finally:
                ch.close()
        return out

    def kill(self, broker_id: int) -> None:
        """Crash a broker: no controlled shutdown (SIGKILL with ``processes=True``)."""
        b = self._brokers[broker_id]
        if self.processes:
            b.kill()
        else:
            b.kill()

    def pause(self, broker_id: int) -> None:
        """Freeze a broker process (SIGSTOP): it holds its sockets and ZooKeeper session but
        does nothing, as in a long GC pause. Inspection (``leader``, ``await_isr``) asks the
        other brokers meanwhile.

        Raises:
            HmbError: an in-process cluster (a thread cannot be frozen apart from the test), or
                the broker is not running.
        """
        if not self.processes:
            raise HmbError("pause needs EmbeddedCluster(processes=True): in-process brokers share the test's process")
        self._brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        """Let a paused broker process run again (SIGCONT).

        Raises:
            HmbError: an in-process cluster, or the broker is not running.
        """
        if not self.processes:
            raise HmbError("resume needs EmbeddedCluster(processes=True): in-process brokers share the test's process")
        self._brokers[broker_id].resume()

    def stop_broker(self, broker_id: int) -> None:
        """Stop one broker cleanly (controlled shutdown first); its port is kept for a restart."""
        b = self._brokers[broker_id]
        if self.processes:
            b.terminate()
        else:
            b.stop(remove_temp_dir=False)

    def restart(self, broker_id: int, timeout_s: float = 30.0) -> None:
        """Start a stopped or killed broker again on its port and data; it rejoins as a
        follower and catches up."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._start_broker(broker_id)
                break
            except HmbError as e:
                # After a crash its old ZooKeeper session may hold the id until it expires.
                if "already registered" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.await_brokers(timeout_s=max(1.0, deadline - time.monotonic()))

    start_broker = restart

    def __repr__(self) -> str:
        return f"EmbeddedCluster({self.bootstrap}, running={self.running})"

