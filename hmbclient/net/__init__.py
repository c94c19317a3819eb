"""Networking: the only package that imports ``socket``/``selectors``.

* :mod:`.client` — :class:`NetClient`, one I/O thread owning every connection; futures out.
* :mod:`.connection` — one non-blocking broker connection (in-flight queue, timeouts,
  reconnect backoff, the ApiVersions probe).
* :mod:`.metadata` — the cluster view (brokers, leaders, partitions) and its refresh rules.
* :mod:`.security` — TLS contexts and SASL mechanisms (:class:`Security`, from the clients'
  ``security.protocol`` / ``ssl.*`` / ``sasl.*`` settings).
* :mod:`.versions` — the one seam choosing API versions: "auto", pinned sets, the "hmb" dialect.
* :mod:`.retry` — tenacity retry policies with exponential backoff and jitter.
"""

from hmbclient.net.client import (
    BROKER_CONNECTED,
    BROKER_DISCONNECTED,
    BROKER_UNAVAILABLE,
    BrokerEvent,
    NetClient,
    parse_bootstrap,
)
from hmbclient.net.metadata import ClusterView, Metadata, PartitionInfo, TopicInfo
from hmbclient.net.retry import backoff_ms, is_retriable, retry_policy
from hmbclient.net.security import Security
from hmbclient.net.versions import (
    DIALECTS,
    LEGACY_VERSIONS,
    BrokerVersions,
    Dialect,
    api_name,
    pick_versions,
    produce_magic,
    resolve_dialect,
)

__all__ = [
    "NetClient",
    "BrokerEvent",
    "BROKER_CONNECTED",
    "BROKER_DISCONNECTED",
    "BROKER_UNAVAILABLE",
    "parse_bootstrap",
    "Security",
    "Metadata",
    "ClusterView",
    "TopicInfo",
    "PartitionInfo",
    "retry_policy",
    "backoff_ms",
    "is_retriable",
    "Dialect",
    "BrokerVersions",
    "DIALECTS",
    "LEGACY_VERSIONS",
    "resolve_dialect",
    "pick_versions",
    "produce_magic",
    "api_name",
]
