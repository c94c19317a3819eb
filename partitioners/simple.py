"""Keyless spreading: RandomPartitioner and RoundRobinPartitioner (keys are ignored)."""

from __future__ import annotations

import itertools
import random
import threading

from partitioners.base import Key, check_num_partitions

__all__ = ["RandomPartitioner", "RoundRobinPartitioner"]


class RandomPartitioner:
    """A uniformly random partition for every message, key or not."""

    def __init__(self, rng: random.Random | None = None) -> None:
        """Create the partitioner.

        Args:
            rng: Source of randomness (default: a private ``random.Random``).
        """
        self._rng = rng if rng is not None else random.Random()

    def partition(self, key: Key, num_partitions: int) -> int:
        """Return a random partition; ``key`` is ignored.

        Args:
            key: Ignored.
            num_partitions: Partition count, >= 1.

        Returns:
            A uniformly chosen index in ``[0, num_partitions)``.

        Raises:
            ValueError: ``num_partitions`` < 1.
        """
        check_num_partitions(num_partitions)
        return self._rng.randrange(num_partitions)

    def __repr__(self) -> str:
        return "RandomPartitioner()"


class RoundRobinPartitioner:
    """0, 1, 2, ... modulo the partition count, one shared counter for all topics.

    Thread-safe: the counter is advanced under a lock, so N concurrent calls get N
    distinct counter values (and therefore an even spread).
    """

    def __init__(self, start: int = 0) -> None:
        """Create the partitioner.

        Args:
            start: The first counter value (default 0).
        """
        self._lock = threading.Lock()
        self._counter = itertools.count(start)

    def partition(self, key: Key, num_partitions: int) -> int:
        """Return the next counter value modulo ``num_partitions``; ``key`` is ignored.

        Args:
            key: Ignored.
            num_partitions: Partition count, >= 1.

        Returns:
            The partition index.

        Raises:
            ValueError: ``num_partitions`` < 1.
        """
        check_num_partitions(num_partitions)
        with self._lock:
            n = next(self._counter)
        return n % num_partitions

    def __repr__(self) -> str:
        return "RoundRobinPartitioner()"
