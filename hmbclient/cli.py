"""The ``hmb`` command: local servers, produce/consume, offsets, topics, groups, and the demo.

Built on argparse (standard library: no extra dependency, sub-commands and help for free) and
tqdm (a small, well-kept progress bar that writes to stderr and turns itself off when stderr is
not a terminal, so piping ``hmb consume`` stays clean).

Errors are one line on stderr naming the problem, exit code 1; ``--debug`` shows the traceback.

Connecting securely: the client commands (produce, consume, offsets, topics) take
``-X NAME=VALUE`` (repeatable, as kcat does) for the client security settings by their Kafka
property names (``security.protocol``, ``ssl.cafile``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ...; the names and aliases of ``hmbclient.config.SecurityConfig``). A value
``@FILE`` is read from FILE's first line and ``@-`` from stdin, so a password need not appear in
the process list.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any, TypeAlias

from hmbclient.errors import BrokerError, HmbError

__all__ = ["main", "build_parser", "format_message"]

log = logging.getLogger("hmbclient.cli")

DEFAULT_BROKER_PORT = 9092
DEFAULT_BROKERS = f"127.0.0.1:{DEFAULT_BROKER_PORT}"


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit code 1."""


# --- output formatting (kcat -f style) -------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}


def format_message(fmt: str, topic: str, partition: int, offset: int, key: bytes | None,
                   value: bytes | None, timestamp: int | None) -> bytes:
    """Render one message with kcat's ``-f`` tokens.

    Tokens: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%s`` value,
    ``%K`` key length, ``%S`` value length (-1 for null), ``%T`` timestamp (ms), ``%%`` a
    percent sign; backslash escapes ``\\n``, ``\\t``, ``\\r``, ``\\0``, ``\\\\``.
    Null keys/values render as empty.
    """
    out = bytearray()
    i = 0
    n = len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%" and i + 1 < n:
            t = fmt[i + 1]
            i += 2
            if t == "t":
                out += topic.encode()
            elif t == "p":
                out += str(partition).encode()
            elif t == "o":
                out += str(offset).encode()
            elif t == "k":
                out += key or b""
            elif t == "s":
                out += value or b""
            elif t == "K":
                out += str(-1 if key is None else len(key)).encode()
            elif t == "S":
                out += str(-1 if value is None else len(value)).encode()
            elif t == "T":
                out += str(-1 if timestamp is None else timestamp).encode()
            elif t == "%":
                out += b"%"
            else:
                raise CliError(f"unknown format token %{t} (known: %t %p %o %k %s %K %S %T %%)")
        elif c == "\\" and i + 1 < n:
            out += _ESCAPES.get(fmt[i + 1], fmt[i : i + 2]).encode()
            i += 2
        else:
            out += c.encode()
            i += 1
    return bytes(out)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: IO[str]) -> None:
    rows = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out.write(line.rstrip() + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set():
        stop.wait(0.5)


# --- commands ---------------------------------------------------------------------------------


def cmd_broker(args: argparse.Namespace) -> int:
    from hmbclient.broker.runner import broker_config, run_broker

    # BrokerConfig is the one place that knows the setting names: --set takes any of them.
    config = broker_config(args.set, defaults={"port": DEFAULT_BROKER_PORT}, host=args.host,
                           port=args.port, log_dirs=args.log_dir, broker_id=args.broker_id,
                           num_partitions=args.num_partitions, zookeeper_connect=args.zookeeper,
                           listeners=tuple(args.listener) or None)
    return run_broker(config)  # serves until Ctrl-C / SIGTERM


def _security_store(args: argparse.Namespace, kind: str, file_opt: str) -> Any:
    from hmbclient.broker.security.tool import open_store

    path = getattr(args, file_opt)
    if (path is None) == (args.zookeeper is None):
        raise CliError(f"name the store: --{file_opt} FILE or --zookeeper HOST:PORT (exactly one)")
    return open_store(kind, path=path, zookeeper=args.zookeeper)


def cmd_users(args: argparse.Namespace) -> int:
    from hmbclient.broker.security.tool import add_user

    with _security_store(args, "users", "credentials") as store:
        if args.action == "add":
            if not args.password_stdin:
                raise CliError("give the password on stdin with --password-stdin (never on the command line)")
            password = sys.stdin.readline().rstrip("\r\n")
            try:
                add_user(store, args.name, password, tuple(args.mechanism or ("SCRAM-SHA-256", "SCRAM-SHA-512")), args.iterations)
            except ValueError as e:
                raise CliError(str(e)) from None
            print(f"user {args.name}: {', '.join(args.mechanism or ('SCRAM-SHA-256', 'SCRAM-SHA-512'))} credentials stored")
        elif args.action == "remove":
            if not store.remove(args.name):
                raise CliError(f"no user {args.name!r}")
            print(f"user {args.name} removed")
        else:
            for name, mechs in store.users().items():
                print(f"{name}\t{','.join(mechs)}")
    return 0


def _quota_line(user: str | None, client: str | None, quota: dict[str, float]) -> str:
    rates = ", ".join(f"{k}={int(v) if float(v).is_integer() else v}" for k, v in sorted(quota.items()))
    return f"user={user or ''}\tclient-id={client or ''}\t{rates}"


def cmd_quotas(args: argparse.Namespace) -> int:
    """Client quotas, as ``kafka-configs --entity-type users/clients`` handles them: with
    ``--zookeeper`` in ZooKeeper (/config/clients, /config/users); with ``--bootstrap-server``
    through the brokers (AlterClientQuotas / DescribeClientQuotas; a standalone broker keeps
    them in its dynamic-configs.json). Listing with ``--user``/``--client-id`` shows only the
    entity naming exactly those (Kafka's containsOnly filter); without, every entity."""
    if (args.zookeeper is None) == (not args.brokers_given):
        raise CliError("give one of --zookeeper HOST:PORT or --bootstrap-server HOST:PORT")
    altering = args.add is not None or bool(args.delete)
    if altering and args.user is None and args.client_id is None:
        raise CliError("name the entity: --user USER and/or --client-id ID (<default> for the default)")
    sets: dict[str, str] = {}
    for item in args.add or ():
        k, eq, v = item.partition("=")
        if not eq:
            raise CliError(f"--add takes KEY=BYTES_PER_SECOND, not {item!r}")
        sets[k.strip()] = v.strip()
    selected = args.user is not None or args.client_id is not None
    if args.zookeeper is None:
        return _quotas_over_the_wire(args, altering, sets)
    from hmbclient.broker.controller.store import ZkStore
    from hmbclient.broker.quota_configs import read_quota_configs, write_quota

    try:
        store = ZkStore(args.zookeeper)
    except Exception as e:
        raise CliError(f"ZooKeeper {args.zookeeper}: {e}") from None
    try:
        if altering:
            current = {k: v for k, v in read_quota_configs(store).entities.get((args.user, args.client_id), {}).items()}
            config = {k: str(int(v)) for k, v in current.items() if k not in args.delete}
            config.update(sets)
            try:
                write_quota(store, args.user, args.client_id, config)
            except ValueError as e:
                raise CliError(str(e)) from None
            print(f"quota of user={args.user} client-id={args.client_id}: " + (", ".join(f"{k}={v}" for k, v in sorted(config.items())) or "none"))
            return 0
        for (user, client), quota in sorted(read_quota_configs(store).entities.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
            if not selected or (user, client) == (args.user, args.client_id):
                print(_quota_line(user, client, quota))
    finally:
        store.close()
    return 0


def _quotas_over_the_wire(args: argparse.Namespace, altering: bool, sets: dict[str, str]) -> int:
    from hmbclient.admin import alter_client_quotas, describe_client_quotas

    kw: dict[str, Any] = {"api_version": args.api_version, "security": _security(args)}
    entity = {"user": args.user, "client_id": args.client_id}
    try:
        if altering:
            rates: dict[str, float] = {}
            for k, v in sets.items():
                try:
                    rates[k] = float(v)
                except ValueError:
                    raise CliError(f"{k}: {v!r} is not a rate in bytes per second") from None
            alter_client_quotas(args.brokers, set_quotas=rates, remove=args.delete, **entity, **kw)
            # (the brokers apply it on their own time, as Kafka's: what was asked, not a re-read)
            print(f"altered quota of user={args.user} client-id={args.client_id}: "
                  + ", ".join([f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in args.delete]))
            return 0
        found = describe_client_quotas(args.brokers, **entity, **kw)
    except BrokerError as e:
        raise CliError(f"client quotas: {_describe(e)}") from e
    for (user, client), quota in sorted(found.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        print(_quota_line(user, client, quota))
    return 0


def cmd_acls(args: argparse.Namespace) -> int:
    from hmbclient.broker.security.authorizer import Acl

    with _security_store(args, "acls", "acls_file") as store:
        if args.action == "list":
            for acl in store.all():
                if args.principal in (None, acl.principal):
                    print(acl)
            return 0
        if not args.principal or not args.operation or not (args.topic or args.group or args.cluster):
            raise CliError("--principal, --operation and one of --topic/--group/--cluster are needed")
        rtype, name = ("Topic", args.topic) if args.topic else ("Group", args.group) if args.group else ("Cluster", "kafka-cluster")
        try:
            acls = [Acl.make(rtype, name, args.principal, op, "Deny" if args.deny else "Allow", args.host, args.pattern)
                    for op in args.operation]
        except ValueError as e:
            raise CliError(str(e)) from None
        if args.action == "add":
            store.add(acls)
            for acl in acls:
                print(f"added: {acl}")
        else:
            n = store.remove(acls)
            if not n:
                raise CliError("no such ACL")
            print(f"removed {n} ACL(s)")
    return 0


def cmd_zookeeper(args: argparse.Namespace) -> int:
    from hmbclient.testing.zookeeper import LocalZooKeeper

    kwargs: dict[str, Any] = {}
    if args.port:
        kwargs["port"] = args.port
    if args.data_dir:
        kwargs["data_dir"] = args.data_dir
    with LocalZooKeeper(**kwargs) as zk:
        print(f"ZooKeeper serving on {zk.connect}; Ctrl-C stops it", file=sys.stderr, flush=True)
        _wait_for_signal()
    return 0


def _split_line(line: bytes, delim: bytes | None) -> tuple[bytes | None, bytes]:
    if delim is None:
        return None, line
    key, sep, value = line.partition(delim)
    if not sep:
        return None, line
    return key, value


def cmd_produce(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from hmbclient import Producer, ProducerData

    delim = args.key_delimiter.encode() if args.key_delimiter is not None else None
    producer = Producer(
        metadata_broker_list=args.brokers,
        producer_type="async",
        request_required_acks=args.acks,
        compression_codec=args.compression,
        api_version=args.api_version,
        **_client_security(args),
    )
    count = 0
    futures: list[Any] = []
    try:
        if args.file:
            size = os.path.getsize(args.file)
            stream: IO[bytes] = open(args.file, "rb")  # noqa: SIM115 - closed below
            bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"produce {args.topic}",
                       disable=args.quiet or None)
        else:
            stream = sys.stdin.buffer
            bar = None
        try:
            batch: list[bytes] = []
            key_batch: dict[bytes | None, list[bytes]] = {}
            for raw in stream:
                line = raw.rstrip(b"\r\n")
                if bar is not None:
                    bar.update(len(raw))
                if not line and args.skip_empty:
                    continue
                key, value = _split_line(line, delim)
                if delim is None:
                    batch.append(value)
                else:
                    key_batch.setdefault(key, []).append(value)
                count += 1
                if count % 1000 == 0:
                    futures.extend(_send_batches(producer, ProducerData, args.topic, batch, key_batch))
                    batch, key_batch = [], {}
                    futures = [f for f in futures if not f.done() or f.exception() is not None]
            futures.extend(_send_batches(producer, ProducerData, args.topic, batch, key_batch))
        finally:
            if bar is not None:
                bar.close()
            if stream is not sys.stdin.buffer:
                stream.close()
        producer.flush()
        for f in futures:
            f.result(timeout=args.timeout_ms / 1000)
    finally:
        producer.close()
    print(f"produced {count} messages to {args.topic}", file=sys.stderr)
    return 0


def _send_batches(producer: Any, producer_data: Any, topic: str, batch: list[bytes],
                  key_batch: dict[bytes | None, list[bytes]]) -> list[Any]:
    futures: list[Any] = []
    if batch:
        futures.extend(producer.send(producer_data(topic, None, batch)))
    for key, values in key_batch.items():
        futures.extend(producer.send(producer_data(topic, key, values)))
    return futures


def _client_security(args: argparse.Namespace) -> dict[str, Any]:
    """The ``-X NAME=VALUE`` settings, checked against SecurityConfig (``@FILE``/``@-`` read)."""
    from hmbclient.config import SecurityConfig

    given: dict[str, str] = {}
    for item in getattr(args, "client_settings", None) or ():
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise CliError(f"-X takes NAME=VALUE, not {item.split('=')[0]!r}")
        if value.startswith("@"):
            source = value[1:]
            value = sys.stdin.readline() if source == "-" else _first_line(source)
            value = value.rstrip("\r\n")
        given[name.strip()] = value
    known, other = SecurityConfig.split_properties(given)
    if other:
        raise CliError(
            f"-X {', '.join(other)}: not a client security setting "
            "(security.protocol, ssl.cafile, ssl.certfile, ssl.keyfile, ssl.password, ssl.check.hostname, "
            "ssl.crlfile, sasl.mechanism, sasl.username, sasl.password)"
        )
    SecurityConfig.from_properties(known)  # a bad value fails here, naming the property
    return known


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline()
    except OSError as e:
        raise CliError(f"cannot read {path!r}: {e.strerror}") from None


def _security(args: argparse.Namespace) -> Any:
    from hmbclient.config import SecurityConfig
    from hmbclient.net.security import Security

    return Security.from_config(SecurityConfig.from_properties(_client_security(args)))


def _first_broker(brokers: str) -> tuple[str, int]:
    from hmbclient.config import parse_broker_list

    return parse_broker_list(brokers)[0]


def _partitions(args: argparse.Namespace, topic: str) -> dict[int, tuple[str, int]]:
    """partition -> leader (host, port) from a Metadata request."""
    from hmbclient.admin import topic_partitions

    try:
        return topic_partitions(args.brokers, topic, api_version=args.api_version, security=_security(args))
    except KeyError:
        raise CliError(f"unknown topic {topic!r} on {args.brokers}") from None


def _resolve_start(consumer: Any, topic: str, partition: int, spec: str) -> int:
    from hmbclient import EARLIEST_TIME, LATEST_TIME
    from hmbclient.errors import UnsupportedByBroker

    if spec == "earliest":
        try:
            return int(consumer.get_offsets_before(topic, partition, EARLIEST_TIME, 1)[0])
        except UnsupportedByBroker:
            return 0  # HMB has no Offsets API; its logs start at 0
    if spec == "latest":
        return int(consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0])
    try:
        value = int(spec)
    except ValueError:
        raise CliError(f"--offset must be earliest, latest or a number, not {spec!r}") from None
    if value < 0:  # like kcat: -N is N messages before the end
        end = int(consumer.get_offsets_before(topic, partition, LATEST_TIME, 1)[0])
        return max(0, end + value)
    return value


def cmd_consume(args: argparse.Namespace) -> int:
    fmt = args.format if args.format is not None else "%s\\n"
    out = sys.stdout.buffer
    if args.group:
        return _consume_group(args, fmt, out)
    from hmbclient import FetchRequest, SimpleConsumer

    leaders = _partitions(args, args.topic)
    wanted = [args.partition] if args.partition is not None else sorted(leaders)
    for p in wanted:
        if p not in leaders:
            raise CliError(f"topic {args.topic!r} has no partition {p}")
    consumers: dict[tuple[str, int], Any] = {}
    remaining = args.count if args.count is not None else -1
    try:
        positions: dict[int, int] = {}
        ends: dict[int, int] = {}
        for p in wanted:
            host, port = leaders[p]
            c = consumers.get((host, port))
            if c is None:
                c = consumers[(host, port)] = SimpleConsumer(host, port, api_version=args.api_version,
                                                              client_id="hmb-cli", **_client_security(args))
            positions[p] = _resolve_start(c, args.topic, p, args.offset)
        deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms >= 0 else None
        while remaining != 0:
            got = 0
            for p in wanted:
                c = consumers[leaders[p]]
                ms = c.fetch(FetchRequest(args.topic, partition=p, offset=positions[p], max_size=args.max_bytes))
                for mo in ms:
                    if mo.offset < positions[p]:
                        continue
                    m = mo.message
                    out.write(format_message(fmt, args.topic, p, mo.offset, m.key, m.value, m.timestamp))
                    positions[p] = mo.next_offset
                    got += 1
                    remaining -= 1
                    if remaining == 0:
                        break
                if remaining == 0:
                    break
            out.flush()
            if got:
                if deadline is not None:
                    deadline = time.monotonic() + args.timeout_ms / 1000
                continue
            if args.exit_at_end and args.api_version == "hmb":
                break  # no Offsets API to ask for the end: an empty round is the end
            if args.exit_at_end:
                if not ends:
                    from hmbclient import LATEST_TIME

                    for p in wanted:
                        ends[p] = int(consumers[leaders[p]].get_offsets_before(args.topic, p, LATEST_TIME, 1)[0])
                if all(positions[p] >= ends[p] for p in wanted):
                    break
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    finally:
        for c in consumers.values():
            c.close()
    return 0


#: How long ``hmb consume --group`` waits for its group to settle before it reads.
_GROUP_SETTLE_S = 60.0


def _consume_group(args: argparse.Namespace, fmt: str, out: IO[bytes]) -> int:
    from hmbclient import Consumer
    from hmbclient.errors import ConsumerTimeoutError

    props: dict[str, Any] = {
        "group.id": args.group,
        "auto.offset.reset": "largest" if args.offset == "latest" else "smallest",
        "consumer.timeout.ms": args.timeout_ms if args.timeout_ms >= 0 else -1,
        "api.version": args.api_version,
        **_client_security(args),
    }
    if args.zookeeper:
        props["zookeeper.connect"] = args.zookeeper
        if args.brokers_given:
            props["metadata.broker.list"] = args.brokers
    else:  # no ZooKeeper: the brokers' group coordinator balances the group
        props["metadata.broker.list"] = args.brokers
    connector = Consumer.create(props)
    remaining = args.count if args.count is not None else -1
    try:
        stream = connector.create_message_streams({args.topic: 1})[args.topic][0]
        # --timeout-ms counts from the first fetch, not from the join: a coordinator may hold
        # a join for seconds (Tansu: half the session timeout) before the group settles.
        connector.await_rebalance(_GROUP_SETTLE_S)
        try:
            for mam in stream:
                out.write(format_message(fmt, mam.topic, mam.partition, mam.offset, mam.key, mam.message, None))
                remaining -= 1
                if remaining == 0:
                    break
        except ConsumerTimeoutError:
            pass
        out.flush()
        connector.commit_offsets()
    finally:
        connector.shutdown()
    return 0


def cmd_offsets(args: argparse.Namespace) -> int:
    from hmbclient import EARLIEST_TIME, LATEST_TIME, SimpleConsumer

    leaders = _partitions(args, args.topic)
    rows = []
    for p in sorted(leaders):
        host, port = leaders[p]
        c = SimpleConsumer(host, port, api_version=args.api_version, client_id="hmb-cli", **_client_security(args))
        try:
            earliest = c.get_offsets_before(args.topic, p, EARLIEST_TIME, 1)[0]
            latest = c.get_offsets_before(args.topic, p, LATEST_TIME, 1)[0]
        finally:
            c.close()
        rows.append((p, earliest, latest, latest - earliest))
    _table(("partition", "earliest", "latest", "messages"), rows, sys.stdout)
    return 0


def _parse_offset_json(text: str, source: str) -> dict[tuple[str, int], int]:
    """The offsets of a ``kafka-delete-records.sh --offset-json-file``: ``{"partitions":
    [{"topic": T, "partition": P, "offset": O}, ...], "version": 1}`` (version may be left out;
    offset -1 means the high watermark). Anything else, or a partition named twice (as Kafka's
    tool), is a CliError naming what is wrong."""
    import json

    try:
        doc = json.loads(text)
    except ValueError as e:
        raise CliError(f"{source}: not JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise CliError(f'{source}: expected {{"partitions": [{{"topic": ..., "partition": ..., "offset": ...}}], "version": 1}}')
    if doc.get("version", 1) != 1:
        raise CliError(f"{source}: version {doc.get('version')!r} is not supported (1 is)")
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(doc["partitions"]):
        ok = (isinstance(entry, dict) and isinstance(entry.get("topic"), str) and entry["topic"]
              and all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool) for k in ("partition", "offset")))
        if not ok:
            raise CliError(f"{source}: partitions[{i}] = {json.dumps(entry)}: expected a topic (string), a partition and an offset (integers)")
        if entry["partition"] < 0:
            raise CliError(f"{source}: partitions[{i}]: partition {entry['partition']} is negative")
        if entry["offset"] < -1:
            raise CliError(f"{source}: partitions[{i}]: offset {entry['offset']} (an offset >= 0, or -1 for the high watermark)")
        tp = (entry["topic"], entry["partition"])
        if tp in out:
            raise CliError(f"{source}: {tp[0]}-{tp[1]} is named twice")
        out[tp] = entry["offset"]
    if not out:
        raise CliError(f"{source}: no partitions")
    return out


def _delete_records(args: argparse.Namespace) -> int:
    from hmbclient.admin import delete_records

    if args.offset_json_file is None:
        raise CliError("--delete-records needs --offset-json-file FILE (kafka-delete-records.sh's JSON)")
    try:
        with open(args.offset_json_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CliError(f"cannot read {args.offset_json_file}: {e.strerror}") from e
    offsets = _parse_offset_json(text, args.offset_json_file)
    try:
        low = delete_records(args.brokers, offsets, timeout_ms=args.timeout_ms, api_version=args.api_version, security=_security(args))
    except ValueError as e:
        raise CliError(str(e)) from e
    except BrokerError as e:
        raise CliError(f"records not deleted: {_describe(e)}") from e
    for (t, p), lw in sorted(low.items()):
        print(f"partition: {t}-{p}\tlow_watermark: {lw}")
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from hmbclient.admin import (
        create_partitions,
        create_topic,
        delete_topics,
        describe_topics,
        list_topics,
    )

    if args.delete_records:
        return _delete_records(args)
    if args.offset_json_file is not None:
        raise CliError("--offset-json-file goes with --delete-records")
    if args.delete is not None:
        codes = delete_topics(args.brokers, args.delete, timeout_ms=args.timeout_ms, api_version=args.api_version,
                              security=_security(args), raise_errors=False)
        failed = 0
        for name in args.delete:
            code = codes.get(name, -1)
            if code == 0:
                print(f"deleted topic {name}")
            else:
                failed += 1
                print(f"hmb topics: topic {name} not deleted: {_describe(_error_class(code)())}", file=sys.stderr)
        return 1 if failed else 0
    if args.alter is not None:
        if args.partitions is None or args.replication_factor is not None:
            raise CliError("--alter NAME needs --partitions N (the new total) and no --replication-factor")
        try:
            create_partitions(args.brokers, {args.alter: args.partitions}, timeout_ms=args.timeout_ms,
                              api_version=args.api_version, security=_security(args))
        except BrokerError as e:
            raise CliError(f"topic {args.alter} not altered: {_describe(e)}") from e
        print(f"topic {args.alter} now has {args.partitions} partitions")
        return 0
    if args.create is None and (args.partitions is not None or args.replication_factor is not None or args.config):
        raise CliError("--partitions, --replication-factor and --config go with --create NAME (or --partitions with --alter NAME)")
    if args.create is not None:
        if args.partitions is None or args.replication_factor is None:
            raise CliError("--create NAME needs --partitions N and --replication-factor R")
        configs: dict[str, str] = {}
        for item in args.config:
            k, eq, v = item.partition("=")
            if not eq or not k.strip():
                raise CliError(f"--config {item!r}: expected NAME=VALUE (e.g. cleanup.policy=compact)")
            configs[k.strip()] = v.strip()
        try:
            create_topic(args.brokers, args.create, args.partitions, args.replication_factor,
                         timeout_ms=args.timeout_ms, api_version=args.api_version, security=_security(args),
                         configs=configs)
        except BrokerError as e:
            # The broker's message may not name the topic; the line on stderr should.
            raise CliError(f"topic {args.create} not created: {_describe(e)}") from e
        n = args.partitions
        print(f"created topic {args.create} ({n} partition{'' if n == 1 else 's'}, "
              f"replication factor {args.replication_factor})")
        return 0
    if args.describe is not None:
        parts = describe_topics(args.brokers, args.describe or None, api_version=args.api_version,
                                security=_security(args))
        offline = any(p.offline_replicas for p in parts)
        headers = ("topic", "partition", "leader", "replicas", "isr") + (("offline",) if offline else ())
        rows = []
        for p in parts:
            row = [p.topic, p.partition, "none" if p.leader < 0 else p.leader, _ids(p.replicas), _ids(p.isr)]
            rows.append([*row, _ids(p.offline_replicas)] if offline else row)
        _table(headers, rows, sys.stdout)
        return 0
    topics = list_topics(args.brokers, api_version=args.api_version, security=_security(args))
    _table(("topic", "partitions"), sorted(topics.items()), sys.stdout)
    return 0


def _error_class(code: int) -> type[BrokerError]:
    from hmbclient.errors import for_code

    return for_code(code)


def cmd_configs(args: argparse.Namespace) -> int:
    from hmbclient.admin import alter_configs, describe_configs

    if (args.topic is None) + (args.broker is None) + (not args.broker_default) != 2:
        raise CliError("name one resource: --topic NAME, --broker ID or --broker-default")
    kind, name = ("topic", args.topic) if args.topic is not None else ("broker", "" if args.broker_default else str(args.broker))
    what = f"{kind} {name}" if name else "the default of every broker"
    if args.set or args.delete:
        sets = {}
        for item in args.set:
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise CliError(f"--set takes NAME=VALUE, not {item!r}")
            sets[key] = value
        try:
            alter_configs(args.brokers, kind, name, sets, delete=args.delete, api_version=args.api_version, security=_security(args))
        except BrokerError as e:
            raise CliError(f"configs of {what} not altered: {_describe(e)}") from e
        print(f"altered configs of {what}: " + ", ".join([f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in args.delete]))
        return 0
    try:
        entries = describe_configs(args.brokers, kind, name, api_version=args.api_version, security=_security(args))
    except BrokerError as e:
        raise CliError(f"configs of {what}: {_describe(e)}") from e
    rows = [(e.name, "(sensitive)" if e.sensitive else _dash(e.value), e.source, "no" if e.read_only else "yes")
            for e in sorted(entries.values())]
    _table(("name", "value", "source", "dynamic"), rows, sys.stdout)
    return 0


def cmd_leader_election(args: argparse.Namespace) -> int:
    from hmbclient.admin import elect_preferred_leaders
    from hmbclient.errors import ErrorCode

    parts = None
    if args.partitions:
        parts = []
        for item in args.partitions:
            topic, colon, p = item.rpartition(":")
            if not colon or not topic or not p.isdigit():
                raise CliError(f"partitions are TOPIC:PARTITION, not {item!r}")
            parts.append((topic, int(p)))
    try:
        results = elect_preferred_leaders(args.brokers, parts, api_version=args.api_version, security=_security(args))
    except BrokerError as e:
        raise CliError(f"leader election refused: {_describe(e)}") from e
    failed = 0
    for (topic, p), code in sorted(results.items()):
        if code == ErrorCode.NONE:
            print(f"{topic}-{p}: preferred leader elected")
        elif code == ErrorCode.ELECTION_NOT_NEEDED:
            print(f"{topic}-{p}: preferred leader already leads")
        else:
            failed += 1
            print(f"{topic}-{p}: {_error_class(code).message}")
    return 1 if failed else 0


_THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def cmd_reassign(args: argparse.Namespace) -> int:
    """kafka-reassign-partitions.sh's --execute / --verify / --cancel on its JSON file."""
    import json

    from hmbclient.admin import (
        alter_partition_reassignments,
        describe_cluster,
        describe_topics,
        incremental_alter_configs,
        list_partition_reassignments,
        parse_reassignment_json,
        reassignment_throttles,
    )

    try:
        with open(args.reassignment_json_file, encoding="utf-8") as f:
            proposed = parse_reassignment_json(f.read())
    except (OSError, ValueError) as e:
        raise CliError(f"{args.reassignment_json_file}: {e}") from e
    if args.throttle is not None and not args.execute:
        raise CliError("--throttle goes with --execute")
    sec = _security(args)
    kw: dict[str, Any] = {"api_version": args.api_version, "security": sec}
    topics = sorted({t for t, _ in proposed})

    def current() -> dict[tuple[str, int], tuple[int, ...]]:
        try:
            return {(i.topic, i.partition): i.replicas for i in describe_topics(args.brokers, topics, **kw)}
        except BrokerError as e:
            raise CliError(f"cannot describe the topics: {_describe(e)}") from e

    def clear_throttles() -> None:
        brokers = sorted(describe_cluster(args.brokers, **kw)["brokers"])
        print("Clearing broker-level throttles on brokers " + ",".join(map(str, brokers)))
        for b in brokers:
            incremental_alter_configs(args.brokers, "broker", str(b), {}, delete=_THROTTLE_RATES, **kw)
        for t in topics:
            print(f"Clearing topic-level throttles on topic {t}")
            incremental_alter_configs(args.brokers, "topic", t, {}, delete=_THROTTLED_REPLICAS, **kw)

    try:
        if args.execute:
            now = current()
            rollback = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(now.get((t, p), ())),
                                                      "log_dirs": ["any"] * len(now.get((t, p), ()))} for t, p in sorted(proposed)]}
            print("Current partition replica assignment\n\n" + json.dumps(rollback, separators=(",", ":")) +
                  "\n\nSave this to use as the --reassignment-json-file option during rollback")
            if args.throttle is not None:
                for t, (lead, follow) in reassignment_throttles(now, proposed).items():
                    incremental_alter_configs(args.brokers, "topic", t, {_THROTTLED_REPLICAS[0]: lead, _THROTTLED_REPLICAS[1]: follow}, **kw)
                for b in sorted(describe_cluster(args.brokers, **kw)["brokers"]):
                    incremental_alter_configs(args.brokers, "broker", str(b), {n: str(args.throttle) for n in _THROTTLE_RATES}, **kw)
                print(f"Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed.\n"
                      f"The inter-broker throttle limit was set to {args.throttle} B/s")
            results = alter_partition_reassignments(args.brokers, {tp: list(r) for tp, r in proposed.items()}, **kw)
            failed = {tp: r for tp, r in results.items() if r[0]}
            for (t, p), (code, msg) in sorted(failed.items()):
                print(f"{t}-{p}: {msg or _error_class(code).message}")
            if failed:
                return 1
            print("Successfully started partition reassignment" + ("s" if len(proposed) > 1 else "") + " for " +
                  ",".join(f"{t}-{p}" for t, p in sorted(proposed)))
            return 0
        if args.cancel:
            results = alter_partition_reassignments(args.brokers, dict.fromkeys(proposed), **kw)
            cancelled = sorted(tp for tp, (code, _) in results.items() if code == 0)
            print("Successfully cancelled partition reassignment(s) for: " + ",".join(f"{t}-{p}" for t, p in cancelled))
            for (t, p), (code, msg) in sorted(results.items()):
                if code:
                    print(f"{t}-{p}: {msg or _error_class(code).message}")
            clear_throttles()
            return 0
        # As Kafka's tool: every reassignment of the cluster counts (throttles are cleared only
        # once none is left), and --verify exits 0 either way, having said what is in progress.
        ongoing = list_partition_reassignments(args.brokers, None, **kw)
        now = current()
        print("Status of partition reassignment:")
        for tp in sorted(proposed):
            t, p = tp
            if tp in ongoing:
                print(f"Reassignment of partition {t}-{p} is still in progress.")
            elif list(now.get(tp, ())) == proposed[tp]:
                print(f"Reassignment of partition {t}-{p} is completed.")
            else:
                print(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                      f"{','.join(map(str, now.get(tp, ())))} rather than {','.join(map(str, proposed[tp]))}.")
        if not ongoing:
            clear_throttles()
        return 0
    except BrokerError as e:
        raise CliError(f"reassignment refused: {_describe(e)}") from e


def cmd_cluster(args: argparse.Namespace) -> int:
    from hmbclient.admin import describe_cluster, describe_log_dirs

    info = describe_cluster(args.brokers, api_version=args.api_version, security=_security(args))
    print(f"cluster {info['cluster_id']}, controller {info['controller_id']}")
    _table(("broker", "host", "port"), [(b, h, p) for b, (h, p) in sorted(info["brokers"].items())], sys.stdout)
    if args.log_dirs:
        rows = []
        for b in sorted(info["brokers"]):
            for d, parts in describe_log_dirs(args.brokers, b, api_version=args.api_version, security=_security(args)).items():
                rows += [(b, d, f"{t}-{p}", size) for (t, p), size in sorted(parts.items())]
        _table(("broker", "log_dir", "partition", "bytes"), rows, sys.stdout)
    return 0


def _ids(ids: Sequence[int]) -> str:
    """Broker ids as kafka-topics.sh prints them ("1,2,3"); "-" for none, so columns stay split."""
    return ",".join(str(i) for i in ids) or "-"


def _reset_spec(args: argparse.Namespace) -> tuple[str, int]:
    import datetime as dt

    if args.to_earliest:
        return ("earliest", 0)
    if args.to_latest:
        return ("latest", 0)
    if args.shift_by is not None:
        return ("shift", args.shift_by)
    if args.to_datetime is not None:
        try:
            when = dt.datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise CliError(f"--to-datetime takes an ISO date-time (2026-11-26T06:00:00[+00:00]), not {args.to_datetime!r}") from None
        if when.tzinfo is None:
            when = when.astimezone()  # local time, as kafka-consumer-groups.sh reads it
        return ("datetime", int(when.timestamp() * 1000))
    raise CliError("--reset-offsets needs one of --to-earliest, --to-latest, --to-datetime, --shift-by")


def _reset_offsets(args: argparse.Namespace) -> int:
    from hmbclient.admin import reset_group_offsets

    if args.group is None:
        raise CliError("--reset-offsets needs the GROUP")
    spec = _reset_spec(args)
    try:
        rows = reset_group_offsets(args.brokers, args.group, spec, topics=args.topic or None, zookeeper=args.zookeeper,
                                   execute=args.execute, api_version=args.api_version,
                                   security=None if args.zookeeper else _security(args))
    except HmbError as e:
        raise CliError(f"offsets of group {args.group} not reset: {_describe(e)}") from e
    _table(("topic", "partition", "current", "new"), [(r["topic"], r["partition"], _dash(r["current"]), r["new"]) for r in rows], sys.stdout)
    print(f"offsets of group {args.group} reset" if args.execute else "dry run: nothing changed (add --execute to commit these offsets)")
    return 0


def cmd_groups(args: argparse.Namespace) -> int:
    from hmbclient.admin import describe_group, list_groups

    if args.reset_offsets:
        return _reset_offsets(args)
    if any((args.to_earliest, args.to_latest, args.to_datetime, args.shift_by is not None, args.execute, args.topic)):
        raise CliError("--to-*, --shift-by, --topic and --execute go with --reset-offsets")
    if not args.zookeeper:
        return _broker_groups(args)
    if getattr(args, "client_settings", None):
        raise CliError("-X (security settings) applies to groups the brokers coordinate (without --zookeeper); "
                       "ZooKeeper groups are read over plaintext")
    if args.group is None:
        for g in list_groups(args.zookeeper):
            print(g)
        return 0
    info = describe_group(args.zookeeper, args.group,
                          brokers=args.brokers if args.brokers_given else None,
                          api_version=args.api_version)
    print(f"group {args.group}: {len(info['members'])} member(s)")
    for m in info["members"]:
        print(f"  member {m}")
    rows = [(r["topic"], r["partition"], r["owner"] or "-", _dash(r["committed"]), _dash(r["latest"]),
             _dash(r["lag"])) for r in info["partitions"]]
    _table(("topic", "partition", "owner", "committed", "latest", "lag"), rows, sys.stdout)
    return 0


def cmd_transactions(args: argparse.Namespace) -> int:
    """Transactional ids the brokers' coordinators hold (--list), or some described."""
    from hmbclient.admin import describe_transactions, list_transactions

    security = _security(args)
    if args.describe:
        rows = []
        for t in describe_transactions(args.brokers, args.describe, api_version=args.api_version, security=security):
            parts = ",".join(f"{topic}-{p}" for topic, p in t.partitions) or "-"
            rows.append((t.transactional_id, t.state, t.producer_id, t.producer_epoch, t.timeout_ms, t.start_time_ms, parts))
        _table(("transactional-id", "state", "producer-id", "epoch", "timeout-ms", "start-ms", "partitions"), rows, sys.stdout)
        return 0
    _table(("transactional-id", "producer-id", "state"), list_transactions(args.brokers, api_version=args.api_version, security=security), sys.stdout)
    return 0


def _broker_groups(args: argparse.Namespace) -> int:
    """Groups the brokers' coordinators balance (no --zookeeper): list, or describe one."""
    from hmbclient.consumer.group_admin import describe_broker_group, list_broker_groups

    security = _security(args)
    if args.group is None:
        for group, _protocol_type in list_broker_groups(args.brokers, api_version=args.api_version, security=security):
            print(group)
        return 0
    info = describe_broker_group(args.brokers, args.group, api_version=args.api_version, security=security)
    protocol = f"{info['protocol_type'] or '-'}/{info['protocol'] or '-'}"
    epoch = f", group epoch {info['group_epoch']}" if "group_epoch" in info else ""  # a consumer-protocol group (KIP-848)
    print(f"group {args.group}: state {info['state'] or '-'}, protocol {protocol}{epoch}, "
          f"{len(info['members'])} member(s)")
    for m in info["members"]:
        share = ",".join(f"{t}-{p}" for t, p in m["partitions"]) or "-"
        member_epoch = f" epoch {m['member_epoch']}" if "member_epoch" in m else ""
        print(f"  member {m['member_id']}{member_epoch} client {m['client_id'] or '-'} host {m['client_host'] or '-'} "
              f"partitions {share}")
    rows = [(r["topic"], r["partition"], r["owner"] or "-", _dash(r["committed"]), _dash(r["latest"]),
             _dash(r["lag"])) for r in info["partitions"]]
    _table(("topic", "partition", "owner", "committed", "latest", "lag"), rows, sys.stdout)
    return 0


def _dash(v: Any) -> str:
    return "-" if v is None else str(v)


def cmd_demo(args: argparse.Namespace) -> int:
    from hmbclient.demo import run_demo

    report = run_demo(
        brokers=args.brokers if args.brokers_given else None,
        zookeeper=args.zookeeper,
        messages=args.messages,
        seconds=args.seconds,
        spark=not args.no_spark,
        out=sys.stdout,
        spark_master=args.spark_master,
        spark_conf=dict(args.spark_conf),
    )
    return 0 if report.ok else 1


# --- parser -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hmb", description="hmbclient: Kafka-protocol client tools")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="what to run (hmb COMMAND -h for its options)")
    _add_server_commands(sub)
    _add_produce_command(sub)
    _add_consume_command(sub)
    _add_inspect_commands(sub)
    _add_demo_command(sub)
    _add_security_commands(sub)
    _add_top_command(sub)
    return parser


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _client_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--brokers", default=None,
                   help=f"bootstrap brokers host:port[,host:port] (default {DEFAULT_BROKERS})")
    p.add_argument("--api-version", default="auto", choices=["auto", "0.8", "0.10", "2.1", "hmb"],
                   help="protocol versions: auto probes ApiVersions; 'hmb' for the HMB broker")
    p.add_argument("-X", dest="client_settings", action="append", default=[], metavar="NAME=VALUE",
                   help="a client security setting by its Kafka property name (repeatable), e.g. "
                        "-X security.protocol=SASL_SSL -X ssl.cafile=ca.pem -X sasl.mechanism=SCRAM-SHA-512 "
                        "-X sasl.username=alice -X sasl.password=@FILE (@FILE: its first line; @-: stdin)")


def _zookeeper_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--zookeeper", default=None, metavar="HOST:PORT[/CHROOT]", help=what)


def _add_server_commands(sub: Subparsers) -> None:
    p = sub.add_parser("broker", help="run an embedded broker until Ctrl-C",
                       description="Run an embedded broker. Once serving it prints 'hmb broker <id>"
                       " listening on <host>:<port> log.dir=<dir>' on stdout.")
    p.add_argument("--host", default=None, help="interface to bind (host.name; default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None,
                   help=f"listen port (port; 0: ephemeral; default {DEFAULT_BROKER_PORT})")
    p.add_argument("--log-dir", default=None, help="data directory (log.dirs; default: a temp dir removed on exit)")
    p.add_argument("--broker-id", type=int, default=None, help="unique id within the cluster (broker.id; default 0)")
    p.add_argument("--num-partitions", type=int, default=None,
                   help="partitions of auto-created topics (num.partitions; default 1)")
    _zookeeper_opt(p, "register in this ZooKeeper (zookeeper.connect; default: standalone)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="any broker setting by its Kafka property name, e.g. --set log.segment.bytes=1048576"
                   " (repeatable; the options above win over --set)")
    p.add_argument("--listener", action="append", default=[], metavar="PROTOCOL://HOST:PORT",
                   help="a listener (listeners), repeatable: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, e.g."
                   " --listener PLAINTEXT://127.0.0.1:9092 --listener SASL_SSL://127.0.0.1:9093"
                   " (default: PLAINTEXT on --host/--port)")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("zookeeper", help="run a LocalZooKeeper (Debian's zookeeper jars)")
    p.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    p.add_argument("--data-dir", default=None, help="snapshot and log directory (default: a temp dir)")
    p.set_defaults(func=cmd_zookeeper)


def _add_produce_command(sub: Subparsers) -> None:
    p = sub.add_parser("produce", help="produce lines from stdin or --file")
    p.add_argument("topic", help="topic to produce to")
    _client_opts(p)
    p.add_argument("--file", "-f", default=None, help="read messages from this file (progress bar)")
    p.add_argument("--key-delimiter", "-K", default=None, help="split each line into key<delim>value")
    p.add_argument("--acks", type=int, default=1, choices=[-1, 0, 1],
                   help="request.required.acks: 0 none, 1 the leader, -1 every in-sync replica (default 1)")
    p.add_argument("--compression", "-z", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   help="compression codec of each batch (default none)")
    p.add_argument("--skip-empty", action="store_true", help="skip empty lines")
    p.add_argument("--timeout-ms", type=int, default=30000,
                   help="how long to wait for the brokers to acknowledge every message (default 30000)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_produce)


def _add_consume_command(sub: Subparsers) -> None:
    p = sub.add_parser("consume", help="print messages")
    p.add_argument("topic", help="topic to consume")
    _client_opts(p)
    p.add_argument("--offset", "-o", default="earliest", help="earliest | latest | N | -N (N before the end)")
    p.add_argument("--partition", "-p", type=int, default=None, help="only this partition (default: all)")
    p.add_argument("--count", "-c", type=int, default=None, help="stop after this many messages")
    p.add_argument("--format", default=None, help="kcat-style: %%t %%p %%o %%k %%s %%K %%S %%T (default '%%s\\n')")
    p.add_argument("--group", "-G", default=None,
                   help="consume as this consumer group (balanced through --zookeeper if given, "
                        "else by the brokers' group coordinator); commits when done")
    _zookeeper_opt(p, "the group's ZooKeeper (a ZooKeeper group; default: the brokers' coordinator)")
    p.add_argument("--exit-at-end", "-e", action="store_true", help="stop at the end of every partition")
    p.add_argument("--timeout-ms", type=int, default=-1, help="stop after this long without messages")
    p.add_argument("--max-bytes", type=int, default=1 << 20,
                   help="max bytes per partition per fetch (default 1048576)")
    p.set_defaults(func=cmd_consume)


def _add_inspect_commands(sub: Subparsers) -> None:
    p = sub.add_parser("offsets", help="earliest/latest offsets per partition")
    p.add_argument("topic", help="topic whose partitions to list")
    _client_opts(p)
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("topics", help="list topics; --create, --alter, --delete, --delete-records, or --describe partitions",
                       description="Without --create, --alter, --delete or --describe: every topic and its partition count.")
    _client_opts(p)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--create", default=None, metavar="NAME",
                        help="create topic NAME (CreateTopics; needs --partitions and --replication-factor)")
    action.add_argument("--alter", default=None, metavar="NAME",
                        help="grow topic NAME to --partitions N in all (CreatePartitions)")
    action.add_argument("--delete", nargs="+", default=None, metavar="NAME",
                        help="delete the named topics (DeleteTopics; the answer comes once they are gone)")
    action.add_argument("--delete-records", action="store_true",
                        help="delete the records below the offsets of --offset-json-file (DeleteRecords, to each leader); "
                             "prints each partition's low watermark")
    action.add_argument("--describe", nargs="*", default=None, metavar="NAME",
                        help="leader, replicas, ISR (and offline replicas) per partition of the named "
                             "topics (default: every topic); leader 'none' = no leader now")
    p.add_argument("--partitions", type=int, default=None, metavar="N",
                   help="partitions of the topic to --create")
    p.add_argument("--replication-factor", type=int, default=None, metavar="R",
                   help="replicas of each partition of the topic to --create (at most the number of brokers)")
    p.add_argument("--timeout-ms", type=int, default=30000,
                   help="how long the broker may take to --create, --alter, --delete or --delete-records (default 30000)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="a topic config of the topic to --create, e.g. cleanup.policy=compact (repeatable)")
    p.add_argument("--offset-json-file", default=None, metavar="FILE",
                   help='for --delete-records: kafka-delete-records.sh\'s JSON, {"partitions": [{"topic": "t", '
                        '"partition": 0, "offset": 42}], "version": 1} (offset -1: the high watermark)')
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("configs", help="describe or alter the dynamic configs of a topic or broker",
                       description="Without --set/--delete: every config with its value, Kafka's source and "
                       "whether it can be altered. With them: IncrementalAlterConfigs, applied without a restart.")
    _client_opts(p)
    p.add_argument("--topic", default=None, metavar="NAME", help="the topic")
    p.add_argument("--broker", type=int, default=None, metavar="ID", help="the broker (asked of that broker)")
    p.add_argument("--broker-default", action="store_true", help="the default of every broker")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete", action="append", default=[], metavar="NAME", help="remove a dynamic config (repeatable)")
    p.set_defaults(func=cmd_configs)

    p = sub.add_parser("leader-election", help="move leaderships back to the preferred replicas (ElectLeaders)")
    _client_opts(p)
    p.add_argument("partitions", nargs="*", metavar="TOPIC:PARTITION", help="the partitions (default: every partition)")
    p.set_defaults(func=cmd_leader_election)

    p = sub.add_parser("reassign", help="move partitions between brokers (kafka-reassign-partitions.sh's JSON; KIP-455)",
                       description="--execute starts the moves of the JSON file ({\"version\":1,\"partitions\":[{\"topic\":...,"
                       "\"partition\":...,\"replicas\":[...]}]}), with --throttle BYTES holding their replication to "
                       "BYTES/s; --verify reports each move and, once no reassignment is left in the cluster, removes the "
                       "throttles (exit code 0 while moves are in progress, as Kafka's tool); --cancel stops them, back to the original replicas, and removes the throttles.")
    _client_opts(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--execute", action="store_true", help="start the reassignment")
    g.add_argument("--verify", action="store_true", help="report progress; remove the throttles once complete")
    g.add_argument("--cancel", action="store_true", help="cancel the reassignment")
    p.add_argument("--reassignment-json-file", required=True, metavar="FILE", help="Kafka's reassignment JSON")
    p.add_argument("--throttle", type=int, default=None, metavar="BYTES",
                   help="with --execute: replication throttle in bytes/s for the moving replicas")
    p.set_defaults(func=cmd_reassign)

    p = sub.add_parser("cluster", help="cluster id, controller and brokers (DescribeCluster); --log-dirs")
    _client_opts(p)
    p.add_argument("--log-dirs", action="store_true", help="also each broker's log directory and partition sizes")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("groups", help="consumer groups; with GROUP: members, owners, offsets, lag",
                       description="With --zookeeper: the ZooKeeper groups there (-b then only names the "
                       "brokers for log end offsets). Without: the groups the brokers' coordinators "
                       "balance (ListGroups on every broker; DescribeGroups, OffsetFetch and "
                       "ListOffsets for one GROUP).")
    p.add_argument("group", nargs="?", help="describe this group (default: list every group)")
    _client_opts(p)
    _zookeeper_opt(p, "read ZooKeeper groups from here (default: the brokers' coordinated groups)")
    p.add_argument("--reset-offsets", action="store_true",
                   help="reset GROUP's committed offsets (dry run unless --execute; the group must have no active member)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--to-earliest", action="store_true", help="to the log start")
    how.add_argument("--to-latest", action="store_true", help="to the high watermark")
    how.add_argument("--to-datetime", default=None, metavar="ISO", help="to the first offset at or after this time")
    how.add_argument("--shift-by", type=int, default=None, metavar="N", help="committed offset + N (negative: back)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME",
                   help="reset this topic (repeatable; default: the topics the group has offsets for)")
    p.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser("transactions", help="transactional ids the brokers coordinate: --list, --describe ID ...",
                       description="ListTransactions on every broker (--list, the default), or each named id "
                       "as its coordinator describes it (--describe: state, producer id and epoch, timeout, "
                       "start time, partitions in the open transaction).")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="every transactional id (the default)")
    action.add_argument("--describe", nargs="+", default=None, metavar="ID", help="describe these transactional ids")
    _client_opts(p)
    p.set_defaults(func=cmd_transactions)


def _add_security_commands(sub: Subparsers) -> None:
    p = sub.add_parser("users", help="SASL/SCRAM users: add, remove, list (salted credentials only)",
                       description="Kafka-format SCRAM credentials in a file (the broker's sasl.credentials.file)"
                       " or in ZooKeeper's /config/users. Passwords are read from stdin and never stored.")
    p.add_argument("action", choices=["add", "remove", "list"], help="add (or replace) a user, remove one, or list them")
    p.add_argument("name", nargs="?", help="the user (add, remove)")
    p.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    p.add_argument("--mechanism", action="append", choices=["SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help="credential to store (repeatable; default both)")
    p.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations (default and minimum 4096)")
    p.add_argument("--credentials", default=None, metavar="FILE", help="the credentials file")
    _zookeeper_opt(p, "the ZooKeeper of the brokers")
    p.set_defaults(func=cmd_users)

    p = sub.add_parser("quotas", help="client quotas (producer/consumer byte rates): list, --add, --delete",
                       description="Kafka's client quotas (kafka-configs --entity-type users/clients): with --zookeeper"
                       " in ZooKeeper (/config/users/<user>/clients/<client-id>, /config/users/<user>,"
                       " /config/clients/<client-id>); with --bootstrap-server through the brokers"
                       " (AlterClientQuotas / DescribeClientQuotas; standalone brokers too). <default> names the"
                       " defaults; applied by the brokers without a restart. Without --add/--delete: list them (with"
                       " --user/--client-id: only that entity).")
    p.add_argument("--user", default=None, help="the user the quota is about (<default>: every user without one)")
    p.add_argument("--client-id", default=None, help="the client id the quota is about (<default>: every client id without one)")
    p.add_argument("--add", action="append", default=None, metavar="KEY=BYTES",
                   help="producer_byte_rate=N or consumer_byte_rate=N (repeatable)")
    p.add_argument("--delete", action="append", default=[], choices=["producer_byte_rate", "consumer_byte_rate"],
                   help="remove that rate from the entity (repeatable)")
    p.add_argument("--zookeeper", default=None, metavar="HOST:PORT[/CHROOT]", help="the ZooKeeper of the brokers")
    p.add_argument("-b", "--bootstrap-server", "--brokers", dest="brokers", default=None, metavar="HOST:PORT[,HOST:PORT]",
                   help="the brokers (instead of --zookeeper)")
    p.add_argument("--api-version", default="auto", choices=["auto", "0.8", "0.10", "2.1", "hmb"],
                   help="protocol versions: auto probes ApiVersions")
    p.add_argument("-X", dest="client_settings", action="append", default=[], metavar="NAME=VALUE",
                   help="a client security setting by its Kafka property name (repeatable)")
    p.set_defaults(func=cmd_quotas)

    p = sub.add_parser("acls", help="Kafka ACLs: add, remove, list",
                       description="ACLs in a file (the broker's authorizer.acls.file) or in ZooKeeper's"
                       " /kafka-acl (Kafka's layout).")
    p.add_argument("action", choices=["add", "remove", "list"], help="add or remove the ACLs described, or list them")
    p.add_argument("--principal", default=None, help="e.g. User:alice (User:* is anyone)")
    p.add_argument("--operation", action="append", default=None,
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, IdempotentWrite, All (repeatable)")
    p.add_argument("--host", default="*", help="client address the ACL applies to (default *: any)")
    p.add_argument("--deny", action="store_true", help="a DENY ACL (default ALLOW)")
    p.add_argument("--pattern", default="LITERAL", choices=["LITERAL", "PREFIXED"],
                   help="how --topic/--group match resource names (default LITERAL; '*' matches all)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--topic", default=None, help="the topic (name or prefix) the ACL is about")
    target.add_argument("--group", default=None, help="the consumer group (name or prefix) the ACL is about")
    target.add_argument("--cluster", action="store_true", help="the ACL is about the cluster (ClusterAction, Create, IdempotentWrite)")
    p.add_argument("--acls-file", default=None, metavar="FILE", help="the ACL file")
    _zookeeper_opt(p, "the ZooKeeper of the brokers")
    p.set_defaults(func=cmd_acls)


def _add_top_command(sub: Subparsers) -> None:
    p = sub.add_parser("top", help="a live view of a cluster: brokers, topics, partitions, group lag",
                       description="Refreshes in place until Ctrl-C (or --iterations). Rates are the "
                       "differences between two refreshes; bytes per topic need the brokers' metrics "
                       "endpoints (--metrics, our brokers with --set metrics.port=PORT).")
    _client_opts(p)
    _zookeeper_opt(p, "also show the ZooKeeper consumer groups kept here")
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="refresh period (default 2)")
    p.add_argument("--iterations", type=int, default=None, metavar="N", help="stop after N refreshes")
    p.add_argument("--metrics", action="append", default=[], metavar="HOST:PORT",
                   help="a broker's metrics endpoint (repeatable) for bytes in/out per topic")
    p.set_defaults(func=cmd_top)


def cmd_top(args: argparse.Namespace) -> int:
    from hmbclient.top import run

    if args.interval <= 0:
        raise CliError("--interval must be > 0")
    return run(args.brokers, interval_s=args.interval, iterations=args.iterations, zookeeper=args.zookeeper,
               metrics=args.metrics, api_version=args.api_version, security=_security(args))


def _add_demo_command(sub: Subparsers) -> None:
    from hmbclient.demo import DEFAULT_MESSAGES, DEFAULT_SECONDS  # standard library only: cheap

    p = sub.add_parser("demo", help="the main job: ZooKeeper + 3 brokers, produce, group consume, Spark")
    _client_opts(p)
    _zookeeper_opt(p, "use this ZooKeeper (with --brokers; default: start ZooKeeper and 3 brokers)")
    p.add_argument("--messages", type=int, default=DEFAULT_MESSAGES,
                   help=f"messages to produce (default {DEFAULT_MESSAGES})")
    p.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                   help=f"spread production over this long while the group consumes (default {DEFAULT_SECONDS:g})")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark step")
    p.add_argument("--spark-master", metavar="URL",
                   help="run the Spark step on this master (e.g. spark://127.0.0.1:7077) instead of local[2];"
                        " its executors must reach the brokers")
    p.add_argument("--spark-conf", metavar="KEY=VALUE", action="append", default=[], type=_spark_setting,
                   help="a Spark setting for the Spark step (repeatable), e.g. spark.executor.memory=512m")
    p.set_defaults(func=cmd_demo)


def _spark_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if hasattr(args, "brokers"):
        args.brokers_given = args.brokers is not None
        if args.brokers is None:
            args.brokers = DEFAULT_BROKERS
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except (CliError, HmbError, OSError, TimeoutError) as e:
        if args.debug:
            raise
        print(f"hmb {args.command}: {_describe(e)}", file=sys.stderr)
        return 1


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if isinstance(e, HmbError) and not isinstance(e, CliError):
        return f"{type(e).__name__}: {text}"
    return text.splitlines()[0]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
