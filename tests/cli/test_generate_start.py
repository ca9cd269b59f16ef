"""``rankflow generate --start``: every kind's log starts where it says, ``now`` at the present; without
it a seed's log is the same as ever (a fixed date), so reproducible tests stay reproducible."""

from __future__ import annotations

import subprocess
import sys
import time

import orjson
import pytest

from rankflow.generate import T0_MS
from rankflow.generate_scores import DEFAULT_START_MS


def generate(tmp_path, *args: str) -> list[dict]:
    out = tmp_path / "log.jsonl"
    subprocess.run([sys.executable, "-m", "rankflow.cli", "generate", "--events", "200", "--seed", "3",
                    "--out", str(out), *args], check=True, capture_output=True)
    events = []
    for line in out.read_bytes().splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


# the scores spread their first results over the --days window (0.01 day: 864 s), the others start at once
SLACK_MS = {"playback": 60_000, "scores": 864_000 + 60_000, "messages": 60_000}
KINDS = {"playback": (["--users", "20", "--songs", "5"], "ts"),
         "scores": (["--kind", "scores", "--players", "20", "--clean", "--days", "0.01"], "received_at"),
         "messages": (["--kind", "messages", "--clean"], "ts")}


@pytest.mark.parametrize("kind", KINDS)
def test_now_starts_the_log_at_the_present(tmp_path, kind):
    args, field = KINDS[kind]
    before = int(time.time() * 1000)
    times = [e[field] for e in generate(tmp_path, *args, "--start", "now") if isinstance(e.get(field), int)]
    assert times and before - 60_000 <= min(times) and min(times) <= int(time.time() * 1000) + SLACK_MS[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_an_iso_start_and_the_fixed_default(tmp_path, kind):
    args, field = KINDS[kind]
    default = {"playback": T0_MS, "scores": DEFAULT_START_MS, "messages": T0_MS}[kind]
    first = [e[field] for e in generate(tmp_path, *args) if isinstance(e.get(field), int)]
    assert default <= min(first) < default + 86_400_000
    moved = [e[field] for e in generate(tmp_path, *args, "--start", "2030-06-01T12:00Z")
             if isinstance(e.get(field), int)]
    at = 1_906_545_600_000  # 2030-06-01T12:00Z
    assert at <= min(moved) < at + 86_400_000


def test_a_bad_start_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rankflow.cli", "generate", "--events", "5", "--users", "2",
                           "--songs", "2", "--start", "yesterday", "--out", str(tmp_path / "x.jsonl")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "now or an ISO 8601 time" in done.stderr
