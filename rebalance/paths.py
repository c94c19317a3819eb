"""The Kafka 0.8 znode layout, under its historical name: everything here is
:mod:`hmbclient.zkpaths`, where the layout now lives (the broker, the consumers and this
package's rebalancer all share it; see that module for the layout, the JSON encodings and the
topic-name rule). Kept so that ``rebalance.paths`` stays public API with the same names.
"""

from __future__ import annotations

# Every public name of the layout, the same objects (tests/test_paths.py checks it), from the
# one list of them there; wall_ms (the layout's clock) was public here too.
from hmbclient.zkpaths import *  # noqa: F403
from hmbclient.zkpaths import __all__ as _LAYOUT
from hmbclient.zkpaths import wall_ms

__all__ = [*_LAYOUT, "wall_ms"]
