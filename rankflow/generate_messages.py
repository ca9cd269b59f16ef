"""Realistic activity (message) logs (docs/semantics/windows.md section 1), reproducible from a seed.

The activity flow and its benchmark need input that looks like a chat service's message
stream, not a uniform one: a few workspaces carry most of the traffic and most are
quiet (Zipf over workspaces), and within a workspace a few channels and a few users do
(Zipf again; bigger workspaces have more channels and users). On top of that:

- bursts: a channel, usually a quiet one, suddenly hot for a few minutes (an incident,
  an announcement), with many distinct users;
- bots: a user posting thousands of messages in one channel, so that counting
  ``messages`` and counting ``users`` rank that channel very differently;
- event time mostly increasing, with the small jitter of delivery, and now and then a
  message tens of seconds late: out of order, but well inside the window.

Unless ``clean``, it also carries what a real ingest sees, each at a small rate: far-late
messages (more than an hour older than the newest one before them, so ``expired`` under
the default window of 60 one-minute buckets, and under any window up to an hour), and
malformed lines of every kind section 1 names. A clean log holds only valid events in
order of ``ts`` (no jitter either), so that no window, whatever its size, sees a late or
expired event: the benchmark, whose two systems must agree, runs on one.

Ids exercise the rules on ids: non-ASCII and emoji, 64 characters, separators, ids that
differ only by case (distinct: nothing is folded), and the ``("w!", "a")`` before
``("w", "zz")`` order of docs/semantics/windows.md section 4.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import orjson

from rankflow.generate import T0_MS, GenerateStats, write_lines

SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DEFAULT_START_MS = T0_MS  # 2026-01-01T00:00:00Z
DEFAULT_WORKSPACES = 100
DEFAULT_CHANNELS = 200  # channels of the biggest workspace
DEFAULT_USERS = 1000  # users of the biggest workspace
DEFAULT_BOTS = 2
DEFAULT_RATE = 100.0  # events per second of event time: a million events span about 2.8 hours
FIELDS = ("workspace_id", "channel_id", "user_id", "ts")

# A far-late event is at least this much older than the newest valid ts before it. With
# bucket_ms = 60,000 and n = 60, an event is expired when bucket(ts) < bucket(W) - 59, and
# ts <= W - 61 minutes gives bucket(ts) <= bucket(W) - 61; a minute more of margin.
FAR_LATE_MIN_MS = HOUR_MS + 2 * MINUTE_MS
FAR_LATE_SPREAD_MS = 5 * HOUR_MS


@dataclass(frozen=True)
class MessageChaos:
    """Per-event probabilities of what a real ingest sees beyond plain messages."""

    late: float = 0.03  # delivered 1 to 45 s late: out of order, still in the window (valid)
    far_late: float = 0.002  # older than the window: expired
    malformed: float = 0.005  # invalid by section 1, a reason drawn evenly
    variety: float = 0.03  # valid: ignored extra fields, another field order, escaped non-ASCII
    jitter_ms: int = 50  # mean delivery delay of an ordinary message (exponential, capped at 2 s)

    def scaled(self, factor: float) -> MessageChaos:
        """Every rate (not the jitter) times ``factor`` (0 turns chaos off)."""
        return replace(self, **{f.name: getattr(self, f.name) * factor for f in fields(self) if f.name != "jitter_ms"})


CLEAN = replace(MessageChaos().scaled(0.0), jitter_ms=0)


@dataclass(frozen=True)
class Activity:
    """The shape of the traffic (valid events, kept in a clean log too)."""

    bots: int = DEFAULT_BOTS
    bot_share: float = 0.03  # of all events, per bot
    burst_every_ms: int = 10 * MINUTE_MS  # mean event time between burst starts
    burst_ms: tuple[int, int] = (2 * MINUTE_MS, 8 * MINUTE_MS)
    burst_share: tuple[float, float] = (0.05, 0.2)  # of all events while it lasts
    zipf_workspaces: float = 1.1
    zipf_channels: float = 1.2
    zipf_users: float = 1.0


@dataclass
class MessageStats(GenerateStats):
    """Lines by what they were made to be (``by_kind`` sums to ``lines``), and how many
    valid lines came after a greater ``ts`` (out of order; the far-late ones included)."""

    out_of_order: int = 0
    bot_channels: list[tuple[str, str, str]] = field(default_factory=list)  # (workspace, channel, bot user)


WORKSPACE_NAMES = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell", "wonka",
                   "cyberdyne", "soylent", "aperture")
CHANNEL_NAMES = ("general", "random", "eng", "support", "sales", "design", "ops", "alerts", "deploys", "incidents",
                 "marketing", "hiring", "social", "announcements", "eng-backend", "eng-frontend", "data", "security")
BOT_NAMES = ("deploybot", "alertmanager", "github", "standup-bot", "jira", "pagerduty", "ci-runner", "statuspage")


def workspace_names(n: int) -> list[str]:
    """Workspace ids, busiest first; a few are edge cases of the id rules and of the order."""
    names = [WORKSPACE_NAMES[i] if i < len(WORKSPACE_NAMES) else f"ws{i:05d}" for i in range(n)]
    specials = {5: "w", 6: "w!", 13: "café-☕", 21: "Acme", 34: "ß" * 64, 55: "team|a:b"}
    for i, name in specials.items():
        if i < n:
            names[i] = name
    return names


def channel_names(n: int) -> list[str]:
    """Channel ids of a workspace, busiest first (the same names in every workspace)."""
    names = [CHANNEL_NAMES[i] if i < len(CHANNEL_NAMES) else f"c{i:04d}" for i in range(n)]
    specials = {19: "zz", 20: "a", 23: "General", 29: "🎉-party", 37: "naïve", 41: "x" * 64, 47: "a:b|c",
                60: "🚀" * 64}
    for i, name in specials.items():
        if i < n:
            names[i] = name
    return names


def user_name(i: int) -> str:
    """User ``i`` of a workspace (ids repeat across workspaces: they are different users)."""
    specials = {3: "josé", 7: "🦊fox", 11: "U" * 64, 17: "Josè", 31: "user:1|x"}
    return specials.get(i, f"u{i:05d}")


def _zipf(rng: random.Random, n: int, s: float) -> int:
    """A 0-based rank in ``range(n)``, rank r drawn about as often as ``1 / (r + 1) ** s``.

    The inverse of the continuous power law on ``[1, n + 1)``: O(1) time and memory for
    any ``n`` (a million users per workspace costs nothing), close to the discrete law.
    """
    u = rng.random()
    if abs(s - 1.0) < 1e-9:
        x = (n + 1) ** u
    else:
        a = 1.0 - s
        x = (1.0 + u * ((n + 1) ** a - 1.0)) ** (1.0 / a)
    return min(int(x) - 1, n - 1)


@dataclass
class _Burst:
    workspace: int
    channel: int
    end: int
    share: float


class MessageLogGenerator:
    """Yields a message log line by line, in arrival order; ``stats`` counts the lines by kind."""

    def __init__(self, workspaces: int, channels: int, users: int, seed: int, *, start_ms: int = DEFAULT_START_MS,
                 rate: float = DEFAULT_RATE, chaos: MessageChaos = MessageChaos(),
                 activity: Activity = Activity()) -> None:
        if workspaces < 1 or channels < 1 or users < 1 or rate <= 0 or start_ms < 0 or activity.bots < 0:
            raise ValueError("workspaces, channels, users and rate must be positive, start_ms and bots not negative")
        self.rng = random.Random(seed)
        self.chaos = chaos
        self.activity = activity
        self.workspaces = workspace_names(workspaces)
        # Bigger workspaces have more channels and users: the r-th has 1/sqrt(r) of the biggest's.
        self._channels = [max(min(channels, 3), math.ceil(channels / math.sqrt(r + 1))) for r in range(workspaces)]
        self._users = [max(min(users, 5), math.ceil(users / math.sqrt(r + 1))) for r in range(workspaces)]
        self._channel_names = channel_names(channels)
        self._gap_ms = SECOND_MS / rate
        self.clock = start_ms
        self._time = float(start_ms)  # the clock before rounding down: at 200k events/s a gap is 5 us
        self._bots: list[tuple[int, int, str]] = []  # (workspace, channel, user)
        for b in range(activity.bots):
            ws = self.rng.randrange(min(3, workspaces))
            n = self._channels[ws]
            ch = self.rng.randrange(n // 2, n) if n > 1 else 0  # a quiet channel: the bot dominates it
            name = BOT_NAMES[b % len(BOT_NAMES)] + ("" if b < len(BOT_NAMES) else f"-{b}")
            self._bots.append((ws, ch, name))
        self._bot_cum = list(itertools.accumulate([activity.bot_share] * activity.bots))
        self._bursts: list[_Burst] = []
        self._next_burst = self._burst_gap(start_ms)
        self._queue: list[tuple[int, int, str, tuple[str, str, str, int]]] = []
        self._seq = itertools.count()
        self._max_ts: int | None = None  # the greatest ts of the valid lines written so far: the watermark
        self.stats = MessageStats(bot_channels=[(self.workspaces[w], self._channel_names[c], u)
                                                for w, c, u in self._bots])

    # -- choosing ---------------------------------------------------------------------
    def _burst_gap(self, now: int) -> int:
        return now + int(self.rng.expovariate(1.0 / self.activity.burst_every_ms)) + 1

    def _start_bursts(self) -> None:
        rng, act = self.rng, self.activity
        self._bursts = [b for b in self._bursts if b.end > self.clock]
        while self._next_burst <= self.clock:
            ws = _zipf(rng, len(self.workspaces), act.zipf_workspaces)
            self._bursts.append(_Burst(ws, rng.randrange(self._channels[ws]),
                                       self._next_burst + rng.randint(*act.burst_ms), rng.uniform(*act.burst_share)))
            self._next_burst = self._burst_gap(self._next_burst)

    def _message(self) -> tuple[str, tuple[str, str, str, int]]:
        """The next message sent at ``self.clock``: a bot's, a burst's or an ordinary one."""
        rng, act = self.rng, self.activity
        r = rng.random()
        if self._bot_cum and r < self._bot_cum[-1]:
            ws, ch, user = self._bots[next(i for i, c in enumerate(self._bot_cum) if r < c)]
            return "bot", (self.workspaces[ws], self._channel_names[ch], user, self.clock)
        r -= self._bot_cum[-1] if self._bot_cum else 0.0
        for burst in self._bursts:
            if r < burst.share:
                ws, ch = burst.workspace, burst.channel
                uid = rng.randrange(self._users[ws])  # everyone piles in: many distinct users
                return "burst", (self.workspaces[ws], self._channel_names[ch], user_name(uid), self.clock)
            r -= burst.share
        ws = _zipf(rng, len(self.workspaces), act.zipf_workspaces)
        ch = _zipf(rng, self._channels[ws], act.zipf_channels)
        uid = _zipf(rng, self._users[ws], act.zipf_users)
        return "message", (self.workspaces[ws], self._channel_names[ch], user_name(uid), self.clock)

    # -- scheduling ---------------------------------------------------------------------
    def step(self) -> None:
        """Advance event time to the next message and schedule its arrival at the log."""
        rng, chaos = self.rng, self.chaos
        self._time += rng.expovariate(1.0 / self._gap_ms)
        self.clock = int(self._time)
        self._start_bursts()
        kind, event = self._message()
        r, delay = rng.random(), 0
        if r < chaos.malformed:
            kind = "malformed"
        elif r < chaos.malformed + chaos.far_late:
            kind = "far_late"  # its ts is set when it reaches the log, where the watermark is known
        elif r < chaos.malformed + chaos.far_late + chaos.late:
            delay = rng.randint(SECOND_MS, 45 * SECOND_MS)
        elif chaos.jitter_ms:
            delay = min(int(rng.expovariate(1.0 / chaos.jitter_ms)), 2 * SECOND_MS)
        heapq.heappush(self._queue, (event[3] + delay, next(self._seq), kind, event))

    # -- rendering ----------------------------------------------------------------------
    def _render(self, kind: str, event: tuple[str, str, str, int]) -> tuple[str, bytes]:
        ws, ch, user, ts = event
        if kind == "malformed":
            reason, variants = MALFORMED[self.rng.randrange(len(MALFORMED))]
            ev = {"workspace_id": ws, "channel_id": ch, "user_id": user, "ts": ts}
            return f"malformed_{reason}", variants[self.rng.randrange(len(variants))](ev, self.rng)
        if kind == "far_late":
            if self._max_ts is None or self._max_ts - FAR_LATE_MIN_MS < 0:
                kind = "message"  # nothing to be late for yet: an ordinary message
            else:
                back = FAR_LATE_MIN_MS + self.rng.randint(0, FAR_LATE_SPREAD_MS)
                ts = max(self._max_ts - back, 0)
        if self._max_ts is not None and ts < self._max_ts:
            self.stats.out_of_order += 1
        self._max_ts = ts if self._max_ts is None else max(self._max_ts, ts)
        return kind, self._line(ws, ch, user, ts)

    def _line(self, ws: str, ch: str, user: str, ts: int) -> bytes:
        ev: dict[str, Any] = {"workspace_id": ws, "channel_id": ch, "user_id": user, "ts": ts}
        if self.rng.random() >= self.chaos.variety:
            return orjson.dumps(ev)
        r = self.rng.random()
        if r < 0.4:  # what a chat service sends along: ignored
            ev.update(type="message", text_len=self.rng.randint(1, 400), thread_ts=None)
            if self.rng.random() < 0.3:  # beyond 64 bits (orjson would not write it), ignored
                return orjson.dumps(ev)[:-1] + b',"client_msg_id":%d}' % (10**20 + self.rng.randrange(10**6))
        elif r < 0.7:
            ev = dict(reversed(ev.items()))  # field order means nothing
        else:
            return json.dumps(ev, ensure_ascii=True).encode()  # non-ASCII as \\u escapes, emoji as pairs
        return orjson.dumps(ev)

    # -- output ---------------------------------------------------------------------------
    def labelled_lines(self, events: int) -> Iterator[tuple[str, bytes]]:
        """Yield exactly ``events`` ``(kind, line)`` pairs, in arrival order."""
        written = 0
        while written < events:
            self.step()
            while self._queue and self._queue[0][0] <= self.clock and written < events:
                _, _, kind, event = heapq.heappop(self._queue)
                kind, line = self._render(kind, event)
                self.stats.count(kind)
                yield kind, line
                written += 1
        self.stats.lines = written

    def lines(self, events: int) -> Iterator[bytes]:
        """Yield exactly ``events`` lines, in arrival order."""
        return (line for _, line in self.labelled_lines(events))


# -- malformed lines: every kind docs/semantics/windows.md section 1 names ---------------------------------------

def _swap(ev: dict[str, Any], name: str, raw: bytes) -> bytes:
    """``ev`` as JSON with ``name``'s value written as ``raw`` (text orjson would not write)."""
    marker = "\x00swap\x00"
    return orjson.dumps({**ev, name: marker}).replace(orjson.dumps(marker), raw)


def _without(ev: dict[str, Any], rng: random.Random) -> bytes:
    gone = rng.choice(FIELDS)
    return orjson.dumps({k: v for k, v in ev.items() if k != gone})


def _renamed(ev: dict[str, Any], rng: random.Random) -> bytes:
    """A field under another case: names are case-sensitive, so it is missing."""
    name = rng.choice(FIELDS)
    return orjson.dumps({(k.upper() if rng.random() < 0.5 else k.title()) if k == name else k: v
                         for k, v in ev.items()})


def _missing_and_wrong(ev: dict[str, Any], rng: random.Random) -> bytes:
    """An id field absent and `ts` wrong or out of range: the absent field comes first, so missing wins."""
    gone = rng.choice(FIELDS[:3])
    rest = {k: v for k, v in ev.items() if k != gone}
    return orjson.dumps({**rest, "ts": -1 if rng.random() < 0.5 else str(ev["ts"])})


Variant = Callable[[dict[str, Any], random.Random], bytes]
MALFORMED: tuple[tuple[str, tuple[Variant, ...]], ...] = (
    ("invalid_json", (
        lambda ev, rng: orjson.dumps(ev)[:-rng.randint(1, 20)],
        lambda ev, rng: b"",  # an empty line is an event too
        lambda ev, rng: b"not json at all",
        lambda ev, rng: _swap(ev, "ts", b"NaN"),
        lambda ev, rng: _swap(ev, "ts", b"Infinity"),
        lambda ev, rng: _swap(ev, "user_id", b'"\\ud800"'),  # an unpaired surrogate escape
        lambda ev, rng: _swap(ev, "channel_id", b'"\\udd1e\\ud834"'),  # a pair the wrong way round
        lambda ev, rng: _swap(ev, "user_id", b'"\xff\xfe"'),  # not UTF-8
        lambda ev, rng: orjson.dumps(ev) + b" }",
        lambda ev, rng: orjson.dumps(ev).replace(b'"', b"'"),
        lambda ev, rng: orjson.dumps(ev)[:-1] + b",}",
    )),
    ("not_an_object", (
        lambda ev, rng: orjson.dumps([ev]),
        lambda ev, rng: orjson.dumps(ev["channel_id"]),
        lambda ev, rng: str(ev["ts"]).encode(),
        lambda ev, rng: b"null",
        lambda ev, rng: b"true",
    )),
    ("missing_field", (
        _without,
        _renamed,
        _missing_and_wrong,
        lambda ev, rng: orjson.dumps({"workspace_id": ev["workspace_id"], "channel_id": ev["channel_id"]}),
        lambda ev, rng: b"{}",
    )),
    ("wrong_type", (
        lambda ev, rng: orjson.dumps({**ev, "ts": str(ev["ts"])}),
        lambda ev, rng: orjson.dumps({**ev, "ts": float(ev["ts"])}),  # 1767225600000.0
        lambda ev, rng: _swap(ev, "ts", b"1e3"),
        lambda ev, rng: orjson.dumps({**ev, "ts": ev["ts"] + 0.5}),
        lambda ev, rng: orjson.dumps({**ev, "ts": rng.random() < 0.5}),  # a boolean
        lambda ev, rng: orjson.dumps({**ev, "ts": None}),
        lambda ev, rng: orjson.dumps({**ev, "workspace_id": 7}),
        lambda ev, rng: orjson.dumps({**ev, "channel_id": None}),
        lambda ev, rng: orjson.dumps({**ev, "user_id": [ev["user_id"]]}),
        lambda ev, rng: orjson.dumps({**ev, "channel_id": 5, "ts": -1}),  # before a later field's range
    )),
    ("out_of_range", (
        lambda ev, rng: orjson.dumps({**ev, "workspace_id": ""}),
        lambda ev, rng: orjson.dumps({**ev, "channel_id": "x" * 65}),
        lambda ev, rng: orjson.dumps({**ev, "user_id": "🎉" * 65}),
        lambda ev, rng: orjson.dumps({**ev, "ts": -1}),
        lambda ev, rng: orjson.dumps({**ev, "ts": -ev["ts"]}) if ev["ts"] else orjson.dumps({**ev, "ts": -5}),
        lambda ev, rng: _swap(ev, "ts", b"-100000000000000000000"),
        lambda ev, rng: orjson.dumps({**ev, "channel_id": "", "ts": -60_000}),
        lambda ev, rng: orjson.dumps({**ev, "workspace_id": "", "ts": "soon"}),  # before a later field's type
    )),
)


def generate_messages(events: int, seed: int, out: str | Path, *, workspaces: int = DEFAULT_WORKSPACES,
                      channels: int = DEFAULT_CHANNELS, users: int = DEFAULT_USERS, bots: int = DEFAULT_BOTS,
                      start_ms: int = DEFAULT_START_MS, rate: float = DEFAULT_RATE,
                      chaos: MessageChaos = MessageChaos(), clean: bool = False,
                      progress: Callable[[int], None] | None = None) -> MessageStats:
    """Write ``events`` lines to ``out``; ``clean`` means no chaos at all (``chaos`` is then ignored)."""
    if events < 1:
        raise ValueError("events must be positive")
    gen = MessageLogGenerator(workspaces, channels, users, seed, start_ms=start_ms, rate=rate,
                              chaos=CLEAN if clean else chaos, activity=Activity(bots=bots))
    write_lines(gen.lines(events), out, progress)
    return gen.stats
