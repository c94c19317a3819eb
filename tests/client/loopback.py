"""A small real TCP server on 127.0.0.1 for client tests: subclasses implement ``handle``,
which runs in its own thread for every accepted connection. ``close`` shuts the listener and
every connection it tracked (``self._conns``)."""

from __future__ import annotations

import socket
import threading
from typing import Any, Self


def close_quietly(*socks: Any) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


class LoopbackServer:
    def __init__(self) -> None:
        # Subclasses set their own state *before* calling this: the accept thread starts here.
        self._lsock = socket.socket()
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind(("127.0.0.1", 0))
        self._lsock.listen(16)
        self.host, self.port = self._lsock.getsockname()
        self._conns: list[Any] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self._lsock.accept()
            except OSError:
                return
            self._conns.append(c)
            threading.Thread(target=self.handle, args=(c,), daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._lsock.close()
        close_quietly(*self._conns)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
