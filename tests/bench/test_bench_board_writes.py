"""``scripts/bench_board_writes.py`` stays on the real code: a tiny run of every variant ends
with today's boards equal to the stream's model (``--check``), and a mistake on its command
line is one line, exit 2, before any Redis starts. The prototype it replaced went stale once
layout 3 landed; this is what notices the next time. No figure is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_board_writes.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.redis  # the script starts its own Redis servers (LocalRedis)
def test_a_tiny_run_of_every_variant_checks_against_the_model() -> None:
    done = run("--players", "1500,200", "--reps", "2", "--snapshots", "4", "--entries", "120", "--check")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith(("today", "zadd", "stream"))] == [
        "today", "zadd", "stream"]
    assert "check: 8 boards of today" in lines[-1] and ": 0 differ, 0 missing" in lines[-1], lines[-1]


@pytest.mark.parametrize("args", [("--players", "0"), ("--reps", "x"), ("--variants", "layout2"),
                                  ("--only", "season"), ("--bogus",)])
def test_a_mistake_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("bench_board_writes: ")
