"""Bad input to the high-level consumer gets a clear error, quickly, and leaves nothing behind."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from hmbclient import Blacklist, Consumer, Whitelist
from hmbclient.errors import ConfigError, CoordinationError
from rebalance import paths

from .conftest import unique

pytestmark = pytest.mark.timeout(60)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unknown_and_invalid_settings_are_refused(zk_connect: str) -> None:
    with pytest.raises(ConfigError, match="bogus"):
        Consumer.create({"zookeeper.connect": zk_connect, "group.id": "g", "bogus.setting": 1})
    with pytest.raises(ConfigError):
        Consumer.create({"zookeeper.connect": zk_connect})  # no group.id
    with pytest.raises(ConfigError):
        Consumer.create(zookeeper_connect=zk_connect, group_id="g", auto_offset_reset="sometimes")
    with pytest.raises(ConfigError):
        Consumer.create(["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Whitelist("(unclosed")
    with pytest.raises(ValueError):
        Blacklist("  ")


def test_bad_subscriptions_are_refused_before_joining(
    zk_connect: str, admin_zk: Any, make_consumer: Any
) -> None:
    group = unique("g")
    c = make_consumer(group, metadata_broker_list="127.0.0.1:9")
    for bad in ({"a/b": 1}, {"": 1}, {"..": 1}, {"x" * 250: 1}, {"ok": 0}, {}):
        with pytest.raises(ConfigError):
            c.create_message_streams(bad)
    with pytest.raises(ConfigError):
        c.create_message_streams_by_filter("events.*", 1)  # type: ignore[arg-type]
    assert not admin_zk.exists(paths.consumer_ids_path(group)) or not admin_zk.get_children(paths.consumer_ids_path(group))
    # A good subscription still works afterwards.
    c.create_message_streams({unique("t"): 1})
    assert admin_zk.get_children(paths.consumer_ids_path(group)) == [c.consumer_id]
    c.shutdown()
    with pytest.raises(ConfigError, match="shut down"):
        c.create_message_streams({unique("t"): 1})


def test_unreachable_zookeeper_fails_fast_and_cleanly() -> None:
    c = Consumer.create(
        {
            "zookeeper.connect": f"127.0.0.1:{_dead_port()}",
            "group.id": unique("g"),
            "zookeeper.connection.timeout.ms": 1000,
        }
    )
    t0 = time.monotonic()
    with pytest.raises(CoordinationError, match="cannot reach ZooKeeper"):
        c.create_message_streams({"events": 1})
    assert time.monotonic() - t0 < 10
    c.shutdown()
    c.shutdown()  # idempotent


def test_brokers_nowhere_to_be_found_is_a_config_error(zk_connect: str) -> None:
    c = Consumer.create({"zookeeper.connect": zk_connect, "group.id": unique("g")})
    with pytest.raises(ConfigError, match="metadata.broker.list"):
        c.create_message_streams({"events": 1})
    c.shutdown()
