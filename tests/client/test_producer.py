"""The Producer's pipeline against real brokers: retries, leader moves, restarts, hooks, queue
bounds, event handlers, bad input."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from encoders import JsonEncoder, StringEncoder
from hmbclient import CallbackHandler, Producer, ProducerData
from hmbclient.broker import EmbeddedBroker, EmbeddedCluster
from hmbclient.errors import (
    ConfigError,
    KafkaConnectionError,
    MessageSizeTooLargeError,
    ProducerClosedError,
    QueueFullError,
)
from partitioners import Murmur2Partitioner

from .conftest import BrokerHandle, closed_port, create_topic, read_all, read_partition, unique

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def restartable(tmp_path: Any) -> Iterator[EmbeddedBroker]:
    b = EmbeddedBroker(port=0, log_dir=str(tmp_path / "log")).start()
    try:
        yield b
    finally:
        b.close()


def _dedupe_in_order(values: list[bytes]) -> list[bytes]:
    seen: set[bytes] = set()
    out = []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


# -- config and bad input ----------------------------------------------------------------------


def test_unknown_config_keys_are_errors() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        Producer(metadata_broker_list="127.0.0.1:9", bogus_setting=1)
    with pytest.raises(ConfigError):
        Producer.from_properties({"metadata.broker.list": "127.0.0.1:9", "queue.tme": 5})
    from hmbclient import SimpleConsumer

    with pytest.raises(ConfigError):
        SimpleConsumer("127.0.0.1", 9, no_such_thing=3)


def test_properties_with_legacy_aliases(broker: BrokerHandle) -> None:
    topic = unique("props")
    p = Producer.from_properties(
        {
            "metadata.broker.list": broker.bootstrap,
            "producer.type": "async",
            "queue.time": "20",
            "batch.size": "7",
            "compression.codec": "gzip",
            "request.required.acks": "-1",
        }
    )
    with p:
        assert p.config.queue_buffering_max_ms == 20 and p.config.batch_num_messages == 7
        futs = p.send(ProducerData(topic, None, [b"x%d" % i for i in range(30)]))
        assert [f.result(20).offset for f in futs] == list(range(30))


def test_oversized_message_is_refused_before_sending(broker: BrokerHandle) -> None:
    with Producer(metadata_broker_list=broker.bootstrap, message_max_bytes=1000) as p:
        with pytest.raises(MessageSizeTooLargeError, match="1000"):
            p.send(ProducerData(unique("big"), None, [b"x" * 1001]))


def test_broker_side_message_too_large_fails_the_future(tmp_path: Any) -> None:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), message_max_bytes=2000) as b:
        topic = unique("bigb")
        for ptype in ("sync", "async"):
            with Producer(metadata_broker_list=b.bootstrap, producer_type=ptype, message_max_bytes=100_000) as p:
                if ptype == "sync":
                    with pytest.raises(MessageSizeTooLargeError):
                        p.send(ProducerData(topic, None, [b"y" * 5000]))
                else:
                    f = p.send(ProducerData(topic, None, [b"y" * 5000]))[0]
                    with pytest.raises(MessageSizeTooLargeError):
                        f.result(20)
                    ok = p.send(ProducerData(topic, None, [b"small"]))[0]
                    assert ok.result(20).offset == 0


def test_values_must_be_bytes_without_a_serializer(broker: BrokerHandle) -> None:
    with Producer(metadata_broker_list=broker.bootstrap) as p:
        with pytest.raises(TypeError, match="serializer"):
            p.send(ProducerData(unique("str"), None, ["text"]))
        with pytest.raises(TypeError, match="send"):
            p.send("not producer data")  # type: ignore[arg-type]


def test_serializers_and_partitioner(broker: BrokerHandle) -> None:
    topic = unique("ser")
    create_topic(broker.bootstrap, topic, 4)
    with Producer(
        metadata_broker_list=broker.bootstrap,
        serializer=JsonEncoder(),
        key_serializer=StringEncoder(),
        partitioner=Murmur2Partitioner(),
        producer_type="async",
    ) as p:
        futs = p.send([ProducerData(topic, "user-1", [{"n": 1}, {"n": 2}]), ProducerData(topic, "user-2", [{"n": 3}])])
        mds = [f.result(20) for f in futs]
    part1 = Murmur2Partitioner().partition(b"user-1", 4)
    assert mds[0].partition == mds[1].partition == part1
    got = read_all(broker.host, broker.port, topic, 4)
    assert [(r.key, r.value) for r in got[part1]][:2] == [(b"user-1", b'{"n":1}'), (b"user-1", b'{"n":2}')]


def test_send_after_close_is_an_error(broker: BrokerHandle) -> None:
    p = Producer(metadata_broker_list=broker.bootstrap, producer_type="async")
    p.close()
    p.close()  # idempotent
    with pytest.raises(ProducerClosedError):
        p.send(ProducerData("t", None, [b"x"]))


class _OutOfRange:
    def partition(self, key: Any, num_partitions: int) -> int:
        return num_partitions


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_raw_and_converted_sends_meet_the_same_checks(broker: BrokerHandle, ptype: str) -> None:
    """A ProducerData that is already a list of bytes skips conversion; one that needs it (a
    tuple of messages, a bytearray key) does not. Both must meet the same checks."""
    topic = unique("checks")
    create_topic(broker.bootstrap, topic, 2)

    def raw(values: list[Any], key: bytes | None = None) -> ProducerData:
        return ProducerData(topic, key, list(values))

    def converted(values: list[Any], key: bytes | None = None) -> ProducerData:
        return ProducerData(topic, None if key is None else bytearray(key), tuple(values))

    common: dict[str, Any] = dict(metadata_broker_list=broker.bootstrap, producer_type=ptype)
    with Producer(message_max_bytes=1000, **common) as p, Producer(partitioner=_OutOfRange(), **common) as bad:
        for shape in (raw, converted):
            with pytest.raises(MessageSizeTooLargeError, match="1000"):
                p.send(shape([b"ok", b"x" * 990], key=b"0123456789a"))
            with pytest.raises(TypeError, match="serializer"):
                p.send(shape([b"ok", "text"]))
            with pytest.raises(ValueError, match="partitioner returned 2"):
                bad.send(shape([b"x"]))
            futs = p.send(shape([b"a", None], key=b"k"))
            assert [f.result(20).partition for f in futs] == [futs[0].result().partition] * 2
    # Nothing of the refused sends went out: each shape delivered exactly its two messages.
    got = read_all(broker.host, broker.port, topic, 2)
    assert sorted(r.value or b"" for rs in got.values() for r in rs) == [b"", b"", b"a", b"a"]
    for shape in (raw, converted):
        with pytest.raises(ProducerClosedError):
            p.send(shape([b"x"]))


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_data_larger_than_a_batch_goes_in_consecutive_batches_in_order(broker: BrokerHandle, ptype: str) -> None:
    topic = unique("chunks")
    create_topic(broker.bootstrap, topic, 1)
    values = [b"%04d" % i + b"." * 300 for i in range(40)]
    with Producer(metadata_broker_list=broker.bootstrap, producer_type=ptype, batch_max_bytes=2000) as p:
        futs = p.send([ProducerData(topic, None, values[:30]), ProducerData(topic, None, values[30:])])
        offsets = [f.result(20).offset for f in futs]
        batches = {id(b) for b in futs.batches()}
    assert offsets == list(range(40))
    assert len(batches) >= 40 * 312 // 2000  # split: no batch over batch_max_bytes
    assert [r.value for r in read_partition(broker.host, broker.port, topic, 0)] == values


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_acks(broker: BrokerHandle, acks: int) -> None:
    topic = unique(f"acks{acks}")
    create_topic(broker.bootstrap, topic, 1)
    with Producer(metadata_broker_list=broker.bootstrap, producer_type="async", request_required_acks=acks) as p:
        futs = [p.send(ProducerData(topic, None, [b"a%d" % i]))[0] for i in range(50)]
        p.flush()
        mds = [f.result(10) for f in futs]
        if acks == 0:
            assert all(m.offset is None for m in mds)
        else:
            assert [m.offset for m in mds] == list(range(50))
        # acks=0: written to the socket, not acknowledged; wait for the broker to append
        # (with the connection still open).
        def stored() -> list[bytes | None]:
            return [r.value for r in read_partition(broker.host, broker.port, topic, 0)]

        wait_until(lambda: len(stored()) >= 50, 10, "the 50 messages appended")
        vals = stored()
    assert vals == [b"a%d" % i for i in range(50)]


# -- pipeline hooks ----------------------------------------------------------------------------


class Recorder(CallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def _rec(self, *e: Any) -> None:
        with self.lock:
            self.events.append(e)

    def after_enqueue(self, data: ProducerData, added: bool) -> None:
        self._rec("after_enqueue", data.messages[0], added)

    def after_batching(self, batch: Any) -> None:
        self._rec("after_batching", batch.count)

    def before_send(self, batches: Any, node_id: int) -> None:
        self._rec("before_send", sum(b.count for b in batches))

    def on_delivery(self, batch: Any) -> None:
        self._rec("on_delivery", batch.count, batch.base_offset)

    def on_error(self, batch: Any, error: BaseException) -> None:
        self._rec("on_error", batch.count, type(error).__name__)

    def close(self) -> None:
        self._rec("close", None)


def test_callback_hooks_at_each_stage(broker: BrokerHandle) -> None:
    topic = unique("hooks")
    create_topic(broker.bootstrap, topic, 1)
    rec = Recorder()
    with Producer(
        metadata_broker_list=broker.bootstrap,
        producer_type="async",
        callback_handler=rec,
        batch_num_messages=10,
        queue_buffering_max_ms=50,
    ) as p:
        for i in range(25):
            p.send(ProducerData(topic, None, [b"%d" % i]))
        p.flush()
    kinds = [e[0] for e in rec.events]
    assert kinds.count("after_enqueue") == 25
    assert sum(e[1] for e in rec.events if e[0] == "before_send") == 25
    delivered = [e for e in rec.events if e[0] == "on_delivery"]
    assert sum(e[1] for e in delivered) == 25
    assert sorted(e[2] for e in delivered)[0] == 0
    assert kinds[-1] == "close" and "on_error" not in kinds
    # stage order for the first message: enqueue -> send -> delivery
    assert kinds.index("after_enqueue") < kinds.index("before_send") < kinds.index("on_delivery")


def test_on_error_when_retries_run_out(restartable: EmbeddedBroker) -> None:
    topic = unique("err")
    rec = Recorder()
    with Producer(
        metadata_broker_list=restartable.bootstrap,
        producer_type="async",
        callback_handler=rec,
        message_send_max_retries=2,
        retry_backoff_ms=20,
        request_timeout_ms=1000,
    ) as p:
        p.send(ProducerData(topic, None, [b"first"]))[0].result(10)
        restartable.stop()
        futs = p.send(ProducerData(topic, None, [b"lost-1", b"lost-2"]))
        with pytest.raises(KafkaConnectionError):
            futs[1].result(20)
        assert futs[0].exception(1) is not None
    assert ("on_error", 2, "KafkaConnectionError") in rec.events


class Collecting:
    def __init__(self) -> None:
        self.got: list[ProducerData] = []
        self.closed = False

    def handle(self, events: list[ProducerData]) -> None:
        self.got.extend(events)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_event_handler_replaces_serialize_and_send(ptype: str) -> None:
    h = Collecting()
    # No broker at all: the handler is the whole pipeline.
    with Producer(metadata_broker_list=f"127.0.0.1:{closed_port()}", producer_type=ptype, event_handler=h) as p:
        futs = p.send([ProducerData("t", "k", ["a", "b"]), ProducerData("u", None, ["c"])])
        p.flush()
        assert [f.result(5).topic for f in futs] == ["t", "t", "u"]
    assert [(pd.topic, pd.key, pd.messages) for pd in h.got] == [("t", "k", ["a", "b"]), ("u", None, ["c"])]
    assert h.closed


# -- queue bounds ------------------------------------------------------------------------------


def test_queue_full_drop_wait_and_block(restartable: EmbeddedBroker) -> None:
    topic = unique("qfull")
    common = dict(
        metadata_broker_list=restartable.bootstrap,
        producer_type="async",
        queue_buffering_max_messages=20,
        batch_num_messages=10,
        message_send_max_retries=1000,
        retry_backoff_ms=50,
        request_timeout_ms=2000,
    )
    p0 = Producer(queue_enqueue_timeout_ms=0, **common)
    p1 = Producer(queue_enqueue_timeout_ms=300, **common)
    pb = Producer(queue_enqueue_timeout_ms=-1, **common)
    try:
        for p in (p0, p1, pb):
            p.send(ProducerData(topic, None, [b"warm"]))[0].result(10)  # metadata known
        restartable.stop()
        pending = []
        for p in (p0, p1, pb):
            pending += [p.send(ProducerData(topic, None, [b"q%d" % i])) for i in range(20)]
        with pytest.raises(QueueFullError, match="queue_enqueue_timeout_ms=0"):
            p0.send(ProducerData(topic, None, [b"dropped"]))
        t0 = time.monotonic()
        with pytest.raises(QueueFullError):
            p1.send(ProducerData(topic, None, [b"dropped"]))
        assert 0.25 < time.monotonic() - t0 < 3
        done = threading.Event()
        blocked_futs: list[Any] = []

        def blocked() -> None:
            blocked_futs.append(pb.send(ProducerData(topic, None, [b"waited"])))
            done.set()

        threading.Thread(target=blocked, daemon=True).start()
        assert not done.wait(0.5)  # blocks while the broker is down
        restartable.start()
        assert done.wait(30)
        for f in [*pending, *blocked_futs]:
            assert f[0].result(30).offset is not None
    finally:
        for p in (p0, p1, pb):
            p.close()
    values = [r.value for r in read_partition(restartable.host, restartable.port, topic, 0)]
    assert values.count(b"waited") == 1 and b"dropped" not in values


# -- failures mid-stream -----------------------------------------------------------------------


def test_broker_restart_mid_stream_async_delivers_everything_acked(restartable: EmbeddedBroker) -> None:
    topic = unique("restart")
    n = 4000
    p = Producer(
        metadata_broker_list=restartable.bootstrap,
        producer_type="async",
        message_send_max_retries=50,
        retry_backoff_ms=50,
        request_timeout_ms=3000,
        batch_num_messages=50,
    )
    futs = []
    try:
        futs.append(p.send(ProducerData(topic, None, [b"m00000"]))[0])
        futs[0].result(10)

        # The timeline under test, so fixed times: part of the stream goes out, then a
        # 0.7 s outage in the middle of it.
        def bounce() -> None:
            time.sleep(0.15)
            restartable.stop()
            time.sleep(0.7)
            restartable.start()

        t = threading.Thread(target=bounce)
        t.start()
        for i in range(1, n):
            futs.append(p.send(ProducerData(topic, None, [b"m%05d" % i]))[0])
            if i % 200 == 0:
                time.sleep(0.02)  # spread the stream over the outage
        t.join()
        p.flush(60)
        mds = [f.result(1) for f in futs]
    finally:
        p.close()
    values = [r.value for r in read_partition(restartable.host, restartable.port, topic, 0)]
    # Every acknowledged message is in the log at the offset it was acknowledged with...
    for i, md in enumerate(mds):
        assert values[md.offset] == b"m%05d" % i
    # ...in send order (a retried request may repeat, never reorder).
    assert _dedupe_in_order(values) == [b"m%05d" % i for i in range(n)]


def test_sync_producer_rides_out_a_restart(restartable: EmbeddedBroker) -> None:
    topic = unique("syncre")
    with Producer(metadata_broker_list=restartable.bootstrap, message_send_max_retries=30, retry_backoff_ms=50) as p:
        p.send(ProducerData(topic, None, [b"a"]))
        restartable.stop()
        threading.Timer(0.5, restartable.start).start()
        fs = p.send(ProducerData(topic, None, [b"b"]))
        assert fs[0].result().offset == 1
    assert [r.value for r in read_partition(restartable.host, restartable.port, topic, 0)] == [b"a", b"b"]


@pytest.fixture(scope="module")
def cluster(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    chroot = f"{zookeeper.connect}/{unique('producer-cluster')}"
    with EmbeddedCluster(brokers=3, num_partitions=3, zookeeper_connect=chroot, log_dir=str(tmp_path_factory.mktemp("cl"))) as c:
        yield c


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_leader_move_is_followed(cluster: EmbeddedCluster, ptype: str) -> None:
    topic = unique(f"move-{ptype}")
    cluster.create_topic(topic, 3)
    # acks=-1: what was acknowledged is on every in-sync replica, so the new leader has it.
    with Producer(metadata_broker_list=cluster.bootstrap, producer_type=ptype, retry_backoff_ms=20, batch_num_messages=20, request_required_acks=-1) as p:
        first = [p.send(ProducerData(topic, b"k", [b"a%d" % i]))[0] for i in range(100)]
        part = first[0].result(10).partition
        for f in first:
            f.result(10)
        old = cluster.leader(topic, part)
        assert old is not None
        new = (old + 1) % 3
        cluster.move_leader(topic, part, new)
        second = [p.send(ProducerData(topic, b"k", [b"b%d" % i]))[0] for i in range(100)]
        p.flush()
        offsets = [f.result(20).offset for f in first + second]
    assert offsets == list(range(200))
    leader = cluster.broker(new)
    values = [r.value for r in read_partition(leader.host, leader.port, topic, part)]
    assert values == [b"a%d" % i for i in range(100)] + [b"b%d" % i for i in range(100)]


@pytest.mark.parametrize("acks", [1, -1])
def test_concurrent_sync_sends_share_one_engine(broker: BrokerHandle, acks: int) -> None:
    """Sync sends from several threads at once: one caller drives the engine at a time and
    completes whatever else is in flight; every send returns complete, each thread's values in
    its partition in its order (acks=-1: idempotent, one sequence per partition for all)."""
    topic = unique("syncthreads")
    create_topic(broker.bootstrap, topic, 2)
    errors: list[BaseException] = []
    with Producer(metadata_broker_list=broker.bootstrap, request_required_acks=acks) as p:

        def work(t: int) -> None:
            try:
                for i in range(30):
                    fs = p.send(ProducerData(topic, b"thread-%d" % t, [b"%d:%02d:%d" % (t, i, j) for j in range(5)]))
                    assert all(f.done() for f in fs)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
    assert not errors, errors[0]
    got = read_all(broker.host, broker.port, topic, 2)
    values = [r.value for rs in got.values() for r in rs]
    assert len(values) == len(set(values)) == 4 * 30 * 5
    for rs in got.values():
        per_thread: dict[bytes, list[bytes]] = {}
        for r in rs:
            per_thread.setdefault(r.value.split(b":")[0], []).append(r.value)
        for t, vs in per_thread.items():
            assert vs == sorted(vs), f"thread {t!r} out of order"
