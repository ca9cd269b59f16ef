"""The counter stages' ordered indexes, named by what they assume of their input, and the
one merge of their local tops.

Every counter partition answers one question for the merger: its first ``k`` entries in
the product's ranking order. How cheaply it can answer depends on how its entries change,
so there is one index per contract (as Flink picks a rank operator by the same property
of its input), all behind :class:`OrderedIndex`:

* :class:`RetractableIndex`: every key's count, and counts go up **and down** (a listener
  leaves, a switch moves one). It assumes nothing of its input: any key may fall out of
  the top and any other come back, so it keeps every key with a positive count in order,
  a count map beside a ``sortedcontainers.SortedList`` of ``(count, key)``. A change costs
  O(log n), the top ``k`` O(log n + k), the rank of any key O(log n); memory is every key.
  A negative count is a bug upstream: kept as it is (never clamped, so later changes still
  add up) and reported by :meth:`RetractableIndex.apply`. The listener flow's song
  partitions hold one, and so does the API's copy of the full count table.
* the boards' bounded top, the best ``capacity`` entries of a table whose entries only ever
  **improve** (a score board: totals only grow, a best only rises, ``reached_at`` only gets
  earlier at an equal score; docs/semantics/boards.md sections 3 and 4), is the kernel's
  (``native/src/board_table.rs``, inside the board partition's table): an entry pushed out of
  the top never has to come back by itself, so holding ``capacity`` entries is exact. It
  lists its entries in :data:`SCORE_THEN_FIRST_REACHED` order, which the merge below takes.
* :class:`RetakenTop`: the best ``capacity`` of a table of counts the caller holds, counts
  that **mostly grow** and fall only now and then (a sliding window: all at once when a
  bucket leaves it). Growth is handled as by the boards' top, a change below the top
  costing one comparison; a count that falls inside the top may let a key below it in,
  which only the whole table can tell, so then the top is taken again from it in
  O(n log K). It assumes the caller hands it every changed key and the whole table. The
  activity flow's counter partitions and the listener flow's recent plays hold one.

Orders (:class:`RankOrder`): an index's :meth:`~OrderedIndex.top` lists its entries in its
class's ``order``, and :func:`merge_local_tops` takes the order of the product's contract:
:data:`COUNT_THEN_ID_DESCENDING` (docs/semantics/listeners.md 4, windows.md 4 and 7) or
:data:`SCORE_THEN_FIRST_REACHED` (boards.md 4: at an equal score the first to reach it
wins). Ids compare as Python ``str`` (and tuples of ``str``) do, by code point, which for
valid UTF-8 is byte order.

Each class has ``_check()``, which verifies its invariants (as ``sortedcontainers`` does);
the property tests call it after every step of random operation sequences.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from operator import itemgetter
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar, runtime_checkable

from sortedcontainers import SortedList

Entry = TypeVar("Entry")


class RankOrder(NamedTuple):
    """A ranking order of entries as local tops list them: ``key`` of an entry, and whether
    the best entries have the greatest keys (``descending``) or the least. An entry's key
    includes its id, and ids are unique among the entries ranked together, so the order is
    total.

    >>> SCORE_THEN_FIRST_REACHED.sort([("bo", 5, 9), ("cy", 5, 3), ("al", 5, 3)])
    [('al', 5, 3), ('cy', 5, 3), ('bo', 5, 9)]
    """

    name: str  # the contract's words
    key: Callable[[Any], Any]
    descending: bool

    def sort(self, entries: Iterable[Entry]) -> list[Entry]:
        """``entries`` in this order, as a list. O(n log n).

        >>> COUNT_THEN_ID_DESCENDING.sort([("a", 2), ("c", 1), ("b", 2)])
        [('b', 2), ('a', 2), ('c', 1)]
        """
        return sorted(entries, key=self.key, reverse=self.descending)


COUNT_THEN_ID_DESCENDING = RankOrder("count descending, then id descending", itemgetter(1, 0), True)
"""Entries ``(id, count)``: count descending, then id descending (songs, a window's keys)."""

SCORE_THEN_FIRST_REACHED = RankOrder("score descending, then reached_at ascending, then id ascending",
                                     lambda e: (-e[1], e[2], e[0]), False)
"""Entries ``(id, score, reached_at)``: score descending, then ``reached_at`` ascending (the
first to reach a score wins), then id ascending (score boards)."""


def merge_local_tops(local_tops: Iterable[list[Entry]], k: int, order: RankOrder) -> list[Entry]:
    """The global top ``k`` from every partition's local top ``k``, each list in ``order``.

    Exact by one argument: an entry missing from its partition's local top ``k`` has ``k``
    entries ahead of it there, and they are ahead of it globally too, so the P local lists
    (P x k candidates) hold the global top ``k``. It needs complete entries: a count split
    over several partitions (a hot song's partials) is added up first and enters as one
    more list (sorted by :meth:`RankOrder.sort`), never through the local ones. Since each
    list is in order already, a lazy P-way merge reads only the first ``k`` entries:
    O(P + k log P), not a selection over all P x k (6x faster at P = 16, k = 100).

    >>> merge_local_tops([[("a", 5), ("c", 1)], [("b", 5)], []], 2, COUNT_THEN_ID_DESCENDING)
    [('b', 5), ('a', 5)]
    >>> merge_local_tops([[("bo", 7, 2)], [("al", 7, 2), ("cy", 1, 0)]], 5, SCORE_THEN_FIRST_REACHED)
    [('al', 7, 2), ('bo', 7, 2), ('cy', 1, 0)]
    """
    return list(islice(heapq.merge(*local_tops, key=order.key, reverse=order.descending), k))


@runtime_checkable
class OrderedIndex(Protocol[Entry]):
    """What a counter stage reads of its index and the merger relies on: the first ``k``
    entries in the class's ``order``, how many entries rank, and the invariant check."""

    order: ClassVar[RankOrder]

    def top(self, k: int) -> list[Entry]:
        """The first ``k`` entries in ``order`` (all of them if fewer)."""

    def __len__(self) -> int:
        """How many entries the index holds in order."""

    def _check(self) -> None:
        """Raise ``AssertionError`` unless every invariant of the index holds."""


class RetractableIndex:
    """Every key's count, counts that go up and down, in ranking order (see the module
    docstring). Built from a count map in O(n log n).

    >>> idx = RetractableIndex({"a": 2, "b": 2, "c": 0})
    >>> idx.top(5), len(idx), idx.total
    ([('b', 2), ('a', 2)], 2, 4)
    """

    __slots__ = ("_counts", "_index", "_total")

    order: ClassVar[RankOrder] = COUNT_THEN_ID_DESCENDING

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts: dict[str, int] = {k: c for k, c in (counts or {}).items() if c}
        self._index = SortedList((c, k) for k, c in self._counts.items() if c > 0)
        self._total = sum(self._counts.values())

    def apply(self, changes: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """Add net changes ``(key, delta)``; return the keys left negative, with their counts.
        O(log n) per change.

        >>> idx = RetractableIndex()
        >>> idx.apply([("a", 2), ("b", 1), ("a", -1), ("c", -1)]), idx.top(5)
        ([('c', -1)], [('b', 1), ('a', 1)])
        """
        counts, index = self._counts, self._index
        negative = []
        for key, delta in changes:
            if not delta:
                continue
            old = counts.get(key, 0)
            new = old + delta
            self._total += delta
            if old > 0:
                index.remove((old, key))
            if new > 0:
                index.add((new, key))
            if new:
                counts[key] = new
            else:
                del counts[key]
            if new < 0:
                negative.append((key, new))
        return negative

    def top(self, k: int) -> list[tuple[str, int]]:
        """The first ``k`` keys in ranking order, as ``(key, count)``. O(log n + k).

        >>> RetractableIndex({"a": 1, "b": 3, "c": 2}).top(2)
        [('b', 3), ('c', 2)]
        """
        n = len(self._index)
        return [(key, c) for c, key in self._index.islice(max(0, n - k), n, reverse=True)]

    def count(self, key: str) -> int:
        """The key's count (0 when it has none). O(1).

        >>> RetractableIndex({"a": 3}).count("a"), RetractableIndex().count("a")
        (3, 0)
        """
        return self._counts.get(key, 0)

    def rank(self, key: str) -> int | None:
        """The key's 1-based place in ranking order; None unless its count is positive. O(log n).

        >>> idx = RetractableIndex({"a": 1, "b": 3, "c": -1})
        >>> idx.rank("a"), idx.rank("b"), idx.rank("c")
        (2, 1, None)
        """
        count = self._counts.get(key, 0)
        if count <= 0:
            return None
        return len(self._index) - self._index.bisect_right((count, key)) + 1

    def set_counts(self, counts: Mapping[str, int]) -> None:
        """Make these keys' counts the given ones (0 removes a key). O(log n) per key.

        >>> idx = RetractableIndex({"a": 1, "b": 3})
        >>> idx.set_counts({"a": 4, "b": 0}); idx.top(5)
        [('a', 4)]
        """
        get = self._counts.get
        self.apply((key, n - get(key, 0)) for key, n in counts.items())

    @property
    def total(self) -> int:
        """Sum of all counts (negative ones included, so errors stay visible). O(1).

        >>> RetractableIndex({"a": 3, "b": -1}).total
        2
        """
        return self._total

    def __len__(self) -> int:
        """Keys with a positive count: the ones that rank. O(1).

        >>> len(RetractableIndex({"a": 3, "b": -1}))
        1
        """
        return len(self._index)

    def counts(self) -> dict[str, int]:
        """A copy of the non-zero counts, for snapshots and checks. O(n).

        >>> RetractableIndex({"a": 3, "b": 0}).counts()
        {'a': 3}
        """
        return dict(self._counts)

    def _check(self) -> None:
        """The sorted list is sound and holds exactly the positive counts; no zero is kept;
        ``total`` is their sum. O(n log n).

        >>> RetractableIndex({"a": 3, "b": -1})._check()
        """
        self._index._check()  # type: ignore[attr-defined]  # sortedcontainers-stubs omit the private _check
        positive = {key: c for key, c in self._counts.items() if c > 0}
        assert len(self._index) == len(positive), "the index holds exactly the positive counts"
        assert all(positive.get(key) == c for c, key in self._index), "the index agrees with the count map"
        assert 0 not in self._counts.values(), "a zero count is removed"
        assert self._total == sum(self._counts.values()), "total is the sum of the counts"


class RetakenTop:
    """The best ``capacity`` of a table of counts held elsewhere, counts that mostly grow, in
    :data:`COUNT_THEN_ID_DESCENDING` order (see the module docstring). Built from the table
    in O(n log K).

    >>> counts = {"a": 3, "b": 1, "c": 2}
    >>> top = RetakenTop(2, counts)
    >>> top.top(5)
    [('a', 3), ('c', 2)]
    >>> counts.update(b=4); top.update({"b": 4}, counts); top.top(5)
    [('b', 4), ('a', 3)]
    >>> counts.update(b=0, a=1); del counts["b"]; top.update({"b": 0, "a": 1}, counts); top.top(5)
    [('c', 2), ('a', 1)]
    """

    __slots__ = ("capacity", "_held", "_index")

    order: ClassVar[RankOrder] = COUNT_THEN_ID_DESCENDING

    def __init__(self, capacity: int, counts: Mapping[Any, int] | None = None) -> None:
        self.capacity = capacity
        self._held: dict[Any, int] = {}  # key -> its count, for the keys in the top
        self._index: list[tuple[int, Any]] = []  # ascending: the first is the floor
        if counts:
            self._take_all(counts)

    def update(self, changed: Mapping[Any, int], counts: Mapping[Any, int]) -> None:
        """``changed``: keys whose count changed, with their counts now (0: gone); ``counts``:
        the whole table after those changes. One comparison per change below the top,
        O(log K) comparisons and an O(K) memmove per change in it; when a count falls inside
        the top, O((K + changes) log K) from the keys held and changed, or O(n log K) from the
        whole table if those rank below the top's floor before the update.

        >>> counts = {"a": 1}
        >>> top = RetakenTop(1, counts)
        >>> counts.update(b=2); top.update({"b": 2}, counts); top.top(1)
        [('b', 2)]
        """
        held, index, capacity = self._held, self._index, self.capacity
        floor, before = (index[0] if len(index) >= capacity else None), list(held)
        for key, n in changed.items():
            old = held.get(key)
            if old is not None:
                if n < old:  # a count fell inside the top: a key below may now belong in it
                    self._retake_after_fall(changed, counts, floor, before)
                    return
                del index[bisect_left(index, (old, key))]
                insort(index, (n, key))
                held[key] = n
            elif n > 0 and (len(index) < capacity or (n, key) > index[0]):
                insort(index, (n, key))
                held[key] = n
                if len(index) > capacity:
                    del held[index.pop(0)[1]]

    def retake(self, counts: Mapping[Any, int]) -> None:
        """Take the top again from the whole table: for a caller that knows counts fell and
        would only hand :meth:`update` every key to find it out. O(n log K).

        >>> counts = {"a": 3, "b": 1}
        >>> top = RetakenTop(1, counts)
        >>> counts["a"] = 0; top.retake(counts); top.top(1)
        [('b', 1)]
        """
        self._take_all(counts)

    def _retake_after_fall(self, changed: Mapping[Any, int], counts: Mapping[Any, int],
                           floor: tuple[int, Any] | None, before: list[Any]) -> None:
        """The top again after a count in it fell, from the keys that could be in it: those held
        before the update and the changed ones. Every other key kept its count, below ``floor``
        (the top's least pair before the update; None: the top held every key then), so the
        candidates' best are the table's unless they rank below it, and only then is the whole
        table taken (a sliding window's bucket leaving costs its keys, not the window's)."""
        get = counts.get
        best = heapq.nlargest(self.capacity, [(n, key) for key in {*before, *changed} if (n := get(key, 0)) > 0])
        if floor is not None and (len(best) < self.capacity or best[-1] < floor):
            self._take_all(counts)
            return
        best.reverse()
        self._index = best
        self._held = {key: n for n, key in best}

    def _take_all(self, counts: Mapping[Any, int]) -> None:
        # (count, key) pairs made by zip in C; the best non-positive ones, if any made it in, go after
        best = heapq.nlargest(self.capacity, zip(counts.values(), counts.keys()))
        while best and best[-1][0] <= 0:
            best.pop()
        best.reverse()
        self._index = best
        self._held = {key: n for n, key in best}

    def top(self, k: int) -> list[tuple[Any, int]]:
        """The first ``k`` keys in ranking order, as ``(key, count)``. O(k).

        >>> RetakenTop(3, {("w", "b"): 2, ("w", "a"): 2}).top(1)
        [(('w', 'b'), 2)]
        """
        index = self._index
        return [(key, n) for n, key in reversed(index[max(0, len(index) - k):])]

    def __len__(self) -> int:
        """Keys held: at most ``capacity``. O(1).

        >>> len(RetakenTop(2, {"a": 1, "b": 2, "c": 3}))
        2
        """
        return len(self._index)

    def _check(self, counts: Mapping[Any, int] | None = None) -> None:
        """The held pairs are strictly ascending, positive, at most ``capacity`` and the same as
        the key map's; with the table, ``counts``, they are its best: each agrees with it, and
        any key not held ranks below the floor (none is left out while there is room). O(n).

        >>> counts = {"a": 1, "b": 2, "c": 3}
        >>> RetakenTop(2, counts)._check(counts)
        """
        index = self._index
        assert all(a < b for a, b in zip(index, index[1:])), "held pairs strictly ascending"
        assert all(n > 0 for n, _ in index), "only positive counts are held"
        assert len(index) <= self.capacity, "at most capacity keys"
        assert self._held == {key: n for n, key in index}, "the key map agrees with the held pairs"
        if counts is None:
            return
        assert all(counts.get(key) == n for n, key in index), "the held counts are the table's"
        below = [(n, key) for key, n in counts.items() if n > 0 and key not in self._held]
        if below:
            assert len(index) == self.capacity, "no key is left out while there is room"
            assert not index or max(below) < index[0], "no key left out ranks above the floor"
