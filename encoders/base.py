"""The Encoder / Decoder contracts (Kafka 0.8's ``kafka.serializer.Encoder``/``Decoder``).

An Encoder turns an application object into the bytes of a message key or value; a
Decoder does the reverse. ``None`` is not an object to encode: it is Kafka's null (a
keyless message, or a tombstone value), so every encoder here maps ``None`` to ``None`` and
every decoder maps ``None`` back to ``None``. Encoders and decoders are called from
producer and consumer threads concurrently and must hold no mutable state.

This package imports nothing from hmbclient (it is a leaf, see docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

__all__ = ["Encoder", "Decoder"]

T_contra = TypeVar("T_contra", contravariant=True)
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class Encoder(Protocol[T_contra]):
    """Serializes a key or value to message bytes."""

    def to_message(self, obj: T_contra | None) -> bytes | None:
        """Return the wire bytes of ``obj``.

        Args:
            obj: The object to serialize; ``None`` is Kafka's null.

        Returns:
            The bytes, or ``None`` when ``obj`` is ``None``.

        Raises:
            TypeError: ``obj`` is of a type this encoder cannot serialize.
        """
        ...


@runtime_checkable
class Decoder(Protocol[T_co]):
    """Deserializes message bytes back to an application object."""

    def from_message(self, data: bytes | None) -> T_co | None:
        """Return the object ``data`` encodes.

        Args:
            data: The key or value bytes from a message; ``None`` is Kafka's null.

        Returns:
            The object, or ``None`` when ``data`` is ``None``.

        Raises:
            ValueError: ``data`` is not valid for this decoder (e.g. bad utf-8 or JSON).
        """
        ...
