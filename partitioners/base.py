"""The Partitioner contract shared by every partitioner in this package.

A partitioner maps a message key (already serialized to bytes, or ``None``) and the
number of partitions of a topic to a partition index in ``[0, num_partitions)``. It is
called from the producer's ``send`` path, possibly from several threads at once, so
implementations must be thread-safe and must not block.

This package imports nothing from hmbclient (it is a leaf, see docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Key", "Partitioner", "key_bytes", "check_num_partitions"]

#: What a partitioner accepts as a key: serialized bytes, a str (utf-8 encoded), or None.
Key = bytes | bytearray | memoryview | str | None


@runtime_checkable
class Partitioner(Protocol):
    """Picks the partition of a message from its key."""

    def partition(self, key: Key, num_partitions: int) -> int:
        """Return the partition for ``key``.

        Args:
            key: The serialized key; a ``str`` is utf-8 encoded first; ``None`` means
                "no key" (each implementation documents what it does then).
            num_partitions: How many partitions the topic has (>= 1).

        Returns:
            An index in ``[0, num_partitions)``.

        Raises:
            ValueError: ``num_partitions`` is below 1.
        """
        ...


def key_bytes(key: Key) -> bytes | None:
    """Normalise a key to ``bytes`` (``str`` -> utf-8), keeping ``None``.

    Args:
        key: bytes, bytearray, memoryview, str or None.

    Returns:
        The key as immutable bytes, or None.

    Raises:
        TypeError: The key is of another type (serialize it first with an Encoder).
    """
    if key is None or type(key) is bytes:
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(
        f"partition key must be bytes, str or None, not {type(key).__name__}; "
        "serialize it with a key Encoder first"
    )


def check_num_partitions(num_partitions: int) -> None:
    """Raise ValueError unless ``num_partitions`` is an int >= 1.

    Args:
        num_partitions: The partition count handed to ``partition``.

    Raises:
        ValueError: It is not a positive int.
    """
    if (
        isinstance(num_partitions, bool)
        or not isinstance(num_partitions, int)
        or num_partitions < 1
    ):
        raise ValueError(f"num_partitions must be an int >= 1, got {num_partitions!r}")
