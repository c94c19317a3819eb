"""Network partitions at the socket level, in the fault-run harness (harness.py).

:class:`PartitionRun` is a :class:`~tests.faults.harness.FaultRun` whose ZooKeeper and three
broker processes each live in their own network namespace
(:class:`hmbclient.testing.netns.NetworkLab`), joined by a bridge that the test's clients reach
too. Its faults drop packets between chosen namespaces (no process is signalled):

* ``leader_zk_cut``: a partition's leader cut off from ZooKeeper (both ways) but reachable by
  clients and by the other brokers: the classic split brain. Its session expires, the
  controller elects a new leader; meanwhile the old leader still believes it leads. Probes
  then write (acks=-1) to the old leader directly: it must acknowledge none (its followers
  now follow the new leader, so its ISR can never confirm), and a read from it (a client with
  stale metadata) must serve nothing the new leader does not hold (judged at the end with the
  readers: a dirty read otherwise).
* ``leader_followers_cut``: the leader cut off from its followers only (ZooKeeper and clients
  still reach it): it keeps its session and shrinks the ISR to itself; acks=-1 writes to it must
  be refused (min.insync.replicas 2), never acknowledged.
* ``asymmetric_leader_out``: only what the leader *sends* to ZooKeeper and to the other brokers
  is dropped (what they send reaches it; clients reach it both ways): its session expires for
  lack of pings, a new leader is elected; the same probes as for the split brain.
* ``flapping_leader``: the leader cut from everything but the clients for less than the
  session, healed, three times over.

Every fault ends by healing every link; the run's recovery (every broker registered, every ISR
whole, every producer acknowledged again) and validation (0 acknowledged lost, idempotent
producers without duplicates and in order, replicas identical, 0 dirty reads) are the
harness's. A probe that was acknowledged by an isolated leader is a failure by itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hmbclient.broker import EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel
from hmbclient.broker.process import BrokerProcess
from hmbclient.errors import ErrorCode, HmbError
from hmbclient.protocol import records
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.testing import LocalZooKeeper
from hmbclient.testing.netns import HOST, NetworkLab
from rebalance import paths

from .harness import (
    BROKERS,
    CLUSTER_SETTINGS,
    PARTITIONS,
    RECOVERY_TIMEOUT_S,
    TOPIC,
    AckLog,
    FaultRecord,
    FaultRun,
    _wait,
    encode_value,
)
from .readers import Reader

__all__ = ["PARTITION_KINDS", "NetnsCluster", "PartitionRun"]

PARTITION_KINDS = ("leader_zk_cut", "leader_followers_cut", "asymmetric_leader_out", "flapping_leader")
#: values of the probes written to an isolated leader (far from the producers' ranges)
PROBE_BASE = 9_000_000_000
PROBE_WRITES = 2
#: A probe write asks for acks within 1 s; an isolated leader may not answer at all (its
#: partition is held by an ISR write to the unreachable ZooKeeper): not acknowledged either.
PROBE_TIMEOUT_S = 3.0


def node(broker_id: int) -> str:
    return f"broker{broker_id}"


class NetnsCluster(EmbeddedCluster):
    """An :class:`EmbeddedCluster` of broker processes, each in its lab namespace and listening
    on its namespace address; brokers cut off from the test (:data:`HOST`) are not asked for
    metadata."""

    def __init__(self, lab: NetworkLab, brokers: int, zookeeper_connect: str, log_dir: str, **config: Any) -> None:
        super().__init__(brokers, zookeeper_connect, log_dir=log_dir, processes=True, **config)
        self.lab = lab

    def _new_broker(self, broker_id: int) -> Any:
        return BrokerProcess(
            self.broker_log_dir(broker_id), self._ports.get(broker_id, 0), broker_id=broker_id,
            zookeeper_connect=self._zk_connect, host=self.lab.address(node(broker_id)), **self._extra,
        )

    def _start_broker(self, broker_id: int) -> None:
        with self.lab.inside(node(broker_id)):
            super()._start_broker(broker_id)

    def _live(self) -> list[Any]:
        return [b for i, b in sorted(self._brokers.items())
                if b.running and not b.paused and self.lab.reaches(HOST, node(i))]


class _Probe:
    """The writes to isolated leaders, judged with the producers' values (never acknowledged
    is the expectation; acknowledged ones must not be lost either)."""

    name = "isolated-leader-probe"
    idempotent = False
    alive = False
    error = None

    def __init__(self) -> None:
        self.log = AckLog(self.name, PROBE_BASE)


class _StaleRead(Reader):
    """What the isolated leader served to a direct read (no thread: filled by the faults)."""

    kind = "stale-leader-read"

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class PartitionRun(FaultRun):
    """A :class:`FaultRun` in network namespaces with the faults of :data:`PARTITION_KINDS`.

    Args:
        log_dir: data, ZooKeeper's included, and ``report.txt``.
        seed: chooses the faults (when a count) and the partitions they aim at.
        faults: a count or the kinds in order.
        **kwargs: FaultRun's (producers, rate, readers).
    """

    fault_kinds = PARTITION_KINDS

    def __init__(self, log_dir: str | Path, seed: int, faults: int | Sequence[str], **kwargs: Any) -> None:
        super().__init__("", log_dir, seed, faults, **kwargs)
        self.lab = NetworkLab(["zk"] + [node(b) for b in range(BROKERS)])
        self.probe = _Probe()
        self.stale = _StaleRead(0, None, TOPIC, PARTITIONS)

    def run(self) -> Any:
        with self.lab:
            zk = LocalZooKeeper(data_dir=Path(self.log_dir) / "zk", extra_config={"clientPortAddress": "0.0.0.0"})
            with self.lab.inside("zk"):
                zk.start()
            try:
                self.zookeeper_connect = f"{self.lab.address('zk')}:{zk.port}"
                return super().run()
            finally:
                zk.close()

    def _make_cluster(self, chroot: str) -> EmbeddedCluster:
        return NetnsCluster(self.lab, BROKERS, chroot, str(self.log_dir / "cluster"), **CLUSTER_SETTINGS)

    def _run_producers_and_faults(self) -> None:
        super()._run_producers_and_faults()
        self.readers.insert(0, self.stale)  # the base replaced the list with the threads' readers
        self.workers.append(self.probe)  # type: ignore[arg-type]
        r = self.result
        r.sent[self.probe.name] = self.probe.log.sent
        r.acked[self.probe.name] = len(self.probe.log.acked)
        r.failed[self.probe.name] = len(self.probe.log.failed)

    # -- probes -------------------------------------------------------------------------------
    def _followers_moved(self, victim: int, partitions: Sequence[int]) -> None:
        """Wait until every other broker names a leader other than ``victim`` for ``partitions``
        in its own Metadata answer (it has heard from the controller). Before that a follower may
        still fetch from the old leader, which then acknowledges an acks=-1 write with the
        follower's copy (Kafka's window too; the write is kept): not what the probe is for."""
        def moved() -> bool:
            for b in range(BROKERS):
                if b == victim:
                    continue
                info = self.cluster.broker(b)
                ch = BrokerChannel(info.host, info.port, "faults-probe")
                try:
                    resp = ch.request(REQUESTS[(ApiKey.METADATA, 1)].build(topics=[TOPIC]), PROBE_TIMEOUT_S)
                except HmbError:
                    return False
                finally:
                    ch.close()
                if any(part.partition in partitions and part.leader in (-1, victim) for t in resp.topics for part in t.partitions):
                    return False
            return True

        _wait(f"brokers other than {victim} naming new leaders for {list(partitions)}", moved, RECOVERY_TIMEOUT_S)

    def _probe_isolated(self, broker_id: int, partition: int, why: str) -> None:
        """Write (acks=-1) to ``broker_id`` directly and read ``partition`` from it: it must
        acknowledge nothing; what it serves is judged with the readers."""
        b = self.cluster.broker(broker_id)
        ch = BrokerChannel(b.host, b.port, "faults-probe")
        acked = 0
        offset = 0
        try:
            for _ in range(PROBE_WRITES):
                value = self.probe.log.next_value()
                ts = int(time.time() * 1000)
                batch = records.encode_records(2, records.NONE, [(None, encode_value(value), ts)], timestamp_ms=ts)
                req = REQUESTS[(ApiKey.PRODUCE, 3)].build(transactional_id=None, acks=-1, timeout_ms=1000, topics=[(TOPIC, [(partition, batch)])])
                try:
                    p = ch.request(req, PROBE_TIMEOUT_S).topics[0].partitions[0]
                except HmbError as e:  # no answer (the connection is closed): not acknowledged
                    self.probe.log.on_error(value, e)
                    ch.close()
                    ch = BrokerChannel(b.host, b.port, "faults-probe")
                    continue
                if p.error_code == ErrorCode.NONE:
                    acked += 1
                    self.probe.log.on_ack(value, partition, p.base_offset)
                else:
                    self.probe.log.on_error(value, ErrorCode(p.error_code).name)
            offset = 0
            while True:
                req = REQUESTS[(ApiKey.FETCH, 4)].build(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                                                        topics=[(TOPIC, [(partition, offset, 1 << 22)])])
                try:
                    p = ch.request(req, PROBE_TIMEOUT_S).topics[0].partitions[0]
                except HmbError:
                    break
                got = [(x.offset, x.value) for x in records.decode_records(p.records) if x.offset >= offset] if p.error_code == 0 and p.records else []
                if not got:
                    break
                for o, v in got:
                    self.stale._record(partition, o, v)
                offset = got[-1][0] + 1
        finally:
            ch.close()
        self._event(f"probe of broker {broker_id} ({why}): {acked}/{PROBE_WRITES} writes acknowledged, read up to {TOPIC}-{partition}@{offset}")
        if acked:
            self.result.problems.append(f"broker {broker_id} acknowledged {acked} acks=-1 write(s) to {TOPIC}-{partition} {why}")

    def _leader(self) -> tuple[int, int, list[int]]:
        """A partition chosen by the seed, its leader and the partitions that leader leads. (Every
        fault starts here: the probe's and the stale reader's marks for the table too.)"""
        f = self.result.faults[-1]
        f.sent_before[self.probe.name] = self.probe.log.sent
        f.read_before[self.stale.name] = len(self.stale.seen)
        p = self.rng.randrange(PARTITIONS)
        leader = self._state(p).leader
        return p, leader, self._led_by(leader)

    def _offsets_leader(self) -> int:
        """The leader of the (single) offsets partition: every group's coordinator."""
        try:
            return paths.decode_partition_state(self.zk.get(paths.partition_state_path("__consumer_offsets", 0))[0]).leader
        except Exception:  # not created yet (no group so far)
            return -1

    def _others(self, broker_id: int) -> list[str]:
        return [node(b) for b in range(BROKERS) if b != broker_id]

    # -- faults -------------------------------------------------------------------------------
    def _leader_zk_cut(self, f: FaultRecord) -> None:
        p, victim, moved = self._leader()
        f.detail = f"partition {p}: broker {victim}"
        self._event(f"cut broker {victim} (leader of {moved}; __consumer_offsets-0 led by broker {self._offsets_leader()}) from ZooKeeper")
        self.lab.cut(node(victim), "zk")
        try:
            self._deregistered(victim)
            self._leaderships_moved(victim, moved)
            self._followers_moved(victim, moved)
            self._event(f"broker {victim}'s session expired, {moved} have new leaders")
            self._probe_isolated(victim, p, "after its ZooKeeper session expired")
        finally:
            self.lab.heal()
        self._event("healed")

    def _leader_followers_cut(self, f: FaultRecord) -> None:
        p, victim, moved = self._leader()
        f.detail = f"partition {p}: broker {victim}"
        self._event(f"cut broker {victim} (leader of {moved}) from the other brokers")
        self.lab.isolate(node(victim), self._others(victim))
        try:
            _wait(f"the ISR of {TOPIC}-{p} to shrink to broker {victim} or lose it", lambda: len(self._state(p).isr) == 1, RECOVERY_TIMEOUT_S)
            state = self._state(p)
            self._event(f"{TOPIC}-{p}: leader {state.leader}, ISR {list(state.isr)}")
            if state.leader == victim:
                self._probe_isolated(victim, p, "with an ISR of itself (min.insync.replicas 2)")
        finally:
            self.lab.heal()
        self._event("healed")

    def _asymmetric_leader_out(self, f: FaultRecord) -> None:
        p, victim, moved = self._leader()
        f.detail = f"partition {p}: broker {victim}"
        self._event(f"drop what broker {victim} (leader of {moved}) sends to ZooKeeper and the other brokers")
        self.lab.isolate(node(victim), ["zk"] + self._others(victim), one_way=True)
        try:
            self._deregistered(victim)
            self._leaderships_moved(victim, moved)
            self._probe_isolated(victim, p, "while it could not send to ZooKeeper or its followers")
        finally:
            self.lab.heal()
        self._event("healed")

    def _flapping_leader(self, f: FaultRecord) -> None:
        p, victim, moved = self._leader()
        f.detail = f"partition {p}: broker {victim}, 3 x {0.4 * self.session_s:.1f} s"
        for i in range(3):
            self._event(f"cut broker {victim} from ZooKeeper and the brokers ({i + 1}/3)")
            self.lab.isolate(node(victim), ["zk"] + self._others(victim))
            time.sleep(0.4 * self.session_s)  # the fault's fixed length: less than the session
            self.lab.heal()
            self._await_progress(f"after heal {i + 1}")
