"""Partitioners: map a message key to a partition of its topic.

``Partitioner`` is a Protocol (``partition(key, num_partitions) -> int``); any object with
that method works. Implementations:

- :class:`DefaultPartitioner` — ``mmh3(key) % n``; random for keyless messages.
- :class:`Murmur2Partitioner` — the Java client's ``toPositive(murmur2(key)) % n``.
- :class:`RandomPartitioner` — uniformly random.
- :class:`RoundRobinPartitioner` — a thread-safe shared counter.

Keys may be ``bytes``/``bytearray``/``memoryview``, ``str`` (utf-8 encoded) or ``None``.
This package imports nothing from hmbclient.
"""

from partitioners.base import Key, Partitioner, key_bytes
from partitioners.hashed import DefaultPartitioner, Murmur2Partitioner, murmur2, to_positive
from partitioners.simple import RandomPartitioner, RoundRobinPartitioner

__all__ = [
    "Key",
    "Partitioner",
    "key_bytes",
    "DefaultPartitioner",
    "Murmur2Partitioner",
    "RandomPartitioner",
    "RoundRobinPartitioner",
    "murmur2",
    "to_positive",
]
