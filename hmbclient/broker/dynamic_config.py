"""Dynamic configs of one broker: topic overrides and broker configs set by AlterConfigs /
IncrementalAlterConfigs, kept in the coordination store as Kafka keeps them in ZooKeeper
(``/config/topics/<t>``, ``/config/brokers/<id>``, ``/config/brokers/<default>``, each change
announced under ``/config/changes``), and applied without a restart.

Contract:

* At start every layer is read (:meth:`DynamicConfigs.start`) and applied to the open logs;
  from then on each change notification makes every broker re-read the entity it names and
  apply it (the writing broker also applies at once, so its own DescribeConfigs and appends
  see the write when the AlterConfigs answer leaves).
* Applying = each affected log's ``LogConfig`` is replaced by the one of the effective config
  (:func:`configs.effective_config`: topic override > this broker > default > static), with
  the topic's stored overrides (CreateTopics configs: ``cleanup.policy``, compaction settings;
  ``log.overrides.log_config_with``) applied over it;
  ``min.insync.replicas`` is looked up per topic at each append; ``unclean.leader.election.enable``
  goes to this broker's controller. Internal topics (``__consumer_offsets``,
  ``__transaction_state``) keep their compacted configs.
* A layer holding a value BrokerConfig refuses (written by another tool) is logged and left
  out, never applied half.

The decisions (what is valid, what a layer yields) are the pure functions of
:mod:`hmbclient.broker.configs`; this class is their I/O.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from hmbclient.broker.config import BrokerConfig
from hmbclient.broker.configs import Layers, effective_config
from hmbclient.broker.log.overrides import TOPIC_CONFIGS, log_config_with
from hmbclient.broker.metadata import is_internal_topic
from hmbclient.zkpaths import DEFAULT_BROKER_ENTITY

__all__ = ["DynamicConfigs"]

log = logging.getLogger("hmbclient.broker.dynamic_config")


class DynamicConfigs:
    """The dynamic layers of one broker and their application.

    Args:
        static: the broker's own configuration.
        store: the coordination store (ZooKeeper or in memory).
        logs: the LogManager whose logs get the effective configs.
        log_config_from: ``(BrokerConfig) -> LogConfig``.
        controller: told the effective ``unclean.leader.election.enable`` (None: nobody).
        stored_overrides: ``topic -> configs`` stored at creation (``broker.topic_configs``).
    """

    def __init__(self, static: BrokerConfig, store: Any, logs: Any, log_config_from: Any, controller: Any = None,
                 stored_overrides: Callable[[str], dict[str, str]] | None = None) -> None:
        self.static = static
        self._stored_overrides = stored_overrides
        self.store = store
        self.logs = logs
        self._log_config_from = log_config_from
        self.controller = controller
        self._lock = threading.Lock()
        self._layers = Layers()
        self._last_change = -1
        self._cache: dict[str | None, BrokerConfig] = {}
        #: told the entity paths of each batch of change notifications (the client quotas'
        #: ``clients/...`` and ``users/...`` entities are read by ``quota_configs.py``)
        self.change_listeners: list[Callable[[list[str]], None]] = []

    # -- reading ---------------------------------------------------------------------------------
    def layers(self) -> Layers:
        """The layers now (for DescribeConfigs)."""
        return self._layers

    def config_for(self, topic: str | None = None) -> BrokerConfig:
        """The effective config of ``topic`` (None: this broker's, without topic overrides)."""
        cached = self._cache.get(topic)
        if cached is not None:
            return cached
        layers = self._layers
        try:
            cfg = effective_config(self.static, layers, topic)
        except Exception as e:  # a bad value stored by another tool: the layers below it
            log.warning("dynamic config of %s ignored: %s", topic or "this broker", e)
            try:
                cfg = effective_config(self.static, Layers(layers.default, layers.broker), None)
            except Exception:
                cfg = self.static
        self._cache[topic] = cfg
        return cfg

    def log_config(self, topic: str) -> Any:
        """The LogConfig of ``topic``: the effective config's, with the topic's overrides
        (stored at creation and set dynamically) applied by ``log.overrides``."""
        base = self._log_config_from(self.config_for(topic))
        overrides = dict(self._stored_overrides(topic)) if self._stored_overrides is not None else {}
        overrides.update(self._layers.topics.get(topic, {}))
        known = {k: v for k, v in overrides.items() if k in TOPIC_CONFIGS}
        try:
            return log_config_with(base, known)
        except Exception as e:  # a bad stored value: the broker's config applies
            log.warning("topic %s: its overrides are not usable (%s): broker values apply", topic, e)
            return base

    def min_insync_replicas(self, topic: str) -> int:
        return self.config_for(topic).min_insync_replicas

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Read every layer, apply it, and watch the change notifications."""
        self._last_change, _ = self.store.config_changes(-1, watch=self._on_change)
        self._reload(None)

    def _on_change(self) -> None:
        # A store watch runs on the store's event thread: hand the reads to a thread of ours.
        threading.Thread(target=self._changed, name="dynamic-config", daemon=True).start()

    def _changed(self) -> None:
        try:
            with self._lock:
                last, entities = self.store.config_changes(self._last_change, watch=self._on_change)
                self._last_change = last
            if entities:
                self._reload(entities)
                for listener in self.change_listeners:
                    listener(entities)
        except Exception as e:  # ZooKeeper trouble: the next notification or restart re-reads
            log.warning("reading config changes failed: %r", e)

    def _reload(self, entities: list[str] | None) -> None:
        """Re-read the named entities (``topics/<t>``, ``brokers/<id>``; None: all) and apply."""
        me = str(self.static.broker_id)
        with self._lock:
            layers = self._layers
            default, broker, topics = dict(layers.default), dict(layers.broker), {k: dict(v) for k, v in layers.topics.items()}
            if entities is None:
                default = self.store.entity_config("brokers", DEFAULT_BROKER_ENTITY)
                broker = self.store.entity_config("brokers", me)
                topics = {t: self.store.entity_config("topics", t) for t in self.store.entity_names("topics")}
                touched: set[str] | None = None
            else:
                touched = set()
                for path in entities:
                    kind, _, name = path.partition("/")
                    if kind == "brokers" and name == DEFAULT_BROKER_ENTITY:
                        default = self.store.entity_config("brokers", name)
                        touched = None
                    elif kind == "brokers" and name == me:
                        broker = self.store.entity_config("brokers", name)
                        touched = None
                    elif kind == "topics":
                        topics[name] = self.store.entity_config("topics", name)
                        if touched is not None:
                            touched.add(name)
            self._layers = Layers(default, broker, {t: c for t, c in topics.items() if c})
            self._cache = {}
        self._apply(touched)

    def set_local(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """Store a whole dynamic config (``topics``/``brokers``) and apply it here at once."""
        self.store.set_entity_config(entity_type, name, config)
        self._reload([f"{entity_type}/{name}"])

    def _apply(self, topics: set[str] | None) -> None:
        """Give the logs of ``topics`` (None: every log) their effective configs."""
        for (topic, _p), lg in self.logs.all_logs():
            if is_internal_topic(topic) or (topics is not None and topic not in topics):
                continue
            new = self.log_config(topic)
            if lg.config != new:
                lg.config = new
                log.info("log %s-%d reconfigured: %s", topic, _p, new)
        if self.controller is not None:
            self.controller.unclean = self.config_for(None).unclean_leader_election_enable
