"""The producer's settings (:class:`ProducerConfig`), declared on :mod:`hmbclient.config`'s
machinery and re-exported there. Security settings are inherited from
:class:`hmbclient.net.config.SecurityConfig`.
"""

from __future__ import annotations

from typing import Any, Literal

from hmbclient.config import (
    ApiVersion,
    BrokerList,
    config_class,
    parse_broker_list,
    setting,
)
from hmbclient.net.config import SecurityConfig

__all__ = ["CompressionCodec", "ProducerConfig"]

CompressionCodec = Literal["none", "gzip", "snappy", "lz4", "zstd"]


def _acks(value: Any) -> Any:
    return -1 if isinstance(value, str) and value.strip().lower() == "all" else value


_CODEC_BY_NUMBER = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _codec(value: Any) -> Any:
    # Kafka 0.8 accepted the numeric codec ids (0 none, 1 gzip, 2 snappy) as well as names.
    if isinstance(value, int) and not isinstance(value, bool):
        return _CODEC_BY_NUMBER.get(value, value)
    if isinstance(value, str) and value.strip().isdigit():
        return _CODEC_BY_NUMBER.get(int(value), value)
    return value


@config_class
class ProducerConfig(SecurityConfig):
    """Producer settings (Kafka 0.8 ``kafka.producer.ProducerConfig`` names).

    Defaults that differ from Kafka 0.8, and why:

    * ``queue_buffering_max_ms`` = 5 (0.8: 5000). An async batch waits at most this long for
      company; 5 ms keeps latency low while still batching under load (the modern
      ``linger.ms`` trade-off). Set 5000 for 0.8 behaviour.
    * ``request_required_acks`` = 1 (0.8: 0). With 0 the broker sends no response, so the
      producer could never report a failed write; 1 makes futures and sync ``send``
      meaningful.
    * ``client_id`` = "hmbclient" (0.8: "").
    * ``batch.size`` is an alias of ``batch_num_messages`` (a message count, as it was in
      Kafka 0.7's async producer); the byte cap is ``batch_max_bytes``. Note that the modern Java client's
      ``batch.size`` is in bytes.
    """

    metadata_broker_list: BrokerList = setting(
        aliases=("bootstrap.servers", "broker.list"),
        convert=parse_broker_list,
        doc="metadata.broker.list: bootstrap brokers 'host:port,...' (at least one)",
    )
    producer_type: Literal["sync", "async"] = setting(
        "sync", doc="producer.type: sync sends in the caller; async batches in a sender thread"
    )
    request_required_acks: Literal[0, 1, -1] = setting(
        1,
        aliases=("acks",),
        convert=_acks,
        doc="request.required.acks: 0 none, 1 leader, -1/all ISR (not given: -1 when enable.idempotence=true or transactional.id is set)",
    )
    request_timeout_ms: int = setting(
        10_000,
        min=1,
        doc="request.timeout.ms: broker-side ack wait and client-side request timeout",
    )
    compression_codec: CompressionCodec = setting(
        "none",
        aliases=("compression.type",),
        convert=_codec,
        doc="compression.codec: batch compression",
    )
    compressed_topics: tuple[str, ...] = setting(
        (), doc="compressed.topics: compress only these topics (empty: all, if a codec is set)"
    )
    message_send_max_retries: int = setting(
        3, min=0, aliases=("retries",), doc="message.send.max.retries: retries of a failed send"
    )
    retry_backoff_ms: int = setting(
        100, min=0, doc="retry.backoff.ms: wait before refreshing metadata and retrying"
    )
    topic_metadata_refresh_interval_ms: int = setting(
        600_000,
        min=-1,
        doc="topic.metadata.refresh.interval.ms: periodic refresh (<0: only on errors)",
    )
    queue_buffering_max_ms: int = setting(
        5,
        min=0,
        aliases=("queue.time", "linger.ms"),
        doc="queue.buffering.max.ms: max wait to fill an async batch",
    )
    queue_buffering_max_messages: int = setting(
        10_000, min=1, doc="queue.buffering.max.messages: async queue bound (messages)"
    )
    queue_enqueue_timeout_ms: int = setting(
        -1,
        min=-1,
        doc="queue.enqueue.timeout.ms: full queue: -1 block, 0 fail at once, >0 wait then fail",
    )
    batch_num_messages: int = setting(
        200,
        min=1,
        aliases=("batch.size",),
        doc="batch.num.messages: max messages per partition batch",
    )
    batch_max_bytes: int = setting(
        1_048_576, min=1, doc="batch.max.bytes: max bytes per partition batch (hmbclient)"
    )
    send_buffer_bytes: int = setting(
        100 * 1024, min=-1, doc="send.buffer.bytes: socket SO_SNDBUF (-1: OS default)"
    )
    client_id: str = setting("hmbclient", doc="client.id: sent with every request")
    api_version: ApiVersion = setting(
        "auto", doc="api.version: auto (ApiVersions probe), 0.8 / 0.10 / 2.1 pinned, or hmb dialect"
    )
    message_max_bytes: int = setting(
        1_000_000,
        min=0,
        aliases=("max.request.size",),
        doc="message.max.bytes: largest single message accepted by send",
    )
    max_in_flight_requests_per_connection: int = setting(
        5, min=1, doc="max.in.flight.requests.per.connection: pipelined requests per broker"
    )
    enable_idempotence: bool | None = setting(
        None,
        doc="enable.idempotence: sequence numbers so the broker keeps a retried batch once "
        "(unset: on when acks=-1, retries > 0 and at most 5 in flight, as Kafka 3+)",
    )
    transactional_id: str | None = setting(
        None,
        doc="transactional.id: makes the producer transactional (init_transactions(), "
        "begin/commit/abort_transaction()); needs idempotence, acks=-1",
    )
    transaction_timeout_ms: int = setting(
        60_000,
        min=1,
        doc="transaction.timeout.ms: the coordinator aborts a transaction open longer than this",
    )
    serializer: Any = setting(
        None,
        prop="serializer.class",
        aliases=("value.serializer",),
        importable=True,
        doc="serializer.class: value Encoder (None: bytes pass through)",
    )
    key_serializer: Any = setting(
        None,
        prop="key.serializer.class",
        aliases=("key.serializer",),
        importable=True,
        doc="key.serializer.class: key Encoder (None: same as serializer)",
    )
    partitioner: Any = setting(
        None,
        prop="partitioner.class",
        importable=True,
        doc="partitioner.class: Partitioner (None: partitioners.DefaultPartitioner)",
    )
    callback_handler: Any = setting(
        None,
        prop="callback.handler",
        importable=True,
        doc="callback.handler: hooks at each stage of the async pipeline",
    )
    event_handler: Any = setting(
        None,
        prop="event.handler",
        importable=True,
        doc="event.handler: replaces the default send pipeline (0.8 EventHandler)",
    )

    def _validate(self) -> None:
        super()._validate()
        if not self.metadata_broker_list:
            self._fail("'metadata.broker.list' (metadata_broker_list) needs at least one host:port")
        if (
            self.producer_type == "async"
            and self.batch_num_messages > self.queue_buffering_max_messages
        ):
            # Same rule as 0.8's ProducerConfig.validateBatchSize.
            self._fail(
                f"'batch.num.messages' ({self.batch_num_messages}) can't be larger than "
                f"'queue.buffering.max.messages' ({self.queue_buffering_max_messages})"
            )
        if self.transactional_id is not None:
            self._validate_transactional()
        if self.enable_idempotence or self.transactional_id is not None:
            what = "'enable.idempotence'=true" if self.enable_idempotence else "'transactional.id'"
            # Kafka's rules (ProducerConfig): explicitly on, the settings must allow it.
            if self.request_required_acks != -1:
                self._fail(
                    f"{what} needs 'request.required.acks'=-1 (all), not "
                    f"{self.request_required_acks}: a batch acknowledged by the leader alone can be lost"
                )
            if self.message_send_max_retries == 0:
                self._fail(f"{what} needs 'message.send.max.retries' > 0 (retries are what it makes safe)")
            if self.max_in_flight_requests_per_connection > 5:
                self._fail(
                    f"{what} needs 'max.in.flight.requests.per.connection' <= 5, not "
                    f"{self.max_in_flight_requests_per_connection} (the broker remembers the last 5 batches)"
                )
            if self.api_version in ("hmb", "0.8", "0.10"):
                self._fail(f"{what} needs Kafka 0.11+ (RecordBatch v2); api.version is {self.api_version!r}")

    @classmethod
    def _implied(cls, given: dict[str, Any]) -> dict[str, Any]:
        # Kafka's ProducerConfig: with idempotence asked for (enable.idempotence=true or a
        # transactional.id) and acks not given, acks is "all"; given, it must be all.
        idem = given.get("enable_idempotence")
        asked = given.get("transactional_id") is not None or idem is True or (
            isinstance(idem, str) and idem.strip().lower() in ("true", "yes", "on", "1"))
        if asked and "request_required_acks" not in given:
            return {**given, "request_required_acks": -1}
        return given

    def _validate_transactional(self) -> None:
        """A transactional producer is an idempotent one (Kafka's ProducerConfig rules)."""
        tid = self.transactional_id
        if not isinstance(tid, str) or not tid:
            self._fail(f"'transactional.id' must be a non-empty string, not {tid!r}")
        if self.enable_idempotence is False:
            self._fail("'transactional.id' needs idempotence: remove 'enable.idempotence'=false")
        if self.request_required_acks != -1:
            self._fail(
                f"'transactional.id' needs 'request.required.acks'=-1 (all), not {self.request_required_acks}: "
                "a committed transaction must not lose a batch the leader alone held"
            )
        if self.event_handler is not None:
            self._fail("'transactional.id' cannot be used with an 'event.handler' (it replaces the send engine)")

    @property
    def idempotence(self) -> bool:
        """Whether the producer is idempotent: ``enable_idempotence`` if set; unset, on when
        acks=-1, retries > 0, at most 5 requests in flight and a pinned version that allows it
        (Kafka 3+'s default)."""
        if self.enable_idempotence is not None:
            return self.enable_idempotence
        if self.transactional_id is not None:
            return True
        return (
            self.request_required_acks == -1
            and self.message_send_max_retries > 0
            and self.max_in_flight_requests_per_connection <= 5
            and self.api_version not in ("hmb", "0.8", "0.10")
            and self.event_handler is None
        )

