"""Hooks into the producer pipeline (Kafka 0.8's ``callback.handler`` and ``event.handler``).

:class:`CallbackHandler` — subclass it and override the hooks you need; the producer calls only
the hooks a subclass overrides, so an unused hook costs nothing. Stages, in order:

    after_enqueue(data, added)     caller thread, async mode: ``data`` entered the queue
                                   (``added`` False: the queue was full and it was refused)
    after_batching(batch)          sender thread: a partition batch closed (size, bytes, linger)
    before_send(batches, node_id)  sender (or caller, sync mode): about to go out in one request
    on_delivery(batch)             the broker acknowledged; ``batch.base_offset`` is set
    on_error(batch, error)         the batch failed for good (retries exhausted / not retriable)
    close()                        the producer is closing

Exceptions raised by a hook are logged and swallowed: monitoring must not lose messages.

:class:`EventHandler` — replaces serialize-partition-send (Kafka 0.8 ``event.handler``). The
async sender hands it the dequeued ProducerData in batches of up to ``batch_num_messages``
(or after ``queue_buffering_max_ms``); sync mode hands it each ``send``'s list. ``handle`` may
return one RecordMetadata per message (flattened, in order); otherwise the futures resolve
to ``RecordMetadata(topic, -1, None)``. An exception fails the futures of that call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hmbclient.producer.data import ProducerBatch, ProducerData, RecordMetadata

__all__ = ["CallbackHandler", "EventHandler", "overridden_hooks"]


class CallbackHandler:
    """Base class for pipeline hooks; every hook is a no-op here."""

    def after_enqueue(self, data: ProducerData, added: bool) -> None:
        """``data`` was put in the async queue (``added``) or refused because it was full."""

    def after_batching(self, batch: ProducerBatch) -> None:
        """A partition batch closed and waits for the sender."""

    def before_send(self, batches: Sequence[ProducerBatch], node_id: int) -> None:
        """``batches`` are about to be sent to broker ``node_id`` in one Produce request."""

    def on_delivery(self, batch: ProducerBatch) -> None:
        """The broker acknowledged ``batch`` (``batch.base_offset`` holds its first offset)."""

    def on_error(self, batch: ProducerBatch, error: BaseException) -> None:
        """``batch`` failed for good with ``error``."""

    def close(self) -> None:
        """The producer is closing."""


_HOOKS = ("after_enqueue", "after_batching", "before_send", "on_delivery", "on_error", "close")


def overridden_hooks(handler: Any) -> dict[str, Any]:
    """The hooks ``handler`` really implements, as bound methods (base-class no-ops left out).

    Duck-typed handlers (not CallbackHandler subclasses) contribute every hook they define.
    """
    if handler is None:
        return {}
    out: dict[str, Any] = {}
    for name in _HOOKS:
        fn = getattr(handler, name, None)
        if fn is None or not callable(fn):
            continue
        base = getattr(CallbackHandler, name)
        if getattr(type(handler), name, None) is base:
            continue
        out[name] = fn
    return out


@runtime_checkable
class EventHandler(Protocol):
    """Replaces the default serialize-partition-send step (0.8 ``kafka.producer.EventHandler``)."""

    def handle(self, events: Sequence[ProducerData]) -> Sequence[RecordMetadata] | None:
        """Deliver ``events``; return one RecordMetadata per message, or None."""
        ...

    def close(self) -> None: ...
