"""Data stores (the Zeek Broker design) on topics: a master holding a key-value table and clones
mirroring it.

    from hmbclient.store import MasterStore, CloneStore
    m = MasterStore("sessions", **{"bootstrap.servers": "127.0.0.1:9092"})
    c = CloneStore("sessions", **{"bootstrap.servers": "127.0.0.1:9092"})
    c.put("k", 1); c.add("hits", 1); c.put_unique("lock", "me")   # -> True or False
    c.await_idle(10); m.await_idle(10); m.get("k")                # -> 1

See :mod:`hmbclient.store.stores` for the topics, sequence numbers, resynchronisation and what
idle means; :mod:`hmbclient.store.ops` for the commands.
"""

from hmbclient.store.backend import Backend, MemoryBackend, SqliteBackend
from hmbclient.store.ops import StoreTypeError
from hmbclient.store.stores import CloneStore, MasterStore, StoreTimeoutError

__all__ = ["MasterStore", "CloneStore", "Backend", "MemoryBackend", "SqliteBackend", "StoreTypeError", "StoreTimeoutError"]
