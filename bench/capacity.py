"""Capacity at a latency: the highest request rate one server sustains with p99 under a bound.

What a user buys is requests/s at a latency, not a server's speed at a rate it is far
from. The load generator is ``oha`` (a native one: a Python generator cannot offer
20,000 requests/s on two cores), run open-loop: ``-q RATE --latency-correction`` sends at
a fixed rate over a fixed set of keep-alive connections and measures each request from when
it was due, so a server that falls behind is charged for the queue it causes. This module
holds the logic of ``scripts/bench_capacity.py`` that is not processes:

* :func:`oha_command` and :func:`parse_oha`: one step's command and what its JSON says;
* :func:`search_capacity`: double the rate while a step passes, then bisect (geometric)
  between the last pass and the first failure until they are close;
* :func:`per_request_us` and :func:`median`: CPU per request, and the medians of reps.

A step passes when its p99 is at most the bound, nothing failed (a status other than 200,
a connection error), and the server answered at least :data:`KEEP_UP` of the requests
offered: an open-loop client whose server falls behind sends fewer than it was asked to.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KEEP_UP = 0.95
"""A step passes only if this share of the offered rate was answered."""

DEADLINE_ERRORS = ("aborted due to deadline",)
"""oha's name for the requests in flight when a step's time is up: not failures."""


@dataclass
class Step:
    """One load step: offered ``rate``, what was answered, and how fast."""

    rate: float
    answered: int = 0  # 200s
    seconds: float = 0.0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan
    failed: int = 0  # statuses other than 200, connection errors
    cut: int = 0  # in flight when the step's time was up: neither answered nor failed
    statuses: dict[str, int] = field(default_factory=dict)
    server_cpu_s: float = math.nan
    """The server's CPU seconds over the step (filled in by the caller)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """What the caller adds: other processes' CPU, the cache's hits..."""

    @property
    def achieved(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    def passes(self, p99_limit_ms: float) -> bool:
        return (self.failed == 0 and self.answered > 0 and self.p99_ms <= p99_limit_ms
                and self.achieved >= KEEP_UP * self.rate)

    @property
    def server_us_per_request(self) -> float:
        return per_request_us(self.server_cpu_s, self.answered)


def oha_command(oha: str, url: str, rate: float, seconds: float, connections: int = 32) -> list[str]:
    """``oha`` open-loop at ``rate`` requests/s over ``connections`` keep-alive connections
    for ``seconds``, JSON on stdout.

    >>> oha_command("oha", "http://h/x", 2000, 5)[1:7]
    ['-z', '5s', '-c', '32', '-q', '2000']
    """
    return [oha, "-z", f"{seconds:g}s", "-c", str(connections), "-q", f"{rate:g}", "--latency-correction",
            "--no-tui", "--output-format", "json", url]


def parse_oha(text: str, rate: float) -> Step:
    """A :class:`Step` from oha's JSON report (``--output-format json``) of a run at ``rate``.

    Requests cut short by the end of the step (oha's "aborted due to deadline") are neither
    answers nor failures. Latencies are in seconds in oha's report, in ms here.
    """
    import json

    data = json.loads(text)
    summary = data.get("summary", {})
    statuses = {str(k): int(v) for k, v in (data.get("statusCodeDistribution") or {}).items()}
    errors: Mapping[str, int] = data.get("errorDistribution") or {}
    failed = sum(n for status, n in statuses.items() if status != "200")
    cut = sum(int(n) for what, n in errors.items() if any(d in what for d in DEADLINE_ERRORS))
    failed += sum(int(n) for n in errors.values()) - cut
    pct = data.get("latencyPercentiles") or {}

    def ms(value: Any) -> float:
        return math.nan if value is None else float(value) * 1000

    return Step(rate=rate, answered=statuses.get("200", 0), seconds=float(summary.get("total") or 0.0),
                p50_ms=ms(pct.get("p50")), p99_ms=ms(pct.get("p99")), max_ms=ms(summary.get("slowest")),
                failed=failed, cut=cut, statuses=statuses)


@dataclass
class Search:
    """The steps of one capacity search and what they found."""

    p99_limit_ms: float
    steps: list[Step] = field(default_factory=list)

    @property
    def best(self) -> Step | None:
        """The passing step at the highest offered rate, or None if none passed."""
        passing = [s for s in self.steps if s.passes(self.p99_limit_ms)]
        return max(passing, key=lambda s: s.rate, default=None)

    @property
    def capacity(self) -> float:
        """Requests/s answered at the best passing step (0 if none passed)."""
        best = self.best
        return 0.0 if best is None else best.achieved


def search_capacity(measure: Callable[[float], Step], start: float, p99_limit_ms: float, *,
                    max_steps: int = 8, close: float = 1.1, floor: float = 100.0,
                    ceiling: float = 200_000.0, confirm: bool = False) -> Search:
    """Find the highest rate whose step passes (:meth:`Step.passes`): from ``start``, double
    while steps pass (up to ``ceiling``), halve while they fail (down to ``floor``), then try
    the geometric middle of the highest pass and the lowest failure above it until their
    ratio is at most ``close`` or ``max_steps`` steps were run. Rates are whole requests/s.

    Noise can make a higher rate pass after a lower one failed: the answer is the highest
    rate that passed, and the bracket is always (that rate, the lowest failure above it). With
    ``confirm`` a failing rate is measured once more (within ``max_steps``) and fails only if
    both steps do: on a machine shared with other work, one stall of another process can fail
    a step.
    """
    search = Search(p99_limit_ms)
    rate = float(round(start))
    while len(search.steps) < max_steps:
        step = measure(rate)
        search.steps.append(step)
        if confirm and not step.passes(p99_limit_ms) and len(search.steps) < max_steps:
            search.steps.append(measure(rate))
        best = search.best
        low = 0.0 if best is None else best.rate
        fails_above = [s.rate for s in search.steps if s.rate > low and not s.passes(p99_limit_ms)]
        high = min(fails_above, default=None)
        if high is None:  # nothing failed above the best yet: go up
            if rate >= ceiling:
                break
            rate = min(ceiling, rate * 2)
        elif best is None:  # nothing passed yet: go down
            if rate <= floor:
                break
            rate = max(floor, rate / 2)
        else:
            if high / low <= close:
                break
            rate = math.sqrt(low * high)
        rate = float(round(rate))
        if any(s.rate == rate for s in search.steps):
            break  # measured already: the bracket cannot narrow
    return search


def per_request_us(cpu_s: float, requests: int) -> float:
    """CPU microseconds per request; NaN without requests."""
    return cpu_s * 1e6 / requests if requests > 0 else math.nan


def median(values: Iterable[float]) -> float:
    """The median of the values that are numbers (NaN ones left out); NaN if none is."""
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else math.nan


def player_regex(players: int, digits: int) -> str:
    """A regex of player ids ``p{i:0{digits}d}`` for i in [0, players) when players is a
    multiple of a power of ten times a digit (50000: ``00[0-4][0-9]{4}``), else the ids up to
    the largest such count below it.

    >>> player_regex(50_000, 7)
    '00[0-4][0-9]{4}'
    >>> player_regex(200_000, 7)
    '0[0-1][0-9]{5}'
    """
    width = len(str(players)) - 1  # digits that range freely
    lead = players // 10 ** width  # the leading digit's count
    fixed = "0" * (digits - width - 1)
    return f"{fixed}[0-{lead - 1}][0-9]{{{width}}}"


# -- the closed-loop saturation step: wrk ---------------------------------------------------------

_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


@dataclass
class Saturation:
    """One closed-loop wrk run: ``connections`` each send a request as soon as the previous
    answer came, so the rate is what the server (and the machine) sustain, and the latencies
    are those of that rate. Closed-loop latencies omit the queue an open-loop client would
    have met (coordinated omission): the open-loop search (:func:`search_capacity`) is the
    capacity figure; this is the most one connection count gets, beside its p99."""

    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    not_2xx: int = 0
    socket_errors: int = 0


def wrk_command(wrk: str, url: str, seconds: float, connections: int = 32, threads: int = 1) -> list[str]:
    """``wrk`` with ``connections`` keep-alive connections on ``threads`` threads for ``seconds``,
    with its latency distribution.

    >>> wrk_command("wrk", "http://h/x", 5, 32)
    ['wrk', '-t1', '-c32', '-d5s', '--latency', 'http://h/x']
    """
    return [wrk, f"-t{threads}", f"-c{connections}", f"-d{seconds:g}s", "--latency", url]


def parse_wrk(text: str) -> Saturation:
    """The figures of wrk's text report (``--latency``); ValueError if it has none.

    >>> parse_wrk("  Latency Distribution\\n     50%  1.10ms\\n     99%  4.20ms\\n"
    ...           "  105000 requests in 5.00s, 1.00GB read\\nRequests/sec:  21000.50\\n")
    Saturation(rps=21000.5, p50_ms=1.1, p99_ms=4.2, requests=105000, not_2xx=0, socket_errors=0)
    """
    import re

    def latency(q: str) -> float:
        m = re.search(rf"^\s*{q}%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.MULTILINE)
        if m is None:
            raise ValueError(f"wrk's report has no {q}% latency: {text[-300:]!r}")
        return round(float(m.group(1)) * _WRK_UNITS[m.group(2)], 6)

    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.MULTILINE)
    total = re.search(r"^\s*(\d+) requests in ", text, re.MULTILINE)
    if rps is None or total is None:
        raise ValueError(f"wrk's report has no rate: {text[-300:]!r}")
    not_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return Saturation(rps=float(rps.group(1)), p50_ms=latency("50"), p99_ms=latency("99"),
                      requests=int(total.group(1)), not_2xx=int(not_2xx.group(1)) if not_2xx else 0,
                      socket_errors=sum(int(g) for g in errors.groups()) if errors else 0)
