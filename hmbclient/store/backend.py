"""Where a store keeps its table: in memory, or in an SQLite file (stdlib ``sqlite3``).

Both answer ``get``/``put``/``erase``/``keys``/``items``/``clear`` and hold ``ops.Entry``
values. The SQLite backend keeps each entry as its tagged JSON (see ``ops``) in one table
``store(key TEXT PRIMARY KEY, value TEXT, expiry INTEGER)``; a master built on it still
rebuilds it from the state topic at start-up (the topic is the truth), so the file is a cache
that survives the process and keeps memory small.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from hmbclient.store.ops import Entry, decode_key, decode_value, encode_key, encode_value

__all__ = ["Backend", "MemoryBackend", "SqliteBackend"]


class Backend:
    """The interface (see the module docstring)."""

    def get(self, key: Any) -> Entry | None:
        raise NotImplementedError

    def put(self, key: Any, entry: Entry) -> None:
        raise NotImplementedError

    def erase(self, key: Any) -> None:
        raise NotImplementedError

    def keys(self) -> list[Any]:
        raise NotImplementedError

    def items(self) -> Iterator[tuple[Any, Entry]]:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources."""


class MemoryBackend(Backend):
    """A dict."""

    def __init__(self) -> None:
        self._d: dict[Any, Entry] = {}
        self._lock = threading.Lock()

    def get(self, key: Any) -> Entry | None:
        return self._d.get(key)

    def put(self, key: Any, entry: Entry) -> None:
        with self._lock:
            self._d[key] = entry

    def erase(self, key: Any) -> None:
        with self._lock:
            self._d.pop(key, None)

    def keys(self) -> list[Any]:
        with self._lock:
            return list(self._d)

    def items(self) -> Iterator[tuple[Any, Entry]]:
        with self._lock:
            return iter(list(self._d.items()))

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


class SqliteBackend(Backend):
    """An SQLite file.

    Args:
        path: the database file (created if missing; ``":memory:"`` for a private one).
    """

    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS store (key TEXT PRIMARY KEY, value TEXT, expiry INTEGER)")
            self._db.commit()

    @staticmethod
    def _k(key: Any) -> str:
        return encode_key(key).decode()

    def get(self, key: Any) -> Entry | None:
        with self._lock:
            row = self._db.execute("SELECT value, expiry FROM store WHERE key = ?", (self._k(key),)).fetchone()
        return None if row is None else Entry(decode_value(json.loads(row[0])), row[1])

    def put(self, key: Any, entry: Entry) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO store (key, value, expiry) VALUES (?, ?, ?)",
                (self._k(key), json.dumps(encode_value(entry.value)), entry.expiry_ms),
            )
            self._db.commit()

    def erase(self, key: Any) -> None:
        with self._lock:
            self._db.execute("DELETE FROM store WHERE key = ?", (self._k(key),))
            self._db.commit()

    def keys(self) -> list[Any]:
        with self._lock:
            rows = self._db.execute("SELECT key FROM store").fetchall()
        return [decode_key(r[0].encode()) for r in rows]

    def items(self) -> Iterator[tuple[Any, Entry]]:
        with self._lock:
            rows = self._db.execute("SELECT key, value, expiry FROM store").fetchall()
        return iter([(decode_key(k.encode()), Entry(decode_value(json.loads(v)), x)) for k, v, x in rows])

    def clear(self) -> None:
        with self._lock:
            self._db.execute("DELETE FROM store")
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()
