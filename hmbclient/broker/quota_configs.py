"""The client quotas of the coordination store: Kafka's ``/config/clients/<client-id>``,
``/config/users/<user>`` and ``/config/users/<user>/clients/<client-id>`` (names sanitized,
``<default>`` for the defaults), each ``{"version":1,"config":{"producer_byte_rate":"1024",
"consumer_byte_rate":"2048"}}``, read into a :class:`quotas.QuotaConfigs` and put in force.

Contract:

* :func:`read_quota_configs` reads every quota entity (case READ_ALL); an entity whose config
  is unreadable or holds an unknown key or a bad rate (written by another tool) is logged and
  left out, the others apply (case BAD_ENTITY).
* :class:`QuotaConfigSource` reads all at start and, on each batch of ``/config/changes``
  notifications naming a ``clients/...`` or ``users/...`` entity (told by
  ``DynamicConfigs.change_listeners``: one watcher for every dynamic config), re-reads all the
  quota entities and updates the :class:`quotas.QuotaManager` (case CHANGED): a quota change
  applies to the next request, without a restart.
* Only the quota keys of an entity count: ``/config/users/<user>`` also holds the user's SCRAM
  credentials, which are neither read nor touched here.
* :class:`ClientQuotaApis` serves DescribeClientQuotas (48) v0 (Cluster DescribeConfigs) and
  AlterClientQuotas (49) v0 (Cluster AlterConfigs) over the same store, as Kafka's
  ZooKeeper-mode brokers do (KIP-546): entity types ``user`` and ``client-id`` (a null name
  is the default), anything else INVALID_REQUEST; an unknown quota key or a bad value (a
  fractional byte rate too, as Kafka) INVALID_REQUEST for that entry only; ``validate_only`` writes nothing; a write is applied
  here at once and announced to the other brokers.
* :func:`write_quota` stores one entity's quota (an empty config removes the rates) and
  announces it under ``/config/changes``, as Kafka's ``kafka-configs --entity-type clients``.
"""

from __future__ import annotations

import logging
from typing import Any

from hmbclient.broker.quotas import (
    DEFAULT,
    QUOTA_KEYS,
    QuotaConfigs,
    QuotaManager,
    parse_quota_config,
)
from hmbclient.errors import ErrorCode
from hmbclient.protocol.api import ApiKey
from hmbclient.zkpaths import desanitize_quota_name, quota_entity_name

__all__ = ["ClientQuotaApis", "QuotaConfigSource", "read_quota_configs", "write_quota"]

log = logging.getLogger("hmbclient.broker.quota_configs")


def _entity_config(store: Any, entity_type: str, name: str) -> dict[str, float] | None:
    try:
        # /config/users/<user> also holds the user's SCRAM credentials: only quota keys count
        raw = {k: v for k, v in store.entity_config(entity_type, name).items() if k in QUOTA_KEYS}
        return parse_quota_config(raw) if raw else None
    except Exception as e:  # case BAD_ENTITY
        log.warning("quota of %s/%s ignored: %s", entity_type, name, e)
        return None


def read_quota_configs(store: Any, producer_default: float | None = None, consumer_default: float | None = None) -> QuotaConfigs:
    """Every quota entity of ``store`` (case READ_ALL), with the static defaults."""
    entities: dict[tuple[str | None, str | None], dict[str, float]] = {}
    for name in store.entity_names("clients"):
        q = _entity_config(store, "clients", name)
        if q:
            entities[(None, desanitize_quota_name(name))] = q
    for name in store.entity_names("users"):
        user, sep, client = name.partition("/clients/")
        if sep:  # an in-memory store lists nested entities by their whole name
            q = _entity_config(store, "users", name)
            if q:
                entities[(desanitize_quota_name(user), desanitize_quota_name(client))] = q
            continue
        q = _entity_config(store, "users", name)
        if q:
            entities[(desanitize_quota_name(name), None)] = q
        for cname in store.entity_names(f"users/{name}/clients"):  # ZooKeeper's children
            q = _entity_config(store, "users", f"{name}/clients/{cname}")
            if q:
                entities[(desanitize_quota_name(name), desanitize_quota_name(cname))] = q
    return QuotaConfigs(entities, producer_default, consumer_default)


def write_quota(store: Any, user: str | None, client_id: str | None, config: dict[str, str]) -> None:
    """Store the quota of ``(user, client_id)`` and announce the change. Other keys of the
    entity (a user's SCRAM credentials) are kept.

    Args:
        store: the coordination store.
        user: the user (None: a client-id entity); ``<default>`` for the default.
        client_id: the client id (None: a user entity); ``<default>`` for the default.
        config: ``producer_byte_rate`` / ``consumer_byte_rate`` -> bytes/s (strings).

    Raises:
        ValueError: an unknown key, a bad rate, or an entity naming neither part.
    """
    parse_quota_config(config)
    entity_type, name = quota_entity_name(user, client_id)
    try:
        kept = {k: v for k, v in store.entity_config(entity_type, name).items() if k not in QUOTA_KEYS}
    except Exception:  # unreadable (another tool's bytes): replaced
        kept = {}
    store.set_entity_config(entity_type, name, {**kept, **{k: str(v) for k, v in config.items()}})


class QuotaConfigSource:
    """Keeps a :class:`QuotaManager` on the store's quotas (see the module doc).

    Args:
        store: the coordination store.
        manager: the broker's quota manager (its static defaults are kept).
    """

    def __init__(self, store: Any, manager: QuotaManager) -> None:
        self.store = store
        self.manager = manager
        self._defaults = (manager.configs.producer_default, manager.configs.consumer_default)

    def start(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.manager.update(read_quota_configs(self.store, *self._defaults))

    def on_changes(self, entities: list[str]) -> None:
        """Change notifications: re-read the quotas when one names a quota entity (case CHANGED)."""
        if any(e.startswith(("clients/", "users/")) for e in entities):
            try:
                self.reload()
            except Exception as e:  # ZooKeeper trouble: the next notification re-reads
                log.warning("reading the client quotas failed: %r", e)


_TYPES = ("user", "client-id")


def _wire_entity(user: str | None, client: str | None) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    if user is not None:
        out.append(("user", None if user == DEFAULT else user))
    if client is not None:
        out.append(("client-id", None if client == DEFAULT else client))
    return out


def _matches(entity: list[tuple[str, str | None]], components: list[Any], strict: bool) -> bool:
    named = dict(entity)
    for c in components:
        if c.entity_type not in named:
            return False
        name = named[c.entity_type]
        if c.match_type == 0 and name != c.match:
            return False
        if c.match_type == 1 and name is not None:
            return False
    return not strict or set(named) <= {c.entity_type for c in components}


class ClientQuotaApis:
    """DescribeClientQuotas / AlterClientQuotas over the store (see the module doc).

    Args:
        store: the coordination store.
        source: this broker's quota source (re-read after a write).
    """

    def __init__(self, store: Any, source: QuotaConfigSource) -> None:
        self.store = store
        self.source = source

    def handlers(self) -> dict[int, Any]:
        return {ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe, ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter}

    def handle_describe(self, header: Any, req: Any, channel: Any, allowed: Any) -> None:
        resp = type(req).RESPONSE_TYPE
        if not allowed(channel, "DescribeConfigs", "Cluster"):
            channel.send(resp.build(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    error_message="Cluster DescribeConfigs is needed", entries=None))
            return
        comps = list(req.components)
        bad = [c for c in comps if c.entity_type not in _TYPES or c.match_type not in (0, 1, 2)
               or (c.match_type == 0) != (c.match is not None)]
        if bad or len({c.entity_type for c in comps}) != len(comps):
            channel.send(resp.build(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                                    error_message=f"bad or repeated components: entity types are {', '.join(_TYPES)}; "
                                    "match_type 0 needs a match, 1 and 2 none", entries=None))
            return
        entries = []
        for (user, client), quota in sorted(read_quota_configs(self.store).entities.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
            entity = _wire_entity(user, client)
            if _matches(entity, comps, req.strict):
                entries.append((entity, sorted(quota.items())))
        channel.send(resp.build(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries))

    def handle_alter(self, header: Any, req: Any, channel: Any, allowed: Any) -> None:
        resp = type(req).RESPONSE_TYPE
        ok = allowed(channel, "AlterConfigs", "Cluster")
        out = []
        wrote = False
        for e in req.entries:
            entity = [(x.entity_type, x.entity_name) for x in e.entity]
            code, msg = self._alter_one(entity, e.ops, req.validate_only) if ok else (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster AlterConfigs is needed")
            wrote = wrote or (code == ErrorCode.NONE and not req.validate_only)
            out.append((code, msg, entity))
        if wrote:
            self.source.reload()  # here at once; the other brokers on the notification
        channel.send(resp.build(throttle_time_ms=0, entries=out))

    def _alter_one(self, entity: list[tuple[str, str | None]], ops: Any, validate_only: bool) -> tuple[int, str | None]:
        types = [t for t, _ in entity]
        if not entity or len(set(types)) != len(types) or not set(types) <= set(_TYPES):
            return ErrorCode.INVALID_REQUEST, f"an entity names user and/or client-id once each, not {types}"
        named = {t: (DEFAULT if n is None else n) for t, n in entity}
        user, client = named.get("user"), named.get("client-id")
        if any(n == "" for n in named.values()):
            return ErrorCode.INVALID_REQUEST, "an empty entity name"
        try:
            current = {k: v for k, v in (read_quota_configs(self.store).entities.get((user, client)) or {}).items()}
            for op in ops:
                if op.key not in QUOTA_KEYS:
                    return ErrorCode.INVALID_REQUEST, f"unknown quota {op.key!r}: expected one of {', '.join(QUOTA_KEYS)}"
                if op.remove:
                    current.pop(op.key, None)
                else:
                    if not float(op.value).is_integer():  # Kafka's byte rates are longs
                        return ErrorCode.INVALID_REQUEST, f"{op.key} cannot be a fractional value."
                    parse_quota_config({op.key: op.value})
                    current[op.key] = op.value
            config = {k: str(int(v)) if float(v).is_integer() else str(v) for k, v in current.items()}
            if not validate_only:
                write_quota(self.store, user, client, config)
        except ValueError as e:
            return ErrorCode.INVALID_REQUEST, str(e)
        return ErrorCode.NONE, None
