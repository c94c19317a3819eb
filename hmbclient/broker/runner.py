"""Running a broker as a program: ``run_broker(config)`` and ``main(argv)``.

    python -m hmbclient.broker --port 9092 --log-dir /var/lib/hmb --broker-id 0 \\
        --num-partitions 3 --zookeeper 127.0.0.1:2181 --set log.segment.bytes=1048576

``hmb broker`` (the CLI) calls ``run_broker``. Once serving, one line goes to stdout:
``hmb broker <id> listening on <host>:<port> log.dir=<dir>`` followed, when ``--listener`` /
``listeners`` is given, by `` listeners=PROTOCOL://host:port,...`` (``BrokerProcess`` waits for it to
learn the port when started with ``--port 0``). SIGTERM and SIGINT stop the broker cleanly
(exit 0); a start-up failure (a damaged log, a taken port) exits 1 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hmbclient.broker.broker import Broker
from hmbclient.broker.config import BrokerConfig
from hmbclient.errors import ConfigError, HmbError

__all__ = ["run_broker", "broker_config", "main", "READY_PREFIX"]

READY_PREFIX = "hmb broker "


def run_broker(config: BrokerConfig, *, stop: threading.Event | None = None, on_ready: Callable[[Broker], None] | None = None, handle_signals: bool = True) -> int:
    """Start a broker and serve until ``stop`` is set or SIGTERM/SIGINT arrives.

    Args:
        config: the broker settings.
        stop: an event that ends serving (None: only signals do).
        on_ready: called with the running Broker (default: print the ready line to stdout).
        handle_signals: install SIGTERM/SIGINT handlers (main thread only).
    Returns:
        0 after a clean stop.
    Raises:
        StorageError, CoordinationError, OSError: the broker could not start.
    """
    stop = stop or threading.Event()
    if handle_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    broker = Broker(config)
    broker.start()
    try:
        if on_ready is not None:
            on_ready(broker)
        else:
            extra = ""
            if config.listeners and broker.server is not None:
                # Every listener with its bound port (port 0 in the config means ephemeral).
                extra = " listeners=" + ",".join(f"{lst.protocol}://{lst.host}:{lst.port}" for lst in broker.server.listeners)
            print(f"{READY_PREFIX}{broker.broker_id} listening on {broker.host}:{broker.port} log.dir={broker.log_dir}{extra}", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        broker.stop(remove_temp_dir=True)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hmbclient.broker", description="Run an embedded Kafka-protocol broker.")
    p.add_argument("--host", default=None, help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="listen port (0: ephemeral; default 0)")
    p.add_argument("--log-dir", default=None, help="data directory (default: a temp dir)")
    p.add_argument("--broker-id", type=int, default=None)
    p.add_argument("--num-partitions", type=int, default=None, help="partitions of auto-created topics")
    p.add_argument("--zookeeper", default=None, help="register in this ZooKeeper (host:port[,..][/chroot])")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="any broker setting (Kafka 0.8 property name), repeatable")
    p.add_argument("--listener", action="append", default=[], metavar="PROTOCOL://HOST:PORT",
                   help="a listener, repeatable (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); default PLAINTEXT on --host/--port")
    return p


def broker_config(settings: Sequence[str] = (), *, defaults: Mapping[str, Any] | None = None,
                  **options: Any) -> BrokerConfig:
    """Build a BrokerConfig from ``NAME=VALUE`` strings, the one parser of ``--set``.

    Only BrokerConfig knows the names: any spelling it accepts (``num.partitions``,
    ``num_partitions``, an alias such as ``log.dir``) works, so a field added to BrokerConfig
    is settable here at once. Layers, lowest first: ``defaults`` (the caller's own defaults),
    ``settings`` (a name given twice: the last wins), then ``options`` whose value is not None
    (dedicated command-line options, which win). A value ``@FILE`` is FILE's first line and
    ``@-`` a line of stdin, so a password need not appear in the process list.

    Raises:
        ConfigError: an item without ``=``, an unknown name, or a bad value; the message
            names the key.
    """
    props: dict[str, str] = {}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set needs NAME=VALUE, got {item!r}")
        value = value.strip()
        if value.startswith("@"):  # a secret from a file's first line (@-: stdin), not argv
            value = _read_value(value[1:], name.strip())
        props[name.strip()] = value
    given = {k: v for k, v in options.items() if v is not None}
    return BrokerConfig.from_properties(defaults or {}).replace(**props).replace(**given)


def _read_value(source: str, name: str) -> str:
    try:
        if source == "-":
            return sys.stdin.readline().rstrip("\r\n")
        with open(source, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except OSError as e:
        raise ConfigError(f"--set {name}=@{source}: cannot read it: {e.strerror}") from None


def config_from_args(argv: Sequence[str] | None = None) -> BrokerConfig:
    """Parse command-line arguments into a BrokerConfig.

    Raises:
        ConfigError: a bad ``--set`` item, an unknown or invalid setting; SystemExit on bad
            syntax.
    """
    args = _parser().parse_args(argv)
    return broker_config(args.set, host=args.host, port=args.port, log_dirs=args.log_dir,
                         broker_id=args.broker_id, num_partitions=args.num_partitions,
                         zookeeper_connect=args.zookeeper, listeners=tuple(args.listener) or None)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m hmbclient.broker``; returns the exit status."""
    try:
        config = config_from_args(argv)
        return run_broker(config)
    except (HmbError, OSError) as e:
        print(f"hmb broker: cannot start: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
