"""The sweeper's clock and timers (docs/semantics/listeners.md section 6): pure, no I/O.

The sweeper of section 6 writes a ``TIMEOUT`` once a counted playback's deadline
(``last_active + T``) has passed, but only when the flow has processed its input up
to that deadline: a restarted or lagging flow first catches up on the retained
heartbeats, so a backlog never times anyone out. Two small pieces make that:

* :class:`Progress`: how far the input is processed, from the source marks
  (``state.window_rules.SourceMark``) the user shards see after the events they
  follow. Per input partition the greatest ``ts`` of its valid events delivered so
  far; a partition that has been quiet for the idle time (nothing to read, a live
  run) counts as processed up to ``max(its greatest ts, now - idle time)``, so one
  idle partition never stops the sweeper. The value is the least over the
  partitions heard from (None before any, and while a partition heard from has
  neither an event nor been quiet).
* :class:`Timers`: a lazy timing wheel of candidate users per second of deadline.
  Arming appends to a list; a heartbeat that moves a deadline costs nothing here.
  The caller re-checks every candidate :meth:`Timers.due` hands back against the
  record (still playing, deadline passed) and re-arms it at its new deadline if a
  heartbeat moved it, or drops it (:func:`sweep`).

Nothing here is stored: a resumed shard arms every playing record it restores.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from rankflow.state.rules import LAST_ACTIVE, PLAYING, UserRecord
from rankflow.state.window_rules import SourceMark

BUCKET_MS = 1000
"""A wheel slot: deadlines of one second share one list."""


class Progress:
    """How far the input has been processed, per partition and overall.

    >>> p = Progress(idle_ms=5_000)
    >>> p.value(now_ms=100_000) is None  # nothing heard yet
    True
    >>> p.mark(SourceMark("0", 0, 50_000)); p.mark(SourceMark("1", 0, 40_000))
    >>> p.value(now_ms=100_000)
    40000
    >>> p.mark(SourceMark("1", 7, None))  # an empty batch: still at 40 000
    >>> p.value(now_ms=100_000)
    40000
    >>> p.mark(SourceMark("1", 7, None, quiet=True))  # quiet: up to now - idle time
    >>> p.value(now_ms=100_000)
    50000
    >>> p.value(now_ms=52_000)  # ... but never behind its own events
    47000
    >>> p.mark(SourceMark("2", 0, None))  # a new partition without events holds it back
    >>> p.value(now_ms=100_000) is None
    True
    """

    __slots__ = ("idle_ms", "greatest", "quiet")

    def __init__(self, idle_ms: int) -> None:
        self.idle_ms = idle_ms
        self.greatest: dict[str, int | None] = {}  # partition -> greatest ts of its valid events so far
        self.quiet: dict[str, bool] = {}  # partition -> its last mark said it is quiet

    def mark(self, mark: SourceMark) -> None:
        """A batch of ``mark.partition`` has been processed (its events applied)."""
        part, ts = mark.partition, mark.max_ts
        old = self.greatest.get(part)
        if ts is not None and (old is None or ts > old):
            self.greatest[part] = ts
        elif part not in self.greatest:
            self.greatest[part] = None
        self.quiet[part] = mark.quiet

    def value(self, now_ms: int) -> int | None:
        """The ``ts`` up to which every partition heard from has been processed."""
        least: int | None = None
        quiet, floor = self.quiet, now_ms - self.idle_ms
        for part, ts in self.greatest.items():
            if quiet[part]:
                ts = floor if ts is None or ts < floor else ts
            elif ts is None:
                return None
            if least is None or ts < least:
                least = ts
        return least


class Timers:
    """Candidate users per second of deadline (a lazy timing wheel).

    >>> t = Timers()
    >>> t.arm("ann", 10_500); t.arm("bob", 12_000); t.arm("ann", 11_200)
    >>> len(t), t.oldest()
    (3, 10500)
    >>> t.due(11_000)  # every entry armed for 11 000 or earlier: the caller re-checks
    ['ann']
    >>> len(t), t.due(11_999), t.due(12_000)
    (2, ['ann'], ['bob'])
    >>> t.oldest() is None
    True
    """

    __slots__ = ("slots", "order", "pending", "__weakref__")

    def __init__(self) -> None:
        self.slots: dict[int, list[tuple[int, str]]] = {}  # second -> [(deadline, user)]
        self.order: list[int] = []  # heap of the seconds in use
        self.pending = 0

    def arm(self, user: str, deadline: int) -> None:
        slot = deadline // BUCKET_MS
        entries = self.slots.get(slot)
        if entries is None:
            self.slots[slot] = [(deadline, user)]
            heapq.heappush(self.order, slot)
        else:
            entries.append((deadline, user))
        self.pending += 1

    def arm_all(self, armed: Iterable[tuple[str, int]]) -> None:
        for user, deadline in armed:
            self.arm(user, deadline)

    def due(self, upto: int) -> list[str]:
        """The users of every entry armed for ``upto`` or earlier, removed (candidates:
        an entry may be stale; the caller re-checks and re-arms)."""
        order, slots = self.order, self.slots
        last = upto // BUCKET_MS
        out: list[str] = []
        while order and order[0] < last:
            out.extend(u for _, u in slots.pop(heapq.heappop(order)))
        if order and order[0] == last:  # the current second: only what is due by now
            entries = slots[last]
            out.extend(u for d, u in entries if d <= upto)
            later = [e for e in entries if e[0] > upto]
            if later:
                slots[last] = later
            else:
                del slots[heapq.heappop(order)]
        self.pending -= len(out)
        return out

    def oldest(self) -> int | None:
        """The earliest armed deadline (ms), None without any."""
        return min(self.slots[self.order[0]])[0] if self.order else None

    def __len__(self) -> int:
        return self.pending


def sweep(timers: Timers, records: dict[str, UserRecord], idle_ms: int, upto: int) -> list[tuple[str, UserRecord]]:
    """The playbacks to time out once the input is processed up to ``upto``: each due
    candidate re-checked against its record. One not playing (any more) is dropped;
    one whose deadline ``last_active + idle_ms`` a heartbeat moved past ``upto`` is
    re-armed there; one that is due is returned (once, however many entries it had)
    and not armed again: its ``TIMEOUT`` closes it when the flow reads it back, and
    the caller arms it again if it does not (an ``early_timeout``: a heartbeat came
    first), if the ``TIMEOUT`` was not delivered, or after a restart.

    Not re-armed at ``upto + idle_ms``: in a backlog ``upto`` moves ``idle_ms`` of event
    time in a few milliseconds, long before the ``TIMEOUT`` (written at the end of the
    input) is read, and every idle playback would fire again and again.

    >>> t, records = Timers(), {"ann": (1, "p1", "s", 1_000, True), "bob": (1, "p2", "s", 1_000, True)}
    >>> t.arm("ann", 4_000); t.arm("bob", 4_000)
    >>> records["bob"] = (1, "p2", "s", 3_000, True)  # a heartbeat: no timer moved
    >>> sweep(t, records, 3_000, 5_000)
    [('ann', (1, 'p1', 's', 1000, True))]
    >>> sorted(t.slots.items())  # bob re-armed at his deadline
    [(6, [(6000, 'bob')])]
    """
    due = timers.due(upto)
    fired: list[tuple[str, UserRecord]] = []
    if not due:
        return fired
    arm, get, seen = timers.arm, records.get, set()
    for uid in due:
        rec = get(uid)
        if rec is None or not rec[PLAYING] or uid in seen:
            continue
        deadline = rec[LAST_ACTIVE] + idle_ms
        if deadline > upto:
            arm(uid, deadline)
            continue
        seen.add(uid)
        fired.append((uid, rec))
    return fired
