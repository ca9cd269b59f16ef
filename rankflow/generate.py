"""Realistic playback logs, reproducible from a seed.

Listeners pick songs by a Zipf law (a few hits, a long tail), play, send heartbeats,
switch and stop. On top of that the log carries what real streams carry: redelivered
events, events delivered late (after newer events of the same user), a STOP that
arrives before its START, a START from an old device whose playback version was
already superseded, conflicting events, and lines that are not valid events at all.
All events of a user stay in file order relative to each other only as far as the
chaos allows: that is the point.

With :attr:`Chaos.timeout` above 0 the log also carries what the sweeper of
docs/semantics/listeners.md section 6 writes (:meth:`LogGenerator._timeout`): ``TIMEOUT`` events for
playbacks idle for :attr:`Chaos.idle_ms`, and the ones that lose a race (a timer of a
playback already closed or superseded, one that a heartbeat beat, one that fired
early), plus malformed ones. Off by default, so that a seed's log stays the log it
always was.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Any
from collections.abc import Callable

import orjson

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: a fixed start keeps logs reproducible
STEP_MS = 30  # the most event time between two steps of a playback log (about 66 events a second)


@dataclass(frozen=True)
class Chaos:
    """Per-event probabilities of the faults the log carries."""

    duplicate: float = 0.03
    late: float = 0.03
    stop_before_start: float = 0.02
    old_device: float = 0.01
    conflict: float = 0.002
    invalid: float = 0.004
    max_delay: int = 200  # how many later events a late or duplicated one may trail
    timeout: float = 0.0  # a sweeper's timer (docs/semantics/listeners.md 6), per event step; 0: none, the log of old
    idle_ms: int = 45_000  # the sweeper's idle timeout T: the idle_ms of its TIMEOUT events


@dataclass
class _User:
    name: str
    version: int = 0
    playbacks: int = 0
    current: tuple[str, str, int] | None = None  # (playback_id, song_id, version)
    playing: bool = False
    last_active: int = 0  # ts of the current playback's START or latest HEARTBEAT (what a sweeper watches)
    previous: tuple[str, str, int] | None = None  # the playback before the current one


@dataclass
class GenerateStats:
    lines: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1


class LogGenerator:
    def __init__(self, users: int, songs: int, seed: int, chaos: Chaos = Chaos(), zipf_s: float = 1.1, *,
                 start_ms: int = T0_MS, step_ms: int = STEP_MS) -> None:
        """``start_ms`` is the first event's ts (the fixed default keeps a seed's log the log it
        always was; ``rankflow generate --start now`` and the demo stamp it near the present);
        each step moves event time by 0 to ``step_ms`` ms: about ``2000 / step_ms`` events a
        second of event time, which the demo matches to its traffic so event time keeps up
        with the clock."""
        if users < 1 or songs < 1 or step_ms < 1 or start_ms < 0:
            raise ValueError("users, songs and step_ms must be >= 1, start_ms not negative")
        self.rng = random.Random(seed)
        self.chaos = chaos
        self.users = [_User(f"user_{i}") for i in range(users)]
        self.songs = [f"song_{i}" for i in range(songs)]
        self._song_cum = list(itertools.accumulate(1.0 / (r**zipf_s) for r in range(1, songs + 1)))
        self._queue: list[tuple[int, int, bytes]] = []
        self._seq = itertools.count()
        self.step = 0
        self.step_ms = step_ms
        self.ts = start_ms
        self.stats = GenerateStats()

    # -- scheduling -------------------------------------------------------------
    def _schedule(self, line: bytes, kind: str, delay: int = 0) -> None:
        rng, chaos = self.rng, self.chaos
        if delay == 0 and rng.random() < chaos.late:
            delay, kind = rng.randint(1, chaos.max_delay), kind + "_late"
        heapq.heappush(self._queue, (self.step + delay, next(self._seq), line))
        self.stats.count(kind)
        if rng.random() < chaos.duplicate:
            later = self.step + delay + rng.randint(0, chaos.max_delay)
            heapq.heappush(self._queue, (later, next(self._seq), line))
            self.stats.count("redelivery")

    def _event(self, user: _User, pid: str, song: str, version: int, etype: str, kind: str, delay: int = 0) -> None:
        ev: dict[str, Any] = {
            "user_id": user.name, "playback_id": pid, "song_id": song,
            "type": etype, "version": version, "ts": self.ts,
        }
        if self.rng.random() < 0.05:
            ev["device"] = self.rng.choice(["ios", "android", "web", "car"])  # ignored field
        self._schedule(orjson.dumps(ev), kind, delay)

    def _song(self) -> str:
        return self.songs[self.rng.choices(range(len(self.songs)), cum_weights=self._song_cum)[0]]

    # -- listener behaviour -----------------------------------------------------
    def _new_playback(self, user: _User) -> tuple[str, str, int]:
        gap = 2 if self.rng.random() < self.chaos.old_device * 4 else 1
        user.version += gap
        user.playbacks += 1
        playback = (f"pb_{user.name}_{user.playbacks}", self._song(), user.version)
        if gap == 2 and self.rng.random() < 0.25:
            # An old device starts the playback whose version was just superseded.
            old = (f"pb_{user.name}_{user.playbacks}_old", self._song(), user.version - 1)
            self._event(user, *old, "START", "old_device_start", delay=self.rng.randint(1, self.chaos.max_delay))
        return playback

    def _start(self, user: _User, kind: str) -> None:
        old = user.current if user.playing else None
        pid, song, version = self._new_playback(user)
        user.previous = user.current
        user.current, user.playing, user.last_active = (pid, song, version), True, self.ts
        if self.rng.random() < self.chaos.stop_before_start:
            self._event(user, pid, song, version, "STOP", "stop_before_start")
            self._event(user, pid, song, version, "START", "start_after_stop", delay=self.rng.randint(1, 50))
            user.playing = False
        else:
            self._event(user, pid, song, version, "START", kind)
        if old is not None and self.rng.random() < 0.5:
            self._event(user, *old, "STOP", "stop_after_switch")  # the player's own stop, after the switch

    def _act(self, user: _User) -> None:
        if not user.playing:
            self._start(user, "start")
            return
        current = user.current
        assert current is not None  # a playing user has a playback
        pid, song, version = current
        r = self.rng.random()
        if r < 0.3:
            self._event(user, pid, song, version, "HEARTBEAT", "heartbeat")
            user.last_active = self.ts
        elif r < 0.55:
            self._event(user, pid, song, version, "STOP", "stop")
            user.playing = False
        else:
            self._start(user, "switch")

    def _conflict(self, user: _User) -> None:
        if user.current is None:
            return
        pid, song, version = user.current
        if self.rng.random() < 0.5:
            self._event(user, pid, song + "_other", version, "START", "conflict_song")
        else:
            self._event(user, pid + "_reused", song, version, "START", "version_reused")

    def _invalid(self) -> None:
        user = self.rng.choice(self.users).name
        good = {"user_id": user, "playback_id": "pb_x", "song_id": self._song(), "type": "START",
                "version": 1, "ts": self.ts}
        variants: list[Callable[[], bytes]] = [
            lambda: b'{"user_id": "' + user.encode() + b'", "type": "START"',
            lambda: b"not json at all",
            lambda: b"",
            lambda: orjson.dumps([good]),
            lambda: orjson.dumps({k: v for k, v in good.items() if k != "song_id"}),
            lambda: orjson.dumps({**good, "version": "7"}),
            lambda: orjson.dumps({**good, "version": -3}),
            lambda: orjson.dumps({**good, "ts": True}),
            lambda: orjson.dumps({**good, "type": "PAUSE"}),
            lambda: orjson.dumps({**good, "user_id": ""}),
            lambda: orjson.dumps({**good, "playback_id": "p" * 300}),
            lambda: orjson.dumps({**good, "version": 2.5}),
        ]
        if self.chaos.timeout > 0:  # only then: the choice among more variants would change old logs
            timer = {**good, "type": "TIMEOUT", "idle_ms": self.chaos.idle_ms}
            variants += [
                lambda: orjson.dumps({k: v for k, v in timer.items() if k != "idle_ms"}),
                lambda: orjson.dumps({**timer, "idle_ms": 0}),
                lambda: orjson.dumps({**timer, "idle_ms": True}),
                lambda: orjson.dumps({**timer, "idle_ms": str(self.chaos.idle_ms)}),
                lambda: orjson.dumps({**timer, "idle_ms": 1.5}),
            ]
        self._schedule(self.rng.choice(variants)(), "invalid")

    # -- the sweeper (docs/semantics/listeners.md 6) -------------------------------------------
    def _timer(self, user: _User, playback: tuple[str, str, int], kind: str) -> None:
        """A ``TIMEOUT`` of ``playback``, fired now with the sweeper's idle timeout."""
        pid, song, version = playback
        ev = {"user_id": user.name, "playback_id": pid, "song_id": song, "type": "TIMEOUT",
              "version": version, "ts": self.ts, "idle_ms": self.chaos.idle_ms}
        self._schedule(orjson.dumps(ev), kind)

    def _timeout(self) -> None:
        """What a sweeper writes for a random user, as the generator sees that user now:

        * playing, idle for ``idle_ms`` or more: the timer fires (``timeout``) and the
          playback is closed; sometimes the player comes back and sends a late
          ``HEARTBEAT`` or repeats the ``START`` of it (``after_timeout``: no change);
        * playing and active within ``idle_ms``: a timer that loses (``timeout_early``),
          either to a heartbeat that arrives just before it, or because it fired early;
        * not playing: the timer of the playback it stopped, or of the one before it
          (``timeout_stale``).

        Late delivery and redelivery apply to timers like to any event (a timer that
        fires twice changes nothing the second time), so the flow sees every case in
        every order; the reference model decides what each one did.
        """
        rng, chaos = self.rng, self.chaos
        user = rng.choice(self.users)
        if user.playing:
            assert user.current is not None
            if self.ts - user.last_active >= chaos.idle_ms:
                self._timer(user, user.current, "timeout")
                user.playing = False
                if rng.random() < 0.2:
                    etype = "HEARTBEAT" if rng.random() < 0.5 else "START"
                    self._event(user, *user.current, etype, "after_timeout", delay=rng.randint(1, chaos.max_delay))
                return
            if rng.random() < 0.5:
                self._event(user, *user.current, "HEARTBEAT", "heartbeat")
                user.last_active = self.ts
            self._timer(user, user.current, "timeout_early")
        elif user.current is not None:
            older = user.previous if user.previous is not None and rng.random() < 0.5 else user.current
            self._timer(user, older, "timeout_stale")

    def step_once(self) -> None:
        self.step += 1
        self.ts += self.rng.randint(0, self.step_ms)
        r = self.rng.random()
        if r < self.chaos.invalid:
            self._invalid()
        elif r < self.chaos.invalid + self.chaos.conflict:
            self._conflict(self.rng.choice(self.users))
        elif r < self.chaos.invalid + self.chaos.conflict + self.chaos.timeout:
            self._timeout()
        else:
            self._act(self.rng.choice(self.users))

    def lines(self, events: int):
        """Yield exactly ``events`` lines."""
        written = 0
        while written < events:
            self.step_once()
            while self._queue and self._queue[0][0] <= self.step and written < events:
                yield heapq.heappop(self._queue)[2]
                written += 1
        self.stats.lines = written


def generate(users: int, songs: int, events: int, seed: int, out: str | Path,
             chaos: Chaos = Chaos(), progress: Callable[[int], None] | None = None,
             start_ms: int = T0_MS) -> GenerateStats:
    gen = LogGenerator(users, songs, seed, chaos, start_ms=start_ms)
    write_lines(gen.lines(events), out, progress)
    return gen.stats


def write_lines(lines: Iterable[bytes], out: str | Path, progress: Callable[[int], None] | None = None) -> None:
    """Write a log as JSON Lines, 10,000 lines per write (one write per line is slower);
    ``progress`` is told the lines written so far after each write (a bar: ``rankflow.progress``)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        buf: list[bytes] = []
        written = 0
        for line in lines:
            buf.append(line)
            if len(buf) >= 10_000:
                f.write(b"\n".join(buf) + b"\n")
                written += len(buf)
                buf.clear()
                if progress is not None:
                    progress(written)
        if buf:
            f.write(b"\n".join(buf) + b"\n")
            if progress is not None:
                progress(written + len(buf))
