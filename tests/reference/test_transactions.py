"""hmbclient's transactions (issue 23) against Apache Kafka 4.x, Kafka's own Java consumer the
oracle where one is needed, and the same cases against our embedded broker (whose transaction
coordinator landed with issue 23 too): every test runs on both.

* Producer: commits visible to ``read_committed`` readers, aborts never; sync and async.
* Zombie fencing: a second producer with the same transactional.id fences the first, whose
  commit raises ProducerFencedError, and whose open transaction is aborted.
* send_offsets_to_transaction: the group's offsets move only when the transaction commits.
* read_committed consumers: SimpleConsumer and the ConsumerConnector (group.protocol=broker)
  skip aborted records, never hand out a control record, and stop at the last stable offset
  while a transaction is open (ListOffsets latest gives the LSO too); read_uncommitted readers
  see the open and the aborted data but no markers.
* A confluent-kafka (librdkafka) transactional producer's aborted data is filtered out by our
  read_committed consumer.
* The subscribe/poll Consumer (issue 24) on the same fetcher: read_committed leaves the aborted
  record out, read_uncommitted hands it out, and neither a marker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import Consumer, Producer, ProducerData, SimpleConsumer, admin
from hmbclient.broker import EmbeddedBroker
from hmbclient.consumer.offsets import KafkaOffsetStorage
from hmbclient.consumer.simple import LATEST_TIME, FetchRequest
from hmbclient.errors import ConsumerTimeoutError, ProducerFencedError
from hmbclient.net.client import NetClient

from .helpers import java_read_all, unique

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module", params=["kafka4", "hmb"])
def broker(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Apache Kafka 4 (the package's shared node), or an embedded broker of ours."""
    if request.param == "kafka4":
        yield request.getfixturevalue("kafka4")
        return
    with EmbeddedBroker(port=0, num_partitions=1) as ours:
        yield ours


def _txn_producer(bootstrap: str, tid: str, ptype: str = "sync", **extra: Any) -> Producer:
    p = Producer(metadata_broker_list=bootstrap, transactional_id=tid, request_required_acks=-1, producer_type=ptype, **extra)
    p.init_transactions(30)
    return p


def _simple(bootstrap: str, **settings: Any) -> SimpleConsumer:
    host, port = bootstrap.rsplit(":", 1)
    return SimpleConsumer(host, int(port), **settings)


def _latest(consumer: SimpleConsumer, topic: str, partition: int) -> int:
    return consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0]


def _settled(rc: SimpleConsumer, ru: SimpleConsumer, topic: str, partition: int) -> int:
    """The partition's end once no transaction is open in it: EndTxn is answered once the
    outcome is logged, and the coordinator writes the markers after that (the last stable
    offset reaches the high watermark then). Waits for it."""
    return wait_until(lambda: (end := _latest(rc, topic, partition)) == _latest(ru, topic, partition) and end,
                      15, f"the markers of {topic}-{partition}", lambda: (_latest(rc, topic, partition), _latest(ru, topic, partition)))


def _read(consumer: SimpleConsumer, topic: str, partition: int, until: int) -> tuple[list[bytes], int]:
    """Every value from offset 0 up to ``until`` (exclusive) or until a fetch brings nothing
    new; returns (values, next offset)."""
    out: list[bytes] = []
    offset = 0
    while offset < until:
        ms = consumer.fetch(FetchRequest(topic, partition, offset))
        nxt = ms.next_offset
        out += [bytes(m.message.value) for m in ms]
        if nxt == offset:
            break
        offset = nxt
    return out, offset


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_commit_visible_abort_invisible(broker, tmp_path, ptype):
    topic = unique(f"txn-{ptype}")
    admin.create_topic(broker.bootstrap, topic, 2, 1)
    p = _txn_producer(broker.bootstrap, unique("tid"), ptype)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    try:
        for n, commit in enumerate([True, False, True, False, True]):
            p.begin_transaction()
            assert p.transaction_state == "InTransaction"
            vals = [b"%s-%d-%d" % (b"c" if commit else b"a", n, i) for i in range(20)]
            for i, v in enumerate(vals):
                if ptype == "sync":
                    p.send(ProducerData(topic, b"k%d" % (i % 5), [v]))
                else:
                    p.produce(topic, v, key=b"k%d" % (i % 5))
            if commit:
                p.commit_transaction(30)
                committed += vals
            else:
                assert p.flush(30) == 0  # in the log, so that the abort has something to hide
                p.abort_transaction(30)
                aborted += vals
            assert p.transaction_state == "Ready"
    finally:
        p.close()
    props = tmp_path / "rc.properties"
    props.write_text("isolation.level=read_committed\n")
    seen = [r[4] for r in java_read_all(broker.bootstrap, topic, len(committed), properties=str(props))]
    assert sorted(seen) == sorted(committed)
    with _simple(broker.bootstrap, isolation_level="read_committed") as rc, _simple(broker.bootstrap) as ru:
        ours: list[bytes] = []
        every: list[bytes] = []
        for part in (0, 1):
            end = hw = _settled(rc, ru, topic, part)  # nothing open: the LSO reaches the high watermark
            vals, nxt = _read(rc, topic, part, end)
            assert nxt == end  # moved past the trailing marker
            ours += vals
            vals, nxt = _read(ru, topic, part, hw)
            assert nxt == hw
            every += vals
    assert sorted(ours) == sorted(committed)
    # read_uncommitted: the aborted data too, and never a control record (5 markers per partition)
    assert sorted(every) == sorted(committed + aborted)


def test_zombie_is_fenced(broker):
    topic, tid = unique("zombie"), unique("tid")
    admin.create_topic(broker.bootstrap, topic, 1, 1)
    old = _txn_producer(broker.bootstrap, tid)
    new = None
    try:
        old.begin_transaction()
        old.send(ProducerData(topic, None, [b"zombie"]))
        new = _txn_producer(broker.bootstrap, tid)  # fences `old`, aborts its transaction
        assert new.producer_identity is not None and old.producer_identity is not None
        assert new.producer_identity[0] == old.producer_identity[0]
        assert new.producer_identity[1] > old.producer_identity[1]
        with pytest.raises(ProducerFencedError):
            old.commit_transaction(30)
        assert old.transaction_state == "FatalError"
        with pytest.raises(ProducerFencedError):
            old.begin_transaction()
        with pytest.raises(ProducerFencedError, match="cannot send"):  # nothing is queued
            old.send(ProducerData(topic, None, [b"more"]))
        new.begin_transaction()
        new.send(ProducerData(topic, None, [b"successor"]))
        new.commit_transaction(30)
    finally:
        old.close()
        if new is not None:
            new.close()
    with _simple(broker.bootstrap, isolation_level="read_committed") as rc, _simple(broker.bootstrap) as ru:
        end = _settled(rc, ru, topic, 0)
        assert _read(rc, topic, 0, end)[0] == [b"successor"]


def test_send_offsets_committed_only_on_commit(broker):
    topic, group = unique("eos-offsets"), unique("group")
    admin.create_topic(broker.bootstrap, topic, 2, 1)
    p = _txn_producer(broker.bootstrap, unique("tid"))
    host, port = broker.bootstrap.rsplit(":", 1)
    client = NetClient([(host, int(port))], name="offsets-check")
    store = KafkaOffsetStorage(client, group)
    tps = [(topic, 0), (topic, 1)]

    class GroupMetadata:  # what Java/confluent hand over: an object carrying the group id
        group_id = group

    try:
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"x"]))
        p.send_offsets_to_transaction({(topic, 0): 3, (topic, 1): (4, "meta")}, group)
        assert store.fetch(tps) == {(topic, 0): None, (topic, 1): None}  # pending, not committed
        p.abort_transaction(30)
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"y"]))
        p.send_offsets_to_transaction({(topic, 0): 7}, GroupMetadata())
        assert store.fetch(tps) == {(topic, 0): None, (topic, 1): None}
        p.commit_transaction(30)
        # the markers reach __consumer_offsets right after EndTxn is answered
        wait_until(lambda: store.fetch(tps) == {(topic, 0): 7, (topic, 1): None}, 15, "the committed offset", lambda: store.fetch(tps))
    finally:
        p.close()
        client.close()


class _Member:
    """Our ConsumerConnector (group.protocol=broker), iterating in a thread."""

    def __init__(self, bootstrap: str, topic: str, isolation: str) -> None:
        self.values: list[bytes] = []
        self.connector = Consumer.create({
            "bootstrap.servers": bootstrap, "group.id": unique("g"), "group.protocol": "broker",
            "auto.offset.reset": "smallest", "consumer.timeout.ms": 100, "isolation.level": isolation,
            "fetch.wait.max.ms": 50})
        self.stream = self.connector.create_message_streams({topic: 1})[topic][0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for mam in self.stream:
                    self.values.append(bytes(mam.message))
            except ConsumerTimeoutError:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        self.connector.shutdown()


def test_read_committed_stops_at_the_last_stable_offset(broker):
    topic = unique("lso")
    admin.create_topic(broker.bootstrap, topic, 1, 1)
    p = _txn_producer(broker.bootstrap, unique("tid"))
    plain = Producer(metadata_broker_list=broker.bootstrap, request_required_acks=-1)
    rc_member = _Member(broker.bootstrap, topic, "read_committed")
    ru_member = _Member(broker.bootstrap, topic, "read_uncommitted")
    try:
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"a1", b"a2"]))
        p.commit_transaction(30)
        p.begin_transaction()
        p.send(ProducerData(topic, None, [b"open"]))  # offset 3 (2 is the commit marker)
        plain.send(ProducerData(topic, None, [b"after"]))  # not transactional, behind the open one
        with _simple(broker.bootstrap, isolation_level="read_committed") as rc, _simple(broker.bootstrap) as ru:
            # once the first transaction's marker (offset 2) is written, the LSO is the open
            # transaction's first offset
            wait_until(lambda: _latest(rc, topic, 0) == 3, 15, "the LSO at the open transaction", lambda: _latest(rc, topic, 0))
            assert (hw := _latest(ru, topic, 0)) == 5
            assert _read(rc, topic, 0, hw) == ([b"a1", b"a2"], 3)  # stops at the LSO
            assert _read(ru, topic, 0, hw) == ([b"a1", b"a2", b"open", b"after"], 5)
        wait_until(lambda: ru_member.values == [b"a1", b"a2", b"open", b"after"], 30, "read_uncommitted group member",
                   lambda: ru_member.values)
        wait_until(lambda: rc_member.values == [b"a1", b"a2"], 30, "read_committed group member", lambda: rc_member.values)
        assert rc_member.values == [b"a1", b"a2"]  # nothing past the LSO, even after the other saw it all
        p.commit_transaction(30)
        wait_until(lambda: rc_member.values == [b"a1", b"a2", b"open", b"after"], 30, "the commit reaching the member",
                   lambda: rc_member.values)
    finally:
        rc_member.stop()
        ru_member.stop()
        p.close()
        plain.close()


def test_confluent_transactional_producer_aborted_data_filtered(broker):
    import confluent_kafka  # a peer the project installs (make peers): missing fails, never skips
    topic = unique("librdkafka-txn")
    admin.create_topic(broker.bootstrap, topic, 1, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("tid")})
    p.init_transactions(30)
    delivered: list[Any] = []
    for n, commit in enumerate([True, False, True]):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, b"%s-%d-%d" % (b"c" if commit else b"a", n, i), on_delivery=lambda err, msg: delivered.append(err))
        if commit:
            p.commit_transaction(30)
        else:
            assert p.flush(30) == 0  # in the log before the abort marker
            p.abort_transaction(30)
    assert p.flush(10) == 0 and delivered == [None] * 30
    del p  # librdkafka's threads stop with the handle, before kafka4 does
    committed = [b"c-%d-%d" % (n, i) for n in (0, 2) for i in range(10)]
    with _simple(broker.bootstrap, isolation_level="read_committed") as rc, _simple(broker.bootstrap) as ru:
        end = _settled(rc, ru, topic, 0)
        assert end == 33  # 30 records and 3 markers
        assert _read(rc, topic, 0, end) == (committed, end)
        every = _read(ru, topic, 0, end)[0]
        assert len(every) == 30 and set(committed) < set(every)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_poll_consumer_isolation(broker, isolation):
    topic = unique("poll-txn")
    admin.create_topic(broker.bootstrap, topic, 1, 1)
    p = _txn_producer(broker.bootstrap, unique("tid"))
    try:
        for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
            p.begin_transaction()
            p.send(ProducerData(topic, None, values))
            if commit:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
    finally:
        p.close()
    expected = [b"c1", b"c2", b"c3"] if isolation == "read_committed" else [b"c1", b"c2", b"a1", b"c3"]
    got: list[bytes] = []
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest", "isolation.level": isolation}) as c:
        c.assign([(topic, 0)])
        wait_until(lambda: got.extend(r.value for r in c.poll(0.2)) or len(got) >= len(expected), 30,
                   f"{isolation} poll consumer", lambda: got)
        assert c.poll(0.3) == []  # nothing more: markers are never handed out
    assert got == expected
