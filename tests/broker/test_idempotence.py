"""Idempotent produce on the embedded broker, with hand-built Produce requests.

What is judged: a retried batch is answered with its original offset and stored once; bad input
(a sequence gap, an epoch going back, a producer id never issued, a huge sequence) gets Kafka's
error and stores nothing; the state survives a clean restart, a kill -9 and a leader change;
producer ids never repeat across restarts or brokers. The decision itself (``check_batch``) is
tested as the pure function it is.
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from kazoo.client import KazooClient

from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.broker.log.config import LogConfig
from hmbclient.broker.log.log import Log
from hmbclient.broker.log.producer_state import (
    BatchHeader,
    BatchMetadata,
    ProducerStateEntry,
    Verdict,
    check_batch,
    last_sequence,
    producer_batches,
)
from hmbclient.broker.process import BrokerProcess
from hmbclient.broker.producer_ids import PRODUCER_ID_BLOCK_PATH, decode_block
from hmbclient.errors import BrokerError, ErrorCode
from hmbclient.protocol import records
from hmbclient.protocol.api import InitProducerIdRequest, ProduceRequest

from .conftest import RawClient, create_topic, fetch, wait_until

E = ErrorCode


def idem_batch(values: list[bytes], pid: int, epoch: int, seq: int, ts: int | None = None) -> bytes:
    """One RecordBatch v2 with producer fields set (the CRC recomputed, as a producer writes it)."""
    ts = ts if ts is not None else int(time.time() * 1000)
    buf = bytearray(records.encode_records(2, records.NONE, [(None, v, ts) for v in values], timestamp_ms=ts))
    struct.pack_into(">qhi", buf, 43, pid, epoch, seq)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def produce(c: RawClient, topic: str, buf: bytes, acks: int = -1, partition: int = 0) -> Any:
    req = ProduceRequest[7].build(transactional_id=None, acks=acks, timeout_ms=10_000, topics=[(topic, [(partition, buf)])])
    return c.request(req).topics[0].partitions[0]


def init_pid(c: RawClient) -> tuple[int, int]:
    r = c.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60_000))
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def values_of(c: RawClient, topic: str, partition: int = 0) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        p = fetch(c, topic, partition, offset)
        assert p.error_code == 0, p
        recs = [r for r in records.decode_records(bytes(p.records)) if r.offset >= offset]
        if not recs:
            return out
        out.extend(r.value for r in recs)
        offset = recs[-1].offset + 1


def ready(c: RawClient, topic: str) -> None:
    create_topic(c, topic)
    wait_until(lambda: fetch(c, topic, 0, 0).error_code == 0, what=f"{topic} ready")


# -- the pure decision ----------------------------------------------------------------------------
def _hdr(pid: int = 7, epoch: int = 0, seq: int = 0, n: int = 1) -> BatchHeader:
    return BatchHeader(pid, epoch, seq, last_sequence(seq, n - 1), 0, n - 1, 1000)


def test_check_batch_cases() -> None:
    entry = ProducerStateEntry(7, 2, (BatchMetadata(0, 4, 100, 104, 1), BatchMetadata(5, 9, 105, 109, 1)), 1)
    d = check_batch(entry, _hdr(epoch=2, seq=0, n=5))  # Case A
    assert d.verdict is Verdict.DUPLICATE and d.duplicate == entry.batches[0]
    assert check_batch(entry, _hdr(epoch=1, seq=10)).error_code == E.INVALID_PRODUCER_EPOCH  # Case B
    assert check_batch(None, _hdr(seq=3)).error_code == E.UNKNOWN_PRODUCER_ID  # Case C
    assert check_batch(None, _hdr(seq=0)).verdict is Verdict.APPEND
    assert check_batch(entry, _hdr(epoch=3, seq=10)).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER  # Case D
    assert check_batch(entry, _hdr(epoch=3, seq=0)).verdict is Verdict.APPEND
    assert check_batch(entry, _hdr(epoch=2, seq=10)).verdict is Verdict.APPEND  # Case E
    assert check_batch(entry, _hdr(epoch=2, seq=11)).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check_batch(entry, _hdr(epoch=2, seq=2**31 - 100)).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    # a range overlapping a kept batch without equalling it is not a duplicate
    assert check_batch(entry, _hdr(epoch=2, seq=0, n=3)).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    # sequences wrap
    top = ProducerStateEntry(7, 0, (BatchMetadata(2**31 - 3, 2**31 - 1, 0, 2, 1),), 1)
    assert check_batch(top, _hdr(seq=0)).verdict is Verdict.APPEND
    assert _hdr(seq=2**31 - 2, n=4).last_sequence == 1


# -- over the wire ---------------------------------------------------------------------------------
def test_retry_gets_the_original_offset_and_is_stored_once(client: RawClient) -> None:
    topic = f"idem-{uuid.uuid4().hex[:6]}"
    ready(client, topic)
    pid, epoch = init_pid(client)
    offsets = []
    for seq in range(6):
        b = idem_batch([b"v%d" % seq], pid, epoch, seq)
        r = produce(client, topic, b)
        assert r.error_code == 0
        offsets.append(r.base_offset)
        again = produce(client, topic, b)  # the retry of a lost answer
        assert (again.error_code, again.base_offset) == (0, r.base_offset)
    # the last five batches are remembered; every retry among them is answered again
    for seq in range(1, 6):
        r = produce(client, topic, idem_batch([b"v%d" % seq], pid, epoch, seq))
        assert (r.error_code, r.base_offset) == (0, offsets[seq])
    # the sixth-newest is out of the window: out of order, not stored again
    assert produce(client, topic, idem_batch([b"v0"], pid, epoch, 0)).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert values_of(client, topic) == [b"v%d" % i for i in range(6)]


@pytest.mark.parametrize("case", ["gap", "epoch_back", "never_issued", "huge_sequence", "new_epoch_not_zero"])
def test_bad_input_gets_the_kafka_error_and_stores_nothing(client: RawClient, case: str) -> None:
    topic = f"idem-bad-{case}-{uuid.uuid4().hex[:6]}"
    ready(client, topic)
    pid, _ = init_pid(client)
    assert produce(client, topic, idem_batch([b"a", b"b"], pid, 1, 0)).error_code == 0  # epoch 1, seq 0..1
    bad, code = {
        "gap": (idem_batch([b"x"], pid, 1, 5), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
        "epoch_back": (idem_batch([b"x"], pid, 0, 2), E.INVALID_PRODUCER_EPOCH),
        "never_issued": (idem_batch([b"x"], 2**62 + 17, 0, 3), E.UNKNOWN_PRODUCER_ID),
        "huge_sequence": (idem_batch([b"x"], pid, 1, 2**31 - 2), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
        "new_epoch_not_zero": (idem_batch([b"x"], pid, 2, 7), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
    }[case]
    r = produce(client, topic, bad)
    assert r.error_code == code and r.base_offset == -1
    assert values_of(client, topic) == [b"a", b"b"]
    # the refusal changed no state: the producer carries on where it was
    r = produce(client, topic, idem_batch([b"c"], pid, 1, 2))
    assert (r.error_code, r.base_offset) == (0, 2)
    assert values_of(client, topic) == [b"a", b"b", b"c"]


def test_a_refused_batch_refuses_its_whole_payload(client: RawClient) -> None:
    topic = f"idem-payload-{uuid.uuid4().hex[:6]}"
    ready(client, topic)
    pid, epoch = init_pid(client)
    payload = idem_batch([b"a"], pid, epoch, 0) + idem_batch([b"b"], pid, epoch, 2)  # gap in the second
    assert produce(client, topic, payload).error_code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert values_of(client, topic) == []
    ok = idem_batch([b"a"], pid, epoch, 0) + idem_batch([b"b"], pid, epoch, 1)
    assert produce(client, topic, ok).error_code == 0
    assert values_of(client, topic) == [b"a", b"b"]


def test_plain_producers_are_untouched(client: RawClient) -> None:
    topic = f"idem-plain-{uuid.uuid4().hex[:6]}"
    ready(client, topic)
    b = idem_batch([b"p"], -1, -1, -1)
    assert produce(client, topic, b).base_offset == 0
    assert produce(client, topic, b).base_offset == 1  # no producer id: no de-duplication
    assert values_of(client, topic) == [b"p", b"p"]


# -- durability ------------------------------------------------------------------------------------
def _retry_after(restart: Any, c_factory: Any, topic: str, *, batches: int = 12) -> None:
    c = c_factory()
    ready(c, topic)
    pid, epoch = init_pid(c)
    sent = []
    for seq in range(batches):
        b = idem_batch([b"r%d" % seq, b"s%d" % seq], pid, epoch, 2 * seq)
        r = produce(c, topic, b)
        assert r.error_code == 0
        sent.append((b, r.base_offset))
    c.close()
    restart()
    c = c_factory()
    wait_until(lambda: fetch(c, topic, 0, 0).error_code == 0, timeout_s=30, what="partition back after the restart")
    for b, off in sent[-5:]:
        r = produce(c, topic, b)
        assert (r.error_code, r.base_offset) == (0, off), r
    r = produce(c, topic, idem_batch([b"next"], pid, epoch, 2 * batches))
    assert r.error_code == 0
    assert values_of(c, topic) == [v for s in range(batches) for v in (b"r%d" % s, b"s%d" % s)] + [b"next"]
    pid2, _ = init_pid(c)
    assert pid2 > pid  # ids are never reissued after a restart
    c.close()


@pytest.mark.parametrize("segment_bytes", [1 << 30, 300])  # no roll at all / a roll (and snapshot) every few batches
def test_dedupe_survives_a_clean_restart(tmp_path: Path, segment_bytes: int) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path), num_partitions=1, log_segment_bytes=segment_bytes, log_index_interval_bytes=100) as b:
        def restart() -> None:
            b.stop()
            assert any(n.endswith(".snapshot") for n in os.listdir(tmp_path / "idem-clean-0"))
            b.start()

        _retry_after(restart, lambda: RawClient(b.host, b.port, timeout_s=30), "idem-clean")


@pytest.mark.parametrize("segment_bytes", [1 << 30, 300])
def test_dedupe_survives_kill_9(tmp_path: Path, segment_bytes: int) -> None:
    with BrokerProcess(str(tmp_path), num_partitions=1, log_segment_bytes=segment_bytes, log_index_interval_bytes=100) as bp:
        def restart() -> None:
            bp.kill()
            bp.start()

        _retry_after(restart, lambda: RawClient(bp.host, bp.port, timeout_s=30), "idem-kill")


def test_producer_ids_standalone_are_recorded_in_the_log_dir(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path)) as b, RawClient(b.host, b.port) as c:
        first = [init_pid(c)[0] for _ in range(3)]
    block = decode_block((tmp_path / "producer-id-block").read_bytes())
    assert first == [0, 1, 2] and (block.first, block.last) == (0, 999)
    with EmbeddedBroker(log_dir=str(tmp_path)) as b, RawClient(b.host, b.port) as c:
        assert init_pid(c)[0] == 1000  # the rest of the old block may be lost, never reissued


def test_producer_ids_unique_across_a_cluster_and_in_kafkas_znode(zookeeper: Any, tmp_path: Path) -> None:
    chroot = f"/idem-{uuid.uuid4().hex[:8]}"
    with EmbeddedCluster(brokers=3, zookeeper_connect=zookeeper.connect + chroot, log_dir=str(tmp_path), replication_factor=3) as cluster:
        ids = []
        for b in cluster.brokers:
            with RawClient("127.0.0.1", b.port) as c:
                ids += [init_pid(c)[0] for _ in range(3)]
        assert len(set(ids)) == 9
        zk = KazooClient(hosts=zookeeper.connect + chroot)
        zk.start()
        try:
            data, _ = zk.get(PRODUCER_ID_BLOCK_PATH)
        finally:
            zk.stop()
            zk.close()
        obj = json.loads(data)
        assert obj["version"] == 1 and set(obj) == {"version", "broker", "block_start", "block_end"}
        assert obj["block_end"] == "2999" and obj["block_start"] == "2000"


def test_dedupe_survives_a_leader_change(zookeeper: Any, tmp_path: Path) -> None:
    chroot = f"/idem-{uuid.uuid4().hex[:8]}"
    topic = "idem-failover"
    with EmbeddedCluster(brokers=3, zookeeper_connect=zookeeper.connect + chroot, log_dir=str(tmp_path), replication_factor=3) as cluster:
        cluster.create_topic(topic, 1, replication_factor=3)
        cluster.await_isr(topic)
        leader = cluster.leader(topic, 0)
        assert leader is not None
        lb = cluster.broker(leader)
        with RawClient("127.0.0.1", lb.port) as c:
            pid, epoch = init_pid(c)
            sent = []
            for seq in range(8):
                b = idem_batch([b"f%d" % seq], pid, epoch, seq)
                r = produce(c, topic, b, acks=-1)
                assert r.error_code == 0
                sent.append((b, r.base_offset))
        cluster.kill(leader)
        wait_until(lambda: cluster.leader(topic, 0) not in (None, leader), timeout_s=30, what="a new leader")
        new = cluster.broker(cluster.leader(topic, 0))
        with RawClient("127.0.0.1", new.port) as c:
            def answered(b: bytes) -> Any:
                r = produce(c, topic, b)
                return r if r.error_code == 0 else None

            for b, off in sent[-5:]:  # the first may meet a leader still settling: retried
                r = wait_until(lambda b=b: answered(b), timeout_s=20, what="retry answered")
                assert r.base_offset == off
            r = produce(c, topic, idem_batch([b"after"], pid, epoch, 8))
            assert r.error_code == 0
            assert values_of(c, topic) == [b"f%d" % i for i in range(8)] + [b"after"]


# -- the log alone: truncation and retention trim the state ----------------------------------------
def _log(tmp_path: Path, **cfg: Any) -> Log:
    return Log(str(tmp_path / "t-0"), LogConfig(**cfg))


@pytest.mark.parametrize("segment_bytes", [300, 1 << 30])  # snapshots at rolls / none yet
def test_truncation_forgets_the_batches_cut_away(tmp_path: Path, segment_bytes: int) -> None:
    lg = _log(tmp_path, segment_bytes=segment_bytes)
    batches = [idem_batch([b"t%d" % s], 5, 0, s) for s in range(10)]
    for b in batches:
        assert not lg.append(b, leader_epoch=0).duplicate
    assert lg.append(batches[9], leader_epoch=0).duplicate
    lg.truncate_to(7)  # a follower's KIP-101 truncation: offsets 7.. are gone
    assert lg.producer_state.producers[5].last_seq == 6
    info = lg.append(batches[7], leader_epoch=0)  # seq 7 is new again, not a duplicate
    assert not info.duplicate and info.first_offset == 7
    with pytest.raises(BrokerError) as ei:
        lg.append(batches[9], leader_epoch=0)  # seq 9 after 7: a gap now
    assert ei.value.errno == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    lg.truncate_fully_and_start_at(100)
    assert lg.producer_state.producers == {}
    assert not [n for n in os.listdir(lg.directory) if n.endswith(".snapshot")]
    lg.close()


def test_follower_builds_the_state_from_what_it_replicates(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "l-0"), LogConfig(segment_bytes=400))
    follower = Log(str(tmp_path / "f-0"), LogConfig(segment_bytes=400))
    for s in range(8):
        leader.append(idem_batch([b"x%d" % s], 9, 3, s), leader_epoch=1)
    data, _ = leader.read(0, 1 << 20)
    while data is not None:  # one segment per read: the follower rolls where the leader did
        follower.append_as_follower(data.read())
        data, _ = leader.read(follower.log_end_offset, 1 << 20)
    assert follower.log_end_offset == 8 and len(follower.segments) > 1
    assert follower.producer_state.producers == leader.producer_state.producers
    assert follower.append(idem_batch([b"x7"], 9, 3, 7), leader_epoch=2).duplicate
    leader.close()
    follower.close()


def test_retention_and_expiry_forget_producers(tmp_path: Path) -> None:
    lg = _log(tmp_path, segment_bytes=200, retention_bytes=1, producer_id_expiration_ms=1000)
    now = int(time.time() * 1000)
    lg.append(idem_batch([b"old"], 1, 0, 0, ts=now), leader_epoch=0)
    for s in range(6):
        lg.append(idem_batch([b"n%d" % s], 2, 0, s, ts=now), leader_epoch=0)
    lg.set_high_watermark(lg.log_end_offset)
    assert lg.apply_retention(now) > 0
    assert 1 not in lg.producer_state.producers and 2 in lg.producer_state.producers
    assert lg.remove_expired_producers(now + 999) == 0
    assert lg.remove_expired_producers(now + 1000) == 1
    assert lg.producer_state.producers == {}
    lg.close()


def test_producer_batches_reads_only_idempotent_v2(tmp_path: Path) -> None:
    buf = bytearray(idem_batch([b"a"], 3, 1, 4) + idem_batch([b"b"], -1, -1, -1))
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in producer_batches(buf)] == [(3, 1, 4)]


# -- ACL: InitProducerId needs IdempotentWrite on the cluster or Write on some topic ---------------
def test_init_producer_id_needs_idempotent_write_or_write_on_a_topic(tmp_path: Path) -> None:
    from hmbclient.broker.security.authorizer import Acl, FileAclStore
    from hmbclient.broker.security.credentials import FileCredentialStore, make_credential
    from hmbclient.protocol.api import ApiKey
    from hmbclient.protocol.api.base import REQUESTS

    creds = FileCredentialStore(str(tmp_path / "credentials.json"))
    for user in ("writer", "idem", "reader"):
        creds.put(user, {"SCRAM-SHA-256": make_credential("SCRAM-SHA-256", f"{user}-pw")})
    acls = FileAclStore(str(tmp_path / "acls.json"))
    acls.add([
        Acl.make("Topic", "w-", "User:writer", "Write", pattern_type="PREFIXED"),
        Acl.make("Cluster", "kafka-cluster", "User:idem", "IdempotentWrite"),
        Acl.make("Topic", "w-", "User:reader", "Read", pattern_type="PREFIXED"),
    ])
    with EmbeddedBroker(
        log_dir=str(tmp_path / "logs"),
        listeners=["SASL_PLAINTEXT://127.0.0.1:0"],
        sasl_credentials_file=creds.path,
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        authorizer_acls_file=acls.path,
    ) as b:
        codes = {}
        for user in ("writer", "idem", "reader"):
            with RawClient("127.0.0.1", b.port) as c:
                hs = c.request(REQUESTS[(ApiKey.SASL_HANDSHAKE, 1)].build(mechanism="PLAIN"))
                assert hs.error_code == 0
                auth = c.request(REQUESTS[(ApiKey.SASL_AUTHENTICATE, 1)].build(auth_bytes=f"\0{user}\0{user}-pw".encode()))
                assert auth.error_code == 0, auth
                r = c.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60_000))
                codes[user] = (r.error_code, r.producer_id >= 0)
    assert codes == {"writer": (0, True), "idem": (0, True), "reader": (E.CLUSTER_AUTHORIZATION_FAILED, False)}


def test_a_corrupt_snapshot_is_deleted_and_the_state_rebuilt_from_the_log(tmp_path: Path) -> None:
    lg = _log(tmp_path)
    sent = [idem_batch([b"c%d" % s], 4, 0, s) for s in range(6)]
    for b in sent:
        lg.append(b, leader_epoch=0)
    assert lg.close()
    snaps = [n for n in os.listdir(lg.directory) if n.endswith(".snapshot")]
    assert snaps == [f"{6:020d}.snapshot"]
    path = os.path.join(lg.directory, snaps[0])
    data = bytearray(Path(path).read_bytes())
    data[-1] ^= 0xFF  # a flipped bit: the CRC no longer matches
    Path(path).write_bytes(bytes(data))
    again = _log(tmp_path)  # an unclean start-up: rebuilt from the log
    assert not os.path.exists(path)
    assert again.producer_state.producers[4].last_seq == 5
    assert again.append(sent[5], leader_epoch=0).duplicate
    again.close()


def test_a_snapshot_past_the_log_end_is_dropped(tmp_path: Path) -> None:
    lg = _log(tmp_path)
    for s in range(4):
        lg.append(idem_batch([b"e%d" % s], 4, 0, s), leader_epoch=0)
    assert lg.close()
    # as if the log lost its tail after the snapshot was written (the snapshot says 4 batches)
    seg = os.path.join(lg.directory, f"{0:020d}.log")
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:
        f.truncate(size - len(idem_batch([b"e3"], 4, 0, 3)))
    again = _log(tmp_path)
    assert again.log_end_offset == 3
    assert not [n for n in os.listdir(again.directory) if n.endswith(".snapshot")]
    assert again.producer_state.producers[4].last_seq == 2  # from the log, not the stale snapshot
    assert not again.append(idem_batch([b"e3"], 4, 0, 3), leader_epoch=0).duplicate
    again.close()


def test_a_malformed_producer_id_block_file_refuses_init_producer_id(tmp_path: Path) -> None:
    (tmp_path / "producer-id-block").write_bytes(b"not json")
    with EmbeddedBroker(log_dir=str(tmp_path)) as b, RawClient(b.host, b.port) as c:
        r = c.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60_000))
        assert (r.error_code, r.producer_id) == (E.COORDINATOR_NOT_AVAILABLE, -1)
    assert (tmp_path / "producer-id-block").read_bytes() == b"not json"  # nothing guessed over it
