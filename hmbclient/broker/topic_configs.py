"""Where a topic's config overrides live (what CreateTopics ``configs`` set).

* In a cluster: ZooKeeper's ``/config/topics/<topic>``, as Kafka writes it
  (``{"version":1,"config":{"cleanup.policy":"compact"}}``), so every broker (and Kafka's own
  tools) reads the same overrides.
* Standalone: ``topic-configs.json`` in the data directory (``{"<topic>": {name: value}}``,
  written atomically: a temporary file, fsync, rename), next to the logs it describes.

Contract: ``get`` of a topic without overrides is ``{}``; ``set`` replaces the topic's overrides
(written before the topic's assignment, so a replica creating the log already finds them). The
values are validated by the caller (``log.overrides.validate_topic_configs``).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from hmbclient.broker.log.checkpoint import read_json, write_json_atomically
from hmbclient.errors import StorageError

__all__ = ["TopicConfigStore", "FileTopicConfigs", "ZkTopicConfigs", "TOPIC_CONFIGS_FILE"]

TOPIC_CONFIGS_FILE = "topic-configs.json"
_ZK_ROOT = "/config/topics"


class TopicConfigStore:
    """The interface: ``get(topic)`` and ``set(topic, configs)``."""

    def get(self, topic: str) -> dict[str, str]:
        raise NotImplementedError

    def set(self, topic: str, configs: dict[str, str]) -> None:
        raise NotImplementedError


class FileTopicConfigs(TopicConfigStore):
    """A standalone broker's overrides, in ``<log_dir>/topic-configs.json``.

    Args:
        log_dir: the data directory.
    Raises:
        StorageError: the file exists but cannot be read or parsed.
    """

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, TOPIC_CONFIGS_FILE)
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, str]] = {}
        data = read_json(self.path, {})
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise StorageError(f"{self.path}: expected {{topic: {{name: value}}}}")
        self._configs = {t: {str(k): str(v) for k, v in c.items()} for t, c in data.items()}

    def get(self, topic: str) -> dict[str, str]:
        with self._lock:
            return dict(self._configs.get(topic, {}))

    def set(self, topic: str, configs: dict[str, str]) -> None:
        with self._lock:
            new = dict(self._configs)
            if configs:
                new[topic] = dict(configs)
            else:
                new.pop(topic, None)
            write_json_atomically(self.path, new)
            self._configs = new


class ZkTopicConfigs(TopicConfigStore):
    """A cluster's overrides in ZooKeeper (``/config/topics/<topic>``).

    Args:
        zk: a started kazoo client.
    """

    def __init__(self, zk: Any) -> None:
        self.zk = zk

    def get(self, topic: str) -> dict[str, str]:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"{_ZK_ROOT}/{topic}")
        except NoNodeError:
            return {}
        try:
            cfg = json.loads(data.decode("utf-8")).get("config", {})
        except (ValueError, AttributeError) as e:
            raise StorageError(f"{_ZK_ROOT}/{topic}: not Kafka's topic config JSON: {e}") from e
        return {str(k): str(v) for k, v in cfg.items()}

    def set(self, topic: str, configs: dict[str, str]) -> None:
        from kazoo.exceptions import NodeExistsError

        data = json.dumps({"version": 1, "config": configs}, separators=(",", ":")).encode()
        path = f"{_ZK_ROOT}/{topic}"
        try:
            self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            self.zk.set(path, data)
