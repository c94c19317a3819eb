"""Range and round-robin assignment: the 0.8 examples plus hypothesis properties."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalance import ASSIGNORS, java_sort_key, java_string_hash, range_assign, roundrobin_assign

Subscription = tuple[dict[str, list[int]], dict[str, list[str]]]


@st.composite
def group_states(draw: st.DrawFn, identical: bool = False) -> Subscription:
    """Topics with partitions, and consumers subscribing with 0..3 streams per topic."""
    topics = draw(
        st.lists(
            st.sampled_from(["a", "b", "events", "T", "x.y", "ü"]),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    partitions = {t: draw(st.lists(st.integers(0, 40), max_size=16, unique=True)) for t in topics}
    consumers = draw(
        st.lists(
            st.sampled_from(["c1", "c2", "g_host-17-ab", "c10", "Z"]),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    threads: dict[str, list[str]] = {t: [] for t in topics}
    for c in consumers:
        if identical:
            n = draw(st.integers(1, 3))
            for t in topics:
                threads[t].extend(f"{c}-{i}" for i in range(n))
        else:
            for t in topics:
                threads[t].extend(f"{c}-{i}" for i in range(draw(st.integers(0, 3))))
    threads = {t: ts for t, ts in threads.items() if ts or identical}
    if draw(st.booleans()):  # a topic nobody subscribed to is ignored
        partitions["unsubscribed"] = [0, 1]
    return partitions, threads


def _owners(assignment: dict[str, list[tuple[str, int]]]) -> collections.Counter[tuple[str, int]]:
    return collections.Counter(tp for owned in assignment.values() for tp in owned)


def _shuffled(state: Subscription, seed: int) -> Subscription:
    rng = random.Random(seed)
    partitions, threads = state
    p = {t: rng.sample(v, len(v)) for t, v in rng.sample(list(partitions.items()), len(partitions))}
    th = {t: rng.sample(v, len(v)) for t, v in rng.sample(list(threads.items()), len(threads))}
    return p, th


def _check_common(state: Subscription, assignment: dict[str, list[tuple[str, int]]]) -> None:
    partitions, threads = state
    owners = _owners(assignment)
    expected = {(t, p) for t, ts in threads.items() if ts for p in partitions.get(t, [])}
    # Every subscribed partition has exactly one owner thread; nothing else is owned.
    assert set(owners) == expected
    assert all(n == 1 for n in owners.values())
    # Only threads subscribed to a topic get its partitions; every thread is listed.
    for thread, owned in assignment.items():
        for topic, _ in owned:
            assert thread in threads[topic]
        assert owned == sorted(owned, key=lambda tp: (java_sort_key(tp[0]), tp[1]))
    assert set(assignment) == {t for ts in threads.values() for t in ts}


@settings(max_examples=300)
@given(group_states(), st.integers())
def test_range_properties(state: Subscription, seed: int) -> None:
    assignment = range_assign(*state)
    _check_common(state, assignment)
    partitions, threads = state
    for topic, ts in threads.items():
        counts = [sum(1 for t, _ in assignment[th] if t == topic) for th in ts]
        if counts:
            assert max(counts) - min(counts) <= 1
        # Contiguous ranges, earlier (sorted) threads get the lower partitions.
        ordered = sorted(ts, key=java_sort_key)
        laid_out = [p for th in ordered for t, p in assignment[th] if t == topic]
        assert laid_out == sorted(partitions.get(topic, []))
    assert range_assign(*_shuffled(state, seed)) == assignment


@settings(max_examples=300)
@given(group_states(identical=True), st.integers())
def test_roundrobin_properties(state: Subscription, seed: int) -> None:
    assignment = roundrobin_assign(*state)
    _check_common(state, assignment)
    counts = [len(owned) for owned in assignment.values()]
    assert max(counts) - min(counts) <= 1
    assert roundrobin_assign(*_shuffled(state, seed)) == assignment


def test_range_matches_the_0_8_documented_example() -> None:
    # Two consumers with two streams each, five partitions (RangeAssignor's scaladoc).
    threads = {"t": ["C2-1", "C1-0", "C2-0", "C1-1"]}
    assert range_assign({"t": [4, 3, 2, 1, 0]}, threads) == {
        "C1-0": [("t", 0), ("t", 1)],
        "C1-1": [("t", 2)],
        "C2-0": [("t", 3)],
        "C2-1": [("t", 4)],
    }


def test_range_with_more_threads_than_partitions() -> None:
    assert range_assign({"t": [0, 1]}, {"t": ["a-0", "b-0", "c-0"]}) == {
        "a-0": [("t", 0)],
        "b-0": [("t", 1)],
        "c-0": [],
    }


def test_thread_ids_sort_as_strings_like_java() -> None:
    # "c-10" < "c-2" as strings: Java 0.8 sorts thread ids lexicographically, not numerically.
    result = range_assign({"t": [0, 1, 2]}, {"t": ["c-2", "c-10", "c-1"]})
    assert result == {"c-1": [("t", 0)], "c-10": [("t", 1)], "c-2": [("t", 2)]}


def test_roundrobin_deals_in_java_hash_order() -> None:
    parts = {"a": [0, 1, 2], "b": [0, 1]}
    threads = {"a": ["c1-0", "c2-0"], "b": ["c2-0", "c1-0"]}
    order = sorted(
        [(t, p) for t in parts for p in parts[t]],
        key=lambda tp: java_string_hash(f"[{tp[0]},{tp[1]}]"),
    )
    expected: dict[str, list[tuple[str, int]]] = {"c1-0": [], "c2-0": []}
    for i, tp in enumerate(order):
        expected[["c1-0", "c2-0"][i % 2]].append(tp)
    assert roundrobin_assign(parts, threads) == {k: sorted(v) for k, v in expected.items()}


def test_roundrobin_requires_identical_subscriptions() -> None:
    with pytest.raises(ValueError, match="same topics"):
        roundrobin_assign({"a": [0], "b": [0]}, {"a": ["c1-0", "c2-0"], "b": ["c1-0"]})


def test_java_string_hash_known_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogates
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE


def test_java_sort_key_orders_utf16_code_units() -> None:
    # U+FF21 (BMP, above the surrogates) sorts after U+1F600 in Java but before in Python.
    assert sorted(["\U0001f600", "\uff21"]) == ["\uff21", "\U0001f600"]
    assert sorted(["\U0001f600", "\uff21"], key=java_sort_key) == ["\U0001f600", "\uff21"]


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="twice"):
        range_assign({"t": [0, 0]}, {"t": ["a-0"]})
    with pytest.raises(ValueError, match="twice"):
        range_assign({"t": [0]}, {"t": ["a-0", "a-0"]})
    with pytest.raises(ValueError, match="bad partition"):
        range_assign({"t": [-1]}, {"t": ["a-0"]})


def test_empty_inputs_and_registry() -> None:
    assert range_assign({}, {}) == {} == roundrobin_assign({}, {})
    assert roundrobin_assign({"t": [0]}, {"t": []}) == {}
    assert ASSIGNORS == {"range": range_assign, "roundrobin": roundrobin_assign}
