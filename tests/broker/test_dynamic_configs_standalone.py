"""A standalone broker (no ZooKeeper) keeps its dynamic configs across a kill -9: topic
overrides (IncrementalAlterConfigs and AlterConfigs), this broker's and the default broker
configs, and client quotas (AlterClientQuotas) are in ``dynamic-configs.json`` of its log
directory, read back at start, and described with the same values and sources after a restart
of the real broker process; a topic's configs leave with the topic.

The file is written atomically: a writer process killed with SIGKILL at whatever point of its
writes leaves a file that loads whole (the last completed write), and the broker refuses to
start on a file it cannot read rather than guess.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import wait_until

from hmbclient import admin
from hmbclient.broker import BrokerProcess
from hmbclient.broker.controller.store import DYNAMIC_CONFIGS_FILE, MemoryStore
from hmbclient.children import preexec_for_current_thread
from hmbclient.errors import ErrorCode, StorageError
from hmbclient.protocol.api import ApiKey
from hmbclient.protocol.api.base import REQUESTS

from .conftest import RawClient

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def _quotas(bp: BrokerProcess) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    with RawClient(bp.host, bp.port) as c:
        r = c.request(REQUESTS[(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0)].build(components=[], strict=False))
    assert r.error_code == ErrorCode.NONE
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in r.entries}


def _alter_quota(bp: BrokerProcess, client_id: str, key: str, rate: float) -> None:
    with RawClient(bp.host, bp.port) as c:
        r = c.request(REQUESTS[(ApiKey.ALTER_CLIENT_QUOTAS, 0)].build(
            entries=[([("client-id", client_id)], [(key, rate, False)])], validate_only=False))
    assert [e.error_code for e in r.entries] == [ErrorCode.NONE]


def _described(bp: BrokerProcess, kind: str, name: str, keys: tuple[str, ...]) -> dict[str, tuple[str | None, str]]:
    got = admin.describe_configs(bp.bootstrap, kind, name)
    return {k: (got[k].value, got[k].source) for k in keys}


def test_dynamic_configs_survive_a_kill_9(tmp_path: Path) -> None:
    bp = BrokerProcess(str(tmp_path), num_partitions=1)
    bp.start()
    try:
        admin.create_topic(bp.bootstrap, "kept", 1, 1)
        admin.create_topic(bp.bootstrap, "dropped", 1, 1)
        admin.alter_configs(bp.bootstrap, "topic", "kept", {"retention.ms": "123456", "max.message.bytes": "65536"})
        admin.alter_configs(bp.bootstrap, "topic", "kept", {"segment.bytes": "1048576"}, incremental=False)  # replaces the set
        admin.alter_configs(bp.bootstrap, "topic", "dropped", {"retention.ms": "999"})
        admin.alter_configs(bp.bootstrap, "broker", "", {"log.retention.ms": "7200000"})
        admin.alter_configs(bp.bootstrap, "broker", "0", {"log.retention.bytes": "1048576"})
        _alter_quota(bp, "slow-client", "producer_byte_rate", 4096.0)
        admin.delete_topics(bp.bootstrap, ["dropped"])
        wait_until(lambda: "dropped" not in admin.list_topics(bp.bootstrap), 20, "topic deleted")

        topic_keys = ("retention.ms", "max.message.bytes", "segment.bytes")
        broker_keys = ("log.retention.ms", "log.retention.bytes")
        before = (_described(bp, "topic", "kept", topic_keys), _described(bp, "broker", "0", broker_keys),
                  _described(bp, "broker", "", ("log.retention.ms",)), _quotas(bp))
        assert before[0]["segment.bytes"] == ("1048576", "TOPIC_CONFIG")
        # AlterConfigs replaced the whole set: the incremental ones are gone
        assert before[0]["retention.ms"][1] != "TOPIC_CONFIG" and before[0]["max.message.bytes"][1] != "TOPIC_CONFIG"
        assert before[1] == {"log.retention.ms": ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                             "log.retention.bytes": ("1048576", "DYNAMIC_BROKER_CONFIG")}
        assert before[3] == {(("client-id", "slow-client"),): {"producer_byte_rate": 4096.0}}

        bp.kill()  # SIGKILL: no clean shutdown
        on_disk = json.loads((tmp_path / DYNAMIC_CONFIGS_FILE).read_text())
        assert on_disk["configs"]["topics/kept"] == {"segment.bytes": "1048576"} and "topics/dropped" not in on_disk["configs"]
        bp.start()
        after = (_described(bp, "topic", "kept", topic_keys), _described(bp, "broker", "0", broker_keys),
                 _described(bp, "broker", "", ("log.retention.ms",)), _quotas(bp))
        assert after == before
        # and they still change after the restart: removing a layer restores the one below
        admin.alter_configs(bp.bootstrap, "broker", "0", {}, delete=["log.retention.bytes"])
        assert _described(bp, "broker", "0", ("log.retention.bytes",))["log.retention.bytes"][1] == "DEFAULT_CONFIG"
    finally:
        bp.terminate(timeout_s=20)


_WRITER = textwrap.dedent("""
    import sys
    from hmbclient.broker.controller.store import MemoryStore
    store = MemoryStore(configs_path=sys.argv[1])
    i = 0
    while True:
        i += 1
        # a growing config: a torn write would show as a short or unparsable file
        store.set_entity_config("topics", "t", {f"k{j}": "v" * 50 for j in range(i % 400)} | {"n": str(i)})
        if i == 20:
            print("writing", flush=True)
""")


def test_a_kill_9_during_writes_never_leaves_half_a_file(tmp_path: Path) -> None:
    path = tmp_path / DYNAMIC_CONFIGS_FILE
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                                preexec_fn=preexec_for_current_thread())  # dies with this process
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
            n = int(MemoryStore(configs_path=str(path)).entity_config("topics", "t")["n"])
            wait_until(lambda n=n: int(json.loads(path.read_text())["configs"]["topics/t"]["n"]) > n + 50, 20,
                       "writes going on")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        config = MemoryStore(configs_path=str(path)).entity_config("topics", "t")  # loads whole
        n = int(config["n"])
        assert len(config) == n % 400 + 1 and all(config[f"k{j}"] == "v" * 50 for j in range(n % 400)), n


def test_an_unreadable_file_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / DYNAMIC_CONFIGS_FILE
    for body in ('{"version": 1, "configs": {"topics/t": {"a"', '{"version": 9, "configs": {}}', '{"configs": {"x": {}}}'):
        path.write_text(body)
        with pytest.raises(StorageError, match=DYNAMIC_CONFIGS_FILE):
            MemoryStore(configs_path=str(path))
    # a leftover temporary file of an interrupted write is not read
    path.write_text(json.dumps({"version": 1, "configs": {"clients/c": {"producer_byte_rate": "10"}}}))
    Path(str(path) + ".tmp").write_text("{half")
    assert MemoryStore(configs_path=str(path)).entity_names("clients") == ["c"]
