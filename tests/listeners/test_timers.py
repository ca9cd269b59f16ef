"""The sweeper's clock and timers (``state.timers``, docs/semantics/listeners.md 6): pure, tested alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rankflow.state.rules import HEARTBEAT, LAST_ACTIVE, PLAYING, START, STOP, apply_event
from rankflow.state.timers import Progress, Timers, sweep
from rankflow.state.window_rules import SourceMark


def test_progress_is_the_least_partition_and_quiet_ones_follow_the_clock():
    p = Progress(idle_ms=5_000)
    assert p.value(1_000_000) is None
    p.mark(SourceMark("0", 0, 100_000))
    assert p.value(1_000_000) == 100_000
    p.mark(SourceMark("1", 0, None))  # heard, no events, not quiet: holds everything back
    assert p.value(1_000_000) is None
    p.mark(SourceMark("1", 0, None, quiet=True))
    assert p.value(1_000_000) == 100_000  # partition 1 counts as processed up to now - 5 s
    assert p.value(50_000) == 45_000  # ... and the quiet one is the least
    p.mark(SourceMark("0", 9, 90_000))  # an older batch never moves a partition back
    assert p.value(1_000_000) == 100_000
    p.mark(SourceMark("0", 9, None, quiet=True))  # everything quiet: the clock
    assert p.value(1_000_000) == 995_000
    p.mark(SourceMark("1", 3, 2_000_000))  # records again: no longer quiet
    assert p.value(1_000_000) == 995_000
    p.mark(SourceMark("0", 10, 150_000))
    assert p.value(1_000_000) == 150_000


marks = st.lists(st.tuples(st.sampled_from("abc"), st.one_of(st.none(), st.integers(0, 10_000)), st.booleans()),
                 max_size=40)


@given(marks, st.integers(0, 20_000))
def test_progress_matches_its_definition(seq, now):
    p = Progress(idle_ms=1_000)
    for part, ts, quiet in seq:
        p.mark(SourceMark(part, 0, ts, quiet))
    greatest: dict[str, int | None] = {}
    last_quiet: dict[str, bool] = {}
    for part, ts, quiet in seq:
        known = [t for t in (greatest.get(part), ts) if t is not None]
        greatest[part] = max(known) if known else None
        last_quiet[part] = quiet
    per_partition = []
    for part, ts in greatest.items():
        if last_quiet[part]:
            per_partition.append(max(t for t in (ts, now - 1_000) if t is not None))
        else:
            per_partition.append(ts)
    want = None if not per_partition or None in per_partition else min(per_partition)
    assert p.value(now) == want


@given(st.lists(st.tuples(st.sampled_from("uvwxyz"), st.integers(0, 20_000)), max_size=60),
       st.lists(st.integers(0, 25_000), max_size=10))
def test_due_hands_back_every_entry_once_and_none_early(arms, checks):
    t = Timers()
    for user, deadline in arms:
        t.arm(user, deadline)
    assert len(t) == len(arms)
    left = sorted(arms, key=lambda a: a[1])
    for upto in sorted(checks):
        got = t.due(upto)
        want = [a for a in left if a[1] <= upto]
        assert sorted(got) == sorted(u for u, _ in want)
        left = [a for a in left if a not in want or want.remove(a)]  # type: ignore[func-returns-value]
        assert len(t) == len(left)
        assert t.oldest() == (min(d for _, d in left) if left else None)


ops = st.lists(st.tuples(st.sampled_from((START, HEARTBEAT, STOP, "tick")), st.sampled_from("abcd"),
                         st.integers(0, 3_000)), max_size=80)


@settings(max_examples=300)
@given(ops, st.integers(1_000, 5_000))
def test_lazy_timers_fire_exactly_the_idle_playbacks(steps, idle_ms):
    """Armed only at STARTs, never moved by heartbeats: at every check the sweep fires
    exactly the playing records whose deadline has passed, and never one that is not due."""
    records: dict = {}
    versions: dict[str, int] = {}
    timers = Timers()
    clock = 0
    for kind, user, step in steps:
        clock += step
        if kind == "tick":
            fired = dict(sweep(timers, records, idle_ms, clock))
            due = {u for u, r in records.items() if r[PLAYING] and r[LAST_ACTIVE] + idle_ms <= clock}
            assert set(fired) == due
            for u in fired:  # the TIMEOUT comes back through the input
                r = records[u]
                records[u], verdict = apply_event(r, r[1], r[2], r[0], "TIMEOUT", clock, idle_ms)
                assert verdict == "timed_out"
            continue
        play(records, versions, timers, user, kind, clock, idle_ms)


def test_fired_and_stale_entries_are_dropped():
    t = Timers()
    records = {"a": (1, "p", "s", 0, True), "b": (1, "q", "s", 0, True)}
    t.arm("a", 3_000)
    t.arm("b", 3_000)
    t.arm("a", 3_000)  # a repeated START: two entries, one TIMEOUT
    records["b"] = (1, "q", "s", 0, False)  # b stopped: its entry is stale
    assert [u for u, _ in sweep(t, records, 3_000, 3_500)] == ["a"]
    assert len(t) == 0  # a is not armed again until its TIMEOUT comes back (or is not delivered)
    assert sweep(t, records, 3_000, 1_000_000) == []


race_ops = st.lists(st.tuples(st.sampled_from((START, HEARTBEAT, HEARTBEAT, STOP, "tick", "deliver")),
                              st.sampled_from("abc"), st.integers(0, 3_000)), max_size=100)


@settings(max_examples=300)
@given(race_ops, st.integers(1_000, 5_000))
def test_timeouts_in_flight_never_leave_a_playback_unarmed(steps, idle_ms):
    """TIMEOUTs come back through the input later, after heartbeats that may beat them (the
    user shard's arming: a START, and a TIMEOUT that leaves its playback playing). At every
    tick a due playback fires unless a TIMEOUT of it is in flight, and once everything in
    flight is read, every playing record fires when its deadline passes: none is forgotten."""
    records: dict = {}
    versions: dict[str, int] = {}
    timers = Timers()
    inflight: list[tuple[str, str, int, int]] = []
    clock = 0

    def deliver() -> None:
        uid, pb, v, ts = inflight.pop(0)
        rec = records[uid]
        records[uid], _ = apply_event(rec, pb, "s", v, "TIMEOUT", ts, idle_ms)
        new = records[uid]
        if new[PLAYING] and new[1] == pb:  # ARMING: the TIMEOUT left it playing
            timers.arm(uid, new[LAST_ACTIVE] + idle_ms)

    for kind, user, step in steps:
        clock += step
        if kind == "deliver":
            if inflight:
                deliver()
            continue
        if kind == "tick":
            fired = dict(sweep(timers, records, idle_ms, clock))
            flying = {(u, pb) for u, pb, _, _ in inflight}
            due = {u for u, r in records.items() if r[PLAYING] and r[LAST_ACTIVE] + idle_ms <= clock
                   and (u, r[1]) not in flying}
            assert due <= set(fired) and all(r[LAST_ACTIVE] + idle_ms <= clock for r in fired.values())
            inflight.extend((u, r[1], r[0], clock) for u, r in fired.items())
            continue
        play(records, versions, timers, user, kind, clock, idle_ms)
    while inflight:
        deliver()
    clock += 10 * idle_ms
    fired = dict(sweep(timers, records, idle_ms, clock))
    assert set(fired) == {u for u, r in records.items() if r[PLAYING]}


def play(records: dict, versions: dict[str, int], timers: Timers, user: str, kind: str, clock: int,
         idle_ms: int) -> None:
    """A player's event as the user stage applies it: a START begins the user's next playback
    (and arms its timer when it counts), other events go to the current one."""
    rec = records.get(user)
    if kind == START:
        versions[user] = versions.get(user, 0) + 1
        v, pb = versions[user], f"{user}{versions[user]}"
    elif rec is None:
        return
    else:
        v, pb = rec[0], rec[1]
    new, _ = apply_event(rec, pb, "s", v, kind, clock)
    if new is not None:
        records[user] = new
        if kind == START and new[PLAYING] and new is not rec:
            timers.arm(user, new[LAST_ACTIVE] + idle_ms)
