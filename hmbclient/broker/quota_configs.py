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
* :func:`write_quota` stores one entity's quota (an empty config removes the rates) and
  announces it under ``/config/changes``, as Kafka's ``kafka-configs --entity-type clients``.
"""

from __future__ import annotations

import logging
from typing import Any

from hmbclient.broker.quotas import QUOTA_KEYS, QuotaConfigs, QuotaManager, parse_quota_config
from hmbclient.zkpaths import desanitize_quota_name, quota_entity_name

__all__ = ["QuotaConfigSource", "read_quota_configs", "write_quota"]

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
