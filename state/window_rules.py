"""The sliding-window rules: buckets, the watermark, placing an event, counting (docs/semantics/windows.md 2-4).

This module is docs/semantics/windows.md sections 2 to 4 and nothing else. It is pure (no I/O, no
Bytewax), so the activity flow's counter partitions, the listener flow's recent
plays and the tests' model share one definition of "in the window".

Section 2. Time is cut into buckets (:func:`bucket`); the window is the ``n``
buckets ending at the watermark's (:func:`window_buckets`, :func:`window_bounds`).
:class:`Watermark` is ``W``: the least over the heard, live input partitions of
their greatest valid ``ts``, never going back. :func:`place` says what an event is
at the watermark it is judged by: counted, held or expired.

Section 3. :class:`WindowCounts` keeps one count per key (a ``(workspace, channel)``
pair, or a song) over the window: per bucket what it added, so a bucket entering
the window adds its counts and a bucket leaving subtracts them. Nothing ever scans
history, and only the window's and the held buckets are kept. Mode ``users``
counts distinct users per key: per key, per user, the number of the window's
buckets the user posted in; the key's count is how many users have one.

Section 4's order is the ranking indexes' (``state.ranking_index``): count
descending, then the key descending, which for ``str`` and tuples of ``str`` is
byte-wise UTF-8 order (Python compares code points).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, NamedTuple

from rankflow.state.message_events import EXPIRED

MESSAGES = "messages"
USERS = "users"
MODES = (MESSAGES, USERS)

COUNTED, HELD = "counted", "held"  # and EXPIRED, which is also the dead letters' reason


def bucket(t: int, bucket_ms: int) -> int:
    """Section 2: the bucket of event time ``t``.

    >>> bucket(659_999, 60_000), bucket(660_000, 60_000)
    (10, 11)
    """
    return t // bucket_ms


def window_buckets(w: int, bucket_ms: int, n: int) -> tuple[int, int]:
    """The first and last bucket of the window at watermark ``w`` (both included).

    >>> window_buckets(830_000, 60_000, 3)
    (11, 13)
    """
    last = w // bucket_ms
    return last - n + 1, last


def window_bounds(w: int | None, bucket_ms: int, n: int) -> tuple[int | None, int | None]:
    """``(window_start, window_end)`` in ms, end exclusive; ``(None, None)`` before any watermark.

    >>> window_bounds(830_000, 60_000, 3)
    (660000, 840000)
    """
    if w is None:
        return None, None
    first, last = window_buckets(w, bucket_ms, n)
    return first * bucket_ms, (last + 1) * bucket_ms


def place(b: int, w: int, bucket_ms: int, n: int) -> str:
    """Section 2: what an event of bucket ``b`` is when judged at watermark ``w``.

    >>> [place(b, 700_000, 60_000, 3) for b in (8, 9, 11, 12)]
    ['expired', 'counted', 'counted', 'held']
    """
    first, last = window_buckets(w, bucket_ms, n)
    if b < first:
        return EXPIRED
    return COUNTED if b <= last else HELD


class SourceMark(NamedTuple):
    """What one source batch tells the watermark: its partition, where it starts, the
    greatest ``ts`` among its valid events (None if it has none) and whether the
    partition has been quiet for the idle time (a live run only, section 2)."""

    partition: str
    start: int
    max_ts: int | None
    quiet: bool = False


class Watermark:
    """Section 2's ``W`` over the input partitions, advanced one barrier at a time.

    Every counter partition keeps one and feeds it the same marks (one per source
    batch), so all of them agree on ``W`` at every barrier without talking.

    ``W`` after a barrier is the greater of ``W`` before it and the least greatest
    ``ts`` over the heard partitions that are not idle. An event inside the barrier
    is judged by :meth:`event_watermark`: its own partition's greatest ``ts`` so far
    (itself included), bounded by the other partitions as of the previous barrier
    and by ``W`` after this one. With one partition that is exactly the greatest
    ``ts`` seen so far, so every verdict follows from the log; with several it is a
    value ``W`` passes through in an order the partitions could have arrived in, and
    never above ``W`` at the end, which is what keeps final counts independent of
    the interleaving.

    >>> w = Watermark()
    >>> w.advance([SourceMark("0", 0, 600_000), SourceMark("1", 0, 900_000)])
    600000
    >>> w.advance([SourceMark("0", 5, None, quiet=True)])  # partition 0 idle: left out
    900000
    >>> w.advance([SourceMark("0", 5, 610_000)])  # back, without W going back
    900000
    """

    __slots__ = ("maxima", "idle", "value", "_before", "_value_before")

    def __init__(self, state: tuple[dict[str, int], set[str], int | None] | None = None) -> None:
        maxima, idle, value = state or ({}, set(), None)
        self.maxima: dict[str, int] = dict(maxima)
        self.idle: set[str] = set(idle)
        self.value: int | None = value
        self._before: dict[str, int] = dict(self.maxima)  # maxima of live partitions at the previous barrier
        self._value_before = value

    def advance(self, marks: Iterable[SourceMark]) -> int | None:
        """Take one barrier's marks (each partition's in input order); return ``W`` after them."""
        self._before = {p: m for p, m in self.maxima.items() if p not in self.idle}
        self._value_before = self.value
        maxima, idle = self.maxima, self.idle
        for mark in marks:
            if mark.max_ts is not None:
                idle.discard(mark.partition)
                if mark.max_ts > maxima.get(mark.partition, -1):
                    maxima[mark.partition] = mark.max_ts
            elif mark.quiet and mark.partition in maxima:
                idle.add(mark.partition)
        live = [m for p, m in maxima.items() if p not in idle]
        if live:
            least = min(live)
            if self.value is None or least > self.value:
                self.value = least
        return self.value

    def event_watermark(self, partition: str, seen: int) -> int:
        """The watermark an event of ``partition`` is judged by, after :meth:`advance` of its
        barrier; ``seen`` is its partition's greatest valid ``ts`` up to and including it."""
        w = seen
        for p, m in self._before.items():
            if p != partition and m < w:
                w = m
        if self._value_before is not None and self._value_before > w:
            w = self._value_before
        assert self.value is not None  # the event's own partition was heard
        return w if w < self.value else self.value

    def state(self) -> tuple[dict[str, int], set[str], int | None]:
        return dict(self.maxima), set(self.idle), self.value


class WindowCounts:
    """Section 3: per key its count over the window, as the watermark moves.

    :meth:`add` takes one event that is not expired, :meth:`move_to` slides the window;
    :meth:`take_changed` hands over the keys whose count changed since it was last
    called. The state is the buckets from the window's first on (held ones included)
    and, in mode ``users``, per key the buckets in the window each user posted in.

    >>> c = WindowCounts(60_000, 3, USERS)
    >>> c.move_to(600_000)
    False
    >>> c.add(("A", "x"), "u1", 10); c.add(("A", "x"), "u1", 10); c.add(("A", "x"), "u2", 11)
    >>> c.count(("A", "x")), c.take_changed()
    (1, {('A', 'x'): 1})
    >>> c.move_to(700_000), c.count(("A", "x"))  # bucket 11 enters: u2 joins
    (False, 2)
    >>> c.move_to(900_000), c.count(("A", "x")), sorted(c.buckets)  # 10 and 11 leave: a count fell
    (True, 0, [])
    """

    __slots__ = ("bucket_ms", "n", "distinct", "first", "last", "buckets", "counts", "users", "changed", "dirty")

    def __init__(self, bucket_ms: int, n: int, mode: str = MESSAGES, state: dict[str, Any] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.bucket_ms, self.n, self.distinct = bucket_ms, n, mode == USERS
        s = state or {}
        self.first: int | None = s.get("first")  # the window's buckets: first .. last
        self.last: int | None = s.get("last")
        # bucket -> key -> messages (mode messages) or set of users (mode users)
        self.buckets: dict[int, dict[Hashable, Any]] = {
            b: {k: (set(v) if self.distinct else v) for k, v in keys.items()} for b, keys in s.get("buckets", {}).items()}
        self.counts: dict[Hashable, int] = dict(s.get("counts", {}))
        self.users: dict[Hashable, dict[str, int]] = {k: dict(v) for k, v in s.get("users", {}).items()}
        self.changed: set[Hashable] = set(s.get("changed", ()))
        # what changed per bucket since :meth:`take_dirty` (for a changelog): None until asked for;
        # mode messages the keys added to (a set: their counts are read once, when taken), mode
        # users each key's new users
        self.dirty: dict[int, Any] | None = None

    @classmethod
    def from_buckets(cls, bucket_ms: int, n: int, mode: str, first: int | None, last: int | None,
                     buckets: dict[int, dict[Hashable, Any]]) -> WindowCounts:
        """The counts of a window rebuilt from its buckets (what a changelog keeps): every
        bucket from ``first`` to ``last`` joins, later ones stay held."""
        counts = cls(bucket_ms, n, mode)
        counts.first, counts.last = first, last
        counts.buckets = buckets
        for b, keys in buckets.items():
            if counts.in_window(b):
                counts._apply(keys, +1)
        counts.changed = set()
        return counts
    def in_window(self, b: int) -> bool:
        first, last = self.first, self.last  # both None before the first watermark, or both set
        return first is not None and last is not None and first <= b <= last

    def add(self, key: Hashable, user: str, b: int, n: int = 1) -> None:
        """One event of ``key`` by ``user`` in bucket ``b``, which is not before the window
        (mode ``messages``: ``n`` such events at once, as ``n`` calls would count them)."""
        keys = self.buckets.get(b)
        if keys is None:
            keys = self.buckets[b] = {}
        live = self.in_window(b)
        dirty = self.dirty
        if not self.distinct:
            keys[key] = keys.get(key, 0) + n
            if live:
                self._bump(key, n)
            if dirty is not None:
                mine = dirty.get(b)
                if mine is None:
                    dirty[b] = {key}
                else:
                    mine.add(key)
            return
        users = keys.get(key)
        if users is None:
            users = keys[key] = set()
        if user in users:
            return
        users.add(user)
        if live:
            self._join(key, (user,))
        if dirty is not None:
            mine = dirty.get(b)
            if mine is None:
                mine = dirty[b] = {}
            mine.setdefault(key, []).append(user)

    def add_counts(self, b: int, counts: Mapping[Any, int], track: bool = True) -> None:
        """Mode ``messages``: ``counts[key]`` events of each key in bucket ``b``, which is not
        before the window, every count >= 1: as that many :meth:`add` calls would count them,
        in one loop per table instead of a call per key (recent plays add an epoch's starts
        of a bucket at once). ``track`` False: the keys are not recorded as changed (for a
        caller that will take the whole table again and :meth:`discard_changed`)."""
        if self.distinct:
            raise ValueError("add_counts counts messages, not distinct users")
        if not counts:
            return
        keys = self.buckets.get(b)
        if keys is None:
            keys = self.buckets[b] = dict(counts)
        else:
            get = keys.get
            for key, n in counts.items():
                keys[key] = get(key, 0) + n
        if self.in_window(b):
            window = self.counts
            wget = window.get
            for key, n in counts.items():
                window[key] = wget(key, 0) + n  # n >= 1: never 0
            if track:
                self.changed.update(counts)
        dirty = self.dirty
        if dirty is not None:  # the keys only, in one C loop: their counts are read when taken
            mine = dirty.get(b)
            if mine is None:
                dirty[b] = set(counts)
            else:
                mine.update(counts)

    def move_to(self, w: int) -> bool:
        """Slide the window to watermark ``w`` (never back): held buckets it reaches join,
        buckets it leaves take their counts with them. O(buckets held + their keys).
        True if a bucket with counts left, so that some count fell (the only way one can)."""
        first, last = window_buckets(w, self.bucket_ms, self.n)
        if self.last is not None and last <= self.last:
            return False
        old_first, old_last = self.first, self.last
        self.first, self.last = first, last
        fell = False
        for b in sorted(self.buckets):
            was = old_first is not None and old_last is not None and old_first <= b <= old_last
            now = first <= b <= last
            if was and not now:
                keys = self.buckets.pop(b)
                self._apply(keys, -1)
                self._forget(b)
                fell = fell or bool(keys)
            elif now and not was:
                self._apply(self.buckets[b], +1)
            elif b < first:
                del self.buckets[b]  # held, and passed over without ever entering
                self._forget(b)
        return fell

    def _forget(self, b: int) -> None:
        if self.dirty is not None:
            self.dirty[b] = None

    def _apply(self, keys: dict[Hashable, Any], sign: int) -> None:
        """A bucket's keys join (``sign`` +1) or leave (-1) the window. Mode ``messages`` does
        :meth:`_bump` inline: a bucket leaving is every key of a minute at once."""
        if not self.distinct:
            window = self.counts
            get = window.get
            for key, v in keys.items():
                n = get(key, 0) + sign * v
                if n:
                    window[key] = n
                else:
                    del window[key]
            self.changed.update(keys)
            return
        for key, v in keys.items():
            if sign > 0:
                self._join(key, v)
            else:
                self._leave(key, v)

    def _bump(self, key: Hashable, delta: int) -> None:
        n = self.counts.get(key, 0) + delta
        if n:
            self.counts[key] = n
        else:
            del self.counts[key]
        self.changed.add(key)

    def _join(self, key: Hashable, users: Iterable[str]) -> None:
        seen = self.users.get(key)
        if seen is None:
            seen = self.users[key] = {}
        joined = 0
        for user in users:
            k = seen.get(user, 0)
            seen[user] = k + 1
            joined += not k
        if joined:
            self._bump(key, joined)

    def _leave(self, key: Hashable, users: Iterable[str]) -> None:
        seen = self.users[key]
        left = 0
        for user in users:
            k = seen[user] - 1
            if k:
                seen[user] = k
            else:
                del seen[user]
                left += 1
        if not seen:
            del self.users[key]
        if left:
            self._bump(key, -left)

    def count(self, key: Hashable) -> int:
        return self.counts.get(key, 0)

    def take_changed(self) -> dict[Hashable, int]:
        """The keys whose count changed since the last call, with their counts now (0: gone)."""
        changed, self.changed = self.changed, set()
        get = self.counts.get
        return {key: get(key, 0) for key in changed}

    def discard_changed(self) -> None:
        """Forget which keys changed (a caller that takes the whole table again instead)."""
        self.changed = set()

    def take_dirty(self, counts: bool = True) -> dict[int, Any]:
        """Per bucket, what changed since the last call: a key's count in the bucket (mode
        ``messages``) or its new users (mode ``users``); None for a bucket that left.
        Starts recording at the first call. ``counts`` False, mode ``messages``: per bucket
        the set of keys whose count there changed (a caller that reads them from :attr:`buckets`
        as it encodes them, in one loop)."""
        dirty, self.dirty = self.dirty or {}, {}
        if self.distinct or not counts:
            return dirty
        buckets = self.buckets
        return {b: None if keys is None else {k: buckets[b][k] for k in keys} for b, keys in dirty.items()}

    def state(self) -> dict[str, Any]:
        return {"first": self.first, "last": self.last,
                "buckets": {b: {k: (set(v) if self.distinct else v) for k, v in keys.items()}
                            for b, keys in self.buckets.items()},
                "counts": dict(self.counts), "users": {k: dict(v) for k, v in self.users.items()},
                "changed": set(self.changed)}
