"""The one seam that decides which API versions a connection speaks.

Every request hmbclient sends gets its version here, nowhere else. A :class:`Dialect` says
*how* the versions are chosen for a broker; a :class:`BrokerVersions` is the answer for one
connection:

* ``"auto"`` (default): on connect, an ApiVersions v0 probe; per API the highest version both
  sides implement (:func:`pick_versions`), the group coordinator's APIs (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup, DescribeGroups, ListGroups) included. A Kafka 0.8/0.9 broker, which
  predates ApiVersions, closes the connection or never answers; the connection then reconnects
  without a probe and uses :data:`LEGACY_VERSIONS` (the 0.8 set, without group APIs: a 0.8
  broker has no group coordinator).
* ``"0.8"``, ``"0.10"``, ``"2.1"``: a pinned set, no probe ("0.10" and "2.1" with the group
  APIs those Kafka releases speak).
* ``"hmb"``: HMB, the Haskell Message Broker (the HMB dialect, docs/architecture.md). A probe
  kills its request handler, so it never
  gets one; it speaks only Metadata v0, Produce v0 and Fetch v0, one request in flight, frames
  its Fetch replies with size 0 / correlation id 0, answers one Fetch per connection, ignores
  max_bytes, drops keyed messages, answers acks=0 and reports fake offsets. Any other API raises :class:`UnsupportedByBroker` locally, before a byte is sent.

Invariant: a dialect with ``probe=False`` never causes an ApiVersions request to be written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from hmbclient.errors import ConfigError, UnsupportedByBroker
from hmbclient.protocol.api.base import PARTIAL_REQUESTS, REQUESTS, ApiKey, Request

__all__ = [
    "Dialect",
    "BrokerVersions",
    "DIALECTS",
    "LEGACY_VERSIONS",
    "resolve_dialect",
    "pick_versions",
    "produce_magic",
    "api_name",
]

_P = int(ApiKey.PRODUCE)
_F = int(ApiKey.FETCH)
_LO = int(ApiKey.LIST_OFFSETS)
_MD = int(ApiKey.METADATA)
_OC = int(ApiKey.OFFSET_COMMIT)
_OF = int(ApiKey.OFFSET_FETCH)
_FC = int(ApiKey.FIND_COORDINATOR)
_AV = int(ApiKey.API_VERSIONS)
_CT = int(ApiKey.CREATE_TOPICS)
_JG = int(ApiKey.JOIN_GROUP)
_HB = int(ApiKey.HEARTBEAT)
_LG = int(ApiKey.LEAVE_GROUP)
_SG = int(ApiKey.SYNC_GROUP)
_DG = int(ApiKey.DESCRIBE_GROUPS)
_LS = int(ApiKey.LIST_GROUPS)
_DL = int(ApiKey.DELETE_GROUPS)


def _frozen(d: Mapping[int, int]) -> Mapping[int, int]:
    return MappingProxyType(dict(d))


#: Kafka 0.8.2: what a broker without ApiVersions is assumed to speak. OffsetCommit/Fetch v1
#: store offsets in the broker (v0 meant ZooKeeper on 0.8.2).
LEGACY_VERSIONS: Mapping[int, int] = _frozen(
    {_P: 0, _F: 0, _LO: 0, _MD: 0, _OC: 1, _OF: 1, _FC: 0}
)

_PINNED: dict[str, Mapping[int, int]] = {
    "0.8": LEGACY_VERSIONS,
    # Kafka 0.10.1: MessageSet v1 (timestamps), Fetch v3 (max_bytes), ListOffsets v1; the
    # group coordinator with JoinGroup v1 (a rebalance timeout apart from the session timeout).
    "0.10": _frozen({
        _P: 2, _F: 3, _LO: 1, _MD: 2, _OC: 2, _OF: 1, _FC: 0, _AV: 0, _CT: 1,
        _JG: 1, _HB: 0, _LG: 0, _SG: 0, _DG: 0, _LS: 0,
    }),
    # Kafka 2.1: RecordBatch v2, zstd (Produce v7), Fetch v10, ListOffsets v4; group APIs at
    # their 2.0 versions (throttle time first), JoinGroup v3 (MEMBER_ID_REQUIRED is v4, 2.2).
    "2.1": _frozen({
        _P: 7, _F: 10, _LO: 4, _MD: 7, _OC: 6, _OF: 5, _FC: 2, _AV: 2, _CT: 3,
        _JG: 3, _HB: 2, _LG: 2, _SG: 2, _DG: 2, _LS: 2, _DL: 1,
    }),
    "hmb": _frozen({_P: 0, _F: 0, _MD: 0}),
}

_API_NAMES = {int(k): "".join(p.capitalize() for p in k.name.split("_")) for k in ApiKey}


def api_name(api_key: int) -> str:
    """Human name of an API key (``ListOffsets``), or ``api 42`` for keys we do not know."""
    return _API_NAMES.get(api_key, f"api {api_key}")


@dataclass(frozen=True)
class Dialect:
    """How versions are chosen for a broker, and the quirks of that broker family.

    Attributes:
        name: the ``api_version`` value that selects it.
        probe: send ApiVersions on connect ("auto" only).
        pinned: the fixed api_key -> version map (None for "auto").
        fallback: versions used when the probe fails (0.8/0.9 brokers).
        max_in_flight: overrides the configured requests-in-flight per connection.
        fetch_frame_quirk: Fetch replies come with size 0 and correlation id 0 (HMB).
        allows_keys: the broker accepts messages with a non-null key.
        real_offsets: Produce replies carry the real base offset.
        acks0_replies: the broker answers Produce even with acks=0.
        fetch_once_per_connection: the broker answers only the first Fetch on a connection
            (HMB), so the connection is recycled after each Fetch answer.
        ignores_max_bytes: Fetch answers may exceed the asked size; the consumer hands out
            at most what was asked and keeps the rest for the next call.
        broker_label: how error messages name the broker family.
    """

    name: str
    probe: bool = False
    pinned: Mapping[int, int] | None = None
    fallback: Mapping[int, int] = field(default_factory=lambda: LEGACY_VERSIONS)
    max_in_flight: int | None = None
    fetch_frame_quirk: bool = False
    allows_keys: bool = True
    real_offsets: bool = True
    acks0_replies: bool = False
    fetch_once_per_connection: bool = False
    ignores_max_bytes: bool = False
    broker_label: str = "the broker"

    def initial_versions(self) -> BrokerVersions | None:
        """The versions to use right after connecting, or None when a probe must decide."""
        if self.probe:
            return None
        assert self.pinned is not None
        return BrokerVersions(self, self.pinned)

    def fallback_versions(self) -> BrokerVersions:
        """The versions for a broker that did not answer the probe (Kafka 0.8/0.9)."""
        return BrokerVersions(self, self.fallback, probed=False, legacy=True)


DIALECTS: Mapping[str, Dialect] = MappingProxyType(
    {
        "auto": Dialect("auto", probe=True),
        "0.8": Dialect("0.8", pinned=_PINNED["0.8"], broker_label="Kafka 0.8"),
        "0.10": Dialect("0.10", pinned=_PINNED["0.10"], broker_label="Kafka 0.10"),
        "2.1": Dialect("2.1", pinned=_PINNED["2.1"], broker_label="Kafka 2.1"),
        "hmb": Dialect(
            "hmb",
            pinned=_PINNED["hmb"],
            max_in_flight=1,
            fetch_frame_quirk=True,
            allows_keys=False,
            real_offsets=False,
            acks0_replies=True,
            fetch_once_per_connection=True,
            ignores_max_bytes=True,
            broker_label="HMB",
        ),
    }
)


def resolve_dialect(api_version: str | Dialect) -> Dialect:
    """Map an ``api_version`` setting to its Dialect.

    Args:
        api_version: "auto", "0.8", "0.10", "2.1", "hmb" (or a Dialect, returned as is).

    Returns:
        The Dialect.

    Raises:
        ConfigError: an unknown value.
    """
    if isinstance(api_version, Dialect):
        return api_version
    d = DIALECTS.get(str(api_version).strip().lower())
    if d is None:
        raise ConfigError(f"api_version must be one of {sorted(DIALECTS)}, got {api_version!r}")
    return d


#: Versions the codec defines (and the broker serves) that the client does not pick by itself:
#: Metadata v9+ (flexible, request topics as entries, topic ids): the client asks with v8; the
#: KIP-848 member (consumer/group_consumer.py), which needs topic ids, asks for v10-12 by class
#: (allowed by ``BrokerVersions.supports`` when the broker's probed range covers it).
#: OffsetFetch v8+ asks by groups (another shape): the client's offset storage sends up to v5.
CLIENT_MAX: Mapping[int, int] = _frozen({_MD: 8, ApiKey.OFFSET_FETCH: 5})


def pick_versions(broker_ranges: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """Per API, the highest version both the broker and hmbclient implement (at most
    :data:`CLIENT_MAX` where it names the API).

    Args:
        broker_ranges: (api_key, min_version, max_version) triples from ApiVersions.

    Returns:
        api_key -> version, only for APIs with a common version.
    """
    ours: dict[int, set[int]] = {}
    for key, v in REQUESTS:
        ours.setdefault(key, set()).add(v)
    out: dict[int, int] = {}
    for key, lo, hi in broker_ranges:
        hi = min(hi, CLIENT_MAX.get(key, hi))
        common = [v for v in ours.get(key, ()) if lo <= v <= hi]
        if common:
            out[key] = max(common)
    return out


class BrokerVersions:
    """The versions one connection speaks. Immutable once built.

    ``version(api_key)`` raises :class:`UnsupportedByBroker` (naming the broker family and the
    API) when there is none, so a caller learns it before anything is written.
    """

    __slots__ = ("dialect", "versions", "probed", "legacy", "ranges")

    def __init__(
        self,
        dialect: Dialect,
        versions: Mapping[int, int],
        *,
        probed: bool = False,
        legacy: bool = False,
        ranges: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        self.dialect = dialect
        self.versions: Mapping[int, int] = _frozen(versions)
        self.probed = probed
        self.legacy = legacy
        #: the broker's own (min, max) per API, when a probe told us
        self.ranges: Mapping[int, tuple[int, int]] | None = MappingProxyType(dict(ranges)) if ranges else None

    def has(self, api_key: int) -> bool:
        return api_key in self.versions

    def version(self, api_key: int) -> int:
        """The version to use for ``api_key``.

        Raises:
            UnsupportedByBroker: the broker (or dialect) cannot serve this API.
        """
        v = self.versions.get(api_key)
        if v is None:
            raise UnsupportedByBroker(
                f"{self.dialect.broker_label} does not support {api_name(api_key)} "
                f"(api_version={self.dialect.name!r}); nothing was sent"
            )
        return v

    def supports(self, api_key: int, version: int) -> bool:
        """Whether ``version`` of ``api_key`` may be sent: we implement it, and the broker's
        probed range (or, for pinned sets, the pinned maximum) covers it."""
        top = self.versions.get(api_key)
        if (api_key, version) in PARTIAL_REQUESTS:  # asked for by class: the probe must cover it
            lo, hi = self.ranges.get(api_key, (0, -1)) if self.ranges is not None else (0, -1)
            return top is not None and lo <= version <= hi
        if top is None or (api_key, version) not in REQUESTS:
            return False
        if version > top and not (api_key in CLIENT_MAX and self.ranges is not None):
            # above the negotiated version only for an API the client caps (CLIENT_MAX) and
            # asks for by class at a higher version, when the broker's probed range covers it
            return False
        if self.ranges is not None:
            lo, hi = self.ranges.get(api_key, (0, -1))
            return lo <= version <= hi
        return True

    def request_class(self, api_key: int) -> type[Request]:
        return REQUESTS[(api_key, self.version(api_key))]

    def build(self, api_key: int, **fields: Any) -> Request:
        """Build the request of ``api_key`` at this connection's version from a superset of its
        fields: fields the version lacks are dropped, nested entries may be dicts (fitted the
        same way) or tuples in the version's field order (``Struct.build`` in protocol.types,
        the one builder).

        Raises:
            UnsupportedByBroker: the broker (or dialect) cannot serve this API.
        """
        return self.request_class(api_key).build(**fields)

    def __repr__(self) -> str:
        vs = ", ".join(f"{api_name(k)}={v}" for k, v in sorted(self.versions.items()))
        return f"BrokerVersions({self.dialect.name}{' probed' if self.probed else ''}{' legacy' if self.legacy else ''}: {vs})"


def produce_magic(produce_version: int) -> int:
    """The record format a Produce version carries: v0-1 MessageSet v0, v2 v1, v3+ RecordBatch v2."""
    if produce_version >= 3:
        return 2
    if produce_version == 2:
        return 1
    return 0
