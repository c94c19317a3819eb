"""EmbeddedBroker: one broker in this process, for tests and local work.

    with EmbeddedBroker(port=0, log_dir=path) as broker:      # or broker.start() / broker.stop()
        broker.bootstrap                                      # "127.0.0.1:PORT"

``stop()`` then ``start()`` restarts on the same port with the same log directory (a temp dir
made when ``log_dir`` is None survives a restart and is removed by ``close()`` / leaving the
``with`` block), so clients can test reconnects and recovery.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from hmbclient.broker.broker import Broker
from hmbclient.broker.config import BrokerConfig
from hmbclient.metrics import Metrics

__all__ = ["EmbeddedBroker"]


class EmbeddedBroker:
    """A real Kafka-protocol broker on 127.0.0.1 (by default) in background threads.

    Args:
        port: listen port (0: pick a free one; read ``.port`` after start).
        log_dir: data directory (None: a temp dir removed on close).
        **config: any BrokerConfig setting (snake_case or dotted names), e.g.
            ``num_partitions=3``, ``log_segment_bytes=1 << 20``, ``zookeeper_connect=...``.
    Raises:
        ConfigError: an unknown or invalid setting.
    """

    def __init__(self, port: int = 0, log_dir: str | None = None, **config: Any) -> None:
        self._owns_dir = log_dir is None
        self._log_dir = log_dir or tempfile.mkdtemp(prefix="hmb-broker-")
        try:
            self.config = BrokerConfig(port=port, log_dirs=(self._log_dir,), **config)
        except BaseException:
            if self._owns_dir:
                shutil.rmtree(self._log_dir, ignore_errors=True)
            raise
        self._broker: Broker | None = None
        self._port = port

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            raise RuntimeError("the broker is not started")
        return self._broker

    @property
    def metrics_registry(self) -> Metrics | None:
        """The running broker's metrics registry (None while stopped); a restart makes a new
        one, which exporters given this object follow."""
        return self._broker.metrics_registry if self._broker is not None else None

    @property
    def host(self) -> str:
        return self.config.advertised_host_name or self.config.host

    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self._port}"

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def log_dir(self) -> str:
        return self._log_dir

    @property
    def running(self) -> bool:
        return self._broker is not None and self._broker.running

    def start(self) -> EmbeddedBroker:
        """Start (or restart, on the same port) the broker. Returns self.

        Raises:
            StorageError: the log directory cannot be recovered.
            OSError: the port is taken.
        """
        if self.running:
            return self
        cfg = self.config if self._port == self.config.port else self.config.replace(port=self._port)
        broker = Broker(cfg)
        broker.start()
        self._broker = broker
        self._port = broker.port
        return self

    def stop(self) -> None:
        """Stop serving (idempotent); the data stays for a later ``start()``."""
        if self._broker is not None:
            self._broker.stop()
            self._broker = None

    def close(self) -> None:
        """Stop and remove the temp log dir if this object made it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedBroker({self.bootstrap}, log_dir={self._log_dir!r}, running={self.running})"
