"""MasterStore and CloneStore: the Zeek Broker data stores, built on two topics per store.

Topics of a store ``N`` (created on first use, one partition each):

* ``_store.N.state`` (``cleanup.policy=compact``): the master's table. Record key ``b"k"`` +
  the JSON store key, value ``{"v": value, "x": expiry ms or null, "s": seq, "c": command
  offset}``; an erase is a tombstone (null value). Key ``b"m"`` is the master's meta record,
  written after each batch of commands and every ``heartbeat_ms``: ``{"e": master epoch, "s":
  last seq, "c": next command offset, "a": {clone: last applied write}, "r": {clone: {write:
  put_unique answer}}, "t": wall ms}``.
* ``_store.N.cmd`` (``cleanup.policy=delete``): what clones send the master: their writes
  (``{"op", "c": clone id, "n": write number, ...}``), ``hello``, ``ack`` (the seq a clone has
  applied; also its keepalive) and ``bye``.

The master is the only writer of the state topic. It applies commands one at a time (its own
and the clones', in command-topic order) with ``ops.apply``, writes the resulting records in
order, then the meta record. Sequence numbers: every data record and tombstone of one master
incarnation (epoch) takes the next seq. A clone that has caught up checks that each data record
carries its count + 1 and each meta record its count: a mismatch (compaction removed records it
had not read yet) or a new epoch (the master restarted) makes it *resynchronise*: read the
compacted topic from the start into a fresh table, then swap it in; reads are answered from the
old table meanwhile.

Restart of the master: it rebuilds its table from the state topic (the topic is the truth; a
SQLite backend is rebuilt too) and continues the command topic after the last command it had
applied (the highest ``c`` of any record, so a command whose records were written before a crash
is not applied twice; one without records is applied again, which the commands tolerate:
put/erase/clear are idempotent, put_unique finds the key, add is written before it can be
repeated). A new epoch starts.

Idle (``await_idle``), as the Zeek Broker defines it:

* master: the command topic is drained (nothing buffered from a writer) and every live clone
  (heard from within ``clone_timeout_ms``) has acknowledged the latest seq;
* clone: connected (a meta record within ``master_timeout_ms``), its input drained (position
  at the state topic's end), its own writes acknowledged (meta ``a``).

Status: a clone reports ``"master_available"`` / ``"master_unavailable"`` (no meta record for
``master_timeout_ms``; reads keep working from its table, writes wait in the command topic) and
``"resynchronized"`` to the listeners given to ``add_status_listener`` (called on its thread).

The clients are the SDK's own: a sync ``Producer`` (acks=-1) and a ``SimpleConsumer`` of the
bootstrap broker, which must lead the store's partitions (a standalone broker, or the leader).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from hmbclient.admin import create_topic
from hmbclient.clock import wall_ms
from hmbclient.consumer.simple import LATEST_TIME, FetchRequest, SimpleConsumer
from hmbclient.errors import BrokerError, ConfigError, ErrorCode, HmbError
from hmbclient.net.retry import retry_policy
from hmbclient.producer import Producer, ProducerData
from hmbclient.store.backend import Backend, MemoryBackend, SqliteBackend
from hmbclient.store.ops import (
    Entry,
    StoreTypeError,
    apply,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = ["MasterStore", "CloneStore", "StoreTimeoutError", "expect"]

log = logging.getLogger("hmbclient.store")

_META = b"m"
_FETCH_BYTES = 1 << 20


class StoreTimeoutError(HmbError):
    """A write was not answered by the master in time."""


def _settings(settings: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    s = dict(settings)
    boot = None
    for k in ("bootstrap.servers", "bootstrap_servers", "metadata.broker.list"):
        if k in s:
            boot = s.pop(k)
    if not boot:
        raise ConfigError("a store needs bootstrap.servers")
    known = {"heartbeat.ms", "clone.timeout.ms", "master.timeout.ms", "replication.factor"}
    unknown = set(s) - known
    if unknown:
        raise ConfigError(f"unknown store settings {sorted(unknown)} (known: bootstrap.servers, {', '.join(sorted(known))})")
    return str(boot), s


def _json(value: bytes | None) -> Any:
    return None if value is None else json.loads(value)


class _Topics:
    def __init__(self, name: str, bootstrap: str, replication_factor: int) -> None:
        self.state = f"_store.{name}.state"
        self.cmd = f"_store.{name}.cmd"
        self.bootstrap = bootstrap
        host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
        self.host, self.port = host, int(port)
        self.rf = replication_factor

    def ensure(self) -> None:
        for topic, configs in (
            (self.state, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1", "segment.bytes": str(1 << 20)}),
            # Retention as the broker's (writes buffered for an absent master must outlive its
            # absence); small segments so it can free what the master has applied.
            (self.cmd, {"cleanup.policy": "delete", "segment.bytes": str(16 << 20)}),
        ):
            try:
                create_topic(self.bootstrap, topic, 1, self.rf, configs=configs)
            except BrokerError as e:
                if e.errno != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise

    def consumer(self, wait_ms: int) -> SimpleConsumer:
        return SimpleConsumer(self.host, self.port, prefetch=False, fetch_wait_max_ms=wait_ms, fetch_min_bytes=1, so_timeout_ms=max(10_000, wait_ms * 4))

    def producer(self) -> Producer:
        return Producer(metadata_broker_list=self.bootstrap, producer_type="sync", request_required_acks=-1)


# A topic another process has just created may not have its leader yet: the start-up reads
# retry its retriable errors (UnknownTopicOrPartition, LeaderNotAvailable) for a while.
_STARTUP_RETRY = {"max_retries": 100, "backoff_ms": 50, "backoff_max_ms": 500, "deadline_ms": 15_000}


def _read(consumer: SimpleConsumer, topic: str, offset: int) -> list[Any]:
    return list(consumer.fetch(FetchRequest(topic, 0, offset, _FETCH_BYTES)))


def _end(consumer: SimpleConsumer, topic: str) -> int:
    return consumer.get_offsets_before(topic, 0, LATEST_TIME, 1)[0]


def _backend(spec: Backend | str) -> Backend:
    if isinstance(spec, Backend):
        return spec
    if spec == "memory":
        return MemoryBackend()
    if spec.startswith("sqlite:"):
        return SqliteBackend(spec[len("sqlite:") :])
    raise ConfigError(f"backend must be 'memory', 'sqlite:<path>' or a Backend, not {spec!r}")


def expect(synced: bool, epoch: str | None, count: int, meta: dict[str, Any] | None, data_seq: int | None) -> tuple[bool, int]:
    """A clone's sequence check of one record of the state topic: ``(gap, new count)``.

    Args:
        synced: the clone has a table for the current epoch (caught up once).
        epoch: the master epoch of that table.
        count: updates counted so far (the seq of the last one).
        meta: the record, if it is a meta record.
        data_seq: the seq of a data record; None for a tombstone (or a meta record).
    Returns:
        Whether the record reveals a gap (missed updates, or a new master epoch), and the
        count after it. Cases: a meta record must carry the same epoch and the count; a data
        record the count + 1; a tombstone counts one and carries nothing to check.
    """
    if meta is not None:
        s = int(meta.get("s", 0))
        return (synced and (meta.get("e") != epoch or s != count)), s
    if data_seq is None:
        return False, count + 1
    return (synced and data_seq != count + 1), count + 1


class _Reads:
    """What both roles answer from their table."""

    _table: Backend

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``.

        Args:
            key: the key.
            default: returned when absent.
        Returns:
            The value, or ``default``.
        """
        e = self._table.get(key)
        return default if e is None else e.value

    def exists(self, key: Any) -> bool:
        """Whether ``key`` is in the table.

        Args:
            key: the key.
        Returns:
            True if present.
        """
        return self._table.get(key) is not None

    def keys(self) -> list[Any]:
        """Every key."""
        return self._table.keys()

    def items(self) -> dict[Any, Any]:
        """The whole table as a dict."""
        return {k: e.value for k, e in self._table.items()}


def _expiry_ms(expiry_s: float | None) -> int | None:
    return None if expiry_s is None else int(expiry_s * 1000)


class _Commands(_Reads):
    """The write commands both roles take: the master applies them (in command-topic order,
    with the clones'), a clone forwards them to the master and sees their effect when the
    master's update comes back. A role implements ``_command`` (send one command) and
    ``_unique`` (send a put_unique and wait for the master's answer)."""

    def _command(self, cmd: dict[str, Any]) -> None:
        raise NotImplementedError

    def _unique(self, cmd: dict[str, Any], timeout_s: float) -> bool:
        raise NotImplementedError

    def put(self, key: Any, value: Any, expiry_s: float | None = None) -> None:
        """Set ``key`` to ``value``.

        Args:
            key: the key.
            value: the value.
            expiry_s: erase it after this many seconds (None: never).
        """
        self._command({"op": "put", "k": key, "v": value, "x": _expiry_ms(expiry_s)})

    def put_unique(self, key: Any, value: Any, expiry_s: float | None = None, timeout_s: float = 30.0) -> bool:
        """Insert ``key`` only if absent, as the master decides.

        Args:
            key: the key.
            value: the value.
            expiry_s: as for ``put``.
            timeout_s: how long to wait for the master's answer.

        Returns:
            Whether the master inserted it.

        Raises:
            StoreTimeoutError: no answer in time (the master may still apply it).
        """
        return self._unique({"op": "put_unique", "k": key, "v": value, "x": _expiry_ms(expiry_s)}, timeout_s)

    def erase(self, key: Any) -> None:
        """Remove ``key``.

        Args:
            key: the key.
        """
        self._command({"op": "erase", "k": key})

    def expire(self, key: Any, expiry_s: float) -> None:
        """Erase ``key`` after ``expiry_s`` seconds (its value as it is now, unchanged meanwhile).

        Args:
            key: the key.
            expiry_s: seconds from now.
        """
        e = self._table.get(key)
        if e is not None:
            self._command({"op": "put", "k": key, "v": e.value, "x": int(expiry_s * 1000)})

    def add(self, key: Any, delta: Any) -> None:
        """Add to a counter, a set, a table (``(k, v)``) or a list.

        Args:
            key: the key.
            delta: what to add.

        Raises:
            StoreTypeError: the value does not take it (the master raises it; a clone's
                command is refused by the master and changes nothing).
        """
        self._command({"op": "add", "k": key, "d": delta})

    def subtract(self, key: Any, delta: Any) -> None:
        """The inverse of ``add``.

        Args:
            key: the key.
            delta: what to subtract.

        Raises:
            StoreTypeError: the value does not take it (as for ``add``).
        """
        self._command({"op": "subtract", "k": key, "d": delta})

    def clear(self) -> None:
        """Erase every key."""
        self._command({"op": "clear"})


class MasterStore(_Commands):
    """The master of store ``name``: holds the table and applies every write.

    Args:
        name: the store's name (part of its topic names: ``[a-zA-Z0-9._-]``).
        backend: "memory", "sqlite:<path>" or a ``Backend``.
        **settings: ``bootstrap.servers`` (required), ``heartbeat.ms`` (500),
            ``clone.timeout.ms`` (5000), ``replication.factor`` (1).
    Raises:
        ConfigError: a missing or unknown setting.
    """

    def __init__(self, name: str, *, backend: Backend | str = "memory", **settings: Any) -> None:
        boot, s = _settings(settings)
        self.name = name
        self.heartbeat_ms = int(s.get("heartbeat.ms", 500))
        self.clone_timeout_ms = int(s.get("clone.timeout.ms", 5000))
        self._topics = _Topics(name, boot, int(s.get("replication.factor", 1)))
        self._table = _backend(backend)
        self._topics.ensure()
        self._producer = self._topics.producer()
        self._consumer = self._topics.consumer(min(100, self.heartbeat_ms))
        # Without a wait: used right after local writes, so a burst of them is not paced by
        # the command topic's long poll.
        self._busy_consumer = self._topics.consumer(0)
        self.epoch = uuid.uuid4().hex
        self.seq = 0
        self._cmd_next = 0
        self._acks: dict[str, int] = {}  # clone -> last write number applied
        self._clones: dict[str, tuple[int, float]] = {}  # clone -> (acked seq, last heard, monotonic s)
        self._expiries: dict[Any, int] = {}
        self._local: queue.Queue[tuple[dict[str, Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        retry_policy(**_STARTUP_RETRY)(self._load)
        self._write_meta({})
        self._thread = threading.Thread(target=self._run, name=f"store-master-{name}", daemon=True)
        self._thread.start()

    # -- start-up --------------------------------------------------------------------------
    def _load(self) -> None:
        t = self._topics
        self._table.clear()
        end = _end(self._consumer, t.state)
        offset = 0
        meta: dict[str, Any] = {}
        max_cmd = -1
        while offset < end:
            msgs = _read(self._consumer, t.state, offset)
            if not msgs:
                break
            for m in msgs:
                offset = m.offset + 1
                if m.key == _META:
                    meta = _json(m.value) or meta
                    continue
                key = decode_key(m.key)
                if m.value is None:
                    self._table.erase(key)
                    self._expiries.pop(key, None)
                    continue
                rec = _json(m.value)
                self._table.put(key, Entry(decode_value(rec["v"]), rec.get("x")))
                if rec.get("x") is not None:
                    self._expiries[key] = rec["x"]
                self.seq = max(self.seq, rec.get("s", 0))
                max_cmd = max(max_cmd, rec.get("c", -1))
        self.seq = max(self.seq, meta.get("s", 0))
        self._cmd_next = max(meta.get("c", 0), max_cmd + 1)
        self._acks = {k: int(v) for k, v in meta.get("a", {}).items()}
        log.info("store %s: master loaded %d keys from %s (next command %d)", self.name, len(self._table.keys()), t.state, self._cmd_next)

    # -- the loop --------------------------------------------------------------------------
    def _write(self, key: Any, entry: Entry | None, cmd_offset: int) -> None:
        self.seq += 1
        if entry is None:
            self._producer.send(ProducerData(self._topics.state, encode_key(key), [None]))
            self._table.erase(key)
            self._expiries.pop(key, None)
            return
        rec = {"v": encode_value(entry.value), "x": entry.expiry_ms, "s": self.seq, "c": cmd_offset}
        self._producer.send(ProducerData(self._topics.state, encode_key(key), [json.dumps(rec).encode()]))
        self._table.put(key, entry)
        if entry.expiry_ms is not None:
            self._expiries[key] = entry.expiry_ms
        else:
            self._expiries.pop(key, None)

    def _write_meta(self, results: dict[str, dict[str, Any]]) -> None:
        meta = {"e": self.epoch, "s": self.seq, "c": self._cmd_next, "a": self._acks, "r": results, "t": wall_ms()}
        self._producer.send(ProducerData(self._topics.state, _META, [json.dumps(meta).encode()]))

    def _apply(self, cmd: dict[str, Any], cmd_offset: int) -> Any:
        try:
            changes, result = apply(self._table.get, cmd, wall_ms(), self._table.keys)
        except (StoreTypeError, TypeError, ValueError, KeyError) as e:
            # Case: a command that cannot apply (a type mismatch, a malformed clone command):
            # answered and skipped, never retried forever.
            log.warning("store %s: command %s refused: %s", self.name, cmd.get("op"), e)
            return e
        for key, entry in changes:
            self._write(key, entry, cmd_offset)
        return result

    def _decode_cmd(self, raw: dict[str, Any]) -> dict[str, Any]:
        cmd = dict(raw)
        for f in ("k", "v", "d"):
            if f in cmd:
                cmd[f] = decode_value(cmd[f])
        return cmd

    def _run(self) -> None:
        last_meta = time.monotonic()
        while not self._stop.is_set():
            try:
                dirty = self._step()
                now = time.monotonic()
                if dirty or now - last_meta >= self.heartbeat_ms / 1000.0:
                    with self._lock:
                        self._write_meta(dirty or {})
                    last_meta = now
            except Exception as e:  # the broker away, a send failed: try again shortly
                if self._stop.is_set():
                    return
                log.warning("store %s master: %s", self.name, e)
                self._stop.wait(0.2)

    def _step(self) -> dict[str, dict[str, Any]] | None:
        """One round: local writes, then the command topic, then expiries; the put_unique
        answers for clones, or None when nothing was applied."""
        results: dict[str, dict[str, Any]] = {}
        applied = False
        with self._lock:
            while True:
                try:
                    cmd, fut = self._local.get_nowait()
                except queue.Empty:
                    break
                r = self._apply(cmd, -1)
                applied = True
                (fut.set_exception if isinstance(r, Exception) else fut.set_result)(r)
        msgs = _read(self._busy_consumer if applied else self._consumer, self._topics.cmd, self._cmd_next)
        now_s = time.monotonic()
        with self._lock:
            for m in msgs:
                try:
                    raw = _json(m.value) or {}
                    if not isinstance(raw, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    log.warning("store %s: command at %d is not JSON (%s): skipped", self.name, m.offset, e)
                    self._cmd_next = m.offset + 1
                    continue
                cid = raw.get("c", "")
                op = raw.get("op")
                if op in ("hello", "ack"):
                    self._clones[cid] = (int(raw.get("s", -1)), now_s)
                elif op == "bye":
                    self._clones.pop(cid, None)
                else:
                    try:
                        cmd = self._decode_cmd(raw)
                    except StoreTypeError as e:
                        cmd = {"op": f"undecodable ({e})"}
                    r = self._apply(cmd, m.offset)
                    applied = True
                    self._acks[cid] = int(raw.get("n", 0))
                    self._clones[cid] = (self._clones.get(cid, (-1, now_s))[0], now_s)
                    if op == "put_unique":
                        results.setdefault(cid, {})[str(raw.get("n"))] = r if not isinstance(r, Exception) else None
                self._cmd_next = m.offset + 1
            if msgs and not applied:
                applied = True  # acks moved the command position: worth a meta record
            now = wall_ms()
            for key, x in list(self._expiries.items()):
                if x <= now:
                    self._apply({"op": "expire", "k": key}, -1)
                    applied = True
            for cid, (_, heard) in list(self._clones.items()):
                if now_s - heard > self.clone_timeout_ms / 1000.0:
                    log.info("store %s: clone %s timed out", self.name, cid)
                    del self._clones[cid]
        return results if applied else None

    # -- writes ----------------------------------------------------------------------------
    def _submit(self, cmd: dict[str, Any], timeout_s: float = 30.0) -> Any:
        fut: Future[Any] = Future()
        self._local.put((cmd, fut))
        try:
            return fut.result(timeout_s)
        except TimeoutError as e:
            raise StoreTimeoutError(f"store {self.name}: {cmd['op']} not applied in {timeout_s} s") from e

    def _command(self, cmd: dict[str, Any]) -> None:
        self._submit(cmd)

    def _unique(self, cmd: dict[str, Any], timeout_s: float) -> bool:
        return bool(self._submit(cmd, timeout_s))

    def await_idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until idle (see the module docstring).

        Args:
            timeout_s: how long to wait.
        Returns:
            True if idle, False on timeout.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                seq, nxt = self.seq, self._cmd_next
                clones = dict(self._clones)
            try:
                drained = self._local.empty() and _end(self._consumer, self._topics.cmd) <= nxt
            except HmbError:
                drained = False
            if drained and all(s >= seq for s, _ in clones.values()):
                return True
            time.sleep(0.05)
        return False

    def clones(self) -> list[str]:
        """The ids of the clones heard from within ``clone.timeout.ms``."""
        with self._lock:
            return sorted(self._clones)

    def close(self) -> None:
        """Stop the master (its table stays in the state topic)."""
        self._stop.set()
        self._thread.join(10)
        self._producer.close()
        self._consumer.close()
        self._busy_consumer.close()
        self._table.close()


class CloneStore(_Commands):
    """A clone of store ``name``: mirrors the master's table, forwards writes to it.

    Args:
        name: the store's name.
        **settings: ``bootstrap.servers`` (required), ``heartbeat.ms`` (500),
            ``master.timeout.ms`` (3000), ``replication.factor`` (1).
    Raises:
        ConfigError: a missing or unknown setting.
    """

    def __init__(self, name: str, **settings: Any) -> None:
        boot, s = _settings(settings)
        self.name = name
        self.id = uuid.uuid4().hex[:12]
        self.heartbeat_ms = int(s.get("heartbeat.ms", 500))
        self.master_timeout_ms = int(s.get("master.timeout.ms", 3000))
        self._topics = _Topics(name, boot, int(s.get("replication.factor", 1)))
        self._topics.ensure()
        self._producer = self._topics.producer()
        self._consumer = self._topics.consumer(100)
        self._table: Backend = MemoryBackend()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._listeners: list[Callable[[str], None]] = []
        self._stop = threading.Event()
        self._position = 0
        self._count = 0  # data records and tombstones seen this epoch
        self._epoch: str | None = None
        self._synced = False  # caught up once since the last (re)load
        self._last_meta_s = 0.0
        self._available = False
        self._acked = 0
        self._sent = 0
        self._results: dict[int, Any] = {}
        self.resyncs = 0
        self._send({"op": "hello", "s": -1})
        self._thread = threading.Thread(target=self._run, name=f"store-clone-{name}", daemon=True)
        self._thread.start()

    def add_status_listener(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(event)`` on status changes: "master_available", "master_unavailable",
        "resynchronized".

        Args:
            fn: the listener.
        """
        self._listeners.append(fn)

    def _emit(self, event: str) -> None:
        log.info("store %s clone %s: %s", self.name, self.id, event)
        for fn in list(self._listeners):
            try:
                fn(event)
            except Exception:
                log.exception("store status listener")

    def _send(self, cmd: dict[str, Any]) -> None:
        cmd = dict(cmd, c=self.id)
        self._producer.send(ProducerData(self._topics.cmd, None, [json.dumps(cmd).encode()]))

    # -- the loop --------------------------------------------------------------------------
    def _resync(self) -> None:
        """Rebuild the table from the start of the compacted topic, then swap it in."""
        table = MemoryBackend()
        end = _end(self._consumer, self._topics.state)
        offset = 0
        count = 0
        epoch = self._epoch
        meta: dict[str, Any] | None = None
        while offset < end:
            msgs = _read(self._consumer, self._topics.state, offset)
            if not msgs:
                break
            for m in msgs:
                offset = m.offset + 1
                if m.key == _META:
                    meta = _json(m.value)
                    if meta is not None:
                        epoch, count = meta.get("e"), int(meta.get("s", 0))
                        with self._cond:
                            self._on_meta(meta, live=False)  # answers and acks of every meta record
                    continue
                key = decode_key(m.key)
                count += 1  # records after the last meta record count from its seq
                if m.value is None:
                    table.erase(key)
                else:
                    rec = _json(m.value)
                    table.put(key, Entry(decode_value(rec["v"]), rec.get("x")))
                    count = int(rec.get("s", count))
        with self._cond:
            self._table = table
            self._position = offset
            self._epoch = epoch
            self._count = count
            self._synced = meta is not None
            self._cond.notify_all()

    def _on_meta(self, meta: dict[str, Any], live: bool = True) -> None:
        # A meta record read live says the master is there now; one read back by a resync
        # only if it is recent (its wall-clock stamp).
        age_s = 0.0 if live else max(0.0, (wall_ms() - int(meta.get("t", 0))) / 1000.0)
        self._last_meta_s = max(self._last_meta_s, time.monotonic() - age_s)
        self._acked = max(self._acked, int(meta.get("a", {}).get(self.id, 0)))
        for n, r in meta.get("r", {}).get(self.id, {}).items():
            self._results[int(n)] = r

    def _run(self) -> None:
        last_ack = 0.0
        acked_count = -1
        first = True
        while not self._stop.is_set():
            try:
                if first:
                    retry_policy(**_STARTUP_RETRY)(self._resync)
                    first = False
                msgs = _read(self._consumer, self._topics.state, self._position)
                gap = False
                with self._cond:
                    for m in msgs:
                        meta = rec = None
                        if m.key == _META:
                            meta = _json(m.value) or {}
                        elif m.value is not None:
                            rec = _json(m.value)
                        gap, count = expect(self._synced, self._epoch, self._count, meta, None if rec is None else rec.get("s"))
                        if gap:
                            break
                        self._count = count
                        if meta is not None:
                            if not self._synced:
                                self._epoch, self._synced = meta.get("e"), True
                            self._on_meta(meta)
                        elif rec is None:
                            self._table.erase(decode_key(m.key))
                        else:
                            self._table.put(decode_key(m.key), Entry(decode_value(rec["v"]), rec.get("x")))
                        self._position = m.offset + 1
                    self._cond.notify_all()
                if gap:
                    self._resync()
                    self.resyncs += 1
                    self._emit("resynchronized")
                    continue
                now = time.monotonic()
                available = now - self._last_meta_s < self.master_timeout_ms / 1000.0
                if available != self._available:
                    self._available = available
                    self._emit("master_available" if available else "master_unavailable")
                if self._count != acked_count or now - last_ack >= self.heartbeat_ms / 1000.0:
                    if not msgs or self._count != acked_count:
                        self._send({"op": "ack", "s": self._count})
                        acked_count = self._count
                        last_ack = now
            except Exception as e:
                if self._stop.is_set():
                    return
                log.warning("store %s clone: %s", self.name, e)
                self._stop.wait(0.2)

    # -- writes ----------------------------------------------------------------------------
    def _write(self, cmd: dict[str, Any]) -> int:
        with self._lock:
            self._sent += 1
            n = self._sent
        out = dict(cmd, n=n)
        for f in ("k", "v", "d"):
            if f in out:
                out[f] = encode_value(out[f])
        self._send(out)
        return n

    def _command(self, cmd: dict[str, Any]) -> None:
        self._write(cmd)

    def _unique(self, cmd: dict[str, Any], timeout_s: float) -> bool:
        n = self._write(cmd)
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while n not in self._results:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreTimeoutError(f"store {self.name}: no put_unique answer in {timeout_s} s")
                self._cond.wait(left)
            return bool(self._results.pop(n))

    @property
    def master_available(self) -> bool:
        """Whether the master was heard from within ``master.timeout.ms``."""
        return self._available

    def await_idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until idle (see the module docstring).

        Args:
            timeout_s: how long to wait.
        Returns:
            True if idle, False on timeout.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                end = _end(self._consumer, self._topics.state)
            except HmbError:
                end = None
            with self._lock:
                ok = (
                    end is not None
                    and self._synced
                    and time.monotonic() - self._last_meta_s < self.master_timeout_ms / 1000.0
                    and self._position >= end
                    and self._acked >= self._sent
                )
            if ok:
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        """Say goodbye to the master and stop."""
        try:
            self._send({"op": "bye"})
        except HmbError:
            pass
        self._stop.set()
        self._thread.join(10)
        self._producer.close()
        self._consumer.close()
