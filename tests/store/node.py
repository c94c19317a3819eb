"""One store node for the multi-process tests: ``python -m tests.store.node ROLE NAME BOOTSTRAP
[SQLITE]``. Reads one JSON command per line on stdin (``["put", k, v]``, ``["dump"]``, ...),
answers one JSON line ``{"ok": result}`` or ``{"error": "..."}`` on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from hmbclient.store import CloneStore, MasterStore
from hmbclient.store.ops import decode_value, encode_value


def main() -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    role, name, boot = sys.argv[1:4]
    settings = {"bootstrap.servers": boot, "heartbeat.ms": 200}
    store: Any
    if role == "master":
        store = MasterStore(name, backend=f"sqlite:{sys.argv[4]}", **settings, **{"clone.timeout.ms": 2000})
    else:
        store = CloneStore(name, **settings, **{"master.timeout.ms": 1500})
    events: list[str] = []
    if role != "master":
        store.add_status_listener(events.append)
    print(json.dumps({"ok": "ready"}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op, args = cmd[0], [decode_value(a) for a in cmd[1:]]
        try:
            if op == "dump":
                result = store.items()
            elif op == "events":
                result = list(events)
            elif op == "idle":
                result = store.await_idle(*args)
            elif op == "quit":
                store.close()
                print(json.dumps({"ok": None}), flush=True)
                return
            else:
                result = getattr(store, op)(*[tuple(a) if isinstance(a, list) else a for a in args])
            print(json.dumps({"ok": encode_value(result)}), flush=True)
        except Exception as e:  # answered to the test, which decides
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
