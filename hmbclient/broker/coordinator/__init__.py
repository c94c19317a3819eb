"""The group coordinator of the embedded broker (Kafka's classic group protocol).

``state`` is the pure state machine, ``delayed`` the delayed operations (DelayedJoin,
InitialDelayedJoin, DelayedHeartbeat, DelayedSync), ``coordinator`` the I/O shell the broker
wires to its request handlers and offset manager.
"""

from __future__ import annotations

__all__ = ["GroupCoordinator", "GroupConfig"]


def __getattr__(name: str) -> object:
    # Lazy, so that importing the pure state machine does not pull in the shell (its purgatory,
    # threads and clocks).
    if name == "GroupCoordinator":
        from hmbclient.broker.coordinator.coordinator import GroupCoordinator

        return GroupCoordinator
    if name == "GroupConfig":
        from hmbclient.broker.coordinator.state import GroupConfig

        return GroupConfig
    raise AttributeError(name)
