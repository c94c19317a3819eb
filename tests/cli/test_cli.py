"""The ``hmb`` command, run as a subprocess against real servers (embedded broker, ZooKeeper)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hmbclient.cli import CliError, format_message

HMB = [sys.executable, "-m", "hmbclient.cli"]


def run(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*HMB, *args], input=input, capture_output=True, timeout=timeout, env=env)


def test_format_tokens() -> None:
    line = format_message("%t/%p@%o %k=%s (%K,%S) %T %%\\n", "t", 3, 42, b"key", b"value", 1700)
    assert line == b"t/3@42 key=value (3,5) 1700 %\n"
    assert format_message("%k|%s|%K|%S", "t", 0, 0, None, None, None) == b"||-1|-1"
    with pytest.raises(CliError, match="%x"):
        format_message("%x", "t", 0, 0, None, None, None)


@pytest.fixture(scope="module")
def topic() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_produce_file_then_consume_with_format(hmb_broker, topic: str, tmp_path: Path) -> None:
    lines = [f"k{i % 3}:value {i}" for i in range(500)]
    src = tmp_path / "input.txt"
    src.write_text("\n".join(lines) + "\n")
    r = run("produce", topic, "-b", hmb_broker.bootstrap, "--file", str(src), "--key-delimiter", ":")
    assert r.returncode == 0, r.stderr.decode()
    assert b"produced 500 messages" in r.stderr

    r = run("consume", topic, "-b", hmb_broker.bootstrap, "--offset", "earliest", "--exit-at-end",
            "--format", "%p %o %k %s\\n")
    assert r.returncode == 0, r.stderr.decode()
    got = [row.split(" ", 3) for row in r.stdout.decode().splitlines()]
    assert len(got) == 500
    assert sorted((k, v) for _, _, k, v in got) == sorted(tuple(x.split(":", 1)) for x in lines)
    # per partition, offsets are consecutive from 0
    by_part: dict[str, list[int]] = {}
    for p, o, _, _ in got:
        by_part.setdefault(p, []).append(int(o))
    for offsets in by_part.values():
        assert offsets == list(range(len(offsets)))


def test_produce_stdin_count_and_offsets(hmb_broker) -> None:
    topic = f"cli-stdin-{uuid.uuid4().hex[:8]}"
    data = b"".join(b"line %d\n" % i for i in range(42))
    r = run("produce", topic, "-b", hmb_broker.bootstrap, input=data)
    assert r.returncode == 0, r.stderr.decode()
    r = run("consume", topic, "-b", hmb_broker.bootstrap, "--count", "10", "--partition", "0")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.splitlines() == [b"line %d" % i for i in range(10)]
    r = run("offsets", topic, "-b", hmb_broker.bootstrap)
    assert r.returncode == 0, r.stderr.decode()
    rows = [line.split() for line in r.stdout.decode().splitlines()]
    assert rows[0] == ["partition", "earliest", "latest", "messages"]
    assert sum(int(row[3]) for row in rows[1:]) == 42
    r = run("topics", "-b", hmb_broker.bootstrap)
    assert r.returncode == 0 and topic in r.stdout.decode()


def test_errors_are_one_line_with_exit_1(hmb_broker, unused_port: int) -> None:
    r = run("offsets", "no-such-topic-x", "-b", f"127.0.0.1:{unused_port}", timeout=60)
    assert r.returncode == 1
    err = r.stderr.decode().strip()
    assert err.startswith("hmb offsets:") and "Traceback" not in err and len(err.splitlines()) == 1

    r = run("produce", "../bad", "-b", hmb_broker.bootstrap, input=b"x\n")
    assert r.returncode == 1
    err = r.stderr.decode().strip()
    assert "Traceback" not in err and "InvalidTopic" in err, err

    r = run("groups", "--zookeeper", f"127.0.0.1:{unused_port}", timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr.decode()


def test_group_consume_and_lag(hmb_cluster, zookeeper) -> None:
    topic = f"cli-group-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    data = b"".join(b"m%d\n" % i for i in range(300))
    r = run("produce", topic, "-b", hmb_cluster.bootstrap, input=data)
    assert r.returncode == 0, r.stderr.decode()
    r = run("consume", topic, "-b", hmb_cluster.bootstrap, "--group", group, "--zookeeper", zookeeper.connect,
            "--count", "100", "--timeout-ms", "5000", timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert len(r.stdout.splitlines()) == 100
    r = run("groups", "--zookeeper", zookeeper.connect)
    assert r.returncode == 0 and group in r.stdout.decode().split()
    r = run("groups", group, "--zookeeper", zookeeper.connect, "-b", hmb_cluster.bootstrap)
    assert r.returncode == 0, r.stderr.decode()
    rows = [line.split() for line in r.stdout.decode().splitlines() if line.startswith(topic)]
    assert rows, r.stdout.decode()
    committed = sum(int(row[3]) for row in rows if row[3] != "-")
    lag = sum(int(row[5]) for row in rows if row[5] != "-")
    assert committed >= 100 and committed + lag == 300


def test_hmb_dialect_produce_and_consume(hmb_broker) -> None:
    """``--api-version hmb`` sends only Metadata/Produce/Fetch v0 (our broker is stricter than HMB)."""
    topic = f"cli-hmb-{uuid.uuid4().hex[:8]}"
    r = run("produce", topic, "-b", hmb_broker.bootstrap, "--api-version", "hmb", input=b"x1\nx2\nx3\n")
    assert r.returncode == 0, r.stderr.decode()
    r = run("consume", topic, "-b", hmb_broker.bootstrap, "--api-version", "hmb", "--exit-at-end",
            "--format", "%o %s\\n")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.splitlines() == [b"0 x1", b"1 x2", b"2 x3"]
    r = run("offsets", topic, "-b", hmb_broker.bootstrap, "--api-version", "hmb")
    assert r.returncode == 1 and "UnsupportedByBroker" in r.stderr.decode() and "HMB" in r.stderr.decode()


def test_every_option_and_command_has_help() -> None:
    """Walk every argparse parser of ``hmb``: each option, positional and sub-command says what it does."""
    import argparse

    from hmbclient.cli import build_parser

    # argparse has no public way to list a parser's actions or sub-commands, hence _actions,
    # _HelpAction, _SubParsersAction and _choices_actions below.
    missing: list[str] = []
    todo = [("hmb", build_parser())]
    while todo:
        name, parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(label)
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for sub_name, sub_parser in action.choices.items():
                    if not helps.get(sub_name):
                        missing.append(f"{name} {sub_name} (sub-command)")
                    todo.append((f"{name} {sub_name}", sub_parser))
    assert not missing, missing


def _start_broker(err_file: Path, *args: str) -> tuple[subprocess.Popen[str], re.Match[str]]:
    """A real ``hmb broker`` subprocess, serving; returns it with its ready line parsed (id, address, log dir)."""
    with err_file.open("w") as err:  # a file, not a pipe: nobody drains it while the broker serves
        proc = subprocess.Popen([*HMB, "broker", "--port", "0", *args], stdout=subprocess.PIPE, stderr=err,
                                text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError(f"hmb broker did not serve (exit {proc.returncode}): {err_file.read_text()}")
    m = re.match(r"hmb broker (?P<id>\d+) listening on (?P<address>\S+) log\.dir=(?P<log_dir>\S+)", line)
    assert m, line
    return proc, m


def test_broker_set_reaches_the_broker(tmp_path: Path) -> None:
    """``--set`` takes Kafka property names (and their aliases); checked through the broker's behaviour."""
    log_dir = tmp_path / "broker-logs"
    proc, ready = _start_broker(tmp_path / "broker.err", "--set", "num.partitions=5", "--set", f"log.dir={log_dir}", "--set", "broker.id=7")
    bootstrap = ready["address"]
    try:
        assert ready["id"] == "7" and ready["log_dir"] == str(log_dir), ready.group(0)
        topic = f"cli-set-{uuid.uuid4().hex[:8]}"
        r = run("produce", topic, "-b", bootstrap, input=b"a\nb\nc\n")  # auto-creates the topic
        assert r.returncode == 0, r.stderr.decode()
        r = run("topics", "-b", bootstrap)
        assert r.returncode == 0, r.stderr.decode()
        rows = dict(line.split() for line in r.stdout.decode().splitlines()[1:])
        assert rows[topic] == "5", r.stdout.decode()  # num.partitions of auto-created topics
        assert (log_dir / f"{topic}-0").is_dir()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize(("setting", "named"), [
    ("no.such.setting=1", "no.such.setting"),
    ("num.partitions=zero", "num.partitions"),
    ("num.partitions=0", "num.partitions"),
    ("num.partitions", "NAME=VALUE"),
])
def test_broker_set_refuses_unknown_names_and_bad_values(setting: str, named: str) -> None:
    r = run("broker", "--port", "0", "--set", setting, timeout=30)
    assert r.returncode == 1
    err = r.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("hmb broker:") and named in err, err
    assert r.stdout == b""  # refused before serving
