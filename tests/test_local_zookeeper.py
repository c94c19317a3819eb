"""LocalZooKeeper / LocalZooKeeperEnsemble: real JVMs, driven through a real kazoo client."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

from hmbclient.testing import (
    LocalZooKeeper,
    LocalZooKeeperEnsemble,
    LocalZooKeeperError,
    ZooKeeperNotFoundError,
)
from hmbclient.testing.zookeeper import find_zookeeper_classpath


def _client(connect: str, timeout: float = 10.0) -> KazooClient:
    client = KazooClient(
        hosts=connect,
        timeout=timeout,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
        command_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5, deadline=30),
    )
    client.start(timeout=15)
    return client


@pytest.fixture
def kazoo_clients() -> Iterator[list[KazooClient]]:
    clients: list[KazooClient] = []
    yield clients
    for c in clients:
        c.stop()
        c.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists"; it is reaped by Popen.wait, which stop/kill call.
    return True


def test_start_connect_create_read_and_clean_up(kazoo_clients: list[KazooClient]) -> None:
    with LocalZooKeeper() as zk:
        assert zk.connect == f"127.0.0.1:{zk.port}"
        assert zk.mode() == "standalone"
        assert "Mode: standalone" in zk.four_letter_word("srvr")
        client = _client(zk.connect)
        kazoo_clients.append(client)
        client.create("/hmb/test", b"hello", makepath=True)
        assert client.get("/hmb/test")[0] == b"hello"
        pid, root = zk.pid, zk.root_dir
        assert pid is not None and root.is_dir() and zk.log_path.is_file()
    assert not _pid_alive(pid)
    assert not root.exists()


def test_restart_and_crash_keep_data_and_port(kazoo_clients: list[KazooClient]) -> None:
    with LocalZooKeeper() as zk:
        port = zk.port
        client = _client(zk.connect)
        kazoo_clients.append(client)
        client.create("/kept", b"v1")

        zk.restart()
        assert zk.port == port and zk.mode() == "standalone"
        assert client.retry(client.get, "/kept")[0] == b"v1"
        client.retry(client.set, "/kept", b"v2")

        zk.kill()
        assert not zk.is_running() and zk.mode() is None
        zk.start()
        assert client.retry(client.get, "/kept")[0] == b"v2"


def test_short_sessions_are_granted(kazoo_clients: list[KazooClient]) -> None:
    # tickTime 500 ms -> minSessionTimeout 1 s; session-expiry tests depend on this.
    with LocalZooKeeper() as zk:
        client = _client(zk.connect, timeout=1.5)
        kazoo_clients.append(client)
        assert "to=1500" in zk.four_letter_word("cons")


def test_explicit_data_dir_survives_close(tmp_path: Path, kazoo_clients: list[KazooClient]) -> None:
    with LocalZooKeeper(data_dir=tmp_path / "zk") as zk:
        port = zk.port
        client = _client(zk.connect)
        client.create("/durable", b"x")
        client.stop()
        client.close()
    assert (tmp_path / "zk" / "data").is_dir()
    with LocalZooKeeper(port=port, data_dir=tmp_path / "zk") as zk:
        client = _client(zk.connect)
        kazoo_clients.append(client)
        assert client.get("/durable")[0] == b"x"


def test_ensemble_survives_leader_kill(kazoo_clients: list[KazooClient]) -> None:
    with LocalZooKeeperEnsemble(3) as ens:
        assert ens.connect == ",".join(f"127.0.0.1:{p}" for p in ens.ports)
        assert len(set(ens.ports)) == 3
        modes = ens.modes()
        assert modes.count("leader") == 1 and modes.count("follower") == 2
        client = _client(ens.connect)
        kazoo_clients.append(client)
        client.create("/ens/a", b"1", makepath=True)

        old = ens.leader()
        assert old is not None
        ens.kill(old)
        new = ens.wait_for_leader()
        assert new != old and not ens.is_running(old)

        assert client.retry(client.get, "/ens/a")[0] == b"1"
        client.retry(client.create, "/ens/b", b"2")

        ens.start(old)
        assert ens.modes()[old] == "follower"
        lone = _client(ens.member_connect(old))
        kazoo_clients.append(lone)
        lone.sync("/ens")
        assert lone.get("/ens/b")[0] == b"2"


def test_bogus_zookeeper_home_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ZooKeeperNotFoundError) as err:
        LocalZooKeeper()
    text = str(err.value)
    assert "ZOOKEEPER_HOME" in text and "apt-get install zookeeper" in text
    assert str(tmp_path / "nowhere") in text


def test_bogus_classpath_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperNotFoundError, match="apt-get install zookeeper"):
        LocalZooKeeper(classpath=[str(tmp_path / "missing.jar")])
    with pytest.raises(ZooKeeperNotFoundError, match="java"):
        LocalZooKeeper(java=str(tmp_path / "no-java"))


def test_startup_failure_reports_the_log_tail(tmp_path: Path) -> None:
    # Real jars, but not ZooKeeper's: the JVM exits at once and the error quotes its log.
    not_zookeeper = tmp_path / "empty"
    not_zookeeper.mkdir()
    zk = LocalZooKeeper(classpath=[str(not_zookeeper)])
    with pytest.raises(LocalZooKeeperError) as err:
        with zk:
            pass
    assert "ZooKeeperServerMain" in str(err.value)  # "Could not find or load main class ..."
    assert not zk.is_running() and not zk.root_dir.exists()


def test_classpath_discovery_prefers_zookeeper_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    home = tmp_path / "apache-zookeeper"
    (home / "lib").mkdir(parents=True)
    (home / "conf").mkdir()
    (home / "lib" / "zookeeper-3.9.0.jar").write_bytes(b"")
    (home / "lib" / "zookeeper-jute-3.9.0.jar").write_bytes(b"")
    entries = find_zookeeper_classpath(home)
    assert entries[0] == str(home / "conf")
    assert str(home / "lib" / "zookeeper-3.9.0.jar") in entries
    default = find_zookeeper_classpath()
    assert default[0] == "/usr/share/java/zookeeper.jar", "Debian's zookeeper package is required"


def test_port_taken_by_another_server_is_not_mistaken_for_ours() -> None:
    with LocalZooKeeper() as first:
        second = LocalZooKeeper(port=first.port)
        with pytest.raises(LocalZooKeeperError, match="already served by another ZooKeeper"):
            with second:
                pass
        assert not second.is_running()
        assert first.mode() == "standalone"
