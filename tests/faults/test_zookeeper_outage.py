"""ZooKeeper goes away under brokers.

- A broker process (``hmb broker --zookeeper``) whose ZooKeeper was SIGKILLed is told to stop
  (SIGTERM): it tries its controlled shutdown within Kafka's bounded retries
  (``controlled.shutdown.max.retries`` x ``controlled.shutdown.retry.backoff.ms``, Kafka's
  defaults), says in its log what it skipped, stops locally and exits 0 within that bound.
  After ZooKeeper and the broker restart, every acknowledged (acks=-1) message and the
  committed offset are there. (Before: it ignored SIGTERM and SIGINT, waiting on ZooKeeper.)
- A 3-broker cluster (replication 3, min ISR 2) with an acks=-1 producer running loses its
  ZooKeeper for less, and for more, than the session timeout: the brokers keep running, and
  once ZooKeeper is back every acknowledged value is on every replica's leader and readable.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import BrokerProcess, EmbeddedCluster
from hmbclient.broker.channel import BrokerChannel
from hmbclient.config import BrokerConfig
from hmbclient.errors import ErrorCode, HmbError
from hmbclient.protocol import records
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS
from hmbclient.testing import LocalZooKeeper

TOPIC = "zk-outage"
GROUP = "zk-outage-group"


def _req(api: int, version: int, **fields: Any) -> Any:
    return REQUESTS[(api, version)].build(**fields)


def _produce(ch: BrokerChannel, values: list[bytes], acks: int = -1, timeout_s: float = 10.0) -> int:
    ts = int(time.time() * 1000)
    batch = records.encode_records(2, records.NONE, [(None, v, ts) for v in values], timestamp_ms=ts)
    resp = ch.request(_req(ApiKey.PRODUCE, 3, transactional_id=None, acks=acks, timeout_ms=5000, topics=[(TOPIC, [(0, batch)])]), timeout_s)
    return int(resp.topics[0].partitions[0].error_code)


def _read_all(ch: BrokerChannel, topic: str = TOPIC) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        resp = ch.request(_req(ApiKey.FETCH, 4, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                               topics=[(topic, [(0, offset, 1 << 22)])]), 10.0)
        p = resp.topics[0].partitions[0]
        assert p.error_code == ErrorCode.NONE, p
        got = [(r.offset, r.value) for r in records.decode_records(p.records)] if p.records else []
        got = [(o, v) for o, v in got if o >= offset]
        if not got:
            return out
        out += [v for _, v in got]
        offset = got[-1][0] + 1


def _committed(ch: BrokerChannel) -> int:
    resp = ch.request(_req(ApiKey.OFFSET_FETCH, 1, group_id=GROUP, topics=[(TOPIC, [0])]), 10.0)
    return int(resp.topics[0].partitions[0].offset)


def _until_ok(send: Any, what: str, timeout_s: float = 30.0) -> Any:
    """Repeat ``send()`` until it answers (a restarted broker's first requests may find no leader yet)."""
    last: Any = None

    def ok() -> bool:
        nonlocal last
        try:
            last = send()
        except HmbError as e:
            last = e
            return False
        if isinstance(last, bool):
            return last
        return not isinstance(last, int) or last == ErrorCode.NONE

    wait_until(ok, timeout_s, what, diag=lambda: last)
    return last


@pytest.mark.timeout(180)
def test_broker_stops_on_sigterm_when_zookeeper_is_gone_and_loses_nothing(tmp_path: Path) -> None:
    defaults = BrokerConfig()
    # The bound: Kafka's retries x backoff (the attempts themselves are skipped at once while
    # ZooKeeper is unreachable) plus a local shutdown.
    bound_s = defaults.controlled_shutdown_max_retries * defaults.controlled_shutdown_retry_backoff_ms / 1000.0 + 10.0
    with LocalZooKeeper(data_dir=tmp_path / "zk") as zk:
        bp = BrokerProcess(str(tmp_path / "broker"), zookeeper_connect=zk.connect, zookeeper_session_timeout_ms=6000, num_partitions=1)
        bp.start()
        acked: list[bytes] = []
        try:
            ch = bp.channel("zk-outage-test")
            _until_ok(lambda: _produce(ch, [b"first"]), "the topic's first produce")
            acked.append(b"first")
            for i in range(20):
                values = [f"v{i}-{j}".encode() for j in range(50)]
                assert _produce(ch, values) == ErrorCode.NONE
                acked += values
            commit = _until_ok(lambda: ch.request(_req(ApiKey.OFFSET_COMMIT, 2, group_id=GROUP, generation_id=-1, member_id="", retention_time_ms=-1,
                                                        topics=[(TOPIC, [(0, len(acked), "m")])]), 10.0).topics[0].partitions[0].error_code,
                               "the offset commit")
            assert commit == ErrorCode.NONE
            ch.close()

            zk.kill()
            assert bp.proc is not None
            started = time.monotonic()
            bp.proc.send_signal(signal.SIGTERM)
            try:
                code = bp.proc.wait(timeout=bound_s + 20.0)
            except Exception:
                bp.kill()
                pytest.fail("the broker ignored SIGTERM with ZooKeeper gone; last output:\n" + "\n".join(list(bp.output)[-20:]))
            took = time.monotonic() - started
            out = "\n".join(bp.output)
            assert code == 0, out[-3000:]
            assert took <= bound_s, f"stopped after {took:.1f} s, bound {bound_s:.1f} s"
            assert "controlled shutdown of broker 0 skipped after 4 attempts" in out, out[-3000:]
            assert "ZooKeeper unreachable at shutdown" in out, out[-3000:]

            zk.start()
            # The old ZooKeeper session holds /brokers/ids/0 until ZooKeeper expires it (one
            # session timeout after it is back): until then a start is refused, saying so.
            def restarted() -> bool:
                try:
                    bp.start()
                    return True
                except HmbError as e:
                    assert "already registered" in str(e), str(e)[-2000:]
                    return False

            wait_until(restarted, 60, "the broker's restart once its old session expired")
            ch = bp.channel("zk-outage-test-after")
            try:
                got = _until_ok(lambda: _read_all(ch), "reading back after the restart")
                assert got == acked, f"{len(acked)} acknowledged, {len(got)} read back"
                assert _until_ok(lambda: _committed(ch) == len(acked), "the committed offset", timeout_s=10.0)
            finally:
                ch.close()
        finally:
            bp.terminate()


class _Producer(threading.Thread):
    """acks=-1 writes of numbered values, one per request, recording what was acknowledged."""

    def __init__(self, bootstrap_brokers: list[tuple[str, int]]) -> None:
        super().__init__(name="zk-outage-producer", daemon=True)
        self.brokers = bootstrap_brokers
        self.stop = threading.Event()
        self.acked: list[bytes] = []
        self.errors: dict[int, int] = {}
        self.sent = 0

    def run(self) -> None:
        i = 0
        ch: BrokerChannel | None = None
        while not self.stop.is_set():
            host, port = self.brokers[i % len(self.brokers)]
            value = f"n{self.sent}".encode()
            try:
                ch = ch or BrokerChannel(host, port, "zk-outage-producer")
                code = _produce(ch, [value], timeout_s=5.0)
            except HmbError:
                code = -1
            self.sent += 1
            if code == ErrorCode.NONE:
                self.acked.append(value)
            else:
                self.errors[code] = self.errors.get(code, 0) + 1
                if ch is not None:
                    ch.close()
                ch = None
                i += 1  # another broker may lead now
                self.stop.wait(0.05)
        if ch is not None:
            ch.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("outage", ["shorter", "longer"])
def test_cluster_survives_zookeeper_outage_without_losing_acknowledged_writes(tmp_path: Path, outage: str, fault_summary: Any) -> None:
    session_ms = 6000
    with LocalZooKeeper(data_dir=tmp_path / "zk") as zk:
        with EmbeddedCluster(3, zk.connect, num_partitions=1, replication_factor=3, min_insync_replicas=2,
                             zookeeper_session_timeout_ms=session_ms) as cluster:
            cluster.create_topic(TOPIC, 1, 3)
            cluster.await_isr(TOPIC, size=3)
            producer = _Producer([(b.host, b.port) for b in cluster.brokers])
            producer.start()
            try:
                wait_until(lambda: len(producer.acked) >= 20, 30, "the producer's first acknowledgements")
                zk.kill()
                down = session_ms / 1000.0 * (0.4 if outage == "shorter" else 2.0)
                before = len(producer.acked)
                time.sleep(down)  # the outage itself (a fixed, bounded fault duration, not a wait for a state)
                during = len(producer.acked) - before
                zk.start()
                cluster.await_brokers(60)
                cluster.await_isr(TOPIC, 60, size=3)
                mark = len(producer.acked)
                wait_until(lambda: len(producer.acked) >= mark + 20, 60, "acknowledgements after ZooKeeper returned",
                           diag=lambda: (len(producer.acked), producer.errors))
            finally:
                producer.stop.set()
                producer.join(20)
            leader = cluster.leader(TOPIC, 0)
            assert leader is not None
            b = cluster.broker(leader)
            ch = BrokerChannel(b.host, b.port, "zk-outage-check")
            try:
                got = _until_ok(lambda: _read_all(ch), "reading the topic back")
            finally:
                ch.close()
            lost = [v for v in producer.acked if v not in set(got)]
            fault_summary(f"zookeeper outage {outage} than the session ({down:.1f} s): sent {producer.sent}, acked {len(producer.acked)} "
                          f"(during the outage {during}), lost {len(lost)}, errors {producer.errors}")
            assert not lost, f"{len(lost)} acknowledged values lost, e.g. {lost[:5]}"
