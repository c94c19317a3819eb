"""KIP-101's loss and divergence scenarios (and KIP-279's), replayed step by step on real logs.

Each test drives real partition logs in temporary folders, real ``Partition`` objects and the
leader's side of every follower fetch and OffsetForLeaderEpoch through a real (never started)
``ReplicaManager``; the replica fetcher's truncation rule is the pure
``replica_fetcher.truncation_offset``. No sockets, threads or sleeps: ``replication_steps``
performs what the controller and the fetcher threads would, one step at a time, in the order
each scenario needs (see its docstring).

Where KIP-101 says truncating to the high watermark loses or forks data, the scenario is run a
second time with that rule (``hw_truncation``) and the test asserts the loss or the fork too, so
each test shows the difference the leader epoch makes and fails if the epoch rule is replaced by
the old one.

Drawings: one column per replica, one line per offset, ``m2 e0`` = the record ``m2`` written in
leader epoch 0; ``HW`` marks the replica's high watermark.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hmbclient.broker.partition import Role
from hmbclient.errors import ErrorCode

from .replication_steps import (
    TOPIC,
    Clock,
    Replica,
    TruncationRule,
    batch_epochs,
    contents,
    fetch,
    hw_truncation,
    keys,
    raw_bytes,
    replicate,
    truncate,
)

A, B, C = 1, 2, 3
AB = (A, B)
ABC = (A, B, C)
OK = ErrorCode.NONE


def _same_logs(*replicas: Replica) -> None:
    """Every replica holds the same bytes: records (offsets, keys, values), the epoch stamped
    in each batch, and the same leader-epoch cache."""
    first, *rest = replicas
    for r in rest:
        assert contents(r.log) == contents(first.log), (r, first)
        assert batch_epochs(r.log) == batch_epochs(first.log)
        assert r.epochs() == first.epochs()
        assert raw_bytes(r.log) == raw_bytes(first.log)


# -- scenario 1: loss -------------------------------------------------------------------------------
def _loss_scenario(root: Path, rule: TruncationRule | None = None, magic: int = 2) -> tuple[Replica, Replica, int]:
    """KIP-101 scenario 1, "high watermark truncation followed by immediate leader election".

    Stage 1: A leads epoch 0; m1 and m2 reach B, and B's fetch from 2 moves A's HW to 2, so an
    acks=-1 producer has both acknowledged; the response carrying HW 2 never reaches B::

        A (leader, epoch 0)     B (follower)
        0: m1 e0                0: m1 e0
        1: m2 e0                1: m2 e0    <- HW 1 (checkpointed)
        HW 2 (checkpointed)     (LEO 2)

    Stage 2: B restarts (its HW comes back from the checkpoint: 1), follows A and truncates.
    Stage 3: A dies before B fetches again; B leads epoch 1; A comes back, follows B and
    truncates; m3 is produced to B and replicated.

    Returns ``(A, B, B's log end right after its truncation in stage 2)``.
    """
    clock = Clock()
    a, b = Replica(A, root, clock), Replica(B, root, clock)
    assert a.lead(0, AB, AB) == OK and b.follow(A, 0, AB, AB) == OK
    code, m1_end = a.produce("m1", magic=magic)
    assert code == OK
    fetch(b, a)  # from 0: B has m1
    code, m2_end = a.produce("m2", magic=magic)
    assert code == OK and a.acked(m1_end) is None
    fetch(b, a)  # from 1: A's HW -> 1, B has m2 and learns HW 1
    assert (b.leo, b.hw, a.hw) == (2, 1, 1)
    fetch(b, a, response_lost=True)  # from 2: A's HW -> 2, both acknowledged
    assert a.hw == 2 and a.acked(m1_end) == OK and a.acked(m2_end) == OK
    a.checkpoint()
    b.checkpoint()

    # Stage 2
    b.crash()
    b.restart()
    assert (b.leo, b.hw) == (2, 1)
    assert b.follow(A, 0, AB, AB) == OK
    b_truncated_to = truncate(b, a, rule)

    # Stage 3
    a.crash()
    assert b.lead(1, (B,), AB) == OK
    a.restart()
    assert (a.leo, a.hw) == (2, 2)
    assert a.follow(B, 1, (B,), AB) == OK
    truncate(a, b, rule)
    replicate(b, a, rule=rule)
    assert b.partition.isr == (B, A)
    code, m3_end = b.produce("m3", magic=magic)
    assert code == OK
    replicate(b, a, rule=rule)
    assert b.acked(m3_end) == OK
    return a, b, b_truncated_to


def test_scenario_1_epoch_truncation_keeps_the_acknowledged_m2(tmp_path: Path) -> None:
    """With leader epochs B keeps m2 (A's end of epoch 0 is 2), so the new leader has it::

        after:  A (follower)    B (leader, epoch 1)
                0: m1 e0        0: m1 e0
                1: m2 e0        1: m2 e0
                2: m3 e1        2: m3 e1

    Truncating to the high watermark instead drops m2 on B, which then leads without it: A's
    fetch from 2 is out of range, A truncates to B's end, and m2 -- acknowledged -- is gone from
    every replica.
    """
    a, b, b_truncated_to = _loss_scenario(tmp_path / "epochs")
    assert b_truncated_to == 2
    assert keys(b.log) == ["m1", "m2", "m3"]
    _same_logs(a, b)
    assert b.epochs() == [(0, 0), (1, 2)]
    assert batch_epochs(b.log) == [(0, 2, 0), (1, 2, 0), (2, 2, 1)]
    assert a.hw == b.hw == 3

    # The same steps with the rule before KIP-101.
    a0, b0, b0_truncated_to = _loss_scenario(tmp_path / "hw", rule=hw_truncation)
    assert b0_truncated_to == 1
    assert keys(b0.log) == keys(a0.log) == ["m1", "m3"]  # m2 lost
    _same_logs(a0, b0)
    assert [(r.offset, r.key) for r in contents(b0.log)] == [(0, b"m1"), (1, b"m3")]


# -- scenario 2: divergence --------------------------------------------------------------------------
def _divergence_scenario(root: Path, rule: TruncationRule | None = None) -> tuple[Replica, Replica]:
    """KIP-101 scenario 2, "replica divergence on restart after multiple hard failures".

    Stage 1: A leads epoch 0 with m1 and m2; B has fetched both and everyone knows HW 2, but m2
    had not reached B's disk when the power went: both crash, and B comes back without it::

        A (down)                B (down, after recovery)
        0: m1 e0                0: m1 e0   <- LEO 1
        1: m2 e0                (m2 never reached the disk)
        HW 2

    Stage 2: B comes back first and leads epoch 1 (it is in the ISR), and m3 is written at
    offset 1. Stage 3: A comes back, follows B, truncates and fetches.
    """
    clock = Clock()
    a, b = Replica(A, root, clock), Replica(B, root, clock)
    assert a.lead(0, AB, AB) == OK and b.follow(A, 0, AB, AB) == OK
    assert a.produce("m1")[0] == OK
    fetch(b, a)
    assert a.produce("m2")[0] == OK
    replicate(a, b)
    assert (a.hw, b.hw, b.leo) == (2, 2, 2)
    a.checkpoint()
    b.checkpoint()
    a.crash()
    b.crash(lose_unflushed_from=1)

    # Stage 2
    b.restart()
    assert (b.leo, b.hw) == (1, 1)  # the checkpointed HW 2 is clamped to what recovery kept
    assert b.epochs() == [(0, 0)]
    assert b.lead(1, (B,), AB) == OK
    assert b.produce("m3")[0] == OK
    assert [(r.offset, r.key) for r in contents(b.log)] == [(0, b"m1"), (1, b"m3")]

    # Stage 3
    a.restart()
    assert (a.leo, a.hw) == (2, 2)
    assert a.follow(B, 1, (B,), AB) == OK
    truncate(a, b, rule)
    replicate(b, a, rule=rule)
    return a, b


def test_scenario_2_epoch_truncation_prevents_divergence(tmp_path: Path) -> None:
    """A asks B for the end of epoch 0: B answers 1 (epoch 1 starts there), so A drops m2 and
    fetches m3; both logs end identical::

        after:  A (follower)    B (leader, epoch 1)
                0: m1 e0        0: m1 e0
                1: m3 e1        1: m3 e1

    Truncating to the high watermark (2) instead keeps m2: A fetches from 2, finds nothing new,
    and offset 1 is m2 on A but m3 on B, both below each replica's HW -- the logs diverged.
    """
    a, b = _divergence_scenario(tmp_path / "epochs")
    assert keys(a.log) == keys(b.log) == ["m1", "m3"]
    _same_logs(a, b)
    assert b.epochs() == [(0, 0), (1, 1)]
    assert a.hw == b.hw == 2

    a0, b0 = _divergence_scenario(tmp_path / "hw", rule=hw_truncation)
    assert [(r.offset, r.key) for r in contents(a0.log)] == [(0, b"m1"), (1, b"m2")]
    assert [(r.offset, r.key) for r in contents(b0.log)] == [(0, b"m1"), (1, b"m3")]
    assert a0.hw == b0.hw == 2  # both claim offset 1 is committed, with different messages
    assert b0.partition.isr == (B, A)  # and the leader even counts A as in sync


# -- scenario 3: KIP-279 -----------------------------------------------------------------------------
def _kip101_answer(entries: list[tuple[int, int]], requested: int, log_end_offset: int) -> int:
    """The leader's OffsetsForLeaderEpoch answer as KIP-101 first defined it (Kafka 0.11-1.1,
    before KIP-279): the log end for its latest epoch, else the start offset of the first epoch
    after the requested one; -1 (undefined) below its first epoch."""
    if requested == entries[-1][0]:
        return log_end_offset
    if requested < entries[0][0]:
        return -1
    return next(start for epoch, start in entries if epoch > requested)


def test_scenario_3_kip279_truncates_to_the_end_of_the_largest_common_epoch(tmp_path: Path) -> None:
    """A follower whose latest epoch the new leader never had (KIP-279, clean elections).

    A leads epoch 0: m0, m1 reach everyone (HW 2), m2 reaches B only. A dies; C leads epoch 1
    and writes m3, m4 (acks=-1: never acknowledged, B has not fetched them); C dies before B
    has truncated for epoch 1; B leads epoch 2 and writes m5. C comes back::

        C (follower)       B (leader, epoch 2)   A (down)
        0: m0 e0           0: m0 e0              0: m0 e0
        1: m1 e0           1: m1 e0              1: m1 e0
        2: m3 e1           2: m2 e0              2: m2 e0
        3: m4 e1           3: m5 e2

    C asks for the end of its epoch 1; B never had epoch 1 and answers with the largest epoch it
    has below it, 0, ending at 3. C's own epoch 0 ends at 2, so the logs agree up to 2: C drops
    m3 and m4 and fetches m2 and m5. A comes back too (its epoch 0 ends at 3 on B: nothing to
    drop). Under KIP-101's first answer (the start of B's next epoch after 1, i.e. 3) C would
    have kept m3 at offset 2, where B has m2.
    """
    clock = Clock()
    a, b, c = (Replica(i, tmp_path, clock) for i in ABC)
    assert a.lead(0, ABC, ABC) == OK and b.follow(A, 0, ABC, ABC) == OK and c.follow(A, 0, ABC, ABC) == OK
    assert a.produce("m0", "m1")[0] == OK
    replicate(a, b, c)
    assert a.hw == b.hw == c.hw == 2
    assert a.produce("m2")[0] == OK
    fetch(b, a)
    a.checkpoint()  # the periodic HW checkpoint ran just before
    a.crash()

    assert c.lead(1, (C, B), ABC) == OK
    assert b.follow(C, 1, (C, B), ABC) == OK  # B has not truncated or fetched for epoch 1 yet
    code, m4_end = c.produce("m3", "m4")
    assert code == OK and c.acked(m4_end) is None and c.hw == 2
    c.checkpoint()  # the periodic HW checkpoint ran just before
    c.crash()

    assert b.lead(2, (B,), ABC) == OK
    assert b.produce("m5")[0] == OK
    assert b.epochs() == [(0, 0), (2, 3)]

    c.restart()
    assert c.epochs() == [(0, 0), (1, 2)] and keys(c.log) == ["m0", "m1", "m3", "m4"]
    assert c.follow(B, 2, (B,), ABC) == OK
    assert b.rm.last_offset_for_leader_epoch(TOPIC, 0, 1) == (OK, 0, 3)
    # KIP-101's first answer would have kept C's m3 at offset 2, where B has m2.
    kept = min(_kip101_answer(b.epochs(), 1, b.leo), c.leo)
    assert kept == 3 and contents(c.log)[2].key == b"m3" and contents(b.log)[2].key == b"m2"
    assert truncate(c, b) == 2
    assert c.epochs() == [(0, 0)]
    a.restart()
    assert a.follow(B, 2, (B,), ABC) == OK
    assert truncate(a, b) == 3
    replicate(b, c, a)
    assert keys(b.log) == ["m0", "m1", "m2", "m5"]
    _same_logs(b, c, a)
    assert b.epochs() == [(0, 0), (2, 3)]
    assert b.partition.isr == (B, C, A) and a.hw == b.hw == c.hw == 4


@pytest.mark.parametrize(
    "epoch_2_batches",
    [
        pytest.param([("m4", "m5")], id="one-batch"),
        pytest.param([("m4",), ("m5",)], id="two-batches"),
    ],
)
def test_scenario_3_kip279_epochs_differing_several_epochs_back_need_a_second_round(tmp_path: Path, epoch_2_batches: list[tuple[str, ...]]) -> None:
    """The leader's answer is an epoch the follower never had either (KIP-279's multi-round case).

    Epoch 0 (A): m0, m1 everywhere. Epoch 1 (C, after A died): m2 reaches B, m3 does not.
    Epoch 2 (B, a preferred-leader move with C still in the ISR): m4, m5; B dies before C has
    truncated. Epoch 3 (C, cleanly elected from the ISR): m6, m7; C dies. Epoch 4 (B, an unclean
    election: no ISR member is alive): m8. C comes back and follows B::

        C (follower)       B (leader, epoch 4)
        0: m0 e0           0: m0 e0
        1: m1 e0           1: m1 e0
        2: m2 e1           2: m2 e1
        3: m3 e1           3: m4 e2
        4: m6 e3           4: m5 e2
        5: m7 e3           5: m8 e4

    C asks for the end of epoch 3; B answers (2, 5): epoch 2, which C never had either. C's
    largest epoch below 2 is 1, which ends at 4 in C's log, so C truncates to 4 -- but B's epoch
    1 ends at 3. KIP-279 treats 4 as an intermediate point and asks again, for epoch 1: B
    answers (1, 3) and C truncates to 3, dropping m3. (m6 and m7 are lost either way: that is
    what an unclean election costs; the logs must still agree.)

    With a single round the outcome depends on batch boundaries. If m4 and m5 are one batch,
    C's fetch from 4 gets that batch starting at 3, the append refuses it, and the fetcher goes
    back to truncating: the second round happens by accident and the logs agree. If they are two
    batches, C fetches m5 at 4 and m8 after it and keeps m3 where B has m4: the logs diverged.
    """
    clock = Clock()
    a, b, c = (Replica(i, tmp_path, clock) for i in ABC)
    assert a.lead(0, ABC, ABC) == OK and b.follow(A, 0, ABC, ABC) == OK and c.follow(A, 0, ABC, ABC) == OK
    assert a.produce("m0", "m1")[0] == OK
    replicate(a, b, c)
    a.checkpoint()  # the periodic HW checkpoint ran just before
    a.crash()

    assert c.lead(1, (C, B), ABC) == OK and b.follow(C, 1, (C, B), ABC) == OK
    assert truncate(b, c) == 2
    assert c.produce("m2")[0] == OK
    fetch(b, c)
    assert c.produce("m3")[0] == OK

    assert b.lead(2, (B, C), ABC) == OK and c.follow(B, 2, (B, C), ABC) == OK
    for names in epoch_2_batches:
        assert b.produce(*names)[0] == OK
    b.checkpoint()  # the periodic HW checkpoint ran just before
    b.crash()

    assert c.lead(3, (C,), ABC) == OK
    assert c.produce("m6", "m7")[0] == OK
    c.checkpoint()  # the periodic HW checkpoint ran just before
    c.crash()

    b.restart()
    assert b.lead(4, (B,), ABC) == OK
    assert b.produce("m8")[0] == OK
    assert b.epochs() == [(0, 0), (1, 2), (2, 3), (4, 5)]

    c.restart()
    assert c.epochs() == [(0, 0), (1, 2), (3, 4)]
    assert c.follow(B, 4, (B,), ABC) == OK
    assert b.rm.last_offset_for_leader_epoch(TOPIC, 0, 3) == (OK, 2, 5)
    truncate(c, b)
    replicate(b, c)
    assert keys(b.log) == ["m0", "m1", "m2", "m4", "m5", "m8"]
    assert keys(c.log) == keys(b.log)  # with one round and two batches: m3 instead of m4
    _same_logs(b, c)


# -- scenario 4: legacy messages ------------------------------------------------------------------------
def test_scenario_4_legacy_messages_fall_back_to_the_high_watermark(tmp_path: Path) -> None:
    """v0/v1 messages carry no leader epoch, so KIP-101 cannot help them (Kafka shares this: the
    protection needs message format v2 on every replica). Scenario 1 with v1 messages: the epoch
    caches stay empty (each v1 append clears what ``make_leader`` recorded), B's restart takes
    the no-epoch path and truncates to its HW (1), and the acknowledged m2 is lost exactly as
    before KIP-101::

        after:  A (follower)    B (leader, epoch 1)
                0: m1           0: m1
                1: m3           1: m3
    """
    a, b, b_truncated_to = _loss_scenario(tmp_path, magic=1)
    assert b_truncated_to == 1
    assert keys(a.log) == keys(b.log) == ["m1", "m3"]  # m2 lost: the documented limitation
    assert a.epochs() == b.epochs() == []
    assert {magic for _, magic, _ in batch_epochs(b.log)} == {1}
    _same_logs(a, b)


def test_scenario_4_a_mixed_log_clears_the_epoch_cache(tmp_path: Path) -> None:
    """A v1 entry in the middle of v2 batches clears the epoch cache on the leader and, as the
    follower appends the same bytes, on the follower; the next v2 batch starts the cache again
    at its own offset. The cache then says nothing about the offsets before it::

        A (leader, epoch 0)       B, C (followers)
        0: m1 e0   (v2)           cache after m1:  [(0, 0)]
        1: m2      (v1)           cache after m2:  []
        2: m3 e0   (v2)           cache after m3:  [(0, 2)]

    A follower that still has epochs (C took only m1 and missed the HW that covers it) gets
    "undefined" from a leader whose cache was cleared and falls back to its high watermark:
    it drops m1 and fetches it again (nothing is lost here because the leader has it).
    """
    clock = Clock()
    a, b, c = (Replica(i, tmp_path, clock) for i in ABC)
    assert a.lead(0, ABC, ABC) == OK and b.follow(A, 0, ABC, ABC) == OK and c.follow(A, 0, ABC, ABC) == OK
    assert a.produce("m1")[0] == OK
    fetch(b, a)
    fetch(c, a)  # from 0: m1
    fetch(c, a, response_lost=True)  # from 1: A's HW -> 1, which C never learns
    fetch(b, a)
    assert a.hw == 1 and b.hw == 1 and (c.leo, c.hw) == (1, 0)
    assert a.epochs() == b.epochs() == c.epochs() == [(0, 0)]

    assert a.produce("m2", magic=1)[0] == OK
    assert a.epochs() == []
    fetch(b, a)
    assert b.epochs() == []

    # C still has epoch 0; the leader has no epochs at all: "undefined", and C keeps only what
    # it knows to be committed.
    assert a.rm.last_offset_for_leader_epoch(TOPIC, 0, 0) == (OK, -1, -1)
    assert c.follow(A, 0, ABC, ABC) == OK
    assert truncate(c, a) == 0
    assert c.epochs() == []

    assert a.produce("m3")[0] == OK
    assert a.epochs() == [(0, 2)]
    replicate(a, b, c)
    assert batch_epochs(a.log) == [(0, 2, 0), (1, 1, None), (2, 2, 0)]
    assert keys(a.log) == ["m1", "m2", "m3"]
    _same_logs(a, b, c)
    assert a.epochs() == [(0, 2)]
    assert a.hw == b.hw == c.hw == 3


# -- scenario 5: the leader's side ----------------------------------------------------------------------
def test_scenario_5_leader_hw_and_acks_across_isr_changes(tmp_path: Path) -> None:
    """The leader's high watermark never goes backwards: not on follower fetches, not when a
    follower reports an offset below it, not on ISR shrink or expand, not on a new epoch; an
    acks=-1 produce whose ISR shrank below ``min.insync.replicas`` before the HW reached it
    fails with NOT_ENOUGH_REPLICAS_AFTER_APPEND; a replica that stopped leading answers
    NOT_LEADER_FOR_PARTITION and ignores a LeaderAndIsr older than its epoch."""
    clock = Clock()
    a, b, c = (Replica(i, tmp_path, clock, min_insync_replicas=2, replica_lag_time_max_ms=1000) for i in ABC)
    hws: list[int] = []

    def step() -> None:
        hws.append(a.hw)
        assert hws == sorted(hws), f"the leader's HW went backwards: {hws}"
        for f in (b, c):
            assert f.hw <= min(f.leo, a.hw)

    assert a.lead(0, ABC, ABC) == OK and b.follow(A, 0, ABC, ABC) == OK and c.follow(A, 0, ABC, ABC) == OK
    code, m0_end = a.produce("m0")
    assert code == OK and a.acked(m0_end) is None
    for f in (b, c, b, c):
        fetch(f, a)
        step()
    assert a.hw == 1 and a.acked(m0_end) == OK

    # C stops fetching: it leaves the ISR after the lag time, and the HW moves on with B.
    code, m2_end = a.produce("m1", "m2")
    fetch(b, a)
    fetch(b, a)
    step()
    assert a.hw == 1 and a.acked(m2_end) is None  # C is still in the ISR, at 1
    clock.advance(600)
    fetch(b, a)
    clock.advance(600)
    assert a.partition.maybe_shrink_isr(1000)
    step()
    assert a.partition.isr == (A, B) and a.hw == 3 and a.acked(m2_end) == OK

    # B stops too: the ISR shrinks below min.insync.replicas=2 before the HW reaches m3.
    code, m3_end = a.produce("m3")
    assert code == OK and a.acked(m3_end) is None
    clock.advance(1001)
    assert a.partition.maybe_shrink_isr(1000)
    step()
    assert a.partition.isr == (A,) and a.hw == m3_end
    assert a.acked(m3_end) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    leo = a.leo
    assert a.produce("m4") == (ErrorCode.NOT_ENOUGH_REPLICAS, -1) and a.leo == leo  # nothing written
    code, m4_end = a.produce("m4", acks=1)
    assert code == OK and a.hw == m4_end == 5
    step()

    # Both come back: a follower joins the ISR only once it has reached the HW, so expanding
    # cannot pull the HW back.
    fetch(c, a)  # from 1: gets m1..m4, still behind the HW it fetched from
    step()
    assert a.partition.isr == (A,)
    fetch(c, a)  # from 5
    step()
    assert a.partition.isr == (A, C)
    fetch(b, a)
    fetch(b, a)
    step()
    assert a.partition.isr == (A, C, B) and a.hw == 5

    # A follower in the ISR reporting an offset below the HW (say it restarted and fell back to
    # an older HW) does not move the HW back.
    assert not a.partition.on_follower_fetch(C, 2, a.leo)
    step()
    assert a.hw == 5
    # Nor does a new epoch, which forgets every follower's progress.
    assert a.lead(1, ABC, ABC) == OK
    step()
    assert a.hw == 5 and a.epochs() == [(0, 0), (1, 5)]
    code, m5_end = a.produce("m5")
    assert code == OK and a.acked(m5_end) is None

    # Leadership moves to B: the waiting produce and new ones answer NOT_LEADER; a stale
    # LeaderAndIsr (epoch 1 < 2) is refused and changes nothing.
    assert a.follow(B, 2, ABC, ABC) == OK
    assert a.partition.role is Role.FOLLOWER
    assert a.acked(m5_end) == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert a.produce("m6") == (ErrorCode.NOT_LEADER_FOR_PARTITION, -1)
    assert a.rm.last_offset_for_leader_epoch(TOPIC, 0, 1)[0] != OK
    assert a.lead(1, ABC, ABC) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert a.partition.role is Role.FOLLOWER and a.partition.leader_id == B
    step()
    assert a.hw == 5
