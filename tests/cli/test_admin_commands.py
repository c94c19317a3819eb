"""``hmb topics --alter/--delete``, ``hmb configs``, ``hmb leader-election``, ``hmb cluster`` and
``hmb groups --reset-offsets`` run as a user runs them (subprocesses) against a real standalone
embedded broker (and a real ZooKeeper for a ZooKeeper group); what they report is checked
against the broker / ZooKeeper itself."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import uuid
from typing import Any

from waiting import wait_until

from hmbclient import admin

HMB = [sys.executable, "-m", "hmbclient.cli"]


def hmb(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*HMB, *args], capture_output=True, text=True, timeout=timeout, env=env)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topics_alter_and_delete(hmb_broker: Any) -> None:
    b = hmb_broker.bootstrap
    topic = unique("cli-admin")
    admin.create_topic(b, topic, 1, 1)
    r = hmb("topics", "-b", b, "--alter", topic, "--partitions", "3")
    assert (r.returncode, r.stdout.strip()) == (0, f"topic {topic} now has 3 partitions"), r.stderr
    assert admin.list_topics(b)[topic] == 3
    r = hmb("topics", "-b", b, "--alter", topic, "--partitions", "2")
    assert r.returncode == 1 and r.stderr.strip() == (
        f"hmb topics: topic {topic} not altered: InvalidPartitionsError: [Error 37] INVALID_PARTITIONS: "
        "Topic currently has 3 partitions, which is higher than the requested 2."), r.stderr
    r = hmb("topics", "-b", b, "--delete", topic, "no-such-topic")
    assert r.returncode == 1
    assert r.stdout.strip() == f"deleted topic {topic}"
    assert r.stderr.strip().startswith("hmb topics: topic no-such-topic not deleted: UnknownTopicOrPartitionError"), r.stderr
    assert topic not in admin.list_topics(b)


def test_configs_describe_set_delete(hmb_broker: Any) -> None:
    b = hmb_broker.bootstrap
    topic = unique("cli-cfg")
    admin.create_topic(b, topic, 1, 1)
    r = hmb("configs", "-b", b, "--topic", topic, "--set", "retention.ms=60000", "--set", "max.message.bytes=2048")
    assert (r.returncode, r.stdout.strip()) == (0, f"altered configs of topic {topic}: retention.ms=60000, max.message.bytes=2048"), r.stderr
    assert hmb_broker.broker.logs.get(topic, 0).config.retention_ms == 60000
    r = hmb("configs", "-b", b, "--topic", topic)
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[1:]}
    assert rows["retention.ms"] == ["60000", "TOPIC_CONFIG", "yes"]
    assert rows["segment.bytes"][1:] == ["DEFAULT_CONFIG", "yes"]
    r = hmb("configs", "-b", b, "--topic", topic, "--delete", "retention.ms")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: hmb_broker.broker.logs.get(topic, 0).config.retention_ms == hmb_broker.broker.config.log_retention_ms, 10, "removed")
    r = hmb("configs", "-b", b, "--topic", topic, "--set", "retention.mss=1")
    assert r.returncode == 1 and "Unknown topic config name: retention.mss" in r.stderr, r.stderr
    r = hmb("configs", "-b", b, "--broker", str(hmb_broker.broker_id))
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[1:]}
    assert rows["broker.id"][0] == str(hmb_broker.broker_id) and rows["broker.id"][2] == "no"  # static, not alterable
    assert rows["log.retention.ms"][2] == "yes"
    r = hmb("configs", "-b", b)
    assert r.returncode == 1 and "name one resource" in r.stderr


def test_leader_election_and_cluster(hmb_broker: Any) -> None:
    b = hmb_broker.bootstrap
    topic = unique("cli-elect")
    admin.create_topic(b, topic, 1, 1)
    r = hmb("leader-election", "-b", b, f"{topic}:0")
    assert (r.returncode, r.stdout.strip()) == (0, f"{topic}-0: preferred leader already leads"), r.stderr
    r = hmb("leader-election", "-b", b, f"{topic}:7")
    assert (r.returncode, r.stdout.strip()) == (1, f"{topic}-7: UNKNOWN_TOPIC_OR_PARTITION")
    r = hmb("cluster", "-b", b, "--log-dirs")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"cluster {hmb_broker.broker.metadata.cluster_id}, controller {hmb_broker.broker_id}"
    assert lines[2].split() == [str(hmb_broker.broker_id), "127.0.0.1", str(hmb_broker.port)]
    assert any(line.split()[2:3] == [f"{topic}-0"] for line in lines[3:]), r.stdout


def _produce_lines(bootstrap: str, topic: str, lines: list[str]) -> None:
    r = subprocess.run([*HMB, "produce", topic, "-b", bootstrap], input="".join(f"{x}\n" for x in lines), capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert r.returncode == 0, r.stderr


def _reset(*args: str) -> tuple[int, list[list[str]], str]:
    r = hmb("groups", *args)
    lines = r.stdout.splitlines()
    return r.returncode, [line.split() for line in lines[1:-1]], (lines[-1] if lines else r.stderr.strip())


def test_reset_offsets_of_a_broker_group(hmb_broker: Any) -> None:
    from hmbclient.clock import wall_ms
    from hmbclient.consumer.group_admin import describe_broker_group

    b = hmb_broker.bootstrap
    topic, group = unique("cli-reset"), unique("g-reset")
    admin.create_topic(b, topic, 1, 1)
    _produce_lines(b, topic, [f"a{i}" for i in range(5)])
    middle = wall_ms()
    wait_until(lambda: wall_ms() > middle, 5, "the clock moves past the first batch")
    _produce_lines(b, topic, [f"b{i}" for i in range(5)])
    code, rows, last = _reset(group, "-b", b, "--reset-offsets", "--to-latest", "--topic", topic)
    assert (code, rows, last) == (0, [[topic, "0", "-", "10"]], "dry run: nothing changed (add --execute to commit these offsets)")
    code, rows, last = _reset(group, "-b", b, "--reset-offsets", "--to-latest", "--topic", topic, "--execute")
    assert (code, rows, last) == (0, [[topic, "0", "-", "10"]], f"offsets of group {group} reset")

    def committed() -> int | None:
        return describe_broker_group(b, group)["partitions"][0]["committed"]

    assert committed() == 10
    assert _reset(group, "-b", b, "--reset-offsets", "--shift-by", "-3", "--execute")[1] == [[topic, "0", "10", "7"]]  # topics: its own
    assert committed() == 7
    assert _reset(group, "-b", b, "--reset-offsets", "--shift-by", "-30")[1] == [[topic, "0", "7", "0"]]  # clamped, dry run
    assert committed() == 7
    iso = datetime.datetime.fromtimestamp(middle / 1000 + 0.001, datetime.UTC).isoformat()
    assert _reset(group, "-b", b, "--reset-offsets", "--to-datetime", iso, "--execute")[1] == [[topic, "0", "7", "5"]]
    assert committed() == 5
    assert _reset(group, "-b", b, "--reset-offsets", "--to-earliest", "--execute")[1] == [[topic, "0", "5", "0"]]
    assert committed() == 0
    code, _, last = _reset(group, "-b", b, "--reset-offsets")
    assert code == 1 and "needs one of --to-earliest" in last


def test_reset_offsets_of_a_zookeeper_group(hmb_broker: Any, zookeeper: Any) -> None:
    from kazoo.client import KazooClient

    from hmbclient import zkpaths

    b = hmb_broker.bootstrap
    topic, group = unique("cli-zreset"), unique("g-zreset")
    admin.create_topic(b, topic, 1, 1)
    _produce_lines(b, topic, [f"v{i}" for i in range(4)])
    zk = KazooClient(hosts=zookeeper.connect)
    zk.start(timeout=10)
    try:
        zk.create(zkpaths.offset_path(group, topic, 0), zkpaths.encode_offset(1), makepath=True)
        args = (group, "-b", b, "--zookeeper", zookeeper.connect, "--reset-offsets", "--to-latest")
        assert _reset(*args)[1] == [[topic, "0", "1", "4"]]
        assert zkpaths.decode_offset(zk.get(zkpaths.offset_path(group, topic, 0))[0]) == 1  # dry run
        assert _reset(*args, "--execute")[2] == f"offsets of group {group} reset"
        assert zkpaths.decode_offset(zk.get(zkpaths.offset_path(group, topic, 0))[0]) == 4
        zk.create(f"{zkpaths.consumer_ids_path(group)}/someone", b"{}", makepath=True)  # an active member
        code, _, last = _reset(group, "-b", b, "--zookeeper", zookeeper.connect, "--reset-offsets", "--to-earliest", "--execute")
        assert code == 1 and "is active" in last
        assert zkpaths.decode_offset(zk.get(zkpaths.offset_path(group, topic, 0))[0]) == 4
    finally:
        zk.stop()
        zk.close()


def test_topics_delete_records(hmb_broker: Any, tmp_path: Any) -> None:
    import json

    from hmbclient import EARLIEST_TIME, Producer, ProducerData, SimpleConsumer

    b = hmb_broker.bootstrap
    topic = unique("cli-delrec")
    admin.create_topic(b, topic, 2, 1)
    p = Producer(metadata_broker_list=b)
    for f in [f for i in range(20) for f in p.send(ProducerData(topic, None, [b"v%d" % i]))]:
        f.result(timeout=30)
    p.close()
    ends = admin.latest_offsets(b, topic)
    busy = max(ends, key=lambda q: ends[q])  # at least 10 of the 20

    def earliest() -> dict[int, int]:
        c = SimpleConsumer(hmb_broker.host, hmb_broker.port)
        try:
            return {q: c.get_offsets_before(topic, q, EARLIEST_TIME, 1)[0] for q in (0, 1)}
        finally:
            c.close()

    def run(doc: Any) -> subprocess.CompletedProcess[str]:
        f = tmp_path / f"{uuid.uuid4().hex}.json"
        f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return hmb("topics", "-b", b, "--delete-records", "--offset-json-file", str(f))

    # Refused input deletes nothing: past the high watermark, an unknown partition, -2
    for doc, says in (
        ({"partitions": [{"topic": topic, "partition": busy, "offset": 1}, {"topic": topic, "partition": 1 - busy, "offset": 99}]},
         "OffsetOutOfRangeError"),
        ({"partitions": [{"topic": topic, "partition": busy, "offset": 1}, {"topic": topic, "partition": 7, "offset": 1}]},
         "UnknownTopicOrPartitionError"),
        ({"partitions": [{"topic": topic, "partition": busy, "offset": -2}]}, "offset -2"),
    ):
        r = run(doc)
        assert r.returncode == 1 and says in r.stderr and r.stdout == "", (doc, r.stdout, r.stderr)
    assert earliest() == {0: 0, 1: 0}
    r = run({"partitions": [{"topic": topic, "partition": busy, "offset": 3}, {"topic": topic, "partition": 1 - busy, "offset": -1}],
             "version": 1})
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == sorted([f"partition: {topic}-{busy}\tlow_watermark: 3",
                                                    f"partition: {topic}-{1 - busy}\tlow_watermark: {ends[1 - busy]}"])
    assert earliest() == {busy: 3, 1 - busy: ends[1 - busy]}


def test_delete_records_json_is_checked_before_anything_is_sent() -> None:
    import pytest

    from hmbclient.cli import CliError, _parse_offset_json

    ok = '{"partitions": [{"topic": "t", "partition": 0, "offset": 5}, {"topic": "t", "partition": 1, "offset": -1}], "version": 1}'
    assert _parse_offset_json(ok, "f") == {("t", 0): 5, ("t", 1): -1}
    assert _parse_offset_json('{"partitions": [{"topic": "t", "partition": 0, "offset": 0}]}', "f") == {("t", 0): 0}
    for text, says in (
        ('{"partitions": [', "f: not JSON"),
        ('[{"topic": "t"}]', 'expected {"partitions"'),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}', "version 2 is not supported"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]}', "t-0 is named twice"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": "1"}]}', "partitions[0]"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": true}]}', "partitions[0]"),
        ('{"partitions": [{"topic": "", "partition": 0, "offset": 1}]}', "partitions[0]"),
        ('{"partitions": [{"topic": "t", "partition": -1, "offset": 1}]}', "partition -1 is negative"),
        ('{"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}', "offset -2"),
        ('{"partitions": []}', "no partitions"),
    ):
        with pytest.raises(CliError, match=re.escape(says)):
            _parse_offset_json(text, "f")
