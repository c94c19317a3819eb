"""The consumers' settings: :class:`SimpleConsumerConfig` (one broker, stateless requests)
and :class:`ConsumerConfig` (the high-level consumer and its group), declared on
:mod:`hmbclient.config`'s machinery and re-exported there. Security settings are inherited
from :class:`hmbclient.net.config.SecurityConfig`.
"""

from __future__ import annotations

from typing import Any, Literal

from hmbclient.config import (
    ApiVersion,
    BrokerList,
    config_class,
    convert_zookeeper_connect,
    parse_broker_list,
    setting,
)
from hmbclient.net.config import SecurityConfig

__all__ = ["ConsumerConfig", "SimpleConsumerConfig", "PollConsumerConfig", "IsolationLevel", "isolation_code", "parse_isolation_level"]


def _offset_reset(value: Any) -> Any:
    # Accept the post-0.9 spellings too.
    if isinstance(value, str):
        return {"earliest": "smallest", "latest": "largest"}.get(value.strip().lower(), value)
    return value


def _group_id(value: Any) -> Any:
    if isinstance(value, str):
        if not value or value != value.strip():
            raise ValueError("must be non-empty with no surrounding spaces")
        if "/" in value or value in (".", ".."):
            raise ValueError("must be usable as a ZooKeeper path element (no '/')")
    return value


#: ``isolation.level`` (Kafka's names; Fetch and ListOffsets send 0 / 1).
IsolationLevel = Literal["read_uncommitted", "read_committed"]


def parse_isolation_level(value: Any) -> Any:
    """``isolation.level`` as given, lower-cased (the setting's type then checks the name)."""
    return value.strip().lower() if isinstance(value, str) else value


def isolation_code(level: str) -> int:
    """The wire value of an ``isolation.level``: 0 read_uncommitted, 1 read_committed."""
    return 1 if level == "read_committed" else 0


@config_class
class SimpleConsumerConfig(SecurityConfig):
    """SimpleConsumer settings: one broker, stateless requests (0.8 ``SimpleConsumer`` args).

    ``fetch_min_bytes``/``fetch_wait_max_ms`` default to 0 as in 0.8's ``FetchRequestBuilder``:
    a SimpleConsumer fetch answers at once with whatever is there.
    """

    host: str = setting(prop="host", doc="broker host")
    port: int = setting(prop="port", min=1, max=65535, doc="broker port")
    so_timeout_ms: int = setting(
        30_000,
        prop="socket.timeout.ms",
        aliases=("so.timeout.ms",),
        min=1,
        doc="socket.timeout.ms: how long to wait for a response",
    )
    buffer_size: int = setting(
        65_536,
        prop="socket.receive.buffer.bytes",
        aliases=("buffer.size",),
        min=-1,
        doc="socket.receive.buffer.bytes: socket SO_RCVBUF (-1: OS default)",
    )
    client_id: str = setting("hmbclient", doc="client.id: sent with every request")
    api_version: ApiVersion = setting("auto", doc="api.version: auto, 0.8, 0.10, 2.1 or hmb")
    fetch_message_max_bytes: int = setting(
        1_048_576, min=1, doc="fetch.message.max.bytes: default max_size of a FetchRequest"
    )
    fetch_min_bytes: int = setting(0, min=0, doc="fetch.min.bytes: broker waits for this much data")
    fetch_wait_max_ms: int = setting(0, min=0, doc="fetch.wait.max.ms: ...but at most this long")
    isolation_level: IsolationLevel = setting(
        "read_uncommitted",
        convert=parse_isolation_level,
        doc="isolation.level: read_committed hides aborted transactions and stops at the last stable offset",
    )

    def _validate(self) -> None:
        super()._validate()
        if not self.host.strip():
            self._fail("'host' must not be empty")


@config_class
class ConsumerConfig(SecurityConfig):
    """High-level consumer settings (Kafka 0.8 ``kafka.consumer.ConsumerConfig`` names).

    Defaults that differ from Kafka 0.8, and why:

    * ``rebalance_backoff_ms`` = 200 (0.8: 2000, tied to ``zookeeper.sync.time.ms``). A
      rebalance attempt fails when a partition's previous owner has not yet released its
      ephemeral owner znode; released owners disappear within milliseconds on a local or
      LAN ZooKeeper, so waiting 2 s per retry only stretches stop-the-world pauses. With
      ``rebalance_max_retries`` = 4 a group still tolerates ~1 s of owner lag; raise it
      for slow or remote ensembles.
    * ``client_id`` defaults to ``group_id`` (as in 0.8), filled in on construction.

    Two ways to balance a group (``group_coordination``; ``group.protocol`` is accepted as
    its alias, as 0.8-era code and the API docs spell it): ``zookeeper`` (Kafka 0.8: membership,
    ownership and, by default, offsets in ZooKeeper; needs ``zookeeper_connect``) or
    ``broker`` (the brokers' group coordinator: FindCoordinator, JoinGroup, SyncGroup,
    Heartbeat, LeaveGroup; needs ``metadata_broker_list`` / ``bootstrap.servers``; offsets
    always go to the coordinator, so ``offsets_storage`` and ``dual_commit_enabled`` do not
    apply). Unset, it is ``zookeeper`` when ``zookeeper_connect`` is given, else ``broker``.
    ``session_timeout_ms``, ``heartbeat_interval_ms`` and ``max_poll_interval_ms`` (sent as
    JoinGroup's rebalance timeout) apply to ``broker`` only, with Kafka's names; the defaults
    are the Java consumer's before Kafka 3.0 (session 10 s, heartbeat 3 s, 5 minutes).
    """

    zookeeper_connect: str | None = setting(
        None,
        convert=convert_zookeeper_connect,
        doc="zookeeper.connect: 'host:port,...[/chroot]' of the ensemble (group.coordination=zookeeper)",
    )
    group_id: str = setting(convert=_group_id, doc="group.id: the consumer group (required)")
    consumer_id: str | None = setting(
        None, doc="consumer.id: id in /consumers/<g>/ids (None: <group>_<host>-<ms>-<uuid8>)"
    )
    socket_timeout_ms: int = setting(
        30_000, min=1, doc="socket.timeout.ms: fetch/metadata response wait"
    )
    socket_receive_buffer_bytes: int = setting(
        65_536, min=-1, doc="socket.receive.buffer.bytes: socket SO_RCVBUF (-1: OS default)"
    )
    fetch_message_max_bytes: int = setting(
        1_048_576, min=1, doc="fetch.message.max.bytes: bytes per partition per fetch"
    )
    num_consumer_fetchers: int = setting(1, min=1, doc="num.consumer.fetchers: fetcher threads")
    auto_commit_enable: bool = setting(True, doc="auto.commit.enable: commit offsets periodically")
    auto_commit_interval_ms: int = setting(
        60_000, min=1, doc="auto.commit.interval.ms: commit period"
    )
    queued_max_message_chunks: int = setting(
        2, min=1, doc="queued.max.message.chunks: fetched chunks buffered per stream"
    )
    rebalance_max_retries: int = setting(
        4, min=0, doc="rebalance.max.retries: attempts per rebalance"
    )
    fetch_min_bytes: int = setting(1, min=0, doc="fetch.min.bytes: broker waits for this much data")
    fetch_wait_max_ms: int = setting(100, min=0, doc="fetch.wait.max.ms: ...but at most this long")
    isolation_level: IsolationLevel = setting(
        "read_uncommitted",
        convert=parse_isolation_level,
        doc="isolation.level: read_committed hides aborted transactions and stops at the last stable offset",
    )
    rebalance_backoff_ms: int = setting(
        200, min=0, doc="rebalance.backoff.ms: wait between rebalance attempts"
    )
    refresh_leader_backoff_ms: int = setting(
        200, min=0, doc="refresh.leader.backoff.ms: wait before retrying a leaderless partition"
    )
    auto_offset_reset: Literal["smallest", "largest"] = setting(
        "largest",
        convert=_offset_reset,
        doc="auto.offset.reset: start point without a committed offset",
    )
    consumer_timeout_ms: int = setting(
        -1,
        min=-1,
        doc="consumer.timeout.ms: stream raises ConsumerTimeoutError after this idle time (-1: never)",
    )
    exclude_internal_topics: bool = setting(
        True, doc="exclude.internal.topics: filters never match __consumer_offsets"
    )
    partition_assignment_strategy: Literal["range", "roundrobin"] = setting(
        "range", doc="partition.assignment.strategy: range or roundrobin"
    )
    client_id: str | None = setting(None, doc="client.id: sent with requests (None: group.id)")
    zookeeper_session_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.session.timeout.ms: session expiry (ephemerals vanish)"
    )
    zookeeper_connection_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.connection.timeout.ms: max wait to connect"
    )
    zookeeper_sync_time_ms: int = setting(
        2_000, min=0, doc="zookeeper.sync.time.ms: how far a follower may lag"
    )
    offsets_storage: Literal["zookeeper", "kafka"] = setting(
        "zookeeper", doc="offsets.storage: where offsets are committed"
    )
    offsets_channel_backoff_ms: int = setting(
        1_000, min=0, doc="offsets.channel.backoff.ms: wait before reconnecting to the coordinator"
    )
    offsets_channel_socket_timeout_ms: int = setting(
        10_000, min=1, doc="offsets.channel.socket.timeout.ms: coordinator response wait"
    )
    offsets_commit_max_retries: int = setting(
        5, min=0, doc="offsets.commit.max.retries: retries of a failed commit"
    )
    dual_commit_enabled: bool = setting(
        True, doc="dual.commit.enabled: with offsets.storage=kafka also commit to ZooKeeper"
    )
    metadata_broker_list: BrokerList = setting(
        (),
        aliases=("bootstrap.servers",),
        convert=parse_broker_list,
        doc="metadata.broker.list: bootstrap brokers (group.coordination=broker), or brokers for "
        "the Metadata API when they are not in ZooKeeper",
    )
    api_version: ApiVersion = setting("auto", doc="api.version: auto, 0.8, 0.10, 2.1 or hmb")
    group_coordination: Literal["zookeeper", "broker"] | None = setting(
        None,
        aliases=("group.protocol",),
        doc="group.coordination: zookeeper or broker (the brokers' group coordinator); "
        "None: zookeeper when zookeeper.connect is set, else broker (alias: group.protocol, "
        "whose name Kafka 4 gives to classic|consumer on the poll Consumer)",
    )
    session_timeout_ms: int = setting(
        10_000,
        min=1,
        doc="session.timeout.ms: (broker) the coordinator drops a member silent for this long",
    )
    heartbeat_interval_ms: int = setting(
        3_000, min=1, doc="heartbeat.interval.ms: (broker) time between two heartbeats"
    )
    max_poll_interval_ms: int = setting(
        300_000,
        min=1,
        aliases=("rebalance.timeout.ms",),
        doc="max.poll.interval.ms: (broker) JoinGroup's rebalance timeout, how long the "
        "coordinator waits for members to rejoin",
    )

    def _validate(self) -> None:
        super()._validate()
        if self.client_id is None:
            self._set("client_id", self.group_id)
        if self.group_coordination is None:
            self._set("group_coordination", "zookeeper" if self.zookeeper_connect else "broker")
        if self.group_coordination == "zookeeper" and not self.zookeeper_connect:
            self._fail(
                "'zookeeper.connect' (zookeeper_connect) is required with group.coordination="
                "zookeeper; for groups balanced by the brokers give 'bootstrap.servers' "
                "(metadata_broker_list) and group.coordination=broker"
            )
        if self.group_coordination == "broker":
            if not self.metadata_broker_list:
                self._fail(
                    "group.coordination=broker needs 'bootstrap.servers' (metadata_broker_list); "
                    "for ZooKeeper groups give 'zookeeper.connect' (zookeeper_connect)"
                )
            if self.heartbeat_interval_ms >= self.session_timeout_ms:
                # Kafka's rule: at least one heartbeat must reach the coordinator per session.
                self._fail(
                    f"'heartbeat.interval.ms' ({self.heartbeat_interval_ms}) must be lower than "
                    f"'session.timeout.ms' ({self.session_timeout_ms})"
                )
        if self.fetch_wait_max_ms > self.socket_timeout_ms:
            # Same rule as 0.8's ConsumerConfig: a long-poll must not outlive the socket.
            self._fail(
                f"'socket.timeout.ms' ({self.socket_timeout_ms}) should be at least "
                f"'fetch.wait.max.ms' ({self.fetch_wait_max_ms}) to prevent needless socket timeouts"
            )



def _reset_to_latest_names(value: Any) -> Any:
    # The 0.8 spellings too; stored as Kafka's current names.
    if isinstance(value, str):
        return {"smallest": "earliest", "largest": "latest"}.get(value.strip().lower(), value.strip().lower())
    return value


def _assignment_strategy(value: Any) -> Any:
    # Kafka takes a list ("range,roundrobin"): the first one is the one this member offers
    # first; the group member offers its other assignors after it.
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    if isinstance(value, str):
        value = value.split(",")[0].strip().lower()
    return value


@config_class
class PollConsumerConfig(SecurityConfig):
    """Settings of :class:`hmbclient.Consumer` (subscribe/poll), with today's Kafka names.

    The group is always balanced by the brokers' group coordinator (ZooKeeper groups stay
    the ConsumerConnector's). Defaults are the Java consumer's (Kafka 3.x+): session 45 s,
    heartbeat 3 s, max.poll.interval.ms 5 minutes, auto commit every 5 s, 500 records a poll.
    """

    bootstrap_servers: BrokerList = setting(
        prop="bootstrap.servers",
        aliases=("metadata.broker.list",),
        convert=parse_broker_list,
        doc="bootstrap.servers: brokers to bootstrap from (required)",
    )
    group_id: str | None = setting(
        None, convert=_group_id, doc="group.id: the consumer group (None: assign() only, no commits)"
    )
    group_instance_id: str | None = setting(
        None, doc="group.instance.id: static membership id (KIP-345), passed to the group member"
    )
    client_id: str = setting("hmbclient", doc="client.id: sent with every request")
    api_version: ApiVersion = setting("auto", doc="api.version: auto, 0.8, 0.10, 2.1 or hmb")
    auto_offset_reset: Literal["earliest", "latest"] = setting(
        "latest",
        convert=_reset_to_latest_names,
        doc="auto.offset.reset: start point of a partition without a committed offset",
    )
    enable_auto_commit: bool = setting(
        True, doc="enable.auto.commit: commit the polled positions in poll(), on revoke and on close"
    )
    auto_commit_interval_ms: int = setting(5_000, min=1, doc="auto.commit.interval.ms: auto commit period")
    max_poll_records: int = setting(500, min=1, doc="max.poll.records: most records one poll() returns")
    max_poll_interval_ms: int = setting(
        300_000,
        min=1,
        doc="max.poll.interval.ms: longest time between two polls before the member leaves the group",
    )
    session_timeout_ms: int | None = setting(
        None, min=1, doc="session.timeout.ms: (classic) the coordinator drops a member silent for this long "
        "(None: 45000). Refused with group.protocol=consumer, as Java (the coordinator's setting)"
    )
    heartbeat_interval_ms: int | None = setting(
        None, min=1, doc="heartbeat.interval.ms: (classic) time between two heartbeats (None: 3000). "
        "Refused with group.protocol=consumer, as Java (the coordinator's setting)"
    )
    partition_assignment_strategy: str | None = setting(
        None,
        convert=_assignment_strategy,
        doc="partition.assignment.strategy: (classic) the assignor offered first (range, roundrobin, "
        "cooperative-sticky); None: range. Refused with group.protocol=consumer, as Java",
    )
    group_protocol: Literal["classic", "consumer"] = setting(
        "classic",
        convert=lambda v: v.strip().lower() if isinstance(v, str) else v,
        doc="group.protocol: classic (JoinGroup/SyncGroup) or consumer (Kafka 4's "
        "ConsumerGroupHeartbeat, KIP-848: the coordinator assigns)",
    )
    group_remote_assignor: Literal["uniform", "range"] | None = setting(
        None,
        doc="group.remote.assignor: (consumer) the coordinator's assignor, uniform or range "
        "(None: the coordinator's default)",
    )
    isolation_level: Literal["read_uncommitted", "read_committed"] = setting(
        "read_uncommitted", doc="isolation.level: read_committed hides aborted transactions' records"
    )
    key_deserializer: Any = setting(
        None, importable=True, doc="key.deserializer: key Decoder (None: bytes as stored)"
    )
    value_deserializer: Any = setting(
        None, importable=True, doc="value.deserializer: value Decoder (None: bytes as stored)"
    )
    fetch_min_bytes: int = setting(1, min=0, doc="fetch.min.bytes: the broker waits for this much data")
    fetch_max_wait_ms: int = setting(500, min=0, doc="fetch.max.wait.ms: ...but at most this long")
    max_partition_fetch_bytes: int = setting(
        1_048_576, min=1, doc="max.partition.fetch.bytes: bytes per partition per fetch"
    )
    queued_max_message_chunks: int = setting(
        16, min=1, doc="queued.max.message.chunks: fetched chunks (one partition's fetch each) buffered"
    )
    request_timeout_ms: int = setting(30_000, min=1, doc="request.timeout.ms: longest wait for an answer")
    retry_backoff_ms: int = setting(100, min=0, doc="retry.backoff.ms: wait before retrying a failed step")
    receive_buffer_bytes: int = setting(
        65_536, min=-1, doc="receive.buffer.bytes: socket SO_RCVBUF (-1: OS default)"
    )
    exclude_internal_topics: bool = setting(
        True, doc="exclude.internal.topics: a pattern never matches __consumer_offsets"
    )

    def _validate(self) -> None:
        super()._validate()
        if self.group_protocol == "consumer":
            # As Java's: the coordinator assigns (group.remote.assignor), and the session
            # and heartbeat interval are the group's (the coordinator's settings).
            if self.partition_assignment_strategy is not None:
                self._fail(
                    "'partition.assignment.strategy' is not supported with group.protocol=consumer "
                    "(the coordinator assigns): use 'group.remote.assignor' (uniform or range)"
                )
            given = [p for p, v in (("heartbeat.interval.ms", self.heartbeat_interval_ms),
                                    ("session.timeout.ms", self.session_timeout_ms)) if v is not None]
            if given:  # Java: "<names> cannot be set when group.protocol=CONSUMER"
                self._fail(
                    f"{', '.join(given)} cannot be set when group.protocol=consumer: the group coordinator's "
                    "group.consumer.session.timeout.ms / group.consumer.heartbeat.interval.ms apply (KIP-848)"
                )
            return self._validate_common()
        if self.group_remote_assignor is not None:
            self._fail("'group.remote.assignor' needs group.protocol=consumer")
        if self.partition_assignment_strategy is None:
            self._set("partition_assignment_strategy", "range")
        if self.session_timeout_ms is None:
            self._set("session_timeout_ms", 45_000)
        if self.heartbeat_interval_ms is None:
            self._set("heartbeat_interval_ms", 3_000)
        assert self.session_timeout_ms is not None and self.heartbeat_interval_ms is not None
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            self._fail(
                f"'heartbeat.interval.ms' ({self.heartbeat_interval_ms}) must be lower than "
                f"'session.timeout.ms' ({self.session_timeout_ms})"
            )
        self._validate_common()

    def _validate_common(self) -> None:
        if self.fetch_max_wait_ms > self.request_timeout_ms:
            self._fail(
                f"'request.timeout.ms' ({self.request_timeout_ms}) must be at least "
                f"'fetch.max.wait.ms' ({self.fetch_max_wait_ms})"
            )
