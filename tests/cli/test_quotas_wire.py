"""``hmb quotas --bootstrap-server``: client quotas through the brokers (AlterClientQuotas /
DescribeClientQuotas), for a standalone broker (no ZooKeeper, its quotas in dynamic-configs.json)
and, with the same commands, Apache Kafka 4.4 (what ``kafka-configs --bootstrap-server
--entity-type users/clients`` does): the listings must be the same. The ZooKeeper path is
tested in tests/broker/test_quota_enforcement.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import EmbeddedBroker
from hmbclient.broker.quotas import CONSUMER, PRODUCER, resolve
from hmbclient.cli import main as hmb


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(port=0, log_dir=str(tmp_path_factory.mktemp("quotas-wire"))) as b:
        yield b


def script(bootstrap: str, capsys: pytest.CaptureFixture[str], listings: list[str] | None = None) -> list[str]:
    """Add, list (all, one entity), delete one rate; what each step printed. The listings wait
    (up to 15 s) to equal ``listings`` when given: Kafka applies a quota on its own time."""
    def run(*argv: str) -> str:
        assert hmb(["quotas", "--bootstrap-server", bootstrap, *argv]) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    def listing(*argv: str) -> str:
        if listings is None:
            return run(*argv)
        want = listings.pop(0)
        seen: list[str] = []
        wait_until(lambda: seen.append(run(*argv)) or seen[-1] == want, 15, f"listing {argv} == {want!r} (last: {seen[-1:]})")
        return seen[-1]

    out = [run("--user", "alice", "--add", "producer_byte_rate=1024", "--add", "consumer_byte_rate=2048"),
           run("--user", "alice", "--client-id", "<default>", "--add", "consumer_byte_rate=4096"),
           run("--client-id", "<default>", "--add", "producer_byte_rate=512")]
    refused = hmb(["quotas", "--bootstrap-server", bootstrap, "--client-id", "c", "--add", "producer_byte_rate=0.5"])
    out.append(f"{refused} {'INVALID_REQUEST' in capsys.readouterr().err}")
    out.append(listing())
    out.append(listing("--user", "alice"))  # only the entity naming exactly user=alice
    out.append(run("--user", "alice", "--delete", "consumer_byte_rate"))
    out.append(run("--user", "alice", "--client-id", "<default>", "--delete", "consumer_byte_rate"))
    out.append(listing())
    return out


def test_quotas_through_a_standalone_broker_as_through_kafka_4(standalone: EmbeddedBroker, apache_kafka: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    mine = script(standalone.bootstrap, capsys)
    assert mine[3] == "1 True"  # a fractional byte rate is refused
    assert mine[4].splitlines() == ["user=\tclient-id=<default>\tproducer_byte_rate=512",
                                    "user=alice\tclient-id=\tconsumer_byte_rate=2048, producer_byte_rate=1024",
                                    "user=alice\tclient-id=<default>\tconsumer_byte_rate=4096"]
    assert mine[5] == "user=alice\tclient-id=\tconsumer_byte_rate=2048, producer_byte_rate=1024\n"
    assert mine[6] == "altered quota of user=alice client-id=None: -consumer_byte_rate\n"
    assert mine[8].splitlines() == ["user=\tclient-id=<default>\tproducer_byte_rate=512",
                                    "user=alice\tclient-id=\tproducer_byte_rate=1024"]  # an entity left empty is gone
    theirs = script(apache_kafka.bootstrap, capsys, [mine[4], mine[5], mine[8]])
    assert mine == theirs
    # in force on the broker, and kept in its dynamic-configs.json
    quotas = standalone.broker.apis.quotas  # type: ignore[union-attr]
    wait_until(lambda: resolve(quotas.configs, PRODUCER, "alice", "c1") == (1024.0, ("alice", "")), 10, "alice's quota")
    assert resolve(quotas.configs, CONSUMER, "alice", "c1") is None
    assert resolve(quotas.configs, PRODUCER, "bob", "c1") == (512, ("", "c1"))
    with open(os.path.join(standalone.log_dir, "dynamic-configs.json")) as f:
        assert "1024" in json.dumps(json.load(f))


def test_one_path_is_chosen(standalone: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    assert hmb(["quotas"]) == 1
    assert hmb(["quotas", "--zookeeper", "127.0.0.1:1", "--bootstrap-server", standalone.bootstrap]) == 1
    assert "one of --zookeeper" in capsys.readouterr().err
    assert hmb(["quotas", "--bootstrap-server", standalone.bootstrap, "--client-id", "x", "--add", "producer_byte_rate=lots"]) == 1
    assert "producer_byte_rate" in capsys.readouterr().err
    assert hmb(["quotas", "--bootstrap-server", standalone.bootstrap, "--client-id", "x", "--add", "producer_byte_rat=1"]) == 1
    assert "unknown quota" in capsys.readouterr().err
    assert hmb(["quotas", "--bootstrap-server", standalone.bootstrap, "--client-id", "x"]) == 0
    assert capsys.readouterr().out == ""
