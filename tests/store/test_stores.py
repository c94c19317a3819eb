"""Data stores (issue 27 part 2): the commands as pure functions, the backends, and three
processes (a master, two clones) on one broker: mixed writes, a clone killed and restarted, the
master killed and restarted from its topic; the tables equal everywhere after await_idle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from hmbclient.broker import EmbeddedBroker
from hmbclient.children import preexec_for_current_thread
from hmbclient.store import MemoryBackend, SqliteBackend, StoreTypeError
from hmbclient.store.ops import Entry, apply, decode_key, decode_value, encode_key, encode_value

NODE = str(Path(__file__).with_name("node.py"))


# -- pure parts --------------------------------------------------------------------------------------
def test_commands_decide_changes_and_answers() -> None:
    table: dict[Any, Entry] = {"n": Entry(1), "s": Entry({"a"}), "t": Entry({"x": 1}), "l": Entry([1])}
    get = table.get
    assert apply(get, {"op": "put", "k": "k", "v": 2, "x": 1000}, 5) == ([("k", Entry(2, 1005))], None)
    assert apply(get, {"op": "put_unique", "k": "n", "v": 9}, 0) == ([], False)
    assert apply(get, {"op": "put_unique", "k": "new", "v": 9}, 0) == ([("new", Entry(9))], True)
    assert apply(get, {"op": "add", "k": "n", "d": 4}, 0)[0] == [("n", Entry(5))]
    assert apply(get, {"op": "subtract", "k": "s", "d": "a"}, 0)[0] == [("s", Entry(set()))]
    assert apply(get, {"op": "add", "k": "t", "d": ("y", 2)}, 0)[0] == [("t", Entry({"x": 1, "y": 2}))]
    assert apply(get, {"op": "add", "k": "l", "d": 2}, 0)[0] == [("l", Entry([1, 2]))]
    assert apply(get, {"op": "add", "k": "fresh", "d": "e"}, 0)[0] == [("fresh", Entry({"e"}))]
    assert apply(get, {"op": "subtract", "k": "absent", "d": 1}, 0) == ([], None)
    assert apply(get, {"op": "erase", "k": "absent"}, 0) == ([], None)
    assert apply(get, {"op": "clear"}, 0, lambda: list(table)) == ([(k, None) for k in table], None)
    table["e"] = Entry(1, 10)
    assert apply(get, {"op": "expire", "k": "e"}, 9) == ([], None)
    assert apply(get, {"op": "expire", "k": "e"}, 10) == ([("e", None)], None)
    with pytest.raises(StoreTypeError):
        apply(lambda k: Entry("text"), {"op": "add", "k": "x", "d": 1}, 0)
    with pytest.raises(StoreTypeError):
        apply(get, {"op": "bogus"}, 0)


def test_values_and_keys_round_trip() -> None:
    v = {"a": [1, b"\x00", {2, 3}], "b": None, "c": 1.5}
    assert decode_value(json.loads(json.dumps(encode_value(v)))) == v
    for k in ("k", 7, 2.5, True, b"raw"):
        assert decode_key(encode_key(k)) == k
    with pytest.raises(StoreTypeError):
        encode_key([1])


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_backends(kind: str, tmp_path: Path) -> None:
    b = MemoryBackend() if kind == "memory" else SqliteBackend(str(tmp_path / "s.db"))
    b.put("a", Entry({1, 2}, 5))
    b.put(3, Entry("x"))
    assert b.get("a") == Entry({1, 2}, 5) and sorted(map(str, b.keys())) == ["3", "a"]
    b.erase("a")
    assert b.get("a") is None and dict(b.items()) == {3: Entry("x")}
    b.clear()
    assert b.keys() == []
    b.close()


# -- three processes ---------------------------------------------------------------------------------
class Node:
    def __init__(self, role: str, name: str, boot: str, db: str = "", log: str = "") -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, NODE, role, name, boot, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(log, "w") if log else subprocess.DEVNULL, text=True, env=env, preexec_fn=preexec_for_current_thread(),
        )
        assert self.read() == "ready"

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"node exited ({self.proc.poll()})"
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(answer["error"])
        return decode_value(answer["ok"])

    def __call__(self, *cmd: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([cmd[0], *[encode_value(c) for c in cmd[1:]]]) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def quit(self) -> None:
        if self.proc.poll() is None:
            self("quit")
            self.proc.wait(10)


def _idle(*nodes: Node) -> None:
    for n in nodes:
        assert n("idle", 20) is True


def test_master_and_two_clones_in_three_processes(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path / "data"), log_cleaner_backoff_ms=200) as b:
        boot, db = b.bootstrap, str(tmp_path / "master.db")
        m = Node("master", "kv", boot, db, str(tmp_path / "m.log"))
        c1 = Node("clone", "kv", boot, "", str(tmp_path / "c1.log"))
        c2 = Node("clone", "kv", boot)
        nodes = [m, c1, c2]
        try:
            c1("put", "a", 1)
            c2("put", "b", "two")
            m("put", "c", [1, 2])
            for n, d in ((c1, 5), (c2, 3), (m, 1)):
                n("add", "n", d)
            c1("add", "set", "x")
            c2("add", "set", "y")
            c2("add", "table", ("k", "v"))
            won = [c1("put_unique", "lock", "c1"), c2("put_unique", "lock", "c2"), m("put_unique", "lock", "m")]
            assert sorted(won) == [False, False, True]
            m("put", "gone", 1)
            c1("put", "tmp", "short-lived")
            _idle(c1, c2)
            c2("erase", "gone")
            c1("expire", "tmp", 0.3)
            _idle(c1, c2, m)
            wait_until(lambda: "tmp" not in m("dump"), 10, "the expiry of tmp at the master")
            _idle(c1, c2, m)
            want = m("dump")
            assert want["n"] == 9 and want["set"] == {"x", "y"} and want["table"] == {"k": "v"}
            assert "gone" not in want and want["lock"] in ("c1", "c2", "m")
            assert c1("dump") == want and c2("dump") == want

            # a clone killed (kill -9) and restarted
            c2.kill()
            c1("put", "d", 4)
            m("add", "n", 10)
            c2 = nodes[2] = Node("clone", "kv", boot)
            _idle(c1, c2, m)
            want = m("dump")
            assert want["n"] == 19 and want["d"] == 4
            assert c1("dump") == want and c2("dump") == want

            # the master killed: clones keep answering reads and say the master is away;
            # a write waits in the command topic for the restarted master
            m.kill()
            wait_until(lambda: "master_unavailable" in c1("events"), 10, "c1 to report the master away")
            assert c1("get", "d") == 4 and c1("exists", "a") is True
            c1("put", "e", 5)
            c2("add", "n", 1)
            m = nodes[0] = Node("master", "kv", boot, db)
            _idle(c1, c2, m)
            want = m("dump")
            assert want["e"] == 5 and want["n"] == 20 and want["d"] == 4 and want["a"] == 1
            assert c1("dump") == want and c2("dump") == want
            assert c1("events")[-1] in ("master_available", "resynchronized")
        finally:
            for n in nodes:
                if n.proc.poll() is None:
                    n.kill()


def test_sequence_check() -> None:
    from hmbclient.store.stores import expect

    assert expect(True, "e1", 4, None, 5) == (False, 5)
    assert expect(True, "e1", 4, None, 7) == (True, 5)  # updates 5 and 6 were compacted away
    assert expect(True, "e1", 4, None, None) == (False, 5)  # a tombstone counts, unchecked
    assert expect(True, "e1", 5, {"e": "e1", "s": 5}, None) == (False, 5)
    assert expect(True, "e1", 5, {"e": "e1", "s": 6}, None)[0]  # a missed tombstone
    assert expect(True, "e1", 5, {"e": "e2", "s": 5}, None)[0]  # the master restarted
    assert expect(False, None, 0, None, 9) == (False, 1)  # loading: compaction gaps are normal


def test_a_clone_behind_the_cleaner_resynchronises(tmp_path: Path) -> None:
    """A clone stalls while the master overwrites and erases keys and the state topic is
    compacted under it: the clone sees a sequence gap, reloads the table from the compacted
    topic, and ends up equal to the master (the erased key gone, though its tombstone may
    already be cleaned away)."""
    from hmbclient.admin import create_topic
    from hmbclient.store import CloneStore, MasterStore

    with EmbeddedBroker(log_dir=str(tmp_path / "data"), log_cleaner_threads=0) as b:
        boot = {"bootstrap.servers": b.bootstrap, "heartbeat.ms": 100}
        create_topic(b.bootstrap, "_store.g.state", 1, 1, configs={"cleanup.policy": "compact", "segment.bytes": "1500", "delete.retention.ms": "0"})
        m = MasterStore("g", **boot)
        c = CloneStore("g", **boot)
        events: list[str] = []
        c.add_status_listener(events.append)
        try:
            m.put("doomed", "x")
            assert c.await_idle(10) and m.await_idle(10)
            with c._cond:  # the clone's loop stalls on its lock
                for i in range(40):
                    m.put("hot", i)
                m.erase("doomed")
                for i in range(40):
                    m.put("hot2", i)
                lg = b.broker.logs.get("_store.g.state", 0)
                assert lg.compact() > 0
                assert lg.compact() >= 0  # a second pass may drop the tombstone too
            assert c.await_idle(10) and m.await_idle(10)
            wait_until(lambda: "resynchronized" in events, 10, "the clone to resynchronise")
            assert c.items() == m.items() == {"hot": 39, "hot2": 39}
        finally:
            c.close()
            m.close()
