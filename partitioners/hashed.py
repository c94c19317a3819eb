"""Key-hashing partitioners: mmh3 (our default) and the Java client's murmur2.

Both are pure functions of the key bytes, so every process (whatever its
``PYTHONHASHSEED``) and every restart sends a key to the same partition. Python's
built-in ``hash()`` is salted per process and must never be used here.

Keyless messages go to a random partition (the 0.8 producer's behaviour for
``key == null``), which spreads them without coordination between threads.
"""

from __future__ import annotations

import random

import mmh3

from partitioners.base import Key, check_num_partitions, key_bytes

__all__ = ["DefaultPartitioner", "Murmur2Partitioner", "murmur2", "to_positive"]

_MASK32 = 0xFFFFFFFF
_M = 0x5BD1E995
_R = 24
_SEED = 0x9747B28C


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """32-bit MurmurHash2 exactly as ``org.apache.kafka.common.utils.Utils.murmur2``.

    Args:
        data: The key bytes.

    Returns:
        The hash as a *signed* 32-bit int, the value Java's ``int`` holds (so it can be
        compared with the Java client's test vectors directly).
    """
    buf = bytes(data)
    length = len(buf)
    h = (_SEED ^ length) & _MASK32
    n4 = length - (length & 3)
    for i in range(0, n4, 4):
        k = int.from_bytes(buf[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    tail = length & 3
    # Java's switch falls through: case 3 -> case 2 -> case 1 (which also multiplies).
    if tail >= 3:
        h ^= buf[n4 + 2] << 16
    if tail >= 2:
        h ^= buf[n4 + 1] << 8
    if tail >= 1:
        h ^= buf[n4]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Java's ``Utils.toPositive``: clear the sign bit of a 32-bit int.

    Args:
        n: A signed or unsigned 32-bit int.

    Returns:
        ``n & 0x7fffffff`` (never ``abs``: abs(Integer.MIN_VALUE) stays negative in Java).
    """
    return n & 0x7FFFFFFF


class DefaultPartitioner:
    """``mmh3.hash(key, signed=False) % num_partitions``; random partition for ``None``.

    Stable across processes and hosts (MurmurHash3 x86 32-bit, seed 0). Use
    :class:`Murmur2Partitioner` instead when Java producers write the same topic and keys
    must co-partition with theirs.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        """Create the partitioner.

        Args:
            rng: Source of randomness for keyless messages (default: a private
                ``random.Random``; pass a seeded one for reproducible tests).
        """
        self._rng = rng if rng is not None else random.Random()
        self._random = self._rng.random

    def partition(self, key: Key, num_partitions: int) -> int:
        """Return ``mmh3(key) % num_partitions``, or a random partition when key is None.

        Args:
            key: Serialized key (``str`` is utf-8 encoded) or None.
            num_partitions: Partition count, >= 1.

        Returns:
            The partition index.

        Raises:
            ValueError: ``num_partitions`` < 1.
            TypeError: The key is not bytes-like, str or None.
        """
        # The producer asks once per message: the common cases (a null or bytes key, an int
        # count) skip the helper calls. ``int(random() * n)`` is uniform on range(n) and
        # costs a fifth of ``randrange(n)``.
        if num_partitions.__class__ is int and num_partitions > 0:
            if key is None:
                return int(self._random() * num_partitions)
            if key.__class__ is bytes:
                return mmh3.hash(key, signed=False) % num_partitions
        check_num_partitions(num_partitions)
        data = key_bytes(key)
        if data is None:
            return int(self._random() * num_partitions)
        return mmh3.hash(data, signed=False) % num_partitions

    def __repr__(self) -> str:
        return "DefaultPartitioner()"


class Murmur2Partitioner:
    """The Java client's keyed placement: ``toPositive(murmur2(key)) % num_partitions``.

    A key lands on the same partition as with ``org.apache.kafka`` producers (and
    kafka-python's default partitioner). Keyless messages go to a random partition.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        """Create the partitioner.

        Args:
            rng: Source of randomness for keyless messages (default: a private Random).
        """
        self._rng = rng if rng is not None else random.Random()
        self._random = self._rng.random

    def partition(self, key: Key, num_partitions: int) -> int:
        """Return ``toPositive(murmur2(key)) % num_partitions`` (random for None).

        Args:
            key: Serialized key (``str`` is utf-8 encoded) or None.
            num_partitions: Partition count, >= 1.

        Returns:
            The partition index.

        Raises:
            ValueError: ``num_partitions`` < 1.
            TypeError: The key is not bytes-like, str or None.
        """
        if key is None and num_partitions.__class__ is int and num_partitions > 0:
            return int(self._random() * num_partitions)  # as DefaultPartitioner
        check_num_partitions(num_partitions)
        data = key_bytes(key)
        if data is None:
            return int(self._random() * num_partitions)
        return to_positive(murmur2(data)) % num_partitions

    def __repr__(self) -> str:
        return "Murmur2Partitioner()"
