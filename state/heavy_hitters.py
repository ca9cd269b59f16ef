"""Misra-Gries summaries: bounded memory for the approximate global ranking (docs/semantics/windows.md 5).

A summary of capacity ``N`` over a stream of ``T`` items keeps at most ``N``
counters, each an underestimate of its key's true count by at most ``(T - kept) /
(N + 1)``, where ``kept`` is the sum of the counters (Misra and Gries 1982; the
bound and the merge are Agarwal et al., "Mergeable Summaries", 2012). Summaries
merge: add the counters, then subtract the ``(N+1)``-th largest from all and keep
the positive ones; the bound holds for the merged stream. So every counter
partition keeps one per bucket, and the merger combines those of the window's
buckets into one summary of the whole window.

From a summary, :func:`bounds` gives each candidate's ``count_low`` (its counter)
and ``count_high`` (its counter plus the bound): ``count_low <= true <= count_high``
and ``count_high - count_low <= T / N``; a key whose true count exceeds ``T / N``
(indeed ``T / (N + 1)``) always has a counter; and a summary that never had to
drop anything is exact (``kept == T``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class MisraGries:
    """One summary: ``counters`` (at most ``capacity``) and ``total``, the items it has seen.

    >>> s = MisraGries(2)
    >>> for key in "aabac":
    ...     s.add(key)
    >>> s.total, s.counters
    (5, {'a': 2})
    >>> bounds(s)  # 'a' is really 3: within [2, 2 + (5 - 2) // 3]
    [('a', 2, 3)]
    """

    __slots__ = ("capacity", "counters", "total")

    def __init__(self, capacity: int, counters: dict[Hashable, int] | None = None, total: int = 0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.counters: dict[Hashable, int] = dict(counters or {})
        self.total = total

    def add(self, key: Hashable) -> None:
        """One item. O(1), and O(N) when the summary is full and ``key`` is new: then every
        counter loses one (which happens at most ``total / (N + 1)`` times)."""
        self.total += 1
        counters = self.counters
        n = counters.get(key)
        if n is not None:
            counters[key] = n + 1
        elif len(counters) < self.capacity:
            counters[key] = 1
        else:
            for k in list(counters):
                if counters[k] == 1:
                    del counters[k]
                else:
                    counters[k] -= 1

    def state(self) -> tuple[dict[Hashable, int], int]:
        return dict(self.counters), self.total


def merge(capacity: int, summaries: Iterable[tuple[dict[Hashable, int], int]]) -> MisraGries:
    """One summary of the streams of ``summaries`` (``(counters, total)`` pairs).

    >>> merged = merge(1, [({"a": 3}, 4), ({"b": 2}, 2)])
    >>> merged.counters, merged.total
    ({'a': 1}, 6)
    """
    counters: dict[Hashable, int] = {}
    total = 0
    for mine, n in summaries:
        total += n
        for key, c in mine.items():
            counters[key] = counters.get(key, 0) + c
    if len(counters) > capacity:
        cut = sorted(counters.values(), reverse=True)[capacity]
        counters = {key: c - cut for key, c in counters.items() if c > cut}
    return MisraGries(capacity, counters, total)


def bounds(summary: MisraGries) -> list[tuple[Hashable, int, int]]:
    """Every candidate as ``(key, count_low, count_high)``."""
    slack = (summary.total - sum(summary.counters.values())) // (summary.capacity + 1)
    return [(key, c, c + slack) for key, c in summary.counters.items()]
