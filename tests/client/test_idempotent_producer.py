"""The idempotent producer (``enable.idempotence``) against real brokers, sync and async.

* Config: Kafka 3+'s default (on with acks=-1), and the explicit settings it refuses.
* Sequences: an idempotent producer gets a producer id and numbers each partition's records
  from 0, through the one send engine, sync or async.
* Lost answers: through ``hmbclient.testing.FaultProxy``, which closes the connection instead
  of passing on every 3rd Produce answer (the broker stored the batch, the producer never
  heard and retries it), every value is stored exactly once and in send order per partition,
  read back straight from the broker. The same run without idempotence stores duplicates: the
  proxy really loses answers, so the check can fail.
* Epoch bump (KIP-360): the embedded broker forgets the producer (producer.id.expiration.ms);
  the next batch meets UNKNOWN_PRODUCER_ID; the producer takes a new identity and carries on
  without a restart, and says so in a ProducerEvent.

Brokers: Tansu (which de-duplicates) and the embedded broker (which does since issue 21).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient import Producer, ProducerData
from hmbclient.broker import EmbeddedBroker
from hmbclient.config import ProducerConfig
from hmbclient.errors import ConfigError, UnresolvedSequenceError
from hmbclient.producer.idempotence import (
    BATCHES_UNRESOLVED,
    PRODUCER_ID_ASSIGNED,
    PRODUCER_ID_RENEWED,
    ProducerEvent,
)
from hmbclient.protocol.api.base import ApiKey
from hmbclient.testing import FaultProxy, drop_every
from hmbclient.testing.faultproxy import Answer

from .conftest import BrokerHandle, create_topic, read_all, read_partition, unique

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
N = 1200


# -- config ------------------------------------------------------------------------------------


def test_idempotence_defaults_follow_acks() -> None:
    base = {"metadata_broker_list": "127.0.0.1:9"}
    assert ProducerConfig(**base, request_required_acks=-1).idempotence is True
    assert ProducerConfig(**base, request_required_acks=1).idempotence is False
    assert ProducerConfig(**base, request_required_acks=0).idempotence is False
    assert ProducerConfig(**base, request_required_acks=-1, enable_idempotence=False).idempotence is False
    # Unset, settings that cannot have it turn it off quietly (Kafka 3.2+); explicit, they fail.
    assert ProducerConfig(**base, request_required_acks=-1, message_send_max_retries=0).idempotence is False
    assert ProducerConfig(**base, request_required_acks=-1, api_version="0.10").idempotence is False
    props = ProducerConfig.from_properties({"metadata.broker.list": "127.0.0.1:9", "acks": "all", "enable.idempotence": "true"})
    assert props.idempotence is True and props.enable_idempotence is True


@pytest.mark.parametrize(
    "settings, needs",
    [
        ({"request_required_acks": 1}, "request.required.acks"),
        ({"request_required_acks": 0}, "request.required.acks"),
        ({"request_required_acks": -1, "message_send_max_retries": 0}, "message.send.max.retries"),
        ({"request_required_acks": -1, "max_in_flight_requests_per_connection": 6}, "max.in.flight"),
        ({"request_required_acks": -1, "api_version": "0.8"}, "0.11"),
    ],
)
def test_explicit_idempotence_refuses_settings_that_break_it(settings: dict[str, Any], needs: str) -> None:
    with pytest.raises(ConfigError, match=needs):
        ProducerConfig(metadata_broker_list="127.0.0.1:9", enable_idempotence=True, **settings)


# -- sequences against a real broker -----------------------------------------------------------


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_sends_carry_a_producer_id_and_per_partition_sequences(broker: BrokerHandle, ptype: str) -> None:
    topic = unique(f"idseq-{ptype}")
    create_topic(broker.bootstrap, topic, 2)
    events: list[Any] = []
    with Producer(metadata_broker_list=broker.bootstrap, producer_type=ptype, request_required_acks=-1, batch_num_messages=20) as p:
        p.add_listener(events.append)
        assert p.idempotent
        futures = []
        for i in range(6):
            futures += p.send(ProducerData(topic, b"k%d" % (i % 2), [b"v%d-%d" % (i, j) for j in range(25)]))
        p.flush()
        metas = [f.result(20) for f in futures]
        identity = p.producer_identity
        engine_idem = p._engine.idem
        assert engine_idem is not None
        per_partition = {part: sum(1 for m in metas if m.partition == part) for part in (0, 1)}
        # Each partition's records are numbered from 0 (a sequence per record).
        assert {part: engine_idem.next_sequence(topic, part) for part in (0, 1)} == per_partition
    assert identity is not None and identity[0] >= 0 and identity[1] >= 0
    assert [e.kind for e in events if isinstance(e, ProducerEvent)] == [PRODUCER_ID_ASSIGNED]
    got = read_all(broker.host, broker.port, topic, 2)
    for part in (0, 1):
        sent = [v for f, v in zip(futures, _values(6, 25), strict=True) if f.result().partition == part]
        assert [r.value for r in got[part]] == sent


def _values(sends: int, per: int) -> list[bytes]:
    return [b"v%d-%d" % (i, j) for i in range(sends) for j in range(per)]


# -- lost answers through the dropping proxy ---------------------------------------------------


@pytest.fixture
def proxied(broker: BrokerHandle) -> Iterator[tuple[BrokerHandle, FaultProxy]]:
    with FaultProxy((broker.host, broker.port), drop=drop_every(3)) as proxy:
        yield broker, proxy


def _send_through(proxy: FaultProxy, topic: str, ptype: str, idempotence: bool) -> dict[int, list[bytes]]:
    """N keyed values over PARTITIONS partitions through the proxy; returns what was sent to
    each partition, in send order (every future must succeed)."""
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    with Producer(
        metadata_broker_list=proxy.bootstrap,
        producer_type=ptype,
        request_required_acks=-1,
        enable_idempotence=idempotence,
        message_send_max_retries=50,
        retry_backoff_ms=20,
        batch_num_messages=40,
        batch_max_bytes=1_500,  # about one batch a request: many answers to lose
        queue_buffering_max_ms=2,
        request_timeout_ms=5_000,
    ) as p:
        futures: list[tuple[bytes, Any]] = []
        if ptype == "sync":
            for start in range(0, N, 40):
                key = b"key-%d" % (start // 40 % 7)
                values = [b"%s:%05d" % (key, i) for i in range(start, start + 40)]
                futures += zip(values, p.send(ProducerData(topic, key, values)), strict=True)
        else:
            for i in range(N):
                key = b"key-%d" % (i % 7)
                value = b"%s:%05d" % (key, i)
                futures.append((value, p.send(ProducerData(topic, key, [value]))[0]))
            p.flush()
        for value, f in futures:
            sent[f.result(30).partition].append(value)
    return sent


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_lost_answers_store_every_value_once_in_send_order(proxied: tuple[BrokerHandle, FaultProxy], ptype: str) -> None:
    broker, proxy = proxied
    topic = unique(f"idproxy-{ptype}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = _send_through(proxy, topic, ptype, idempotence=True)
    assert proxy.stats()["dropped"] >= 5, proxy.stats()  # the answers really were lost
    assert proxy.failure is None
    stored = {p: [r.value for r in read_partition(broker.host, broker.port, topic, p)] for p in range(PARTITIONS)}
    assert sum(map(len, sent.values())) == N
    for p in range(PARTITIONS):
        assert stored[p] == sent[p], f"partition {p}: {len(stored[p])} stored, {len(sent[p])} sent"


def test_without_idempotence_the_same_run_stores_duplicates(proxied: tuple[BrokerHandle, FaultProxy]) -> None:
    """The control: the proxy's lost answers make retries that a plain producer stores twice."""
    broker, proxy = proxied
    topic = unique("idcontrol")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = _send_through(proxy, topic, "async", idempotence=False)
    stored = [r.value for p in range(PARTITIONS) for r in read_partition(broker.host, broker.port, topic, p)]
    assert proxy.stats()["dropped"] >= 5
    assert len(stored) > sum(map(len, sent.values())), "no duplicates: the proxy lost no answers"
    assert set(stored) == {v for vs in sent.values() for v in vs}


# -- epoch bump after the broker forgot the producer (KIP-360) ---------------------------------


@pytest.fixture
def forgetful(tmp_path: Any) -> Iterator[EmbeddedBroker]:
    """An embedded broker that forgets an idle producer after 300 ms."""
    with EmbeddedBroker(
        port=0, log_dir=str(tmp_path / "log"), producer_id_expiration_ms=300, log_retention_check_interval_ms=50
    ) as b:
        yield b


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_unknown_producer_id_bumps_and_carries_on(forgetful: EmbeddedBroker, ptype: str) -> None:
    topic = unique(f"idbump-{ptype}")
    create_topic(forgetful.bootstrap, topic, 1)
    events: list[Any] = []
    with Producer(metadata_broker_list=forgetful.bootstrap, producer_type=ptype, request_required_acks=-1, retry_backoff_ms=20) as p:
        p.add_listener(events.append)
        first = p.send(ProducerData(topic, None, [b"a%d" % i for i in range(10)]))
        p.flush()
        assert [f.result(20).offset for f in first] == list(range(10))
        before = p.producer_identity
        log = forgetful.broker.logs.get(topic, 0)  # type: ignore[union-attr]
        assert log is not None
        wait_until(lambda: not log.producer_state.producers, 20, "the broker forgot the producer")
        second = p.send(ProducerData(topic, None, [b"b%d" % i for i in range(10)]))
        p.flush()
        assert [f.result(20).offset for f in second] == list(range(10, 20))
        after = p.producer_identity
        third = p.send(ProducerData(topic, None, [b"c"]))  # and it carries on
        assert third[0].result(20).offset == 20
    assert before is not None and after is not None and after != before
    kinds = [(e.kind, e.reason) for e in events if isinstance(e, ProducerEvent)]
    assert kinds[0][0] == PRODUCER_ID_ASSIGNED
    assert [k for k, _ in kinds[1:]] == [PRODUCER_ID_RENEWED], kinds
    assert "UnknownProducerId" in kinds[1][1]
    values = [r.value for r in read_partition(forgetful.host, forgetful.port, topic, 0)]
    assert values == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)] + [b"c"]


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_a_batch_it_cannot_vouch_for_fails_with_a_clear_error(forgetful: EmbeddedBroker, ptype: str) -> None:
    """A batch whose answer was lost is still waiting for its retry when the producer must take
    a new identity (the broker forgot it): sent again under the new identity, a copy the broker
    holds could not be recognised, so that batch — and only it — fails with
    UnresolvedSequenceError, the event says so, and the producer carries on."""
    topic = unique(f"idunres-{ptype}")
    create_topic(forgetful.bootstrap, topic, 1)
    events: list[Any] = []
    with FaultProxy((forgetful.host, forgetful.port)) as proxy, Producer(
        metadata_broker_list=proxy.bootstrap, producer_type=ptype, request_required_acks=-1, retry_backoff_ms=20
    ) as p:
        p.add_listener(events.append)
        first = p.send(ProducerData(topic, None, [b"a%d" % i for i in range(10)]))
        p.flush()
        assert first[-1].result(20).offset == 9
        log = forgetful.broker.logs.get(topic, 0)  # type: ignore[union-attr]
        assert log is not None
        wait_until(lambda: not log.producer_state.producers, 20, "the broker forgot the producer")
        # The next Produce answer (UNKNOWN_PRODUCER_ID for the batch below) is lost.
        armed = [True]

        def lose_next_produce_answer(a: Answer) -> bool:
            if a.api_key == ApiKey.PRODUCE and armed[0]:
                armed[0] = False
                return True
            return False

        proxy.set_rule(lose_next_produce_answer)
        lost: Any
        if ptype == "sync":
            with pytest.raises(UnresolvedSequenceError) as caught:
                p.send(ProducerData(topic, None, [b"b%d" % i for i in range(10)]))
            lost = caught.value
        else:
            fs = p.send(ProducerData(topic, None, [b"b%d" % i for i in range(10)]))
            with pytest.raises(UnresolvedSequenceError):
                fs[0].result(20)
            lost = fs[0].exception()
        assert "stored once or not at all" in str(lost)
        after = p.send(ProducerData(topic, None, [b"c"]))
        assert after[0].result(20).offset == 10
    kinds = [e.kind for e in events if isinstance(e, ProducerEvent)]
    assert kinds == [PRODUCER_ID_ASSIGNED, PRODUCER_ID_RENEWED, BATCHES_UNRESOLVED], kinds
    unresolved = [e for e in events if isinstance(e, ProducerEvent) and e.kind == BATCHES_UNRESOLVED]
    assert unresolved[0].messages == 10
    values = [r.value for r in read_partition(forgetful.host, forgetful.port, topic, 0)]
    assert values == [b"a%d" % i for i in range(10)] + [b"c"]


@pytest.mark.parametrize("ptype", ["sync", "async"])
def test_a_bump_takes_a_new_identity_and_restarts_the_sequences(broker: BrokerHandle, ptype: str) -> None:
    """The bump itself, asked for directly. Tansu has InitProducerId v3, so the producer first
    asks for the next epoch of its id (KIP-360); Tansu refuses a bump (UNKNOWN_SERVER_ERROR) and
    the producer then asks for a new id. The embedded broker speaks v0-1: a new id at once.
    Either way the sequences restart at 0 and every value is stored once, in order. (The
    same-id bump itself waits for a broker that grants it: Apache Kafka 2.5+.)"""
    topic = unique(f"idbump2-{ptype}")
    create_topic(broker.bootstrap, topic, 1)
    events: list[Any] = []
    with Producer(metadata_broker_list=broker.bootstrap, producer_type=ptype, request_required_acks=-1) as p:
        p.add_listener(events.append)
        p.send(ProducerData(topic, None, [b"a%d" % i for i in range(5)]))
        p.flush()
        before = p.producer_identity
        idem = p._engine.idem
        assert before is not None and idem is not None and idem.next_sequence(topic, 0) == 5
        idem.ask_bump("asked by the test")
        fs = p.send(ProducerData(topic, None, [b"b%d" % i for i in range(5)]))
        p.flush()
        assert [f.result(20).offset for f in fs] == list(range(5, 10))
        after = p.producer_identity
        assert idem.next_sequence(topic, 0) == 5  # restarted at 0 under the new identity
    assert after is not None and after != before
    renewed = [e for e in events if isinstance(e, ProducerEvent) and e.kind == PRODUCER_ID_RENEWED]
    assert [(e.producer_id, e.epoch, e.reason) for e in renewed] == [(after[0], after[1], "asked by the test")]
    values = [r.value for r in read_partition(broker.host, broker.port, topic, 0)]
    assert values == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]
