"""The pure quota module: KIP-55 precedence, the sampled windows, Kafka's throttle formula."""

from __future__ import annotations

from typing import Any

import pytest

from hmbclient.broker.quotas import (
    CONSUMER,
    DEFAULT,
    PRODUCER,
    QuotaConfigs,
    QuotaManager,
    parse_quota_config,
    resolve,
    throttle_time_ms,
    user_of,
)


def test_precedence_most_specific_first() -> None:
    levels = [
        ((None, DEFAULT), 8.0),
        ((None, "c"), 7.0),
        ((DEFAULT, None), 6.0),
        ((DEFAULT, DEFAULT), 5.0),
        ((DEFAULT, "c"), 4.0),
        (("u", None), 3.0),
        (("u", DEFAULT), 2.0),
        (("u", "c"), 1.0),
    ]
    cfg = QuotaConfigs(producer_default=9.0)
    assert resolve(cfg, PRODUCER, "u", "c") == (9.0, ("", "c"))
    # adding each more specific level makes it win
    for entity, bound in levels:
        cfg.entities[entity] = {PRODUCER: bound}
        got = resolve(cfg, PRODUCER, "u", "c")
        assert got is not None and got[0] == bound
    # the other kind is unlimited throughout
    assert resolve(cfg, CONSUMER, "u", "c") is None


def test_sensor_keys_share_or_split() -> None:
    cfg = QuotaConfigs({("u", None): {PRODUCER: 10.0}, (None, DEFAULT): {PRODUCER: 5.0}})
    # a user quota: one window for all its client ids
    assert resolve(cfg, PRODUCER, "u", "a") == (10.0, ("u", ""))
    assert resolve(cfg, PRODUCER, "u", "b") == (10.0, ("u", ""))
    # the client-id default: one window per client id
    assert resolve(cfg, PRODUCER, "v", "a") == (5.0, ("", "a"))
    assert resolve(cfg, PRODUCER, "v", "b") == (5.0, ("", "b"))


def test_throttle_formula_and_cap() -> None:
    assert throttle_time_ms(100, 100, 10_000, 11_000) == 0
    assert throttle_time_ms(150, 100, 10_000, 11_000) == 5_000
    assert throttle_time_ms(1_000, 100, 10_000, 11_000) == 11_000
    assert throttle_time_ms(1, 0, 10_000, 11_000) == 11_000


def test_manager_throttles_over_the_quota_only() -> None:
    m = QuotaManager(QuotaConfigs({(None, "slow"): {PRODUCER: 1000.0}}), num_samples=2, window_ms=1000)
    # 1 s window minimum: 1000 bytes at t=0 is exactly the quota
    assert m.record(PRODUCER, "u", "slow", 1000, 0) == 0
    # 500 more: 1500 B/s observed over 1000 ms -> (1500 - 1000) / 1000 * 1000 = 500 ms
    assert m.record(PRODUCER, "u", "slow", 500, 10) == 500
    assert m.rate(PRODUCER, "u", "slow", 10) == pytest.approx(1500.0)
    # an unquota'd client id is never throttled, whatever it sends
    assert m.record(PRODUCER, "u", "fast", 10**9, 10) == 0
    # the samples age out: two windows later the client is back within its quota
    assert m.record(PRODUCER, "u", "slow", 100, 3000) == 0
    # a quota change applies to the next request, keeping the window
    m.update(QuotaConfigs({(None, "slow"): {PRODUCER: 50.0}}))
    assert m.record(PRODUCER, "u", "slow", 100, 3010) > 0


def test_parse_quota_config_and_users() -> None:
    assert parse_quota_config({"producer_byte_rate": "1024", "consumer_byte_rate": "2048"}) == {PRODUCER: 1024.0, CONSUMER: 2048.0}
    for bad in ({"request_percentage": "5"}, {"producer_byte_rate": "x"}, {"producer_byte_rate": "-1"}):
        with pytest.raises(ValueError):
            parse_quota_config(bad)
    assert user_of("User:alice") == "alice"
    assert user_of(None) == "ANONYMOUS"


def test_store_entities_read_and_written_as_kafka_lays_them_out() -> None:
    from hmbclient.broker.controller.store import MemoryStore
    from hmbclient.broker.quota_configs import QuotaConfigSource, read_quota_configs, write_quota

    store = MemoryStore()
    # a user's SCRAM credentials live in the same /config/users/<user> node: kept, not read
    store.set_entity_config("users", "alice", {"SCRAM-SHA-256": "salt=..."})
    write_quota(store, "alice", None, {PRODUCER: "1024"})
    write_quota(store, "alice", DEFAULT, {CONSUMER: "2048"})
    write_quota(store, None, "a/b*c", {PRODUCER: "10"})  # sanitized into one znode name
    assert store.entity_config("users", "alice") == {"SCRAM-SHA-256": "salt=...", PRODUCER: "1024"}
    assert store.entity_names("clients") == ["a%2Fb%2Ac"]
    cfg = read_quota_configs(store)
    assert cfg.entities == {("alice", None): {PRODUCER: 1024.0}, ("alice", DEFAULT): {CONSUMER: 2048.0}, (None, "a/b*c"): {PRODUCER: 10.0}}
    with pytest.raises(ValueError):
        write_quota(store, None, "x", {"producer_byte_rate": "lots"})
    with pytest.raises(ValueError):
        write_quota(store, None, None, {PRODUCER: "1"})
    # another tool's bad value: that entity is left out, the rest applies
    store.set_entity_config("clients", "bad", {PRODUCER: "-5"})
    m = QuotaManager(QuotaConfigs(producer_default=7.0))
    src = QuotaConfigSource(store, m)
    src.start()
    assert (None, "bad") not in m.configs.entities and (None, "a/b*c") in m.configs.entities
    assert m.configs.producer_default == 7.0
    write_quota(store, None, "late", {PRODUCER: "5"})
    src.on_changes(["topics/t"])  # not a quota entity: nothing re-read
    assert (None, "late") not in m.configs.entities
    src.on_changes(["clients/late"])
    assert m.configs.entities[(None, "late")] == {PRODUCER: 5.0}


def test_kip219_mutes_new_versions_and_holds_old_answers(tmp_path: Any) -> None:
    """Standalone (no ZooKeeper): the static ``quota.producer.default``. 300 KB against
    100 KB/s over a 1 s minimum window: throttle (300 - 100) / 100 x 1000 ms, capped at the
    2 x 1 s window = 2000 ms. Produce v2 is answered 2 s late; v7 at once, and the next
    request on that connection waits out the mute."""
    import time

    from hmbclient.broker import EmbeddedBroker
    from hmbclient.protocol.api import MetadataRequest, ProduceRequest

    from .conftest import RawClient, create_topic, encode

    def produce(c: RawClient, buf: bytes, version: int) -> Any:
        return c.request(ProduceRequest[version].build(transactional_id=None, acks=1, timeout_ms=5000, topics=[("t", [(0, buf)])]))

    value = b"v" * 1000
    with EmbeddedBroker(port=0, log_dir=str(tmp_path), num_partitions=1, quota_producer_default=100_000, quota_window_num=2) as b:
        with RawClient(b.host, b.port, client_id="old") as old, RawClient(b.host, b.port, client_id="new") as new:
            create_topic(old, "t")
            big1, big2 = encode([(None, value)] * 300, magic=1), encode([(None, value)] * 300)
            t0 = time.monotonic()
            r = produce(old, big1, 2)
            held = time.monotonic() - t0
            assert r.throttle_time_ms == 2000 and held >= 1.8, (r.throttle_time_ms, held)
            t0 = time.monotonic()
            r = produce(new, big2, 7)
            answered = time.monotonic() - t0
            assert r.throttle_time_ms == 2000 and answered < 1.5, (r.throttle_time_ms, answered)
            new.request(MetadataRequest[1](topics=["t"]))
            muted = time.monotonic() - t0
            assert muted >= 1.8, muted
        m = b.broker.metrics()["kafka.server.ClientQuotaManager"]
        assert m["Produce-throttle-time-max"] == 2000, m


def test_idle_windows_are_forgotten() -> None:
    m = QuotaManager(QuotaConfigs(producer_default=1000.0), num_samples=2, window_ms=1000)
    for i in range(1024):
        m.record(PRODUCER, "u", f"c{i}", 10, 0)
    assert len(m._rates) == 1024
    m.record(PRODUCER, "u", "late", 10, 5000)  # the others have no live sample by now
    assert set(m._rates) == {(PRODUCER, "", "late")}
