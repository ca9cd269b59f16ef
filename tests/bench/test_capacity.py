"""``bench.capacity``: the rate search and the reading of oha's report (no server, no speed asserted)."""

from __future__ import annotations

import json
import math

import pytest

from rankflow.bench.capacity import (KEEP_UP, Step, median, oha_command, parse_oha, per_request_us, player_regex,
                                     search_capacity)


def server_of(capacity: float, p99_below: float = 1.0, p99_above: float = 50.0):
    """A fake server: p99 low up to ``capacity`` requests/s, high beyond, every request answered."""
    asked: list[float] = []

    def measure(rate: float) -> Step:
        asked.append(rate)
        return Step(rate=rate, answered=int(rate * 5), seconds=5.0,
                    p99_ms=p99_below if rate <= capacity else p99_above)

    return measure, asked


@pytest.mark.parametrize("capacity", [150.0, 900.0, 4_000.0, 23_456.0, 70_000.0])
def test_the_search_brackets_the_capacity(capacity):
    measure, asked = server_of(capacity)
    search = search_capacity(measure, 2000, 5.0, max_steps=20, close=1.1)
    best = search.best
    assert best is not None and best.rate <= capacity
    assert search.capacity == best.achieved
    failed_above = [s.rate for s in search.steps if s.rate > capacity]
    assert failed_above and min(failed_above) / best.rate <= 1.1 + 1e-9  # bracketed to within 10%
    assert len(set(asked)) == len(asked)  # no rate measured twice


def test_the_search_stops_at_its_step_budget():
    measure, asked = server_of(23_456.0)
    search = search_capacity(measure, 2000, 5.0, max_steps=5)
    assert len(asked) == 5
    assert search.best is not None and search.best.rate == 16_000  # 2k, 4k, 8k, 16k pass; 32k fails


def test_nothing_passes_below_the_floor():
    measure, asked = server_of(50.0)
    search = search_capacity(measure, 400, 5.0, floor=100)
    assert search.best is None and search.capacity == 0.0
    assert asked == [400, 200, 100]


def test_the_ceiling_ends_a_search_that_always_passes():
    measure, asked = server_of(math.inf)
    search = search_capacity(measure, 1000, 5.0, ceiling=8000, max_steps=20)
    assert asked == [1000, 2000, 4000, 8000] and search.best is not None and search.best.rate == 8000


def test_a_step_fails_on_errors_or_on_falling_behind():
    assert Step(rate=1000, answered=5000, seconds=5, p99_ms=4.9).passes(5.0)
    assert not Step(rate=1000, answered=5000, seconds=5, p99_ms=5.1).passes(5.0)
    assert not Step(rate=1000, answered=5000, seconds=5, p99_ms=1.0, failed=1).passes(5.0)
    behind = Step(rate=1000, answered=int(5000 * KEEP_UP) - 1, seconds=5, p99_ms=1.0)
    assert not behind.passes(5.0)  # an open-loop client whose server keeps it waiting sends less
    assert not Step(rate=1000, p99_ms=1.0).passes(5.0)  # nothing answered


def test_a_noisy_server_still_gets_a_bracket():
    """Noise: one step may fail below a rate that passes. The answer is the highest rate that
    passed, and the bracket above it is the lowest failure above it."""
    def measure(rate: float) -> Step:
        noisy = rate == 2828  # fails once, though 3000 would pass
        return Step(rate=rate, answered=int(rate * 5), seconds=5, p99_ms=9.0 if noisy or rate > 3000 else 1.0)

    search = search_capacity(measure, 2000, 5.0, max_steps=10, close=1.1)
    assert [s.rate for s in search.steps] == [2000, 4000, 2828, 2378, 2593]
    assert search.best is not None and search.best.rate == 2593  # within 10% of the failure at 2828


def test_a_confirmed_failure_takes_two_failing_steps():
    """With ``confirm`` a failing rate is measured again; one passing step of the two is a pass."""
    calls: dict[float, int] = {}

    def measure(rate: float) -> Step:
        calls[rate] = calls.get(rate, 0) + 1
        stalled = rate == 4000 and calls[rate] == 1  # another process's stall, once
        return Step(rate=rate, answered=int(rate * 5), seconds=5,
                    p99_ms=9.0 if stalled or rate > 5000 else 1.0)

    search = search_capacity(measure, 2000, 5.0, max_steps=12, close=1.1, confirm=True)
    assert [s.rate for s in search.steps][:5] == [2000, 4000, 4000, 8000, 8000]
    assert search.best is not None and 4000 <= search.best.rate <= 5000
    plain = search_capacity(lambda rate: Step(rate=rate, answered=int(rate * 5), seconds=5, p99_ms=1.0), 2000, 5.0,
                            max_steps=3, confirm=True)
    assert [s.rate for s in plain.steps] == [2000, 4000, 8000]  # passes are never measured twice


def test_oha_report_is_read():
    report = {"summary": {"successRate": 0.99, "total": 5.0012, "slowest": 0.0213, "fastest": 0.0001,
                          "average": 0.0008, "requestsPerSec": 1999.5},
              "latencyPercentiles": {"p10": 0.0003, "p50": 0.0007, "p99": 0.0042, "p99.9": 0.011},
              "statusCodeDistribution": {"200": 9990, "503": 3},
              "errorDistribution": {"aborted due to deadline": 12, "connection closed before message completed": 2}}
    step = parse_oha(json.dumps(report), 2000)
    assert step.answered == 9990 and step.failed == 3 + 2 and step.cut == 12  # the deadline's cut: neither
    assert step.p50_ms == pytest.approx(0.7) and step.p99_ms == pytest.approx(4.2) and step.max_ms == pytest.approx(21.3)
    assert step.seconds == pytest.approx(5.0012) and step.statuses == {"200": 9990, "503": 3}
    assert math.isnan(parse_oha(json.dumps({"summary": {}}), 100).p99_ms)


def test_the_oha_command_is_open_loop():
    cmd = oha_command("/bin/oha", "http://127.0.0.1:1/x?k=1", 2500.0, 3.0, connections=8)
    assert cmd[0] == "/bin/oha" and cmd[-1] == "http://127.0.0.1:1/x?k=1"
    assert "--latency-correction" in cmd and cmd[cmd.index("-q") + 1] == "2500" and cmd[cmd.index("-c") + 1] == "8"
    assert cmd[cmd.index("--output-format") + 1] == "json" and cmd[cmd.index("-z") + 1] == "3s"


def test_per_request_and_medians():
    assert per_request_us(0.5, 10_000) == pytest.approx(50.0)
    assert math.isnan(per_request_us(0.5, 0))
    assert median([3.0, math.nan, 1.0, 2.0]) == 2.0 and math.isnan(median([math.nan]))


@pytest.mark.parametrize("players, digits", [(50_000, 7), (200_000, 7), (55_000, 7), (1_000, 7), (9, 7)])
def test_the_player_regex_names_only_players_on_the_board(players, digits):
    import re

    pattern = re.compile("p" + player_regex(players, digits))
    names = [f"p{i:0{digits}d}" for i in range(players)]
    matched = [n for n in names if pattern.fullmatch(n)]
    assert matched == names[:len(matched)] and len(matched) >= players // 2
    assert not pattern.fullmatch(f"p{players:0{digits}d}")


WRK_REPORT = """Running 5s test @ http://127.0.0.1:8080/rankings?k=100
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.52ms  611.20us  12.03ms   80.11%
    Req/Sec    21.10k     1.20k   23.00k    70.00%
  Latency Distribution
     50%    1.41ms
     75%    1.80ms
     90%    2.20ms
     99%  850.00us
  104997 requests in 5.00s, 1.35GB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  20999.40
Transfer/sec:    276.51MB
"""


def test_wrk_report_is_read():
    from rankflow.bench.capacity import parse_wrk, wrk_command

    sat = parse_wrk(WRK_REPORT)
    assert (sat.rps, sat.p50_ms, sat.p99_ms, sat.requests) == (20999.4, 1.41, 0.85, 104997)
    assert (sat.not_2xx, sat.socket_errors) == (7, 3)
    assert wrk_command("wrk", "http://h/", 2.5, 16) == ["wrk", "-t1", "-c16", "-d2.5s", "--latency", "http://h/"]
    with pytest.raises(ValueError, match="no rate"):
        parse_wrk("Running 5s test @ http://h/\n  Latency Distribution\n     50%  1.00ms\n     99%  2.00ms\n")
