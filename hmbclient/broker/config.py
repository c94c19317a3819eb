"""The embedded broker's settings (:class:`BrokerConfig`) and its listener syntax
(:func:`parse_listener`), declared on :mod:`hmbclient.config`'s machinery and re-exported there.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from hmbclient.config import (
    NEVER,
    ConfigBase,
    SaslMechanismName,
    config_class,
    convert_upper,
    convert_zookeeper_connect,
    setting,
)

__all__ = ["LISTENER_PROTOCOLS", "BrokerConfig", "parse_listener"]


LISTENER_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listener(text: str) -> tuple[str, str, int]:
    """``PROTOCOL://host:port`` -> ``(protocol, host, port)``; an empty host is 0.0.0.0.

    Raises:
        ValueError: an unknown protocol or a bad address.
    """
    proto, sep, addr = text.strip().partition("://")
    proto = proto.strip().upper()
    if not sep or proto not in LISTENER_PROTOCOLS:
        raise ValueError(f"listener {text!r} must be PROTOCOL://host:port with PROTOCOL one of {', '.join(LISTENER_PROTOCOLS)}")
    host, colon, port = addr.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listener {text!r} needs a port 0..65535")
    return proto, host.strip("[]") or "0.0.0.0", int(port)


def _cleanup_policy(value: Any) -> Any:
    parts = {p.strip() for p in str(value).split(",") if p.strip()}
    if not parts or not parts <= {"compact", "delete"}:
        raise ValueError(f"must be delete, compact or compact,delete, got {value!r}")
    return ",".join(p for p in ("compact", "delete") if p in parts)


def _listener_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        for v in value:
            parse_listener(str(v))
        return tuple(str(v).strip() for v in value)
    return value


def _mechanism_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        out = tuple(str(v).strip().upper() for v in value)
        for m in out:
            if m not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                raise ValueError(f"unsupported SASL mechanism {m!r} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
        return out
    return value


def _principal_list(value: Any) -> Any:
    if isinstance(value, str):
        value = [v for v in value.split(";") if v.strip()]
    if isinstance(value, (list, tuple)):
        out = tuple(str(v).strip() for v in value)
        for p in out:
            if ":" not in p:
                raise ValueError(f"principal {p!r} must be TYPE:NAME, e.g. User:admin")
        return out
    return value


def _path_list(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return (os.fspath(value),)
    if isinstance(value, (list, tuple)):
        return tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)
    return value


@config_class
class BrokerConfig(ConfigBase):
    """Embedded broker settings (Kafka 0.8 ``kafka.server.KafkaConfig`` names).

    Defaults that differ from Kafka 0.8, and why:

    * ``host`` = 127.0.0.1 and ``port`` = 0 (an ephemeral port): an embedded broker is for
      tests and local work and should not listen on the network or collide.
    * ``log_dirs`` empty: the broker makes a temporary directory (removed on stop).
    * ``num_network_threads`` = 1, ``num_io_threads`` = 2 (0.8: 3 and 8): a Python broker is
      GIL-bound, so more threads add switching, not throughput.
    * ``offsets_topic_num_partitions`` = 3 (0.8.2: 50): 50 partition directories per broker
      slow start-up; 3 still spreads groups over partitions (and coordinators over a cluster).
    * ``log_flush_interval_messages``/``_ms`` = never (as 0.8.1+): rely on the OS page cache.
    """

    broker_id: int = setting(0, min=0, doc="broker.id: unique id within the cluster")
    host: str = setting(
        "127.0.0.1", prop="host.name", aliases=("host",), doc="host.name: interface to bind"
    )
    port: int = setting(0, min=0, max=65535, doc="port: listen port (0: ephemeral)")
    advertised_host_name: str | None = setting(
        None, doc="advertised.host.name: host given to clients (None: host.name)"
    )
    advertised_port: int | None = setting(
        None, min=1, max=65535, doc="advertised.port: port given to clients (None: the bound port)"
    )
    metrics_port: int | None = setting(
        None, min=0, max=65535,
        doc="metrics.port: serve the broker's metrics for Prometheus at http://metrics.host:port/metrics (None: off; 0: any free port)",
    )
    metrics_host: str | None = setting(None, doc="metrics.host: address of the metrics endpoint (None: host.name)")
    quota_producer_default: int | None = setting(
        None, min=0, doc="quota.producer.default: producer bytes/s of a client id with no quota of its own (None: unlimited)"
    )
    quota_consumer_default: int | None = setting(
        None, min=0, doc="quota.consumer.default: consumer bytes/s of a client id with no quota of its own (None: unlimited)"
    )
    quota_window_num: int = setting(11, min=1, doc="quota.window.num: samples a client quota's byte rate is measured over")
    quota_window_size_seconds: int = setting(1, min=1, doc="quota.window.size.seconds: length of one client quota sample")
    metrics_num_samples: int = setting(2, min=1, doc="metrics.num.samples: samples a windowed metric keeps")
    metrics_sample_window_ms: int = setting(
        30_000, min=1, doc="metrics.sample.window.ms: length of one sample of a windowed metric"
    )
    log_dirs: tuple[str, ...] = setting(
        (),
        aliases=("log.dir",),
        convert=_path_list,
        doc="log.dirs: data directories (empty: a temp dir)",
    )
    num_partitions: int = setting(1, min=1, doc="num.partitions: partitions of auto-created topics")
    default_replication_factor: int = setting(
        1, min=1, doc="default.replication.factor: replicas of auto-created topics"
    )
    log_segment_bytes: int = setting(
        1 << 30, min=14, doc="log.segment.bytes: roll a segment at this size"
    )
    log_max_open_read_handles: int = setting(
        256, min=1, doc="log.max.open.read.handles: closed segments kept open for reading (least recently read closed first)"
    )
    log_index_interval_bytes: int = setting(
        4096, min=0, doc="log.index.interval.bytes: bytes between sparse index entries"
    )
    log_index_size_max_bytes: int = setting(
        10 * 1024 * 1024, min=8, doc="log.index.size.max.bytes: max size of one offset index"
    )
    log_flush_interval_messages: int = setting(
        NEVER, min=1, doc="log.flush.interval.messages: fsync after this many messages"
    )
    log_flush_interval_ms: int = setting(
        NEVER, min=0, doc="log.flush.interval.ms: fsync at least this often"
    )
    log_retention_ms: int = setting(
        7 * 24 * 3600 * 1000,
        min=-1,
        doc="log.retention.ms: delete segments older than this (-1: never)",
    )
    log_retention_bytes: int = setting(
        -1, min=-1, doc="log.retention.bytes: per-partition size cap (-1: none)"
    )
    log_cleanup_policy: str = setting(
        "delete", convert=_cleanup_policy, doc="log.cleanup.policy: default cleanup.policy of topics: delete, compact or compact,delete"
    )
    log_cleaner_threads: int = setting(
        1, min=0, doc="log.cleaner.threads: threads compacting topics with cleanup.policy=compact (0: none)"
    )
    log_cleaner_backoff_ms: int = setting(
        15_000, min=0, doc="log.cleaner.backoff.ms: how long a cleaner thread sleeps when no log needs cleaning"
    )
    log_cleaner_min_cleanable_ratio: float = setting(
        0.5, min=0, max=1, doc="log.cleaner.min.cleanable.ratio: default min.cleanable.dirty.ratio of topics"
    )
    log_cleaner_min_compaction_lag_ms: int = setting(
        0, min=0, doc="log.cleaner.min.compaction.lag.ms: default min.compaction.lag.ms of topics"
    )
    log_cleaner_delete_retention_ms: int = setting(
        86_400_000, min=0, doc="log.cleaner.delete.retention.ms: default delete.retention.ms (how long tombstones are kept)"
    )
    log_cleaner_dedupe_buffer_size: int = setting(
        128 * 1024 * 1024, min=1024, doc="log.cleaner.dedupe.buffer.size: memory for the keys of one cleaning pass"
    )
    log_cleaner_io_max_bytes_per_second: float = setting(
        float("inf"), min=1, doc="log.cleaner.io.max.bytes.per.second: I/O throttle of each cleaner thread"
    )
    log_retention_check_interval_ms: int = setting(
        300_000, min=1, doc="log.retention.check.interval.ms: how often retention runs"
    )
    producer_id_expiration_ms: int = setting(
        86_400_000, min=1, doc="producer.id.expiration.ms: forget an idempotent producer's state after this long without a write (checked with retention)"
    )
    message_max_bytes: int = setting(
        1_000_012, min=0, doc="message.max.bytes: largest message (set) the broker accepts"
    )
    socket_request_max_bytes: int = setting(
        100 * 1024 * 1024, min=1, doc="socket.request.max.bytes: largest request frame"
    )
    socket_send_buffer_bytes: int = setting(
        100 * 1024, min=-1, doc="socket.send.buffer.bytes: SO_SNDBUF (-1: OS default)"
    )
    socket_receive_buffer_bytes: int = setting(
        100 * 1024, min=-1, doc="socket.receive.buffer.bytes: SO_RCVBUF (-1: OS default)"
    )
    num_network_threads: int = setting(1, min=1, doc="num.network.threads: selector threads")
    num_io_threads: int = setting(2, min=1, doc="num.io.threads: request handler threads")
    zookeeper_connect: str | None = setting(
        None, convert=convert_zookeeper_connect, doc="zookeeper.connect: register here (None: standalone)"
    )
    zookeeper_session_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.session.timeout.ms: registration session expiry"
    )
    zookeeper_connection_timeout_ms: int = setting(
        6_000, min=1, doc="zookeeper.connection.timeout.ms: max wait to connect"
    )
    auto_create_topics_enable: bool = setting(
        True, doc="auto.create.topics.enable: create unknown topics on metadata/produce"
    )
    delete_topic_enable: bool = setting(
        True, doc="delete.topic.enable: serve DeleteTopics (false: TOPIC_DELETION_DISABLED)"
    )
    connections_max_idle_ms: int = setting(
        600_000, min=-1, doc="connections.max.idle.ms: close idle connections (-1: never)"
    )
    offsets_topic_num_partitions: int = setting(
        3, min=1, doc="offsets.topic.num.partitions: partitions of __consumer_offsets"
    )
    offsets_retention_minutes: int = setting(
        1_440, min=1, doc="offsets.retention.minutes: drop committed offsets older than this"
    )
    offsets_topic_replication_factor: int = setting(
        3,
        min=1,
        doc="offsets.topic.replication.factor: replicas of __consumer_offsets (capped at the live brokers)",
    )
    transaction_state_log_num_partitions: int = setting(
        3, min=1, doc="transaction.state.log.num.partitions: partitions of __transaction_state"
    )
    transaction_state_log_replication_factor: int = setting(
        3,
        min=1,
        doc="transaction.state.log.replication.factor: replicas of __transaction_state (capped at the live brokers)",
    )
    transaction_max_timeout_ms: int = setting(
        900_000, min=1, doc="transaction.max.timeout.ms: the longest transaction timeout a producer may ask for"
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        10_000,
        min=1,
        doc="transaction.abort.timed.out.transaction.cleanup.interval.ms: how often the coordinator aborts transactions past their timeout",
    )
    transactional_id_expiration_ms: int = setting(
        604_800_000, min=1, doc="transactional.id.expiration.ms: forget a transactional id idle this long"
    )
    group_initial_rebalance_delay_ms: int = setting(
        3_000,
        min=0,
        doc="group.initial.rebalance.delay.ms: an empty group waits this long for more members before its first rebalance",
    )
    group_consumer_session_timeout_ms: int = setting(
        45_000, min=1, doc="group.consumer.session.timeout.ms: a consumer-protocol (KIP-848) member not heard from this long leaves its group"
    )
    group_consumer_heartbeat_interval_ms: int = setting(
        5_000, min=1, doc="group.consumer.heartbeat.interval.ms: how often consumer-protocol (KIP-848) members are told to heartbeat"
    )
    group_consumer_assignors: str = setting(
        "uniform,range", doc="group.consumer.assignors: server-side assignors (uniform, range), the first is the default"
    )
    group_consumer_migration_policy: str = setting(
        "bidirectional",
        doc="group.consumer.migration.policy: classic <-> consumer group conversions (disabled, upgrade, downgrade, bidirectional)",
    )
    group_min_session_timeout_ms: int = setting(
        6_000, min=0, doc="group.min.session.timeout.ms: smallest session timeout a group member may ask for"
    )
    group_max_session_timeout_ms: int = setting(
        300_000, min=0, doc="group.max.session.timeout.ms: largest session timeout a group member may ask for"
    )
    min_insync_replicas: int = setting(
        1, min=1, doc="min.insync.replicas: ISR size an acks=-1 produce needs"
    )
    replica_lag_time_max_ms: int = setting(
        10_000, min=1, doc="replica.lag.time.max.ms: a follower not caught up this long leaves the ISR"
    )
    replica_fetch_wait_max_ms: int = setting(
        500, min=0, doc="replica.fetch.wait.max.ms: max wait of a follower's fetch"
    )
    replica_fetch_max_bytes: int = setting(
        1024 * 1024, min=1, doc="replica.fetch.max.bytes: bytes a follower asks per partition"
    )
    replica_fetch_backoff_ms: int = setting(
        200, min=0, doc="replica.fetch.backoff.ms: pause after a failed follower fetch"
    )
    leader_replication_throttled_rate: int | None = setting(
        None, min=0, doc="leader.replication.throttled.rate: bytes/s a leader sends to the out-of-sync replicas its topics' "
        "leader.replication.throttled.replicas name (None: unlimited; set dynamically by reassignment tools)",
    )
    follower_replication_throttled_rate: int | None = setting(
        None, min=0, doc="follower.replication.throttled.rate: bytes/s a follower fetches for its out-of-sync replicas its topics' "
        "follower.replication.throttled.replicas name (None: unlimited; set dynamically by reassignment tools)",
    )
    replication_quota_window_num: int = setting(
        11, min=1, doc="replication.quota.window.num: samples a replication throttle's byte rate is measured over"
    )
    replication_quota_window_size_seconds: int = setting(
        1, min=1, doc="replication.quota.window.size.seconds: length of one replication throttle sample"
    )
    replica_high_watermark_checkpoint_interval_ms: int = setting(
        5_000, min=1, doc="replica.high.watermark.checkpoint.interval.ms: how often HWs are saved"
    )
    unclean_leader_election_enable: bool = setting(
        False, doc="unclean.leader.election.enable: elect a replica outside the ISR (may lose data)"
    )
    auto_leader_rebalance_enable: bool = setting(
        True, doc="auto.leader.rebalance.enable: the controller moves leaderships back to preferred replicas"
    )
    leader_imbalance_check_interval_seconds: int = setting(
        300, min=1, doc="leader.imbalance.check.interval.seconds: how often the controller checks the balance"
    )
    leader_imbalance_per_broker_percentage: int = setting(
        10, min=0, max=100, doc="leader.imbalance.per.broker.percentage: share of a broker's preferred partitions led elsewhere that triggers it"
    )
    controlled_shutdown_enable: bool = setting(
        True, doc="controlled.shutdown.enable: move leaderships away before stopping"
    )
    controlled_shutdown_max_retries: int = setting(
        3, min=0, doc="controlled.shutdown.max.retries: attempts before stopping anyway"
    )
    controlled_shutdown_retry_backoff_ms: int = setting(
        5_000, min=0, doc="controlled.shutdown.retry.backoff.ms: pause between attempts (Kafka's default)"
    )
    controller_socket_timeout_ms: int = setting(
        30_000, min=1, doc="controller.socket.timeout.ms: the controller's wait for a broker's answer"
    )
    listeners: tuple[str, ...] = setting(
        (),
        convert=_listener_list,
        doc="listeners: PROTOCOL://host:port, comma-separated; PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (empty: PLAINTEXT on host.name:port)",
    )
    ssl_certfile: str | None = setting(
        None, aliases=("ssl.keystore.location",), doc="ssl.certfile: the broker's PEM certificate (chain) for SSL and SASL_SSL listeners"
    )
    ssl_keyfile: str | None = setting(None, doc="ssl.keyfile: its PEM private key (None: in ssl.certfile)")
    ssl_cafile: str | None = setting(
        None, aliases=("ssl.truststore.location",), doc="ssl.cafile: PEM CA certificates that client certificates must chain to"
    )
    ssl_client_auth: Literal["none", "requested", "required"] = setting(
        "none", doc="ssl.client.auth: ask TLS clients for a certificate (required: refuse those without a trusted one)"
    )
    sasl_enabled_mechanisms: tuple[str, ...] = setting(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        convert=_mechanism_list,
        doc="sasl.enabled.mechanisms: SASL mechanisms offered on SASL listeners",
    )
    sasl_credentials_file: str | None = setting(
        None, doc="sasl.credentials.file: SCRAM credentials file (None: ZooKeeper /config/users)"
    )
    connections_max_reauth_ms: int = setting(
        0, min=0, doc="connections.max.reauth.ms: SASL sessions end after this; clients must re-authenticate (KIP-368; 0: never)"
    )
    security_inter_broker_protocol: str | None = setting(
        None,
        convert=convert_upper,
        doc="security.inter.broker.protocol: the listener brokers use to reach each other (None: the first listener)",
    )
    sasl_mechanism_inter_broker_protocol: SaslMechanismName = setting(
        "PLAIN", convert=convert_upper, doc="sasl.mechanism.inter.broker.protocol: SASL mechanism between brokers"
    )
    sasl_inter_broker_username: str | None = setting(
        None, doc="sasl.inter.broker.username: the user a broker authenticates as to the others (SASL inter-broker listener)"
    )
    sasl_inter_broker_password: str | None = setting(
        None, secret=True, doc="sasl.inter.broker.password: that user's password"
    )
    authorizer_class_name: str = setting(
        "", doc="authorizer.class.name: non-empty turns on the ACL authorizer (ACLs in authorizer.acls.file or ZooKeeper)"
    )
    authorizer_acls_file: str | None = setting(
        None, doc="authorizer.acls.file: JSON file of ACLs (None: ZooKeeper /kafka-acl)"
    )
    super_users: tuple[str, ...] = setting(
        (), convert=_principal_list, doc="super.users: principals allowed everything, ';'-separated (User:admin;User:broker)"
    )
    allow_everyone_if_no_acl_found: bool = setting(
        False, doc="allow.everyone.if.no.acl.found: a resource without any ACL is open to all"
    )

    def _validate(self) -> None:
        super()._validate()
        if not self.host.strip():
            self._fail("'host.name' (host) must not be empty")
        if self.log_index_interval_bytes > self.log_segment_bytes:
            self._fail("'log.index.interval.bytes' can't be larger than 'log.segment.bytes'")
        assignors = [a.strip() for a in self.group_consumer_assignors.split(",") if a.strip()]
        if not assignors or any(a not in ("uniform", "range") for a in assignors):
            self._fail("'group.consumer.assignors' must name uniform and/or range")
        if self.group_consumer_migration_policy not in ("disabled", "upgrade", "downgrade", "bidirectional"):
            self._fail("'group.consumer.migration.policy' must be disabled, upgrade, downgrade or bidirectional")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            self._fail("'group.min.session.timeout.ms' can't be larger than 'group.max.session.timeout.ms'")
        if any(parse_listener(x)[0] in ("SSL", "SASL_SSL") for x in self.listeners) and not self.ssl_certfile:
            self._fail("an SSL or SASL_SSL listener needs 'ssl.certfile'")
        if self.ssl_client_auth == "required" and not self.ssl_cafile:
            self._fail("'ssl.client.auth'=required needs 'ssl.cafile' to check client certificates against")
        protocols = [parse_listener(x)[0] for x in self.listeners] or ["PLAINTEXT"]
        inter = self.security_inter_broker_protocol
        if inter is not None and inter not in protocols:
            self._fail(f"'security.inter.broker.protocol'={inter} is not one of the listeners ({', '.join(protocols)})")
        # Without a user a SASL inter-broker listener still serves a broker alone; a channel to
        # another broker then fails naming these settings (BrokerChannel).
        if bool(self.sasl_inter_broker_username) != (self.sasl_inter_broker_password is not None):
            self._fail("'sasl.inter.broker.username' and 'sasl.inter.broker.password' go together")

    @property
    def inter_broker_protocol(self) -> str:
        """The security protocol (= listener name) brokers use to reach each other."""
        if self.security_inter_broker_protocol:
            return self.security_inter_broker_protocol
        return parse_listener(self.listeners[0])[0] if self.listeners else "PLAINTEXT"

