"""Realistic game score logs (docs/semantics/boards.md), reproducible from a seed.

The score-board flow and its benchmark need input that looks like a season of match
results, not a uniform stream: a few players play all the time and most rarely (Zipf
over players, and over a few games), a match ends with one result per player sharing
its ``match_id`` and ``played_at``, points are coarse so ties are everywhere, and the
log crosses the day and ISO-week boundaries where period bugs live (by default the
2026/2027 year end: ``2026-W53`` into ``2027-W01``, with results played at 23:59:59.999
and received after midnight).

Unless ``clean``, it also carries what a real ingest sees, each at a small rate:
resubmissions, conflicting results, bad signatures, late, too old and future results,
and malformed lines of every kind section 1 names. A clean log holds only valid,
unique results (signed when a key is given): the benchmark, whose two systems must
agree, runs on one.

The file is in arrival order (``received_at`` plus a few ms on the way to the log), so
each player's events keep that order: the key is ``player_id``. Events whose
``played_at`` depends on the player's newest receipt (too old, and the exact 24 h edge)
are rendered when they reach the file, when that receipt is known.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import orjson

from rankflow.generate import GenerateStats, write_lines
from rankflow.state.signatures import sign

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
MAX_AGE_MS = DAY_MS  # docs/semantics/boards.md check 7: played more than 24 h before the newest receipt
FUTURE_MS = 60_000  # check 8: played more than 60 s after its receipt
MAX_POINTS = 10_000
MAX_TIME_MS = 253_402_300_799_999
DEFAULT_START_MS = 1_798_660_800_000  # 2026-12-30T20:00:00Z: the log crosses into 2027-W01
DEFAULT_DAYS = 5.0
MATCH_SIZES = ((2, 2), (2, 4), (4, 8), (3, 6), (8, 8), (2, 8))
GAME_NAMES = ("arena", "kart", "chess", "royale", "tetra", "golf", "quiz", "tanks")
FIELDS = ("game_id", "match_id", "player_id", "points", "played_at", "received_at")


@dataclass(frozen=True)
class ScoreChaos:
    """Per-result probabilities of what a real ingest sees beyond plain results.

    ``late`` is per match (the whole match's results arrive hours after it ended); the
    others are per result: the same player's next event is then one of these.
    """

    resubmission: float = 0.02
    conflict: float = 0.004
    bad_signature: float = 0.003  # only when a signing key is given
    too_old: float = 0.002
    in_future: float = 0.002
    malformed: float = 0.006
    identity_reused: float = 0.001  # a match_id reused after its identity was forgotten (valid)
    late_edge: float = 0.001  # played exactly 24 h before the newest receipt (valid)
    clock_skew: float = 0.002  # played up to 60 s after its receipt (valid)
    late: float = 0.01
    variety: float = 0.03  # ignored extra fields, another field order, a junk sig when unsigned

    def scaled(self, factor: float) -> ScoreChaos:
        """Every rate times ``factor`` (0 turns chaos off)."""
        return replace(self, **{f.name: getattr(self, f.name) * factor for f in fields(self)})


CLEAN = ScoreChaos().scaled(0.0)

_PER_RESULT = ("resubmission", "conflict", "bad_signature", "too_old", "in_future", "malformed",
               "identity_reused", "late_edge", "clock_skew")


@dataclass(frozen=True)
class _Result:
    """One player's result as a match server computed it."""

    game: str
    match: str
    player: str
    points: int
    played_at: int
    received_at: int


def player_names(players: int) -> list[str]:
    """Player ids, most active first; a few carry non-ASCII, ``|`` and ``:`` or all 64 characters,
    so signatures, keys and byte-wise ordering meet them too."""
    names = [f"p{i:06d}" for i in range(players)]
    specials = ("jogadoré{}", "🎮gamer{}", "clan|{}:x", "Ünïcodé_{}")
    for n, i in enumerate(range(7, players, 53)):
        names[i] = specials[n % len(specials)].format(i)
    if players > 3:
        names[3] = "p" * (64 - len(str(3))) + "3"
    return names


def _zipf_cum(n: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (r**s) for r in range(1, n + 1)))


class ScoreLogGenerator:
    """Yields a score log line by line; ``stats`` counts the lines by what they were made to be."""

    def __init__(self, players: int, games: int, events: int, seed: int, *, start_ms: int = DEFAULT_START_MS,
                 days: float = DEFAULT_DAYS, key: bytes | None = None, chaos: ScoreChaos = ScoreChaos(),
                 zipf_s: float = 1.1) -> None:
        if players < 1 or games < 1 or events < 1 or days <= 0:
            raise ValueError("players, games, events and days must be positive")
        self.rng = random.Random(seed)
        self.key = key
        self.chaos = chaos if key is not None else replace(chaos, bad_signature=0.0)
        self.players = player_names(players)
        self._player_cum = _zipf_cum(players, zipf_s)
        self.games = [GAME_NAMES[i] if i < len(GAME_NAMES) else f"game_{i}" for i in range(games)]
        self._game_cum = _zipf_cum(games, 1.3)
        self._sizes = [MATCH_SIZES[self.rng.randrange(len(MATCH_SIZES))] for _ in range(games)]
        self._scales = [self.rng.choice((1, 2, 3, 5)) for _ in range(games)]
        weights = [b - a for a, b in zip([0.0, *self._game_cum], self._game_cum)]
        mean_size = sum(w * min((lo + hi) / 2, players) for w, (lo, hi) in zip(weights, self._sizes)) / sum(weights)
        self._mean_gap_ms = days * DAY_MS * mean_size / events
        self._per_result = list(itertools.accumulate(getattr(self.chaos, k) for k in _PER_RESULT))
        self.clock = start_ms
        self.matches = 0
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self._newest: dict[str, int] = {}  # player -> greatest received_at that passed checks 1 to 6
        self._first: dict[str, _Result] = {}  # player -> their first plain result (for identity reuse)
        self.stats = GenerateStats()

    # -- choosing -----------------------------------------------------------------
    def _pick(self, cum: list[float]) -> int:
        return bisect.bisect_left(cum, self.rng.random() * cum[-1])

    def _match_players(self, game: int) -> list[str]:
        lo, hi = self._sizes[game]
        size = min(self.rng.randint(lo, hi), len(self.players))
        chosen: dict[int, None] = {}
        while len(chosen) < size:
            chosen[self._pick(self._player_cum)] = None
        return [self.players[i] for i in chosen]

    def _points(self, place: int, size: int, game: int) -> int:
        """Coarse points by placing: multiples of 10, so equal scores are common."""
        r = self.rng.random()
        if r < 0.03:
            return 0  # a forfeit or a disconnect
        if r < 0.0305:
            return MAX_POINTS  # a perfect game: the top of the range
        units = (size - place) * self._scales[game] + self.rng.randint(-1, 2)
        return 10 * max(units, 0)

    def _delay(self) -> int:
        """Match server to ingest: milliseconds, sometimes seconds."""
        return 5 + min(int(self.rng.expovariate(1 / 600)), 30_000)

    # -- scheduling -----------------------------------------------------------------
    def _push(self, received_at: int, kind: str, payload: Any) -> None:
        arrival = received_at + self.rng.randint(0, 20)  # on its way from the ingest endpoint to the log
        heapq.heappush(self._queue, (arrival, next(self._seq), kind, payload))

    def _match(self, played_at: int, kind: str, sent_at: int | None = None, min_delay: int = 0) -> None:
        """One result per player of a match ended at ``played_at``, sent at ``sent_at`` (when the
        match ended, unless its server was offline)."""
        game = self._pick(self._game_cum)
        self.matches += 1
        match = f"m{self.matches:08d}"
        sent = played_at if sent_at is None else sent_at
        players = self._match_players(game)
        for place, player in enumerate(players):
            received = sent + max(self._delay(), min_delay)
            result = _Result(self.games[game], match, player, self._points(place, len(players), game),
                             played_at, received)
            self._push(received, kind, result)
            if kind == "result":
                self._first.setdefault(player, result)
                self._chaos_after(result)

    def _chaos_after(self, res: _Result) -> None:
        """At most one chaos event for this result's player, decided by one draw."""
        n = bisect.bisect_right(self._per_result, self.rng.random())
        if n >= len(_PER_RESULT):
            return
        kind, rng = _PER_RESULT[n], self.rng
        later = res.received_at + rng.randint(1_000, 600_000)
        if kind == "resubmission":
            self._push(later, kind, replace(res, received_at=later))
        elif kind == "conflict":
            if rng.random() < 0.75:
                more = res.points + 10 * rng.randint(1, 5)
                other = replace(res, points=more if more <= MAX_POINTS else res.points - 10, received_at=later)
            else:
                other = replace(res, played_at=res.played_at - rng.randint(1, 60_000), received_at=later)
            self._push(later, kind, other)
        elif kind == "identity_reused":
            old = self._first.get(res.player)
            if old is not None and old.played_at < res.played_at - MAX_AGE_MS - HOUR_MS:
                reused = replace(old, played_at=later - self._delay(), received_at=later)
                self._first[res.player] = reused  # so it is not reused again while remembered
                self._push(later, kind, reused)
        elif kind == "clock_skew":
            ahead = FUTURE_MS if rng.random() < 0.3 else rng.randint(1, FUTURE_MS)
            self._push(later, kind, self._fresh(res, played_at=later + ahead, received_at=later))
        else:  # rendered when it reaches the file: bad_signature, too_old, in_future, malformed, late_edge
            self._push(later, kind, self._fresh(res, played_at=later - self._delay(), received_at=later))

    def _fresh(self, res: _Result, played_at: int, received_at: int) -> _Result:
        """A result of a match of its own for ``res``'s player."""
        self.matches += 1
        return _Result(res.game, f"m{self.matches:08d}", res.player, res.points, played_at, received_at)

    def step(self) -> None:
        """Advance the clock to the next match end, busier in the evening (UTC)."""
        hour = (self.clock % DAY_MS) / HOUR_MS
        rate = 1.0 + 0.5 * math.sin(2 * math.pi * (hour - 14) / 24)
        now = self.clock + int(self.rng.expovariate(rate / self._mean_gap_ms)) + 1
        midnight = (self.clock // DAY_MS + 1) * DAY_MS
        if now >= midnight:  # the last millisecond of the day, received after midnight
            self._match(midnight - 1, "midnight_result", min_delay=1)
        self.clock = now
        if self.rng.random() < self.chaos.late:
            self._match(now - self.rng.randint(HOUR_MS, 23 * HOUR_MS), "late_result", sent_at=now)
        else:
            self._match(now, "result")

    # -- rendering ----------------------------------------------------------------
    def _render(self, kind: str, res: _Result) -> bytes:
        """The line for ``res``; the player's newest receipt moves when the line passes checks 1 to 6."""
        newest = max(self._newest.get(res.player, 0), res.received_at)
        if kind == "too_old":
            res = replace(res, played_at=max(0, newest - MAX_AGE_MS - self._too_old_by()))
        elif kind == "late_edge":
            res = replace(res, played_at=newest - MAX_AGE_MS)
        elif kind == "in_future":
            ahead = FUTURE_MS + 1 if self.rng.random() < 0.3 else self.rng.randint(FUTURE_MS + 1, 6 * HOUR_MS)
            res = replace(res, played_at=res.received_at + ahead)
        if kind == "malformed":
            reason, line = self._malformed(res)
            self.stats.count(f"malformed_{reason}")
            return line
        if kind == "bad_signature":
            self.stats.count(kind)
            return self._bad_signature(res)
        self._newest[res.player] = newest
        self.stats.count(kind)
        # unsigned, a resubmission may carry another (ignored) sig: still a duplicate
        junk_sig = kind == "resubmission" and self.key is None and self.rng.random() < 0.3
        return self._line(res, variety=self.rng.random() < self.chaos.variety, junk_sig=junk_sig)

    def _too_old_by(self) -> int:
        return 1 if self.rng.random() < 0.3 else self.rng.randint(2, 20 * HOUR_MS)

    def _event(self, res: _Result) -> dict[str, Any]:
        ev: dict[str, Any] = {"game_id": res.game, "match_id": res.match, "player_id": res.player,
                              "points": res.points, "played_at": res.played_at, "received_at": res.received_at}
        if self.key is not None:
            ev["sig"] = sign(self.key, res.game, res.match, res.player, res.points, res.played_at)
        return ev

    def _line(self, res: _Result, variety: bool = False, junk_sig: bool = False) -> bytes:
        ev = self._event(res)
        if junk_sig:
            ev["sig"] = f"{self.rng.getrandbits(256):064x}"
        if variety:
            r = self.rng.random()
            if r < 0.4:
                ev["client"] = self.rng.choice(["ios", "android", "pc", "console"])  # ignored
            elif r < 0.7:
                ev = dict(reversed(ev.items()))  # field order means nothing
            elif self.key is None:
                ev["sig"] = f"{self.rng.getrandbits(256):064x}"  # ignored without a key
            else:
                ev["region"] = None  # ignored, even as null
        return orjson.dumps(ev)

    def _bad_signature(self, res: _Result) -> bytes:
        """Signed for other points (what a tampered result looks like), or a sig that is not one."""
        assert self.key is not None
        ev = self._event(res)
        r = self.rng.random()
        if r < 0.6:
            other = res.points // 10 if res.points >= 10 else res.points + 10
            ev["sig"] = sign(self.key, res.game, res.match, res.player, other, res.played_at)
        elif r < 0.75:
            del ev["sig"]
        elif r < 0.9:
            ev["sig"] = ev["sig"].upper()
        else:
            ev["sig"] = 7
        return orjson.dumps(ev)

    def _malformed(self, res: _Result) -> tuple[str, bytes]:
        reason, variants = MALFORMED[self.rng.randrange(len(MALFORMED))]
        return reason, variants[self.rng.randrange(len(variants))](self._event(res), self.rng)

    # -- output -----------------------------------------------------------------------
    def lines(self, events: int) -> Iterator[bytes]:
        """Yield exactly ``events`` lines, in arrival order."""
        written = 0
        while written < events:
            self.step()
            while self._queue and self._queue[0][0] <= self.clock and written < events:
                _, _, kind, res = heapq.heappop(self._queue)
                yield self._render(kind, res)
                written += 1
        self.stats.lines = written


def _swap(ev: dict[str, Any], field: str, raw: bytes) -> bytes:
    """``ev`` as JSON with ``field``'s value written as ``raw`` (text orjson would not write)."""
    marker = "\x00swap\x00"
    return orjson.dumps({**ev, field: marker}).replace(orjson.dumps(marker), raw)


def _without(ev: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    gone = rng.choice(FIELDS)
    return {k: v for k, v in ev.items() if k != gone}


def _missing_and_wrong(ev: dict[str, Any], rng: random.Random) -> bytes:
    """One field absent, another of the wrong type and a third out of range: missing wins."""
    gone = rng.choice(("game_id", "match_id", "player_id", "received_at"))
    rest = {k: v for k, v in ev.items() if k != gone}
    return orjson.dumps({**rest, "points": str(ev["points"]), "played_at": -1})


Variant = Callable[[dict[str, Any], random.Random], bytes]
MALFORMED: tuple[tuple[str, tuple[Variant, ...]], ...] = (
    ("invalid_json", (
        lambda ev, rng: orjson.dumps(ev)[:-rng.randint(1, 20)],
        lambda ev, rng: b"not json at all",
        lambda ev, rng: b"",
        lambda ev, rng: _swap(ev, "points", b"NaN"),
        lambda ev, rng: _swap(ev, "player_id", b'"\\ud83c"'),  # an unpaired surrogate escape
        lambda ev, rng: _swap(ev, "player_id", b'"\xff\xfe"'),  # not UTF-8
        lambda ev, rng: orjson.dumps(ev) + b" }",
        lambda ev, rng: orjson.dumps(ev).replace(b'"', b"'"),
    )),
    ("not_an_object", (
        lambda ev, rng: orjson.dumps([ev]),
        lambda ev, rng: orjson.dumps(ev["player_id"]),
        lambda ev, rng: b"42",
        lambda ev, rng: b"null",
    )),
    ("missing_field", (
        lambda ev, rng: orjson.dumps(_without(ev, rng)),
        lambda ev, rng: _missing_and_wrong(ev, rng),
        lambda ev, rng: orjson.dumps({"game_id": ev["game_id"], "player_id": ev["player_id"],
                                      "points": ev["points"]}),
    )),
    ("wrong_type", (
        lambda ev, rng: orjson.dumps({**ev, "points": str(ev["points"])}),
        lambda ev, rng: orjson.dumps({**ev, "points": float(ev["points"])}),
        lambda ev, rng: orjson.dumps({**ev, "points": True}),
        lambda ev, rng: _swap(ev, "points", b"1e3"),
        lambda ev, rng: orjson.dumps({**ev, "played_at": ev["played_at"] + 0.5}),
        lambda ev, rng: orjson.dumps({**ev, "game_id": None}),
        lambda ev, rng: orjson.dumps({**ev, "player_id": 7}),
        lambda ev, rng: orjson.dumps({**ev, "received_at": str(ev["received_at"])}),
        lambda ev, rng: orjson.dumps({**ev, "match_id": ["m"], "points": -1}),  # wrong type beats out of range
    )),
    ("out_of_range", (
        lambda ev, rng: orjson.dumps({**ev, "points": MAX_POINTS + 10}),
        lambda ev, rng: orjson.dumps({**ev, "points": -10}),
        lambda ev, rng: orjson.dumps({**ev, "game_id": ""}),
        lambda ev, rng: orjson.dumps({**ev, "match_id": "m" * 65}),
        lambda ev, rng: orjson.dumps({**ev, "player_id": "é" * 65}),
        lambda ev, rng: orjson.dumps({**ev, "played_at": MAX_TIME_MS + 1}),
        lambda ev, rng: orjson.dumps({**ev, "received_at": -1}),
        lambda ev, rng: _swap(ev, "points", b"18446744073709551616"),
    )),
)


def generate_scores(players: int, games: int, events: int, seed: int, out: str | Path, *,
                    start_ms: int = DEFAULT_START_MS, days: float = DEFAULT_DAYS, key: bytes | None = None,
                    chaos: ScoreChaos = ScoreChaos(), clean: bool = False,
                    progress: Callable[[int], None] | None = None) -> GenerateStats:
    """Write ``events`` lines to ``out``; ``clean`` means no chaos at all (``chaos`` is then ignored)."""
    gen = ScoreLogGenerator(players, games, events, seed, start_ms=start_ms, days=days, key=key,
                            chaos=CLEAN if clean else chaos)
    write_lines(gen.lines(events), out, progress)
    return gen.stats
