"""An idempotent producer's identity and sequences: the one place they live.

Kafka's idempotent producer (KIP-98; epoch bumps, KIP-360): the broker gives the producer an
id and an epoch (InitProducerId); every record batch the producer sends carries them and the
*base sequence* of its first record, counted per partition from 0. The broker stores a batch
only if its sequence follows the last one it stored for that producer and partition, answers
a batch it already holds (a retry whose first answer was lost) with the original offset and
stores nothing, and refuses a gap (OUT_OF_ORDER_SEQUENCE_NUMBER) or a producer it no longer
knows (UNKNOWN_PRODUCER_ID).

:class:`IdempotenceState` holds that state for one producer; the send engine
(sender.py) is its only user and consults it under its single driver, so it takes no lock.
Its contract:

* ``producer_id`` / ``epoch``: -1 until the first InitProducerId answer; ``wanted`` is set
  while the producer needs an identity (none yet, or a bump asked by :meth:`ask_bump`). While
  it is set the engine sends nothing new; once nothing is in flight it asks InitProducerId
  and calls :meth:`reset`.
* :meth:`assign` gives a unit its base sequence the first time the unit is sent and advances
  the partition's next sequence by the unit's record count. A unit keeps its sequence, and its
  batches stay together as one record batch, across retries (the accumulator resends exactly
  the batches of its ``wire`` group), so the broker recognises a retry.
* :meth:`rewind`: a unit the broker certainly did not store (it answered an error, and no
  earlier attempt's fate is unknown) and that is given up frees its sequences: the
  partition's next sequence goes back to the unit's base. Sound because a partition has one
  Produce in flight at a time (the accumulator mutes it), so nothing after it was sequenced.
* A unit given up while it *may* be stored (a lost answer, a timeout) keeps its sequences: if
  the broker has it, the next batch follows on; if not, the next batch meets
  OUT_OF_ORDER_SEQUENCE_NUMBER, which asks for a bump.
* :meth:`reset` (new identity): every partition's sequence restarts at 0. Batches still queued
  that carry a sequence of the old identity are re-sequenced if the broker certainly did not
  store them, and failed with :class:`~hmbclient.errors.UnresolvedSequenceError` if it may
  have: sent again under the new identity the broker could not recognise them, and a
  duplicate is what idempotence promises never to make.
* KIP-360 bump: InitProducerId v3+ carrying the current id and epoch returns the same id with
  the next epoch. The codec speaks InitProducerId v0-1 (v2+ are flexible versions, a later
  issue), so today a bump is a new producer id — the same effect for an idempotent producer
  (sequences restart, the broker forgets nothing it needs); :meth:`bump_fields` is where the
  v3 request's fields come from once the codec has it.

Room for transactions: a transactional producer adds its transactional id and coordinator
state beside this object; the per-partition sequences and the identity stay here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["IdempotenceState", "ProducerEvent", "NO_PRODUCER_ID"]

NO_PRODUCER_ID = -1

# ProducerEvent kinds
PRODUCER_ID_ASSIGNED = "producer_id_assigned"  # the first identity
PRODUCER_ID_RENEWED = "producer_id_renewed"  # a bump (new epoch or new id) after ``reason``
BATCHES_UNRESOLVED = "batches_unresolved"  # ``count`` messages failed: fate unknown at a bump
IDEMPOTENCE_OFF = "idempotence_off"  # the broker cannot do it and it was not asked for


class ProducerEvent(NamedTuple):
    """An idempotence status event, handed to ``Producer.add_listener`` listeners."""

    kind: str
    producer_id: int
    epoch: int
    reason: str
    messages: int = 0  # BATCHES_UNRESOLVED: how many messages failed


class IdempotenceState:
    """See the module docstring."""

    __slots__ = ("producer_id", "epoch", "wanted", "reason", "retry_at", "explicit", "_next_seq")

    def __init__(self, *, explicit: bool) -> None:
        self.producer_id = NO_PRODUCER_ID
        self.epoch = -1
        self.wanted = True  # an identity is needed before anything is sent
        self.reason = "first send"
        self.retry_at = 0.0  # monotonic ms: no InitProducerId before (after a failed one)
        self.explicit = explicit  # enable.idempotence=true was asked (vs. the acks=-1 default)
        self._next_seq: dict[tuple[str, int], int] = {}

    def ask_bump(self, reason: str) -> None:
        """The broker's state and ours disagree: get a new identity before sending more."""
        if not self.wanted:
            self.wanted = True
            self.reason = reason

    def bump_fields(self) -> dict[str, Any]:
        """The InitProducerId fields of a bump (KIP-360: v3+ carry the current id and epoch;
        versions that lack them drop them and the broker issues a new id)."""
        return {"producer_id": self.producer_id, "producer_epoch": self.epoch}

    def reset(self, producer_id: int, epoch: int) -> None:
        """A new identity: sequences restart at 0 on every partition."""
        self.producer_id = producer_id
        self.epoch = epoch
        self.wanted = False
        self.reason = ""
        self._next_seq.clear()

    def assign(self, topic: str, partition: int, count: int) -> int:
        """The base sequence of a unit of ``count`` records sent now; advances the partition's
        next sequence (wrapping at 2**31, as Kafka's)."""
        key = (topic, partition)
        base = self._next_seq.get(key, 0)
        self._next_seq[key] = (base + count) & 0x7FFFFFFF
        return base

    def rewind(self, topic: str, partition: int, base: int) -> None:
        """A unit certainly not stored is given up: its sequences are free again."""
        self._next_seq[(topic, partition)] = base

    def next_sequence(self, topic: str, partition: int) -> int:
        return self._next_seq.get((topic, partition), 0)
