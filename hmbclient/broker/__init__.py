"""hmbclient.broker: an embedded Kafka-protocol broker (Kafka's broker design, in Python).

    from hmbclient.broker import EmbeddedBroker, EmbeddedCluster, run_broker

Layers (each a module): ``server`` (listeners: selectors network layer, TLS, SASL, sendfile)
-> ``apis`` (thin dispatcher, authorization hooks) -> ``replica_manager`` (+ ``partition``,
``replica_fetcher``, ``purgatory``, ``delayed``) -> ``log`` (store, index, segment, log, epochs,
checkpoint, manager); ``controller`` (election, pure decisions, the coordination store),
``coordinator`` (consumer groups), ``offset_manager`` (group offsets), ``topics``, ``metadata``
(the metadata cache), ``security`` (credentials, SASL, ACLs), ``channel`` (broker-to-broker
requests), ``broker`` (assembly), ``embedded`` / ``cluster`` / ``process`` (ways to run one or
several), ``runner`` (command line). Imports ``hmbclient.protocol`` (and ``hmbclient.zkpaths`` for
znodes), never the client packages; docs/architecture.md has the map.
"""

from typing import TYPE_CHECKING, Any

from hmbclient.broker.broker import Broker
from hmbclient.broker.embedded import EmbeddedBroker

if TYPE_CHECKING:  # pragma: no cover - for type checkers; loaded lazily at run time
    from hmbclient.broker.cluster import EmbeddedCluster
    from hmbclient.broker.process import BrokerProcess
    from hmbclient.broker.runner import main, run_broker

__all__ = ["Broker", "EmbeddedBroker", "EmbeddedCluster", "BrokerProcess", "run_broker", "main"]


def __getattr__(name: str) -> Any:
    # Lazy: the cluster, subprocess and CLI modules are not needed to run one broker.
    if name == "EmbeddedCluster":
        from hmbclient.broker.cluster import EmbeddedCluster

        return EmbeddedCluster
    if name == "BrokerProcess":
        from hmbclient.broker.process import BrokerProcess

        return BrokerProcess
    if name in ("run_broker", "main"):
        from hmbclient.broker import runner as _runner

        return getattr(_runner, name)
    raise AttributeError(name)
