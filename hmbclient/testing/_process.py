"""Child-process hygiene of the local servers (ZooKeeper JVMs, Tansu): the one implementation
lives in :mod:`hmbclient.children` (the broker process uses it too); this module keeps the
names the local servers import."""

from __future__ import annotations

from hmbclient.children import die_with_parent, preexec_for_current_thread

__all__ = ["die_with_parent", "preexec_for_current_thread"]
