"""How Spark's driver and executors reach the cluster: :class:`ReadSettings` and its consumers.

:class:`ReadSettings` is the one value every task receives: plain, frozen and picklable, built
on the driver from the validated options (:mod:`spark_integration.options`). Consumers are
never shipped; each side opens its own SimpleConsumers with :func:`open_consumer` where it
uses them and always closes them (:func:`close_quietly` when an error is already on its way).
:func:`is_transient` says which failures both sides retry after looking the leader up again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hmbclient.errors import BrokerError, KafkaConnectionError

__all__ = ["Leader", "ReadSettings", "open_consumer", "close_quietly", "is_transient"]

log = logging.getLogger("hmbclient.spark")

#: A partition leader's ``(host, port)``.
Leader = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How to reach the cluster and read from it (picklable; shipped to every task).

    Attributes:
        brokers: Bootstrap ``(host, port)`` pairs (``metadata.broker.list``).
        fetch_message_max_bytes: Bytes asked per partition per fetch.
        socket_timeout_ms: SimpleConsumer socket timeout.
        client_id: Client id sent to brokers.
        api_version: ``"auto"`` or a pinned version set / dialect name.
        max_retries: Attempts after a leader move or connection loss before failing the task.
        retry_backoff_ms: Pause before such a retry (``refresh.leader.backoff.ms``).
        security: The client security settings as ``(property, value)`` pairs (TLS, SASL;
            empty: PLAINTEXT); the password travels to the tasks as Spark's own Kafka source
            ships its options, and is left out of the repr.
        isolation_level: ``read_uncommitted`` or ``read_committed`` (latest offsets are then
            the last stable offsets, and aborted records are not read).
        fail_on_data_loss: ``failOnDataLoss``: False skips offsets the log no longer holds
            (logging the lost range) instead of failing the task.
        include_headers: ``includeHeaders``: add the ``headers`` column.
    """

    brokers: tuple[tuple[str, int], ...]
    fetch_message_max_bytes: int = 1024 * 1024
    socket_timeout_ms: int = 30_000
    client_id: str = "hmb-spark"
    api_version: str = "auto"
    max_retries: int = 3
    retry_backoff_ms: int = 200
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    isolation_level: str = "read_uncommitted"
    fail_on_data_loss: bool = True
    include_headers: bool = False

    def security_settings(self) -> dict[str, Any]:
        """The security settings as keyword arguments of a client config."""
        return dict(self.security)


def open_consumer(settings: ReadSettings, leader: Leader) -> Any:
    """A SimpleConsumer connected to ``leader`` with ``settings``; the caller closes it."""
    from hmbclient import SimpleConsumer

    host, port = leader
    return SimpleConsumer(
        host,
        port,
        so_timeout_ms=settings.socket_timeout_ms,
        # SO_RCVBUF: room for a whole fetch response keeps the kernel from throttling the read.
        buffer_size=max(65_536, min(settings.fetch_message_max_bytes + 65_536, 4 << 20)),
        client_id=settings.client_id,
        api_version=settings.api_version,
        fetch_message_max_bytes=settings.fetch_message_max_bytes,
        isolation_level=settings.isolation_level,
        **settings.security_settings(),
    )


def close_quietly(consumer: Any) -> None:
    """Close ``consumer``, logging (not raising) a failure: an error is already being handled."""
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing must not mask the error being handled
        log.debug("closing a consumer failed", exc_info=True)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth another attempt after looking the leader up again.

    Lost connections and timeouts are; so are broker errors that say the metadata is stale
    (the leader moved) or that are retriable. Anything else is the answer.
    """
    if isinstance(exc, BrokerError):
        return exc.invalid_metadata or exc.retriable
    return isinstance(exc, (KafkaConnectionError, OSError))
