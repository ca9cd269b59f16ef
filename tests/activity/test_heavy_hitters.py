"""Misra-Gries summaries (``state.heavy_hitters``) against exact counts: docs/semantics/windows.md 5's guarantees
hold for one summary and for any merge of summaries of parts of a stream."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.state.heavy_hitters import MisraGries, bounds, merge

keys = st.integers(0, 12)


def check(summary: MisraGries, exact: Counter) -> None:
    total = sum(exact.values())
    assert summary.total == total
    found = {key: (low, high) for key, low, high in bounds(summary)}
    assert len(summary.counters) <= summary.capacity
    for key, (low, high) in found.items():
        assert low <= exact[key] <= high, (key, low, exact[key], high)
        assert (high - low) * summary.capacity <= total
    for key, n in exact.items():
        if n * summary.capacity > total:
            assert key in found, f"{key} has {n} > T/N = {total}/{summary.capacity} but no counter"


@settings(max_examples=300)
@given(stream=st.lists(keys, max_size=200), capacity=st.integers(1, 6))
def test_one_summary(stream, capacity):
    s = MisraGries(capacity)
    for key in stream:
        s.add(key)
    check(s, Counter(stream))
    if len(set(stream)) <= capacity:
        assert s.counters == Counter(stream), "a summary that never filled is exact"


@settings(max_examples=300)
@given(parts=st.lists(st.lists(keys, max_size=60), max_size=8), capacity=st.integers(1, 6),
       groups=st.integers(1, 3))
def test_merged_summaries(parts, capacity, groups):
    """Parts summarized apart (buckets of partitions), merged in groups, then merged again."""
    summaries = []
    for part in parts:
        s = MisraGries(capacity)
        for key in part:
            s.add(key)
        summaries.append(s.state())
    grouped = [merge(capacity, summaries[i::groups]).state() for i in range(groups)]
    check(merge(capacity, grouped), Counter(k for part in parts for k in part))
